"""Issue 35, "resume loses nothing", through Flower's simulation engine: kill + resume
equals the uninterrupted run for FeS (pseudo labels) and FedDPGu (forgotten indices).
``FEDTEXT_NO_NODE_JOURNAL=1`` in the environment of those runs turns the journal off (how
these tests were shown to fail on the code before it). The journal's unit tests are in
tests/unit/test_resume_client_state.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedtext.server import checkpoint
from fedtext.records import load_run

from simulations.simulate import parse_pairs

from ..conftest import REPO
from ..inprocess import run

# the random 2-layer encoder: what is tested is the kill, the journal and the resume, not the weights
TINY = ("shots-per-class=4 client-test-size=8 eval-size=40 prompt-length=4 max-length=48 "
        "stale-after-s=2 model=tiny-bert weights=random")
# pace 2-3-20 labels in rounds 1 + 2, 1 + 4, ... (the authors' schedule): in round 3 of 4 only, so
# round 4 trains on round 3's pseudo labels
FES = (f"method=fes num-server-rounds=4 {TINY} clients-per-round=2 fes.gold-labels=8 fes.unlabeled-size=24 "
       "fes.max-local-steps=2 fes.paces=2-3-20 fes.neighbours=4 fes.frozen-layers=1 fes.bias-layers=1")
FEDDPG = (f"method=feddpg num-server-rounds=3 {TINY} feddpg.hidden=5 feddpg.prompts=2 feddpg.local-steps=2 feddpg.batch-size=4 "
          "feddpg.unlearn-round=2 feddpg.unlearn-client=1 feddpg.unlearn-steps=2 clients-per-eval=0")


def _simulate(run_config: str, env: dict, clients: int, kill_after: int | None = None, out: Path | None = None):
    """``simulations.simulate`` on the session's Ray head (``env``'s ``RAY_HEAD``); killed by
    SIGKILL after the checkpoint of ``kill_after`` when given (Ray then ends the run's actors)."""
    cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", str(clients), "--ray-address",
           env["RAY_HEAD"], "--run-config", f"{run_config} output-dir={out}"]
    env = {**env, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    if kill_after is None:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return _only(out)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            ckpts = list(out.glob("*/checkpoint.npz"))
            try:
                if ckpts and checkpoint.load(ckpts[0].parent).round >= kill_after:
                    break
            except (OSError, ValueError):  # being replaced
                pass
            time.sleep(0.1)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    run_dir = _only(out)
    assert checkpoint.load(run_dir).round == kill_after
    return run_dir


def _only(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


def _kill_and_resume(tmp_path, run_config: str, env: dict, clients: int, kill_after: int = 2):
    """The uninterrupted run's folder (in this process, tests/inprocess.py: the golden records
    show its numbers are Flower's), and the folder of the same run through Flower killed
    (SIGKILL) after the checkpoint of ``kill_after`` and resumed with ``resume=``.

    At most 2 clients train per round: FedAvg adds uploads in arrival order, and two
    float32 summands add the same either way, three do not (results would differ in the
    last bits between any two runs, interrupted or not)."""
    whole, _ = run(parse_pairs(run_config), tmp_path / "whole", clients)  # in process: the same numbers as Flower's
    out = tmp_path / "killed"
    run_dir = _simulate(run_config, env, clients, kill_after=kill_after, out=out)
    time.sleep(2.5)  # stale, as the resume test of test_reliability does
    _simulate(f"{run_config} resume={run_dir.name}", env, clients, out=out)
    return whole, run_dir


KEYS = ("global_accuracy", "global_loss", "bytes_up", "bytes_down", "client_accuracy", "num_clients", "dropped")


def _same_rounds(a: Path, b: Path, method_keys=()) -> list[dict]:
    ra, rb = load_run(a)["rounds"], load_run(b)["rounds"]
    assert load_run(b)["status"] == "finished" and [r["round"] for r in rb] == [r["round"] for r in ra]
    assert [r["round"] for r in ra] == list(range(load_run(a)["config"]["config"]["num-server-rounds"] + 1))
    for x, y in zip(ra, rb, strict=True):
        want = {k: x.get(k) for k in KEYS} | {k: x["method_metrics"].get(k) for k in method_keys}
        got = {k: y.get(k) for k in KEYS} | {k: y["method_metrics"].get(k) for k in method_keys}
        assert got == want, x["round"]
    return rb


@pytest.mark.slow
def test_fes_killed_and_resumed_keeps_its_pseudo_labels(tmp_path, own_processes, ray_head):
    """FeS labels in round 3 only (pace 2-3-20: rounds 1 + 2k); killed after round 3's checkpoint
    and resumed, round 4 trains on round 3's pseudo labels as the uninterrupted run does
    (without the journal: 0 pseudo labels in round 4, another accuracy and loss)."""
    env, _ = own_processes
    whole, resumed = _kill_and_resume(tmp_path, FES, {**env, "RAY_HEAD": ray_head}, clients=3, kill_after=3)
    rounds = _same_rounds(whole, resumed, ("pseudo_labels", "label_clients", "train_clients", "labelled_clients"))
    assert rounds[3]["method_metrics"]["label_clients"] > 0 and rounds[2]["method_metrics"]["label_clients"] == 0
    assert rounds[4]["method_metrics"]["pseudo_labels"] > 0 and rounds[4]["method_metrics"]["label_clients"] == 0
    assert np.array_equal(checkpoint.load(whole).global_arrays[0], checkpoint.load(resumed).global_arrays[0])
    journal = resumed / "node-state"
    assert journal.is_dir() and all(json.loads(p.read_text())["format"] == 1 for p in journal.glob("p*/round-*.json"))


@pytest.mark.slow
def test_feddpg_unlearning_killed_and_resumed_never_trains_on_the_forgotten_examples(tmp_path, own_processes,
                                                                                     ray_head):
    """FedDPGu, 2 clients: client 1 unlearns in round 2; killed after round 2's checkpoint and resumed,
    round 3 leaves its forgotten examples out as the uninterrupted run does (without the
    journal it trains on them again: another global G)."""
    env, _ = own_processes
    whole, resumed = _kill_and_resume(tmp_path, FEDDPG, {**env, "RAY_HEAD": ray_head}, clients=2)
    _same_rounds(whole, resumed, ("unlearned_client", "forget_examples"))
    a, b = checkpoint.load(whole).global_arrays, checkpoint.load(resumed).global_arrays
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    entry = json.loads((resumed / "node-state" / "p1" / "round-2.json").read_text())
    assert entry["records"]["feddpg.forgotten"]["indices"]["value"]  # the forgotten indices, as JSON
