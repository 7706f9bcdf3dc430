"""docs/deployment.md's real-use recipe, started as shipped, for the system tests.

One SuperLink (persistent state database, TLS from ``deploy/make_certs.sh``, SuperNode
authentication) on 127.0.0.1 only (``deploy/superlink.sh``); its Fleet API published by
nginx (``deploy/fleet_proxy.py``, Debian's ``nginx``) on a second address, 127.0.0.2, which
stands for the public interface SuperNodes reach; two authenticated SuperNodes and one
unregistered one connect there (``deploy/supernode.sh``). The operator's ``flwr`` talks to
127.0.0.1. Attackers connect from 127.0.0.3, another address, as a stranger's machine would.

Every process is started in its own session by the deployment launcher's
:class:`simulations.deployment.Processes`, whose ``stop_all`` stops exactly those process groups
(the SuperLink, nginx or a SuperNode and what each spawned), by PID, then any process still
carrying the launch's token (a ClientApp that left its group), by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from simulations.deployment import Processes, free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PUBLIC = "127.0.0.2"  # the address SuperNodes (and strangers) reach; the SuperLink is on 127.0.0.1
ATTACKER = "127.0.0.3"  # the source address of floods and slow requests
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
# The methods the federation under test runs: the proxy's body cap fits their uploads.
METHODS = ("bbt-fed", "fedprompt")


def missing_tools() -> str | None:
    """Why the recipe cannot start here, or None. CI (.ci/run) installs every tool, so
    there a missing one fails the test instead of skipping it."""
    missing = [t for t in ("openssl", "ssh-keygen") if not shutil.which(t)]
    missing += [t for t in ("flwr", "flower-superlink", "flower-supernode") if not (BIN / t).exists()]
    missing += [] if Path(NGINX).is_file() else ["nginx"]
    if missing and os.environ.get("FEDTEXT_CI_RUN"):
        pytest.fail(f"CI must install {', '.join(missing)} (.ci/run)")
    return f"needs {', '.join(missing)}" if missing else None


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60,
                  host: str = "127.0.0.1") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on {port} after {timeout} s:\n{log.read_text()[-2000:]}")


def flwr_home(path: Path, name: str, address: str, ca: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.toml").write_text(f'[superlink]\ndefault = "{name}"\n\n[superlink.{name}]\n'
                                      f'address = "{address}"\nroot-certificates = "{ca}"\n')
    return path


def flwr(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "flwr"), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def flwr_json(env: dict[str, str], *args: str) -> dict:
    out = flwr(env, *args, "--format", "json")
    return json.loads(out.stdout)


def tls_connect(host: str, port: int, ca: Path, source: str | None = None, timeout: float = 30) -> ssl.SSLSocket:
    """A TLS connection to ``host:port`` (verified against ``ca``), from ``source`` if given."""
    raw = socket.create_connection((host, port), timeout=timeout, source_address=(source, 0) if source else None)
    return ssl.create_default_context(cafile=str(ca)).wrap_socket(raw, server_hostname=host)


def raw_status(host: str, port: int, ca: Path, method: str, target: str) -> int:
    """Status of one HTTP/1.1 request sent as written (no client-side path normalisation)."""
    with tls_connect(host, port, ca) as tls:
        tls.sendall(f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    "Content-Type: application/protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while b"\r\n" not in reply:
            chunk = tls.recv(4096)
            if not chunk:
                break
            reply += chunk
    return int(reply.split(b" ", 2)[1])


def rss_mb(pid: int) -> float:
    """Resident memory of one process, MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@contextlib.contextmanager
def deployment(tmp: Path) -> Iterator[SimpleNamespace]:
    """Start the recipe in ``tmp`` and yield its parts; stop every process group it started."""
    try:
        free_port(PUBLIC)
        free_port(ATTACKER)
    except OSError:
        pytest.skip(f"cannot bind {PUBLIC} and {ATTACKER} (stand-ins for public addresses)")
    certs, home = tmp / "certs", tmp / "flwr-home"
    env = {**os.environ, "FLWR_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    subprocess.run(["bash", "deploy/make_certs.sh", str(certs), "2", PUBLIC], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=120)
    port, fleet_port = free_port(), free_port(PUBLIC)
    flwr_home(home, "lab", f"127.0.0.1:{port}", certs / "ca.crt")  # the operator, on the SuperLink host
    procs = Processes(env, tmp)
    try:
        link = procs.start("superlink", ["bash", "deploy/superlink.sh", "--state", str(tmp / "state"),
                                         "--certs", str(certs), "--port", str(port)])
        proxy = procs.start("fleet-proxy", [
            sys.executable, "deploy/fleet_proxy.py", "--listen", f"{PUBLIC}:{fleet_port}",
            "--superlink", f"127.0.0.1:{port}", "--certs", str(certs), "--dir", str(tmp / "proxy"),
            "--methods", *METHODS, "--nginx", NGINX])
        link_log, proxy_log = procs.log("superlink"), procs.log("fleet-proxy")
        wait_for_port(port, link, link_log)
        wait_for_port(fleet_port, proxy, proxy_log, host=PUBLIC)
        cap = int(proxy_log.read_text().split("body cap ", 1)[1].split(" ", 1)[0].replace(",", ""))
        pins = []  # the operator pins each registered node id to its partition (run-config node-partitions)
        for i in range(2):
            reg = flwr(env, "supernode", "register", str(certs / f"node-{i}.pub"), "lab", "--format", "json",
                       timeout=60)
            assert '"success": true' in reg.stdout, reg.stdout + reg.stderr
            pins.append(f"{json.loads(reg.stdout)['node-id']}={i}")
        # An unregistered key is refused: node auth is on.
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", str(certs / "node-2")],
                       check=True, timeout=60)
        nodes = []
        for i in range(3):
            nodes.append(procs.start(f"supernode-{i}", [
                "bash", "deploy/supernode.sh", "--partition", str(i), "--num-partitions", "3" if i == 2 else "2",
                "--superlink", f"{PUBLIC}:{fleet_port}", "--certs", str(certs), "--port", str(free_port())]))
        deadline = time.time() + 90
        while True:
            listed = flwr_json(env, "supernode", "ls", "lab")["nodes"]
            if len(listed) == 2 and all(n["status"] == "online" for n in listed):
                break
            assert time.time() < deadline, f"SuperNodes not online through the proxy: {listed}"
            time.sleep(0.5)  # each `flwr supernode ls` takes ~1 s itself
        yield SimpleNamespace(tmp=tmp, certs=certs, env=env, port=port, fleet_port=fleet_port, nodes=nodes,
                              node_ids=sorted(n["node-id"] for n in listed), procs=procs, link=link,
                              proxy=proxy, proxy_dir=tmp / "proxy", body_cap=cap, node_partitions=",".join(pins))
    finally:
        procs.stop_all()
    for proc in procs.started:
        assert proc.poll() is not None, f"pid {proc.pid} still running"


def run_method(d: SimpleNamespace, method: str, extra: str, rounds: int = 2) -> tuple[dict, list[dict]]:
    """``flwr run . lab`` of ``method`` through the proxy; its summary and round records.

    A SuperNode starts a ClientApp process per message (~10 s here): evaluate on the last
    round only, and one get_properties round trip in all, not one per node (``client-ids=lazy``).
    """
    runs = d.tmp / "runs" / f"{method}-{time.time_ns()}"
    cfg = (f"method='{method}' num-server-rounds={rounds} clients-per-round=2 eval-size=40 client-test-size=8 "
           f"eval-every={rounds} client-ids='lazy' node-partitions='{d.node_partitions}' output-dir='{runs}' {extra}")
    run = flwr(d.env, "run", ".", "lab", "--stream", "--run-config", cfg, timeout=420)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    (record,) = runs.iterdir()
    summary = json.loads((record / "summary.json").read_text())
    rounds_ = [json.loads(line) for line in (record / "rounds.jsonl").read_text().splitlines()]
    return summary, rounds_
