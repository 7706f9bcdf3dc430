"""Where a deployment round's CPU goes: every process's CPU time sampled while a command runs,
summed by role (SuperLink, SuperNodes, SuperExecs, node services, ClientApps, ServerApp, Ray's
actor, ...) over each round of the runs it wrote.

    python tools/cpu_by_role.py --runs /tmp/cpu/runs -- \\
        python -m simulations.compare simulations/experiments/deployment.toml --profile t1 \\
        --methods fedprompt-service --out /tmp/cpu

Why. On one machine a deployment's SuperLink, SuperNodes, SuperExecs and node services share the
cores with the clients' fits, which Ray's one actor has to itself; a round's record says how long
its parts took, not which process took the CPU. This tool samples ``/proc/<pid>/stat`` (user +
system time) of every process every ``--every`` seconds while the command runs and, for every run
folder under ``--runs`` that the command started (its ``config.json``'s ``started_epoch``), writes
``<runs>/../cpu_by_role.json`` and prints, per round, the CPU seconds of each role between the
round's start and end (``rounds.jsonl``'s ``wall_time_s``, seconds after ``started_epoch``).
Counts what it sees: a process that starts and ends between two samples is missed (a forked
ClientApp lives a round, so it is not), and the sampler's own share is its role's line.
docs/performance.md ("Woken SuperExecs") reads T1 with it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from fedtext.records.probes import proc_stat_fields

# a process's role: the first of these whose text its command line holds (order matters: the node service's
# supervisor's command line holds flower-supernode too). A forked warm ClientApp keeps its fork server's command
# line (multiprocessing's forkserver), so the two share a role
ROLES = (("superlink", "flower-superlink"), ("superlink", "fedtext.server.superlink"), ("node service", "--serve "),
         ("supernode", "fedtext.node.supernode"),
         ("supervisor", "fedtext.node.service"), ("supernode", "flower-supernode"),
         ("clientapp", "warm_exec worker"), ("clientapp", "flwr-clientapp"),
         ("fork server, forked clientapps", "multiprocessing.forkserver"),
         ("superexec", "superexec"), ("serverapp", "flwr-serverapp"), ("ray actor", "ray::"),
         ("ray", "ray/"), ("simulation", "simulations.simulate"), ("flwr run", "flwr run"),
         ("sampler", "cpu_by_role"))
TICK = os.sysconf("SC_CLK_TCK")

Snapshot = tuple[float, dict[int, tuple[float, str]]]  # when, pid -> (CPU seconds so far, command line)


def role(command: str) -> str:
    """The role of a process by its command line (:data:`ROLES`), else ``"other"``."""
    return next((name for name, text in ROLES if text in command), "other")


def snapshot() -> Snapshot:
    """Every process's CPU seconds (user + system) and command line, now."""
    procs = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = proc_stat_fields(pid)
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):  # ended since listed
            continue
        procs[int(pid)] = ((int(fields[11]) + int(fields[12])) / TICK, command)
    return time.time(), procs


def nearest(snaps: list[Snapshot], t: float) -> int:
    """The index of the snapshot taken nearest ``t``."""
    return min(range(len(snaps)), key=lambda i: abs(snaps[i][0] - t))


def cpu_between(snaps: list[Snapshot], start: float, end: float) -> dict[str, float]:
    """CPU seconds by role between the snapshots nearest ``start`` and ``end``: each process's
    growth since the last snapshot at or before the start one that holds it (one snapshot can miss a
    process whose /proc files could not be read that instant); a process seen in none of them
    started in the window and counts from 0."""
    i, j = nearest(snaps, start), nearest(snaps, end)
    used: Counter[str] = Counter()
    for pid, (cpu, command) in snaps[j][1].items():
        before = next((snaps[k][1][pid][0] for k in range(i, -1, -1)
                       if pid in snaps[k][1] and snaps[k][1][pid][1] == command), 0.0)
        grew = cpu - before
        if grew > 0:
            used[role(command)] += grew
    return {name: round(seconds, 2) for name, seconds in used.most_common()}


def rounds_cpu(snaps: list[Snapshot], run: Path) -> list[dict[str, Any]]:
    """Per round of the run folder ``run``: its window and the CPU by role in it (:func:`cpu_between`)."""
    started = json.loads((run / "config.json").read_text())["started_epoch"]
    out, last = [], 0.0
    for line in (run / "rounds.jsonl").read_text().splitlines():
        r = json.loads(line)
        window = (started + last, started + r["wall_time_s"])
        last = r["wall_time_s"]
        cpu = cpu_between(snaps, *window)
        out.append({"round": r["round"], "seconds": round(window[1] - window[0], 2),
                    "cores": round(sum(cpu.values()) / max(window[1] - window[0], 1e-9), 2), "cpu_s": cpu})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/cpu_by_role.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", required=True, help="the runs folder the command writes its run folders to")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between samples (default 0.25)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command after --")
    runs = Path(args.runs)
    before = set(runs.glob("*/config.json")) if runs.is_dir() else set()
    snaps: list[Snapshot] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            snaps.append(snapshot())
            stop.wait(args.every)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    status = subprocess.call(command)
    stop.set()
    sampler.join()
    snaps.append(snapshot())
    report = {}
    for config in sorted(set(runs.glob("*/config.json")) - before):
        report[config.parent.name] = rounds_cpu(snaps, config.parent)
        print(config.parent.name)
        for r in report[config.parent.name]:
            parts = ", ".join(f"{name} {s:.2f}" for name, s in r["cpu_s"].items())
            print(f"  round {r['round']}: {r['seconds']:.1f} s, {r['cores']:.2f} cores: {parts}")
    here = {"command": command, "every_s": args.every, "measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "cpus": os.cpu_count(), "runs": report}
    (runs.parent / "cpu_by_role.json").write_text(json.dumps(here, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
