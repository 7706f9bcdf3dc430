"""Issue 35 item 3 and issue 45 items 2-3 through Flower: one client poisons a different way
each round (``tests/integration/poisoned_client.py``); the per-poison cases on mock client
proxies are in tests/unit/test_poisoned_uploads.py, tests/unit/test_method_metrics.py and
tests/unit/test_partition_identity.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ..conftest import REPO
from .flower_launch import RAY_ADDRESS_VAR


@pytest.mark.slow
def test_one_poisoning_client_through_flower_cannot_wreck_the_run(tmp_path, ray_head):
    """fedprompt, 3 clients, 3 rounds; client 0 sends a 1e30 prompt (and a metric fedprompt
    does not declare), then its partition's rows as examples (issue 58's weight lie), then ``queries="lots"``, and evaluate replies
    without accuracy, the last one claiming to be partition 1: each is dropped with its
    reason under client 0 (the undeclared metric is ignored, with a warning), client 1's
    accuracy is its own, the global loss stays finite, the run finishes on clients 1 and 2
    and its summary names partition 0 as never trained."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), RAY_ADDRESS_VAR: ray_head}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "integration" / "poisoned_client.py"), str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    (run,) = [p.parent for p in tmp_path.glob("*/config.json")]
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2, 3]
    fit_reasons = ["upload-bound", "(the labelled training rows the server assigned it: shots-per-class=4 of partition 0)",
                   "metric queries='lots'"]
    eval_reasons = ["evaluate reply: no accuracy"] * 2 + ["evaluate reply: claims partition 1, but node "]
    for r, expected, eval_expected in zip(rounds[1:], fit_reasons, eval_reasons, strict=True):
        assert {d["client"] for d in r["dropped"]} == {"0"}, r["dropped"]
        reasons = [d["reason"] for d in r["dropped"]]
        assert any(expected in x for x in reasons), reasons
        assert any(x.startswith(eval_expected) for x in reasons), reasons
        assert r["num_clients"] == 2 and r["trained"] == ["1", "2"] and np.isfinite(r["global_loss"])
        assert set(r["client_accuracy"]) == {"1", "2"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["partitions_never_trained"] == [0]
    log = (run / "run.log").read_text()
    assert "sent metric 'dls_version', which fedprompt does not declare: ignored" in log
    assert "1 of 3 participant partitions never trained in this run" in log


@pytest.mark.slow
def test_a_fedkseed_client_sending_30000_per_seed_through_flower_is_dropped(tmp_path, ray_head):
    """Issue 58's seed attack through Flower: fedkseed, 3 clients, 2 rounds; client 0 adds
    30,000 on one seed (round 1), then on every seed (round 2). Both are dropped by the round's
    scale check (``fedkseed.round-factor``), the run finishes on clients 1 and 2 with a finite
    global loss."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), RAY_ADDRESS_VAR: ray_head}
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "integration" / "poisoned_client.py"), str(tmp_path),
                           "fedkseed"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (run,) = [p.parent for p in tmp_path.glob("*/config.json")]
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    for r in rounds[1:]:
        assert [d["client"] for d in r["dropped"]] == ["0"], r["dropped"]
        assert "exceeds fedkseed.round-factor" in r["dropped"][0]["reason"], r["dropped"]
        assert r["trained"] == ["1", "2"] and np.isfinite(r["global_loss"])
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
