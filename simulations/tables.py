"""Run records -> pandas tables (used by the compare runner; no browser needed).

Reads only ``<runs>/**/{config,summary}.json`` and ``rounds.jsonl`` as written by
:mod:`fedtext.records`, so every method appears without changes here.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from fedtext.records.reader import FINISHED, finite_number, privacy_spent, runs_under, summarize, without_accuracy

PRIVACY_FIELDS = ("dp", "epsilon", "dp_delta")  # a run's privacy spent (fedtext.records.privacy_spent)
COLUMNS = {
    "final_accuracy": "final acc",
    "best_accuracy": "best acc",
    "initial_accuracy": "round-0 acc",
    "final_client_accuracy_mean": "client acc",
    "p_accuracy": "P acc",
    "np_accuracy": "NP acc",
    "trainable_parameters": "trainable params",
    "kb_up_per_client_round": "KB up / client-round",
    "kb_down_per_client_round": "KB down / client-round",
    "mb_up": "MB up (total)",
    "mb_down": "MB down (total)",
    "model_queries": "model queries",
    "peak_client_rss_mb": "peak client MB",
    "peak_client_gpu_mb": "peak client GPU MB",  # dropped, like every all-empty column, on CPUs
    "client_s_per_round": "client s / client-round",
    "server_distill_s_per_round": "server distill s / round",
    "server_peak_mb": "server peak MB",
    "wall_time_s": "wall s",
    "epsilon": "ε (δ)",  # DP runs: the privacy spent (epsilon_cell); no column when no run has DP
}


# The columns that tell one run of a table row from another: a variant's runs differ in
# seed and, for P/NP experiments, in the held-out clients; the same seed on another backbone
# (model) is another run, not a rerun.
SEED_KEY = ["variant", "model", "dataset", "partition", "seed", "holdout"]


def run_key(cfg: dict[str, Any]) -> tuple[Any, Any, str]:
    """``(variant, seed, holdout)`` of a recorded run-config: the variant is ``run-name``
    (the compare runner's label) or else the method; no holdout reads ``""``."""
    return cfg.get("run-name") or cfg.get("method"), cfg.get("seed"), str(cfg.get("holdout") or "")


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per run directory under ``root`` (any depth); unfinished runs included."""
    return run_rows(runs_under(root))


def run_rows(runs: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """The table rows of loaded runs (:func:`fedtext.records.load_run`'s dicts); runs
    without a readable config are left out, a ``malformed`` run (a record file that is not
    its record) is a row of that status with what its rounds give, which no table counts
    (:func:`one_run_per_seed`). The readers have checked every field used here
    (:func:`fedtext.records.check_config`, :func:`~fedtext.records.check_summary`)."""
    rows = []
    for run in runs:
        if run["config"] is None:
            continue
        if run.get("random_weights"):  # a random model's accuracy is no result: the row shows its costs only
            run = without_accuracy(run)
        cfg = run["config"]["config"]
        summary = (run["summary"] if run["summary"] and run["status"] != "malformed"
                   else {**summarize(run["rounds"]), "status": run["status"]})
        variant, seed, holdout = run_key(cfg)
        rows.append(
            {
                "run_id": run["config"].get("run_id", Path(run["dir"]).name),
                "started": finite_number(run["config"].get("started_epoch")),
                "method": cfg.get("method"),
                "variant": variant,
                # the backbone as the run-config named it, without a hub owner ("all-mpnet-base-v2")
                "model": str(cfg.get("model") or "").rsplit("/", 1)[-1] or None,
                "holdout": holdout,
                "dataset": Path(str(cfg.get("dataset"))).name,
                "partition": (f"dirichlet α={cfg.get('alpha')}" if cfg.get("partition") == "dirichlet"
                              else cfg.get("partition")),
                "alpha": cfg.get("alpha"),
                "seed": seed,
                "status": summary.get("status"),
                "rounds_done": summary.get("rounds_done"),
                "initial_accuracy": summary.get("initial_accuracy"),
                "final_accuracy": summary.get("final_accuracy"),
                "best_accuracy": summary.get("best_accuracy"),
                "final_client_accuracy_mean": summary.get("final_client_accuracy_mean"),
                "p_accuracy": summary.get("p_accuracy"),
                "np_accuracy": summary.get("np_accuracy"),
                "trainable_parameters": cfg.get("trainable-parameters"),
                "kb_up_per_client_round": (summary.get("mean_bytes_up_per_client") or 0) / 1024,
                "kb_down_per_client_round": (summary.get("mean_bytes_down_per_client") or 0) / 1024,
                "mb_up": summary.get("total_bytes_up", 0) / 2**20,
                "mb_down": summary.get("total_bytes_down", 0) / 2**20,
                "model_queries": summary.get("total_model_queries"),
                "peak_client_rss_mb": summary.get("peak_client_rss_mb"),
                "peak_client_gpu_mb": summary.get("peak_client_gpu_mb"),
                "wall_time_s": summary.get("wall_time_s"),
                # dp, epsilon, dp_delta; a summary written before it had them: from the rounds
                **{**privacy_spent(run["rounds"]), **{k: summary[k] for k in PRIVACY_FIELDS if k in summary}},
                **round_costs(run["rounds"]),
            }
        )
    return pd.DataFrame(rows)


def round_costs(rounds: list[dict[str, Any]]) -> dict[str, float | None]:
    """Compute per round, from ``rounds.jsonl``: a client's training seconds per
    client-round (``client_fit_s / num_clients``, mean over rounds), and, for methods
    that distil on the server (FedDRS, FedDF), its distillation seconds per round (mean
    over trained rounds, 0 where it did not distil) and its peak resident memory."""
    trained = [r for r in rounds if isinstance(r, dict) and isinstance(r.get("round"), int) and r["round"] > 0]
    per_client = [finite_number(r.get("client_fit_s")) / r["num_clients"] for r in trained
                  if finite_number(r.get("client_fit_s")) is not None and finite_number(r.get("num_clients"))]
    metrics = [r.get("method_metrics") if isinstance(r.get("method_metrics"), dict) else {} for r in trained]
    distilled = any("server_distill_s" in m for m in metrics)
    peaks = [x for m in metrics if (x := finite_number(m.get("server_peak_rss_mb"))) is not None]
    return {
        "client_s_per_round": sum(per_client) / len(per_client) if per_client else None,
        "server_distill_s_per_round": (sum(finite_number(m.get("server_distill_s")) or 0 for m in metrics)
                                       / len(metrics)) if distilled else None,
        "server_peak_mb": max(peaks) if peaks else None,
    }


def one_run_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows a results table counts: finished runs only (failed, running, stale and
    malformed ones are left out), and one run per :data:`SEED_KEY`: where a seed finished
    several times, the newest (latest ``started_epoch`` in its ``config.json``; a record
    without one counts as oldest). The rows keep their order."""
    if runs.empty:
        return runs
    done = runs[runs["status"] == FINISHED]
    newest = done.sort_values("started", kind="stable", na_position="first").drop_duplicates(SEED_KEY, keep="last")
    return done[done.index.isin(newest.index)]


def finished_runs(root: str | Path) -> dict[tuple[Any, Any], dict[str, Any]]:
    """The loaded runs under ``root`` that a results table counts (:func:`one_run_per_seed`: finished,
    the newest of each seed) by ``(variant, seed)``, in that order: what a study's table reads when
    it needs more of a run than :func:`run_rows` keeps (its rounds, its folder). One variant's runs
    under one experiment's folder share its dataset, partition and backbone; runs of one (variant,
    seed) that differ in holdout are for the compare table, not for a study (the last one wins)."""
    runs = [run for run in runs_under(root) if run["config"] is not None]
    rows = one_run_per_seed(run_rows(runs))
    keep = set(rows["run_id"]) if not rows.empty else set()
    chosen = {}
    for run in runs:
        if run["config"].get("run_id", Path(run["dir"]).name) in keep:
            variant, seed, _ = run_key(run["config"]["config"])
            chosen[(variant, int(seed))] = run
    return dict(sorted(chosen.items()))


def compare_keys(runs: pd.DataFrame) -> list[str]:
    """What one row of :func:`compare_table` is a mean over: (variant, dataset, partition),
    and the backbone as well where the runs used more than one (the same comparison on
    all-MiniLM-L6-v2 and on all-mpnet-base-v2 stays two rows, never one mean)."""
    models = runs["model"].dropna().unique() if "model" in runs.columns else []
    return ["variant", "model", "dataset", "partition"] if len(models) > 1 else ["variant", "dataset", "partition"]


def compare_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over runs per (variant, dataset, partition), formatted as strings.

    ``variant`` is the run's ``run-name`` (the compare runner sets it to the experiment's
    label, e.g. ``feddls-phi3``) or else its method; runs of one variant differ in seed
    and, for P/NP experiments, in the held-out clients. Runs on several backbones give a
    row per backbone and a ``backbone`` column (:func:`compare_keys`); one backbone, none.
    Columns without any value in the table (e.g. NP accuracy when nothing was held out)
    are left out.
    """
    keys = compare_keys(runs)
    groups = runs.groupby(keys, sort=False, dropna=False)
    out = []
    for key, g in groups:
        at = dict(zip(keys, key, strict=True))
        row = {"method": at["variant"], **({"backbone": at["model"]} if "model" in at else {}),
               "dataset": at["dataset"], "partition": at["partition"], "runs": len(g)}
        for col, name in COLUMNS.items():
            if col == "epsilon":
                row[name] = epsilon_cell(g)
                continue
            vals = pd.to_numeric(g[col], errors="coerce").dropna()
            row[name] = _fmt(vals, col)
        out.append(row)
    table = pd.DataFrame(out)
    empty = [c for c in table.columns if (table[c] == "-").all()]
    return table.drop(columns=empty)


def epsilon_cell(g: pd.DataFrame) -> str:
    """The privacy a row's runs spent: ``2.31 ± 0.02 (δ 1e-05)``, the mean ± std of their ε
    at their ``dp-delta``; ``∞ (δ 1e-05)`` when a run added no noise (no bound: the row's
    worst case); ``-`` for a row without DP, so that a table of runs without DP has no
    such column (as every all-empty one)."""
    dp = g[g["dp"].notna()] if "dp" in g.columns else g.iloc[:0]
    if dp.empty:
        return "-"
    deltas = "/".join(f"{d:g}" for d in pd.to_numeric(dp["dp_delta"], errors="coerce").dropna().unique())
    eps = pd.to_numeric(dp["epsilon"], errors="coerce")
    shown = "∞" if eps.isna().any() else _fmt(eps, "epsilon")
    return f"{shown} (δ {deltas or '?'})"


def _fmt(vals: pd.Series, col: str) -> str:
    if vals.empty:
        return "-"
    digits = 3 if "accuracy" in col else (
        0 if col in ("model_queries", "peak_client_rss_mb", "peak_client_gpu_mb", "wall_time_s", "trainable_parameters",
                     "server_peak_mb")
        else 2)
    mean = f"{vals.mean():,.{digits}f}"
    return mean if len(vals) == 1 else f"{mean} ± {vals.std(ddof=1):,.{digits}f}"


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub markdown table (no extra dependency)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
