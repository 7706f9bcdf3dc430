"""Compare runner: several methods, same data, same partition, same seeds -> one table.

    python -m simulations.compare simulations/experiments/demo_baselines.toml
    python -m simulations.compare simulations/experiments/sst2_baselines.toml --seeds 0 1 2

An experiment file holds overrides only (everything else is pyproject's default):

    methods = ["fedprompt", "bbt-fed"]      # what to compare
    seeds = [0, 1, 2]                       # one run per method and seed
    num-supernodes = 10                     # simulated clients
    [run-config]                            # overrides shared by every method
    dataset = "../shared/data/sst2"
    [method.bbt-fed]                        # overrides for one method only
    local-steps = 4

Every run goes through Flower's simulation engine in a fresh process
(:mod:`simulations.simulate`) and writes its records under ``<out>/runs/``; the table
(markdown and CSV: final and best accuracy, KB up/down per client-round, total MB,
model queries, peak client memory, wall time; mean ± std over seeds) is built from
those records only. The partition depends on (dataset, partition, alpha, seed,
number of clients) alone, so all methods of a seed see the same clients.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from fedtext.config import ConfigError, RunConfig
from fedtext.records import machine
from simulations.tables import compare_table, load_runs, to_markdown


def load_experiment(path: Path) -> dict[str, Any]:
    exp = tomllib.loads(path.read_text())
    unknown = set(exp) - {"methods", "seeds", "num-supernodes", "run-config", "method", "description"}
    if unknown:
        raise ConfigError(f"{path}: unknown experiment keys {sorted(unknown)}")
    return exp


def plan(exp: dict[str, Any], seeds: list[int] | None) -> list[dict[str, Any]]:
    """One run-config override dict per (method, seed), validated before anything runs."""
    from strategies import STRATEGIES

    runs = []
    for method in exp.get("methods", []):
        for seed in seeds if seeds is not None else exp.get("seeds", [0]):
            ov = {**exp.get("run-config", {}), **exp.get("method", {}).get(method, {}), "method": method, "seed": seed}
            RunConfig.from_run_config(ov, STRATEGIES)
            runs.append(ov)
    if not runs:
        raise ConfigError("experiment lists no methods")
    return runs


def run_one(overrides: dict[str, Any], num_supernodes: int, log_path: Path) -> int:
    """One simulation in a fresh process (Ray is started and stopped per run)."""
    pairs = " ".join(f"{k}={_quote(v)}" for k, v in overrides.items())
    cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", str(num_supernodes), "--run-config", pairs]
    with open(log_path, "w") as log:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # progress lines as they happen
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in proc.stdout:  # progress lines to the console, everything to the log
            log.write(line)
            log.flush()
            if "fedtext round" in line or "configuration error" in line or "Error" in line:
                print("   ", line.split("fedtext ", 1)[-1].rstrip(), flush=True)
        return proc.wait()


def _quote(v: Any) -> str:
    return f"'{v}'" if isinstance(v, str) and (" " in v or not v) else str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run methods side by side and write a comparison table.")
    ap.add_argument("experiment", type=Path, help="TOML file of overrides (see module docstring)")
    ap.add_argument("--seeds", type=int, nargs="+", help="override the experiment's seeds")
    ap.add_argument("--methods", nargs="+", help="override the experiment's methods")
    ap.add_argument("--out", type=Path, help="output folder (default simulations/results/<experiment name>)")
    ap.add_argument("--table-only", action="store_true", help="rebuild the table from existing records")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        exp = load_experiment(args.experiment)
        if args.methods:
            exp["methods"] = args.methods
        runs = plan(exp, args.seeds)
    except (ConfigError, tomllib.TOMLDecodeError, FileNotFoundError) as exc:
        print(f"fedtext: configuration error: {exc}", file=sys.stderr)
        return 2
    out = args.out or Path("simulations/results") / args.experiment.stem
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    n = int(exp.get("num-supernodes", 4))
    failed = 0
    if not args.table_only:
        for i, ov in enumerate(runs, 1):
            ov = {**ov, "output-dir": str(runs_dir.resolve())}
            print(f"[{i}/{len(runs)}] {ov['method']} seed={ov['seed']} ({n} clients)", flush=True)
            t0 = time.time()
            rc = run_one(ov, n, out / f"{ov['method']}-s{ov['seed']}.log")
            failed += rc != 0
            print(f"    done in {time.time() - t0:.0f} s (exit {rc})", flush=True)
    table = compare_table(load_runs(runs_dir))
    header = (
        f"<!-- {args.experiment} | {n} clients | {dt.date.today()} | "
        f"{machine()['cpu_count']} CPUs, {machine()['platform']} -->\n"
    )
    (out / "table.md").write_text(header + to_markdown(table))
    table.to_csv(out / "table.csv", index=False)
    print(to_markdown(table))
    print(f"table: {out / 'table.md'} and {out / 'table.csv'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
