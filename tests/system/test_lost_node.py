"""A SuperNode killed mid-run is a runtime drop, not a configuration error (issue 35).

One SuperLink and three SuperNodes on loopback (insecure: this is about the run, not the
transport), fedprompt with ``clients-per-round=3``. After round 1 is recorded, the test
kills SuperNode 2 (its own process group, by PID). Before: the next sampling raised
"configuration error: clients-per-round=3 exceeds the 2 participant clients" and the run
failed. Now: the round that had sent it a message records its timeout as a failed client,
the rounds after it go on with the two nodes left (the shortfall is a recorded drop), and
the run finishes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulations.deployment import free_port, listening

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not all((BIN / t).exists() for t in ("flwr", "flower-superlink", "flower-supernode")),
                       reason="needs Flower's CLIs"),
]


def test_a_supernode_killed_mid_run_is_dropped_and_the_run_finishes(tmp_path):
    home, runs = tmp_path / "flwr-home", tmp_path / "runs"
    home.mkdir()
    env = {**os.environ, "FLWR_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "lab"\n\n[superlink.lab]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
    started: list[subprocess.Popen] = []

    def start(name: str, cmd: list[str]) -> subprocess.Popen:
        log = (tmp_path / f"{name}.log").open("w")
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        return proc

    try:
        start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
                            "--disable-runtime-dependency-installation"])
        deadline = time.time() + 60
        while not listening(port):
            assert time.time() < deadline, (tmp_path / "superlink.log").read_text()[-2000:]
            time.sleep(0.5)
        nodes = [start(f"supernode-{i}", ["bash", "deploy/supernode.sh", "--partition", str(i), "--num-partitions",
                                          "3", "--superlink", f"127.0.0.1:{port}", "--insecure",
                                          "--port", str(free_port())]) for i in range(3)]
        cfg = (f"method='fedprompt' num-server-rounds=2 clients-per-round=3 eval-size=40 client-test-size=8 "
               f"eval-every=2 round-timeout-s=30 fedprompt.local-steps=2 model='tiny-bert' weights='random' "
               f"output-dir='{runs}'")  # the random 2-layer encoder: a lost node is the engine's, not the weights'
        run = subprocess.Popen([str(BIN / "flwr"), "run", ".", "lab", "--stream", "--run-config", cfg], cwd=REPO,
                               env=env, stdout=(tmp_path / "flwr-run.log").open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
        started.append(run)
        deadline = time.time() + 400
        while not list(runs.glob("*/rounds.jsonl")) or len(next(runs.glob("*/rounds.jsonl")).read_text()
                                                           .splitlines()) < 2:
            assert time.time() < deadline and run.poll() is None, (tmp_path / "flwr-run.log").read_text()[-3000:]
            time.sleep(1)
        os.killpg(nodes[2].pid, signal.SIGKILL)  # SuperNode 2 dies after round 1
        run.wait(timeout=500)
        (record,) = [p.parent for p in runs.glob("*/config.json")]
        summary = json.loads((record / "summary.json").read_text())
        assert summary["status"] == "finished", summary
        rounds = [json.loads(line) for line in (record / "rounds.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rounds] == [0, 1, 2]
        assert rounds[1]["num_clients"] == 3 and rounds[1]["dropped"] == []
        later = [d for r in rounds[2:] for d in r["dropped"]]
        assert later, rounds  # the lost node shows: a failed (timed-out) client or a shortfall
        assert all(d["client"] in ("2", "missing") for d in later), later
        # the kill lands once round 1 is recorded, but on a busy machine node 2 can still answer round 2's fit
        # before it dies (CI's rehearsal of 2026-11-29: 3 fits, then node 2's evaluate failed): either its fit
        # is missing, or its fit counted and only its evaluate is dropped
        for r in rounds[2:]:
            fit_lost = r["num_clients"] == 2
            only_evaluate_lost = r["num_clients"] == 3 and all(d["reason"].startswith("evaluate failed")
                                                               for d in r["dropped"])
            assert fit_lost or only_evaluate_lost, r
        assert "configuration error" not in (tmp_path / "flwr-run.log").read_text()
    finally:
        for proc in started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
