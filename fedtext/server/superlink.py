"""``flower-superlink`` that holds an empty pull until what it asks for comes (a SuperNode's for its
instructions, the ServerApp's for replies):
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

The ServerApp asks for its messages' replies the same way, at most 0.1 s apart
(:mod:`fedtext.server.grid`; Flower's grid every 3 s): ten requests a second through the SuperLink's
Runtime API for the whole of every round, and a reply waits 0.05 s on average after it is stored.

What. Flower's own handlers, the Fleet API's ``pull_messages`` (``flwr/superlink/servicer/fleet/
fleet_handlers.py``; the HTTP router and the gRPC servicer call it by that module's name) and the
Runtime API's (``flwr/superlink/servicer/runtime/runtime_handlers.py``, the module the SuperLink
hands its Runtime router), are rebound to :meth:`Holder.pull`: it asks Flower's handler, and when
that found nothing it waits, up to ``--hold-s`` (:data:`HOLD_S`), for the LinkState to store a
message (an instruction: ``store_message_ins``) or a reply (``store_message_res``; both on both of
Flower's states, wrapped once to notify: :func:`hold_pulls`), then asks Flower's handler again, so
what is returned, and when it is marked delivered, is Flower's handling unchanged. A message
registered while its node is held reaches it within milliseconds, a reply its ServerApp likewise,
and an idle node asks once per ``--hold-s`` instead of twice a second. At most ``--max-held``
(:data:`MAX_HELD`) SuperNodes' pulls wait at once, and as many of the ServerApps' (``--max-held-replies``;
Flower's compat Server asks for each client's reply from a thread of its own): each holds one of the
server's worker threads, of which Starlette's pool has 40 for every API of the SuperLink, and a pull
beyond them is answered at once, as Flower would. A ``flwr-agentapp``'s pull for its instructions
(the Runtime API's other use) is held like a ServerApp's and woken by replies only: up to the hold late.

Middleware scoped to its API (:func:`scope_middleware`). Flower 1.42 serves all three of the SuperLink's
APIs (Control, Fleet, Runtime) from one FastAPI app wrapped in eight Starlette ``BaseHTTPMiddleware``
layers; each layer costs a request its own task and streams even when it only passes it on (``python
tools/middleware_cost.py``, docs/performance.md: a Runtime request through Flower's eight 5.0 ms of CPU,
through the two left here 1.4 ms, on this 2-core machine beside other work).
Six of the eight act on one API's paths and, as their ``dispatch`` reads, hand every other request straight
on: the four Control ones (no-cache headers, account authentication, licence check, event log) act only
under ``/v1/control/``, the SuperNode authentication and the Fleet event log only under ``/v1/fleet/``.
Each is wrapped in :class:`PathScoped`, which sends a request outside its prefix past it and every
other request through it, so a Runtime request (the ServerApp's: about half of a round's ~150) crosses two
layers instead of eight and a Fleet request four; what any layer does to a request it acts on is Flower's
own. The error translator and the protobuf translation, which every request needs, stay as they are.
:func:`middleware_problems` reads each scoped ``dispatch`` for its guard, probes the Control paths' test and
pins the source of both (:data:`SCOPED_SOURCES`): if a Flower upgrade changes any of them, the SuperLink runs
with Flower's middleware unchanged (and says so in one line).

The askers' side (:mod:`fedtext.node.supernode`, :mod:`fedtext.server.grid`): a pull that came back
empty after at least :data:`fedtext.common.pulls.HELD_S` was held, and is made again at once instead of
after a sleep; against Flower's own ``flower-superlink`` every empty pull returns in milliseconds and
they sleep as before. Nothing in Flower's protocol changes: a stock SuperNode polling this SuperLink
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

from fedtext.common.pulls import HELD_S  # how long an empty pull must take for fedtext's askers to call it held

HOLD_S = 2.0  # seconds an empty pull waits for a message (an idle SuperNode then asks once per 2 s, not twice a second)
# pulls held at once, each kind: each takes one of Starlette's 40 worker threads, which all of the SuperLink's APIs
# share, so both kinds together leave 16 for everything else (pushes, object transfers, heartbeats). SuperNodes hold
# one each; a ServerApp one per client of a round (Flower's compat Server asks for each client's reply from its own
# thread). A pull beyond the cap is answered at once, as Flower would
MAX_HELD = 12
FLEET_HANDLERS = "flwr.superlink.servicer.fleet.fleet_handlers"  # its pull_messages: a SuperNode's instructions
RUNTIME_HANDLERS = "flwr.superlink.servicer.runtime.runtime_handlers"  # its pull_messages: the ServerApp's replies
SUPERLINK_APP = "flwr.superlink.main"  # its _get_middleware: the SuperLink app's middleware, outermost first
CONTROL_MIDDLEWARE = "flwr.superlink.routers.control.middlewares"
FLEET_MIDDLEWARE = "flwr.superlink.routers.fleet.middlewares"
NODE_AUTH = "flwr.superlink.routers.fleet.node_auth"
# Flower's middleware that acts on one API's paths only: (module, class) -> the path prefix it acts under, and the
# guard its dispatch passes every other request on with (Flower 1.42, read in each; contract_problems checks it)
SCOPED: dict[tuple[str, str], tuple[str, str]] = {
    (CONTROL_MIDDLEWARE, "ControlSensitiveResponseMiddleware"): ("/v1/control/",
                                                                   "_is_control_sensitive_route(request)"),
    (CONTROL_MIDDLEWARE, "ControlAuthenticationMiddleware"): ("/v1/control/", "not _is_control_path(request.url.path)"),
    (CONTROL_MIDDLEWARE, "ControlLicenseMiddleware"): ("/v1/control/", "not _is_control_path(request.url.path)"),
    (CONTROL_MIDDLEWARE, "ControlEventLogMiddleware"): ("/v1/control/", "not _is_control_path(request.url.path)"),
    (NODE_AUTH, "NodeAuthMiddleware"): ("/v1/fleet/", 'request.url.path.startswith("/v1/fleet/")'),
    (FLEET_MIDDLEWARE, "FleetEventLogMiddleware"): ("/v1/fleet/", 'not request.url.path.startswith("/v1/fleet/")'),
}
# sha256 (first 16 hex digits) of the source of each scoped class's dispatch and of the two Control path tests they
# call, as read above (Flower 1.42): a guard that stays while a condition is added beside it changes these, and
# scoping is then left off (middleware_problems). A Flower upgrade re-reads them and writes the new ones here.
SCOPED_SOURCES = {"ControlSensitiveResponseMiddleware": "ede59df2e20f68d1",
                  "ControlAuthenticationMiddleware": "ce00d7963397cc43", "ControlLicenseMiddleware": "b49e343f040afae2",
                  "ControlEventLogMiddleware": "492845464228bd5b", "NodeAuthMiddleware": "4b198edca8bd7d4d",
                  "FleetEventLogMiddleware": "e7c0ea50f1492902", "_is_control_path": "bfb5469e9013b256",
                  "_is_control_sensitive_route": "aae3ed426e1ef62c"}


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


STORES = ("store_message_ins", "store_message_res")  # what a held instruction pull, a held reply pull waits on
PUSHES = "store_message_and_object_tree"  # what both push APIs call: it stores through STORES, then commits


def link_states() -> tuple[type, ...]:
    """Flower's LinkState classes whose :data:`STORES` a held pull waits on (in-memory, SQL)."""
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
    from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState

    return InMemoryLinkState, SqlLinkState


def contract_problems() -> list[str]:
    """What Flower no longer does that :func:`hold_pulls` relies on (empty: all there)."""
    import importlib
    import inspect

    problems = []
    for name in (FLEET_HANDLERS, RUNTIME_HANDLERS):
        if not callable(getattr(importlib.import_module(name), "pull_messages", None)):
            problems.append(f"{name} has no pull_messages")
    from flwr.superlink import main as superlink_main

    runtime_router = importlib.import_module("flwr.supercore.routers.runtime.router")
    fleet_router = importlib.import_module("flwr.superlink.routers.fleet.router")

    if "fleet_handlers.pull_messages(" not in inspect.getsource(fleet_router):
        problems.append("the Fleet HTTP router no longer calls fleet_handlers.pull_messages by the module's name")
    if "handlers.pull_messages(" not in inspect.getsource(runtime_router):
        problems.append("the Runtime HTTP router no longer calls its handlers' pull_messages")
    if getattr(superlink_main, "_RUNTIME_HANDLERS", None) is not importlib.import_module(RUNTIME_HANDLERS):
        problems.append(f"the SuperLink no longer hands its Runtime router the module {RUNTIME_HANDLERS}")
    for cls in link_states():
        problems += [f"{cls.__name__} has no {m} of its own" for m in (*STORES, PUSHES) if m not in vars(cls)]
    from flwr.proto.runtime_pb2 import PullAppMessagesResponse
    from flwr.proto.fleet_pb2 import PullMessagesResponse

    for response in (PullMessagesResponse, PullAppMessagesResponse):  # what Holder.pull reads of an answer
        if "messages_list" not in response.DESCRIPTOR.fields_by_name:
            problems.append(f"{response.__name__} has no messages_list")
    return problems


def middleware_problems() -> list[str]:
    """What Flower no longer does that :func:`scope_middleware` relies on (empty: all there): the app's
    middleware list from ``_get_middleware``; each scoped class's ``dispatch`` passing on, by its guard, every
    request outside its prefix, its source as read (:data:`SCOPED_SOURCES`); the Control path test answering
    for ``/v1/control/`` alone. Anything that cannot be read is a problem too, not an error."""
    try:
        return _middleware_problems()
    except Exception as exc:  # noqa: BLE001 - a module moved, no sources installed: Flower's middleware as it is
        return [f"Flower's SuperLink middleware could not be read ({type(exc).__name__}: {exc})"]


def _middleware_problems() -> list[str]:
    import hashlib
    import importlib
    import inspect

    def digest(function: Any) -> str:
        return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]

    app_module = importlib.import_module(SUPERLINK_APP)
    if not callable(getattr(app_module, "_get_middleware", None)):
        return [f"{SUPERLINK_APP} has no _get_middleware"]
    if "middleware=_get_middleware()" not in inspect.getsource(app_module.create_app):
        return [f"{SUPERLINK_APP}.create_app no longer takes its middleware from _get_middleware()"]
    problems = []
    for (module, name), (prefix, guard) in SCOPED.items():
        cls = getattr(importlib.import_module(module), name, None)
        if cls is None or guard not in inspect.getsource(cls.dispatch):
            problems.append(f"{module}.{name} no longer passes on what is outside {prefix} by its guard")
        elif digest(cls.dispatch) != SCOPED_SOURCES[name]:
            problems.append(f"{module}.{name}'s dispatch is not the one read (SCOPED_SOURCES)")
    control = importlib.import_module(CONTROL_MIDDLEWARE)
    for helper in ("_is_control_path", "_is_control_sensitive_route"):
        if digest(getattr(control, helper)) != SCOPED_SOURCES[helper]:
            problems.append(f"{CONTROL_MIDDLEWARE}.{helper} is not the one read (SCOPED_SOURCES)")
    inside, outside = ("/v1/control/x",), ("/v1/fleet/x", "/v1/runtime/x", "/", "/v1/controls/x", "/v2/control/x")
    if not all(control._is_control_path(p) for p in inside) or any(control._is_control_path(p) for p in outside):
        problems.append("the Control path test no longer answers for /v1/control/ alone")
    sensitive = control.CONTROL_SENSITIVE_ROUTE_KEYS  # the no-cache headers' routes: Control ones only
    if not all(path.startswith("/v1/control/") for _, path in sensitive):
        problems.append("a Control 'sensitive route' is no longer under /v1/control/")
    return problems


class PathScoped:
    """A Starlette middleware (``middleware_class(app, **options)``) run only for HTTP requests whose path
    starts with ``prefix``; every other request goes to ``app`` directly, without the layer's per-request
    cost. The path is Starlette's ``request.url.path``, what the scoped middleware's own guard reads."""

    def __init__(self, app: Any, middleware_class: type, prefix: str, **options: Any) -> None:
        self.app = app
        self.scoped = middleware_class(app, **options)
        self.prefix = prefix

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        from starlette.datastructures import URL

        if scope["type"] == "http" and not URL(scope=scope).path.startswith(self.prefix):
            await self.app(scope, receive, send)
        else:
            await self.scoped(scope, receive, send)


def scoped(middleware: list[Any]) -> list[Any]:
    """``middleware`` (Starlette ``Middleware`` entries, outermost first) with each of :data:`SCOPED`'s
    classes run through :class:`PathScoped` under its prefix; the rest, and the order, as they were."""
    import importlib

    from starlette.middleware import Middleware

    prefixes = {getattr(importlib.import_module(module), name): prefix
                for (module, name), (prefix, _) in SCOPED.items()}
    out = []
    for entry in middleware:
        prefix = prefixes.get(entry.cls)
        # an entry given its own dispatch, positional options or PathScoped's names is not the class as read
        as_read = not entry.args and not {"dispatch", "middleware_class", "prefix"} & set(entry.kwargs)
        out.append(Middleware(PathScoped, middleware_class=entry.cls, prefix=prefix, **entry.kwargs)
                   if prefix is not None and as_read else entry)
    return out


def scope_middleware() -> None:
    """In this process, make the SuperLink app (``create_app``) take Flower's middleware through :func:`scoped`
    (a second call wraps Flower's function again, not the first wrapper)."""
    import importlib

    app_module = importlib.import_module(SUPERLINK_APP)
    flowers_middleware = flowers(app_module._get_middleware)

    @functools.wraps(flowers_middleware)
    def get_middleware() -> list[Any]:
        return scoped(flowers_middleware())

    get_middleware.__fedtext_holder__ = True  # type: ignore[attr-defined]
    app_module._get_middleware = get_middleware


def flowers(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` as Flower defined it: fedtext's wrapper (marked ``__fedtext_holder__``) taken off, any
    other left on (a decorator of Flower's own is Flower's function)."""
    return function.__wrapped__ if hasattr(function, "__fedtext_holder__") else function


def _notifying(store: Callable[..., Any], holder: Holder) -> Callable[..., Any]:
    @functools.wraps(store)
    def stored(*args: Any, **kwargs: Any) -> Any:
        message_id = store(*args, **kwargs)
        if message_id is not None:  # stored (Flower returns None for a message it refused)
            holder.stored()
        return message_id

    stored.__fedtext_holder__ = holder  # type: ignore[attr-defined]
    return stored


def _notifying_after(store: Callable[..., Any], instructions: Holder, replies: Holder) -> Callable[..., Any]:
    """Flower's ``store_message_and_object_tree`` (what both push APIs call), notifying once it returned: its
    inner ``store_message_ins``/``_res`` notify while its lock or SQL transaction is still open, and a pull
    woken then finds the message only because its read waits for that lock (SQLite's, today); this wake
    comes after the commit, whatever Flower's read does."""
    @functools.wraps(store)
    def stored(*args: Any, **kwargs: Any) -> Any:
        result = store(*args, **kwargs)
        message = args[1] if len(args) > 1 else kwargs["message"]
        if result[0]:  # (stored, objects to push)
            (replies if message.metadata.reply_to_message_id else instructions).stored()
        return result

    stored.__fedtext_holder__ = (instructions, replies)  # type: ignore[attr-defined]
    return stored


def _holding(module: str, holder: Holder) -> None:
    import importlib

    handlers = importlib.import_module(module)
    flowers_pull = flowers(handlers.pull_messages)

    @functools.wraps(flowers_pull)
    def pull_messages(*args: Any, **kwargs: Any) -> Any:
        return holder.pull(flowers_pull, *args, **kwargs)

    pull_messages.__fedtext_holder__ = holder  # type: ignore[attr-defined]
    handlers.pull_messages = pull_messages


def hold_pulls(instructions: Holder, replies: Holder) -> None:
    """In this process, rebind Flower's Fleet ``pull_messages`` (a SuperNode's) to ``instructions``' hold and
    its Runtime ``pull_messages`` (the ServerApp's) to ``replies``', and make both LinkStates'
    ``store_message_ins`` notify ``instructions`` and ``store_message_res`` notify ``replies``, and their
    ``store_message_and_object_tree`` notify the one its message is for once it returned (a second call
    replaces the first's holders: Flower's functions are wrapped once)."""
    _holding(FLEET_HANDLERS, instructions)
    _holding(RUNTIME_HANDLERS, replies)
    for cls in link_states():
        for method, holder in zip(STORES, (instructions, replies), strict=True):
            setattr(cls, method, _notifying(flowers(getattr(cls, method)), holder))
        cls.store_message_and_object_tree = _notifying_after(flowers(cls.store_message_and_object_tree),
                                                             instructions, replies)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedtext.server.superlink", add_help=False)
    ap.add_argument("--hold-s", type=float, default=HOLD_S)
    ap.add_argument("--max-held", type=int, default=MAX_HELD)
    ap.add_argument("--max-held-replies", type=int, default=MAX_HELD)
    args, rest = ap.parse_known_args(sys.argv[1:] if argv is None else argv)
    if not 0 <= args.hold_s <= 20:  # Flower's SuperNode gives a request 30 s
        print(f"fedtext: --hold-s must be within [0, 20] s, got {args.hold_s}", file=sys.stderr)
        return 2
    for flag, value in (("--max-held", args.max_held), ("--max-held-replies", args.max_held_replies)):
        if value < 0:
            print(f"fedtext: {flag} must be >= 0, got {value}", file=sys.stderr)
            return 2
    if 0 < args.hold_s < HELD_S:
        print(f"fedtext: a hold of {args.hold_s} s is shorter than the {HELD_S} s by which fedtext's SuperNodes and "
              "ServerApp tell a held pull: they will sleep between pulls as against Flower's SuperLink",
              file=sys.stderr, flush=True)
    problems = contract_problems()
    if problems:
        print(f"fedtext: empty pulls are answered at once, as Flower does: {'; '.join(problems)}",
              file=sys.stderr, flush=True)
    else:
        hold_pulls(Holder(args.hold_s, args.max_held), Holder(args.hold_s, args.max_held_replies))
    problems = middleware_problems()
    if problems:
        print(f"fedtext: the SuperLink runs every request through all of Flower's middleware: {'; '.join(problems)}",
              file=sys.stderr, flush=True)
    else:
        scope_middleware()
    from flwr.superlink.cli import flower_superlink

    sys.argv = ["flower-superlink", *rest]
    return int(flower_superlink() or 0)


if __name__ == "__main__":
    sys.exit(main())
