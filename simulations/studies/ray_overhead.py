"""Flower + Ray overhead: where a simulated round's wall time goes, per setting of Ray actors and
torch threads; a study (:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/ray_overhead.toml               # runs, table
    python -m simulations.compare simulations/experiments/ray_overhead.toml --table-only  # from the records

Its runs are ``simulations/experiments/ray_overhead.toml``: one bbt-fed simulation of 10 clients
(5 per round, 2 rounds) per setting, each label's engine a setting of this study's :data:`SETTINGS`
(``ray-cpus2-threads2``: Ray CPUs per client actor, ``--cpus-per-client``, and torch's threads,
``OMP_NUM_THREADS``), run through Flower's simulation engine in a fresh process by the runner's
``flower`` engine (:func:`simulations.compare.run_one`). On 2 cores, 2 CPUs a client is one
actor of 2 threads at a time, 1 CPU a client two actors of 1 thread.

The table (``table.md`` beside the runs): per setting and round after round 0, its wall time
(``round_time_s``), the time some client or the server evaluation was computing (``busy_s``), the
time new Ray actors spent importing torch (``startup_s``, round 1) and the rest, Flower's and Ray's
overhead (``overhead_s``), with its share of the round. Until issue 70 this was part 3 of
``python -m simulations.bench`` (its 2026-11-22 rows are in ``simulations/results/bench/table.md``
and docs/performance.md).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from simulations import compare
from simulations.tables import finished_runs

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "simulations" / "experiments" / "ray_overhead.toml"
OUT = compare.default_out(EXPERIMENT)  # simulations/results/ray_overhead
# engine -> (Ray CPUs per client actor, torch threads): the settings bench.py's part 3 tried
SETTINGS: dict[str, tuple[float, int]] = {"ray-cpus2-threads2": (2.0, 2), "ray-cpus1-threads1": (1.0, 1)}


def _engine(cpus: float, threads: int) -> Any:
    """The runner's engine of one setting (:data:`SETTINGS`): :func:`simulations.compare.run_one` with
    ``cpus`` Ray CPUs per client actor and ``threads`` torch threads in every process of the run."""
    def engine(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
               gpus_per_client: float = 0.0) -> int:
        return compare.run_one(overrides, num_supernodes, log_path, ray_address, gpus_per_client,
                               cpus_per_client=cpus, env={"OMP_NUM_THREADS": str(threads)})

    return engine


ENGINES = {name: _engine(cpus, threads) for name, (cpus, threads) in SETTINGS.items()}


def table(out: Path = OUT) -> str:
    """The markdown table of the finished runs under ``out/runs`` (module doc), one row per round after
    round 0, the settings in the experiment file's order; ``actors`` = the run's machine's cores over
    the setting's CPUs per client."""
    exp = compare.load_experiment(EXPERIMENT)
    settings = compare.label_settings(exp)
    keys = compare.flatten(exp.get("run-config", {}))
    runs = finished_runs(out / "runs")
    header = (f"| Ray actors x torch threads ({exp['num-supernodes']} clients, clients-per-round="
              f"{keys['clients-per-round']} num-server-rounds={keys['num-server-rounds']}) | round | wall | "
              "client + server compute (busy) | actor start-up | overhead | share |\n"
              "| --- | --- | --- | --- | --- | --- | --- |")
    lines = [f"<!-- python -m simulations.compare {EXPERIMENT.relative_to(REPO)} | {dt.date.today()} -->", header]
    for label in exp["methods"]:
        cpus, threads = SETTINGS[settings[label]["engine"]]
        for (variant, _seed), run in runs.items():
            if variant != label:
                continue
            cores = run["config"].get("machine", {}).get("cpu_count") or os.cpu_count() or 1
            for rec in run["rounds"]:
                if rec["round"] == 0:
                    continue
                lines.append(f"| {int(cores // cpus)} x {threads} | {rec['round']} | {rec['round_time_s']:.1f} s | "
                             f"{rec['busy_s']:.1f} s | {rec['startup_s'] or 0:.1f} s | {rec['overhead_s']:.2f} s | "
                             f"{rec['overhead_s'] / rec['round_time_s']:.1%} |")
    return "\n".join(lines) + "\n"
