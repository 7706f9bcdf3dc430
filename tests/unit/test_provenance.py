"""Provenance in a run's config.json (git commit and dirty flag, package versions, Flower's
run id, SuperNodes) and the dashboard's drill-down block of it, old records included. The
git commit and dirty flag read from real git repositories: tests/integration/test_provenance_git.py."""

from __future__ import annotations

import importlib.metadata
import json
import platform
from pathlib import Path

import pytest

from fedtext.records import LAUNCH_FIELDS, PROVENANCE_PACKAGES, RunRecorder, provenance
from simulations.dashboard_data import UNKNOWN, provenance_rows, run_provenance


def test_provenance_has_versions_and_launch_fields():
    p = provenance({"num_supernodes": 3})
    assert p["versions"] == {**{n: importlib.metadata.version(n) for n in PROVENANCE_PACKAGES},
                             "python": platform.python_version()}
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
