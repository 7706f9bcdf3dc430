"""The SuperNode's node service (fedtext/node/service.py): the same records with and without
it, a service that does not answer costs no message, and only its own user reaches it.

The ClientApp here is the one Flower loads (``fedtext.client_app.app``), called on Flower
``Message``s as ``flwr-clientapp`` calls it, from the server's own round loop
(simulations/inprocess.py); the service runs in a thread of this process (``serve(...,
until=...)``) on a socket in a private folder. The supervisor's processes: tests/integration/
test_node_service_processes.py; a SuperNode's service killed mid-round: tests/system.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from flwr.app import Message, Metadata, RecordDict
from flwr.common import Context, EvaluateIns, EvaluateRes, FitIns, FitRes, Parameters
from flwr.common.serde import make_message, recorddict_to_proto
from flwr.compat.common import recorddict_compat as compat

from fedtext.node import service as node_service
from fedtext.client_app import make_client_app
from fedtext.records import probes
from fedtext.records.schema import MACHINE_FIELDS, ROUND_FIELDS

from ..inprocess import TINY, InProcessProxy, run, smoke, tiny_bert

APP = make_client_app()  # the shim: what flwr-clientapp loads


class MessageProxy(InProcessProxy):
    """Fit and evaluate as Flower messages through the ClientApp (its mods included), with the
    node's ``Context`` kept between messages as a SuperNode keeps it; ``SOCKET`` (when set)
    is the node config's ``node-service``."""

    SOCKET: str = ""
    STATES: ClassVar[dict[str, bytes]] = {}  # per node: its context.state after its last message (serialised)

    def _message(self, content, kind: str) -> Any:
        node_config = {**self.node_config, **({"node-service": self.SOCKET} if self.SOCKET else {})}
        context = Context(run_id=7, node_id=int(self.cid) + 1, node_config=node_config, state=self.state,
                          run_config=self.run_config)
        reply = APP(instruction(content, kind, int(self.cid) + 1), context)
        self.state = context.state
        type(self).STATES[self.cid] = recorddict_to_proto(context.state).SerializeToString()
        return reply.content

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        with self.TURN:
            content = self._message(compat.fitins_to_recorddict(ins, keep_input=True), "train")
            return compat.recorddict_to_fitres(content, keep_input=False)

    def evaluate(self, ins: EvaluateIns, timeout: float | None, group_id: int | None) -> EvaluateRes:
        with self.TURN:
            content = self._message(compat.evaluateins_to_recorddict(ins, keep_input=True), "evaluate")
            return compat.recorddict_to_evaluateres(content)


def instruction(content: RecordDict, kind: str, node_id: int = 1) -> Message:
    """The message the SuperLink would deliver (its metadata set, as a ClientApp process gets it)."""
    metadata = Metadata(run_id=7, message_id=f"m-{time.monotonic_ns()}", src_node_id=0, dst_node_id=node_id,
                        reply_to_message_id="", group_id="1", created_at=time.time(), ttl=3600.0,
                        message_type=kind, src_task_id=1, dst_task_id=2)
    return make_message(metadata=metadata, content=content)


class ServiceProxy(MessageProxy):
    SOCKET = ""  # set per test


@contextlib.contextmanager
def service_thread(folder: Path) -> Iterator[Path]:
    """A node service answering on ``folder/node.sock`` in a thread of this process."""
    folder.mkdir(mode=0o700)
    sock, done, ready = folder / node_service.SOCKET_NAME, threading.Event(), threading.Event()
    thread = threading.Thread(target=node_service.serve, args=(sock,), daemon=True,
                              kwargs={"ready": ready.set, "until": done.is_set})
    thread.start()
    assert ready.wait(60)
    try:
        yield sock
    finally:
        done.set()
        thread.join(10)


def learning_fields(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each round record less what the machine decides (seconds, memory)."""
    return [{k: r[k] for k in ROUND_FIELDS if k not in MACHINE_FIELDS} for r in rounds]


# fedbpt and feddls keep node state between rounds (FedDLS's p' in context.state); 2 rounds
@pytest.mark.parametrize("method", ["feddls", "fedprompt"])
def test_records_are_the_same_with_and_without_the_node_service(method, tmp_path, monkeypatch):
    config = {"method": method, **TINY, **smoke(method), **tiny_bert(method), "num-server-rounds": 2}
    monkeypatch.setattr(MessageProxy, "STATES", {})
    _, plain = run(config, tmp_path / "plain", proxy=MessageProxy)
    plain_states = dict(MessageProxy.STATES)
    with service_thread(tmp_path / "svc") as sock:
        monkeypatch.setattr(ServiceProxy, "SOCKET", str(sock))
        asked = []
        forward = node_service.forward
        monkeypatch.setattr(node_service, "forward", lambda *a: asked.append(a[0].metadata.message_type) or forward(*a))
        folder, served = run(config, tmp_path / "served", proxy=ServiceProxy)
    assert asked.count("train") == 4 and asked.count("evaluate") >= 2  # every message went to the service
    assert learning_fields(served) == learning_fields(plain)
    # the node's state (FedDLS's p' and the journal's stamp) came back from the service as it left it
    assert MessageProxy.STATES == plain_states and (method != "feddls" or len(plain_states["0"]) > 100)
    assert served[-1]["num_clients"] == 2 and served[-1]["dropped"] == []
    # the provenance names where each partition ran (its node's get_properties)
    provenance = json.loads((folder / "config.json").read_text())["provenance"]
    assert provenance["node_platforms"] == {"0": platform.machine(), "1": platform.machine()}
    # every message's process start is counted as start-up, as a deployment ClientApp's is
    assert all(r["startup_s"] is not None for r in served[1:])


def test_a_service_that_does_not_answer_costs_no_message(tmp_path, monkeypatch, caplog):
    """No socket there (the service restarting, or killed mid-message): the ClientApp answers
    in its own process, with the same records, and says so."""
    method = "fedprompt"
    config = {"method": method, **TINY, **smoke(method), **tiny_bert(method)}
    _, plain = run(config, tmp_path / "plain", proxy=MessageProxy)
    monkeypatch.setattr(ServiceProxy, "SOCKET", str(tmp_path / "gone" / "node.sock"))
    # the first run routed the fedtext logger to Flower's handlers and stopped its propagation
    # (fedtext.common.progress.setup_logging, once per process): caplog's handler goes on it directly
    fedtext_log = logging.getLogger("fedtext")
    fedtext_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="fedtext.node.service"):
            _, alone = run(config, tmp_path / "alone", proxy=ServiceProxy)
    finally:
        fedtext_log.removeHandler(caplog.handler)
    assert learning_fields(alone) == learning_fields(plain)
    assert "did not answer" in caplog.text and "answered in the ClientApp's own process" in caplog.text


def test_a_service_that_dies_mid_message_leaves_the_shim_to_answer(tmp_path):
    """A stream that ends before the reply (the service killed while computing) is
    ``ServiceUnavailable``, which the mod answers by computing in its own process."""
    folder = tmp_path / "f"
    folder.mkdir(mode=0o700)
    path = folder / "node.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def die_after_reading() -> None:
        conn, _ = server.accept()
        node_service.recv_frames(conn, 3)
        conn.close()  # as the kernel closes a killed process's socket

    threading.Thread(target=die_after_reading, daemon=True).start()
    called = []
    message = instruction(compat.fitins_to_recorddict(FitIns(Parameters([], ""), {}), True), "train")
    context = Context(run_id=1, node_id=1, node_config={"node-service": str(path)}, state=RecordDict(),
                      run_config={})
    out = node_service.node_service_mod(message, context, lambda m, c: called.append(m) or "answered here")
    assert out == "answered here" and called == [message]
    server.close()


def test_an_error_in_the_service_is_the_clientapps_error(tmp_path):
    """The ClientApp raising in the service reaches flwr-clientapp as an exception with Flower's
    wording (a failed client for that round, as without the service), not as a fallback."""
    with service_thread(tmp_path / "svc") as sock:
        message = instruction(compat.fitins_to_recorddict(FitIns(Parameters([], ""), {}), True), "train")
        context = Context(run_id=1, node_id=1, node_config={"node-service": str(sock)},  # no partition-id
                          state=RecordDict(), run_config={"method": "fedprompt"})
        with pytest.raises(node_service.NodeServiceError, match="node config lacks 'partition-id'"):
            node_service.node_service_mod(message, context, lambda m, c: pytest.fail("fell back"))


def _as_nobody(action) -> int:
    """Run ``action()`` in a child process as user 65534 (nobody): 0 when it raised
    ``OSError`` (refused, closed), 1 when it went through."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setgid(65534)
            os.setuid(65534)
            action()
            code = 1
        except OSError:  # ServiceUnavailable is one
            code = 0
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1] >> 8


@pytest.mark.skipif(os.getuid() != 0, reason="switching to another user needs root")
def test_only_the_services_own_user_reaches_it(tmp_path):
    """Another user cannot open the socket (the folder is 0700, the socket 0600), and a
    connection from another user id is closed unanswered (SO_PEERCRED)."""

    def connect() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(sock))

    def ask() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(sock))
            node_service.send_frames(s, node_service.MAGIC, b"", b"")
            node_service.recv_frames(s, 1)

    base = Path(tempfile.mkdtemp(prefix="fedtext-test-svc-", dir="/tmp"))  # pytest's tmp_path is 0700 above
    try:
        with service_thread(base / "svc") as sock:
            assert (sock.parent.stat().st_mode & 0o777, sock.stat().st_mode & 0o777) == (0o700, 0o600)
            os.chmod(base, 0o755)
            assert _as_nobody(connect) == 0  # the service's folder keeps nobody out
            # past the modes (a socket opened up by mistake): the credentials check closes it unanswered
            os.chmod(sock.parent, 0o755)
            os.chmod(sock, 0o666)
            assert _as_nobody(connect) == 1 and _as_nobody(ask) == 0
            # and the service still answers its own user (a malformed request is refused, not fatal)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(sock))
                node_service.send_frames(s, node_service.MAGIC, b"x", b"y")
                status, reason = node_service.recv_frames(s, 2)
            assert status == b"error" and b"malformed request" in reason
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_peer_uid_and_frames_over_a_socket_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert node_service.peer_uid(a) == os.getuid()
        node_service.send_frames(a, b"x", b"", b"y" * 70_000)
        assert node_service.recv_frames(b, 3) == [b"x", b"", b"y" * 70_000]
        a.sendall(node_service._LEN.pack(5) + b"ab")
        a.close()
        with pytest.raises(node_service.ServiceUnavailable, match="after 2 of 5 bytes"):
            node_service.recv_frames(b, 1)


def test_a_reply_ending_in_an_empty_frame_survives_a_reader_that_hung_up_after_its_length():
    """A state frame of 0 bytes (a ClientApp with no state, e.g. get_properties) ends the reply at its
    length: the reader has it all and closes. Writing the frame's nothing after that fails with a
    broken pipe (seen as 'a request was not completed' on the first message of a run, 2026-11-30),
    so send_frames writes only the length."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a:
        a.sendall(node_service._LEN.pack(0))
        assert node_service.recv_frames(b, 1) == [b""]
        b.close()
        with pytest.raises(BrokenPipeError):
            a.sendall(b"")  # the write send_frames leaves out
    sent: list[bytes] = []
    recorder = type("Recorder", (), {"sendall": lambda self, data: sent.append(bytes(data))})()
    node_service.send_frames(recorder, b"ok", b"")
    assert sent == [node_service._LEN.pack(2), b"ok", node_service._LEN.pack(0)]


class _PeerCreds:
    """A socket whose SO_PEERCRED answer is ``struct ucred`` {pid, uid, gid} as given."""

    def __init__(self, pid: int, uid: int, gid: int) -> None:
        self.creds = struct.pack("3i", pid, uid, gid)

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        assert (level, option, size) == (socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return self.creds


def test_peer_uid_is_the_peers_user_not_its_group_or_pid():
    """struct ucred is {pid, uid, gid}: the user id is the second field (as root, uid = gid = 0
    and a real socket pair cannot tell the user from the group)."""
    assert node_service.peer_uid(_PeerCreds(4321, 1000, 2000)) == 1000
    assert node_service.peer_uid(_PeerCreds(7, 0, 65534)) == 0


def test_the_service_compares_the_peers_user_with_its_own_user_not_groups(tmp_path, monkeypatch):
    """The service's own user id U, its group id (here made U + 4242 = G so that the two differ
    even as root) and a peer's credentials faked on the accepted connection: a peer of user U in
    another group is answered; a peer of user G (= the service's group id) whose group is U is
    closed unanswered. A check of the peer's group, or against the service's group, flips both."""
    me = os.getuid()
    group = me + 4242
    peer = {"uid": me, "gid": me + 99}
    real = socket.socket.getsockopt

    def getsockopt(self, level, option, *args):
        if level == socket.SOL_SOCKET and option == socket.SO_PEERCRED:
            return struct.pack("3i", 1, peer["uid"], peer["gid"])
        return real(self, level, option, *args)

    monkeypatch.setattr(os, "getgid", lambda: group)
    monkeypatch.setattr(socket.socket, "getsockopt", getsockopt)

    def ask(sock: Path) -> list[bytes] | None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(sock))
            try:
                node_service.send_frames(s, node_service.MAGIC, b"x", b"y")
                return node_service.recv_frames(s, 2)
            except OSError:  # closed unanswered (ServiceUnavailable, or reset)
                return None

    with service_thread(tmp_path / "svc") as sock:
        assert sock.stat().st_mode & 0o777 == 0o600  # created under umask 0177, whoever runs the test
        status, reason = ask(sock)  # own user, another group: answered (the request is malformed)
        assert status == b"error" and b"malformed request" in reason
        peer.update(uid=group, gid=me)  # another user whose group id is the service's user id
        assert ask(sock) is None
        peer.update(uid=me, gid=group)  # and the service, still up, answers its own user again
        assert ask(sock)[0] == b"error"


def test_a_request_without_the_magic_is_refused_before_the_clientapp_runs():
    """Another protocol's (or version's) first frame: refused in words, the ClientApp never called."""
    reply, context = node_service.answer([b"fedtext-node-service/0", b"", b""],
                                         lambda m, c: pytest.fail("the ClientApp ran"))
    assert reply == [b"error", b"not a fedtext node-service request"] and context is None


def test_the_service_is_added_to_the_supernodes_node_config():
    sock = Path("/run/x/node.sock")
    assert node_service.with_service(["--insecure", "--node-config", "partition-id=0 num-partitions=2"], sock) == [
        "--insecure", "--node-config", "partition-id=0 num-partitions=2 node-service='/run/x/node.sock'"]
    assert node_service.with_service(["--node-config=partition-id=1"], sock) == [
        "--node-config=partition-id=1 node-service='/run/x/node.sock'"]
    assert node_service.with_service(["--insecure"], sock) == [
        "--insecure", "--node-config", "node-service='/run/x/node.sock'"]


def test_the_supernode_runs_through_fedtext_supernode_with_its_warm_clientapps():
    sock = Path("/run/x/node.sock")
    node = ["/venv/bin/flower-supernode", "--insecure"]
    assert node_service.with_service(node, sock, 0.5, 2) == [
        sys.executable, "-m", "fedtext.node.supernode", "--idle-poll-s", "0.5", "--warm-clientapps", "2", "--insecure",
        "--node-config", "node-service='/run/x/node.sock'"]
    assert "--warm-clientapps" not in node_service.with_service(node, sock, 0.5, 0)  # 0: Flower's cold start
    assert node_service.with_service(node, sock, None, 2)[0] == "/venv/bin/flower-supernode"  # as given


def test_process_start_time_is_this_processs_start():
    started = probes.process_start_time()
    assert time.time() - 24 * 3600 * 365 < started <= time.time()
    assert abs(probes.process_start_time(os.getpid()) - started) < 1e-6
    assert probes.process_start_time(2**30) == pytest.approx(time.time(), abs=5)  # no such process: now


def test_a_runs_first_message_warms_the_node_once(monkeypatch):
    """After it answers a run's first message, the service builds the node's client once (the
    backbone and the partition into its caches), so that the first round the node is sampled in
    does not pay the loads; a build that fails is logged, not raised."""
    import fedtext.node.node as node

    built = []
    monkeypatch.setattr(node.Node, "build", lambda self: built.append((self.cfg.method, self.partition_id)))
    context = Context(run_id=5, node_id=1, node_config={"partition-id": 1, "num-partitions": 2}, state=RecordDict(),
                      run_config={"method": "fedprompt"})
    warmed: list[int] = []
    assert node_service.warm_up(context, warmed) and built == [("fedprompt", 1)] and warmed == [5]
    assert not node_service.warm_up(context, warmed) and built == [("fedprompt", 1)]  # once per run
    bad = Context(run_id=6, node_id=1, node_config={}, state=RecordDict(), run_config={"method": "fedprompt"})
    assert node_service.warm_up(bad, warmed)
    assert built == [("fedprompt", 1)]  # no partition-id: logged, nothing built, nothing raised
