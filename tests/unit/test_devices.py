"""The ``device`` and ``precision`` keys: spelled right in the config, possible on this
machine when the backbone loads (fedtext.devices), each failure one line; the fp32 path
is the code the golden records were made with (autocast off)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedtext.config import ConfigError
from fedtext.devices import CPU_FP32, Precision
from fedtext.registry import make_config


def test_the_device_keys_fail_in_one_line_where_the_machine_cannot(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="device must be auto, cpu, cuda or cuda:N"):
        make_config("fedprompt", device="gpu")
    with pytest.raises(ConfigError, match="unknown precision 'int8'; choose one of: fp32, bf16, fp16"):
        make_config("fedprompt", precision="int8")
    with pytest.raises(ConfigError, match="precision=fp16 needs a CUDA GPU"):
        Precision.of("cpu", "fp16")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"device=cuda:1: torch sees no CUDA GPU"):
            Precision.of("cuda:1", "fp32")
        assert Precision.of("auto", "fp32").device.type == "cpu"


def test_fp32_computes_without_autocast_and_bf16_with_it() -> None:
    x = torch.randn(4, 8)
    w = torch.randn(8, 8)
    with CPU_FP32.autocast():
        assert (x @ w).dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
    with Precision(torch.device("cpu"), "bf16").autocast():
        assert (x @ w).dtype == torch.bfloat16
    assert Precision(torch.device("cpu"), "bf16").dtype is torch.bfloat16


def test_the_run_config_reaches_the_backbone(monkeypatch) -> None:
    """backbone_for passes the run's device and precision to the process's cached backbone
    (a bf16 run must not be given the fp32 one, nor the reverse)."""
    import fedtext.backbone as fb
    from fedtext.tasks import TASKS

    seen = []
    monkeypatch.setattr(fb, "_get_backbone", lambda *args: seen.append(args) or args)
    fb.backbone_for(make_config("fedprompt", precision="bf16", device="cpu"), TASKS["demo"])
    fb.backbone_for(make_config("fedprompt"), TASKS["demo"])
    assert seen[0][-1] == Precision(torch.device("cpu"), "bf16")
    assert seen[1][-1].name == "fp32" and seen[0][:-1] == seen[1][:-1]


def test_gpus_per_client_reach_rays_client_resources() -> None:
    from simulations.simulate import backend_config

    assert backend_config(2.0)["client_resources"] == {"num_cpus": 2.0, "num_gpus": 0.0}
    assert backend_config(4.0, "", 0.25)["client_resources"] == {"num_cpus": 4.0, "num_gpus": 0.25}
    assert backend_config(1.0, "auto", 0.5)["init_args"] == {"include_dashboard": False, "address": "auto"}
    with pytest.raises(ConfigError, match="--gpus-per-client must be >= 0"):
        backend_config(2.0, "", -1.0)


def test_compare_passes_gpus_per_client_to_each_simulation(monkeypatch, tmp_path: Path) -> None:
    import subprocess

    from simulations import compare

    commands = []

    class Finished:
        def __init__(self, cmd, **_kwargs):
            commands.append(cmd)
            self.stdout = iter(())

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", Finished)
    compare.run_one({"method": "fedprompt"}, 4, tmp_path / "a.log", gpus_per_client=0.25)
    compare.run_one({"method": "fedprompt"}, 4, tmp_path / "b.log")
    assert commands[0][-2:] == ["--gpus-per-client", "0.25"]
    assert "--gpus-per-client" not in commands[1]


def test_the_gpu_federation_example_is_a_simulation_config_flower_accepts() -> None:
    """docs/performance.md's ``flwr run`` GPU line parses into Flower's simulation config
    (the parser ``flwr run --federation-config`` uses; Flower >= 1.42) with its GPU share."""
    import re

    from ..conftest import REPO

    utils = pytest.importorskip("flwr.supercore.utils")
    if not hasattr(utils, "simulation_config_from_json"):
        pytest.skip("this Flower has no --federation-config simulation keys")
    from flwr.common.config import parse_config_args

    text = (REPO / "docs" / "performance.md").read_text()
    line = re.search(r'--federation-config "([^"]*client-resources-num-gpus[^"]*)"', text).group(1)
    fields = {k.replace("-", "_"): v for k, v in parse_config_args([line]).items()}
    config = utils.simulation_config_from_json(fields)
    assert config.num_supernodes == 8 and config.client_resources_num_gpus == pytest.approx(0.25)
    assert config.client_resources_num_cpus == 2
