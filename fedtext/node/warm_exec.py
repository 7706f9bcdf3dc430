"""Warm ClientApp processes for a SuperNode: Flower's SuperExec with an executor that hands each
ClientApp task to a process started ahead of need.

Why. Flower 1.42's SuperNode (default ``--isolation subprocess``) starts ``flower-superexec``,
whose :class:`~flwr.supercore.superexec.executor.subprocess_executor.SubprocessExecutor`
starts ``flwr-clientapp --token T`` for every message: a new Python that imports Flower
(~1.2-1.4 s on this project's 2-core machine, measured in ``python -X importtime``) before
it pulls its one message, answers it and exits. A fedtext round sends each node two messages
(fit, then evaluate), so a deployment round pays that start-up about twice per node where a
Ray actor pays it once per run (docs/performance.md, "Deployment rounds"). Flower keeps a
ClientApp process single-use on purpose (a long-running ``flwr-clientapp`` was added and later
disallowed; flwrlabs/flower#3670 is open), so this module keeps the rule and moves the start-up
off the message's path: a ClientApp process is started *before* its task arrives, waits with
Python and Flower (and the Flower modules fedtext's ClientApp shim needs) imported, and is
handed one task token when one comes; it then runs Flower's own ``run_clientapp`` on that one
task, exactly as ``flwr-clientapp`` would, and exits. A new one is started at once.

Flower's parts, and why these. Flower's own warm pools (``warm_executor_pool.py``,
``warm_executor_dispatch.py``) exist for its Kubernetes executor only: pre-started Pods handed
a token on standard input through ``--token-stdin`` (``flwr.common.args``), the very channel
used here. :func:`flwr.supercore.superexec.executor.factory.get_executor` offers the
subprocess and Kubernetes executors and no plugin entry, so :func:`superexec_main` runs
Flower's own ``flower-superexec`` entry point (its argument parsing, auth secret, health
server, task loop and parent-process monitor unchanged) with the module-level name
``get_executor`` of ``run_superexec`` answering :class:`WarmClientAppExecutor` for the
subprocess type. The SuperNode starts that SuperExec itself: in subprocess isolation
``flwr.supernode.start_client_internal`` builds the SuperExec's command (Runtime API address,
TLS arguments, ``--parent-pid``, the dependency flag) and ``Popen``\\ s ``flower-superexec``;
:func:`fedtext.node.supernode.start_warm_superexec` turns that one command into ``python -m
fedtext.node.warm_exec superexec --warm N -- <the same arguments>``. The alternative the issue
names, ``--isolation process`` with a SuperExec fedtext starts beside the SuperNode, would
re-derive those arguments from the SuperNode's command line (its address flags, TLS,
certificates): a second copy of what Flower computes, which a Flower upgrade could silently
make wrong. The worker's flags are Flower's own (``add_args_flwr_app_common`` with
``include_token_stdin``, :func:`flwr.common.args.try_obtain_flwr_app_token`) and its task is
run by Flower's ``run_clientapp``. tests/unit/test_warm_exec.py pins each of these contracts.

Spawned or forked (``--start``, :data:`WARM_STARTS`). A spawned worker is a new Python that imports
Flower itself: ~0.7 s of CPU a process (measured), which on a busy node comes out of the round's
compute even when it happens ahead of need. A forked worker comes from multiprocessing's fork
server: one process per SuperExec that imports :data:`FORK_PRELOAD` once and forks a worker on
request (~0.01 s of CPU each); the worker then runs exactly what a spawned one runs
(:func:`worker_main`, with the token pipe as its standard input: :class:`ForkedWorker`). A task
still gets a process of its own, single-use as Flower requires. What a forked worker inherits that a
spawned one would make afresh: the modules the fork server imported (copy-on-write; fedtext's are
dropped again, as in a spawned worker), the fork server's environment, working folder and
``sys.path`` as they were when the SuperExec started it (the SuperExec's own), and its random
state (NumPy's global generator is reseeded in each worker: :func:`run_with_stdin`). The fork
server lives as long as the SuperExec or its last worker.

The token. It never appears on a command line or in a log: a worker's command holds
``--token-stdin`` and the token arrives on the worker's standard input, a pipe only the
SuperExec holds (a process of another user cannot open another's pipe; ``/proc/<pid>/fd`` is
the owner's). The worker reads one bounded token line with Flower's own reader and closes
its standard input.

What runs is the FAB's code. ``run_clientapp`` installs the run's FAB and imports
``fedtext.client_app`` from it (Flower puts the app's folder first on ``sys.path`` and imports
a module not yet in ``sys.modules``). A worker therefore imports what the shim needs from outside
fedtext (:data:`SHIM_IMPORTS`: Flower's modules, checked against the shim's own imports by a
test) and drops every ``fedtext`` module from ``sys.modules`` (:func:`forget_fedtext`; the worker's
own module is ``__main__``) before it waits: the task imports the FAB's fedtext afresh, as a cold
``flwr-clientapp`` would, and only Flower stays imported.

Failures. A task whose worker died before it took the token, or with none ready, starts
Flower's cold ``flwr-clientapp`` as today (counted in :attr:`WarmClientAppExecutor.cold`).
A worker killed after it took its token (a signal: no exit handler of Flower's ran) fails that one
task, and the round goes on. Flower answers a dead task only when it is RUNNING with its message
already pulled: 2 x 30 s after its last heartbeat its claim expires and the SuperNode's state stores
Flower's own ``CLIENT_APP_CRASHED`` error reply for every *retrieved*, unanswered message of the run
(``_on_task_tokens_expired``). But ``run_clientapp`` starts its task in two calls, ``PullTaskInput``
(STARTING -> RUNNING) and then ``PullMessages`` (the message marked retrieved): a process killed
between them leaves a RUNNING task whose message nobody pulled, which expires with no reply while the
message waits for a task that will never come, and the run hangs until its timeout (read in Flower's
code: the hang seen 3 times in 3 on 2026-11-29, issue 68). So the pool, at its next look or tidy (within 5 s when woken: :class:`WakeableSleep`), finishes what the dead process started
with its token (:func:`fail_killed_task`): ``PullTaskInput`` (a task still STARTING becomes RUNNING;
one already RUNNING refuses, harmlessly) and ``PullMessages`` (the message, if still waiting, is
marked retrieved). Every case is then Flower's own: the claim expires and the error reply reaches
the ServerApp, which counts one failure (``client_failures``) and goes on.
Workers that exit before any token :data:`MAX_EARLY_EXITS` times in a row (a broken install) switch the pool off with one
warning; every task then starts cold. Idle workers are stopped when the SuperExec stops, and
each watches its SuperExec (``--parent-pid``) and exits when it is gone.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib
import multiprocessing
import os
import select
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

from flwr.supercore import log
from flwr.supercore.constant import ExecutorType, TaskType
from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
from flwr.supercore.superexec.executor.types import ExecutionSpec, LaunchResult

MESSAGE, REPLIED = b"\0", b"\1"  # wake bytes (WakeableSleep): a message pulled whole; a reply pushed
TIDY_S = 0.05  # seconds between tidies while a handed process exits after its reply (WakeableSleep)
MAX_EARLY_EXITS = 3  # workers that exit before any token, in a row, before the pool is switched off
STOP_GRACE_S = 5.0  # seconds an idle worker gets to exit on SIGTERM before SIGKILL
# What fedtext's ClientApp shim (fedtext.client_app and the fedtext modules it imports) imports from outside
# fedtext, imported by a warm process before its task: the task then imports only the FAB's own fedtext.
# tests/unit/test_warm_exec.py checks that this covers everything `import fedtext.client_app` loads.
SHIM_IMPORTS = ("flwr.app", "flwr.app.message_type", "flwr.client", "flwr.client.mod", "flwr.clientapp.typing",
                "flwr.common", "flwr.common.secure_aggregation.secaggplus_constants", "flwr.compat.common",
                "resource", "tomllib")
SUPEREXEC = "flower-superexec"  # what Flower's SuperNode starts in subprocess isolation (start_client_internal.py)
# How a ready ClientApp process is made: "spawn", a new Python (`python -m fedtext.node.warm_exec worker`: ~0.7 s of
# CPU to import Flower, measured), or "fork", forked from multiprocessing's fork server, one process per SuperExec
# that imported FORK_PRELOAD once (~0.01 s of CPU a process, measured 2026-11-30: docs/performance.md). The
# default is fork: 0.8-1.7 s a round faster on the demo's 2 cores in each of four methods (docs/performance.md), the
# same records, token channel and single-use process; spawn stays for a platform without multiprocessing's fork
# server (a pool whose fork server cannot start falls back to Flower's cold starts with one warning)
WARM_STARTS = ("spawn", "fork")
WARM_START = "fork"
LOST_STATUS = 255  # what multiprocessing reads as a forked worker's status when its fork server could not report
# what the fork server imports once, so that a forked worker imports nothing before its task: the shim's imports
# and the worker's own (worker_main's, and httpcore, which its first HTTP client imports). Not this module itself:
# a worker of a SuperExec started as `python -m fedtext.node.warm_exec` runs it again as multiprocessing's __mp_main__,
# which runpy warns about when the module is imported already
FORK_PRELOAD = (*SHIM_IMPORTS, "fedtext.records.probes", "flwr.common.args",
                "flwr.supercore.app_utils", "flwr.supercore.tls", "flwr.supernode.runtime.run_clientapp", "httpcore")


@dataclass(frozen=True)
class WorkerKey:
    """What a ClientApp process is started with, less its token: a task whose spec differs runs cold.

    The fields are :class:`~flwr.supercore.superexec.executor.types.ExecutionSpec`'s own, as
    Flower's ``SubprocessExecutor.launch`` turns them into ``flwr-clientapp`` flags.
    """

    runtime_api_address: str
    insecure: bool
    root_certificates_path: str | None
    runtime_dependency_install: bool
    parent_pid: int | None

    @classmethod
    def of(cls, spec: ExecutionSpec) -> WorkerKey:
        return cls(spec.runtime_api_address, spec.insecure, spec.root_certificates_path,
                   spec.runtime_dependency_install, spec.parent_pid)

    def command(self) -> list[str]:
        """The worker's command: ``python -m fedtext.node.warm_exec worker`` and :meth:`worker_args`."""
        return [sys.executable, "-m", "fedtext.node.warm_exec", "worker", *self.worker_args()]

    def worker_args(self) -> list[str]:
        """The worker's flags: ``flwr-clientapp``'s (Flower's ``SubprocessExecutor.launch`` order)
        with ``--token-stdin`` where that one has ``--token T``."""
        args = ["--runtime-api-address", self.runtime_api_address, "--token-stdin"]
        if self.insecure:
            args.append("--insecure")
        elif self.root_certificates_path is not None:
            args += ["--root-certificates", self.root_certificates_path]
        if self.parent_pid is not None:
            args += ["--parent-pid", str(self.parent_pid)]
        if self.runtime_dependency_install:
            args.append("--allow-runtime-dependency-installation")
        return args


class PipeWriter:
    """The write end of a forked worker's token pipe, as the pool writes a ``Popen``'s stdin."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:  # a token line (129 bytes) is one write: under PIPE_BUF, so never split
            view = view[os.write(self.conn.fileno(), view):]

    def close(self) -> None:
        self.conn.close()


def run_with_stdin(reader: Any, target: Callable[[list[str]], int], argv: list[str]) -> None:
    """A forked worker's body: the token pipe's read end becomes its standard input (file
    descriptor 0, which multiprocessing pointed at /dev/null), then ``target(argv)`` runs as a
    spawned worker's ``main`` would, its return value the exit status."""
    os.dup2(reader.fileno(), 0)
    reader.close()
    sys.stdin = open(0)  # noqa: SIM115 - Flower's token reader closes it, and with it fd 0 (the pipe's last reader)
    # Python's `random` reseeds itself in a forked child; NumPy's global generator does not, and every child of
    # one fork server would draw the same numbers (SecAgg+'s stochastic rounding, Flower's quantize, uses it)
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    sys.exit(target(argv))


class ForkedWorker:
    """A ready ClientApp process forked by multiprocessing's fork server (a process of this
    SuperExec's that imported :data:`FORK_PRELOAD` once), seen through the part of
    ``subprocess.Popen`` the pool uses: ``pid``, ``poll``, ``returncode`` (negative: the signal
    that ended it, reported by the fork server), ``stdin``, ``terminate``, ``kill``, ``wait``.
    The token travels as a spawned worker's does: down a pipe only this process holds the write
    end of, which is the worker's standard input; the worker's command line is the fork server's.

    A fork server that died cannot report its workers' ends: multiprocessing then reads every one
    as status 255. :meth:`poll` counts such a worker as running while its process exists, and once
    it is gone as :attr:`lost` (its end unknown: the pool fails its task as a killed one's, which
    does nothing to a task that was answered). The worker is not in multiprocessing's list of
    children, so this process's exit never waits for a running task (a spawned ``Popen`` does not
    either); a new fork server starts with the next worker.

    Parameters
    ----------
    target
        What the process runs (:func:`worker_main`; tests give a stand-in), a module-level
        function: multiprocessing hands it to the fork server by name.
    argv
        Its arguments (:meth:`WorkerKey.worker_args`).
    """

    def __init__(self, target: Callable[[list[str]], int], argv: list[str]) -> None:
        ctx = fork_context()
        reader, writer = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=run_with_stdin, args=(reader, target, argv), daemon=False)
        try:
            self._proc.start()
        except BaseException:
            writer.close()
            raise
        finally:
            reader.close()  # the child has its own copy; the pipe's EOF then follows the writer alone
        # multiprocessing joins its children at exit: the SuperExec would wait for every running task
        getattr(multiprocessing.process, "_children", set()).discard(self._proc)
        self.pid = int(self._proc.pid or 0)
        self.stdin: PipeWriter | None = PipeWriter(writer)
        self.lost = False  # ended while its fork server could not report how (poll)

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        code = self._proc.exitcode
        if code == LOST_STATUS:  # the fork server's report, or its absence: is the process still there?
            try:
                os.kill(self.pid, 0)
                return None
            except (ProcessLookupError, PermissionError):  # gone (or its pid now another user's process)
                self.lost = True
        return code

    def terminate(self) -> None:
        self._proc.terminate()

    def kill(self) -> None:
        self._proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"forked ClientApp process {self.pid}", timeout or 0.0)
        return code


def fork_context() -> Any:
    """multiprocessing's fork-server context, its preload set to :data:`FORK_PRELOAD` (the server
    starts with the first worker, ~1.3 s once, and serves this process's workers from then on)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORK_PRELOAD))
    return ctx


class WarmClientAppExecutor(SubprocessExecutor):
    """Flower's subprocess executor, but a ClientApp task goes to a process started ahead of need.

    Parameters
    ----------
    size : int
        ClientApp processes kept ready (>= 1).
    key : WorkerKey
        What they are started with; tasks whose spec has another key run cold.
    command : list[str] or None
        The worker's command (default ``key.command()``); tests give a stand-in.
    fail_task : callable or None
        What is done with the token of a task whose process a signal killed (default
        :func:`fail_killed_task` on ``key``'s Runtime API); tests give a recorder.
    start : str
        How a ready process is made (:data:`WARM_STARTS`): ``"spawn"`` runs ``command``,
        ``"fork"`` forks ``target`` from the fork server (:class:`ForkedWorker`).
    target : callable or None
        With ``start="fork"``: what a forked process runs on ``key``'s worker flags (default
        :func:`worker_main`); tests give a stand-in.
    """

    def __init__(self, size: int, key: WorkerKey, command: list[str] | None = None,
                 fail_task: Callable[[str], None] | None = None, start: str = WARM_START,
                 target: Callable[[list[str]], int] | None = None) -> None:
        if size < 1:
            raise ValueError(f"a warm pool needs size >= 1, got {size}")
        if start not in WARM_STARTS:
            raise ValueError(f"a warm pool starts its processes by {' or '.join(WARM_STARTS)}, got {start!r}")
        if command is not None and start != "spawn":  # a forked process runs `target`: a command would be ignored
            raise ValueError(f"a warm pool runs a command only when it spawns its processes, not by {start}")
        self.size, self.key, self.start = size, key, start
        self._command = command or key.command()
        self._target = target or worker_main
        self._ready: collections.deque[Any] = collections.deque()  # subprocess.Popen or ForkedWorker
        self._busy: list[Any] = []  # handed a token; kept to reap them
        self._tokens: dict[int, tuple[int, str]] = {}  # pid of a busy process -> (task id, its token)
        self._fail_task = fail_task or (lambda token: fail_killed_task(key, token))
        self.killed = 0  # handed processes a signal ended before their task was answered
        self.warm = 0  # tasks handed to a ready process
        self.cold = 0  # tasks started cold (none ready, another key, another task type)
        self.early_exits = 0  # ready processes that exited before any token, in a row
        self.enabled = True
        self._fill()

    # -------------------------------------------------------------------------------- the pool
    def _start(self) -> Any:
        if self.start == "fork":
            return ForkedWorker(self._target, self.key.worker_args())
        return subprocess.Popen(self._command, stdin=subprocess.PIPE, close_fds=True)

    def _prune(self) -> None:
        """Reap finished tasks (failing the task of one a signal killed: :func:`fail_killed_task`);
        count ready processes that died without a task."""
        running = []
        for proc in self._busy:
            if proc.poll() is None:
                running.append(proc)
                continue
            task_id, token = self._tokens.pop(proc.pid, (-1, ""))
            lost = getattr(proc, "lost", False)  # a forked one whose end its fork server could not report
            if (proc.returncode < 0 or lost) and token:  # a signal: Flower's exit handler did not run
                self.killed += 1
                how = "ended, its fork server gone (how unknown)," if lost else f"was killed (signal {-proc.returncode})"
                log(WARNING, "fedtext: warm ClientApp process %d %s with task %d: the task fails (Flower's error "
                    "reply when its claim expires) and the round goes on", proc.pid, how, task_id)
                try:
                    self._fail_task(token)
                except Exception as err:  # noqa: BLE001 - the SuperExec's loop must go on; Flower's expiry still runs
                    log(WARNING, "fedtext: could not finish task %d's start for Flower's expiry: %r", task_id, err)
        self._busy = running
        alive = collections.deque()
        for proc in self._ready:
            if proc.poll() is None:
                alive.append(proc)
                continue
            self.early_exits += 1
            if proc.stdin is not None:
                proc.stdin.close()
        self._ready = alive
        self._switch_off_if_broken()

    def _switch_off_if_broken(self) -> None:
        """After :data:`MAX_EARLY_EXITS` ready processes in a row exited (or could not be started)
        before any task, stop keeping any: every task then starts Flower's cold ClientApp."""
        if self.enabled and self.early_exits >= MAX_EARLY_EXITS:
            self.enabled = False
            log(WARNING, "fedtext: %d warm ClientApp processes in a row exited or could not be started before any "
                "task: every task now starts Flower's cold flwr-clientapp", self.early_exits)
            self.close()

    def _fill(self) -> None:
        """Top the pool up to ``size`` while no handed task runs; while one runs, only to one ready
        process (a node's tasks come one after another, and the next must not start cold). A process's
        start-up beside a task's compute takes its CPU: on the demo (2 SuperNodes, 2 cores) replacing
        each handed process at once made fedprompt's fit 1.0 -> 1.6 s and its evaluate 0.6 -> 0.8 s."""
        if not self.enabled:
            return
        while self.enabled and len(self._ready) < (1 if self._busy else self.size):
            try:
                self._ready.append(self._start())
            except Exception as err:  # noqa: BLE001 - a fork server that cannot start: cold starts, not a dead SuperExec
                self.early_exits += 1
                log(WARNING, "fedtext: could not start a warm ClientApp process (%r)", err)
                self._switch_off_if_broken()
                return

    def _hand(self, proc: Any, token: str) -> bool:
        """Write ``token`` and a newline to ``proc``'s standard input and close it; False when the
        process is gone (it then counts as an early exit)."""
        if proc.poll() is not None or proc.stdin is None:
            self.early_exits += 1
            return False
        try:
            proc.stdin.write(f"{token}\n".encode("ascii"))
            proc.stdin.close()
        except (BrokenPipeError, OSError):
            self.early_exits += 1
            return False
        return True

    # ----------------------------------------------------------------------- Flower's interface
    def launch(self, spec: ExecutionSpec) -> LaunchResult:
        """Hand a ClientApp task to a ready process; anything else, or none ready, starts cold."""
        if spec.task_type == TaskType.CLIENT_APP and self.enabled and WorkerKey.of(spec) == self.key:
            self._prune()
            while self._ready:
                proc = self._ready.popleft()
                if self._hand(proc, spec.token):
                    self.early_exits = 0
                    self._busy.append(proc)
                    self._tokens[proc.pid] = (spec.task_id, spec.token)
                    self.warm += 1
                    log(INFO, "fedtext: task %d to warm ClientApp process %d", spec.task_id, proc.pid)
                    self._fill()  # a new one only if none is left ready (the rest once this task is done)
                    return LaunchResult.accepted()
        self.cold += 1
        log(INFO, "fedtext: task %d to a cold %s (no warm process fits it)", spec.task_id, spec.task_type)
        result = super().launch(spec)
        self._fill()
        return result

    def tidy(self) -> bool:
        """Between tasks, told by the SuperNode that a reply was pushed (:class:`WakeableSleep`):
        :meth:`reconcile`; True while a handed process is still running (exiting after its reply)."""
        self.reconcile()
        return bool(self._busy)

    def reconcile(self) -> None:
        """Between Flower's task polls: reap, replace ready processes that died, and top the pool up
        once the tasks handed out are done."""
        self._prune()
        self._fill()

    def close(self) -> None:
        """Stop the ready processes (they hold no task); running tasks finish as Flower's would."""
        ready, self._ready = list(self._ready), collections.deque()
        for proc in ready:
            if proc.poll() is None:
                proc.terminate()
        for proc in ready:
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()


def fail_killed_task(key: WorkerKey, token: str) -> None:
    """Finish the start of a task whose ClientApp process was killed, so that Flower's expiry answers it.

    Does, with the dead process's ``token``, the two calls ``run_clientapp``'s ``pull_task_input``
    begins a task with (Flower's own client, interceptors and requests), each allowed to fail:
    ``PullTaskInput`` moves a task still STARTING to RUNNING (one already RUNNING is refused) and
    ``PullMessages`` marks its message retrieved (none left: the process had pulled it). The claim
    then expires 2 x 30 s after the last heartbeat and Flower stores its ``CLIENT_APP_CRASHED``
    error reply for the retrieved message (the module docstring says why this is needed).
    """
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullTaskInputRequest
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    retry = make_simple_http_retry_invoker()
    retry.max_tries = 1  # as run_clientapp's exit handler: one try each, the SuperExec's loop waits on it
    certificates = None if key.insecure or key.root_certificates_path is None else Path(
        key.root_certificates_path).read_bytes()
    client = RuntimeHttpClient.from_server_address(
        server_address=key.runtime_api_address, insecure=key.insecure, root_certificates=certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                      RuntimeTokenHttpInterceptor(token)], retry_invoker=retry)
    try:
        for call, request in ((client.PullTaskInput, PullTaskInputRequest()),
                              (client.PullMessages, PullAppMessagesRequest())):
            try:
                call(request)
            except Exception:  # noqa: BLE001, S112 - refused (already RUNNING, token expired): the next call decides
                continue
    finally:
        client.close()


# ------------------------------------------------------------------------------ Flower's contracts
def flower_contract_problems() -> list[str]:
    """What of Flower this module relies on has changed (empty: all as in Flower 1.42).

    Checked before a SuperNode turns warm processes on (:func:`fedtext.node.supernode.main`): a Flower
    that moved one of these parts runs with Flower's cold ClientApps and one line that says which
    part, instead of a patch that silently does nothing or breaks a node. tests/unit/test_warm_exec.py
    asserts the list is empty for the pinned Flower.
    """
    import inspect

    problems = []

    def check(what: str, test: Callable[[], bool]) -> None:
        try:
            ok = test()
        except Exception:  # noqa: BLE001 - a missing module or name is a changed contract too
            ok = False
        if not ok:
            problems.append(what)

    def supernode() -> bool:
        import flwr.supernode.start_client_internal as loop

        source = inspect.getsource(loop)
        return (loop.subprocess is subprocess and f'command = ["{SUPEREXEC}"]' in source
                and "subprocess.Popen(command)" in source and '"--runtime-api-address"' in source)

    def superexec() -> bool:
        import flwr.supercore.superexec.run_superexec as rs

        params = list(inspect.signature(rs.get_executor).parameters)
        return "get_executor(" in inspect.getsource(rs.run_superexec) and params[:2] == ["executor_type",
                                                                                           "executor_config"]

    def spec() -> bool:
        from flwr.supercore.superexec.plugin import base_exec_plugin

        fields = set(ExecutionSpec.__dataclass_fields__)
        return ({"task_type", "token", *WorkerKey.__dataclass_fields__} <= fields
                and "parent_pid=os.getpid()" in inspect.getsource(base_exec_plugin))

    def token_stdin() -> bool:
        from flwr.common.args import add_args_flwr_app_common, try_obtain_flwr_app_token

        parser = argparse.ArgumentParser()
        add_args_flwr_app_common(parser, include_token_stdin=True)
        return parser.parse_args(["--token-stdin"]).token_stdin is True and callable(try_obtain_flwr_app_token)

    def clientapp() -> bool:
        from flwr.supernode.runtime import run_clientapp as runtime

        source = inspect.getsource(runtime.run_clientapp)
        return (list(inspect.signature(runtime.run_clientapp).parameters) == [
            "runtime_api_address", "token", "insecure", "certificates", "parent_pid", "runtime_dependency_install"]
            and source.count("pull_task_input(") == 1 and "install_from_fab(" in source
            and "RuntimeHttpClient.from_server_address(" in source
            and callable(runtime.make_simple_http_retry_invoker))

    def installer() -> bool:
        from flwr.cli import install

        source = inspect.getsource(install.validate_and_install)
        return ("if install_path.exists():" in source and "fab_hash[:FAB_HASH_TRUNCATION]" in source
                and "if skip_prompt:\n            return install_path" in source)

    def expiry() -> bool:
        from flwr.supernode.nodestate import in_memory_nodestate as nodestate
        from flwr.supernode.runtime import run_clientapp as runtime

        pull = inspect.getsource(runtime.pull_task_input)
        replies = inspect.getsource(nodestate.InMemoryNodeState._store_error_replies)
        return (pull.index("client.PullTaskInput(") < pull.index("client.PullMessages(")
                and "entry.is_retrieved" in replies and "_store_error_replies" in inspect.getsource(
                    nodestate.InMemoryNodeState._on_task_tokens_expired))

    check("the SuperNode's Popen of flower-superexec (flwr/supernode/start_client_internal.py)", supernode)
    check("the SuperExec's get_executor (flwr/supercore/superexec/run_superexec.py)", superexec)
    check("the executor's ExecutionSpec and its parent_pid (flwr/supercore/superexec/executor/types.py)", spec)
    check("--token-stdin of Flower's app arguments (flwr/common/args.py)", token_stdin)
    check("run_clientapp's arguments and its one task (flwr/supernode/runtime/run_clientapp.py)", clientapp)
    check("install_from_fab's installed-folder return (flwr/cli/install.py)", installer)
    check("a task's two starting calls and the expiry's error replies for retrieved messages "
          "(flwr/supernode/runtime/run_clientapp.py, flwr/supernode/nodestate/in_memory_nodestate.py)", expiry)
    return problems


def wake_contract_problems() -> list[str]:
    """What of Flower waking a warm SuperExec relies on has changed (empty: as in Flower 1.42): the
    SuperExec's loop sleeping ``time.sleep(task_poll_interval)`` on its module's ``time``, and the
    SuperNode's loop calling its module's ``_pull_and_store_message``, which creates the message's task
    and returns its run id. A Flower that moved them runs the warm SuperExec polled
    (:func:`fedtext.node.supernode.wake_superexec`)."""
    import inspect
    import re

    try:
        import flwr.supercore.superexec.run_superexec as rs
        import flwr.supernode.start_client_internal as loop

        pull = inspect.getsource(getattr(loop._pull_and_store_message, "__wrapped__", loop._pull_and_store_message))
        ok = (re.search(r"^import time$", inspect.getsource(rs), re.MULTILINE) is not None
              and "time.sleep(task_poll_interval)" in inspect.getsource(rs.run_superexec)
              and "run_id = _pull_and_store_message(" in inspect.getsource(loop.start_client_internal)
              and "state.create_task(" in pull and "return run_id" in pull)
    except Exception:  # noqa: BLE001 - a missing module or name is a changed contract too
        ok = False
    return [] if ok else ["this Flower changed the SuperExec's sleep between task polls or the SuperNode's pull that "
                          "creates a task (flwr/supercore/superexec/run_superexec.py, "
                          "flwr/supernode/start_client_internal.py)"]


# ------------------------------------------------------------------------------ the SuperExec
def superexec_args(argv: list[str]) -> argparse.Namespace:
    """The ``flower-superexec`` flags a warm pool's processes copy (the rest are Flower's alone)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--runtime-api-address", "--appio-api-address", dest="runtime_api_address", default="")
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--root-certificates", default=None)
    ap.add_argument("--allow-runtime-dependency-installation", dest="runtime_dependency_install",
                    action="store_true")
    return ap.parse_known_args(argv)[0]


def executor_factory(size: int, key: WorkerKey, start: str = WARM_START,
                     made: Callable[[WarmClientAppExecutor], None] | None = None) -> Any:
    """Flower's ``get_executor`` with the subprocess type answered by a warm pool of ``size``
    whose processes are made by ``start`` (:data:`WARM_STARTS`), handed to ``made`` when made."""
    from flwr.supercore.superexec.executor import factory

    def get_executor(executor_type: ExecutorType, executor_config: Any = None, **kwargs: Any) -> Any:
        if executor_type == ExecutorType.SUBPROCESS:
            pool = WarmClientAppExecutor(size, key, start=start)
            if made is not None:
                made(pool)
            return pool
        return factory.get_executor(executor_type, executor_config, **kwargs)

    return get_executor


class WakeableSleep:
    """The ``time`` module as Flower's SuperExec loop sees it: its sleep between looks for a task
    (``time.sleep(task_poll_interval)`` in ``run_superexec``) is a wait on the wake pipe ``fd``, whose
    bytes its SuperNode writes (:func:`fedtext.node.supernode.wake_on_pull`):

    * :data:`MESSAGE`, a message pulled and stored whole: the sleep ends and the loop looks for its
      task at once. One byte a sleep: Flower's look claims one task, so two messages pulled while
      the loop was busy get two looks, not one and then a full sleep.
    * :data:`REPLIED`, a reply pushed: ``tidy`` reaps the task's process and readies another
      (:meth:`WarmClientAppExecutor.tidy`), again every :data:`TIDY_S` while the process is still
      exiting, and the sleep goes on. It does not look for a task: Flower's SuperNode creates a task
      before it has pulled the message's objects, and a ClientApp that starts then finds them
      missing and backs off 1 s, then 2 s (``pull_objects``' ``PULL_INITIAL_BACKOFF``): the start-ups
      of 1.3-3.6 s a round that looks at the wrong moment cost (measured on the demo, 2026-11-30).

    The sleep's full length passes with no byte only between messages (a look then finds a task made
    some other way, or nothing). At the pipe's end (its SuperNode gone) the sleeps are Flower's plain
    ones again; the parent monitor ends this process.
    """

    def __init__(self, fd: int | None, tidy: Callable[[], bool] | None = None) -> None:
        self.fd = fd
        self.tidy = tidy or (lambda: False)
        self.wakes = 0  # sleeps a message ended early
        self.replies = 0  # replies the SuperNode pushed
        if fd is not None:
            os.set_blocking(fd, False)  # a byte select saw is read without waiting, or not at all

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if self.fd is None:
            time.sleep(seconds)
            return
        deadline = time.monotonic() + seconds
        tidying = False  # a handed process is still exiting: tidy again in TIDY_S
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.fd], [], [], min(left, TIDY_S) if tidying else left)
            if not readable:
                if not tidying:
                    return
                tidying = self.tidy()
                continue
            try:
                byte = os.read(self.fd, 1)
            except BlockingIOError:  # no byte after all
                continue
            if not byte:  # the pipe's end
                os.close(self.fd)
                self.fd = None
                return
            if byte == REPLIED:
                self.replies += 1
                tidying = self.tidy()
                continue
            self.wakes += 1
            return


def superexec_main(argv: list[str]) -> int:
    """``python -m fedtext.node.warm_exec superexec --warm N [--start spawn|fork] [--wake-fd FD] --
    <flower-superexec arguments>``."""
    ap = argparse.ArgumentParser(prog="python -m fedtext.node.warm_exec superexec")
    ap.add_argument("--warm", type=int, required=True, help="ClientApp processes kept ready (>= 1)")
    ap.add_argument("--start", choices=WARM_STARTS, default=WARM_START,
                    help=f"how a ready process is made (default {WARM_START}; fork: from a fork server that "
                         "imported Flower once)")
    ap.add_argument("--wake-fd", type=int, default=None,
                    help="an inherited pipe its SuperNode writes to: a message pulled ends the sleep between task "
                         "polls, a reply pushed has the pool tidied (WakeableSleep; fedtext.node.supernode)")
    ap.add_argument("superexec", nargs=argparse.REMAINDER, help="-- and flower-superexec's arguments")
    args = ap.parse_args(argv)
    rest = args.superexec[1:] if args.superexec[:1] == ["--"] else args.superexec
    if args.warm < 1:
        ap.error(f"--warm must be >= 1, got {args.warm}")
    flags = superexec_args(rest)
    if not flags.runtime_api_address:
        ap.error("give flower-superexec's --runtime-api-address after --")
    # Flower's plugin gives every spec parent_pid = the SuperExec's own PID (base_exec_plugin.py)
    key = WorkerKey(flags.runtime_api_address, flags.insecure,
                    None if flags.insecure else flags.root_certificates,
                    flags.runtime_dependency_install, os.getpid())
    import flwr.supercore.superexec.run_superexec as run_superexec
    from flwr.supercore.cli.flower_superexec import flower_superexec

    pools: list[WarmClientAppExecutor] = []
    run_superexec.get_executor = executor_factory(args.warm, key, args.start, pools.append)  # the module's own name
    if args.wake_fd is not None:
        os.set_inheritable(args.wake_fd, False)  # not for the ClientApp processes it starts
        # the module's own name for `time`; nothing else changes
        run_superexec.time = WakeableSleep(args.wake_fd, lambda: pools[-1].tidy() if pools else False)
    sys.argv = ["flower-superexec", *rest]
    flower_superexec()
    return 0


# ------------------------------------------------------------------------------ the worker
def forget_fedtext(modules: dict[str, Any] | None = None) -> list[str]:
    """Drop ``fedtext`` and its submodules from ``modules`` (default ``sys.modules``): the task
    imports the FAB's own fedtext. Returns the names dropped."""
    modules = sys.modules if modules is None else modules
    names = [n for n in modules if n == "fedtext" or n.startswith("fedtext.")]
    for name in names:
        del modules[name]
    return names


def installed_fab(fab_content: bytes, home: Path | None = None) -> Path | None:
    """The folder Flower installed the FAB ``fab_content`` into, when it is there: ``<FLWR_HOME>/apps/
    <publisher>.<name>.<version>.<first FAB_HASH_TRUNCATION hex digits of its SHA-256>``, found by
    that hash alone (exactly one such folder holding a ``pyproject.toml``); None otherwise."""
    from flwr.common.config import get_flwr_home
    from flwr.common.constant import APP_DIR, FAB_HASH_TRUNCATION

    digest = hashlib.sha256(fab_content).hexdigest()[:FAB_HASH_TRUNCATION]
    apps = (home or get_flwr_home()) / APP_DIR
    found = [p for p in apps.glob(f"*.{digest}") if (p / "pyproject.toml").is_file()] if apps.is_dir() else []
    return found[0] if len(found) == 1 else None


def install_once(install_from_fab: Callable[..., Path]) -> Callable[..., Path]:
    """Flower's ``install_from_fab`` for a ClientApp task: a FAB already installed is not unpacked again.

    Flower's own function unpacks the whole FAB into a temporary folder, checks every file's
    SHA-256 against its manifest and reads its ``pyproject.toml`` only to name the install folder;
    when that folder exists it returns it untouched (``validate_and_install`` with
    ``skip_prompt``). That costs every message 0.4-0.7 s here (measured on the demo) for a folder
    keyed by the FAB's own SHA-256, which this wrapper finds by the hash directly. A FAB not yet
    installed (a run's first message on this node) goes through Flower's function, checks and all.
    """

    def install(fab_file: Path | bytes, install_dir: Path | None = None, skip_prompt: bool = False) -> Path:
        if isinstance(fab_file, bytes) and install_dir is None and skip_prompt:
            found = installed_fab(fab_file)
            if found is not None:
                return found
        return install_from_fab(fab_file, install_dir, skip_prompt)

    return install


def share_telemetry_context() -> ssl.SSLContext | None:
    """Build once, now, the HTTPS context ``urllib.request.urlopen`` uses when called without one:
    Flower's telemetry (``flwr.supercore.telemetry.create_event``), which a ClientApp process sends
    twice a message (run enter, and exit in ``flwr_exit``). Without this each send on Python 3.11
    built a new default context and loaded the system's CA roots into it (3.12 and later build one
    a process, for the first send): 38 ms of CPU an event of a warm process here, 1.5 ms with the
    context built ahead (measured 2026-12-03; OpenSSL's ``set_default_verify_paths``), ~75 ms of CPU a
    message taken from the node's fits. It is the context the stdlib would build
    (``ssl.create_default_context``: certificates and host names verified), installed as urllib's
    opener (``install_opener``, urllib's own seam); a context passed explicitly is never changed by
    urllib or http.client, and ``http.client`` connections opened without one still get their own.
    What telemetry sends is unchanged; with Flower's telemetry off (``FLWR_TELEMETRY_ENABLED=0``)
    nothing is built (None).
    """
    import urllib.request

    from flwr.supercore import telemetry

    if telemetry.FLWR_TELEMETRY_ENABLED != "1":  # Flower's own test: it sends only when "1"
        return None
    context = ssl.create_default_context()
    urllib.request.install_opener(urllib.request.build_opener(urllib.request.HTTPSHandler(context=context)))
    return context


def worker_main(argv: list[str]) -> int:
    """One single-use ClientApp process: import, wait for one token on stdin, run that task."""
    from flwr.common.args import add_args_flwr_app_common, try_obtain_flwr_app_token
    from flwr.supercore.app_utils import start_parent_process_monitor
    from flwr.supercore.tls import validate_and_resolve_root_certificates
    from flwr.supernode.runtime import run_clientapp as runtime

    from fedtext.records.probes import TASK_START_ENV

    for name in SHIM_IMPORTS:
        importlib.import_module(name)

    ap = argparse.ArgumentParser(prog="python -m fedtext.node.warm_exec worker")
    ap.add_argument("--runtime-api-address", required=True)
    add_args_flwr_app_common(ap, include_token_stdin=True)
    args = ap.parse_args(argv)
    if not args.token_stdin:
        ap.error("a warm ClientApp process takes its token on standard input only (--token-stdin)")
    certificates = validate_and_resolve_root_certificates(args.root_certificates, args.insecure)
    if args.parent_pid is not None:
        start_parent_process_monitor(args.parent_pid)  # idle: exit with the SuperExec
    # The task's first HTTP client imports httpcore and builds its transport (0.1 s idle, 0.2-0.5 s
    # on a busy node): one made and closed now leaves only the connection to the task.
    runtime.RuntimeHttpClient.from_server_address(
        server_address=args.runtime_api_address, insecure=args.insecure, root_certificates=certificates,
        interceptors=[], retry_invoker=runtime.make_simple_http_retry_invoker()).close()
    share_telemetry_context()  # Flower's telemetry: CA roots loaded once, not twice a message
    if sys.path and sys.path[0] == os.getcwd():
        sys.path.pop(0)  # `python -m` put the working folder first; flwr-clientapp has no such entry
    forget_fedtext()
    try:
        if not sys.stdin.buffer.peek(1):  # closed with no token: the pool stopped this idle process
            return 0
    except KeyboardInterrupt:  # the parent monitor's SIGINT: the SuperExec is gone
        return 0
    os.environ[TASK_START_ENV] = repr(time.time())  # the task's start-up begins now (fedtext.records.probes)
    token = try_obtain_flwr_app_token(args)  # Flower's reader: one bounded hex line, then stdin closed
    runtime.install_from_fab = install_once(runtime.install_from_fab)  # the module's own name, read per call
    runtime.run_clientapp(runtime_api_address=args.runtime_api_address, token=token, insecure=args.insecure,
                  certificates=certificates, parent_pid=args.parent_pid,
                  runtime_dependency_install=args.runtime_dependency_install)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    roles = {"superexec": superexec_main, "worker": worker_main}
    if not argv or argv[0] not in roles:
        print("usage: python -m fedtext.node.warm_exec {superexec,worker} ...", file=sys.stderr)
        return 2
    return roles[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
