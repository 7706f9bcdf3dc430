"""secagg=true through Flower's simulation engine (fedtext.secagg; issue 59, part 2), with one
client dropped mid-round: one fedprompt round of 4 SuperNodes through SecAgg+, in which the
client of partition 0 fails its fit (``client-failure-rate``'s seeded draw: seed 0 and rate 0.3
fail partition 0's round-1 fit, and only it), i.e. after the key and share stages, in the
masked-vector stage. SecAgg+ removes its pairwise masks from the other three clients' shares;
the global prompt must equal the same round without secagg (in process, where the same client
fails the same way) to the protocol's quantisation, the drop must be recorded under its
partition, and the protocol's bytes per stage."""

from __future__ import annotations

import numpy as np
import pytest

from fedtext import checkpoint
from fedtext.records import load_run

from ..inprocess import run
from ..unit.test_reliability import _only
from .test_reliability_runs import simulate

CFG = {"method": "fedprompt", "num-server-rounds": 1, "shots-per-class": 4, "client-test-size": 0, "eval-size": 16,
       "prompt-length": 4, "max-length": 32, "clients-per-round": 4, "model": "tiny-bert", "weights": "random",
       "seed": 0, "client-failure-rate": 0.3}


@pytest.mark.slow
def test_a_secagg_round_with_a_client_dropped_mid_round_gives_the_plain_mean(tmp_path, ray_head):
    run(CFG, tmp_path / "plain", 4)
    text = " ".join(f"{k}={v}" for k, v in CFG.items())
    proc = simulate(f"{text} secagg=true output-dir={tmp_path / 'secagg'}", ray_head, clients=4, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plain, secure = load_run(_only(tmp_path / "plain")), load_run(_only(tmp_path / "secagg"))
    assert secure["status"] == "finished", secure.get("reason")
    for record in (plain, secure):  # the same client failed in both, and only it
        rnd = record["rounds"][1]
        assert sorted(rnd["trained"]) == ["1", "2", "3"], rnd
        assert [d["client"] for d in rnd["dropped"]] == ["0"] and "injected fit failure" in rnd["dropped"][0]["reason"]
    (a,), (b,) = (checkpoint.load(_only(tmp_path / p)).global_arrays for p in ("plain", "secagg"))
    # SecAgg+ quantises n_k / W * x_k over ±clip to L levels by stochastic rounding (W = the largest claim,
    # 8 examples each here): each client's value is within one step 2 clip / L of it, the mean within
    # k * (2 clip / L) * W / sum n_k = 2 clip / L, plus float32's rounding of the two means
    step = 2 * 8.0 / 4194304
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=step + 1e-7)
    rnd = secure["rounds"][1]
    assert list(rnd["secagg_bytes"]) == ["setup", "share_keys", "collect_masked_vectors", "unmask"]
    assert rnd["bytes_up"] == sum(s["up"] for s in rnd["secagg_bytes"].values())
    # the masked vectors: three int64 prompts of 4 x 32 up (the dropped client sent none), above the plain 3 x 640 B
    assert rnd["secagg_bytes"]["collect_masked_vectors"]["up"] > 3 * 4 * 32 * 8 > plain["rounds"][1]["bytes_up"]
