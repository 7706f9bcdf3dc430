"""Accuracy parity of two precisions: the same experiment run in fp32 and in bf16, side
by side per method, from the run records only.

    python -m simulations.parity simulations/results/fedbpt_sst2 simulations/results/fedbpt_sst2_bf16

Per method (one finished run per seed, :func:`simulations.tables.one_run_per_seed`): final
global accuracy mean ± std over seeds in each (sample std, as the compare tables), the mean of the per-seed differences (bf16 -
fp32, same seed: the same partition, shots and starting point) and their largest size,
whether it lies within the fp32 seed spread (|mean difference| <= fp32 std), bytes per
client-round each way in both (they must be equal: what is sent stays float32), model
queries, wall seconds and the wall-time ratio. Writes ``parity.md`` into the second folder
and prints it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import pandas as pd

from fedtext.records.probes import machine_line
from simulations.tables import load_runs, one_run_per_seed


def parity(reference: Path, candidate: Path) -> str:
    """The markdown parity table of ``candidate``'s runs against ``reference``'s."""
    a = one_run_per_seed(load_runs(reference / "runs"))
    b = one_run_per_seed(load_runs(candidate / "runs"))
    lines = [
        f"<!-- python -m simulations.parity {reference} {candidate} | {dt.date.today()} | {machine_line()} -->",
        "| method | seeds | fp32 final acc | bf16 final acc | bf16 - fp32 (same seed) | largest | within fp32 spread "
        "| KB up / client-round (fp32, bf16) | KB down / client-round (fp32, bf16) | model queries (fp32, bf16) "
        "| wall s (fp32, bf16) | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for method in dict.fromkeys(b["variant"]):
        x = a[a["variant"] == method].set_index("seed")
        y = b[b["variant"] == method].set_index("seed")
        seeds = sorted(set(x.index) & set(y.index))
        if not seeds:
            continue
        x, y = x.loc[seeds], y.loc[seeds]
        diff = y["final_accuracy"] - x["final_accuracy"]
        within = abs(diff.mean()) <= x["final_accuracy"].std()

        def pm(s: pd.Series) -> str:
            return f"{s.mean():.3f} ± {s.std():.3f}"

        def pair(col: str, fmt: str) -> str:
            return f"{x[col].mean():{fmt}}, {y[col].mean():{fmt}}"

        lines.append(
            f"| {method} | {len(seeds)} | {pm(x['final_accuracy'])} | {pm(y['final_accuracy'])} | {diff.mean():+.3f} "
            f"| {diff.abs().max():.3f} | {'yes' if within else 'no'} | {pair('kb_up_per_client_round', '.2f')} "
            f"| {pair('kb_down_per_client_round', '.2f')} | {pair('model_queries', ',.0f')} "
            f"| {pair('wall_time_s', ',.0f')} | {x['wall_time_s'].mean() / y['wall_time_s'].mean():.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reference", type=Path, help="results folder of the fp32 runs (its runs/)")
    ap.add_argument("candidate", type=Path, help="results folder of the bf16 runs; parity.md goes here")
    args = ap.parse_args(argv)
    table = parity(args.reference, args.candidate)
    (args.candidate / "parity.md").write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
