"""Round-by-round trajectories of several run records side by side, as one markdown table.

    python -m simulations.trajectory RUN_DIR [RUN_DIR ...] [--labels a b ...] [--metrics m ...]

For each round: global accuracy, the mean local training loss, and the method's own
metrics that every run reports (FedBPT: the server's sigma, sigma' and |z|), one column per
run; then, per quantity, the largest difference of each run from the first over the
rounds where both have a value. Used to compare the same configuration on two devices or
two weight copies (docs/performance.md, "GPUs"); any methods' records work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fedtext.records.reader import load_run

BASE_COLUMNS = ("global_accuracy", "train_loss")


def read_rounds(run: Path) -> list[dict[str, Any]]:
    """The run's rounds.jsonl, one flat dict per round (method metrics merged in), read by
    :func:`fedtext.records.load_run` (a malformed line is left out, as every reader does)."""
    rounds = []
    for r in load_run(run)["rounds"]:
        metrics = r.get("method_metrics") if isinstance(r.get("method_metrics"), dict) else {}
        rounds.append({"round": r["round"], **{k: r.get(k) for k in BASE_COLUMNS}, **metrics})
    return rounds


def shared_metrics(runs: list[list[dict[str, Any]]]) -> list[str]:
    """The numeric quantities every run reports in some round, base columns first."""
    names = list(BASE_COLUMNS)
    for r in runs[0]:
        for k, v in r.items():
            if k not in names and k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool):
                names.append(k)
    return [n for n in names if all(any(r.get(n) is not None for r in run) for run in runs)]


def _fmt(v: Any) -> str:
    return "" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def table(runs: list[list[dict[str, Any]]], labels: list[str], only: list[str] | None = None) -> str:
    """Markdown: one row per round, ``metric (label)`` columns (``only``: these metrics, in
    this order); then the largest |run - first run| per metric and run."""
    metrics = shared_metrics(runs)
    if only:
        unknown = [m for m in only if m not in metrics]
        if unknown:
            raise ValueError(f"not reported by every run: {', '.join(unknown)} (they all have: {', '.join(metrics)})")
        metrics = list(only)
    by_round = [{r["round"]: r for r in run} for run in runs]
    rounds = sorted(set().union(*by_round))
    head = ["round"] + [f"{m} ({lab})" for m in metrics for lab in labels]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rnd in rounds:
        cells = [str(rnd)] + [_fmt(br.get(rnd, {}).get(m)) for m in metrics for br in by_round]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| largest difference from " + labels[0] + " | " + " | ".join(labels[1:]) + " |",
              "|---|" + "---|" * (len(labels) - 1)]
    for m in metrics:
        diffs = []
        for br in by_round[1:]:
            pairs = [(br[r].get(m), by_round[0][r].get(m)) for r in rounds if r in br and r in by_round[0]]
            d = [abs(a - b) for a, b in pairs if a is not None and b is not None]
            diffs.append(f"{max(d):.4g}" if d else "")
        lines.append(f"| {m} | " + " | ".join(diffs) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run record folders (each with rounds.jsonl)")
    ap.add_argument("--labels", nargs="*", default=None, help="one column label per run (default: folder names)")
    ap.add_argument("--metrics", nargs="*", default=None, help="only these quantities, in this order")
    args = ap.parse_args(argv)
    labels = args.labels or [p.name for p in args.runs]
    if len(labels) != len(args.runs):
        print(f"trajectory: {len(labels)} labels for {len(args.runs)} runs", file=sys.stderr)
        return 2
    missing = [str(p) for p in args.runs if not (p / "rounds.jsonl").exists()]
    if missing:
        print(f"trajectory: no rounds.jsonl in {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        print(table([read_rounds(p) for p in args.runs], labels, args.metrics))
    except ValueError as exc:
        print(f"trajectory: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
