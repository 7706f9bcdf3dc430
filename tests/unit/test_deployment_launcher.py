"""simulations/deployment.py's pure parts: the run-config it hands ``flwr run`` and the
run-config it reads back from a run record (the launch itself: tests/system)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedtext.common.config import DERIVED_KEYS, ConfigError, RunConfig
from fedtext.common.registry import METHODS
from simulations.deployment import flwr_run_config, install_fab, record_overrides
from simulations.simulate import parse_pairs

from ..conftest import skip_without_recorded_data

REPO = Path(__file__).resolve().parents[2]
PILOT = REPO / "simulations" / "results" / "fedbpt_reference_sst2_pilot" / "runs"


def test_flwr_run_config_quotes_strings_and_leaves_numbers_bare():
    text = flwr_run_config({"method": "fedbpt", "alpha": 0.5, "seed": 3, "label-names": "", "flag": True,
                            "off": False})
    assert text == "method='fedbpt' alpha=0.5 seed=3 label-names='' flag=true off=false"


def test_flwr_run_config_refuses_a_single_quote_in_a_value():
    with pytest.raises(ConfigError, match="single quote"):
        flwr_run_config({"label-names": "it's"})


def test_flwr_run_config_round_trips_through_flowers_parser():
    from flwr.common.config import parse_config_args

    pairs = {"method": "fedbpt", "alpha": 0.5, "seed": 3, "dataset": "../shared/data/sst2", "label-names": ""}
    assert parse_config_args([flwr_run_config(pairs)]) == pairs


def test_record_overrides_replay_a_record_without_derived_keys_or_its_output_dir(tmp_path):
    config = {"method": "fedbpt", "seed": 2, "output-dir": "/elsewhere", **{k: "x" for k in DERIVED_KEYS}}
    (tmp_path / "config.json").write_text(json.dumps({"config": config}))
    assert record_overrides(tmp_path) == {"method": "fedbpt", "seed": 2}


def test_a_committed_record_replays_key_for_key_on_another_device():
    record = next(PILOT.glob("*-fedbpt-paper-dir05"))
    skip_without_recorded_data(record)
    base = record_overrides(record)
    cfg = RunConfig.from_run_config({**base, **parse_pairs("device=cpu run-name=replay")}, METHODS)
    recorded = json.loads((record / "config.json").read_text())["config"]
    assert cfg.to_run_config()["fedbpt.intrinsic-dim"] == recorded["fedbpt.intrinsic-dim"] == 500
    now = {k: v for k, v in cfg.to_run_config().items() if k not in ("device", "run-name", "output-dir")}
    then = {k: v for k, v in recorded.items() if k not in (*DERIVED_KEYS, "device", "run-name", "output-dir")}
    assert {k: now.get(k) for k in then} == then  # every recorded key, as recorded
    # keys fedtext gained after the record (node-partitions, ...) take their defaults
    defaults = RunConfig.from_run_config({"method": recorded["method"]}, METHODS).to_run_config()
    assert {k: now[k] for k in set(now) - set(then)} == {k: defaults[k] for k in set(now) - set(then)}


def test_record_overrides_names_a_folder_without_a_record(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        record_overrides(tmp_path)


def test_deploy_refuses_an_app_that_is_neither_a_folder_nor_a_fab_before_any_process(tmp_path, monkeypatch):
    """``deploy(app=...)`` with a zip, a missing folder or a folder without pyproject.toml
    stops in one line before the SuperLink starts; an app folder and a .fab pass to their branch."""
    from simulations import deployment

    started: list[str] = []
    monkeypatch.setattr(deployment.Processes, "start", lambda self, name, cmd: started.append(name))
    (tmp_path / "app.zip").write_bytes(b"PK")
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "app.zip", tmp_path / "absent", tmp_path / "empty"):
        with pytest.raises(ConfigError, match="not an app folder .* or a .fab file"):
            deployment.deploy({"method": "bbt-fed"}, 1, tmp_path / "out", tmp_path / "logs", app=bad)
    assert started == []
    assert deployment.app_folder(REPO, tmp_path / "home", {}) == REPO.resolve()
    with pytest.raises(ConfigError, match="not a .fab file"):  # a .fab path goes to install_fab
        deployment.app_folder(tmp_path / "absent.fab", tmp_path / "home", {})


def test_app_must_be_a_fab_file_that_exists(tmp_path):
    """``--app x.fab`` is checked before any ``flwr install`` (or process) starts."""
    (tmp_path / "app.zip").write_bytes(b"PK")
    for bad in (tmp_path / "app.zip", tmp_path / "absent.fab", tmp_path):
        with pytest.raises(ConfigError, match="not a .fab file"):
            install_fab(bad, tmp_path / "home", {})


def test_the_launcher_names_the_folder_a_launch_wrote_or_the_one_it_resumed(tmp_path):
    from simulations.deployment import record_folder

    def run(name: str) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        return tmp_path / name

    old = run("20260101-000000-fedprompt-demo-s0")
    before = set(tmp_path.glob("*/config.json"))
    assert record_folder(tmp_path, before, {}) is None  # nothing new, nothing resumed
    assert record_folder(tmp_path, before, {"resume": old.name}) == old  # it wrote on in its own folder
    assert record_folder(tmp_path, before, {"resume": "20260101-000001-gone"}) is None
    new = run("20260102-000000-fedprompt-demo-s0")  # a new folder wins (a refused resume's failed record)
    assert record_folder(tmp_path, before, {"resume": old.name}) == new
