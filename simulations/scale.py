"""Federation size against server cost: the same run with 10, 100, 1,000, ... clients.

    python -m simulations.scale                       # 10 100 1000 clients, 10 per round
    python -m simulations.scale --clients 10 100 1000 10000 --out simulations/results/scale

Each size runs ``python -m simulations.simulate --num-supernodes N`` in a fresh process
with the same run-config (default: bbt-fed on ../shared/data/sst2, 10 clients per round,
2 rounds; ``--run-config`` adds or overrides keys) and reads its run record. Printed per
size, as a markdown table: seconds from launch to the end of round 0 (Ray start, node
registration, server model load and evaluation), round 1 (every client is asked once who
it is, the sampled clients load), round 2 (steady state), the Flower/Ray overhead of round
2 (round time minus the time some client or the server evaluation was computing), the
server process's resident memory after the last round, and the whole process's wall
time. Ratios are to the smallest federation. Records stay under ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from fedtext.records.reader import load_run

DEFAULT_CONFIG = "method=bbt-fed dataset=../shared/data/sst2 clients-per-round=10 num-server-rounds=2"


def run_size(n: int, run_config: str, out: Path) -> dict[str, float | int | None]:
    """One simulation with ``n`` clients; its timings from the run record."""
    folder = out / f"n{n}"
    cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", str(n), "--run-config",
           f"{run_config} output-dir={folder} run-name=n{n}"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode:
        raise SystemExit(f"{n} clients failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    runs = sorted(p.parent for p in folder.rglob("summary.json"))
    rounds = {r["round"]: r for r in load_run(runs[-1])["rounds"]}
    last = rounds[max(rounds)]
    return {
        "clients": n,
        "to_round0_s": rounds[0]["wall_time_s"] + _startup(runs[-1], t0),
        "round1_s": rounds[1]["round_time_s"],
        "round2_s": rounds[2]["round_time_s"] if 2 in rounds else None,
        "overhead2_s": rounds[2].get("overhead_s") if 2 in rounds else None,
        "server_rss_mb": last.get("server_rss_mb"),
        "wall_s": round(wall, 1),
    }


def _startup(run_dir: Path, launched: float) -> float:
    """Seconds from launch to the strategy's clock start (process, Ray, model load)."""
    started = json.loads((run_dir / "config.json").read_text()).get("started_epoch")
    return round(float(started) - launched, 1) if started else 0.0


def table(rows: list[dict]) -> str:
    base = rows[0]
    lines = ["| clients | to end of round 0 | round 1 | round 2 | overhead round 2 | server RSS | wall |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        def cell(key: str, unit: str) -> str:
            if r[key] is None:
                return "-"
            ratio = f" ({r[key] / base[key]:.2f}x)" if r is not base and base[key] else ""
            return f"{r[key]:,.1f} {unit}{ratio}"

        lines.append(f"| {r['clients']:,} | {cell('to_round0_s', 's')} | {cell('round1_s', 's')} | "
                     f"{cell('round2_s', 's')} | {cell('overhead2_s', 's')} | {cell('server_rss_mb', 'MB')} | "
                     f"{cell('wall_s', 's')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000], help="federation sizes")
    ap.add_argument("--run-config", default="", help="extra key=value pairs (override the defaults)")
    ap.add_argument("--out", default="runs/scale", help="where the run records go")
    args = ap.parse_args(argv)
    out = Path(args.out).resolve()
    rows = []
    for n in args.clients:
        rows.append(run_size(n, f"{DEFAULT_CONFIG} {args.run_config}".strip(), out))
        print(f"  {n} clients: {rows[-1]}", flush=True)
    print(f"\n{_dt.date.today()} | {platform.node()} | {os.cpu_count()} CPUs | {DEFAULT_CONFIG} {args.run_config}\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
