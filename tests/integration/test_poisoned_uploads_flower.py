"""Issue 35 item 3 through Flower: one client poisons a different way each round
(``tests/integration/poisoned_client.py``); the per-poison cases on mock client proxies
are in tests/unit/test_poisoned_uploads.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ..conftest import REPO


@pytest.mark.slow
def test_one_poisoning_client_through_flower_cannot_wreck_the_run(tmp_path):
    """fedprompt, 3 clients, 3 rounds; client 0 sends a 1e30 prompt, then 10^12 examples,
    then ``queries="lots"``, and evaluate replies without accuracy: each is dropped with
    its reason, the global loss stays finite and the run finishes on clients 1 and 2."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "integration" / "poisoned_client.py"), str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    (run,) = [p.parent for p in tmp_path.glob("*/config.json")]
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2, 3]
    fit_reasons = ["upload-bound", "num_examples=1000000000000 outside", "metric queries='lots'"]
    for r, expected in zip(rounds[1:], fit_reasons, strict=True):
        reasons = [d["reason"] for d in r["dropped"] if d["client"] == "0"]
        assert any(expected in x for x in reasons), reasons
        assert "evaluate reply: no accuracy" in reasons
        assert r["num_clients"] == 2 and np.isfinite(r["global_loss"])
        assert set(r["client_accuracy"]) == {"1", "2"}
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
