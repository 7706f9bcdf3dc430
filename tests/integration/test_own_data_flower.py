"""Issue 37 item 2 end to end: one's own 3-class CSV through Flower's simulation engine
(the column, label and task handling is tested by hand in tests/unit/test_own_data.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..conftest import REPO, _env, _only_run
from ..unit.test_own_data import _three_class_csv


@pytest.mark.slow
def test_a_three_class_csv_of_ones_own_runs_end_to_end(tmp_path):
    """python -m simulations.simulate, 2 SuperNodes, 1 round, on a 3-class string-label CSV."""
    folder = _three_class_csv(tmp_path, train=90, test=30)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", "2", "--run-config",
           f"method=fedprompt dataset={folder} text-column=sentence num-server-rounds=1 shots-per-class=4 "
           f"client-test-size=6 eval-size=30 prompt-length=4 max-length=32 fedprompt.local-steps=2 output-dir={out}"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = _only_run(out)
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    config = json.loads((run / "config.json").read_text())["config"]
    assert json.loads(config["resolved-labels"]) == ["neg", "neu", "pos"] and config["resolved-task"] == "reviews3"
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1] and rounds[-1]["num_clients"] == 2
    assert 0.0 <= rounds[-1]["global_accuracy"] <= 1.0
