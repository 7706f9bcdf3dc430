"""What idle SuperNodes' polls cost a SuperLink: N SuperNodes with no run to serve, polling a loopback
SuperLink, and the CPU the SuperLink and the SuperNodes (with their SuperExecs) take over a window.

    python tools/poll_cost.py --nodes 10 --poll-s 0.1 --window-s 20             # Flower's flower-superlink
    python tools/poll_cost.py --nodes 10 --poll-s 0.1 --window-s 20 --held       # fedtext.server.superlink
    python tools/poll_cost.py --nodes 10 --poll-s 0.1 --window-s 20 --unheld     # the same, --hold-s 0

``--unheld`` answers every empty pull at once, as Flower's SuperLink does, so the two count the same
requests: what differs is fedtext's middleware scoped to its API (fedtext.server.superlink.PathScoped).

Each SuperNode is ``python -m fedtext.node.supernode --idle-poll-s S --active-poll-s S`` (no node service,
no warm ClientApps: its SuperExec polls it every 0.1 s, fedtext.node.supernode.TASK_POLL_S, which is in
the SuperNodes' figure and not in the SuperLink's). CPU is user + system time from ``/proc/<pid>/stat``,
read after a 15 s settle and again after the window; every process it started is stopped by PID.
docs/performance.md ("Held pulls") quotes it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedtext.records.probes import proc_stat_fields  # noqa: E402
from simulations.deployment import cli, free_port, listening  # noqa: E402


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and of its children (recursively), 0 once gone."""
    try:
        fields = proc_stat_fields(pid)
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    return own + sum(cpu_s(int(k)) for k in kids)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10)
    ap.add_argument("--poll-s", type=float, default=0.1, help="the SuperNodes' idle and active poll")
    ap.add_argument("--window-s", type=float, default=20.0)
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--held", action="store_true", help="fedtext's SuperLink (empty pulls held), not Flower's")
    how.add_argument("--unheld", action="store_true",
                     help="fedtext's SuperLink with --hold-s 0: every empty pull answered at once, as Flower's")
    args = ap.parse_args(argv)
    home = tempfile.mkdtemp(prefix="fedtext-poll-cost-")
    env = {**os.environ, "FLWR_HOME": home}
    port = free_port()
    log = open(Path(home) / "processes.log", "w")
    fedtexts = [sys.executable, "-m", "fedtext.server.superlink"]
    link_cmd = fedtexts if args.held else [*fedtexts, "--hold-s", "0"] if args.unheld else [cli("flower-superlink")]
    procs = [subprocess.Popen([*link_cmd, "--insecure", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=log, stderr=log, cwd=REPO)]
    try:
        deadline = time.time() + 60
        while not listening(port):
            if procs[0].poll() is not None or time.time() > deadline:
                print(f"the SuperLink did not listen: see {log.name}", file=sys.stderr)
                return 1
            time.sleep(0.2)
        for _ in range(args.nodes):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "fedtext.node.supernode", "--idle-poll-s", str(args.poll_s), "--active-poll-s",
                 str(args.poll_s), "--insecure", "--superlink", f"127.0.0.1:{port}", "--port", str(free_port())],
                env=env, stdout=log, stderr=log, cwd=REPO))
        time.sleep(15)  # registered and polling
        link0, nodes0, t0 = cpu_s(procs[0].pid), sum(cpu_s(p.pid) for p in procs[1:]), time.monotonic()
        time.sleep(args.window_s)
        seconds = time.monotonic() - t0
        link, nodes = cpu_s(procs[0].pid) - link0, sum(cpu_s(p.pid) for p in procs[1:]) - nodes0
        which = ("fedtext.server.superlink (held)" if args.held else
                 "fedtext.server.superlink --hold-s 0" if args.unheld else "flower-superlink")
        print(f"{which}, {args.nodes} idle SuperNodes polling every {args.poll_s} s, {seconds:.1f} s: SuperLink "
              f"{link:.2f} CPU-s ({link / seconds:.3f} cores), SuperNodes with their SuperExecs {nodes:.2f} CPU-s "
              f"({nodes / seconds:.3f} cores)")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
