"""``python -m fedtext.node.service -- <SuperNode command>``: the supervisor's processes.

A stand-in SuperNode (a Python one-liner that writes its arguments and waits for a file) takes
the place of ``flower-supernode``, so that the test watches the supervisor alone: the service
listens in a private folder before the SuperNode starts, the SuperNode's ``--node-config``
names it, a killed service is started again, and when the SuperNode exits the supervisor stops
the service, removes the folder and exits with the SuperNode's status. A real SuperNode's
service killed mid-round: tests/system/test_deployment_launcher.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..conftest import REPO, processes_with_token

FAKE_NODE = ("import json, sys, time, pathlib; d = pathlib.Path(sys.argv[1]); "
             "(d / 'args.json').write_text(json.dumps(sys.argv[2:])); "
             "[time.sleep(0.1) for _ in iter(lambda: (d / 'stop').exists(), True)]; sys.exit(7)")


def _wait(cond, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def test_the_supervisor_starts_restarts_and_stops_the_service_with_the_supernode(tmp_path, own_processes):
    env, token = own_processes
    folder, talk = tmp_path / "svc", tmp_path / "talk"
    talk.mkdir()
    sup = subprocess.Popen([sys.executable, "-m", "fedtext.node.service", "--threads", "1", "--folder", str(folder),
                            "--", sys.executable, "-c", FAKE_NODE, str(talk), "--node-config", "partition-id=0"],
                           cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: (talk / "args.json").exists())
        sock = folder / "node.sock"
        assert sock.exists() and folder.stat().st_mode & 0o777 == 0o700  # listening before the node started
        import json

        assert json.loads((talk / "args.json").read_text()) == ["--node-config", f"partition-id=0 node-service='{sock}'"]
        first = int((folder / "service.pid").read_text())
        os.kill(first, signal.SIGKILL)  # the service dies (the OOM killer, a crash)
        _wait(lambda: int((folder / "service.pid").read_text()) != first and sock.exists())
        second = int((folder / "service.pid").read_text())
        assert Path(f"/proc/{second}").exists()
        (talk / "stop").write_text("")  # the SuperNode exits with status 7
        assert sup.wait(timeout=60) == 7
        assert not folder.exists() and not Path(f"/proc/{second}").exists()
        assert "restart 1" in sup.stderr.read()
        assert processes_with_token(token) == []
    finally:
        if sup.poll() is None:
            sup.kill()


def test_sigterm_to_the_supervisor_stops_the_supernode_and_the_service(tmp_path, own_processes):
    env, token = own_processes
    folder, talk = tmp_path / "svc", tmp_path / "talk"
    talk.mkdir()
    sup = subprocess.Popen([sys.executable, "-m", "fedtext.node.service", "--folder", str(folder),
                            "--", sys.executable, "-c", FAKE_NODE, str(talk)], cwd=REPO, env=env)
    try:
        _wait(lambda: (talk / "args.json").exists())
        sup.send_signal(signal.SIGTERM)  # systemd's stop, a closed terminal
        assert sup.wait(timeout=60) == 128 + signal.SIGTERM
        assert not folder.exists() and processes_with_token(token) == []
    finally:
        if sup.poll() is None:
            sup.kill()
