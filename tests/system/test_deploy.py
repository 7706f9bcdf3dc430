"""A real deployment on this machine, through the scripts docs/deployment.md shows.

One SuperLink (persistent state database, TLS from ``deploy/make_certs.sh``, SuperNode
authentication) on 127.0.0.1 only (``deploy/superlink.sh``), its Fleet API published by
``deploy/fleet_gateway.py`` on a second address, 127.0.0.2, which stands for the public
interface SuperNodes reach; two authenticated SuperNodes and one unregistered one connect
there (``deploy/supernode.sh``). The operator's ``flwr`` talks to 127.0.0.1.

- a stranger holding only ``ca.crt`` tries, from the public address, to register a node
  key, unregister a legitimate SuperNode, list nodes and runs and ``flwr run`` an app whose
  ServerApp writes a file: each is refused, nothing changes, and the same app run by the
  operator does write its file;
- ``flwr run . <connection>`` of one gradient-free method (bbt-fed) and one
  back-propagation method (fedprompt), 2 rounds each, through the gateway; their run
  records are checked.

Every process is started in its own session, and the module stops exactly those process
groups (the SuperLink, gateway or SuperNode and the helpers it spawned), by PID, whether
the tests pass or fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from simulations.deployment import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("openssl", "ssh-keygen"))
        or not all((BIN / t).exists() for t in ("flwr", "flower-superlink", "flower-supernode")),
        reason="needs openssl, ssh-keygen and Flower's CLIs",
    ),
]


PUBLIC = "127.0.0.2"  # the address SuperNodes (and strangers) reach; the SuperLink is on 127.0.0.1


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


class Processes:
    """Processes this test started, each leading its own process group."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.started = env, logs, []

    def start(self, name: str, cmd: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.logs / f"{name}.log"
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.started.append(proc)
        return proc, log

    def stop_all(self) -> None:
        """SIGTERM each group this test started, SIGKILL what is left after 10 s."""
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.time() + 10
        for proc in self.started:
            try:
                proc.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


STRANGER_APP = {
    "pyproject.toml": """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "stranger"
version = "1.0.0"
description = "a ServerApp that writes a file on the SuperLink host"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "stranger"

[tool.flwr.app.components]
serverapp = "stranger_app:app"
clientapp = "stranger_app:client"

[tool.flwr.app.config]
marker = "marker"
""",
    "stranger_app.py": """from pathlib import Path

from flwr.client import ClientApp
from flwr.common import Context
from flwr.server import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    Path(str(context.run_config["marker"])).write_text("written by a ServerApp on the SuperLink host\\n")


client = ClientApp()
""",
}


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


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """docs/deployment.md's real-use recipe as shipped: certificates, SuperLink on loopback, Fleet gateway
    on PUBLIC, 2 registered SuperNodes (online) and 1 unregistered, all through the gateway."""
    tmp = tmp_path_factory.mktemp("deploy")
    try:
        free_port(PUBLIC)
    except OSError:
        pytest.skip(f"cannot bind {PUBLIC} (the stand-in for a public address)")
    certs, home = tmp / "certs", tmp / "flwr-home"
    env = {**os.environ, "FLWR_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    subprocess.run(["bash", "deploy/make_certs.sh", str(certs), "2", PUBLIC], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=120)
    port, fleet_port = free_port(), free_port(PUBLIC)
    flwr_home(home, "lab", f"127.0.0.1:{port}", certs / "ca.crt")  # the operator, on the SuperLink host
    procs = Processes(env, tmp)
    try:
        link, link_log = procs.start("superlink", ["bash", "deploy/superlink.sh", "--state", str(tmp / "state"),
                                                   "--certs", str(certs), "--port", str(port)])
        gateway, gateway_log = procs.start("fleet-gateway", [
            sys.executable, "deploy/fleet_gateway.py", "--listen", f"{PUBLIC}:{fleet_port}",
            "--superlink", f"127.0.0.1:{port}", "--certs", str(certs)])
        wait_for_port(port, link, link_log)
        wait_for_port(fleet_port, gateway, gateway_log, host=PUBLIC)
        for i in range(2):
            reg = flwr(env, "supernode", "register", str(certs / f"node-{i}.pub"), "lab", timeout=60)
            assert "registered successfully" in reg.stdout, reg.stdout + reg.stderr
        # An unregistered key is refused: node auth is on.
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", str(certs / "node-2")],
                       check=True, timeout=60)
        nodes = []
        for i in range(3):
            nodes.append(procs.start(f"supernode-{i}", [
                "bash", "deploy/supernode.sh", "--partition", str(i), "--num-partitions", "3" if i == 2 else "2",
                "--superlink", f"{PUBLIC}:{fleet_port}", "--certs", str(certs), "--port", str(free_port())])[0])
        deadline = time.time() + 90
        while True:
            listed = flwr_json(env, "supernode", "ls", "lab")["nodes"]
            if len(listed) == 2 and all(n["status"] == "online" for n in listed):
                break
            assert time.time() < deadline, f"SuperNodes not online through the gateway: {listed}"
            time.sleep(2)
        yield SimpleNamespace(tmp=tmp, certs=certs, env=env, port=port, fleet_port=fleet_port, nodes=nodes,
                              node_ids=sorted(n["node-id"] for n in listed), procs=procs)
    finally:
        procs.stop_all()
    for proc in procs.started:
        assert proc.poll() is not None, f"pid {proc.pid} still running"


def raw_status(host: str, port: int, ca: Path, method: str, target: str) -> int:
    """Status of one HTTP/1.1 request sent as written (no client-side path normalisation)."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    "Content-Type: application/protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        reply = b""
        while b"\r\n" not in reply:
            chunk = tls.recv(4096)
            if not chunk:
                break
            reply += chunk
    return int(reply.split(b" ", 2)[1])


REFUSED = ("403 Forbidden", "Connection to the SuperLink is unavailable")


def test_a_stranger_holding_only_ca_crt_cannot_register_unregister_list_or_run(deployment):
    d = deployment
    app = d.tmp / "stranger-app"
    app.mkdir()
    for name, text in STRANGER_APP.items():
        (app / name).write_text(text)
    stranger_dir = d.tmp / "stranger"
    stranger_dir.mkdir()
    shutil.copy(d.certs / "ca.crt", stranger_dir / "ca.crt")  # all the stranger has, besides their own key
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", str(stranger_dir / "own-key")],
                   check=True, timeout=60)
    runs_before = flwr_json(d.env, "ls", "lab")["runs"]
    victim = d.node_ids[0]
    stranger_markers = []
    # from the public address: the gateway SuperNodes use, and the SuperLink's own port there
    for port in (d.fleet_port, d.port):
        env = {**d.env, "FLWR_HOME": str(flwr_home(stranger_dir / f"home-{port}", "x", f"{PUBLIC}:{port}",
                                                    stranger_dir / "ca.crt"))}
        marker = d.tmp / f"stranger-was-here-{port}"
        attempts = {
            "register": flwr(env, "supernode", "register", str(stranger_dir / "own-key.pub"), "x"),
            "unregister": flwr(env, "supernode", "unregister", victim, "x"),
            "list nodes": flwr(env, "supernode", "ls", "x", "--format", "json"),
            "list runs": flwr(env, "ls", "x", "--format", "json"),
            "run": flwr(env, "run", str(app), "x", "--run-config", f"marker='{marker}'", timeout=180),
        }
        for action, result in attempts.items():
            out = result.stdout + result.stderr
            assert any(r in out for r in REFUSED), f"{action} via {PUBLIC}:{port} was not refused:\n{out[-2000:]}"
            assert "registered successfully" not in out and "unregistered successfully" not in out, out
            assert "Successfully started run" not in out and '"success": true' not in out, out
            if action.startswith("list"):
                assert victim not in result.stdout, f"{action} via {PUBLIC}:{port} listed:\n{out[-2000:]}"
        stranger_markers.append(marker)
    # Nothing changed: the legitimate SuperNodes are registered and online, no stranger's key
    # joined, the run list is as before.
    listed = flwr_json(d.env, "supernode", "ls", "lab")["nodes"]
    assert sorted(n["node-id"] for n in listed) == d.node_ids, listed
    assert all(n["status"] == "online" for n in listed), listed
    assert flwr_json(d.env, "ls", "lab")["runs"] == runs_before
    # Nothing but the Fleet routes passes the gateway (no Runtime API, no docs, no path tricks).
    probes = {("POST", "/v1/runtime/create-task"): 403, ("POST", "/v1/control/list-runs"): 403,
              ("GET", "/docs"): 403, ("GET", "/openapi.json"): 403, ("GET", "/health"): 403,
              ("POST", "/v1/fleet/../control/list-runs"): 403, ("POST", "/v1/fleet/%2e%2e/control/list-runs"): 403,
              ("POST", "/v1/fleet//get-run"): 403, ("POST", "/v1/fleet/get-run?x=1"): 403,
              ("GET", "/v1/fleet/get-run"): 403, ("POST", "/V1/FLEET/get-run"): 403,
              # a Fleet route is forwarded, and the SuperLink's node authentication refuses an unsigned call
              ("POST", "/v1/fleet/get-run"): 401}
    for (method, target), status in probes.items():
        assert raw_status(PUBLIC, d.fleet_port, stranger_dir / "ca.crt", method, target) == status, (method, target)
    # The operator's path (loopback here; an SSH tunnel from elsewhere) works, and the same app
    # run there does write its file: the refusals above are what kept it out.
    marker = d.tmp / "operator-ran-it"
    run = flwr(d.env, "run", str(app), "lab", "--stream", "--run-config", f"marker='{marker}'", timeout=180)
    assert "Successfully started run" in run.stdout, run.stdout + run.stderr
    deadline = time.time() + 60
    while not marker.exists():
        assert time.time() < deadline, "the operator's run did not write its file"
        time.sleep(1)
    assert len(flwr_json(d.env, "ls", "lab")["runs"]) == len(runs_before) + 1
    # by now a stranger's run, had one started, would have written its file too
    assert not any(m.exists() for m in stranger_markers), stranger_markers


def test_tls_and_node_auth_deployment_runs_two_methods(deployment):
    d = deployment
    runs = d.tmp / "runs"
    for method, extra in (("bbt-fed", "bbt-fed.popsize=4 bbt-fed.local-steps=2"),
                          ("fedprompt", "fedprompt.local-steps=2")):
        # a SuperNode starts a ClientApp process per message (~10 s here): evaluate on the
        # last round only, and one get_properties round trip in all, not one per node (client-ids=lazy)
        cfg = (f"method='{method}' num-server-rounds=2 clients-per-round=2 eval-size=40 client-test-size=8 "
               f"eval-every=2 client-ids='lazy' output-dir='{runs / method}' {extra}")
        run = flwr(d.env, "run", ".", "lab", "--stream", "--run-config", cfg, timeout=420)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-3000:]
        (record,) = (runs / method).iterdir()
        summary = json.loads((record / "summary.json").read_text())
        assert summary["status"] == "finished", summary
        rounds = [json.loads(line) for line in (record / "rounds.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rounds] == [0, 1, 2]
        for r in rounds[1:]:
            # the two registered SuperNodes trained; the unregistered one never joined
            assert r["num_clients"] == 2 and r["dropped"] == [] and r["bytes_up"] > 0, r
        assert sorted(rounds[2]["client_accuracy"]) == ["0", "1"] and rounds[2]["global_accuracy"] is not None
    refused = (d.tmp / "supernode-2.log").read_text()
    assert "Connection successful" not in refused, refused[-2000:]
    # it does not keep retrying: Flower reports exit code 305 and the SuperNode stops (docs/deployment.md says so)
    assert "Exit Code: 305" in refused, refused[-2000:]
    d.nodes[2].wait(timeout=120)  # ended (raises TimeoutExpired if it were still trying)
