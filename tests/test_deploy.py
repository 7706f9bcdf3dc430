"""A real deployment on loopback, through the scripts README "Deployment" shows.

One SuperLink (persistent state database, TLS from ``deploy/make_certs.sh``, SuperNode
authentication) and two authenticated SuperNodes (``deploy/superlink.sh``,
``deploy/supernode.sh``); ``flwr run . <connection>`` of one gradient-free method
(bbt-fed) and one back-propagation method (fedprompt), 2 rounds each; their run records
are checked. Every process is started in its own session, and the test stops exactly
those process groups (the SuperLink or SuperNode and the helpers it spawned), by PID,
whether it passes or fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("openssl", "ssh-keygen"))
        or not all((BIN / t).exists() for t in ("flwr", "flower-superlink", "flower-supernode")),
        reason="needs openssl, ssh-keygen and Flower's CLIs",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
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


def test_tls_and_node_auth_deployment_runs_two_methods(tmp_path):
    certs, home, runs = tmp_path / "certs", tmp_path / "flwr-home", tmp_path / "runs"
    home.mkdir()
    env = {**os.environ, "FLWR_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    subprocess.run(["bash", "deploy/make_certs.sh", str(certs), "2"], cwd=REPO, env=env, check=True,
                   capture_output=True, timeout=120)
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "lab"\n\n[superlink.lab]\naddress = "127.0.0.1:{port}"\n'
        f'root-certificates = "{certs / "ca.crt"}"\n')
    procs = Processes(env, tmp_path)
    try:
        link, link_log = procs.start("superlink", ["bash", "deploy/superlink.sh", "--state", str(tmp_path / "state"),
                                                   "--certs", str(certs), "--port", str(port)])
        wait_for_port(port, link, link_log)
        for i in range(2):
            reg = subprocess.run([str(BIN / "flwr"), "supernode", "register", str(certs / f"node-{i}.pub"), "lab"],
                                 cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
            assert "registered successfully" in reg.stdout, reg.stdout + reg.stderr
        # An unregistered key is refused: node auth is on.
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", str(certs / "node-2")],
                       check=True, timeout=60)
        nodes = []
        for i in range(3):
            nodes.append(procs.start(f"supernode-{i}", [
                "bash", "deploy/supernode.sh", "--partition", str(i), "--num-partitions", "3" if i == 2 else "2",
                "--superlink", f"127.0.0.1:{port}", "--certs", str(certs), "--port", str(free_port())])[0])
        for method, extra in (("bbt-fed", "bbt-fed.popsize=4 bbt-fed.local-steps=2"),
                              ("fedprompt", "fedprompt.local-steps=2")):
            # a SuperNode starts a ClientApp process per message (~10 s here): evaluate on the
            # last round only, and no get_properties round trip (client-ids=lazy)
            cfg = (f"method='{method}' num-server-rounds=2 clients-per-round=2 eval-size=40 client-test-size=8 "
                   f"eval-every=2 client-ids='lazy' output-dir='{runs / method}' {extra}")
            run = subprocess.run([str(BIN / "flwr"), "run", ".", "lab", "--stream", "--run-config", cfg],
                                 cwd=REPO, env=env, capture_output=True, text=True, timeout=420)
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
        refused = (tmp_path / "supernode-2.log").read_text()
        assert "Connection successful" not in refused, refused[-2000:]
        # it does not keep retrying: Flower reports exit code 305 and the SuperNode stops (README says so)
        assert "Exit Code: 305" in refused, refused[-2000:]
        nodes[2].wait(timeout=120)  # ended (raises TimeoutExpired if it were still trying)
    finally:
        procs.stop_all()
    for proc in procs.started:
        assert proc.poll() is not None, f"pid {proc.pid} still running"
