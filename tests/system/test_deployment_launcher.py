"""``python -m simulations.deployment``: a run through a real SuperLink and SuperNodes on
loopback (no Ray), as the GPU check of 2026-11-26 ran it, of the app bundle (FAB) ``flwr build``
makes (its contents: tests/system/test_fab.py), and every process it started is gone when it
returns."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from ..conftest import REPO, _env, processes_with_token, skip_without_recorded_data
from fedtext.node.service import WARM_CLIENTAPPS
from fedtext.node.warm_exec import WARM_START
from simulations.deployment import NODES
from .fab import flwr_build

BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not all((BIN / t).exists() for t in ("flwr", "flower-superlink", "flower-supernode")),
                       reason="needs Flower's CLIs"),
]


def test_the_launcher_runs_a_built_fab_and_a_recorded_config_on_two_supernodes_and_leaves_no_process(
        tmp_path, own_processes):
    """``flwr build``, then the launcher submits that FAB (``--app``) with a recorded run's
    config: the SuperLink runs the bundle's very bytes, and the record names its code by them."""
    _, token = own_processes  # the fixture stops, by PID, whatever carries the token afterwards
    env = {**_env(), "FEDTEXT_TEST_TOKEN": token}
    fab, _ = flwr_build(tmp_path / "build")
    record = next((REPO / "simulations/results/fedbpt_reference_sst2_pilot/runs").glob("*-fedbpt-reference-dir05"))
    skip_without_recorded_data(record)
    out = tmp_path / "runs"
    tiny = ("num-server-rounds=1 clients-per-round=2 eval-size=24 client-test-size=8 eval-every=1 "
            "fedbpt.intrinsic-dim=20 fedbpt.local-steps=1 fedbpt.popsize=4 prompt-length=5 device=cpu run-name=replay "
            "model=tiny-bert weights=random")  # the random 2-layer encoder: the launcher and the FAB are tested
    done = subprocess.run([sys.executable, "-m", "simulations.deployment", "--num-supernodes", "2", "--from-record",
                           str(record), "--run-config", tiny, "--output-dir", str(out), "--timeout-s", "400",
                           "--app", str(fab)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    flwr_log = out / "deployment-logs" / "flwr-run.log"  # absent when the launcher stops before `flwr run`
    assert done.returncode == 0, done.stderr[-3000:] + (flwr_log.read_text()[-3000:] if flwr_log.exists() else "")
    (run,) = [p.parent for p in out.glob("*/config.json")]
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["fedbpt.server-step"] == "reference"  # from the record
    assert config["config"]["partition"] == "dirichlet" and config["config"]["run-name"] == "replay"
    prov = config["provenance"]
    assert prov["nodes_at_start"] == 2
    # the ServerApp ran from Flower's installed copy of the FAB (no git checkout there): the
    # record names the code by the bundle's SHA-256, the one flwr build wrote, and its version
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert prov["fab_hash"] == hashlib.sha256(fab.read_bytes()).hexdigest(), prov
    assert (prov["fab_id"], prov["fab_version"]) == ("fedtext/fedtext", project["version"])
    assert prov["code_origin"] == "fab" and prov["git_commit"] is None
    assert prov["versions"]["fedtext"] == project["version"] and prov["versions"]["flwr"] is not None
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1] and rounds[1]["num_clients"] == 2 and rounds[1]["dropped"] == []
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    logs = out / "deployment-logs"
    assert {p.name for p in logs.iterdir()} == {
        "superlink.log", "supernode-0.log", "supernode-1.log", "flwr-run.log", NODES}
    # how the node service made its warm ClientApps, the defaults resolved (the study reads this)
    assert json.loads((logs / NODES).read_text()) == {
        "node_service": True, "warm_clientapps": WARM_CLIENTAPPS, "warm_start": WARM_START}
    assert processes_with_token(token) == []


def test_stop_all_also_stops_a_child_that_left_its_process_group(tmp_path):
    """A SuperNode's ClientApp or the SuperLink's ServerApp may run in a session of its own:
    killing the started process's group misses it; the launch token finds it, by PID."""
    from simulations.deployment import Processes, processes_with

    procs = Processes(_env(), tmp_path)
    procs.start("detached", ["bash", "-c", "setsid sleep 120 & echo started; wait"])
    deadline = time.time() + 10
    while len(processes_with(procs.token)) < 2 and time.time() < deadline:
        time.sleep(0.1)
    assert len(processes_with(procs.token)) == 2  # bash and the setsid'd sleep
    procs.stop_all()
    assert processes_with(procs.token) == []


def test_sigterm_to_the_launcher_stops_every_process_it_started(tmp_path, own_processes):
    """``timeout N python -m simulations.deployment`` sends SIGTERM: Python's default ends the
    launcher without its clean-up, and the SuperLink, SuperNodes and ServerApp ran on (105
    processes after a timed-out GPU rehearsal, 2026-11-26). Fails without the handler."""
    _, token = own_processes  # the fixture stops, by PID, whatever carries the token afterwards
    env = {**_env(), "FEDTEXT_TEST_TOKEN": token}
    out = tmp_path / "runs"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "simulations.deployment", "--num-supernodes", "2", "--output-dir", str(out),
         "--timeout-s", "600", "--run-config",
         "method=fedprompt num-server-rounds=50 eval-size=24 device=cpu model=tiny-bert weights=random"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 180
        # the SuperLink, 2 SuperNodes and `flwr run` are up once the launcher has 4 children
        while len(processes_with_token(token)) < 5 and time.time() < deadline and launcher.poll() is None:
            time.sleep(0.5)
        assert launcher.poll() is None and len(processes_with_token(token)) >= 5
        launcher.terminate()
        assert launcher.wait(timeout=90) == 128 + 15
        assert processes_with_token(token) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_a_node_service_killed_mid_round_costs_no_round_and_changes_no_record(tmp_path, own_processes):
    """Each SuperNode runs behind fedtext's node service (the launcher's default). Service 0 is
    killed while it computes a round-1 fit: that message is answered in the ClientApp's own
    process, the supervisor starts the service again for the next, and the run's records equal
    those of the same run in the server's in-process round loop but for the machine's fields."""
    from simulations.simulate import parse_pairs
    from tests.inprocess import run as inprocess_run
    from tests.unit.test_node_service import learning_fields

    _, token = own_processes
    env = {**_env(), "FEDTEXT_TEST_TOKEN": token}
    config = ("method=bbt-fed num-server-rounds=2 eval-size=24 client-test-size=8 shots-per-class=4 "
              "bbt-fed.local-steps=20 bbt-fed.popsize=20 bbt-fed.intrinsic-dim=20 prompt-length=5 max-length=32 "
              "model=tiny-bert weights=random seed=0")
    out, logs = tmp_path / "runs", tmp_path / "logs"
    launcher = subprocess.Popen([sys.executable, "-m", "simulations.deployment", "--num-supernodes", "2",
                                 "--run-config", config, "--output-dir", str(out), "--logs", str(logs),
                                 "--timeout-s", "400"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    killed = None
    try:
        deadline = time.time() + 300
        while killed is None and time.time() < deadline and launcher.poll() is None:
            rounds = list(out.glob("*/rounds.jsonl"))
            warmed = sum("warmed up for run" in p.read_text() for p in logs.glob("supernode-*.log"))
            # both services have built their client after the run's first message (their warm-up,
            # fedtext.node.service.warm_up): what a service computes next is a round's fit or evaluate
            if rounds and rounds[0].read_text().count("\n") >= 1 and warmed == 2:
                services = _services(token)
                if services:
                    pid = min(services)
                    ticks = _cpu_ticks(pid)
                    while time.time() < deadline and _alive(pid):
                        time.sleep(0.02)
                        if _cpu_ticks(pid) > ticks + 2:  # computing a request
                            os.kill(pid, signal.SIGKILL)
                            killed = pid
                            break
            time.sleep(0.05)
        output = launcher.communicate(timeout=400)[0]
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert killed is not None, "no node service was seen computing"
    assert launcher.returncode == 0, output[-3000:]
    node_logs = "".join(p.read_text() for p in logs.glob("supernode-*.log"))
    assert "did not answer" in node_logs and "restart 1" in node_logs  # the fallback answered; the service came back
    (run,) = [p.parent for p in out.glob("*/config.json")]
    served = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in served] == [0, 1, 2] and all(r["dropped"] == [] for r in served[1:])
    _, alone = inprocess_run(parse_pairs(config), tmp_path / "inprocess", 2)
    assert learning_fields(served) == learning_fields(alone)
    assert processes_with_token(token) == []


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _services(token: str) -> list[int]:
    """This test's node services: processes carrying its token whose command line serves a socket."""
    found = []
    for pid in processes_with_token(token):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"fedtext.node.service" in cmd and b"--serve" in cmd:
            found.append(pid)
    return found


def _launch(config: str, out: Path, logs: Path, env: dict[str, str], *flags: str,
            timeout_s: int = 400) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "simulations.deployment", "--num-supernodes", "2", *flags,
                             "--run-config", config, "--output-dir", str(out), "--logs", str(logs),
                             "--timeout-s", str(timeout_s)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _handed(log: Path) -> list[tuple[str, int]]:
    """(task id, process) of every task a SuperNode's warm pool handed out, in order."""
    import re

    text = log.read_text() if log.exists() else ""
    return [(t, int(p)) for t, p in re.findall(r"fedtext: task (\d+) to warm ClientApp process (\d+)", text)]


WARM_CONFIG = ("method=bbt-fed num-server-rounds=3 eval-size=24 client-test-size=8 shots-per-class=4 "
               "bbt-fed.local-steps=20 bbt-fed.popsize=20 bbt-fed.intrinsic-dim=20 prompt-length=5 max-length=32 "
               "model=tiny-bert weights=random seed=0")


# The cold run (Flower's flwr-clientapp per message) pays a fresh process, torch's import and the client's
# build for every message: one round of it shows the path as three do (CI's rehearsal of 2026-11-30: the
# cold and warm runs of 3 rounds took 101 s together)
COLD_CONFIG = WARM_CONFIG.replace("num-server-rounds=3", "num-server-rounds=1")


def _served_like_inprocess(folders: list[Path], config: str, tmp_path: Path) -> None:
    """Each run under ``folders`` recorded every round of ``config`` with no drop and the in-process
    round loop's learning fields (everything but the machine's)."""
    from simulations.simulate import parse_pairs
    from tests.inprocess import run as inprocess_run
    from tests.unit.test_node_service import learning_fields

    pairs = parse_pairs(config)
    _, alone = inprocess_run(pairs, tmp_path / f"inprocess-{pairs['num-server-rounds']}", 2)
    for folder in folders:
        (run,) = [p.parent for p in folder.glob("*/config.json")]
        served = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
        assert [r["round"] for r in served] == list(range(int(pairs["num-server-rounds"]) + 1)), folder.name
        assert all(r["dropped"] == [] for r in served[1:]), folder.name
        assert learning_fields(served) == learning_fields(alone), folder.name


def test_warm_clientapps_change_no_record_and_keep_the_token_off_every_command_line(tmp_path, own_processes):
    """The same run cold (``--warm-clientapps 0``: Flower's flwr-clientapp per message) and warm
    (the default, fedtext.node.warm_exec): both runs' records equal the in-process round loop's but for
    the machine's fields, every warm task went to a warm process, and no node-side process had its
    task token on its command line."""
    _, token = own_processes
    env = {**_env(), "FEDTEXT_TEST_TOKEN": token}
    cold = _launch(COLD_CONFIG, tmp_path / "cold", tmp_path / "cold-logs", env, "--warm-clientapps", "0")
    output = cold.communicate(timeout=450)[0]
    assert cold.returncode == 0, output[-3000:]
    assert not any(_handed(p) for p in (tmp_path / "cold-logs").glob("supernode-*.log"))  # no warm process

    out, logs = tmp_path / "warm", tmp_path / "warm-logs"
    warm, commands = _launch(WARM_CONFIG, out, logs, env), set()
    try:
        deadline = time.time() + 300
        while warm.poll() is None and time.time() < deadline:  # the node-side processes of rounds 0 and 1
            commands |= {tuple(_cmdline(pid)) for pid in processes_with_token(token)}
            rounds = list(out.glob("*/rounds.jsonl"))
            if rounds and rounds[0].read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        output = warm.communicate(timeout=400)[0]
    finally:
        if warm.poll() is None:
            warm.kill()
    # a node's task token is never on a command line: the warm processes take it on stdin (Flower's cold
    # flwr-clientapp has --token T; the SuperLink's flwr-serverapp, not a node's process, still does). Every
    # process of the run but the ServerApp's is checked, whichever way the warm ones were made: a spawned one
    # has `python -m fedtext.node.warm_exec worker ... --token-stdin`, a forked one the fork server's command
    node_side = [c for c in commands if not any(a.endswith("flwr-serverapp") for a in c)]
    assert not any(a == "--token" or a.startswith("--token=") for c in node_side for a in c), commands
    made = {"spawn": "--token-stdin", "fork": "from multiprocessing.forkserver import main"}[WARM_START]
    assert any(made in a for c in node_side for a in c), (WARM_START, commands)  # the warm processes were seen
    assert warm.returncode == 0, output[-3000:]
    assert _handed(logs / "supernode-0.log") and "to a cold" not in (logs / "supernode-0.log").read_text()
    _served_like_inprocess([tmp_path / "cold"], COLD_CONFIG, tmp_path)
    _served_like_inprocess([out], WARM_CONFIG, tmp_path)
    assert processes_with_token(token) == []


def test_a_warm_process_killed_with_its_task_fails_that_task_and_the_round_goes_on(tmp_path, own_processes):
    """The warm run with the ClientApp process that took a round-2 task SIGKILLed at once (between
    any two of run_clientapp's calls): the pool finishes the task's start with its token
    (fedtext.node.warm_exec.fail_killed_task), Flower's expiry answers it with its error reply, the
    ServerApp counts one failure and the run ends normally. Before the pool did that, a kill between
    ``PullTaskInput`` and ``PullMessages`` hung the run until its timeout (issue 68). The run's own
    limit is 240 s: a healthy run takes under a minute, the expiry 2 x 30 s after the last heartbeat."""
    _, token = own_processes
    env = {**_env(), "FEDTEXT_TEST_TOKEN": token}
    out, logs = tmp_path / "warm", tmp_path / "warm-logs"
    warm, killed = _launch(WARM_CONFIG, out, logs, env, timeout_s=240), None
    try:
        deadline = time.time() + 240
        while killed is None and time.time() < deadline and warm.poll() is None:
            rounds = list(out.glob("*/rounds.jsonl"))
            if rounds and rounds[0].read_text().count("\n") >= 2:  # rounds 0 and 1 recorded: round 2 is next
                seen = len(_handed(logs / "supernode-0.log"))
                while killed is None and time.time() < deadline and warm.poll() is None:
                    handed = _handed(logs / "supernode-0.log")
                    if len(handed) > seen:
                        os.kill(handed[-1][1], signal.SIGKILL)  # it has its token: the task is underway
                        killed = handed[-1]
                    time.sleep(0.01)
            time.sleep(0.05)
        output = warm.communicate(timeout=300)[0]
    finally:
        if warm.poll() is None:
            warm.kill()
            warm.wait()
    assert killed is not None, "no warm ClientApp process was seen taking a task"
    assert processes_with_token(token) == []
    assert warm.returncode == 0, output[-3000:]
    node_log = (logs / "supernode-0.log").read_text()
    assert f"warm ClientApp process {killed[1]} was killed (signal 9) with task {killed[0]}" in node_log
    assert "to a cold" not in node_log
    records = [json.loads(x) for x in next(out.glob("*/rounds.jsonl")).read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1, 2, 3]  # the run went on past the failed task
    failed = [r["round"] for r in records if r["client_failures"]]
    assert failed == [2] and records[2]["client_failures"] == 1, [(r["round"], r["client_failures"]) for r in records]
