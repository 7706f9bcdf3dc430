"""Issue 35 item 5: a killed SuperLink is recorded as what it was, not as Ctrl-C: two real
processes (a stand-in SuperLink that starts a stand-in ServerApp, then is SIGKILLed). The
wording of the reason is tested in tests/unit/test_run_status.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# A stand-in for Flower's ServerApp process: started by a "SuperLink" process, it installs
# fedtext's handlers, opens a run record and watches its parent with Flower's own monitor
# (which raises SIGINT in it once the parent is gone), then waits.
SERVERAPP = textwrap.dedent("""
    import sys, time
    from flwr.supercore.app_utils import start_parent_process_monitor
    from fedtext.records import RunRecorder, install_signal_handlers
    import os
    install_signal_handlers()
    RunRecorder(sys.argv[1], {"method": "fedprompt", "seed": 0}, run_id="r")
    start_parent_process_monitor(os.getppid())
    open(sys.argv[2], "w").write(str(os.getpid()))
    for _ in range(600):  # Python runs a handler between bytecodes: the monitor thread's raise waits for one
        time.sleep(0.1)
""")

SUPERLINK = textwrap.dedent("""
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]])
    time.sleep(60)
""")


def test_a_killed_superlink_is_recorded_as_such(tmp_path: Path):
    pid_file = tmp_path / "serverapp.pid"
    link = subprocess.Popen([sys.executable, "-c", SUPERLINK, SERVERAPP, str(tmp_path / "runs"), str(pid_file)],
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    app_pid = None
    try:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text():
                app_pid = int(pid_file.read_text())
                break
            time.sleep(0.1)
        assert app_pid, "the ServerApp stand-in did not start"
        link.kill()  # SIGKILL: the SuperLink dies without a word
        link.wait(timeout=10)
        summary = tmp_path / "runs" / "r" / "summary.json"
        for _ in range(100):
            if summary.exists():
                break
            time.sleep(0.1)
        record = json.loads(summary.read_text())
        assert record["status"] == "failed"
        assert record["error"] == (f"the SuperLink went away: the process that started the ServerApp "
                                   f"(pid {link.pid}) had stopped (SIGINT)")
    finally:
        if link.poll() is None:
            link.kill()
        if app_pid:
            try:
                os.kill(app_pid, signal.SIGKILL)  # only the process this test started
            except ProcessLookupError:
                pass
