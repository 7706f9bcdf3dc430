"""Run records -> the dashboard's dataframes (plain pandas; tests call it without a browser).

Reads nothing but ``<runs>/**/{config.json, rounds.jsonl, summary.json}`` as written by
:mod:`fedtext.records`, so every method shows up without changes here. A run whose files
are half written or malformed is listed with status ``malformed`` (or with the rounds
that could be read) and never raises.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from fedtext.records import load_run, summarize

RUN_COLUMNS = [
    "run_id", "method", "dataset", "partition", "seed", "holdout", "options", "status", "rounds_done",
    "final_accuracy", "best_accuracy", "p_accuracy", "np_accuracy", "mb_up", "mb_down", "note",
]


@functools.lru_cache(maxsize=1)
def _method_defaults() -> dict[str, dict]:
    """Each method's own keys and defaults (``{"feddls": {"feddls.phi": 5, ...}}``)."""
    from fedtext.registry import METHODS

    return {name: m.config().to_run_config() for name, m in METHODS.items()}


def method_options(cfg: dict) -> str:
    """The run's own method keys that differ from their defaults, ``phi=3 steps=10``
    (what tells two variants of one method apart)."""
    method = str(cfg.get("method"))
    defaults = _method_defaults().get(method, {})
    prefix = f"{method}."
    return " ".join(
        f"{k[len(prefix):]}={v}" for k, v in cfg.items()
        if k.startswith(prefix) and (k not in defaults or defaults[k] != v)
    )


def _run_dirs(root: Path) -> list[Path]:
    """Every directory under ``root`` holding any run file."""
    names = ("config.json", "rounds.jsonl", "summary.json")
    return sorted({p.parent for name in names for p in root.rglob(name)})


def _config(run: dict) -> dict | None:
    """The run-config of a loaded run, or None when config.json is missing or malformed."""
    file = run["config"]
    cfg = file.get("config") if isinstance(file, dict) else None
    return cfg if isinstance(cfg, dict) else None


def runs_table(root: str | Path) -> pd.DataFrame:
    """One row per run directory: what the run list shows (status running/finished/failed/malformed)."""
    rows = []
    for run_dir in _run_dirs(Path(root)):
        try:
            run = load_run(run_dir)
        except OSError as exc:  # unreadable: still listed
            rows.append({"run_id": run_dir.name, "status": "malformed", "note": str(exc)[:120]})
            continue
        cfg = _config(run) or {}
        notes = []
        if _config(run) is None:
            notes.append("config.json missing or malformed")
        if run["malformed_lines"]:
            notes.append(f"{run['malformed_lines']} malformed line(s) in rounds.jsonl")
        try:
            summary = run["summary"] or {**summarize(run["rounds"]), "status": "running"}
        except (KeyError, TypeError, ValueError) as exc:
            summary, notes = {"status": "malformed"}, [*notes, f"rounds unreadable ({type(exc).__name__})"]
        status = summary.get("status", "running") if _config(run) is not None else "malformed"
        rows.append({
            "run_id": run_dir.name,
            "method": cfg.get("run-name") or cfg.get("method"),
            "dataset": Path(str(cfg.get("dataset", ""))).name or None,
            "partition": cfg.get("partition"),
            "seed": cfg.get("seed"),
            "holdout": cfg.get("holdout") or "",
            "options": method_options(cfg),
            "status": status,
            "rounds_done": summary.get("rounds_done"),
            "final_accuracy": summary.get("final_accuracy"),
            "best_accuracy": summary.get("best_accuracy"),
            "p_accuracy": summary.get("p_accuracy"),
            "np_accuracy": summary.get("np_accuracy"),
            "mb_up": (summary.get("total_bytes_up") or 0) / 2**20,
            "mb_down": (summary.get("total_bytes_down") or 0) / 2**20,
            "note": "; ".join(notes),
        })
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def round_series(root: str | Path, run_ids: list[str] | None = None) -> pd.DataFrame:
    """One row per (run, round) for the charts: accuracy, cumulative bytes up/down,
    per-client accuracy spread, cumulative model queries, client peak memory, wall time."""
    frames = []
    for run_dir in _run_dirs(Path(root)):
        if run_ids is not None and run_dir.name not in run_ids:
            continue
        run = load_run(run_dir)
        rounds = run["rounds"]
        if not rounds:
            continue
        cfg = _config(run) or {}
        label = f"{cfg.get('run-name') or cfg.get('method', '?')} s{cfg.get('seed', '?')}"
        if cfg.get("holdout"):
            label += f" -{cfg['holdout']}"
        rows = []
        up = down = queries = 0
        for r in sorted(rounds, key=lambda r: r["round"]):
            up += r.get("bytes_up") or 0
            down += r.get("bytes_down") or 0
            queries += r.get("model_queries") or 0
            accs = [a for a in (r.get("client_accuracy") or {}).values() if isinstance(a, (int, float))]
            rows.append({
                "run_id": run_dir.name, "label": label, "round": r["round"],
                "global_accuracy": r.get("global_accuracy"),
                "cum_bytes_up": up, "cum_bytes_down": down, "cum_model_queries": queries,
                "client_acc_min": min(accs) if accs else None,
                "client_acc_mean": float(np.mean(accs)) if accs else None,
                "client_acc_max": max(accs) if accs else None,
                "client_peak_rss_mb": r.get("client_peak_rss_mb"),
                "wall_time_s": r.get("wall_time_s"),
            })
        frames.append(pd.DataFrame(rows))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def comparison(root: str | Path, run_ids: list[str] | None = None) -> pd.DataFrame:
    """The papers' kind of table (mean ± std over seeds) for the selected runs."""
    from simulations.tables import compare_table, load_runs

    runs = load_runs(root)
    if run_ids is not None and not runs.empty:
        runs = runs[runs["run_id"].isin(run_ids)]
    return compare_table(runs) if not runs.empty else pd.DataFrame()

