"""A SuperNode's node service: one long-lived process per device that holds the frozen
backbone and the node's data and answers the node's ClientApp messages over a local socket.

Why. Flower 1.42's deployment engine starts a new ``flwr-clientapp`` process for every
message: it pulls one message, loads the app, replies and exits (only ``Context.state``
persists). A fedtext client in such a process pays Python, Flower, torch and transformers'
imports, the data partition and the backbone's load in every fit and every evaluate:
~16-19 s per message on 2 cores against a bbt-fed fit of ~25 s (docs/performance.md,
"Deployment rounds"). Here that process stays a thin shim: :mod:`fedtext.client_app` imports
Flower only, and :func:`node_service_mod` hands the message and the context to this service,
which keeps what :mod:`fedtext.node.node` caches per process (backbone, tokenizer, data, partition)
between messages, as a Ray actor does in the simulation. For the black-box methods this is
the papers' "model as a service": the device serves the frozen model, the ClientApp asks it.
The designs weighed against it (lazy imports alone, memory-mapped weights, an edge runtime)
and their measured costs are in docs/deployment.md ("Why a node service").

One command starts it with the SuperNode, supervises it and stops it with the SuperNode::

    python -m fedtext.node.service [--threads N] -- flower-supernode --superlink HOST:PORT \\
        --node-config "partition-id=0 num-partitions=10" ...

(``deploy/supernode.sh`` runs this; ``deploy/systemd/fedtext-supernode@.service`` is the
unit.) The supervisor makes a private folder (mode 0700, in ``$XDG_RUNTIME_DIR`` when set),
starts the service on a Unix socket there (mode 0600), adds ``node-service='<socket>'`` to the
SuperNode's ``--node-config``, starts the SuperNode, restarts the service when it dies, and
when the SuperNode exits (or the supervisor gets SIGTERM/SIGINT/SIGHUP) stops the service and
removes the folder; its exit status is the SuperNode's.

Who may connect: the folder's and socket's modes keep other users out, and the service also
reads each connection's peer credentials (``SO_PEERCRED``) and closes any whose user id is not
its own. What it runs is fedtext's own ClientApp on the message it is given; requests are
Flower's protobuf messages (no pickle).

Crashes lose no round: when the service does not answer (not started yet, killed mid-message,
restarting), the shim answers the message in its own process exactly as without a service
(a warning says so), and the next message finds the restarted service. A ClientApp killed
mid-message is a failed client for that round, as without the service; the service finishes
the orphaned message, cannot deliver it, and serves the next. The node-state journal
(:mod:`fedtext.node.state`) makes a message answered twice start from the same state.

Records are the same with and without it but for timings and memory (the process that
computed is another): tests/unit/test_node_service.py compares the replies byte for byte.

Wire format (one request per connection): frames of an 8-byte big-endian length and the
bytes. Request: ``MAGIC``, the message (``flwr.proto.message_pb2.Message``), the context
(``flwr.proto.message_pb2.Context``). Reply: ``b"ok"``, the reply's content and the context's
new state (``RecordDict`` protos); or ``b"error"`` and the exception, worded as Flower words
a ClientApp's.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import Message
from flwr.common import Context

from fedtext.records.probes import task_start_time

log = logging.getLogger("fedtext.node.service")

NODE_SERVICE_KEY = "node-service"  # the node-config key naming the service's socket
MAGIC = b"fedtext-node-service/1"
SOCKET_NAME = "node.sock"
WARM_CLIENTAPPS = 2  # ClientApp processes a node keeps started ahead of need: a round's fit and evaluate each find one
PID_NAME = "service.pid"
_LEN = struct.Struct(">Q")
_MAX_FRAME = 1 << 36  # 64 GiB: a length beyond any message is a broken stream, not a message


class ServiceUnavailable(OSError):
    """The node service did not take or did not finish a request (the shim answers itself)."""


class NodeServiceError(RuntimeError):
    """The ClientApp raised in the node service; its text is Flower's wording of the exception."""


# ------------------------------------------------------------------------------ wire
def send_frames(sock: socket.socket, *frames: bytes) -> None:
    """Write ``frames``, each as its 8-byte length then its bytes (none for an empty frame: the
    reader may have its whole reply with the last length and hang up, and a write of nothing to a
    socket whose reader is gone still fails with a broken pipe)."""
    for frame in frames:
        sock.sendall(_LEN.pack(len(frame)))
        if frame:
            sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ServiceUnavailable(f"the stream ended after {got} of {n} bytes")
        got += k
    return bytes(buf)


def recv_frames(sock: socket.socket, count: int) -> list[bytes]:
    """Read ``count`` frames (:func:`send_frames`); a stream that ends early raises
    :class:`ServiceUnavailable`."""
    frames = []
    for _ in range(count):
        (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
        if n > _MAX_FRAME:
            raise ServiceUnavailable(f"a frame of {n} bytes: not this protocol")
        frames.append(_recv_exact(sock, n))
    return frames


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of Unix socket ``conn`` (``SO_PEERCRED``)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


# ------------------------------------------------------------------------------ the shim's side
def forward(message: Message, context: Context, path: str) -> Message:
    """Have the service at socket ``path`` answer ``message``; ``context.state`` becomes the
    state the service left. Raises :class:`ServiceUnavailable` when it cannot be asked or
    stops answering, :class:`NodeServiceError` when the ClientApp raised there."""
    from flwr.common.serde import (
        context_to_proto,
        message_to_proto,
        recorddict_from_proto,
    )
    from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

    request = (MAGIC, message_to_proto(message).SerializeToString(), context_to_proto(context).SerializeToString())
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(path)
            send_frames(sock, *request)
            (status,) = recv_frames(sock, 1)
            if status == b"error":
                (reason,) = recv_frames(sock, 1)
                raise NodeServiceError(reason.decode("utf-8", "replace"))
            if status != b"ok":
                raise ServiceUnavailable(f"unexpected status {status[:40]!r}")
            content, state = recv_frames(sock, 2)
    except NodeServiceError:
        raise
    except OSError as exc:  # refused, no such socket, reset, or ended early
        raise ServiceUnavailable(str(exc) or type(exc).__name__) from exc
    context.state = recorddict_from_proto(ProtoRecordDict.FromString(state))
    return Message(recorddict_from_proto(ProtoRecordDict.FromString(content)), reply_to=message)


def stamp_startup(reply: Message, start: float, end: float) -> None:
    """Put this process's start-up interval (``startup_start``/``startup_end``) into the reply's
    fit or evaluate metrics (Flower's legacy ``fitres.metrics``/``evaluateres.metrics``), unless
    the service reported its own (its first message): the round record's ``startup_s`` then
    holds each message's process start, as it would without the service."""
    for name, record in reply.content.config_records.items():
        if name.endswith("res.metrics") and "startup_start" not in record:
            record["startup_start"], record["startup_end"] = start, end


def node_service_mod(message: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """ClientApp mod: answer through the node config's ``node-service`` socket when it names
    one, else (or when the service does not answer) through ``call_next`` in this process."""
    path = str(context.node_config.get(NODE_SERVICE_KEY, "") or "")
    if not path:
        return call_next(message, context)
    asked = time.time()
    try:
        reply = forward(message, context, path)
    except ServiceUnavailable as exc:
        log.warning("fedtext: the node service at %s did not answer (%s): this message is answered in the "
                    "ClientApp's own process", path, exc)
        return call_next(message, context)
    stamp_startup(reply, task_start_time(), asked)
    return reply


# ------------------------------------------------------------------------------ the service
def answer(request: list[bytes], app: Any) -> tuple[list[bytes], Context | None]:
    """The reply frames for one request's frames (``MAGIC``, message, context), computed by
    ``app`` (a ClientApp): ``[b"ok", content, state]`` or ``[b"error", reason]``; and the
    request's context (None for a request not of this protocol)."""
    from flwr.common.serde import (
        context_from_proto,
        message_from_proto,
        recorddict_to_proto,
    )
    from flwr.proto.message_pb2 import Context as ProtoContext
    from flwr.proto.message_pb2 import Message as ProtoMessage

    if request[0] != MAGIC:
        return [b"error", b"not a fedtext node-service request"], None
    message = message_from_proto(ProtoMessage.FromString(request[1]))
    context = context_from_proto(ProtoContext.FromString(request[2]))
    try:
        reply = app(message, context)
    except Exception as exc:
        log.exception("fedtext: the ClientApp raised in the node service")
        return [b"error", f"{type(exc)}:<'{exc}'>".encode()], context
    if reply.has_error():
        return [b"error", str(reply.error.reason).encode()], context
    return [b"ok", recorddict_to_proto(reply.content).SerializeToString(),
            recorddict_to_proto(context.state).SerializeToString()], context


def warm_up(context: Context, warmed: list[int]) -> bool:
    """After a run's first message (the server asks each node who it is before it samples),
    build this node's client once so that the backbone and the partition are loaded before the
    node is first sampled (:func:`fedtext.node.node.warm`), as a board loads its model when a run
    starts; the Ray simulation's actors likewise keep them between clients. Once per run."""
    from fedtext.node.node import warm

    if context.run_id in warmed:
        return False
    warmed.append(context.run_id)
    warm(context)
    return True


def serve(path: Path, threads: int = 0, ready: Callable[[], None] | None = None,
          until: Callable[[], bool] | None = None) -> None:
    """Answer requests on Unix socket ``path`` one at a time, until a signal (or until
    ``until()`` is true, checked twice a second: the tests' in-process services).

    ``threads``: torch's intra-op threads (0: torch's default, all cores); a SuperNode that
    shares a machine with others gets its share, as separate boards would have.
    """
    import torch
    from flwr.client import ClientApp

    from fedtext.node.node import (
        client_for_context,  # torch, transformers, the data loaders: once, before any message
    )

    if threads:
        torch.set_num_threads(threads)
    def client_fn(context: Context) -> Any:  # the ClientApp's own client_fn (fedtext.client_app), without the mod
        return client_for_context(context)

    app = ClientApp(client_fn=client_fn)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket file is created 0600
    try:
        server.bind(str(path))
    finally:
        os.umask(old)
    server.listen(16)
    if until is not None:
        server.settimeout(0.5)
    if ready:
        ready()
    me = os.getuid()
    warmed: list[int] = []  # Flower run ids this service has built a client for
    while until is None or not until():
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        with conn:
            try:
                if peer_uid(conn) != me:
                    log.warning("fedtext: node service: refused a connection from user id %d", peer_uid(conn))
                    continue
                request = recv_frames(conn, 3)
                try:
                    reply, context = answer(request, app)
                except Exception as exc:  # noqa: BLE001 - a malformed request must not end the service
                    log.warning("fedtext: node service: refused a malformed request (%s)", exc)
                    reply, context = [b"error", f"malformed request: {exc}".encode()], None
                send_frames(conn, *reply)
            except OSError as exc:  # the ClientApp went away (killed, timed out): serve the next
                log.warning("fedtext: node service: a request was not completed (%s)", exc)
                continue
        if context is not None and warm_up(context, warmed):  # after the reply: the server is not kept waiting
            log.info("fedtext: node service: warmed up for run %s", warmed[-1])
    server.close()


# ------------------------------------------------------------------------------ the supervisor
def with_service(node_args: list[str], sock: Path, idle_poll_s: float | None = None, warm: int = 0,
                 warm_start: str | None = None) -> list[str]:
    """The SuperNode's command with ``node-service='<sock>'`` added to ``--node-config``
    (``--node-config`` added when absent); ``flower-supernode`` itself run through
    :mod:`fedtext.node.supernode` when ``idle_poll_s`` is given (its idle poll capped), with ``warm``
    ClientApp processes kept ready when ``warm`` >= 1 (:mod:`fedtext.node.warm_exec`), made by
    ``warm_start`` (None: its default)."""
    entry = f"{NODE_SERVICE_KEY}='{sock}'"
    out = list(node_args)
    if idle_poll_s is not None and out and Path(out[0]).name == "flower-supernode":
        warm_args = ["--warm-clientapps", str(warm)] if warm else []
        if warm and warm_start is not None:
            warm_args += ["--warm-start", warm_start]
        out = [sys.executable, "-m", "fedtext.node.supernode", "--idle-poll-s", str(idle_poll_s), *warm_args, *out[1:]]
    for i, arg in enumerate(out):
        if arg == "--node-config" and i + 1 < len(out):
            out[i + 1] = f"{out[i + 1]} {entry}".strip()
            return out
        if arg.startswith("--node-config="):
            out[i] = f"{arg} {entry}"
            return out
    return [*out, "--node-config", entry]


def _stop(proc: subprocess.Popen | None, grace: float = 15.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def _start_service(folder: Path, threads: int, timeout_s: float = 300.0) -> subprocess.Popen:
    sock = folder / SOCKET_NAME
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    proc = subprocess.Popen([sys.executable, "-m", "fedtext.node.service", "--serve", str(sock),
                             "--threads", str(threads)])
    (folder / PID_NAME).write_text(f"{proc.pid}\n")
    deadline = time.time() + timeout_s
    while not sock.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the node service exited with status {proc.returncode} before it listened")
        if time.time() > deadline:
            _stop(proc)
            raise RuntimeError(f"the node service did not listen on {sock} within {timeout_s:.0f} s")
        time.sleep(0.1)
    return proc


def _raise_exit(signum: int, frame: object) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # one clean-up
    raise SystemExit(128 + signum)


def supervise(node_args: list[str], threads: int = 0, folder: Path | None = None,
              idle_poll_s: float | None = None, warm: int = 0, warm_start: str | None = None) -> int:
    """Start the service and ``node_args`` (``flower-supernode ...``) beside it; restart the
    service when it dies; stop it when the SuperNode exits. Returns the SuperNode's status."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    base = os.environ.get("XDG_RUNTIME_DIR") or None
    folder = folder or Path(tempfile.mkdtemp(prefix="fedtext-node-", dir=base))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    service = node = None
    try:
        service = _start_service(folder, threads)
        print(f"fedtext: node service {service.pid} on {folder / SOCKET_NAME}", file=sys.stderr, flush=True)
        node = subprocess.Popen(with_service(node_args, folder / SOCKET_NAME, idle_poll_s, warm, warm_start))
        restarts = 0
        while node.poll() is None:
            if service.poll() is not None:
                restarts += 1
                print(f"fedtext: the node service exited ({service.returncode}); restart {restarts}",
                      file=sys.stderr, flush=True)
                time.sleep(min(10.0, 0.5 * restarts))  # a service that keeps dying is not restarted in a loop
                service = _start_service(folder, threads)
            time.sleep(0.2)
        return int(node.returncode)
    finally:
        _stop(node)
        _stop(service)
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from fedtext.node.warm_exec import WARM_START, WARM_STARTS  # not at the top: the ClientApp shim imports this module

    ap = argparse.ArgumentParser(
        prog="python -m fedtext.node.service",
        description="Start a SuperNode with fedtext's node service beside it: "
                    "python -m fedtext.node.service [--threads N] -- flower-supernode ...")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads of the service (default 0: all cores; give cores / SuperNodes sharing them)")
    ap.add_argument("--idle-poll-s", type=float, default=None,
                    help="seconds between the SuperNode's polls while idle (default 0.5, fedtext.node.supernode; "
                         "3 is Flower's own)")
    ap.add_argument("--warm-clientapps", type=int, default=WARM_CLIENTAPPS,
                    help=f"ClientApp processes the SuperNode keeps started ahead of need, each handed one task "
                         f"(default {WARM_CLIENTAPPS}; 0: Flower's cold flwr-clientapp per message; fedtext.node.warm_exec)")
    ap.add_argument("--warm-start", choices=WARM_STARTS, default=None,
                    help=f"how a ready ClientApp process is made (default {WARM_START}; fork: forked from a fork "
                         "server that imported Flower once; spawn: a new Python; fedtext.node.warm_exec)")
    ap.add_argument("--folder", default="", help="the service's private folder (default: a new one, removed at exit)")
    ap.add_argument("--serve", default="", help=argparse.SUPPRESS)  # the service itself, on this socket
    ap.add_argument("supernode", nargs=argparse.REMAINDER, help="-- flower-supernode and its arguments")
    args = ap.parse_args(argv)
    if args.threads < 0:
        ap.error("--threads must be >= 0")
    if args.warm_clientapps < 0:
        ap.error("--warm-clientapps must be >= 0")
    if args.serve:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _raise_exit)
        serve(Path(args.serve), args.threads)
        return 0
    node = args.supernode[1:] if args.supernode[:1] == ["--"] else args.supernode
    if not node:
        ap.error("give the SuperNode's command after --, e.g. -- flower-supernode --superlink HOST:PORT ...")
    from fedtext.node.supernode import IDLE_POLL_S

    idle = IDLE_POLL_S if args.idle_poll_s is None else args.idle_poll_s
    if not idle > 0:
        ap.error("--idle-poll-s must be > 0")
    return supervise(node, args.threads, Path(args.folder) if args.folder else None, idle, args.warm_clientapps,
                     args.warm_start)


if __name__ == "__main__":
    sys.exit(main())
