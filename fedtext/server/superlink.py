"""``flower-superlink`` whose Fleet API holds a SuperNode's empty pull until a message comes:
``python -m fedtext.server.superlink [--hold-s S] [--max-held N] <flower-superlink arguments>``.

Why. Flower 1.42's SuperNodes poll: each asks the SuperLink for a message (``PullMessages``), and
when none waits sleeps before it asks again (3 s in Flower; fedtext's SuperNodes 0.5 s idle and
0.1 s for 30 s after a reply, :mod:`fedtext.node.supernode`, so that a round's next message waits
0.05 s on average instead of 1.5 s). Every ask is an HTTPS request through FastAPI, node
authentication and an access-log line: measured on this 2-core machine (2026-11-30, ten idle
SuperNodes polling every 0.1 s, every process's CPU read from ``/proc``), 3.3-5 ms of the
SuperLink's CPU and about as much of the asking SuperNode's. On T1 (ten SuperNodes, three sampled a
round) the nodes that replied in the last 30 s asked ~70 times a second, and the SuperLink took
3.3-4.5 CPU-s of a 10-14 s round, CPU the round's fits then lacked (docs/performance.md). Fewer
polls mean later messages; a held poll has neither cost.

What. Flower's own Fleet handler, ``fleet_handlers.pull_messages`` (``flwr/superlink/servicer/
fleet/fleet_handlers.py``; the HTTP router and the gRPC servicer call it by that module name),
is rebound to :meth:`Holder.pull`: it asks Flower's handler, and when that found no message it
waits, up to ``--hold-s`` (:data:`HOLD_S`), for the LinkState to store one (Flower's
``store_message_ins`` on both its states, wrapped once to notify: :func:`hold_pulls`), then asks
Flower's handler again, so what a node receives, and when it is marked delivered, is Flower's
handling unchanged. A message registered while a node is held reaches it within milliseconds, and
an idle node asks once per ``--hold-s`` instead of twice a second. At most ``--max-held``
(:data:`MAX_HELD`) pulls wait at once (each holds one of the server's worker threads, of which
Starlette's pool has 40 for every API of the SuperLink); a pull beyond them is answered at once,
as Flower would.

The SuperNode's side (:mod:`fedtext.node.supernode`): a poll that came back empty after at least
:data:`fedtext.node.supernode.HELD_S` was held, and the node asks again at once instead of sleeping;
against Flower's own ``flower-superlink`` every empty poll returns in milliseconds and the node
sleeps as before. Nothing in Flower's protocol changes: a stock SuperNode polling this SuperLink
just sees a slower empty answer (its 3 s sleep then follows a 2 s hold). Behind nginx
(deploy/fleet_proxy.py) a held pull is one request in progress for up to ``--hold-s``, far inside
its ``proxy_read_timeout`` (300 s) and Flower's own 30 s client timeout.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

HOLD_S = 2.0  # seconds an empty pull waits for a message (an idle SuperNode then asks once per 2 s, not twice a second)
MAX_HELD = 16  # pulls held at once: each takes one of Starlette's 40 worker threads, which all of the SuperLink's APIs share
HANDLERS = "flwr.superlink.servicer.fleet.fleet_handlers"  # the module whose pull_messages the Fleet API calls by name


class Holder:
    """Empty pulls held until a message is stored (or ``hold_s`` passes), ``max_held`` at most at once.

    :meth:`stored` is called after the LinkState stored a message for any node; a held pull then asks
    Flower's handler again (a message for another node sends it back to waiting, for what is left of
    its ``hold_s``). The count of stores (:attr:`stores`) is read before each ask, so a store that
    lands between an empty answer and the wait is not missed.
    """

    def __init__(self, hold_s: float = HOLD_S, max_held: int = MAX_HELD) -> None:
        if not hold_s >= 0:
            raise ValueError(f"hold_s must be >= 0, got {hold_s}")
        if max_held < 0:
            raise ValueError(f"max_held must be >= 0, got {max_held}")
        self.hold_s, self.max_held = float(hold_s), int(max_held)
        self.cond = threading.Condition()
        self.stores = 0  # messages stored since the start: a held pull asks again when it moved
        self.held = 0  # pulls waiting now

    def stored(self) -> None:
        """The LinkState stored a message: wake every held pull to ask again."""
        with self.cond:
            self.stores += 1
            self.cond.notify_all()

    def pull(self, handler: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Flower's ``handler(*args, **kwargs)`` (its Fleet ``pull_messages``); while its answer holds
        no message, wait for a store and ask again, until ``hold_s`` has passed since the first ask."""
        deadline = time.monotonic() + self.hold_s
        with self.cond:
            seen = self.stores
            full = self.held >= self.max_held
            self.held += 0 if full else 1
        if full:  # every slot taken: answer now, as Flower would
            return handler(*args, **kwargs)
        try:
            while True:
                response = handler(*args, **kwargs)
                left = deadline - time.monotonic()
                if len(response.messages_list) or left <= 0:
                    return response
                with self.cond:
                    if self.stores == seen:
                        self.cond.wait(left)
                    if self.stores == seen:  # the hold ran out with nothing stored
                        return response
                    seen = self.stores
        finally:
            with self.cond:
                self.held -= 1


def link_states() -> tuple[type, ...]:
    """Flower's LinkState classes whose ``store_message_ins`` a held pull waits on (in-memory, SQL)."""
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
    from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState

    return InMemoryLinkState, SqlLinkState


def contract_problems() -> list[str]:
    """What Flower no longer does that :func:`hold_pulls` relies on (empty: all there)."""
    import importlib
    import inspect

    problems = []
    handlers = importlib.import_module(HANDLERS)
    if not callable(getattr(handlers, "pull_messages", None)):
        problems.append(f"{HANDLERS} has no pull_messages")
    from flwr.superlink.routers.fleet import router

    if "fleet_handlers.pull_messages(" not in inspect.getsource(router):
        problems.append("the Fleet HTTP router no longer calls fleet_handlers.pull_messages by the module's name")
    for cls in link_states():
        if "store_message_ins" not in vars(cls):
            problems.append(f"{cls.__name__} has no store_message_ins of its own")
    return problems


def _notifying(store: Callable[..., Any], holder: Holder) -> Callable[..., Any]:
    @functools.wraps(store)
    def store_message_ins(self: Any, message: Any) -> Any:
        message_id = store(self, message)
        if message_id is not None:  # stored (Flower returns None for a message it refused)
            holder.stored()
        return message_id

    store_message_ins.__fedtext_holder__ = holder  # type: ignore[attr-defined]
    return store_message_ins


def hold_pulls(holder: Holder) -> None:
    """Rebind Flower's Fleet ``pull_messages`` to ``holder``'s and make both LinkStates' ``store_message_ins``
    notify it, in this process (a second call replaces the first's holder: Flower's functions are wrapped once)."""
    import importlib

    handlers = importlib.import_module(HANDLERS)
    flowers = getattr(handlers.pull_messages, "__wrapped__", handlers.pull_messages)

    @functools.wraps(flowers)
    def pull_messages(*args: Any, **kwargs: Any) -> Any:
        return holder.pull(flowers, *args, **kwargs)

    handlers.pull_messages = pull_messages
    for cls in link_states():
        store = getattr(cls.store_message_ins, "__wrapped__", cls.store_message_ins)
        cls.store_message_ins = _notifying(store, holder)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedtext.server.superlink", add_help=False)
    ap.add_argument("--hold-s", type=float, default=HOLD_S)
    ap.add_argument("--max-held", type=int, default=MAX_HELD)
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    if not 0 <= args.hold_s <= 20:  # Flower's SuperNode gives a request 30 s
        print(f"fedtext: --hold-s must be within [0, 20] s, got {args.hold_s}", file=sys.stderr)
        return 2
    if args.max_held < 0:
        print(f"fedtext: --max-held must be >= 0, got {args.max_held}", file=sys.stderr)
        return 2
    problems = contract_problems()
    if problems:
        print(f"fedtext: empty pulls are answered at once, as Flower does: {'; '.join(problems)}",
              file=sys.stderr, flush=True)
    else:
        hold_pulls(Holder(args.hold_s, args.max_held))
    from flwr.superlink.cli import flower_superlink

    sys.argv = ["flower-superlink", *rest]
    return int(flower_superlink() or 0)


if __name__ == "__main__":
    sys.exit(main())
