"""A simulation attached to a running Ray cluster (``--ray-address``, docs/performance.md):
the test session's one Ray head (``ray_head``, tests/conftest.py: started on loopback with
``ray start --head``, stopped at the end by its process group, never by ``ray stop``, which
would stop every Ray on the machine) runs 2 rounds as a job of its own. The rest of the
scale tests are in tests/unit/test_scale.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ..conftest import REPO, _env


@pytest.mark.slow
def test_a_run_attaches_to_a_running_ray_head(tmp_path, ray_head):
    env = {**_env(), "RAY_USAGE_STATS_ENABLED": "0"}
    jobs = ("import ray; ray.init(address='{}'); import ray._private.state as s; "
            "print(len(s.jobs()), ray.cluster_resources().get('CPU'))").format(ray_head)
    before = subprocess.run([sys.executable, "-c", jobs], capture_output=True, text=True, env=env)
    assert before.returncode == 0, before.stderr[-2000:]
    run_config = ("method=bbt-fed num-server-rounds=2 shots-per-class=4 client-test-size=8 eval-size=40 "
                  "prompt-length=4 max-length=48 bbt-fed.popsize=4 bbt-fed.intrinsic-dim=20 "
                  f"bbt-fed.local-steps=2 model=tiny-bert weights=random output-dir={tmp_path}")
    proc = subprocess.run(
        [sys.executable, "-m", "simulations.simulate", "--num-supernodes", "2", "--ray-address", ray_head,
         "--run-config", run_config],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = next(tmp_path.rglob("summary.json")).parent
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    rounds = [json.loads(x) for x in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2] and rounds[2]["num_clients"] == 2
    # the simulation was a job of that head: two more jobs since (the run, this probe)
    after = subprocess.run([sys.executable, "-c", jobs], capture_output=True, text=True, env=env)
    assert after.returncode == 0, after.stderr[-2000:]
    (n_before, cpus), (n_after, _) = (x.stdout.split()[-2:] for x in (before, after))
    assert int(n_after) == int(n_before) + 2 and float(cpus) >= 1
