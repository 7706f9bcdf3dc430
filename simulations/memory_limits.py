"""Each method's client under an enforced memory limit, as on a small board:
``python -m simulations.memory_limits [--limits 2048 1024] [--harness demo t1] [--methods ...]``.

A board has 4 or 8 GB for everything (FeS measures a Jetson TX2: FedFSL's 10.4 GB does not
fit, FeS's 2.3 GB does). Here each method's client runs one round's fit and evaluate of
partition 0 (``simulations.bench.timed_client_round``: the server's strategy makes round 1's
download and is gone) in a fresh process placed in a new memory cgroup whose limit is set
(cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes`` with ``memory.memsw`` where swap is
accounted; this machine has no swap), from its first instruction. Recorded: whether it
completed, how it ended otherwise (the kernel's OOM killer, or fedtext's own one-line refusal:
:func:`fedtext.node.memory.check_fits`), the cgroup's peak (``memory.max_usage_in_bytes`` /
``memory.peak``: resident memory and page cache the kernel charged) and the process's own
peak resident memory. Needs root (it makes cgroups). Writes
``simulations/results/memory/limits.json``; docs/deployment.md's table is generated from it.

A client that completes under 1 GB completes under 2 GB (its allocations do not depend on the
limit): at 2 GB only those that did not complete at 1 GB are run again.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "simulations" / "results" / "memory"
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")


def child(method: str, harness_name: str, extra: str = "") -> None:
    """One client round of ``method`` on the harness (this process), with ``extra`` run-config
    pairs (``simulations.simulate``'s syntax); prints one JSON line."""
    from simulations.simulate import parse_pairs

    from fedtext.common.config import RunConfig
    from fedtext.node.memory import MemoryGuard, NodeMemoryError, node_limit_mb, options_for
    from fedtext.common.registry import METHODS
    from simulations.bench import timed_client_round
    from simulations.deployment_bench import for_method, harness

    pairs, nodes = harness(harness_name)
    cfg = RunConfig.from_run_config({**for_method(pairs, method), "method": method, **parse_pairs(extra)}, METHODS)
    guard = MemoryGuard(node_limit_mb(), f"{method}'s fit of partition 0", options_for(cfg))
    try:
        with guard:
            out = timed_client_round(cfg, rounds=1, warm_up=False, partition=0, partitions=nodes)
    except NodeMemoryError as exc:
        print(json.dumps({"refused": str(exc), "guard_peak_mb": round(guard.peak_mb, 1)}))
        sys.exit(3)
    print(json.dumps({k: v for k, v in out.items() if k in ("fit_s", "peak_rss_mb", "round_start_mb", "round_peak_mb")}))


class Cgroup:
    """A new memory cgroup with a limit (v2 where mounted, else v1), removed on exit."""

    def __init__(self, limit_mb: int) -> None:
        name = f"fedtext-mem-{os.getpid()}-{time.monotonic_ns()}"
        self.v2 = (CGROUP_V2 / "cgroup.controllers").exists()
        self.path = (CGROUP_V2 if self.v2 else CGROUP_V1) / name
        self.path.mkdir()
        limit = str(limit_mb * 2**20)
        if self.v2:
            (self.path / "memory.max").write_text(limit)
            with contextlib.suppress(OSError):
                (self.path / "memory.swap.max").write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(limit)
            with contextlib.suppress(OSError):  # swap accounted: the limit holds for memory + swap too
                (self.path / "memory.memsw.limit_in_bytes").write_text(limit)

    def peak_mb(self) -> float:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return round(int((self.path / name).read_text()) / 2**20, 1)
        return float("nan")

    def oom_killed(self) -> int:
        text = (self.path / ("memory.events" if self.v2 else "memory.oom_control")).read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def run_limited(method: str, harness_name: str, limit_mb: int, extra: str = "") -> dict[str, Any]:
    """``method``'s client round (with ``extra`` run-config pairs) in a process confined to
    ``limit_mb`` from its start."""
    group = Cgroup(limit_mb)
    try:
        procs = group.path / "cgroup.procs"
        # the shell joins the cgroup, then becomes Python: every byte of the client is charged
        cmd = ["sh", "-c", f'echo $$ > "{procs}" && exec "$0" -m simulations.memory_limits --child "$1" "$2" "$3"',
               sys.executable, method, harness_name, extra]
        t0 = time.time()
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800, check=False,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"})
        last = (done.stdout.strip().splitlines() or [""])[-1]
        row: dict[str, Any] = {"limit_mb": limit_mb, "cgroup_peak_mb": group.peak_mb(), "wall_s": round(time.time() - t0, 1)}
        if done.returncode == 0:
            row.update({"outcome": "completed", **json.loads(last)})
        elif done.returncode == 3 and last.startswith("{"):
            row.update({"outcome": "refused", "line": json.loads(last)["refused"],
                        "guard_peak_mb": json.loads(last)["guard_peak_mb"]})
        elif group.oom_killed() or done.returncode in (-9, 137):
            row.update({"outcome": "oom-killed"})
        else:
            row.update({"outcome": f"failed ({done.returncode})", "tail": (done.stdout + done.stderr)[-600:]})
        return row
    finally:
        group.remove()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # METHOD HARNESS [PAIRS]
    ap.add_argument("--option", nargs=4, action="append", default=[], metavar=("HARNESS", "METHOD", "LIMIT_MB", "PAIRS"),
                    help="also run METHOD on HARNESS under LIMIT_MB with run-config PAIRS (an option that lowers "
                         "its peak); repeatable; recorded under 'options'")
    ap.add_argument("--limits", nargs="+", type=int, default=[1024, 2048], help="limits in MB, smallest first")
    ap.add_argument("--harness", nargs="+", default=["demo", "t1"], choices=["demo", "t1"])
    ap.add_argument("--methods", nargs="+", default=None, help="default: every registered method")
    ap.add_argument("--out", default=str(RESULTS / "limits.json"))
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    from fedtext.common.registry import METHODS

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = json.loads(out.read_text()) if out.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    record.update({"machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                   "commit": commit, "limits_mb": sorted(args.limits)})
    if args.option:
        options = [o for o in record.get("options", []) if [o["harness"], o["method"], str(o["limit_mb"]), o["option"]]
                   not in args.option]
        for name, method, limit, pairs in args.option:
            row = {"harness": name, "method": method, "option": pairs, **run_limited(method, name, int(limit), pairs)}
            options.append(row)
            print(f"{name} {method} {pairs} {limit} MB: {row['outcome']} (cgroup peak {row['cgroup_peak_mb']} MB)",
                  flush=True)
            record["options"] = options
            out.write_text(json.dumps(record, indent=1) + "\n")
        return 0
    rows = record.setdefault("rows", {})
    for name in args.harness:
        for method in args.methods or list(METHODS):
            cells: dict[str, Any] = {}
            for limit in sorted(args.limits):
                smaller = [c for c in cells.values() if c["outcome"] == "completed"]
                if smaller:  # completed under a smaller limit: completes under this one
                    cells[str(limit)] = {**smaller[0], "limit_mb": limit, "implied_by_mb": smaller[0]["limit_mb"]}
                    continue
                cells[str(limit)] = run_limited(method, name, limit)
                print(f"{name} {method} {limit} MB: {cells[str(limit)]['outcome']} "
                      f"(cgroup peak {cells[str(limit)]['cgroup_peak_mb']} MB)", flush=True)
            rows.setdefault(name, {})[method] = cells
            out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "-"
    if cell["outcome"] == "completed":
        return f"yes, {cell['cgroup_peak_mb']:.0f} / {cell['peak_rss_mb']:.0f} MB"
    if cell["outcome"] == "refused":
        if "would start with" in cell.get("line", ""):
            return "refused at once (one line)"
        return f"stopped at {cell.get('guard_peak_mb', 0):.0f} MB (one line)"
    return cell["outcome"]


def render() -> str:
    """docs/deployment.md's table of the committed record (``tools/generated.py``)."""
    path = RESULTS / "limits.json"
    if not path.exists():
        return "(no record yet: python -m simulations.memory_limits)\n"
    rec = json.loads(path.read_text())
    harnesses = [h for h in ("demo", "t1") if h in rec["rows"]]
    limits = [str(x) for x in rec["limits_mb"] if x <= 2048]
    head = " | ".join(f"{h} {int(lim) // 1024} GB" for h in harnesses for lim in limits)
    lines = [f"{rec['machine']}, {rec['date']}, commit {rec['commit']}: completed? cgroup peak / process peak "
             f"(`python -m simulations.memory_limits`).", "", f"| method | {head} |",
             "|---|" + "---|" * (len(harnesses) * len(limits))]
    methods = list(rec["rows"][harnesses[0]])
    for method in methods:
        cells = [_cell(rec["rows"][h].get(method, {}).get(lim)) for h in harnesses for lim in limits]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    options = rec.get("options", [])
    if options:
        lines += ["", "Options for the clients over 1 GB, run the same way:", "",
                  "| harness | method | option | limit | completed? cgroup / process peak |", "|---|---|---|---|---|"]
        lines += [f"| {o['harness']} | {o['method']} | `{o['option']}` | {o['limit_mb']} MB | {_cell(o)} |"
                  for o in options]
    return "\n".join(lines) + "\n"
