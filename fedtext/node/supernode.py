"""``flower-supernode`` with its idle poll shortened: ``python -m fedtext.node.supernode
[--idle-poll-s S] <flower-supernode arguments>``.

Flower 1.42's SuperNode asks the SuperLink for a message, and when none is waiting sleeps
3 s before it asks again (``flwr/supernode/start_client_internal.py``: ``time.sleep(3)``).
A round sends each node two messages (fit, then evaluate) a few seconds apart, and each
finds the node asleep: ~1.5 s on average before a fit starts and ~3 s before its evaluate
(a node polls at once after a reply, finds nothing, and sleeps just as the server sends),
where Flower's in-memory simulation grid polls every 0.1 s. This module runs Flower's own
SuperNode, unchanged but for its sleeps: the idle one capped at ``--idle-poll-s`` (default
:data:`IDLE_POLL_S`: a node then asks twice a second while idle), and at ``--active-poll-s``
(default :data:`ACTIVE_POLL_S`) for :data:`ACTIVE_WINDOW_S` after each reply it pushed (the
round's next message is seconds away), and its 0.5 s waits on its own state (the ClientApp's
reply, an object's bytes: ~0.25 s on every message) at :data:`LOCAL_WAIT_S`, each ended as soon as the
node's state stores a reply or an object (:func:`wake_on_store`). ``--idle-poll-s 3
--active-poll-s 3`` keeps Flower's idle poll. Against fedtext's SuperLink (:mod:`fedtext.server.superlink`),
which holds an empty poll up to 2 s until a message comes, a poll that came back empty after
:data:`HELD_S` or more is asked again at once: the message then reaches the node within milliseconds,
and an idle node asks once per hold instead of twice a second.

Its SuperExec (the process that starts a ClientApp for each message the SuperNode received)
looks for new messages once a second by default: ~0.5 s more before every message. Flower has
a switch for that one, the environment variable ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``; this
module sets it, where it is not set, to :data:`TASK_POLL_S` for Flower's own SuperExec and to
:data:`WOKEN_TASK_POLL_S` for a warm one it wakes (below; the SuperExec asks its own SuperNode on
this device, not the SuperLink). ``python -m fedtext.node.service``
starts the SuperNode through here (docs/deployment.md; tests/unit/test_node_service.py
checks that Flower's loop still sleeps 3 s where this caps it).

With ``--warm-clientapps N`` (N >= 1; the node service passes its own default,
:data:`fedtext.node.service.WARM_CLIENTAPPS`) the SuperExec the SuperNode starts keeps N ClientApp
processes ready, each handed one task token over its standard input (:mod:`fedtext.node.warm_exec`):
the SuperNode's own ``flower-superexec`` command, built by Flower, is run as ``python -m
fedtext.node.warm_exec superexec --warm N -- <its arguments>`` (:func:`start_warm_superexec`).
``--warm-clientapps 0`` keeps Flower's cold ``flwr-clientapp`` per message. ``--warm-start``
says how each ready process is made: forked from a fork server that imported Flower once (the
default, :data:`fedtext.node.warm_exec.WARM_START`) or a new Python (``spawn``).

The warm SuperExec is also woken rather than polled (:func:`wake_superexec`): the SuperNode
writes a byte to a pipe whose read end only that SuperExec holds each time it pulled a message
(Flower's ``_pull_and_store_message``, which creates the message's task) and after it pushed the
reply, and the SuperExec's sleep between its looks for a task ends at a message's byte (a
reply's has its pool tidied: :class:`fedtext.node.warm_exec.WakeableSleep`). Its looks between
messages then come every :data:`WOKEN_TASK_POLL_S` s instead of 0.1 s. Why:
ten polls a second of each SuperExec, each one a request its SuperNode serves, took about a
third of a core on T1's ten SuperNodes (measured 2026-11-30 by sampling every process's CPU through a
round: docs/performance.md), CPU a round's fits then lacked; a woken SuperExec starts a task
without even the 0.05 s a 0.1 s poll waits on average. And a look must not come while a message
is half pulled: Flower's SuperNode creates the task before it pulls the message's objects, and a
ClientApp started then finds them missing and backs off 1 s (read in Flower's code: a look at
each pushed reply and every 1 s, tried first, gave one round of each demo method start-ups of
1.3-3.6 s); woken only once the pull returned, only its looks every :data:`WOKEN_TASK_POLL_S` s
between messages can, rarely.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any

from fedtext.common.pulls import HELD_S  # an empty poll at least this long was held by the SuperLink

IDLE_POLL_S = 0.5  # seconds between a SuperNode's polls while no message waits (Flower: 3)
# seconds between polls for ACTIVE_WINDOW_S after the node pushed a reply: a round's next message (its evaluate,
# the next round's fit) comes seconds later, and each waits half a poll on average: 0.25 s at 0.5, 0.05 s at 0.1
# (two messages a round). A node not sampled for ACTIVE_WINDOW_S polls at IDLE_POLL_S: the fast polls are the
# cohort's, ~10 small requests a second each, not the whole fleet's
ACTIVE_POLL_S = 0.1
ACTIVE_WINDOW_S = 30.0
IDLE_SLEEP_S = 3.0  # Flower's idle sleep, the one IDLE_POLL_S caps (tests/unit/test_edge.py checks it is still 3)
LOCAL_WAIT_S = 0.05  # the loop's waits on its own state (Flower: 0.5 s), a local read, not a request
# the node state's methods the Runtime API's handlers store a ClientApp's reply and its objects' bytes with
# (flwr/supernode/servicer/runtime/runtime_handlers.py: push_messages, push_object): each store ends the loop's
# local wait at once (CappedSleep.stored), where a wait of LOCAL_WAIT_S left a reply 25 ms on average before the
# node sent it on, twice a round
STATE_STORES = ("store_message_and_object_tree", "store_object")
TASK_POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"  # Flower's own switch (flwr/supercore/superexec/run_superexec.py)
TASK_POLL_S = 0.1  # seconds between the SuperExec's looks for a message to start a ClientApp for (Flower: 1)
# the same for a warm SuperExec, which its SuperNode wakes for each message it pulled (and has its pool tidied after
# each reply it pushed): a look between wakes finds only a task made some other way (the Runtime API's create-task,
# which fedtext's ClientApps do not call), 2.5 s late on average, or nothing; and each look may land while a message
# is half pulled (its task made, its objects not yet there), which costs that ClientApp Flower's 1 s backoff, so
# they are few (fedtext.node.warm_exec.WakeableSleep)
WOKEN_TASK_POLL_S = 5.0


class CappedSleep:
    """The ``time`` module as Flower's SuperNode loop sees it: its idle sleep (3 s, a poll of the
    SuperLink) capped at ``cap`` s, or at ``active`` s within ``window`` s of the node's last reply
    (:meth:`replied`), its other sleeps (0.5 s waits on its own state: a reply from the ClientApp,
    an object's bytes) at :data:`LOCAL_WAIT_S`, ended early when the node's state stores something
    (:attr:`stored`, set by :func:`wake_on_store` on :data:`STATE_STORES`); no sleep at all after an empty poll
    that the SuperLink held
    (:data:`HELD_S` or more since the last sleep or reply: counted in :attr:`held`)."""

    def __init__(self, cap: float, active: float | None = None, window: float = ACTIVE_WINDOW_S) -> None:
        self.cap = cap
        self.active = cap if active is None else min(active, cap)
        self.window = window
        self.active_until = float("-inf")  # no reply yet: the idle cap
        # when the last sleep returned or a reply was pushed: a pull starts then (none yet: not a pull's start, so
        # the first poll, which follows the node's registration, is never taken for a held one)
        self.woke = float("inf")
        self.held = 0  # empty polls the SuperLink held, each followed by no sleep
        # set by the Runtime API's threads when the node's state stored a message or an object (cap_idle_poll): the
        # loop's wait on its own state then ends at once; a set left from an earlier store only costs one more look
        self.stored = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def replied(self) -> None:
        """The node pushed a reply: poll at ``active`` for the next ``window`` seconds (Flower's loop
        pulls at once after a push, so the time from here to the next sleep is that pull's)."""
        self.active_until = time.monotonic() + self.window
        self.woke = time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds < IDLE_SLEEP_S:
            # a wait on the node's own state: until it stores something or LOCAL_WAIT_S. Cleared after: a store
            # between the wait's end and the clear is not lost, the loop looks at the state right after this returns
            self.stored.wait(min(seconds, LOCAL_WAIT_S))
            self.stored.clear()
        else:
            # Flower's loop sleeps 3 s only right after a pull that found nothing, and pulls right after a sleep
            # returned or a reply was pushed (self.woke): the time since is that pull's alone. HELD_S or more, and a
            # SuperLink held it (fedtext.server.superlink) until its hold ran out: ask again at once
            held = time.monotonic() - self.woke >= HELD_S
            if not held:
                time.sleep(min(seconds, self.active if time.monotonic() < self.active_until else self.cap))
            self.held += held
        self.woke = time.monotonic()


def cap_idle_poll(cap: float, active: float | None = ACTIVE_POLL_S) -> None:
    """Cap the sleeps of Flower's SuperNode loop at ``cap`` seconds, at ``active`` (at most ``cap``)
    within :data:`ACTIVE_WINDOW_S` of a reply the node pushed (this process only; None: ``cap``)."""
    import flwr.supernode.start_client_internal as loop

    clock = CappedSleep(cap, active)
    push = getattr(loop._push_messages, "__wrapped__", loop._push_messages)  # Flower's, wrapped once

    def pushed(*args: Any, **kwargs: Any) -> Any:
        try:
            return push(*args, **kwargs)
        finally:
            clock.replied()

    pushed.__wrapped__ = push  # type: ignore[attr-defined]
    loop.time = clock  # the module's own name for `time`; nothing else changes
    loop._push_messages = pushed  # the loop calls it by the module's name after each message it pulled
    wake_on_store(clock)


def wake_on_store(clock: CappedSleep) -> None:
    """End ``clock``'s local waits when Flower's in-memory node state (the SuperNode's, this process's) stores
    through one of :data:`STATE_STORES`: the ClientApp's reply and its objects' bytes reach the loop as they are
    stored. Each method is Flower's own, wrapped once (a second call rewraps Flower's for the new clock)."""
    from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState

    for name in STATE_STORES:
        method = getattr(InMemoryNodeState, name)
        flowers = getattr(method, "__wrapped__", method)

        def storing(self: Any, *args: Any, _flowers: Any = flowers, **kwargs: Any) -> Any:
            try:
                return _flowers(self, *args, **kwargs)
            finally:
                clock.stored.set()

        storing.__wrapped__ = flowers  # type: ignore[attr-defined]
        setattr(InMemoryNodeState, name, storing)


def warm_superexec_command(command: list[str], warm: int, start: str | None = None) -> list[str]:
    """Flower's SuperExec command as the warm one: ``[flower-superexec, *args]`` becomes ``[python,
    -m, fedtext.node.warm_exec, superexec, --warm, N, [--start S,] --, *args]``; any other command is
    unchanged. ``start``: how its ready processes are made (None: the SuperExec's default)."""
    from fedtext.node.warm_exec import SUPEREXEC

    if not command or os.path.basename(str(command[0])) != SUPEREXEC:
        return list(command)
    how = [] if start is None else ["--start", start]
    return [sys.executable, "-m", "fedtext.node.warm_exec", "superexec", "--warm", str(warm), *how, "--",
            *command[1:]]


class Wake:
    """The SuperNode's end of the pipe that wakes its warm SuperExec (module doc).

    :meth:`pipe` makes the pipe for a SuperExec being started and returns its read end (a SuperExec
    started again gets a new one; the old write end is closed); :meth:`ring` writes one byte to the
    current one, or does nothing before any pipe (a SuperNode in ``--isolation process`` starts none).
    """

    def __init__(self) -> None:
        self.fd: int | None = None  # the write end, non-blocking
        self.rung = 0  # bytes written

    def pipe(self) -> int:
        read, write = os.pipe()  # neither end inheritable: the read end goes to one SuperExec through pass_fds
        os.set_blocking(write, False)
        if self.fd is not None:
            os.close(self.fd)
        self.fd = write
        return read

    def ring(self, byte: bytes) -> None:
        """Write ``byte`` (:data:`fedtext.node.warm_exec.MESSAGE` or ``REPLIED``), or nothing before any pipe."""
        if self.fd is None:
            return
        try:
            os.write(self.fd, byte)
            self.rung += 1
        except OSError:  # full: wakes wait already; no reader: no SuperExec to wake; a wake never ends the node
            pass


class WarmSuperExecLauncher:
    """The ``subprocess`` module as Flower's SuperNode loop sees it: its ``Popen`` of
    ``flower-superexec`` starts :mod:`fedtext.node.warm_exec`'s SuperExec with the same arguments
    and, when ``wake`` is given, the read end of a new wake pipe as ``--wake-fd`` (passed to that
    process alone and closed here: a write to a pipe whose SuperExec is gone then fails at once
    instead of filling it)."""

    def __init__(self, warm: int, start: str | None = None, wake: Wake | None = None) -> None:
        self.warm, self.start, self.wake = warm, start, wake

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def Popen(self, args: Any, *rest: Any, **kwargs: Any) -> subprocess.Popen:  # noqa: N802 - Flower's name
        command = warm_superexec_command(list(args), self.warm, self.start)
        if self.wake is None or command == list(args):  # not the SuperExec, or not woken: as Flower asked
            return subprocess.Popen(command, *rest, **kwargs)
        fd = self.wake.pipe()
        i = command.index("--")
        command[i:i] = ["--wake-fd", str(fd)]
        kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), fd)
        try:
            return subprocess.Popen(command, *rest, **kwargs)
        finally:
            os.close(fd)


def wake_on_pull(wake: Wake) -> None:
    """Ring ``wake`` with :data:`~fedtext.node.warm_exec.MESSAGE` after each message the SuperNode in
    this process pulled from the SuperLink (Flower's ``_pull_and_store_message`` returned its run id:
    the message and all its objects are stored and its task created, unless its FAB failed
    verification, a harmless extra look), and with :data:`~fedtext.node.warm_exec.REPLIED` at the
    loop's next pull, which comes right after it pushed that message's reply: the SuperExec then
    reaps the task's process and readies another while the round aggregates, not beside the next
    task, and without looking for a task while the next message may be half pulled
    (:class:`fedtext.node.warm_exec.WakeableSleep`)."""
    import flwr.supernode.start_client_internal as loop

    from fedtext.node.warm_exec import MESSAGE, REPLIED

    pull = getattr(loop._pull_and_store_message, "__wrapped__", loop._pull_and_store_message)  # Flower's, wrapped once
    replied = [False]  # a message was pulled last time round, so its reply has been pushed since

    def pulled(*args: Any, **kwargs: Any) -> Any:
        if replied[0]:
            replied[0] = False
            wake.ring(REPLIED)
        run_id = pull(*args, **kwargs)
        if run_id is not None:
            replied[0] = True
            wake.ring(MESSAGE)
        return run_id

    pulled.__wrapped__ = pull  # type: ignore[attr-defined]
    loop._pull_and_store_message = pulled  # the loop calls it by the module's name each time round


def start_warm_superexec(warm: int, start: str | None = None) -> bool:
    """Make the SuperNode in this process start the warm SuperExec (``warm`` ready ClientApps, made
    by ``start``: :data:`fedtext.node.warm_exec.WARM_STARTS`, None its default), woken for each
    message where this Flower's seams for it are as pinned (:func:`wake_superexec`); False, with one
    line on stderr, where this Flower changed a part the warm processes rely on
    (:func:`fedtext.node.warm_exec.flower_contract_problems`): the node then runs Flower's cold ClientApps."""
    from fedtext.node.warm_exec import flower_contract_problems

    problems = flower_contract_problems()
    if problems:
        print(f"fedtext: warm ClientApp processes off, this Flower changed {'; '.join(problems)}: every message "
              "starts Flower's cold flwr-clientapp", file=sys.stderr, flush=True)
        return False
    import flwr.supernode.start_client_internal as loop

    loop.subprocess = WarmSuperExecLauncher(warm, start)  # the module's own name for `subprocess`
    return True


def wake_superexec() -> bool:
    """Wake the warm SuperExec that :func:`start_warm_superexec` set up for each message (a pipe,
    :func:`wake_on_pull`); False, with one line on stderr, where this Flower moved the SuperExec's
    sleep or the SuperNode's pull (:func:`fedtext.node.warm_exec.wake_contract_problems`): the warm
    SuperExec is then polled every :data:`TASK_POLL_S` as before."""
    import flwr.supernode.start_client_internal as loop

    from fedtext.node.warm_exec import wake_contract_problems

    problems = wake_contract_problems()
    if not isinstance(loop.subprocess, WarmSuperExecLauncher):
        problems.append("no warm SuperExec to wake (start_warm_superexec did not set one up)")
    if problems:
        print(f"fedtext: the warm SuperExec is polled, not woken: {'; '.join(problems)}", file=sys.stderr, flush=True)
        return False
    wake = Wake()
    wake_on_pull(wake)
    loop.subprocess.wake = wake
    return True


def main(argv: list[str] | None = None) -> int:
    from fedtext.node.warm_exec import WARM_STARTS

    ap = argparse.ArgumentParser(prog="python -m fedtext.node.supernode", add_help=False)
    ap.add_argument("--idle-poll-s", type=float, default=IDLE_POLL_S)
    ap.add_argument("--active-poll-s", type=float, default=ACTIVE_POLL_S)
    ap.add_argument("--warm-clientapps", type=int, default=0)
    ap.add_argument("--warm-start", choices=WARM_STARTS, default=None)
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    for flag, value in (("--idle-poll-s", args.idle_poll_s), ("--active-poll-s", args.active_poll_s)):
        if not value > 0:
            print(f"fedtext: {flag} must be > 0, got {value}", file=sys.stderr)
            return 2
    if args.warm_clientapps < 0:
        print(f"fedtext: --warm-clientapps must be >= 0, got {args.warm_clientapps}", file=sys.stderr)
        return 2
    cap_idle_poll(args.idle_poll_s, args.active_poll_s)
    from fedtext.common.pulls import NODE_PULLS, quick_pulls

    problems = quick_pulls(NODE_PULLS)  # a message's objects not there yet: asked again after 0.05 s, not 1 s
    if problems:
        print(f"fedtext: messages' objects are pulled with Flower's 1 s backoff: {'; '.join(problems)}",
              file=sys.stderr, flush=True)
    warm = bool(args.warm_clientapps) and start_warm_superexec(args.warm_clientapps, args.warm_start)
    woken = warm and wake_superexec()
    # inherited by the SuperExec the SuperNode starts
    os.environ.setdefault(TASK_POLL_ENV, str(WOKEN_TASK_POLL_S if woken else TASK_POLL_S))
    from flwr.supernode.cli import flower_supernode

    sys.argv = ["flower-supernode", *rest]
    return int(flower_supernode() or 0)


if __name__ == "__main__":
    sys.exit(main())
