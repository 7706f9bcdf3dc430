"""FeS's Table 4 from a compare-runner folder: accuracy, relative accuracy, simulated
time-to-accuracy, bytes and client memory per variant (mean over seeds).

    python -m simulations.papers.fes.table simulations/results/fes_ag_news \\
        --reference fedcls-oracle --target fedfsl

* relative accuracy: final accuracy / the ``--reference`` variant's (same seed);
* time-to-accuracy: simulated device seconds (``sim_time_s`` summed over rounds: the
  slowest client's compute + its bytes at ``bandwidth-mbps``) until the global accuracy
  first reaches the ``--target`` variant's final accuracy of the same seed; "X" when a
  run never does (the paper's mark); mean over the seeds that reach it, with how many;
  also re-timed at ``--bandwidths`` (Fig. 9's sweep, from the records' slowest compute
  and mean bytes: :func:`round_seconds`);
* KB up / down per client-round, peak client memory, total simulated time.

Writes ``fes_table.md`` next to the compare runner's ``table.md`` and prints it.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fedtext.records.reader import finite_number, runs_under, summarize


def round_seconds(r: dict[str, Any], bandwidth_mbps: float | None = None) -> float:
    """A round's simulated seconds: the recorded ``sim_time_s`` (at the run's
    ``bandwidth-mbps``), or, re-timed at another bandwidth, the slowest client's compute
    + a client's mean bytes down and up at ``bandwidth_mbps`` (an approximation: the
    record keeps the slowest compute and the mean bytes, not each client's sum)."""
    if bandwidth_mbps is None:
        return finite_number(r.get("sim_time_s")) or 0.0
    if r.get("round", 0) == 0:
        return 0.0
    nbytes = (finite_number(r.get("bytes_down_per_client")) or 0.0) + (finite_number(r.get("bytes_up_per_client")) or 0.0)
    return (finite_number(r.get("client_fit_s_max")) or 0.0) + nbytes / (bandwidth_mbps * 1e6)


def time_to(rounds: list[dict[str, Any]], target: float, bandwidth_mbps: float | None = None) -> float | None:
    """Cumulative simulated seconds (:func:`round_seconds`) at the first round whose global
    accuracy is >= ``target`` (round 0 counts as time 0); ``None`` if none is."""
    t = 0.0
    for r in sorted(rounds, key=lambda r: r["round"]):
        t += round_seconds(r, bandwidth_mbps)
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


def _tta(seeds: dict[int, dict[str, Any]], tgt: dict[int, dict[str, Any]], bw: float | None) -> str:
    times = [time_to(r["rounds"], tgt[s]["final"], bw) for s, r in seeds.items() if s in tgt]
    reached = [t for t in times if t is not None]
    if not times:
        return "-"
    if not reached:
        return "X"
    out = _mean_std(reached, ",.0f")
    return out if len(reached) == len(times) else f"{out} ({len(reached)}/{len(times)} seeds; X for the rest)"


def fes_table(root: Path, reference: str, target: str, bandwidths: list[float] | None = None) -> str:
    """The markdown table (see module docstring)."""
    runs = runs_by_variant(root)
    ref, tgt = runs.get(reference, {}), runs.get(target, {})
    bandwidths = bandwidths or []
    extra = "".join(f" sim s to it at {bw:g} MB/s |" for bw in bandwidths)
    lines = [
        f"| method | rounds | runs | final acc | best acc | relative acc (vs {reference}) | sim s to {target}'s final acc "
        f"|{extra} sim s (total) | KB up / client-round | KB down / client-round | peak client MB |",
        "|---" * (11 + len(bandwidths)) + "|",
    ]
    for variant, seeds in runs.items():
        finals = [r["final"] for r in seeds.values() if r["final"] is not None]
        best = [r["summary"]["best_accuracy"] for r in seeds.values() if r["summary"].get("best_accuracy") is not None]
        rel = [r["final"] / ref[s]["final"] for s, r in seeds.items() if s in ref and r["final"] is not None]
        rounds = sorted({max(x["round"] for x in r["rounds"]) for r in seeds.values()})
        ttas = " | ".join(_tta(seeds, tgt, bw) for bw in [None, *bandwidths])
        total = [sum(round_seconds(x) for x in r["rounds"]) for r in seeds.values()]
        up = [(r["summary"].get("mean_bytes_up_per_client") or 0) / 1024 for r in seeds.values()]
        down = [(r["summary"].get("mean_bytes_down_per_client") or 0) / 1024 for r in seeds.values()]
        mem = [r["summary"]["peak_client_rss_mb"] for r in seeds.values() if r["summary"].get("peak_client_rss_mb")]
        lines.append(f"| {variant} | {'/'.join(map(str, rounds))} | {len(seeds)} | {_mean_std(finals, '.3f')} "
                     f"| {_mean_std(best, '.3f')} | {_mean_std(rel, '.1%')} | {ttas} "
                     f"| {_mean_std(total, ',.0f')} | {_mean_std(up, ',.1f')} | {_mean_std(down, ',.1f')} "
                     f"| {_mean_std(mem, ',.0f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a compare-runner output folder")
    ap.add_argument("--reference", default="fedcls-oracle", help="variant whose accuracy is 100 %%")
    ap.add_argument("--target", default="fedfsl", help="variant whose final accuracy times are measured to")
    ap.add_argument("--bandwidths", type=float, nargs="*", default=[0.1, 10.0],
                    help="extra MB/s to re-time the runs at (FeS Fig. 9; approximate, see round_seconds)")
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        raise SystemExit(f"no such folder: {args.results}")
    table = fes_table(args.results, args.reference, args.target, args.bandwidths)
    (args.results / "fes_table.md").write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
