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

import pytest

from ..conftest import REPO, _env, _only_run
from .flower_launch import RAY_ADDRESS_VAR

TINY = ("num-server-rounds=2 shots-per-class=4 client-test-size=8 eval-size=40 prompt-length=4 max-length=48 "
        "model=tiny-bert weights=random")


@pytest.mark.slow
def test_compare_runner_writes_one_table(tmp_path, ray_head):
    exp = tmp_path / "exp.toml"
    shared = {**{k: v if v.replace(".", "").isdigit() else f'"{v}"' for k, v in (kv.split("=") for kv in TINY.split())},
              "num-server-rounds": "1"}
    exp.write_text(
        'methods = ["fedprompt", "bbt-fed"]\nseeds = [0]\nnum-supernodes = 2\n[run-config]\n'
        + "\n".join(f"{k} = {v}" for k, v in shared.items())
        + "\nfedprompt.local-steps = 2\nbbt-fed.local-steps = 2"
        + '\n[method.bbt-fed]\nbbt-fed.popsize = 4\nbbt-fed.intrinsic-dim = 20\n'
    )
    proc = subprocess.run([sys.executable, "-m", "simulations.compare", str(exp), "--out", str(tmp_path / "out"),
                           "--ray-address", ray_head],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| fedprompt | demo | iid | 1 |" in table and "| bbt-fed | demo | iid | 1 |" in table
    csv = (tmp_path / "out" / "table.csv").read_text().splitlines()
    assert len(csv) == 3 and "KB up / client-round" in csv[0]


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
