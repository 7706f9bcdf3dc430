"""Attacks on the deployment as shipped (docs/deployment.md; tests/system/recipe.py).

Issue 45 found the home-made gateway that fronted the SuperLink until then to be a
resource hole: one 256 MiB POST without any credential was parsed by the SuperLink before
its 401 (RSS 213 -> 975 MB, and it stayed there; three at once 2.2 GB), and 400 half-sent
requests stayed open for 70 s and more (with 128 file descriptors it refused everyone,
legitimate SuperNodes included, after 113). nginx now fronts the SuperLink
(``deploy/fleet_proxy.py``); these tests repeat those attacks from another address
(127.0.0.3) against it:

- three 256 MiB bodies at once, two with a ``Content-Length`` and one chunked, to the Fleet
  route that takes the largest bodies: each is answered 413 and the SuperLink's RSS rises by
  less than 50 MB (it never sees them);
- 400 slow requests held open (340 that never finish their header, 60 that never finish a
  body; each one nginx closes is opened again at once) while the two SuperNodes run 2 rounds of
  fedprompt: the run finishes with both clients in every round, and nginx closed every slow
  request within its header or body timeout;
- issue 58: bodies trickled a byte at a time, which no nginx timeout ends (``client_body_timeout``
  restarts on every byte): the per-address cap is their bound. 64 from one address cost nginx
  little (it buffers bodies) and the SuperLink nothing; the 65th gets 429, other addresses are served.

The stranger's case (only ``ca.crt``: register, unregister, list, run; path tricks) is
``tests/system/test_deploy.py::test_a_stranger_holding_only_ca_crt_cannot_register_unregister_list_or_run``.
"""

from __future__ import annotations

import contextlib
import ssl
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.system.recipe import ATTACKER, PUBLIC, raw_status, rss_mb, run_method, tls_connect

pytestmark = pytest.mark.slow

FLOOD = 256 << 20  # bytes
HEADER_TIMEOUT_S, BODY_TIMEOUT_S = 10, 20  # deploy/fleet_proxy.py's defaults
CONN_PER_IP = 64  # deploy/fleet_proxy.py's --conn-per-ip default


NGINX_OWN = {400, 408, 413, 429}  # statuses nginx answers itself; anything else came from the SuperLink


def flood_head(size: int, chunked: bool) -> bytes:
    """The request header of one flood (its length is the 413's ``req=`` in nginx's log)."""
    head = f"POST /v1/fleet/push-object HTTP/1.1\r\nHost: {PUBLIC}\r\nContent-Type: application/protobuf\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {size}\r\n\r\n"
    return head.encode()


def flood(port: int, ca: Path, size: int, chunked: bool) -> tuple[int, str]:
    """POST ``size`` bytes to /v1/fleet/push-object without credentials; (bytes sent, status line)."""
    with tls_connect(PUBLIC, port, ca, source=ATTACKER, timeout=60) as tls:
        tls.sendall(flood_head(size, chunked))
        block, sent = b"\0" * (1 << 20), 0
        with contextlib.suppress(OSError):  # nginx may close its side once it has answered
            while sent < size:
                tls.sendall(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
                sent += len(block)
            if chunked:
                tls.sendall(b"0\r\n\r\n")
        try:
            status = tls.recv(200).split(b"\r\n", 1)[0].decode()
        except OSError as exc:
            status = f"no reply ({exc})"
    return sent, status


def test_a_256_mib_flood_without_credentials_never_reaches_the_superlink(deployment):
    d = deployment
    access = d.proxy_dir / "access.log"
    seen = len(access.read_text().splitlines())
    before = rss_mb(d.link.pid)
    with ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda chunked: flood(d.fleet_port, d.certs / "ca.crt", FLOOD, chunked),
                                (False, False, True)))
    time.sleep(2)
    after = rss_mb(d.link.pid)
    print(f"SuperLink RSS {before:.0f} -> {after:.0f} MB under 3 x 256 MiB; replies {replies}")
    assert all(status == "HTTP/1.1 413 Request Entity Too Large" for _, status in replies), replies
    assert after - before < 50, (before, after)
    # and nothing of it was forwarded: no attacker's request reached the SuperLink (a 401).
    # The floods' own lines are the attacker's 413s: only a body over the cap gets one (the slow
    # requests another test may leave open, in random order, declare 70,000 bytes, under the cap, and
    # close as 400 or 408 in this window: CI saw a 400 req=54 beside the three 413s). Not told by
    # their length: nginx's req= of a chunked flood counts the chunks it read before answering
    # (CI: 120 once, 8,312 another time), which depends on timing.
    attacker = [line for line in access.read_text().splitlines()[seen:] if line.startswith(f"{ATTACKER} ")]
    floods = [line for line in attacker if '" 413 ' in line]
    assert len(floods) == 3 and all('"POST /v1/fleet/push-object" 413 ' in line for line in floods), attacker
    assert all(int(line.split('" ', 1)[1].split()[0]) in NGINX_OWN for line in attacker), attacker


class SlowRequests:
    """Hold ``header`` requests that never finish their header and ``body`` requests that
    never finish their body open from ATTACKER, opening a new one for each nginx closes."""

    def __init__(self, port: int, ca: Path, header: int, body: int) -> None:
        self.port, self.ca = port, ca
        self.kinds = ["header"] * header + ["body"] * body
        self.stop = threading.Event()
        self.open = 0
        self.lifetimes: dict[str, list[float]] = {"header": [], "body": []}
        self.closed = {"header": 0, "body": 0}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.hold, args=(kind,), daemon=True) for kind in self.kinds]

    def hold(self, kind: str) -> None:
        while not self.stop.is_set():
            try:
                tls = tls_connect(PUBLIC, self.port, self.ca, source=ATTACKER, timeout=60)
            except (OSError, ssl.SSLError):
                time.sleep(1)
                continue
            started = time.time()
            with self.lock:
                self.open += 1
            try:
                if kind == "header":  # a header that never ends
                    tls.sendall(f"POST /v1/fleet/push-object HTTP/1.1\r\nHost: {PUBLIC}\r\n".encode())
                else:  # a complete header and 1 byte of a 70,000-byte body
                    tls.sendall(f"POST /v1/fleet/push-object HTTP/1.1\r\nHost: {PUBLIC}\r\n"
                                "Content-Type: application/protobuf\r\nContent-Length: 70000\r\n\r\nx".encode())
                tls.settimeout(1.0)
                while not self.stop.is_set():
                    try:
                        if not tls.recv(4096):
                            break
                        break  # nginx answered (408, or 429 above the per-address limit): it closes
                    except TimeoutError:
                        continue
                    except (OSError, ssl.SSLError):
                        break
            finally:
                with self.lock:
                    self.open -= 1
                    if not self.stop.is_set():
                        self.closed[kind] += 1
                        self.lifetimes[kind].append(time.time() - started)
                tls.close()

    def __enter__(self) -> "SlowRequests":
        for thread in self.threads:
            thread.start()
        deadline = time.time() + 60
        while self.open < len(self.kinds) * 0.9:
            assert time.time() < deadline, f"only {self.open} slow requests opened"
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        # every thread ends within its 1 s poll, or its connect's 60 s timeout: wait for all, so
        # no request of this test is still open (and logged) while the next test runs
        deadline = time.time() + 70
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - time.time()))


def test_legitimate_nodes_keep_training_while_400_slow_requests_are_open(deployment):
    d = deployment
    with SlowRequests(d.fleet_port, d.certs / "ca.crt", header=340, body=60) as slow:
        open_at_start = slow.open
        summary, rounds = run_method(d, "fedprompt", "fedprompt.local-steps=2")
        # the 340 header requests opened together, so nginx closes them together every HEADER_TIMEOUT_S and
        # they reconnect in a wave (a TLS handshake each on 2 cores): a run ending inside that wave saw 305
        # open (2026-12-02). Still held at the end means back above 360 within one timeout, not at one instant.
        open_at_end, deadline = slow.open, time.time() + HEADER_TIMEOUT_S
        while open_at_end < 360 and time.time() < deadline:
            time.sleep(0.2)
            open_at_end = max(open_at_end, slow.open)
    print(f"slow requests open at the run's start {open_at_start}, at its end {open_at_end}; closed by nginx "
          f"{slow.closed}; longest lived header {max(slow.lifetimes['header'], default=0):.1f} s, "
          f"body {max(slow.lifetimes['body'], default=0):.1f} s")
    assert open_at_start >= 360 and open_at_end >= 360, (open_at_start, open_at_end)
    assert summary["status"] == "finished", summary
    for r in rounds[1:]:
        assert r["num_clients"] == 2 and r["dropped"] == [], r
    # nginx, not the attacker, ended them, each within its timeout (+ the 1 s poll and TLS slack)
    assert slow.closed["header"] >= 340 and slow.closed["body"] >= 60, slow.closed
    assert max(slow.lifetimes["header"]) < HEADER_TIMEOUT_S + 5, max(slow.lifetimes["header"])
    assert max(slow.lifetimes["body"]) < BODY_TIMEOUT_S + 5, max(slow.lifetimes["body"])
    # ... and it was the timeouts that ended them, not an immediate refusal (403/429)
    assert statistics.median(slow.lifetimes["header"]) > HEADER_TIMEOUT_S - 1, slow.lifetimes["header"][:20]
    assert statistics.median(slow.lifetimes["body"]) > BODY_TIMEOUT_S - 1, slow.lifetimes["body"][:20]


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (nginx's master: its workers)."""
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def waiting(tls: ssl.SSLSocket) -> bool:
    """Whether nginx has neither answered nor closed ``tls``."""
    tls.settimeout(0.05)
    try:
        tls.recv(1)
    except TimeoutError:
        return True
    except (OSError, ssl.SSLError):
        return False
    return False


def test_bodies_trickled_from_one_address_are_bounded_by_its_connection_cap(deployment):
    """Issue 58: 20 connections trickling a 60,000-byte body one byte every 8 s were never
    closed: nginx's client_body_timeout restarts on every byte, and nginx 1.22 (core, or any
    module of Debian's that does not script the body read) has no bound on a body's total
    time. The bound is the per-address cap: here the whole body but its last bytes is sent
    (nginx's buffer full), then a byte a second; 64 such requests cost nginx's worker about
    one body buffer and a TLS connection each, the SuperLink nothing (nginx forwards only
    complete bodies); the 65th from the address gets 429 at once, another address is served."""
    d = deployment
    (worker,) = children(d.proxy.pid)
    head = (f"POST /v1/fleet/push-object HTTP/1.1\r\nHost: {PUBLIC}\r\nContent-Type: application/protobuf\r\n"
            "Content-Length: 60000\r\n\r\n").encode()
    nginx_before, link_before = rss_mb(worker), rss_mb(d.link.pid)
    conns = []
    try:
        for _ in range(CONN_PER_IP):
            conns.append(tls_connect(PUBLIC, d.fleet_port, d.certs / "ca.crt", source=ATTACKER, timeout=10))
            conns[-1].sendall(head + b"x" * 59_990)
        for _ in range(5):  # a byte a second on each: every one restarts the body timeout
            time.sleep(1)
            for tls in conns:
                tls.sendall(b"x")
        nginx_during, link_during = rss_mb(worker), rss_mb(d.link.pid)
        with tls_connect(PUBLIC, d.fleet_port, d.certs / "ca.crt", source=ATTACKER, timeout=10) as extra:
            extra.sendall(head + b"x")
            refused = extra.recv(200).split(b"\r\n", 1)[0].decode()
        other = raw_status(PUBLIC, d.fleet_port, d.certs / "ca.crt", "POST", "/v1/fleet/send-node-heartbeat")
        unanswered = sum(waiting(tls) for tls in conns)  # no timeout ended any: only the cap bounds them
    finally:
        for tls in conns:
            tls.close()
    per_conn_kb = (nginx_during - nginx_before) * 1024 / CONN_PER_IP
    print(f"{CONN_PER_IP} trickled bodies: nginx worker RSS {nginx_before:.1f} -> {nginx_during:.1f} MB "
          f"({per_conn_kb:.0f} KB a request), SuperLink RSS {link_before:.0f} -> {link_during:.0f} MB; "
          f"the next from the address: {refused!r}; another address: {other}; unanswered {unanswered}")
    assert unanswered == CONN_PER_IP
    assert refused == "HTTP/1.1 429 Too Many Requests", refused
    assert other != 429, other
    assert per_conn_kb < 256, per_conn_kb  # a 60,000-byte body buffer + TLS, not more
    assert link_during - link_before < 10, (link_before, link_during)
