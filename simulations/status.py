"""What became of runs: status and reason from their records, for after ``flwr run``.

    python -m simulations.status                # the newest run under ./runs
    python -m simulations.status runs --last 5  # the five newest
    python -m simulations.status runs --run 20261122-220455-bbt-fed-demo-s0

Flower 1.41's ``flwr run`` exits 0 even when the ServerApp failed; the run record says
what happened (:func:`fedtext.records.run_status`): ``finished``; ``failed`` with the
exception, the configuration error or ``terminated by SIGTERM``; ``stale`` when the
server stopped writing without a summary (SIGKILL, a SuperLink that died) for longer
than the run's ``stale-after-s``; ``running``; ``malformed`` when a record file is not
its record (a directory, not JSON, a number that is not finite, nested too deep, a field
of the wrong type, a file that resolves outside ``output_dir``: the reason names it, as
:func:`fedtext.records.load_run`'s readers found it). Exit status: 0 when
every run shown finished or is still running, 1 otherwise, 2 when there is no such run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedtext.records.reader import load_run, spent_text, summarize


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output_dir", nargs="?", default="runs", type=Path, help="the runs' output-dir (default: runs)")
    ap.add_argument("--run", help="one run id (a folder under output_dir)")
    ap.add_argument("--last", type=int, default=1, help="show the N newest runs (default 1)")
    args = ap.parse_args(argv)
    if args.run:
        dirs = [args.output_dir / args.run]
        if not (dirs[0] / "config.json").exists() and not (dirs[0] / "summary.json").exists():
            print(f"no run '{args.run}' under {args.output_dir}", file=sys.stderr)
            return 2
    else:
        dirs = sorted((p.parent for p in args.output_dir.glob("*/config.json")), key=lambda d: d.stat().st_mtime)
        dirs = dirs[-max(1, args.last):]
        if not dirs:
            print(f"no run records under {args.output_dir}", file=sys.stderr)
            return 2
    bad = 0
    for d in dirs:
        run = load_run(d, args.output_dir)  # a record file resolving outside output_dir is malformed, not read
        cfg = (run["config"] or {}).get("config") or {}
        totals = summarize(run["rounds"])  # a random-weight run's accuracy: not printed (below)
        acc = totals["final_accuracy"]
        line = (f"{d.name}  {run['status']}  method={cfg.get('method', '?')}  "
                f"rounds {totals['rounds_done']}/{cfg.get('num-server-rounds', '?')}  "
                f"acc {'- (random weights)' if run['random_weights'] else '-' if acc is None else f'{acc:.3f}'}")
        spent = spent_text(totals["dp"], totals["epsilon"], totals["dp_delta"])  # DP runs: the privacy spent
        line += f"  {spent}" if spent else ""
        if run["reason"]:
            line += f"  reason: {run['reason']}"
        print(line)
        bad += run["status"] not in ("finished", "running")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
