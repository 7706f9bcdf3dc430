"""Shared fixtures and helpers of the tiers (tests/unit, tests/integration,
tests/system, tests/docs): the offline backbone is loaded once per test session; each test is
marked ``unit``, ``integration``, ``system`` or ``docs`` by its folder."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch a hub
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
if "MUTANT_UNDER_TEST" in os.environ:
    # Under mutmut (tools/mutation.py), which forks a worker per mutant from a process that
    # already ran tests: a fork of a process whose OpenMP pool exists hangs on a futex at its
    # first parallel op. One intra-op thread never starts that pool.
    import torch

    torch.set_num_threads(1)

    @pytest.fixture(autouse=True)
    def _no_cache_across_tests():
        """mutmut records, in one session, which tests call each function and later runs only those
        on its mutants: a test that read what an earlier test cached (FedDLS's SVD of e(V), its codec)
        would not be recorded, and its checks would never meet those functions' mutants."""
        codecs = sys.modules.get("fedtext.methods.feddls.codecs")
        if codecs is not None:
            codecs._SVD_CACHE.clear()
            codecs.codec_for.cache_clear()
        yield

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
# tests/<tier>/: unit (math on mock results, configs, records, docs; no Ray, no Flower
# simulation, no subprocess of its own, no network, no browser), integration (Flower
# simulation runs, golden records, resume, fault injection, anything that starts a
# subprocess), system (flwr run, the TLS deployment, a lost SuperNode, a Ray head, the
# dashboard in a browser), docs (README and docs/ complete and true: every registered method's
# page and committed record, README's table = `python -m simulations.guide`; apart from the
# unit tier so that a new method's unit tests pass before its benchmark is committed).
# Each test gets its tier's marker: -m unit, -m "not system", ...
TIERS = ("unit", "integration", "system", "docs")
SHARED_DATA = Path(os.environ.get("FEDTEXT_DATA", REPO.parent / "shared" / "data"))


def skip_without_recorded_data(record: Path) -> None:
    """Skip, saying why, a test that replays a committed record whose dataset (a path relative
    to the checkout, ``../shared/data/<name>``) is not beside this checkout, as in a user's
    clone: the benchmark data travels with the project's machines, not with the repository."""
    import json

    dataset = json.loads((record / "config.json").read_text())["config"]["dataset"]
    if not (REPO / dataset).is_dir():
        pytest.skip(f"the record's dataset {dataset} is not beside this checkout (a clone without ../shared/data)")


def _env() -> dict[str, str]:
    """The environment of a subprocess that runs fedtext: offline, no runtime installs, this
    interpreter's scripts (``flwr``, ``ray``) first on PATH."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _only_run(root: Path) -> Path:
    """The one run folder (the folder of a ``config.json``) under ``root``."""
    runs = [p.parent for p in root.rglob("config.json")]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.fixture(scope="session")
def backbone():
    from fedtext.backbone import get_backbone

    return get_backbone("all-MiniLM-L6-v2", "similarity", "demo", 64)


@pytest.fixture(scope="session")
def demo():
    from fedtext.learning.data import make_demo

    return make_demo()


def processes_with_token(token: str) -> list[int]:
    """PIDs whose environment holds ``FEDTEXT_TEST_TOKEN=<token>``: the processes a test
    started, however detached (``flwr run`` spawns a SuperLink in its own session)."""
    from simulations.deployment import processes_with

    return processes_with(token, "FEDTEXT_TEST_TOKEN")


@pytest.fixture
def own_processes():
    """``(env, token)`` for the subprocesses of one test; afterwards every process still
    carrying the token is stopped (SIGTERM, then SIGKILL after 10 s), by PID, and only those."""
    token = uuid.uuid4().hex
    env = {**os.environ, "FEDTEXT_TEST_TOKEN": token}
    yield env, token
    pids = processes_with_token(token)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    while time.time() < deadline and processes_with_token(token):
        time.sleep(0.2)
    for pid in processes_with_token(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def ray_head():
    """The address of one Ray head for every Flower simulation of the test session
    (``simulations.simulate --ray-address``), started on first use: each simulation attaches
    to it instead of starting a Ray instance of its own (seconds per run on 2 cores). Each run
    is still a job of its own, with its own client actors. As many CPUs as the machine has,
    as a run's private instance would; loopback only; stopped at the end by its process group
    (``ray stop`` would stop every Ray on the machine)."""
    import subprocess
    import tempfile

    from simulations.deployment import free_port

    ray = Path(sys.executable).parent / "ray"
    port = free_port()
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    env = {**_env(), "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--num-cpus={os.cpu_count() or 2}", "--include-dashboard=false", f"--temp-dir={temp}",
         "--disable-usage-stats"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:  # ready when a driver can attach
            try:
                probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address='{address}')"],
                                       capture_output=True, text=True, env=env, timeout=60)
            except subprocess.TimeoutExpired as exc:
                probe = subprocess.CompletedProcess(exc.cmd, 1, "", f"ray.init timed out after {exc.timeout} s")
            if probe.returncode == 0 or time.time() > deadline or head.poll() is not None:
                break
            time.sleep(1)
        assert probe.returncode == 0, f"the session's Ray head did not start: {probe.stderr[-2000:]}"
        yield address
    finally:
        pgid = head.pid  # start_new_session: the head leads its own process group, even once it has exited
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _kill_group(pgid)
            head.wait()
        time.sleep(2)
        left = _live_members(pgid)
        _kill_group(pgid)
        assert not left, f"processes of the session's Ray head still running after it stopped: {left}"


def _live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (zombies waiting for their reaper excluded)."""
    live = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ... after "(comm)"
            if int(fields[2]) == pgid and fields[0] != "Z":
                live.append(int(entry))
    return live


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# README's test command runs two pytest-xdist workers (``-n 2``) scheduled by ``RunsTogether``. Every test that
# starts processes, Ray or a browser (the integration and system tiers) is in one of two work units, each run by
# one worker, one test after another, the two units at the same time: ``RAY_GROUP``, the tests that run Flower's
# simulation on Ray (the session's one Ray head, ``ray_head``, or ``flwr run``'s own), and ``RUNS_GROUP``, the rest
# (real SuperLinks and SuperNodes, nginx, browsers, fresh interpreters; ports are free ones, ``free_port``, and
# every process is found by its test's token). So one Ray head runs at a time and the deployment's package-scoped
# fixture starts once, while the two kinds of runs, which mostly wait, overlap; a worker done with its unit takes
# the unit and docs tests, one unit each. Before, both kinds were one unit: its worker ran ~17.5 of the suite's
# ~23.5 minutes of tests one after another (docs/timings.json of 2026-12-01) while the other worker finished the
# unit tier in ~6 and sat idle.
# Not xdist's own ``--dist loadgroup``: it groups by appending "@group" to ``item._nodeid``, which pytest 9.2
# no longer reads (a node id is derived from ``item._id``), so every test became its own unit and the runs
# spread over both workers.
RUNS_GROUP = "runs"
RAY_GROUP = "runs-ray"
RUNS_TIERS = ("integration", "system")
RAY_MODULES = (  # the modules whose tests run Flower's simulation on Ray; a test using ``ray_head`` elsewhere is refused
    "tests/integration/test_flower_engine.py",
    "tests/integration/test_poisoned_uploads_flower.py",
    "tests/integration/test_reliability_runs.py",
    "tests/integration/test_resume_client_state_flower.py",
    "tests/system/test_flwr_run.py",  # ``flwr run .``: the local SuperLink's simulation runtime starts a Ray of its own
    "tests/system/test_ray_head.py",
)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under xdist: ``RAY_GROUP`` for the modules of ``RAY_MODULES``,
    ``RUNS_GROUP`` for the rest of the integration and system tiers (one worker runs each group's tests in
    turn), the test itself otherwise (any worker, any time)."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if not (len(parts) > 2 and parts[0] == "tests" and parts[1] in RUNS_TIERS):
        return nodeid
    return RAY_GROUP if path in RAY_MODULES else RUNS_GROUP


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is in the test extras; without it the suite runs in one process
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class RunsTogether(LoadScopeScheduling):
        """xdist's scope scheduling (a unit of work goes to one worker whole; the largest units first,
        its default ``--loadscope-reorder``) with ``work_unit`` as the scope: the two runs' units, by far
        the largest, start at once, one on each worker; each worker then takes unit and docs tests."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def remove_node(self, node):
            """xdist 3.8 puts a crashed worker's whole workload back in the queue, its finished units
            too, which it then sends as empty lists; a worker holds its last test until more comes,
            so with ~2,400 one-test units both workers would wait for ever (CI's 90 minutes) instead
            of reporting the crash. Only the units with a test still to run go back."""
            workload = self.assigned_work.get(node, {})
            for scope in [scope for scope, unit in workload.items() if all(unit.values())]:
                del workload[scope]
            return super().remove_node(node)

    @pytest.hookimpl(optionalhook=True)  # -p no:xdist leaves xdist importable but its hooks unregistered
    def pytest_xdist_make_scheduler(config, log):
        """``RunsTogether`` for ``-n N`` (xdist's "load"); any other ``--dist`` a user names is xdist's."""
        return RunsTogether(config, log) if config.getvalue("dist") == "load" else None


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ARG001
    """Mark each test with its folder's tier; a test module outside the four tiers is a
    usage error (it would run in no tier). The modules that use tests/system's package-scoped
    ``deployment`` are kept next to each other, in their random order: pytest-randomly shuffles
    modules over the whole suite, and a package-scoped fixture is torn down whenever the next
    test is outside its package, so test_deploy.py and test_adversarial.py each paid a deployment
    (~25 s) instead of sharing one. A test that uses the session's Ray head outside ``RAY_MODULES``
    is a usage error too (its worker would start a second head beside the first)."""
    for item in items:
        try:
            parts = item.path.resolve().relative_to(TESTS).parts
        except ValueError:  # not under tests/
            continue
        if len(parts) < 2 or parts[0] not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in tests/unit, tests/integration, tests/system or "
                                   "tests/docs")
        item.add_marker(parts[0])
        if "ray_head" in getattr(item, "fixturenames", ()) and work_unit("/".join(("tests", *parts))) != RAY_GROUP:
            raise pytest.UsageError(f"{item.nodeid} uses the session's Ray head: its module goes in RAY_MODULES "
                                    "(tests/conftest.py), so that one Ray head runs at a time")
    items[:] = adjacent(items, {i.module for i in items if "deployment" in getattr(i, "fixturenames", ())})


def adjacent(items: list, modules: set) -> list:
    """``items`` with the tests of ``modules`` moved, in their order, to where the first of them was."""
    first = next((k for k, i in enumerate(items) if getattr(i, "module", None) in modules), None)
    if first is None:
        return items
    group = [i for i in items if getattr(i, "module", None) in modules]
    rest = [i for i in items if getattr(i, "module", None) not in modules]
    return rest[:first] + group + rest[first:]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    """Say which random order ran (pytest-randomly prints it only in the header, which
    ``-q`` hides), so that an order-dependent failure can be replayed exactly."""
    seed = getattr(config.option, "randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        replay = f"python -m pytest tests --randomly-seed={seed}"
        if getattr(config.option, "numprocesses", None):  # the workers' split depends on timing: not replayed
            replay += " (in one process: the same order, not the same split over the workers)"
        terminalreporter.write_line(f"random test order: seed {seed} (replay: {replay})")
