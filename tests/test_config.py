"""Run-config validation: every bad value fails before training with one clear line."""

from __future__ import annotations

import tomllib

import pytest

from clients import CLIENTS
from fedtext.config import ConfigError, RunConfig
from strategies import STRATEGIES

from .conftest import REPO


def parse(**overrides):
    return RunConfig.from_run_config({k.replace("_", "-"): v for k, v in overrides.items()}, STRATEGIES)


def test_registries_have_the_same_keys():
    assert set(STRATEGIES) == set(CLIENTS)
    assert {"fedprompt", "bbt-fed"} <= set(STRATEGIES)


def test_pyproject_lists_every_key_with_the_dataclass_default():
    app_cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert app_cfg == RunConfig().to_run_config()
    assert RunConfig.from_run_config(app_cfg, STRATEGIES) == RunConfig()


def test_every_pyproject_key_has_a_comment():
    lines = (REPO / "pyproject.toml").read_text().split("[tool.flwr.app.config]")[1].split("[tool.flwr.federations]")[0]
    keys = [ln for ln in lines.splitlines() if "=" in ln and not ln.lstrip().startswith("#")]
    assert keys and all("#" in ln for ln in keys)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"method": "fedsgd"}, "unknown method 'fedsgd'; choose one of: bbt-fed, fedbpt, feddls, fedprompt"),
        ({"task": "imdb"}, "unknown task 'imdb'"),
        ({"partition": "pathological"}, "unknown partition 'pathological'; choose one of: iid, dirichlet, domain"),
        ({"head": "linear"}, "unknown head 'linear'"),
        ({"num_server_rounds": 0}, "num-server-rounds must be >= 1, got 0"),
        ({"alpha": 0.0}, "alpha must be > 0, got 0.0"),
        ({"alpha": -1}, "alpha must be > 0"),
        ({"clients_per_round": -2}, "clients-per-round must be >= 0"),
        ({"popsize": 1}, "popsize must be >= 2"),
        ({"eval_every": 0}, "eval-every must be >= 1"),
        ({"dataset": "./no/such/dir"}, "dataset path './no/such/dir' does not exist"),
        ({"num_server_rounds": "ten"}, "num-server-rounds must be int, got 'ten'"),
        ({"num_server_rounds": 2.5}, "num-server-rounds must be int, got 2.5"),
        ({"num_rounds": 3}, "unknown run-config key 'num-rounds'"),
        ({"compression": "zip"}, "unknown compression 'zip'; choose one of: lasso, full, pca, quant"),
        ({"phi": 0}, "phi must be >= 1, got 0"),
        ({"phi": 8, "lasso_screen": 5}, "lasso-screen (5) must be >= phi (8)"),
        ({"quant_bits": 1}, "quant-bits must be in 2..8"),
        ({"post_tune_sigma": 0}, "post-tune-sigma must be > 0"),
        ({"dls_steps": 0}, "dls-steps must be >= 1"),
    ],
)
def test_bad_values_raise_one_clear_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        parse(**overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_clients_per_round_above_connected_clients():
    cfg = parse(clients_per_round=5)
    cfg.check_num_clients(5)
    with pytest.raises(ConfigError, match="clients-per-round=5 exceeds the 4 connected clients"):
        cfg.check_num_clients(4)


def test_values_are_coerced_and_frozen():
    cfg = parse(alpha=1, seed=3)
    assert isinstance(cfg.alpha, float) and cfg.seed == 3
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 4  # type: ignore[misc]


def test_unknown_task_for_unnamed_dataset(tmp_path):
    from fedtext.tasks import resolve_task

    with pytest.raises(ValueError, match="cannot guess the task"):
        resolve_task("auto", str(tmp_path))
    assert resolve_task("auto", "../shared/data/sst2").name == "sst2"
    assert resolve_task("auto", "../shared/data/amazon/").name == "amazon"
