"""A simulation attached to a running Ray cluster: the test starts a Ray head on loopback
(``ray start --head``), runs 2 rounds on it with ``--ray-address`` and stops exactly that
head, by process group (docs/performance.md). The rest of the scale tests are in
tests/unit/test_scale.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from simulations.deployment import free_port as _free_port

from ..conftest import REPO


@pytest.mark.slow
def test_a_run_attaches_to_a_running_ray_head_and_the_test_stops_only_that_head(tmp_path):
    ray = Path(sys.executable).parent / "ray"
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
           "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
         "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        run_config = ("method=bbt-fed num-server-rounds=2 shots-per-class=4 client-test-size=8 eval-size=40 "
                      "prompt-length=4 max-length=48 bbt-fed.popsize=4 bbt-fed.intrinsic-dim=20 "
                      f"bbt-fed.local-steps=2 output-dir={tmp_path}")
        deadline = time.time() + 120
        while True:  # the head is ready when a driver can attach
            probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address='127.0.0.1:{port}'); "
                                    "print(ray.cluster_resources().get('CPU'))"],
                                   capture_output=True, text=True, env=env)
            if probe.returncode == 0 or time.time() > deadline:
                break
            time.sleep(2)
        assert probe.returncode == 0, probe.stderr[-2000:]
        assert probe.stdout.strip().endswith("2.0")
        proc = subprocess.run(
            [sys.executable, "-m", "simulations.simulate", "--num-supernodes", "2", "--ray-address",
             f"127.0.0.1:{port}", "--run-config", run_config],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        run = next(tmp_path.rglob("summary.json")).parent
        assert json.loads((run / "summary.json").read_text())["status"] == "finished"
        rounds = [json.loads(x) for x in (run / "rounds.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rounds] == [0, 1, 2] and rounds[2]["num_clients"] == 2
        # the simulation was a job of that head (jobs: the readiness probe, the run, this probe)
        jobs = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address='127.0.0.1:{port}'); "
                               "import ray._private.state as s; print(len(s.jobs()))"],
                              capture_output=True, text=True, env=env)
        assert jobs.returncode == 0 and int(jobs.stdout.strip().splitlines()[-1]) == 3, jobs.stdout + jobs.stderr
    finally:
        # `ray stop` would stop every Ray on the machine: stop exactly the head we started,
        # by PID (its process group holds the GCS, raylet and workers it spawned).
        pgid = os.getpgid(head.pid)
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, 9)
            head.wait()
        time.sleep(2)
        left = [p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pgid]
        if left:
            os.killpg(pgid, 9)
        assert not left, f"processes of the Ray head still running after it stopped: {left}"


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
