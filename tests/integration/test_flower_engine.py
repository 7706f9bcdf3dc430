"""Flower's simulation engine itself (Ray): the compare runner's fresh process per run, and
faulty clients whose uploads cross Ray as any client's do. Every method's own rounds run in
this process: tests/unit/test_methods_rounds.py; ``flwr run .``: tests/system/test_flwr_run.py.

Every run attaches to the session's one Ray head (``ray_head``, tests/conftest.py) and uses
the random 2-layer encoder (``model=tiny-bert weights=random``): what is tested is the engine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fedtext.server import checkpoint
from fedtext.records import load_run

from ..conftest import REPO, _env, _only_run
from .flower_launch import RAY_ADDRESS_VAR

TINY = ("num-server-rounds=2 shots-per-class=4 client-test-size=8 eval-size=40 prompt-length=4 max-length=48 "
        "model=tiny-bert weights=random")


@pytest.mark.slow
def test_compare_runner_writes_one_table_and_secagg_gives_the_plain_mean_with_a_client_dropped(tmp_path, ray_head):
    """The compare runner, a fresh process per run, writes one table; its two runs are issue 59's
    SecAgg+ check: fedprompt on 4 SuperNodes, one round, plain and with ``secagg=true``, in both of
    which the client of partition 0 fails its fit (``client-failure-rate``'s seeded draw: seed 0 at
    0.3 fails partition 0's round-1 fit and only it); under SecAgg+ that is after the key stages,
    in the masked-vector stage, and its masks are removed from the others' shares. The secure
    run's global prompt equals the plain run's to one quantisation step, both record the drop,
    and the table's bytes per client-round carry the protocol's overhead."""
    exp = tmp_path / "exp.toml"
    shared = {**{k: v if v.replace(".", "").isdigit() else f'"{v}"' for k, v in (kv.split("=") for kv in TINY.split())},
              "num-server-rounds": "1", "client-test-size": "0", "clients-per-round": "4", "seed": "0",
              "client-failure-rate": "0.3"}
    exp.write_text(
        'methods = ["fedprompt", "fedprompt-secagg"]\nseeds = [0]\nnum-supernodes = 4\n[run-config]\n'
        + "\n".join(f"{k} = {v}" for k, v in shared.items())
        + "\nfedprompt.local-steps = 2"
        + '\n[method.fedprompt-secagg]\nmethod = "fedprompt"\nsecagg = true\n'
    )
    proc = subprocess.run([sys.executable, "-m", "simulations.compare", str(exp), "--out", str(tmp_path / "out"),
                           "--ray-address", ray_head],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| fedprompt | demo | iid | 1 |" in table and "| fedprompt-secagg | demo | iid | 1 |" in table
    csv = (tmp_path / "out" / "table.csv").read_text().splitlines()
    assert len(csv) == 3 and "KB up / client-round" in csv[0]
    runs = {json.loads((p / "config.json").read_text())["config"].get("secagg", False): p
            for p in (tmp_path / "out" / "runs").iterdir() if p.is_dir()}
    plain, secure = (load_run(runs[flag]) for flag in (False, True))
    for record in (plain, secure):  # the same client failed in both, and only it
        rnd = record["rounds"][1]
        assert record["status"] == "finished" and sorted(rnd["trained"]) == ["1", "2", "3"], rnd
        assert [d["client"] for d in rnd["dropped"]] == ["0"] and "injected fit failure" in rnd["dropped"][0]["reason"]
    (a,), (b,) = (checkpoint.load(runs[flag]).global_arrays for flag in (False, True))
    # SecAgg+ quantises n_k / W * x_k over ±clip to L levels by stochastic rounding (W = the largest claim:
    # the clients' equal 8 examples): each value within one step 2 clip / L, the mean too, plus float32 rounding
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=2 * 8.0 / 4194304 + 1e-7)
    rnd = secure["rounds"][1]
    assert list(rnd["secagg_bytes"]) == ["setup", "share_keys", "collect_masked_vectors", "unmask"]
    assert rnd["bytes_up"] == sum(s["up"] for s in rnd["secagg_bytes"].values())
    assert rnd["bytes_up_per_client"] > 2 * plain["rounds"][1]["bytes_up_per_client"]  # masked int64 + keys + shares


def test_compare_runner_rejects_a_bad_experiment(tmp_path):
    exp = tmp_path / "bad.toml"
    exp.write_text('methods = ["fedsgd"]\n')
    proc = subprocess.run([sys.executable, "-m", "simulations.compare", str(exp)], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown method 'fedsgd'" in proc.stderr


@pytest.mark.slow
def test_nan_and_wrong_shape_clients_are_dropped_through_flower(tmp_path, ray_head):
    """fedbpt, 3 clients, 2 rounds: clients 0 (NaN) and 1 (wrong shape) are dropped
    with a logged reason in every round; the rounds complete on client 2 alone."""
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "integration" / "fault_injection.py"), str(tmp_path)],
                          cwd=REPO, env={**_env(), RAY_ADDRESS_VAR: ray_head}, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    run = _only_run(tmp_path)
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    for r in rounds[1:]:
        assert r["num_clients"] == 1
        reasons = {d["client"]: d["reason"] for d in r["dropped"]}
        assert "non-finite" in reasons["0"] and "shape (20,), expected (23,)" in reasons["1"]
        assert r["global_accuracy"] is not None
    assert "dropped client 0" in out and "dropped client 1" in out
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
