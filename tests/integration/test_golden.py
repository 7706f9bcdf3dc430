"""Golden records: no refactoring changes a number by accident.

``tests/integration/golden/golden_demo.json`` holds, per method, the per-round accuracy, loss and
bytes of a 2-round demo run (seed 0) recorded with ``simulations.simulate`` on the main
*before* the per-method reshape of issue 9 (commit in the file; the run-config there uses the
old flat keys). A change meant to move a method's numbers re-records that method
(``python tests/integration/golden/record.py <method> --why "..."``), which notes the commit,
date and reason in its ``rerecorded`` field: bbt-fed, fedbpt and feddls were re-recorded for
issue 44 (BBT's prompt injection and A's scale, pycma pinned to cma 3.4's CSA, FedDLS's LASSO ties).
Each test reruns the same setting with today's keys through the server's own round loop in
this process (tests/inprocess.py: the ServerApp's server and strategy, the ClientApp's clients,
no Ray; through Flower's engine until issue 55, with the same numbers) and asks for the same numbers: bytes, queries and accuracies exactly, losses to 1e-5
relative (bit-identical on the machine that recorded them; on another CPU of the same
kind, 2026-11-23, the float32 kernels sum in another order and the round-0 loss moved by
4e-7 relative, a few float32 ulps, so the tolerance is float32's, not float64's). This is also each method's 2-round smoke test on MiniLM-L6's real weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulations.simulate import parse_pairs

from ..conftest import REPO
from ..inprocess import run

GOLDEN = json.loads((REPO / "tests" / "integration" / "golden" / "golden_demo.json").read_text())["methods"]
TINY = ("num-server-rounds=2 shots-per-class=4 client-test-size=8 eval-size=40 prompt-length=4 max-length=48 "
        "seed=0")
NEW_KEYS = {  # the same settings as golden_demo.json's old_run_config, in today's keys
    "fedprompt": "fedprompt.local-steps=2 fedprompt.batch-size=8",
    "bbt-fed": "bbt-fed.local-steps=2 bbt-fed.popsize=4 bbt-fed.intrinsic-dim=20",
    "fedbpt": "fedbpt.local-steps=2 fedbpt.popsize=4 fedbpt.intrinsic-dim=20",
    "feddls": "feddls.steps=2 feddls.candidates=3 post-tune-steps=1 post-tune-popsize=3 post-tune-dim=10 holdout=2",
}
EXACT = ("round", "global_accuracy", "client_accuracy", "client_post_accuracy", "num_clients", "bytes_up",
         "bytes_down", "bytes_up_per_client", "bytes_down_per_client", "eval_bytes_down", "model_queries",
         "server_queries")


def golden_rounds(method: str, output: Path) -> list[dict[str, Any]]:
    """``method``'s golden setting run now (records under ``output``): its round records.
    ``record.py`` re-records with this very function."""
    folder, rounds = run(parse_pairs(f"method={method} {TINY} {NEW_KEYS[method]}"), output,
                         GOLDEN[method]["num_supernodes"])
    assert json.loads((folder / "summary.json").read_text())["status"] == "finished"
    return rounds


@pytest.mark.parametrize("method", sorted(NEW_KEYS))
def test_reshaped_code_reproduces_the_golden_run(method, tmp_path):
    golden = GOLDEN[method]
    rounds = golden_rounds(method, tmp_path)
    assert len(rounds) == len(golden["rounds"]) == 3
    for got, want in zip(rounds, golden["rounds"], strict=True):
        assert {k: got[k] for k in EXACT} == {k: want[k] for k in EXACT}, f"round {want['round']}"
        for key in ("global_loss", "train_loss"):
            assert (got[key] is None) == (want[key] is None)
            if want[key] is not None:
                assert got[key] == pytest.approx(want[key], rel=1e-5), (key, want["round"])
