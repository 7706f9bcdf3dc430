"""Provenance in a run's config.json (git commit and dirty flag, or the Flower app bundle the
code was installed from, package versions, Flower's run id, SuperNodes) and the dashboard's
drill-down block of it, old records included. The git commit and dirty flag read from real git
repositories: tests/integration/test_provenance_git.py; a real `flwr run`'s FAB:
tests/system/test_flwr_run.py and tests/system/test_deployment_launcher.py."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import tomllib
from pathlib import Path
from types import SimpleNamespace

import flwr
import pytest

from fedtext.records import (
    LAUNCH_FIELDS, PROVENANCE_PACKAGES, RunRecorder, code_origin, distribution_version, fab_fields, fedtext_version,
    package_versions, probes, provenance,
)
from simulations.dashboard_data import CODE_FROM, UNKNOWN, provenance_rows, run_provenance

from ..conftest import REPO

FAB_HASH = "0123456789abcdef" * 4  # a SHA-256: 64 hex digits


def _installed(name: str) -> str:
    """A package's version from an independent source: Flower's own ``flwr.__version__`` for
    flwr (it reads the ``flwr`` or the ``flwr-nightly`` distribution, so this test passes on the
    nightly too), importlib's for the rest."""
    return flwr.__version__ if name == "flwr" else importlib.metadata.version(name)


def test_provenance_has_versions_and_launch_fields():
    p = provenance({"num_supernodes": 3})
    this_code = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert p["versions"] == {**{n: _installed(n) for n in PROVENANCE_PACKAGES},
                             "fedtext": this_code, "python": platform.python_version()}
    assert p["num_supernodes"] == 3 and p["flower_run_id"] is None and p["nodes_at_start"] is None
    assert p["git_commit"] is None or len(p["git_commit"]) == 40 and int(p["git_commit"], 16) >= 0
    assert p["git_dirty"] in (None, True, False) and (p["git_commit"] is None) == (p["git_dirty"] is None)
    with pytest.raises(ValueError, match="unknown provenance fields \\['nodes'\\]"):
        provenance({"nodes": 3})


def _recorded_run(root: Path) -> RunRecorder:
    rec = RunRecorder(root, {"method": "bbt-fed", "seed": 0}, launch={"flower_run_id": "77", "num_supernodes": 3})
    rec.note_launch(nodes_at_start=3)
    rec.finish()
    return rec


def test_config_json_holds_provenance_and_the_dashboard_shows_it(tmp_path):
    rec = _recorded_run(tmp_path)
    prov = json.loads((rec.dir / "config.json").read_text())["provenance"]
    assert {k: prov[k] for k in LAUNCH_FIELDS} == {"flower_run_id": "77", "num_supernodes": 3, "nodes_at_start": 3,
                                                   "node_platforms": None, "fab_id": None, "fab_version": None,
                                                   "fab_hash": None}
    assert prov["versions"]["flwr"] == flwr.__version__
    rows = provenance_rows(json.loads((rec.dir / "config.json").read_text()))
    assert rows["Flower run id"] == "77" and rows["SuperNodes launched"] == "3" and rows["nodes at start"] == "3"
    assert rows["flwr"] == flwr.__version__ and rows["python"] == platform.python_version()
    assert rows["node platforms"] == "unknown"  # none reported (a simulation's nodes are this machine)
    meta = json.loads((rec.dir / "config.json").read_text())
    meta["provenance"]["node_platforms"] = {"10": "x86_64", "2": "aarch64"}
    assert provenance_rows(meta)["node platforms"] == "2: aarch64, 10: x86_64"
    # this checkout's commit; a copy without .git (a wheel) shows only fedtext's version
    assert rows.get("git commit") == (prov["git_commit"] if prov["code_origin"] == "git" else None)
    assert rows["code from"] == CODE_FROM[prov["code_origin"]]
    text = run_provenance(tmp_path, rec.run_id)
    assert "Flower run id" in text and "77" in text and importlib.metadata.version("torch") in text


def test_a_run_recorded_before_provenance_reads_unknown(tmp_path):
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"run_id": "old-run", "config": {"method": "bbt-fed", "seed": 0},
                                                 "machine": {"python": "3.11.7"}}))
    rows = provenance_rows(json.loads((old / "config.json").read_text()))
    assert rows.pop("python") == "3.11.7"  # from machine, which old records have
    assert set(rows.values()) == {UNKNOWN}
    assert "unknown" in run_provenance(tmp_path, "old-run")


def test_a_resumed_run_records_its_own_provenance(tmp_path):
    first = _recorded_run(tmp_path)
    again = RunRecorder(tmp_path, {"method": "bbt-fed", "seed": 0}, run_id=first.run_id, resume=True, keep_rounds=0,
                        launch={"flower_run_id": "78"})
    again.note_launch(nodes_at_start=2)
    again.finish()
    meta = json.loads((first.dir / "config.json").read_text())
    assert (meta["provenance"]["flower_run_id"], meta["provenance"]["nodes_at_start"]) == ("77", 3)
    resumed = meta["resumed"][-1]["provenance"]
    assert (resumed["flower_run_id"], resumed["nodes_at_start"], resumed["num_supernodes"]) == ("78", 2, None)


def test_note_launch_rejects_an_unknown_field(tmp_path):
    rec = _recorded_run(tmp_path)
    with pytest.raises(ValueError, match="unknown provenance fields"):
        rec.note_launch(supernodes=3)


# ------------------------------------------------- where the code came from (code_origin)
def test_code_origin_prefers_git_then_the_fab_then_the_installed_version():
    fab = {"fab_id": "fedtext/fedtext", "fab_version": "0.1.0", "fab_hash": FAB_HASH}
    assert code_origin({"git_commit": "a" * 40, **fab, "versions": {"fedtext": "0.1.0"}}) == "git"
    assert code_origin({"git_commit": None, **fab, "versions": {"fedtext": "0.1.0"}}) == "fab"
    assert code_origin({"git_commit": None, "fab_hash": None, "versions": {"fedtext": "0.1.0"}}) == "installed"
    assert code_origin({"git_commit": None, "fab_hash": None, "versions": {"fedtext": None}}) is None
    assert code_origin({}) is None


def test_fab_fields_read_flowers_run_and_empty_means_none():
    run = SimpleNamespace(run_id=7, fab_id="fedtext/fedtext", fab_version="0.1.0", fab_hash=FAB_HASH)
    assert fab_fields(run) == {"fab_id": "fedtext/fedtext", "fab_version": "0.1.0", "fab_hash": FAB_HASH}
    # run_simulation's run (Run.create_empty): no FAB, empty strings
    assert fab_fields(SimpleNamespace(fab_id="", fab_version="", fab_hash="")) == dict.fromkeys(
        ("fab_id", "fab_version", "fab_hash"))
    assert fab_fields(object()) == dict.fromkeys(("fab_id", "fab_version", "fab_hash"))


def _fake_grid(run: object) -> SimpleNamespace:
    return SimpleNamespace(run=run)


def test_a_server_app_run_from_a_fab_records_the_fabs_hash_and_version(tmp_path, monkeypatch):
    """Under ``flwr run`` the ServerApp imports Flower's installed copy of the app (no git
    checkout there): the record names the code by the FAB Flower gives the run
    (``grid.run``), which ``Context`` does not carry. A refused run-config writes its record
    before any data or model loads, through the same provenance."""
    from flwr.app import RecordDict
    from flwr.common import Context

    from fedtext.common.config import ConfigError
    from fedtext.server_app import make_server_app

    monkeypatch.setattr(probes, "git_state", lambda *a, **k: {"git_commit": None, "git_dirty": None})
    app = make_server_app({"method": "nope", "output-dir": str(tmp_path)})
    run = SimpleNamespace(run_id=42, fab_id="fedtext/fedtext", fab_version="0.1.0", fab_hash=FAB_HASH)
    with pytest.raises(ConfigError):
        app(_fake_grid(run), Context(run_id=42, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    (record,) = tmp_path.iterdir()
    meta = json.loads((record / "config.json").read_text())
    prov = meta["provenance"]
    assert (prov["fab_id"], prov["fab_version"], prov["fab_hash"]) == ("fedtext/fedtext", "0.1.0", FAB_HASH)
    assert prov["code_origin"] == "fab" and prov["git_commit"] is None and prov["flower_run_id"] == "42"
    rows = provenance_rows(meta)
    assert rows["code from"] == CODE_FROM["fab"] and rows["FAB"] == "fedtext/fedtext 0.1.0"
    assert rows["FAB sha256"] == FAB_HASH and "git commit" not in rows  # not "git commit: unknown"


def test_a_server_app_without_a_fab_records_none_of_its_fields(tmp_path):
    """``run_simulation`` (the compare runner, the tests) gives Flower's empty run: no FAB
    fields; this checkout's git commit names the code."""
    from flwr.app import RecordDict
    from flwr.common import Context

    from fedtext.common.config import ConfigError
    from fedtext.server_app import make_server_app

    app = make_server_app({"method": "nope", "output-dir": str(tmp_path)})
    with pytest.raises(ConfigError):
        app(_fake_grid(SimpleNamespace(fab_id="", fab_version="", fab_hash="")),
            Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    (record,) = tmp_path.iterdir()
    prov = json.loads((record / "config.json").read_text())["provenance"]
    assert (prov["fab_id"], prov["fab_version"], prov["fab_hash"]) == (None, None, None)
    assert prov["code_origin"] == ("git" if prov["git_commit"] else "installed")


def test_git_rows_for_a_checkout_and_only_the_version_for_an_installed_package():
    git = {"provenance": {"git_commit": "c" * 40, "git_dirty": True, "code_origin": "git",
                          "versions": {"fedtext": "0.1.0"}}}
    rows = provenance_rows(git)
    assert (rows["code from"], rows["git commit"], rows["git tree"]) == (
        CODE_FROM["git"], "c" * 40, "dirty (uncommitted changes)")
    assert "FAB" not in rows
    # a record from before code_origin existed: its git commit still names the code
    old = {"provenance": {"git_commit": "d" * 40, "git_dirty": False, "versions": {}}}
    assert provenance_rows(old)["code from"] == CODE_FROM["git"] and provenance_rows(old)["git tree"] == "clean"
    wheel = {"provenance": {"git_commit": None, "fab_hash": None, "code_origin": "installed",
                            "versions": {"fedtext": "0.1.0"}}}
    rows = provenance_rows(wheel)
    assert rows["code from"] == CODE_FROM["installed"] and rows["fedtext"] == "0.1.0"
    assert "git commit" not in rows and "FAB" not in rows


# ---------------------------------------------- whichever Flower distribution is installed
def _metadata(monkeypatch, installed: dict[str, str], provides: dict[str, list[str]]) -> None:
    """importlib.metadata as an environment holding ``installed`` (distribution -> version)
    whose import packages come from ``provides``."""

    def version(name: str) -> str:
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: provides)


def test_flower_nightly_is_read_from_its_own_distribution(tmp_path, monkeypatch):
    """flwr-nightly installs the package ``flwr`` as the distribution ``flwr-nightly``:
    ``importlib.metadata.version("flwr")`` fails there, and records said ``flwr: null``."""
    _metadata(monkeypatch, {"flwr-nightly": "1.43.0.dev20260301", "torch": "2.13.0"},
              {"flwr": ["flwr-nightly"], "torch": ["torch"]})
    assert distribution_version("flwr") == "1.43.0.dev20260301"
    assert package_versions()["flwr"] == "1.43.0.dev20260301" and package_versions()["torch"] == "2.13.0"
    rec = RunRecorder(tmp_path, {"method": "bbt-fed", "seed": 0})
    rec.finish()
    meta = json.loads((rec.dir / "config.json").read_text())
    assert meta["provenance"]["versions"]["flwr"] == "1.43.0.dev20260301"
    assert provenance_rows(meta)["flwr"] == "1.43.0.dev20260301"


def test_stable_flower_wins_and_nothing_installed_is_none(monkeypatch):
    # both installed (pip install -e . beside the nightly pulls stable over it): the stable
    # distribution's files are the ones imported, and its name is asked first
    _metadata(monkeypatch, {"flwr": "1.42.0", "flwr-nightly": "1.43.0.dev20260301"},
              {"flwr": ["flwr-nightly", "flwr"]})
    assert distribution_version("flwr") == "1.42.0"
    _metadata(monkeypatch, {"a-nightly": "2.0", "z-nightly": "1.0"}, {"pkg": ["z-nightly", "a-nightly"]})
    assert distribution_version("pkg") == "2.0"  # sorted by name: the same answer in any listing order
    _metadata(monkeypatch, {}, {})
    assert distribution_version("flwr") is None and package_versions()["flwr"] is None


def test_fedtext_version_is_the_running_codes_pyproject(tmp_path, monkeypatch):
    """The version beside the code that runs (a checkout, or the copy Flower installed from a
    FAB), not an editable install's metadata elsewhere; a wheel has no pyproject beside it."""
    monkeypatch.setattr(probes, "distribution_version", lambda name: {"fedtext": "0.0.9"}.get(name))
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fedtext"\nversion = "9.9.9"\n')
    assert fedtext_version(tmp_path) == "9.9.9"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "someone-else"\nversion = "1.0"\n')
    assert fedtext_version(tmp_path) == "0.0.9"
    (tmp_path / "pyproject.toml").write_text("not = [toml")
    assert fedtext_version(tmp_path) == "0.0.9"
    assert fedtext_version(tmp_path / "absent") == "0.0.9"
    assert fedtext_version() == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
