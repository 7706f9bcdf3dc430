"""Accuracy parity of two precisions: the same experiment run in fp32 and in bf16, side by side per
method, from the run records only; a study (:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/fedbpt_sst2_bf16.toml               # bf16 runs, table
    python -m simulations.compare simulations/experiments/fedbpt_sst2_bf16.toml --table-only  # from the records

Its runs are ``simulations/experiments/fedbpt_sst2_bf16.toml`` (``fedbpt_sst2.toml`` with
``precision = "bf16"``), run by the compare runner like any comparison; the fp32 side is
``fedbpt_sst2.toml``'s output folder (:func:`reference_of`: ``simulations/results/fedbpt_sst2``, or
``fedbpt_sst2-<profile>`` beside a profile's ``fedbpt_sst2_bf16-<profile>``), run by its own
``python -m simulations.compare simulations/experiments/fedbpt_sst2.toml``.

The table (``table.md`` beside the bf16 runs; docs/performance.md "Accuracy parity" copies its rows),
per method (one finished run per seed, :func:`simulations.tables.one_run_per_seed`): final global
accuracy mean ± std over seeds in each (sample std, as the compare tables), the mean of the per-seed
differences (bf16 - fp32, same seed: the same partition, shots and starting point) and their largest
size, whether it lies within the fp32 seed spread (|mean difference| <= fp32 std), bytes per
client-round each way in both (they must be equal: what is sent stays float32), model queries, wall
seconds and the wall-time ratio. The bf16 runs' own comparison table is the dashboard's (it reads the
records under ``runs/``), not a file here: the runner writes a study's table instead of it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from fedtext.records.probes import machine_line
from simulations.compare import default_out
from simulations.tables import load_runs, one_run_per_seed

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "simulations" / "experiments" / "fedbpt_sst2_bf16.toml"  # the bf16 runs
REFERENCE = REPO / "simulations" / "experiments" / "fedbpt_sst2.toml"  # the fp32 runs: its output folder
OUT = default_out(EXPERIMENT)  # simulations/results/fedbpt_sst2_bf16


def profile_of(out: Path) -> str | None:
    """The profile whose runs ``out`` holds, by the name :func:`simulations.compare.default_out` gives a
    profile's folder (``fedbpt_sst2_bf16-paper``: ``"paper"``); None for any other folder."""
    prefix = f"{EXPERIMENT.stem}-"
    return out.name.removeprefix(prefix) if out.name.startswith(prefix) else None


def reference_of(out: Path) -> Path:
    """The fp32 runs' folder for the bf16 runs under ``out``: :data:`REFERENCE`'s output folder of the
    same profile (:func:`profile_of`: ``fedbpt_sst2-paper`` beside ``fedbpt_sst2_bf16-paper``), else
    ``simulations/results/fedbpt_sst2``."""
    return default_out(REFERENCE, profile_of(out))


def _shown(path: Path) -> str:
    """``path`` as the header names it: relative to the checkout when inside it."""
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def command(out: Path) -> str:
    """The runner's command that writes the table of ``out`` (``--profile``, ``--out`` where needed)."""
    profile = profile_of(out)
    cmd = f"python -m simulations.compare {_shown(EXPERIMENT)}" + (f" --profile {profile}" if profile else "")
    return cmd if out.resolve() == default_out(EXPERIMENT, profile) else f"{cmd} --out {_shown(out)}"


def table(out: Path = OUT, reference: Path | None = None) -> str:
    """The markdown parity table of the bf16 runs under ``out`` against the fp32 runs under
    ``reference`` (default: :func:`reference_of` ``out``); a header comment names both folders."""
    reference = reference_of(out) if reference is None else reference
    header = f"<!-- {command(out)} | fp32: {_shown(reference)} | {dt.date.today()} | {machine_line()} -->"
    a = one_run_per_seed(load_runs(reference / "runs"))
    b = one_run_per_seed(load_runs(out / "runs"))
    for folder, rows, experiment in ((out, b, EXPERIMENT), (reference, a, REFERENCE)):
        if rows.empty:
            profile = f" --profile {profile_of(out)}" if profile_of(out) else ""
            return (f"{header}\nNo finished run under {_shown(folder / 'runs')} yet "
                    f"(`python -m simulations.compare {_shown(experiment)}{profile}`).\n")
    lines = [
        header,
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
