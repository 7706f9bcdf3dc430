"""Signal handling: a run ended by a signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) or an
exception is recorded ``failed`` with its reason before the process goes down
(:func:`install_signal_handlers`, :func:`finish_open_runs`, :func:`exit_reason`,
:func:`signal_reason`); a command-line tool's own stop handler goes in through
:func:`install_unless_ignored`."""

from __future__ import annotations

import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from fedtext.records.writer import open_recorders


def finish_open_runs(status: str, error: str) -> None:
    """Close every run of this process that has no summary yet (a signal handler's job)."""
    for recorder in open_recorders():
        recorder.finish(status, error=error)


def exit_reason(exc: BaseException) -> str:
    """The record's reason for a run ended by ``exc``: ``terminated by SIGTERM`` for the
    ``SystemExit(15)`` Ray's driver handler raises on SIGTERM, ``terminated by SIGINT``
    for ``KeyboardInterrupt``, else the exception's one-line form."""
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code in {s.value for s in signal.Signals}:
        return f"terminated by {signal.Signals(exc.code).name}"
    if isinstance(exc, KeyboardInterrupt):
        return "terminated by SIGINT"
    return "".join(traceback.format_exception_only(exc)).strip()


def signal_reason(signum: int, parent_at_start: int, parent_now: int) -> str:
    """The record's reason for a run ended by signal ``signum``.

    Under a SuperLink, the ServerApp process is started by the SuperLink's SuperExec,
    which exits when the SuperLink dies; the orphaned ServerApp keeps retrying the
    SuperLink and, when one answers that no longer knows its run (a restarted SuperLink),
    Flower sends it SIGINT (``flwr.supercore.retry``): a killed SuperLink read as
    ``terminated by SIGINT``, as if a user had pressed Ctrl-C. A process whose parent
    changed (it was re-parented, so the parent died) says what happened instead."""
    name = signal.Signals(signum).name
    if parent_now != parent_at_start and parent_at_start > 1:
        return (f"the SuperLink went away: the process that started the ServerApp (pid {parent_at_start}) "
                f"had stopped ({name})")
    return f"terminated by {name}"


def install_unless_ignored(signals: Iterable[signal.Signals], handler: Callable[[int, Any], None]) -> None:
    """Set ``handler`` for each of ``signals`` the process was not started ignoring.

    A signal inherited as ignored was ignored on purpose: nohup's SIGHUP (the process was
    asked to outlive its terminal), a background job's SIGINT; it stays ignored, so that a
    closed terminal does not stop a launch or a compare runner that nohup started. Call it
    from the main thread (Python sets signal handlers only there)."""
    for sig in signals:
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, handler)


def install_signal_handlers() -> bool:
    """Record ``failed: terminated by SIGTERM`` (SIGINT, SIGHUP, SIGQUIT alike) in every
    open run before the process goes down the way it would have without us.

    The previous handler (Flower's graceful exit, Python's ``KeyboardInterrupt``) runs
    next; where it was the default action, the process exits with ``128 + signum``. SIGHUP
    under ``nohup`` stays ignored: it stops nothing, so it records nothing.
    Signal handlers can only be set from the main thread: elsewhere (a ServerApp inside
    ``run_simulation``) nothing is installed and ``False`` returned; the caller's main
    thread installs them instead (``simulations.simulate``).
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    parent = os.getppid()  # the SuperLink, for a ServerApp it started (Flower's subprocess isolation)
    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None), getattr(signal, "SIGQUIT", None)):
        if sig is None:
            continue
        previous = signal.getsignal(sig)
        if getattr(previous, "_fedtext", False):
            continue
        # nohup's SIGHUP: the process was asked to outlive its terminal, and goes on training; marking its
        # run failed (and unlocked) would let a rerun resume it under it. Another ignored signal (a background
        # job's SIGINT, inherited) is still recorded: Flower stops a ServerApp whose SuperLink died with SIGINT
        if sig == getattr(signal, "SIGHUP", None) and previous == signal.SIG_IGN:
            continue

        def handler(signum: int, frame: Any, previous: Any = previous) -> None:
            finish_open_runs("failed", signal_reason(signum, parent, os.getppid()))
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                os._exit(128 + signum)

        handler._fedtext = True  # type: ignore[attr-defined]
        signal.signal(sig, handler)
    return True
