"""FedDLS through Flower's simulation engine: two rounds, three clients, one non-participant
(the codecs, local search and P/NP records are tested by hand in tests/unit/test_feddls.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fedtext import comm

from ..conftest import REPO, _env, _only_run
from .test_methods_flower import TINY


@pytest.mark.slow
def test_feddls_two_rounds_three_clients_with_a_non_participant_through_flower(tmp_path):
    """2 rounds x 3 clients via Flower's simulation engine; client 2 is held out (NP)."""
    t, phi = 4, 5
    cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", "3", "--run-config",
           f"method=feddls {TINY} feddls.steps=2 feddls.candidates=3 post-tune-steps=1 post-tune-popsize=3 "
           f"post-tune-dim=10 holdout=2 output-dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = _only_run(tmp_path)
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    up = 2 * t + comm.NPY_HEADER_BYTES
    update = 4 * phi * t + 2 * comm.NPY_HEADER_BYTES
    assert [r["round"] for r in rounds] == [0, 1, 2]
    for r, down in zip(rounds[1:], (0, update), strict=True):  # round 1: p'_0 comes from the seed
        assert r["num_clients"] == 2 and r["dropped"] == []  # the non-participant never trains
        assert r["bytes_up_per_client"] == up and r["bytes_down_per_client"] == down
        assert set(r["client_accuracy"]) == {"0", "1", "2"} and r["participants"] == ["0", "1"]
    # last round: participants need 1 update, the non-participant both
    assert rounds[2]["eval_bytes_down"] == 2 * update + 2 * update
    assert set(rounds[2]["client_post_accuracy"]) == {"0", "1", "2"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["p_accuracy"] is not None and summary["np_accuracy"] is not None
    assert "post-tuned P" in proc.stdout + proc.stderr
