"""FeS's Table 4 from a compare-runner folder: accuracy, relative accuracy, simulated
time-to-accuracy, bytes and client memory per variant (mean over seeds).

    python -m simulations.fes_table simulations/results/fes_ag_news \\
        --reference fedcls-oracle --target fedfsl

* relative accuracy: final accuracy / the ``--reference`` variant's (same seed);
* time-to-accuracy: simulated device seconds (``sim_time_s`` summed over rounds: the
  slowest client's compute + its bytes at ``bandwidth-mbps``) until the global accuracy
  first reaches the ``--target`` variant's final accuracy of the same seed; "X" when a
  run never does (the paper's mark); mean over the seeds that reach it, with how many;
* KB up / down per client-round, peak client memory, total simulated time.

Writes ``fes_table.md`` next to the compare runner's ``table.md`` and prints it.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fedtext.records import finite_number, runs_under, summarize


def time_to(rounds: list[dict[str, Any]], target: float) -> float | None:
    """Cumulative ``sim_time_s`` at the first round whose global accuracy is >= ``target``
    (round 0 counts as time 0); ``None`` if none is."""
    t = 0.0
    for r in sorted(rounds, key=lambda r: r["round"]):
        t += finite_number(r.get("sim_time_s")) or 0.0
        acc = finite_number(r.get("global_accuracy"))
        if acc is not None and acc >= target - 1e-12:
            return t
    return None


def runs_by_variant(root: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """variant -> seed -> {final, rounds, summary}."""
    out: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for run in runs_under(root):
        if run["config"] is None or not run["rounds"]:
            continue
        cfg = run["config"]["config"]
        summary = run["summary"] or summarize(run["rounds"])
        out[cfg.get("run-name") or cfg["method"]][int(cfg["seed"])] = {
            "final": summary.get("final_accuracy"), "rounds": run["rounds"], "summary": summary}
    return out


def _mean_std(xs: list[float], fmt: str) -> str:
    if not xs:
        return "-"
    return format(np.mean(xs), fmt) if len(xs) == 1 else f"{np.mean(xs):{fmt}} ± {np.std(xs, ddof=1):{fmt}}"


def fes_table(root: Path, reference: str, target: str) -> str:
    """The markdown table (see module docstring)."""
    runs = runs_by_variant(root)
    ref, tgt = runs.get(reference, {}), runs.get(target, {})
    lines = [
        f"| method | runs | final acc | relative acc (vs {reference}) | sim s to {target}'s final acc "
        "| sim s (total) | KB up / client-round | KB down / client-round | peak client MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, seeds in runs.items():
        finals = [r["final"] for r in seeds.values() if r["final"] is not None]
        rel = [r["final"] / ref[s]["final"] for s, r in seeds.items() if s in ref and r["final"] is not None]
        times = [time_to(r["rounds"], tgt[s]["final"]) for s, r in seeds.items() if s in tgt]
        reached = [t for t in times if t is not None]
        tta = "X" if times and not reached else _mean_std(reached, ",.0f")
        if times and reached and len(reached) < len(times):
            tta += f" ({len(reached)}/{len(times)} seeds; X for the rest)"
        total = [sum(finite_number(x.get("sim_time_s")) or 0.0 for x in r["rounds"]) for r in seeds.values()]
        up = [(r["summary"].get("mean_bytes_up_per_client") or 0) / 1024 for r in seeds.values()]
        down = [(r["summary"].get("mean_bytes_down_per_client") or 0) / 1024 for r in seeds.values()]
        mem = [r["summary"]["peak_client_rss_mb"] for r in seeds.values() if r["summary"].get("peak_client_rss_mb")]
        lines.append(f"| {variant} | {len(seeds)} | {_mean_std(finals, '.3f')} | {_mean_std(rel, '.1%')} | {tta} "
                     f"| {_mean_std(total, ',.0f')} | {_mean_std(up, ',.1f')} | {_mean_std(down, ',.1f')} "
                     f"| {_mean_std(mem, ',.0f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a compare-runner output folder")
    ap.add_argument("--reference", default="fedcls-oracle", help="variant whose accuracy is 100 %%")
    ap.add_argument("--target", default="fedfsl", help="variant whose final accuracy times are measured to")
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        raise SystemExit(f"no such folder: {args.results}")
    table = fes_table(args.results, args.reference, args.target)
    (args.results / "fes_table.md").write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
