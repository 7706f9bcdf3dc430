"""Utility against privacy (issue 59): the T1 table and figure of final accuracy against ε, a study
(:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/privacy_ag_news.toml               # runs, table, figure
    python -m simulations.compare simulations/experiments/privacy_ag_news.toml --seeds 0     # some seeds
    python -m simulations.compare simulations/experiments/privacy_ag_news.toml --table-only  # from the records
    python -m simulations.studies.privacy --pilot fedlora  # the honest update norms a dp-clip is chosen from

Its runs are ``simulations/experiments/privacy_ag_news.toml`` (its header says the setting: T1, central
DP at noise multipliers 0, 0.5, 1 and 2 for fedprompt, fedlora, bbt-fed and fedkseed, 3 seeds; each
label is ``<method>-<noise>``), run by the compare runner through the server's own round loop in this
process (``engine = "inprocess"``: the same round math and records, no Ray start-up per run). Records
go to ``simulations/results/privacy_ag_news/runs/``.

The table (``table.md`` beside the runs, and the ``privacy-table`` block of docs/privacy.md): per
method and noise, the final server accuracy (mean ± std over the seeds), the ε spent at δ = 10⁻⁵
after the last round (from the round records' ``privacy`` entry: the RDP accountant's), the updates
clipped and the bytes per client-round. The figure (``accuracy_vs_epsilon.png`` / ``.svg``, made by
:func:`finish` after new runs): accuracy against ε per method, the run without DP drawn as a dashed
line at its accuracy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulations import compare
from simulations.tables import finished_runs

REPO = Path(__file__).resolve().parents[2]
# the compare runner resumes a run of this study that stopped part-way (its records are accuracies, not a launch's
# time): simulations.compare.resumable_run
RESUMES = True
EXPERIMENT = REPO / "simulations" / "experiments" / "privacy_ag_news.toml"
OUT = compare.default_out(EXPERIMENT)  # simulations/results/privacy_ag_news
METHODS = ("fedprompt", "fedlora", "bbt-fed", "fedkseed")
NOISES = {"none": "no DP", "z0": "clip only (z = 0)", "z05": "z = 0.5", "z1": "z = 1", "z2": "z = 2"}
FIGURE = "accuracy_vs_epsilon"


def split_label(label: str) -> tuple[str, str]:
    """``"bbt-fed-z05"`` -> ``("bbt-fed", "z05")`` (the noise is the last dash's part)."""
    method, noise = label.rsplit("-", 1)
    return method, noise


def collect(out: Path = OUT) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Finished runs by (method, noise): the newest per seed, with its final accuracy, final ε,
    clipped updates over its rounds and bytes per client-round."""
    table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if not (out / "runs").exists():
        return table
    for (label, seed), run in finished_runs(out / "runs").items():
        rounds = [json.loads(x) for x in (Path(run["dir"]) / "rounds.jsonl").read_text().splitlines()]
        spent = [r["privacy"] for r in rounds if r.get("privacy")]
        trained = [r for r in rounds if r.get("bytes_up_per_client") is not None]
        table.setdefault(split_label(label), []).append({
            "seed": seed,
            "accuracy": run["summary"]["final_accuracy"],
            "start": rounds[0].get("global_accuracy"),  # round 0: the initial model, before any training
            "epsilon": spent[-1]["epsilon"] if spent else None,
            "clipped": sum(int(p.get("clipped", 0)) for p in spent),
            "up": statistics.mean(r["bytes_up_per_client"] for r in trained) if trained else None,
            "down": statistics.mean(r["bytes_down_per_client"] for r in trained) if trained else None,
        })
    return table


def _acc(runs: list[dict[str, Any]]) -> str:
    acc = [r["accuracy"] for r in runs]
    spread = f" ± {statistics.stdev(acc):.3f}" if len(acc) > 1 else ""
    return f"{statistics.mean(acc):.3f}{spread} ({len(acc)})"


def _eps(runs: list[dict[str, Any]], noise: str) -> str:
    if noise == "none":
        return "—"
    eps = {r["epsilon"] for r in runs}
    if eps == {None}:
        return "∞"
    return ", ".join(f"{e:.2f}" for e in sorted(e for e in eps if e is not None))


def table(out: Path = OUT) -> str:
    """The table (module docstring) from the records under ``out``."""
    found = collect(out)
    if not found:
        return ("No finished run under simulations/results/privacy_ag_news/runs yet "
                "(`python -m simulations.compare simulations/experiments/privacy_ag_news.toml`).\n")
    lines = ["Final server accuracy, mean ± std over the seeds (runs), beside the initial model's (round 0: the mean "
             "over the seeds), and ε at δ = 10⁻⁵ after the 4 rounds:", "",
             "| method | round 0 | " + " | ".join(NOISES.values()) + " |", "|---" * (len(NOISES) + 2) + "|"]
    for method in METHODS:
        # round 0 is the same initial model in every run of a seed: one value per seed, then their mean
        by_seed = {r["seed"]: r["start"] for n in NOISES for r in found.get((method, n), []) if r["start"] is not None}
        start = f"{statistics.mean(by_seed.values()):.3f}" if by_seed else "–"
        lines.append(f"| `{method}` | {start} | " + " | ".join(_acc(found[(method, n)]) if (method, n) in found else "–"
                                                              for n in NOISES) + " |")
    eps_row = [_eps(runs, n) for n in NOISES if (runs := next((found[(m, n)] for m in METHODS if (m, n) in found), None))]
    lines.append("| ε (every method) | | " + " | ".join(eps_row) + " |")
    lines += ["", "Updates clipped at dp-clip (of 12 a run: 3 clients × 4 rounds; summed over the seeds) and bytes "
              "per client-round up / down (every noise alike: DP adds no byte):", "",
              "| method | dp-clip | clipped: " + " | ".join(list(NOISES.values())[1:]) + " | bytes up / down |",
              "|---" * (len(NOISES) + 2) + "|"]
    clips = _clips()
    for method in METHODS:
        cells = [str(sum(r["clipped"] for r in found.get((method, n), []))) if (method, n) in found else "–"
                 for n in list(NOISES)[1:]]
        runs = [r for n in NOISES for r in found.get((method, n), []) if r["up"] is not None]
        ups, downs = {round(r["up"]) for r in runs}, {round(r["down"]) for r in runs}
        sent = f"{'/'.join(f'{u:,}' for u in sorted(ups))} / {'/'.join(f'{d:,}' for d in sorted(downs))}" if runs else "–"
        lines.append(f"| `{method}` | {clips.get(method, '–')} | " + " | ".join(cells) + f" | {sent} |")
    return "\n".join(lines) + "\n"


def _clips() -> dict[str, float]:
    """Each method's dp-clip as the experiment sets it."""
    exp = compare.load_experiment(EXPERIMENT)
    return {split_label(label)[0]: float(over["dp-clip"]) for label, over in exp.get("method", {}).items()
            if "dp-clip" in over}


def finish(out: Path = OUT) -> list[Path]:
    """The figure: accuracy against ε per method (PNG and SVG beside the table); the no-DP accuracy as
    a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = collect(out)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, method in enumerate(METHODS):
        colour = f"C{i}"
        points = []
        for noise in ("z05", "z1", "z2"):
            runs = table.get((method, noise), [])
            eps = [r["epsilon"] for r in runs if r["epsilon"] is not None]
            if runs and eps:
                acc = [r["accuracy"] for r in runs]
                points.append((statistics.mean(eps), statistics.mean(acc), statistics.stdev(acc) if len(acc) > 1 else 0))
        if points:
            xs, ys, es = zip(*sorted(points), strict=True)
            ax.errorbar(xs, ys, yerr=es, marker="o", color=colour, capsize=3, label=method)
        plain = table.get((method, "none"), [])
        if plain:
            ax.axhline(statistics.mean(r["accuracy"] for r in plain), color=colour, linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ε at δ = 1e-5 after 4 rounds (central DP, q = 0.3)")
    ax.set_ylabel("final server accuracy (AG News, 200 texts)")
    ax.set_title("T1: accuracy against privacy (dashed: the same method without DP)", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, out, FIGURE)


def save_figure(fig: Any, folder: Path, name: str) -> list[Path]:
    """``fig`` laid out and written as ``<name>.png`` (120 dpi) and ``<name>.svg`` (no date in it: the
    same records give the same bytes) in ``folder``, then closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    for path in paths:
        fig.savefig(path, **({"metadata": {"Date": None}} if path.suffix == ".svg" else {"dpi": 120}))
    plt.close(fig)
    return paths


def record_updates(updates: list[list[Any]]) -> Callable[[Any], None]:
    """A :func:`simulations.inprocess.run` server hook that appends to ``updates`` the update
    (:meth:`fedtext.learning.model.Model.update`: upload minus the global arrays) of every upload the
    strategy's validation keeps, round after round."""

    def hook(server: Any) -> None:
        strategy = server.strategy
        validate = strategy.validate

        def measured(results: Any, failures: Any) -> Any:
            uploads = validate(results, failures)
            updates.extend(list(strategy.model.update(strategy.global_arrays, u.array_list())) for u in uploads)
            return uploads

        strategy.validate = measured

    return hook


def pilot(method: str, extra: dict[str, Any]) -> list[float]:
    """The L2 norms of the honest updates (:meth:`fedtext.learning.model.Model.update`) of a 2-round T1 run of
    ``method`` without DP: what each method's ``dp-clip`` in the experiment is the median of."""
    import tempfile

    import numpy as np

    from simulations.inprocess import run

    exp = compare.load_experiment(EXPERIMENT)
    updates: list[list[np.ndarray]] = []
    # the experiment's TOML tables (fedprompt.local-steps = ...) as Flower's flat keys, this method's only
    config = compare.for_method(compare.flatten(exp["run-config"]), method)
    with tempfile.TemporaryDirectory() as tmp:
        run({**config, "method": method, "num-server-rounds": 2, "eval-size": 50, "eval-every": 2, **extra},
            Path(tmp), clients=int(exp["num-supernodes"]), server_hook=record_updates(updates))
    return [float(np.sqrt(sum(float((x ** 2).sum()) for x in update))) for update in updates]


def render_support() -> str:
    """docs/privacy.md's "which methods can run privately": each registered config's declared
    support (``privacy``, at its defaults: ``effective_privacy``) and, where it lacks one, its
    ``privacy_reason`` (what the one-line refusal quotes), and the method's own fit metrics (sent
    in clear beside the shared telemetry)."""
    from fedtext.common.registry import CONFIGS

    marks = {"dp-central": "central DP", "dp-local": "local DP", "secagg": "SecAgg+"}
    lines = ["| `method=` | " + " | ".join(marks.values()) + " | why not | its own fit metrics (in clear) |",
             "|---" * (len(marks) + 3) + "|"]
    for config in CONFIGS:
        supported, reason = config().effective_privacy()
        own = ", ".join(f"`{m.name}`" for m in config.fit_metrics) or "—"
        why = reason.replace("|", "\\|") if len(supported) < len(marks) else ""
        lines.append(f"| `{config.name}` | " + " | ".join("yes" if k in supported else "no" for k in marks)
                     + f" | {why} | {own} |")
    return "\n".join(lines) + "\n"




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The honest update norms a method's dp-clip is chosen from "
                                 "(the runs and the table: python -m simulations.compare "
                                 "simulations/experiments/privacy_ag_news.toml)")
    ap.add_argument("--pilot", metavar="METHOD", required=True, help="a 2-round T1 run of METHOD without DP")
    args = ap.parse_args(argv)
    norms = pilot(args.pilot, {})
    print(f"{args.pilot}: {len(norms)} updates, L2 norms {', '.join(f'{n:.3g}' for n in norms)}; "
          f"median {statistics.median(norms):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
