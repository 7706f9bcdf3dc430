"""Provenance in a run's config.json (git commit and dirty flag, package versions, Flower's
run id, SuperNodes) and the dashboard's drill-down block of it, old records included."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from fedtext import records
from fedtext.records import LAUNCH_FIELDS, PROVENANCE_PACKAGES, RunRecorder, git_state, provenance
from simulations.dashboard_data import UNKNOWN, provenance_rows, run_provenance

from ..conftest import REPO

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(folder), *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@needs_git
def test_git_state_tells_commit_and_tracked_changes(tmp_path):
    _git(tmp_path, "init", "-q")
    code = tmp_path / "code.py"
    code.write_text("x = 1\n")
    _git(tmp_path, "add", "code.py")
    _git(tmp_path, "commit", "-q", "-m", "c")
    assert git_state(code) == {"git_commit": _git(tmp_path, "rev-parse", "HEAD"), "git_dirty": False}
    (tmp_path / "new-result.json").write_text("{}")  # untracked: still clean
    assert git_state(code)["git_dirty"] is False
    code.write_text("x = 2\n")
    assert git_state(code)["git_dirty"] is True
    assert git_state(tmp_path / "new-result.json") == {"git_commit": None, "git_dirty": None}  # not tracked


def test_git_state_unknown_without_a_checkout_or_git(tmp_path, monkeypatch):
    (tmp_path / "code.py").write_text("")
    assert git_state(tmp_path / "code.py") == {"git_commit": None, "git_dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    assert git_state() == {"git_commit": None, "git_dirty": None}

    def hung(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], records.GIT_TIMEOUT_S)

    monkeypatch.setattr(records.subprocess, "run", hung)
    assert git_state() == {"git_commit": None, "git_dirty": None}


def test_provenance_has_versions_and_launch_fields():
    p = provenance({"num_supernodes": 3})
    assert p["versions"] == {**{n: importlib.metadata.version(n) for n in PROVENANCE_PACKAGES},
                             "python": platform.python_version()}
    assert p["num_supernodes"] == 3 and p["flower_run_id"] is None and p["nodes_at_start"] is None
    assert p["git_commit"] is None or len(p["git_commit"]) == 40 and int(p["git_commit"], 16) >= 0
    assert p["git_dirty"] in (None, True, False) and (p["git_commit"] is None) == (p["git_dirty"] is None)
    with pytest.raises(ValueError, match="unknown provenance fields \\['nodes'\\]"):
        provenance({"nodes": 3})


@needs_git
def test_provenance_of_this_checkout_is_its_head():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert provenance()["git_commit"] == _git(REPO, "rev-parse", "HEAD")


def _recorded_run(root: Path) -> RunRecorder:
    rec = RunRecorder(root, {"method": "bbt-fed", "seed": 0}, launch={"flower_run_id": "77", "num_supernodes": 3})
    rec.note_launch(nodes_at_start=3)
    rec.finish()
    return rec


def test_config_json_holds_provenance_and_the_dashboard_shows_it(tmp_path):
    rec = _recorded_run(tmp_path)
    prov = json.loads((rec.dir / "config.json").read_text())["provenance"]
    assert {k: prov[k] for k in LAUNCH_FIELDS} == {"flower_run_id": "77", "num_supernodes": 3, "nodes_at_start": 3}
    assert prov["versions"]["flwr"] == importlib.metadata.version("flwr")
    rows = provenance_rows(json.loads((rec.dir / "config.json").read_text()))
    assert rows["Flower run id"] == "77" and rows["SuperNodes launched"] == "3" and rows["nodes at start"] == "3"
    assert rows["flwr"] == importlib.metadata.version("flwr") and rows["python"] == platform.python_version()
    assert rows["git commit"] == str(prov["git_commit"] or UNKNOWN)
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
