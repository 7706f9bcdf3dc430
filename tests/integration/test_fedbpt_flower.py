"""FedBPT through Flower's simulation engine: the reference server step with ratio fitness
(the math is tested by hand in tests/unit/test_fedbpt.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..conftest import REPO, _env, _only_run


@pytest.mark.slow
def test_reference_and_ratio_run_two_rounds_through_flower(tmp_path):
    """Smoke: reference step + ratio fitness, 3 clients, 2 rounds, real simulation engine."""
    cfg = ("method=fedbpt num-server-rounds=2 shots-per-class=4 client-test-size=8 eval-size=40 prompt-length=4 "
           "max-length=48 fedbpt.local-steps=2 fedbpt.popsize=4 fedbpt.intrinsic-dim=20 fedbpt.server-step='reference' "
           f"fedbpt.fitness='ratio' fedbpt.keep-rate=0.5 output-dir='{tmp_path}'")
    proc = subprocess.run([sys.executable, "-m", "simulations.simulate", "--num-supernodes", "3", "--run-config", cfg],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = _only_run(tmp_path)
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    for r in rounds[1:]:
        assert r["num_clients"] == 3 and r["dropped"] == []
        mm = r["method_metrics"]
        assert mm["sigma"] == pytest.approx(mm["sigma_after"] / mm["sigma_prime"] * (1.0 if r["round"] == 1 else
                                            rounds[1]["method_metrics"]["sigma"]), rel=1e-5)
    # ratio: 2 forwards per candidate -> fit queries = 3 clients x 8 shots x (2 x 2 x 4 + 2 + 1) (+ client eval)
    assert rounds[1]["model_queries"] >= 3 * 8 * (2 * 2 * 4 + 3)
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
