"""Warm ClientApp processes (fedtext.node.warm_exec): a task goes to a process started ahead of need,
its token over standard input only; anything that does not fit starts Flower's cold ClientApp;
and the Flower contracts the module stands on, pinned so that an upgrade fails here loudly."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from flwr.supercore.constant import TaskType
from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
from flwr.supercore.superexec.executor.types import ExecutionSpec, LaunchResult

from fedtext.node import warm_exec
from fedtext.records import probes
from fedtext.node.supernode import warm_superexec_command
from fedtext.node.warm_exec import WarmClientAppExecutor, WorkerKey

TOKEN = "0123456789abcdef" * 4  # Flower's task tokens: 64 hex digits
KEY = WorkerKey("127.0.0.1:9094", True, None, False, os.getpid())


def spec(task_type: TaskType = TaskType.CLIENT_APP, address: str = "127.0.0.1:9094", task_id: int = 7) -> ExecutionSpec:
    return ExecutionSpec(task_type=task_type, runtime_api_address=address, token=TOKEN, insecure=True,
                         root_certificates_path=None, runtime_dependency_install=False, parent_pid=os.getpid(),
                         suppress_output=False, task_id=task_id)


def _spawned(size: int, **kw: Any) -> WarmClientAppExecutor:
    """A pool whose ready processes run ``command`` (``start="spawn"``: the default forks Flower's worker)."""
    return WarmClientAppExecutor(size, KEY, start="spawn", **kw)


def stand_in(out: Path) -> list[str]:
    """A worker stand-in: writes what it reads on stdin to out/<pid>."""
    code = ("import os, sys; data = sys.stdin.buffer.read(); "
            "open(os.path.join(sys.argv[1], str(os.getpid())), 'wb').write(data)")
    return [sys.executable, "-c", code, str(out)]


@pytest.fixture
def cold(monkeypatch):
    """Flower's cold launch, recorded instead of run."""
    calls: list[ExecutionSpec] = []
    monkeypatch.setattr(SubprocessExecutor, "launch", lambda self, s: calls.append(s) or LaunchResult.accepted())
    return calls


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while not path.exists() and time.time() < deadline:
        time.sleep(0.02)


def test_a_task_goes_to_a_ready_process_over_its_stdin_never_its_command_line(tmp_path, cold):
    with contextlib.closing(_spawned(1, command=stand_in(tmp_path))) as pool:
        (first,) = pool._ready
        assert TOKEN not in Path(f"/proc/{first.pid}/cmdline").read_bytes().decode()
        assert pool.launch(spec()) == LaunchResult.accepted()
        first.wait(timeout=30)
        assert (tmp_path / str(first.pid)).read_bytes() == f"{TOKEN}\n".encode()  # exactly one line
        assert (pool.warm, pool.cold, cold) == (1, 0, [])
        (second,) = pool._ready  # replaced at once, and not handed anything yet
        assert second.pid != first.pid and second.poll() is None
        assert TOKEN not in Path(f"/proc/{second.pid}/cmdline").read_bytes().decode()
    assert second.poll() is not None and pool._ready == type(pool._ready)()  # close() stops the idle one


def test_a_pool_is_topped_up_only_once_its_tasks_are_done(tmp_path, cold):
    code = ("import os, sys, time; data = sys.stdin.buffer.read(); "
            "open(os.path.join(sys.argv[1], str(os.getpid())), 'wb').write(data); time.sleep(1.5)")
    with contextlib.closing(_spawned(2, command=[sys.executable, "-c", code, str(tmp_path)])) as pool:
        first, second = pool._ready
        pool.launch(spec())
        assert list(pool._ready) == [second]  # one left ready: no start-up beside the running task
        _wait_for(tmp_path / str(first.pid))
        pool.reconcile()
        assert list(pool._ready) == [second] and pool._busy == [first]
        pool.launch(spec(task_id=8))  # the next task takes the second; the last one is replaced at once
        (third,) = pool._ready
        assert third.pid not in (first.pid, second.pid) and pool.warm == 2
        first.wait(timeout=30), second.wait(timeout=30)
        pool.reconcile()  # both tasks done: back to two
        assert len(pool._ready) == 2 and pool._ready[0] is third and not pool._busy


def test_other_task_types_and_other_flags_start_cold_and_leave_the_ready_process(tmp_path, cold):
    with contextlib.closing(_spawned(1, command=stand_in(tmp_path))) as pool:
        (ready,) = pool._ready
        pool.launch(spec(TaskType.SERVER_APP))
        pool.launch(spec(address="127.0.0.1:9095"))  # not the address the process was started for
        assert [s.task_type for s in cold] == [TaskType.SERVER_APP, TaskType.CLIENT_APP]
        assert (pool.warm, pool.cold) == (0, 2) and list(pool._ready) == [ready] and ready.poll() is None


def test_ready_processes_that_died_are_skipped_and_a_broken_pool_switches_off(tmp_path, cold):
    exits_at_once = [sys.executable, "-c", "pass"]  # before any token
    with contextlib.closing(_spawned(1, command=exits_at_once)) as pool:
        for i in range(warm_exec.MAX_EARLY_EXITS + 2):
            for proc in list(pool._ready):
                proc.wait(timeout=30)
            pool.launch(spec(task_id=i + 1))
        assert pool.warm == 0 and len(cold) == warm_exec.MAX_EARLY_EXITS + 2  # every task still ran, cold
        assert not pool.enabled and not pool._ready  # and no more processes are started
        pool.reconcile()
        assert not pool._ready


def test_a_process_that_dies_while_ready_is_replaced_between_polls(tmp_path, cold):
    with contextlib.closing(_spawned(1, command=stand_in(tmp_path))) as pool:
        (ready,) = pool._ready
        ready.kill()
        ready.wait(timeout=30)
        pool.reconcile()
        (new,) = pool._ready
        assert new.pid != ready.pid and pool.early_exits == 1 and pool.enabled
        pool.launch(spec())
        _wait_for(tmp_path / str(new.pid))
        assert (pool.warm, pool.early_exits) == (1, 0)  # a task handed resets the count


def test_a_handed_process_killed_by_a_signal_has_its_task_failed_with_its_token(tmp_path, cold):
    """Only a signal's death (Flower's exit handler did not run) calls fail_task, once, with that
    process's own token; a process that exits, 0 or not, answered its task through Flower."""
    waits = [sys.executable, "-c", "import sys, time; sys.stdin.buffer.read(); time.sleep(60)"]
    failed: list[str] = []
    with contextlib.closing(_spawned(2, command=waits, fail_task=failed.append)) as pool:
        first, second = pool._ready
        pool.launch(spec(task_id=7))
        pool.launch(dataclasses.replace(spec(task_id=8), token="f" * 64))
        pool.reconcile()
        assert failed == [] and pool.killed == 0  # both still running
        second.kill()
        second.wait(timeout=30)
        pool.reconcile()
        assert failed == ["f" * 64] and pool.killed == 1 and pool._busy == [first]
        pool.reconcile()
        assert failed == ["f" * 64]  # once
    for code in (0, 1):  # exits of its own: Flower's run_clientapp answered (or its exit handler did)
        exits = [sys.executable, "-c", f"import sys; sys.stdin.buffer.read(); sys.exit({code})"]
        with contextlib.closing(_spawned(1, command=exits, fail_task=failed.append)) as pool:
            (proc,) = pool._ready
            pool.launch(spec())
            proc.wait(timeout=30)
            pool.reconcile()
            assert failed == ["f" * 64] and pool.killed == 0 and not pool._busy


def test_a_failing_fail_task_leaves_the_pool_serving(tmp_path, cold):
    def refuses(token: str) -> None:
        raise ConnectionError("the SuperNode is gone")

    waits = [sys.executable, "-c", "import sys, time; sys.stdin.buffer.read(); time.sleep(60)"]
    with contextlib.closing(_spawned(1, command=waits, fail_task=refuses)) as pool:
        (proc,) = pool._ready
        pool.launch(spec())
        proc.kill()
        proc.wait(timeout=30)
        pool.reconcile()  # logged, not raised: the SuperExec's loop goes on
        assert pool.killed == 1 and len(pool._ready) == 1 and pool.enabled


# ------------------------------------------------------------------ forked from the fork server
def record_stdin(argv: list[str]) -> int:
    """A forked worker's stand-in: writes what it reads on stdin to <argv[0]>/<pid>, then waits argv[1] s
    (module level: multiprocessing hands it to the fork server by name)."""
    data = sys.stdin.buffer.read()
    Path(argv[0], str(os.getpid())).write_bytes(data)
    time.sleep(float(argv[1]))
    return 0


def forked_pool(size: int, out: Path, wait_s: float = 0.0, **kw) -> WarmClientAppExecutor:
    """A pool whose processes are forked stand-ins on ``[out, wait_s]`` (``WorkerKey.worker_args`` replaced)."""
    key = dataclasses.replace(KEY)
    object.__setattr__(key, "worker_args", lambda: [str(out), str(wait_s)])  # this key only (a frozen dataclass)
    return WarmClientAppExecutor(size, key, start="fork", target=record_stdin, **kw)


def test_a_forked_process_takes_its_token_over_stdin_never_its_command_line(tmp_path, cold):
    with contextlib.closing(forked_pool(1, tmp_path)) as pool:
        (first,) = pool._ready
        assert isinstance(first, warm_exec.ForkedWorker) and first.poll() is None
        # its command line is the fork server's (it is not this process's child: nothing of the task is in it)
        assert "multiprocessing.forkserver" in Path(f"/proc/{first.pid}/cmdline").read_bytes().decode()
        assert first._proc not in getattr(__import__("multiprocessing").process, "_children")  # exit never waits
        assert pool.launch(spec()) == LaunchResult.accepted()
        assert first.wait(timeout=60) == 0
        assert (tmp_path / str(first.pid)).read_bytes() == f"{TOKEN}\n".encode()  # exactly one line
        assert (pool.warm, pool.cold, cold) == (1, 0, [])
        (second,) = pool._ready  # replaced at once, forked, not handed anything
        assert isinstance(second, warm_exec.ForkedWorker) and second.pid != first.pid and second.poll() is None
    assert second.poll() is not None and not pool._ready  # close() stops the idle one


def test_a_pool_starts_its_processes_by_spawn_or_fork_only():
    with pytest.raises(ValueError, match="spawn or fork, got 'thread'"):
        WarmClientAppExecutor(1, KEY, command=["true"], start="thread")
    with pytest.raises(ValueError, match="runs a command only when it spawns its processes, not by fork"):
        WarmClientAppExecutor(1, KEY, command=["true"], start="fork")
    assert warm_exec.WARM_START in warm_exec.WARM_STARTS


def test_a_forked_worker_stopped_idle_exits_quietly(tmp_path):
    """The real worker, forked from the fork server that imported FORK_PRELOAD: a worker whose stdin
    closes with no token (the pool stopping it) exits 0."""
    proc = warm_exec.ForkedWorker(warm_exec.worker_main, KEY.worker_args())
    time.sleep(0.5)
    assert proc.poll() is None  # waiting for its token
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0


def test_a_fork_server_that_cannot_start_a_worker_leaves_cold_starts_not_a_dead_superexec(cold, monkeypatch):
    class Broken:
        def __init__(self, *args):
            raise EOFError("unexpected EOF")  # what multiprocessing raises when its fork server died at start

    monkeypatch.setattr(warm_exec, "ForkedWorker", Broken)
    with contextlib.closing(WarmClientAppExecutor(2, KEY, start="fork")) as pool:  # no exception out of here
        assert not pool._ready and pool.early_exits == 1 and pool.enabled
        for i in range(warm_exec.MAX_EARLY_EXITS):
            pool.launch(spec(task_id=i + 1))
        assert len(cold) == warm_exec.MAX_EARLY_EXITS and pool.warm == 0 and not pool.enabled


class LostProcess:
    """multiprocessing's view of a worker whose fork server died: status 255, whatever the process does."""

    def __init__(self, pid: int) -> None:
        self.pid, self.exitcode = pid, warm_exec.LOST_STATUS


def test_a_worker_whose_fork_server_died_runs_while_its_process_lives_and_is_then_lost(tmp_path):
    worker = warm_exec.ForkedWorker.__new__(warm_exec.ForkedWorker)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        worker.pid, worker._proc, worker.lost = alive.pid, LostProcess(alive.pid), False
        assert worker.poll() is None and worker.returncode is None and not worker.lost
    finally:
        alive.kill()
        alive.wait()
    assert worker.poll() == warm_exec.LOST_STATUS and worker.lost  # gone: how it ended is unknown


@pytest.mark.parametrize("lost", [False, True])
def test_a_forked_process_killed_with_its_task_has_the_task_failed_with_its_token(tmp_path, cold, lost):
    """The fork server reports a signal's death as a Popen would (returncode -9), and a worker whose fork
    server died before it could report is lost (its end unknown): either way the pool fails that task."""
    failed: list[str] = []
    with contextlib.closing(forked_pool(1, tmp_path, wait_s=60, fail_task=failed.append)) as pool:
        (proc,) = pool._ready
        pool.launch(spec())
        _wait_for(tmp_path / str(proc.pid), timeout=60)
        proc.kill()
        with pytest.raises(subprocess.TimeoutExpired):
            pool._ready[0].wait(timeout=0.01)  # the replacement waits for its token
        assert proc.wait(timeout=60) == -9
        if lost:
            proc._proc = LostProcess(proc.pid)  # as if the fork server had died before it could report
        pool.reconcile()
        assert failed == [TOKEN] and pool.killed == 1 and not pool._busy and proc.lost == lost


def test_the_fork_servers_preload_covers_what_a_worker_imports_before_its_task():
    code = ("import sys; from fedtext.node import warm_exec; before = set(sys.modules); "
            "[__import__(m) for m in warm_exec.FORK_PRELOAD]; after = set(sys.modules); "
            "import fedtext.node.warm_exec, importlib; "
            "[importlib.import_module(m) for m in warm_exec.SHIM_IMPORTS]; "
            "from flwr.supernode.runtime import run_clientapp; "
            "run_clientapp.RuntimeHttpClient.from_server_address(server_address='127.0.0.1:1', insecure=True, "
            "root_certificates=None, interceptors=[], retry_invoker=run_clientapp.make_simple_http_retry_invoker())"
            ".close(); print(sorted(m for m in set(sys.modules) - after if not m.startswith('encodings')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout  # the worker's first HTTP client imports nothing new


def test_fail_killed_task_starts_the_task_then_pulls_its_message_with_the_token(monkeypatch):
    """The two calls run_clientapp's pull_task_input starts a task with, in that order, each tried once
    and each allowed to be refused (a task already RUNNING refuses the first), with the dead process's
    token and Flower's version header; the client is closed."""
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullTaskInputRequest
    from flwr.supercore import runtime
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor

    calls: list[object] = []

    class Client:
        def PullTaskInput(self, request):  # noqa: N802 - Flower's method names
            calls.append(request)
            raise RuntimeError("Failed to start task.")  # already RUNNING

        def PullMessages(self, request):  # noqa: N802
            calls.append(request)

        def close(self):
            calls.append("closed")

    def build(server_address, insecure, root_certificates, interceptors, retry_invoker):
        calls.append((server_address, insecure, root_certificates, retry_invoker.max_tries))
        tokens = [i for i in interceptors if isinstance(i, RuntimeTokenHttpInterceptor)]
        assert len(tokens) == 1 and any(isinstance(i, RuntimeVersionHttpInterceptor) for i in interceptors)
        assert TOKEN in repr(vars(tokens[0]))
        return Client()

    monkeypatch.setattr(runtime.RuntimeHttpClient, "from_server_address", staticmethod(build))
    warm_exec.fail_killed_task(KEY, TOKEN)
    assert calls[0] == ("127.0.0.1:9094", True, None, 1)
    assert [type(c) for c in calls[1:3]] == [PullTaskInputRequest, PullAppMessagesRequest] and calls[3] == "closed"


def test_a_pool_needs_at_least_one_process():
    with pytest.raises(ValueError, match="size >= 1"):
        _spawned(0, command=["true"])


@pytest.mark.parametrize(("key", "flags"), [
    (WorkerKey("a:1", True, None, False, None), ["--insecure"]),
    (WorkerKey("a:1", False, "/c/ca.crt", True, 42),
     ["--root-certificates", "/c/ca.crt", "--parent-pid", "42", "--allow-runtime-dependency-installation"]),
    (WorkerKey("a:1", False, None, False, 7), ["--parent-pid", "7"]),
])
def test_the_worker_takes_flwr_clientapps_flags_with_the_token_on_stdin(key, flags):
    from flwr.common.args import add_args_flwr_app_common

    command = key.command()
    assert command[:4] == [sys.executable, "-m", "fedtext.node.warm_exec", "worker"]
    assert command[4:] == ["--runtime-api-address", "a:1", "--token-stdin", *flags]
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime-api-address")
    add_args_flwr_app_common(parser, include_token_stdin=True)  # Flower's own parser takes every flag
    args = parser.parse_args(command[4:])
    assert args.token_stdin and args.token is None
    assert (args.insecure, args.root_certificates, args.parent_pid, args.runtime_dependency_install) == (
        key.insecure, key.root_certificates_path, key.parent_pid, key.runtime_dependency_install)


def test_the_key_is_read_from_flowers_execution_spec():
    assert WorkerKey.of(spec()) == KEY
    assert WorkerKey.of(dataclasses.replace(spec(), insecure=False, root_certificates_path="/ca")) != KEY


def test_the_supernodes_superexec_command_becomes_the_warm_one():
    flower = ["flower-superexec", "--insecure", "--runtime-api-address", "127.0.0.1:9094", "--parent-pid", "12"]
    assert warm_superexec_command(flower, 2) == [sys.executable, "-m", "fedtext.node.warm_exec", "superexec",
                                                 "--warm", "2", "--", *flower[1:]]
    assert warm_superexec_command(flower, 2, "fork")[3:9] == ["superexec", "--warm", "2", "--start", "fork", "--"]
    assert warm_superexec_command(["/venv/bin/flower-superexec", "--insecure"], 1)[-2:] == ["--", "--insecure"]
    assert warm_superexec_command(["flwr-clientapp", "--token", "x"], 1) == ["flwr-clientapp", "--token", "x"]


def test_the_superexec_reads_the_flags_its_processes_copy():
    args = warm_exec.superexec_args(["--insecure", "--appio-api-address", "h:1", "--health-server-address", "x",
                                     "--allow-runtime-dependency-installation", "--parent-pid", "3"])
    assert (args.runtime_api_address, args.insecure, args.runtime_dependency_install) == ("h:1", True, True)
    assert warm_exec.superexec_args(["--root-certificates", "/ca", "--runtime-api-address", "h:2"]).root_certificates == "/ca"


def test_the_factory_answers_the_subprocess_type_only(monkeypatch):
    from flwr.supercore.constant import ExecutorType
    from flwr.supercore.superexec.executor import factory

    monkeypatch.setattr(WarmClientAppExecutor, "_fill", lambda self: None)  # no processes here
    get = warm_exec.executor_factory(3, KEY)
    pool = get(ExecutorType.SUBPROCESS, None, insecure=True, root_certificates_path=None)
    assert isinstance(pool, WarmClientAppExecutor) and (pool.size, pool.key) == (3, KEY)
    seen = []
    monkeypatch.setattr(factory, "get_executor", lambda *a, **k: seen.append((a, k)) or "flower's")
    assert get(ExecutorType.KUBERNETES, {"x": 1}, insecure=False) == "flower's"
    assert seen == [((ExecutorType.KUBERNETES, {"x": 1}), {"insecure": False})]


def test_an_installed_fab_is_found_by_its_hash_and_not_unpacked_again(tmp_path):
    import hashlib

    from flwr.common.constant import APP_DIR, FAB_HASH_TRUNCATION

    fab = b"a fab's bytes"
    digest = hashlib.sha256(fab).hexdigest()[:FAB_HASH_TRUNCATION]
    apps = tmp_path / APP_DIR
    assert warm_exec.installed_fab(fab, tmp_path) is None  # nothing installed yet
    (apps / f"pub.app.1.0.{digest}").mkdir(parents=True)
    assert warm_exec.installed_fab(fab, tmp_path) is None  # a folder without its pyproject.toml is not an install
    (apps / f"pub.app.1.0.{digest}" / "pyproject.toml").write_text("")
    (apps / f"pub.app.1.0.{'0' * FAB_HASH_TRUNCATION}").mkdir()
    assert warm_exec.installed_fab(fab, tmp_path) == apps / f"pub.app.1.0.{digest}"
    (apps / f"pub.other.2.0.{digest}").mkdir()
    (apps / f"pub.other.2.0.{digest}" / "pyproject.toml").write_text("")
    assert warm_exec.installed_fab(fab, tmp_path) is None  # two candidates: Flower decides


def test_install_once_calls_flower_unless_the_fab_is_installed(tmp_path, monkeypatch):
    calls = []
    install = warm_exec.install_once(lambda *a: calls.append(a) or Path("/flower"))
    monkeypatch.setattr(warm_exec, "installed_fab", lambda fab: None)
    assert install(b"x", None, True) == Path("/flower") and calls == [(b"x", None, True)]
    monkeypatch.setattr(warm_exec, "installed_fab", lambda fab: tmp_path)
    assert install(b"x", None, True) == tmp_path and len(calls) == 1
    assert install(b"x", None, False) == Path("/flower") and len(calls) == 2  # a prompt: Flower's
    assert install(b"x", tmp_path, True) == Path("/flower") and len(calls) == 3  # another folder: Flower's


def test_a_warm_process_has_imported_everything_the_shim_imports_from_outside_fedtext():
    shim = ("import sys; before = set(sys.modules); import fedtext.client_app; "
            "print(' '.join(m for m in sys.modules if m not in before and m.split('.')[0] != 'fedtext'))")
    warm = ("import importlib, sys; from fedtext import warm_exec; before = set(sys.modules); "
            "[importlib.import_module(m) for m in warm_exec.SHIM_IMPORTS]; print(' '.join(sys.modules))")
    loaded = {c: set(subprocess.run([sys.executable, "-c", c], capture_output=True, text=True, check=True,
                                    timeout=120).stdout.split()) for c in (shim, warm)}
    assert len(loaded[shim]) > 100 and not loaded[shim] - loaded[warm]


def test_each_message_imports_only_the_shims_own_fedtext_modules():
    """A warm process imports the FAB's fedtext afresh for every message (load_app): the shim's chain must stay
    these few modules, not the run-config, the record writer and reader or the trackers (their import through
    ``fedtext.records``' package took ~45 ms of each message's start-up until it imported on first use)."""
    code = "import sys, fedtext.client_app; print(' '.join(sorted(m for m in sys.modules if m.startswith('fedtext'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            timeout=120).stdout.split()
    assert loaded == ["fedtext", "fedtext.client_app", "fedtext.common", "fedtext.common.packing",
                      "fedtext.common.quiet", "fedtext.node", "fedtext.node.service", "fedtext.records",
                      "fedtext.records.probes"]


def test_fedtext_is_forgotten_so_the_task_imports_the_fabs_own():
    modules = {"fedtext": 1, "fedtext.client_app": 2, "fedtextual": 3, "flwr": 4, "flwr.client": 5}
    assert sorted(warm_exec.forget_fedtext(modules)) == ["fedtext", "fedtext.client_app"]
    assert modules == {"fedtextual": 3, "flwr": 4, "flwr.client": 5}


def test_a_warm_task_starts_when_its_token_arrived(monkeypatch):
    monkeypatch.setenv(probes.TASK_START_ENV, "1700000000.5")
    assert probes.task_start_time() == 1700000000.5
    monkeypatch.setenv(probes.TASK_START_ENV, "not a time")
    assert abs(probes.task_start_time() - probes.process_start_time()) < 1e-6
    monkeypatch.delenv(probes.TASK_START_ENV)
    assert abs(probes.task_start_time() - probes.process_start_time()) < 1e-6


def test_flowers_telemetry_in_a_warm_process_loads_the_ca_roots_once_not_per_event(monkeypatch):
    """Flower's telemetry opens every event's request with ``urllib.request.urlopen`` and no context: on
    Python 3.11 each event built a new default context and loaded the CA roots (38 ms of CPU, twice a
    message), from 3.12 the first event of each process did. A warm process builds it before its token
    arrives: the events then build none, and urllib's opener holds that verifying context."""
    import socket
    import ssl
    import urllib.request

    from flwr.supercore import telemetry

    built: list[int] = []
    default = ssl._create_default_https_context
    monkeypatch.setattr(ssl, "_create_default_https_context", lambda: built.append(1) or default())
    monkeypatch.setattr(urllib.request, "_opener", None)  # as a fresh process has it; restored after
    for key, value in (("source", "test"), ("cluster", "test"), ("partner", None)):
        monkeypatch.setitem(telemetry.state, key, value)  # no ~/.flwr/source written
    with socket.socket() as s:  # a port nothing listens on: the request is refused at once, offline or not
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(telemetry, "TELEMETRY_EVENTS_URL", f"https://127.0.0.1:{port}/")
    monkeypatch.setattr(telemetry, "FLWR_TELEMETRY_ENABLED", "1")
    for _ in range(2):
        telemetry.create_event(telemetry.EventType.FLWR_CLIENTAPP_RUN_ENTER, None)
    assert len(built) == (2 if sys.version_info < (3, 12) else 1)  # what building it ahead saves a process
    context = warm_exec.share_telemetry_context()
    del built[:]
    for _ in range(2):
        telemetry.create_event(telemetry.EventType.FLWR_CLIENTAPP_RUN_ENTER, None)
    assert built == [] and context is not None
    handlers = [h for h in urllib.request._opener.handlers if isinstance(h, urllib.request.HTTPSHandler)]
    assert [h._context for h in handlers] == [context]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname  # what the stdlib's default verifies
    # with Flower's telemetry off nothing is built and urllib is left as it was
    monkeypatch.setattr(urllib.request, "_opener", None)
    monkeypatch.setattr(telemetry, "FLWR_TELEMETRY_ENABLED", "0")
    assert warm_exec.share_telemetry_context() is None and urllib.request._opener is None and built == []


def test_the_worker_shares_the_context_before_it_waits_for_its_token(monkeypatch):
    import io

    steps: list[str] = []

    class Stdin(io.BufferedReader):
        def peek(self, size: int = 0) -> bytes:
            steps.append("wait for the token")
            return b""  # closed with no token: the pool stopped this idle process

    monkeypatch.setattr(warm_exec, "share_telemetry_context", lambda: steps.append("share"))
    monkeypatch.setattr(warm_exec, "forget_fedtext", lambda: [])  # this test process keeps its fedtext
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(Stdin(io.BytesIO(b""))))
    assert warm_exec.worker_main(["--runtime-api-address", "127.0.0.1:1", "--insecure", "--token-stdin"]) == 0
    assert steps == ["share", "wait for the token"]


def _worker(*flags: str, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedtext.node.warm_exec", "worker", "--runtime-api-address",
                           "127.0.0.1:1", *flags], input=stdin, capture_output=True, timeout=120)


def test_the_worker_exits_quietly_when_stopped_idle_and_refuses_a_bad_token():
    idle = _worker("--insecure", "--token-stdin", stdin=b"")  # stdin closed with no token: the pool stopped it
    assert idle.returncode == 0 and idle.stderr == b""
    bad = _worker("--insecure", "--token-stdin", stdin=b"not-a-token\n")
    assert bad.returncode != 0 and b"does not contain exactly one valid task token" in bad.stderr
    refused = _worker("--insecure", "--token", TOKEN, stdin=b"")
    assert refused.returncode == 2 and b"standard input only" in refused.stderr


# ------------------------------------------------------------------ Flower's contracts (1.42)
def test_every_part_of_flower_the_warm_processes_rely_on_is_as_pinned():
    assert warm_exec.flower_contract_problems() == []


def test_a_flower_that_moved_a_part_runs_cold_with_one_line(monkeypatch, capsys):
    import flwr.supernode.start_client_internal as loop
    from flwr.supernode.runtime import run_clientapp as runtime

    from fedtext.node import supernode
    monkeypatch.setattr(runtime, "run_clientapp", lambda runtime_api_address, token: None)  # a new signature
    problems = warm_exec.flower_contract_problems()
    assert len(problems) == 1 and "run_clientapp" in problems[0]
    assert supernode.start_warm_superexec(1) is False
    assert loop.subprocess is subprocess  # nothing patched: Flower's own cold start
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warm ClientApp processes off" in err and "run_clientapp" in err
    monkeypatch.setattr(loop, "subprocess", object())  # the SuperNode no longer starts it through `subprocess`
    assert len(warm_exec.flower_contract_problems()) == 2


def test_a_supernode_with_the_pinned_flower_starts_the_warm_superexec(monkeypatch):
    import flwr.supernode.start_client_internal as loop

    from fedtext.node import supernode
    monkeypatch.setattr(loop, "subprocess", subprocess)  # restored after the test
    monkeypatch.setattr(loop, "_pull_and_store_message", lambda **kw: 5)  # Flower's pull, a message each time
    monkeypatch.setattr(warm_exec, "wake_contract_problems", lambda: [])  # the stand-in is not Flower's source
    started, copies = [], []

    def popen(args, *a, **k):
        started.append((args, k))
        copies.extend(os.dup(fd) for fd in k.get("pass_fds", ()))  # what the SuperExec would hold

    monkeypatch.setattr(subprocess, "Popen", popen)
    assert supernode.start_warm_superexec(2) is True and loop.subprocess.wake is None
    assert supernode.wake_superexec() is True
    wake = loop.subprocess.wake
    loop.subprocess.Popen(["flower-superexec", "--insecure", "--runtime-api-address", "a:1"])
    loop.subprocess.Popen(["something-else"])
    (read,) = copies
    assert started == [([sys.executable, "-m", "fedtext.node.warm_exec", "superexec", "--warm", "2", "--wake-fd",
                         started[0][0][7], "--", "--insecure", "--runtime-api-address", "a:1"],
                        {"pass_fds": (int(started[0][0][7]),)}), (["something-else"], {})]
    with pytest.raises(OSError):  # the read end went to that SuperExec alone and is closed here
        os.fstat(int(started[0][0][7]))
    assert loop._pull_and_store_message(state="s") == 5  # the SuperNode's loop pulls a message: the SuperExec wakes
    os.set_blocking(read, False)
    assert os.read(read, 10) == warm_exec.MESSAGE and wake.rung == 1
    os.close(read), os.close(wake.fd)
    assert loop.subprocess.DEVNULL == subprocess.DEVNULL  # the rest of the module as it was


def test_a_flower_that_moved_the_wake_seams_polls_the_warm_superexec(monkeypatch, capsys):
    import flwr.supernode.start_client_internal as loop

    from fedtext.node import supernode
    monkeypatch.setattr(loop, "subprocess", subprocess)  # restored after the test
    monkeypatch.setattr(loop, "_pull_and_store_message", loop._pull_and_store_message)
    assert warm_exec.wake_contract_problems() == []
    monkeypatch.setattr(loop, "_pull_and_store_message", lambda **kw: None)  # no longer Flower's pull
    assert len(warm_exec.wake_contract_problems()) == 1
    assert supernode.start_warm_superexec(2) is True and supernode.wake_superexec() is False
    assert loop.subprocess.wake is None and loop._pull_and_store_message(state="s") is None  # nothing wrapped
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "polled, not woken" in err


# ------------------------------------------------------------------ the SuperExec woken by its SuperNode
def test_the_superexec_is_woken_for_each_message_and_after_each_reply(monkeypatch):
    """wake_on_pull rings for each message Flower's pull returned a run id for, again at the next pull (the
    reply was pushed between them), never for an empty poll; a full pipe, a gone SuperExec or no pipe yet
    are not errors."""
    import flwr.supernode.start_client_internal as loop

    from fedtext.node import supernode
    answers = iter([None, 7, 8, None, None])
    monkeypatch.setattr(loop, "_pull_and_store_message", lambda **kw: next(answers))  # restored after the test
    message, replied = warm_exec.MESSAGE, warm_exec.REPLIED
    assert message != replied
    wake = supernode.Wake()
    wake.ring(message)  # no pipe yet (no SuperExec started): nothing
    read = wake.pipe()
    supernode.wake_on_pull(wake)
    supernode.wake_on_pull(wake)  # a second call wraps Flower's function, not the first wrapper
    assert [loop._pull_and_store_message(state="s") for _ in range(5)] == [None, 7, 8, None, None]
    os.set_blocking(read, False)
    # 7; its reply pushed (the next pull) and 8 pulled; 8's reply pushed; nothing for the empty polls
    assert os.read(read, 100) == message + replied + message + replied and wake.rung == 4
    for _ in range(70_000):  # past a pipe's 64 KiB: the rings that no longer fit are dropped
        wake.ring(message)
    assert 0 < wake.rung - 4 < 70_000
    os.close(read)
    wake.ring(message)  # no reader: BrokenPipeError swallowed
    again = wake.pipe()  # a SuperExec started again gets a new pipe; the old write end is closed
    wake.ring(replied)
    assert os.read(again, 1) == replied
    os.close(again), os.close(wake.fd)


def test_a_message_ends_the_superexecs_sleep_one_look_a_byte_and_its_end_restores_plain_sleeps():
    read, write = os.pipe()
    clock = warm_exec.WakeableSleep(read)
    try:
        t = time.monotonic()
        clock.sleep(0.2)  # nothing written: the whole sleep
        assert time.monotonic() - t >= 0.19 and clock.wakes == 0
        os.write(write, warm_exec.MESSAGE * 2)  # two messages pulled while the loop was busy: two looks at once
        t = time.monotonic()
        clock.sleep(30), clock.sleep(30)
        assert time.monotonic() - t < 5 and clock.wakes == 2
        t = time.monotonic()
        clock.sleep(0.2)
        assert time.monotonic() - t >= 0.19 and clock.wakes == 2
        assert clock.monotonic is time.monotonic  # the rest of the module as it was
    finally:
        os.close(write)
    clock.sleep(30)  # the pipe's end: returns, and closes it
    assert clock.fd is None
    t = time.monotonic()
    clock.sleep(0.2)  # Flower's plain sleep from then on
    assert time.monotonic() - t >= 0.19 and clock.wakes == 2


def test_a_reply_has_the_pool_tidied_until_its_process_exited_and_the_sleep_goes_on():
    """REPLIED never ends the sleep (a look then could find the next message half pulled); it tidies the
    pool, again every TIDY_S while the handed process is still exiting, and a MESSAGE after it ends the sleep."""
    read, write = os.pipe()
    busy = [3]  # the handed process exits on the third tidy

    def tidy():
        busy[0] -= 1
        return busy[0] > 0

    clock = warm_exec.WakeableSleep(read, tidy)
    try:
        os.write(write, warm_exec.REPLIED)
        t = time.monotonic()
        clock.sleep(0.5)
        assert time.monotonic() - t >= 0.49 and busy == [0] and (clock.replies, clock.wakes) == (1, 0)
        os.write(write, warm_exec.REPLIED + warm_exec.MESSAGE)
        t = time.monotonic()
        clock.sleep(30)
        assert time.monotonic() - t < 5 and busy == [-1] and (clock.replies, clock.wakes) == (2, 1)
    finally:
        os.close(read), os.close(write)


def test_tidy_reconciles_and_says_whether_a_handed_process_still_runs(tmp_path, cold):
    """While the handed process runs, tidy says so and the pool keeps one ready; once it exited, tidy
    reaps it, says so, and tops the pool up to its size."""
    gate = tmp_path / "go"
    code = ("import os, sys, time; sys.stdin.buffer.read(); "
            f"[time.sleep(0.02) for _ in iter(lambda: os.path.exists({str(gate)!r}), True)]")
    pool = _spawned(2, command=[sys.executable, "-c", code])
    try:
        assert pool.launch(spec()) == LaunchResult.accepted()
        assert pool.tidy() is True and len(pool._busy) == 1 and len(pool._ready) == 1
        gate.touch()
        pool._busy[0].wait(timeout=30)
        assert pool.tidy() is False and not pool._busy and len(pool._ready) == 2
    finally:
        gate.touch()
        pool.close()


def test_a_sleep_that_keeps_tidying_ends_at_its_deadline_tidying_every_tidy_s():
    read, write = os.pipe()
    calls = []
    clock = warm_exec.WakeableSleep(read, lambda: calls.append(time.monotonic()) or True)  # never done exiting
    try:
        os.write(write, warm_exec.REPLIED)
        t = time.monotonic()
        clock.sleep(0.6)  # twelve TIDY_S: at least 3 tidies even when a loaded machine wakes select late
        took = time.monotonic() - t
        assert 0.59 <= took < 1.5 and 3 <= len(calls) <= 0.6 / warm_exec.TIDY_S + 2
        # every wait between tidies is TIDY_S but the last, which the deadline cuts short (by however late a
        # loaded machine woke the ones before it)
        assert min(b - a for a, b in zip(calls[:-1], calls[1:-1])) >= warm_exec.TIDY_S * 0.8
    finally:
        os.close(read), os.close(write)


def test_the_warm_superexec_sleeps_on_its_wake_pipe(monkeypatch):
    """superexec_main with --wake-fd makes Flower's loop module see WakeableSleep as `time`, on a
    copy of the fd its ClientApp processes do not inherit."""
    import importlib

    import flwr.supercore.superexec.run_superexec as rs

    cli = importlib.import_module("flwr.supercore.cli.flower_superexec")  # the module, not the package's function

    monkeypatch.setattr(rs, "time", rs.time)  # restored after the test
    monkeypatch.setattr(rs, "get_executor", rs.get_executor)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # superexec_main hands Flower its own argv
    read, write = os.pipe()
    os.set_inheritable(read, True)
    seen = []
    monkeypatch.setattr(cli, "flower_superexec", lambda: seen.append((rs.time, os.get_inheritable(read))))
    assert warm_exec.superexec_main(["--warm", "1", "--wake-fd", str(read), "--", "--insecure",
                                     "--runtime-api-address", "a:1"]) == 0
    try:
        (clock, inheritable), = seen
        assert isinstance(clock, warm_exec.WakeableSleep) and clock.fd == read and inheritable is False
        assert clock.tidy() is False  # no pool made yet (Flower makes it in run_superexec)
        import flwr.supercore.constant as const

        monkeypatch.setattr(WarmClientAppExecutor, "_fill", lambda self: None)  # no processes here
        monkeypatch.setattr(WarmClientAppExecutor, "tidy", lambda self: "the pool's")
        rs.get_executor(const.ExecutorType.SUBPROCESS, None)  # as run_superexec makes it
        assert clock.tidy() == "the pool's"
        assert warm_exec.superexec_main(["--warm", "1", "--", "--runtime-api-address", "a:1"]) == 0
        assert seen[-1][0] is clock  # no --wake-fd: the module's `time` left as it was
    finally:
        os.close(read), os.close(write)
