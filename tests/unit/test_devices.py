"""The ``device`` and ``precision`` keys: spelled right in the config, possible on this
machine when the backbone loads (fedtext.backbone.devices), each failure one line; the fp32 path
is the code the golden records were made with (autocast off)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedtext.common.config import ConfigError
from fedtext.backbone.devices import CPU_FP32, Precision
from fedtext.common.registry import make_config


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


def test_the_run_config_reaches_the_backbone(monkeypatch, request) -> None:
    """backbone_for passes the run's device and precision to the process's cached backbone
    (a bf16 run must not be given the fp32 one, nor the reverse). The plumbing, not the
    CPU: a CPU without bf16 (a Raspberry Pi, most laptops) says the same as one with it."""
    import fedtext.backbone.facade as fb
    import fedtext.backbone.devices
    from fedtext.common.tasks import TASKS

    monkeypatch.setattr(fedtext.backbone.devices, "cpu_has_bf16", lambda: True)
    _fresh_precisions(request)
    seen = []
    monkeypatch.setattr(fb, "_get_backbone", lambda *args: seen.append(args) or args)
    fb.backbone_for(make_config("fedprompt", precision="bf16", device="cpu"), TASKS["demo"])
    fb.backbone_for(make_config("fedprompt"), TASKS["demo"])
    assert seen[0][-1] == Precision(torch.device("cpu"), "bf16")
    assert seen[1][-1].name == "fp32" and seen[0][:-1] == seen[1][:-1]


def _fresh_precisions(request) -> None:
    """Forget the process's checked (device, precision) pairs now and after the test: a pair
    checked under a pretended CPU must not answer for the real one in a later test."""
    Precision.of.__func__.cache_clear()
    request.addfinalizer(Precision.of.__func__.cache_clear)


def test_a_cpu_without_bf16_refuses_it_in_one_line_when_the_backbone_loads(monkeypatch, request) -> None:
    """The refusal a board's CPU gives (no AVX-512 BF16, no AMX), whatever this CPU has."""
    import fedtext.backbone.devices

    monkeypatch.setattr(fedtext.backbone.devices, "cpu_has_bf16", lambda: False)
    _fresh_precisions(request)
    with pytest.raises(ConfigError, match=r"^precision=bf16: this CPU has no bf16 instructions .*; use fp32$"):
        Precision.of("cpu", "bf16")
    assert Precision.of("cpu", "fp32") == Precision(torch.device("cpu"), "fp32")


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


def _start() -> torch.Tensor:
    """The weights :func:`_one_step` starts from (its seed's draws after the 4 x 3 rows)."""
    torch.manual_seed(0)
    torch.randn(4, 3)
    return torch.randn(3, 2)


def _one_step(precision: Precision, scale_loss: float = 1.0) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One ``gradient_steps`` SGD step (lr 0.5) of a 3 x 2 linear classifier on 4 rows;
    returns the weights after it and the gradients ``backward`` produced."""
    from fedtext.client.numpy_client import gradient_steps

    torch.manual_seed(0)
    x, labels = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    weight = torch.nn.Parameter(torch.randn(3, 2))
    seen: list[torch.Tensor] = []
    weight.register_hook(lambda g: seen.append(g.clone()))
    batch = type("B", (), {"x": x, "labels": labels})()
    gradient_steps([batch], lambda b: scale_loss * (b.x @ weight), torch.optim.SGD([weight], lr=0.5), precision, terms=())
    return weight.detach(), seen


def test_fp16_scales_the_loss_and_steps_on_the_unscaled_gradient() -> None:
    """Loss scaling (``precision=fp16``): backward sees the gradient times S = 65,536, the
    step uses it divided by S, so the weights after one step are the fp32 ones; fp32 and
    bf16 scale nothing. (A scaler on this CPU: the arithmetic is the device's, not CUDA's.)"""
    fp16 = Precision(torch.device("cpu"), "fp16")
    assert fp16.loss_scaler().is_enabled() and fp16.loss_scaler().get_scale() == 65536.0
    assert not CPU_FP32.loss_scaler().is_enabled() and not Precision(torch.device("cpu"), "bf16").loss_scaler().is_enabled()
    w32, g32 = _one_step(CPU_FP32)
    w16, g16 = _one_step(fp16)
    torch.testing.assert_close(g16[0], 65536.0 * g32[0])
    torch.testing.assert_close(w16, w32)
    assert not torch.equal(w32, _start())  # the step moved the weights


def test_fp16_skips_a_step_whose_scaled_gradients_overflow() -> None:
    """A loss whose gradients times S overflow (inf) leaves the weights unchanged under
    fp16 (GradScaler skips the step); fp32 steps on the same finite gradients."""
    start = _start()
    w16, g16 = _one_step(Precision(torch.device("cpu"), "fp16"), scale_loss=1e36)
    assert not torch.isfinite(g16[0]).all()
    torch.testing.assert_close(w16, start)
    w32, g32 = _one_step(CPU_FP32, scale_loss=1e36)
    assert torch.isfinite(g32[0]).all() and not torch.equal(w32, start)


def test_gpu_peak_memory_is_read_on_the_backbones_gpu_and_absent_on_a_cpu(monkeypatch) -> None:
    """A client on a GPU reports torch's peak allocation there in MiB (``peak_gpu_mb``, beside
    the RSS); on a CPU it reports none, so CPU replies are as before."""
    from types import SimpleNamespace

    from fedtext.client.numpy_client import FedTextClient

    asked = []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: asked.append(device) or 3 * 2**20 + 2**19)
    gpu = Precision(torch.device("cuda", 1), "bf16")
    assert gpu.peak_memory_mb() == 3.5 and asked == [torch.device("cuda", 1)]
    assert CPU_FP32.peak_memory_mb() is None
    on = SimpleNamespace(backbone=SimpleNamespace(precision=gpu))
    assert FedTextClient.gpu_memory(on) == {"peak_gpu_mb": 3.5}
    assert FedTextClient.gpu_memory(SimpleNamespace(backbone=SimpleNamespace(precision=CPU_FP32))) == {}


def test_the_precision_bench_takes_a_device_and_refuses_one_it_cannot_use(monkeypatch, capsys) -> None:
    """``python -m simulations.bench --precisions --device cuda``: each client round runs in
    a subprocess on that device, timings wait for CUDA's queue, and a device this machine
    lacks (or a malformed one) is one line before anything is measured."""
    import json
    import subprocess
    from types import SimpleNamespace

    from simulations import bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench, "precision_tables", lambda **kw: pytest.fail("measured on a missing device"))
    for device, message in (("cuda", "device=cuda: torch sees no CUDA GPU"),
                            ("tpu", "--device must be cpu, cuda or cuda:N, got 'tpu'")):
        assert bench.main(["--precisions", "--device", device]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"fedtext: configuration error: {message}") and "\n" not in err
    commands = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: commands.append(cmd) or SimpleNamespace(
        stdout=json.dumps({"fit_s": 1.0})))
    assert bench.client_in_subprocess("fedbpt", 0, "bf16", rounds=3, device="cuda:1") == {"fit_s": 1.0}
    assert commands[0][-8:] == ["--budget", "0", "--precision", "bf16", "--rounds", "3", "--device", "cuda:1"]
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: synced.append(device))
    bench.synchronize("cpu")
    bench.synchronize("cuda:1")
    assert synced == ["cuda:1"]
