"""Run records -> the dashboard's and the plot command's data (plain pandas; no browser).

Reads nothing but ``<runs>/**/{config.json, rounds.jsonl, summary.json}`` as written by
:mod:`fedtext.records` (and the compare runner's ``experiment.json``), so every method
shows up without changes here. A run whose files are half written or malformed is listed
with status ``malformed`` (or with the rounds that could be read) and never raises.

What a researcher compares, and how it is computed here (one place for the dashboard and
``python -m simulations.plot``):

* **Experiment** (:func:`experiment_of`): the one the caller names (``--experiment``), else the
  compare runner's output folder at or under the records folder (named in its
  ``experiment.json``, or the folder holding ``runs/``; nothing above ``--runs`` is read); a run started by hand groups by
  dataset, partition (with α) and shots per class.
* **Label**: the variant (``run-name``) or the method, plus, for a hand-started run without
  a ``run-name``, the method's own options that differ from their defaults; seeds of one label
  are aggregated (:func:`aggregate`: per round the mean x, mean y and the sample std of y).
* **X axes** (:data:`X_AXES`): round, wall time, simulated device time (rounds that record
  ``sim_time_s``), cumulative bytes up, down or both, cumulative model queries, and (DP runs)
  the privacy spent ε.
* **Colours** (:func:`color_of`): one per method or variant, the same on every chart.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from fedtext.records.probes import PROVENANCE_PACKAGES
from fedtext.records.reader import (
    RANDOM_WEIGHTS_NOTE, RecordError, configured_rounds, decode_json, file_problem, finite_number, privacy_spent,
    random_weights, read_config, read_summary, read_text, record_lines, round_line, run_status, summarize,
    without_accuracy,
)

RUN_COLUMNS = [
    "run_id", "experiment", "label", "method", "dataset", "partition", "seed", "holdout", "options", "status",
    "rounds_done", "final_accuracy", "best_accuracy", "p_accuracy", "np_accuracy", "total_bytes_up", "total_bytes_down",
    "epsilon", "dp_delta", "note",
]
BYTE_COLUMNS = ("total_bytes_up", "total_bytes_down")  # the run list's byte counts: numbers here, text on the page
EPSILON_COLUMN = "epsilon"  # the run list's ε: a number here (inf: no bound), text on the page (epsilon_text)
STATUSES = ("running", "finished", "failed", "stale", "malformed")


@dataclass(frozen=True)
class XAxis:
    """One choice of x-axis: the round-series column, its title, whether log is the default."""

    column: str
    title: str
    log: bool = False


X_AXES: dict[str, XAxis] = {
    "round": XAxis("round", "Round"),
    "bytes": XAxis("cum_bytes_total", "Cumulative bytes, up + down (all clients)", log=True),
    "bytes-up": XAxis("cum_bytes_up", "Cumulative bytes uploaded (all clients)", log=True),
    "bytes-down": XAxis("cum_bytes_down", "Cumulative bytes downloaded (all clients)", log=True),
    "queries": XAxis("cum_model_queries", "Cumulative model queries (client forwards)", log=True),
    "wall": XAxis("wall_time_s", "Wall time (s)"),
    "sim-time": XAxis("cum_sim_time_s", "Simulated device time (s)", log=True),
    # DP runs only: the ε spent by the end of the round (0 at round 0), at the run's dp-delta
    "epsilon": XAxis("epsilon", "Privacy spent ε (client-level, at the run's δ)"),
}


@dataclass(frozen=True)
class Chart:
    """One metric drawn against an x-axis (the dashboard and the plot command draw these).

    ``from_zero``: the y-axis starts at 0. Set for amounts where a ratio is what a reader
    compares (memory, cumulative queries, wall time): 900 MB against 820 MB is 10 % more, and
    an axis starting at 820 MB draws it as twice the height. Not set for accuracy and loss,
    where methods differ by a few points and an axis from 0 would flatten every line into one.
    """

    key: str
    title: str
    y: str
    from_zero: bool = False


CHARTS: dict[str, Chart] = {
    "accuracy": Chart("accuracy", "Global accuracy", "global_accuracy"),
    "client-accuracy": Chart("client-accuracy", "Mean client accuracy (local test splits)", "client_acc_mean"),
    "loss": Chart("loss", "Global loss", "global_loss"),
    "queries": Chart("queries", "Cumulative model queries", "cum_model_queries", from_zero=True),
    "memory": Chart("memory", "Client peak memory (MB)", "client_peak_rss_mb", from_zero=True),
    "wall": Chart("wall", "Wall time (s)", "wall_time_s", from_zero=True),
}

# Plotly's qualitative palette then D3's: hex strings both plotly and matplotlib take.
PALETTE = [
    "#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF",
    "#FECB52", "#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B", "#E377C2", "#7F7F7F",
]


@functools.lru_cache(maxsize=1)
def _method_names() -> tuple[str, ...]:
    from fedtext.common.registry import METHODS

    return tuple(METHODS)


def color_of(label: str, labels: Iterable[str] = ()) -> str:
    """The colour of a method or variant, the same on every chart and figure: a registered
    method keeps its registry slot; other labels (variants) take the following slots in
    sorted order of ``labels``."""
    methods = _method_names()
    if label in methods:
        return PALETTE[methods.index(label) % len(PALETTE)]
    others = sorted({x for x in labels if x not in methods} | {label})
    return PALETTE[(len(methods) + others.index(label)) % len(PALETTE)]


@functools.lru_cache(maxsize=1)
def _method_defaults() -> dict[str, dict]:
    """Each method's own keys and defaults (``{"feddls": {"feddls.phi": 5, ...}}``)."""
    from fedtext.common.registry import METHODS

    return {name: config().to_run_config() for name, config in METHODS.items()}


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


def label_of(cfg: dict, with_options: bool = True) -> str:
    """A run's line on the charts: its variant (``run-name``), else its method, followed,
    for a hand-started run (``with_options``), by the method options that differ from the
    defaults, so two hand-started variants stay apart. In a compare-runner experiment the
    label is the experiment's own (``run-name`` or method): its options are its budget."""
    if cfg.get("run-name"):
        return str(cfg["run-name"])
    options = method_options(cfg) if with_options else ""
    return f"{cfg.get('method', '?')} {options}".strip()


def compare_experiment(run_dir: Path, root: Path) -> str | None:
    """The compare-runner experiment holding ``run_dir`` (``<out>/runs/<run>``): the name in
    ``<out>/experiment.json`` (older outputs: ``<out>``'s name when it holds ``table.md``).

    Only folders at or under ``root`` (``--runs``) are looked at: a reader never looks above
    the folder it was given (an ``experiment.json`` planted above ``--runs`` renamed every
    run's experiment). A compare output opened at its ``runs/`` folder names its experiment
    itself (:class:`RunStore`'s ``experiment``, the dashboard's and the plot command's
    ``--experiment``)."""
    top = root.resolve()
    for folder in (run_dir.parent, run_dir.parent.parent):
        if not folder.resolve().is_relative_to(top):
            continue
        marker = folder / "experiment.json"
        if marker.is_file():
            text, _ = read_text(marker, root=root)  # a marker linked outside --runs is not read
            try:  # depth-checked: a hand-made marker must not stop the dashboard either
                meta = decode_json(text) if text is not None else None
            except RecordError:
                meta = None
            name = meta.get("name") if isinstance(meta, dict) else None
            return str(name if isinstance(name, (str, int, float)) and name else folder.name)
    legacy = run_dir.parent.parent
    if run_dir.parent.name == "runs" and legacy.resolve().is_relative_to(top) and (legacy / "table.md").is_file():
        return legacy.name
    return None


def experiment_of(run_dir: Path, cfg: dict, root: Path, experiment: str | None = None) -> str:
    """The experiment a run found under ``root`` belongs to: ``experiment`` when the caller
    names it, else its compare-runner experiment (:func:`compare_experiment`), else, for a
    run started by hand, its dataset, partition (with α) and shots per class."""
    return experiment or compare_experiment(run_dir, root) or _hand_experiment(cfg)


def _hand_experiment(cfg: dict) -> str:
    """``sst2 · dirichlet α=0.5 · 16 shots``: the group of runs started by hand."""
    dataset = Path(str(cfg.get("dataset", "?"))).name or "?"
    partition = str(cfg.get("partition", "?"))
    if partition.startswith("dirichlet"):
        partition += f" α={cfg.get('alpha')}"
    return f"{dataset} · {partition} · {cfg.get('shots-per-class', '?')} shots"


# ------------------------------------------------------------------- loading
@dataclass
class _Rounds:
    """``rounds.jsonl`` read incrementally: only the bytes appended since the last read, a line
    at a time (:func:`fedtext.records.reader.record_lines`: one beyond the bound is never held)."""

    ino: int = -1
    offset: int = 0  # bytes consumed, always at a line end
    guard: bytes = b""  # the last bytes before ``offset``: a rewritten file is re-read whole
    rounds: int | None = None  # the run's num-server-rounds the lines were checked against
    records: list[dict[str, Any]] = field(default_factory=list)
    bad: int = 0  # malformed complete lines
    first_bad: str | None = None  # the first one's reason, "line 3: not JSON (...)"
    lines: int = 0  # complete lines read
    tail_bad: int = 0  # an unfinished last line (a write in progress), counted until it ends

    def update(self, path: Path, rounds: int | None = None) -> None:
        try:
            st = path.stat()
        except OSError:
            self.__init__()  # gone
            return
        with open(path, "rb") as fh:
            if (st.st_ino != self.ino or st.st_size < self.offset or rounds != self.rounds
                    or not self._same_prefix(fh)):
                self.__init__(rounds=rounds)  # rewritten (a resume), or checked against another num-server-rounds
                self.ino = st.st_ino
            fh.seek(self.offset)
            self.tail_bad = 0
            for line, size, complete in record_lines(fh):
                if not complete:  # a write in progress: read again once its newline is there
                    self.tail_bad = int(line is None or bool(line.strip()))
                    break
                self.lines += 1
                record, why = round_line(line, rounds)
                if record is None:
                    self.bad += 1
                    self.first_bad = self.first_bad or f"line {self.lines}: {why}"
                else:
                    self.records.append(record)
                self.offset += size
            start = max(0, self.offset - 64)
            fh.seek(start)
            self.guard = fh.read(self.offset - start)

    def _same_prefix(self, fh) -> bool:
        if not self.guard:
            return True
        fh.seek(self.offset - len(self.guard))
        return fh.read(len(self.guard)) == self.guard


class RunStore:
    """Every run under ``root``, re-read only where a file changed since the last call.

    :meth:`runs` returns :func:`fedtext.records.load_run`-shaped dicts (``dir``, ``config``,
    ``summary``, ``rounds``, ``malformed_lines``, ``line_problem``, ``problem``: each file
    read and checked by the records' own readers) plus the dashboard's derived fields
    (``run_id``, ``cfg``, ``experiment``, ``label``, ``status``, ``summary_or_partial``,
    ``note``). JSON files are re-parsed when their size or mtime changes; ``rounds.jsonl``
    is read from where the last read stopped. Thread-safe (Dash serves callbacks in threads).
    """

    NAMES = ("config.json", "rounds.jsonl", "summary.json")

    def __init__(self, root: str | Path, experiment: str | None = None) -> None:
        self.root = Path(root)
        # the experiment of every run under root, named by the caller (a compare output opened at its
        # runs/ folder: its experiment.json lies above root, which no reader looks at); None: each run's own
        self.experiment = experiment or None
        self._lock = threading.Lock()
        self._json: dict[Path, tuple[tuple[int, int], tuple[dict | None, str | None]]] = {}
        self._rounds: dict[Path, _Rounds] = {}
        self._runs: dict[Path, tuple[tuple, dict[str, Any]]] = {}

    def _run_dirs(self) -> list[Path]:
        """Every directory under ``root`` holding any run file (one walk of the tree); a
        directory named like one (``config.json/``) counts, so its run is listed as malformed."""
        found = [Path(d) for d, dirs, files in os.walk(self.root)
                 if any(n in files or n in dirs for n in self.NAMES)]
        return sorted(found)

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int]:
        try:
            st = path.stat()
            return st.st_mtime_ns, st.st_size
        except OSError:
            return (-1, -1)

    def version(self) -> str:
        """A cheap signature of every record file (stat only): equal means nothing changed."""
        stamps = [(str(d), *(self._stamp(d / n) for n in self.NAMES)) for d in self._run_dirs()]
        return str(hash(tuple(stamps)))

    def runs(self) -> list[dict[str, Any]]:
        with self._lock:
            out = []
            live = set()
            for run_dir in self._run_dirs():
                live.add(run_dir)
                stamps = tuple(self._stamp(run_dir / n) for n in self.NAMES)
                cached = self._runs.get(run_dir)
                if cached is None or cached[0] != stamps:
                    cached = (stamps, self._load(run_dir, stamps))
                    self._runs[run_dir] = cached
                run = cached[1]
                if run["summary"] is None and run["status"] in ("running", "stale"):
                    # no file changed, but time passed: a silent run turns stale
                    run["status"], run["reason"] = run_status(run)
                out.append(run)
            for gone in set(self._runs) - live:  # a deleted run leaves nothing cached
                del self._runs[gone]
                self._rounds.pop(gone, None)
                for name in self.NAMES:
                    self._json.pop(gone / name, None)
            return out

    def _load_json(self, path: Path, stamp: tuple[int, int], reader: Callable[[Path], tuple[dict | None, str | None]]
                   ) -> tuple[dict | None, str | None]:
        """``reader(path)`` (:func:`fedtext.records.read_config` / ``read_summary`` under
        :attr:`root`), cached until the file's stat ``stamp`` changes."""
        cached = self._json.get(path)
        if cached is None or cached[0] != stamp:
            cached = (stamp, reader(path))
            self._json[path] = cached
        return cached[1]

    def _load(self, run_dir: Path, stamps: tuple) -> dict[str, Any]:
        # every file is checked against self.root: one that resolves outside (a symlink) is not read
        run: dict[str, Any] = {"dir": str(run_dir), "root": str(self.root), "run_id": run_dir.name}
        run["config"], config_problem = self._load_json(run_dir / "config.json", stamps[0],
                                                        lambda p: read_config(p, self.root))
        run["summary"], summary_problem = self._load_json(run_dir / "summary.json", stamps[2],
                                                          lambda p: read_summary(p, self.root))
        path = run_dir / "rounds.jsonl"
        # outside the records, a directory (open() would raise), a FIFO (it would block): not read
        rounds_problem = file_problem(path, self.root)
        if rounds_problem:
            self._rounds.pop(run_dir, None)
            run["rounds"], run["malformed_lines"], run["line_problem"] = [], 0, None
        else:
            rounds = self._rounds.setdefault(run_dir, _Rounds())
            try:
                rounds.update(path.resolve(), configured_rounds(run["config"]))
                run["rounds"], run["malformed_lines"] = list(rounds.records), rounds.bad + rounds.tail_bad
                run["line_problem"] = rounds.first_bad
            except OSError as exc:  # unreadable (no permission): still listed
                run["rounds"], run["malformed_lines"], run["line_problem"] = [], 0, None
                rounds_problem = f"rounds.jsonl unreadable ({exc.strerror or type(exc).__name__})"
        run["problem"] = config_problem or summary_problem or rounds_problem
        # a run on random weights: its accuracy is no result, never drawn or listed (fedtext.records.reader)
        run["random_weights"] = random_weights(run["config"])
        return _derive(without_accuracy(run) if run["random_weights"] else run, self.experiment)

    def loaded(self, run_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The runs whose id is in ``run_ids`` (all when None)."""
        runs = self.runs()
        if run_ids is None:
            return runs
        wanted = set(run_ids)
        return [r for r in runs if r["run_id"] in wanted]


def _derive(run: dict[str, Any], experiment: str | None = None) -> dict[str, Any]:
    """Status, label, experiment and notes of one loaded run (``experiment``: the one the
    caller named for every run, :class:`RunStore`).

    A run with a ``problem`` (a record file that is not its record) or without a
    ``config.json`` (nothing places it in an experiment) is ``malformed``, its reason in
    the note; its config, when readable, still names it, its rounds are never drawn.
    """
    cfg_file = run["config"]  # read_config: None, or an object whose "config" is an object of single values
    cfg = cfg_file["config"] if cfg_file is not None else None
    if cfg is None and not run["problem"]:
        run["problem"] = "config.json missing"
    notes = [RANDOM_WEIGHTS_NOTE] if run.get("random_weights") else []
    if run["malformed_lines"]:
        notes.append(f"{run['malformed_lines']} malformed line(s) in rounds.jsonl")
    summary = run["summary"] or summarize(run["rounds"])  # summarize never raises on garbled fields
    # the privacy spent, from the rounds where the summary was written before it had it
    summary = {**privacy_spent(run["rounds"]), **summary}
    run["cfg"] = cfg or {}
    run["status"], run["reason"] = run_status(run)
    if run["reason"] and run["status"] != "finished":
        notes.append(str(run["reason"])[:200])
    run["summary_or_partial"] = summary
    run["note"] = "; ".join(notes)
    compared = experiment or compare_experiment(Path(run["dir"]), Path(run["root"]))
    run["label"] = label_of(run["cfg"], with_options=compared is None)
    run["experiment"] = compared or _hand_experiment(run["cfg"])
    return run


@functools.lru_cache(maxsize=8)
def _store(root: str) -> RunStore:
    return RunStore(root)


def store(root: str | Path | RunStore) -> RunStore:
    """The cached :class:`RunStore` of a folder (one per resolved path)."""
    return root if isinstance(root, RunStore) else _store(str(Path(root).resolve()))


# ------------------------------------------------------------------- tables
def runs_table(root: str | Path | RunStore) -> pd.DataFrame:
    """One row per run directory: what the run list shows (status running/finished/failed/stale/malformed)."""
    rows = []
    for run in store(root).runs():
        cfg, summary = run["cfg"], run["summary_or_partial"]
        rows.append({
            "run_id": run["run_id"],
            "experiment": run["experiment"],
            "label": run["label"],
            "method": cfg.get("method"),
            "dataset": Path(str(cfg.get("dataset", ""))).name or None,
            "partition": cfg.get("partition"),
            "seed": cfg.get("seed"),
            "holdout": cfg.get("holdout") or "",
            "options": method_options(cfg),
            "status": run["status"],
            "rounds_done": summary.get("rounds_done"),
            "final_accuracy": summary.get("final_accuracy"),
            "best_accuracy": summary.get("best_accuracy"),
            "p_accuracy": summary.get("p_accuracy"),
            "np_accuracy": summary.get("np_accuracy"),
            "total_bytes_up": _num(summary.get("total_bytes_up")),
            "total_bytes_down": _num(summary.get("total_bytes_down")),
            "epsilon": epsilon_number(summary),
            "dp_delta": record_number(summary.get("dp_delta")),
            "note": run["note"],
        })
    table = pd.DataFrame(rows, columns=RUN_COLUMNS)
    if table["seed"].isna().any():
        # a run without a seed (a malformed config) must not turn the others' 0 into 0.0 and
        # itself into NaN: the seed filter offers and matches the recorded values
        table["seed"] = pd.Series([row["seed"] for row in rows], index=table.index, dtype=object)
    return table


def epsilon_number(summary: dict[str, Any]) -> float | None:
    """A run's ε spent (summary ``epsilon``) as the run list sorts it: ``inf`` for a DP run that
    added no noise (``dp`` set, ``epsilon`` null: no bound), None without DP; shown by
    :func:`epsilon_text`."""
    if summary.get("dp") is None:
        return None
    eps = record_number(summary.get("epsilon"))
    return math.inf if eps is None else eps


def epsilon_text(v: Any) -> str:
    """An ε of the run list (:func:`epsilon_number`) as text: ``2.31``, ``∞`` (no bound),
    ``""`` (no DP)."""
    if isinstance(v, float) and v == math.inf:
        return "∞"
    x = record_number(v)
    return "" if x is None else f"{x:.2f}"


def _num(v: Any) -> float:
    """A record's number, 0 for anything else (a garbled field never breaks a table)."""
    return record_number(v) or 0.0


def record_number(v: Any) -> float | None:
    """A record's number as a float, None for anything else (:func:`fedtext.records.finite_number`)."""
    x = finite_number(v)
    return None if x is None else float(x)


# ------------------------------------------------------------------- bytes as text, sorting
# Byte counts are shown in binary units, KB = 1,024 B, MB = 1,024 KB = 2**20 B, GB = 2**30 B:
# the units simulations/tables.py ("KB up / client-round" = bytes / 1024, "MB up (total)" =
# bytes / 2**20), the records' memory fields (client_peak_rss_mb: 2**20 B) and their progress
# line (fedtext.records.progress_line: bytes / 1024 "KB") use. The chart axes' tick labels are
# plain numbers with SI prefixes instead (20k = 20,000 bytes: short_number).
BYTE_UNITS = ("B", "KB", "MB", "GB", "TB", "PB", "EB")
BYTE_STEP = 1024


def byte_text(v: Any) -> str:
    """A byte count as text to three significant figures, in the largest unit that keeps its
    number under 1,000 (KB = 1,024 B: :data:`BYTE_UNITS`): ``0 B``, ``528 B``, ``999 B``,
    ``0.977 KB`` (1,000 B), ``1.00 KB`` (1,024 B), ``12.1 KB``, ``2.38 MB``, ``88.7 MB``,
    ``1.31 GB``. Under 1,000 B a fraction (a mean, a std) keeps at most 2 decimals (``0.5 B``;
    ``264.5`` -> ``264 B``; under 0.005 B: ``0 B``). ``""`` for None, NaN, infinity, a boolean
    or anything not a number."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return ""
    x = float(v)
    if not math.isfinite(x):
        return ""
    if abs(x) < 0.005:  # a std of equal counts can be 1e-13 in floats
        return "0 B"
    unit = 0
    shown = float(f"{x:.3g}")  # 999.6 B rounds to 1,000: shown as 0.976 KB, never "1e+03 B"
    while abs(shown) >= 1000 and unit < len(BYTE_UNITS) - 1:
        x /= BYTE_STEP
        unit += 1
        shown = float(f"{x:.3g}")
    if unit == 0:
        return f"{shown:.2f}".rstrip("0").rstrip(".") + " B"
    digits = max(0, 2 - math.floor(math.log10(abs(shown)))) if shown else 2
    return f"{shown:,.{digits}f} {BYTE_UNITS[unit]}"


def sort_rows(df: pd.DataFrame, sort_by: list[dict[str, Any]] | None) -> pd.DataFrame:
    """``df`` sorted as a DataTable's ``sort_by`` says (``[{"column_id": .., "direction":
    "asc" | "desc"}, ...]``, the first the primary key): numbers by value (a bytes column by
    its count, before :func:`byte_text` makes it text), anything else by its text; empty
    cells (None, NaN, "") last either way, ties in the rows' order. An unknown column is
    ignored. What the run list does with ``sort_action="custom"``: DataTable's own sort
    would order ``"12.1 KB"`` before ``"528 B"``."""
    for rule in reversed(sort_by or []):
        column = rule.get("column_id") if isinstance(rule, dict) else None
        if column not in df.columns:
            continue
        values = df[column]
        filled = values.dropna()
        filled = filled[filled.astype(str) != ""]
        numeric = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in filled)
        key = pd.to_numeric(values, errors="coerce") if numeric else values.map(
            lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) or v == "" else str(v))
        order = key.sort_values(ascending=rule.get("direction") != "desc", kind="stable", na_position="last").index
        df = df.loc[order]
    return df


# ------------------------------------------------------------------- what each column is
# The comparison table's byte columns: simulations.tables' field -> (bytes in one unit of its
# number, the column's name here, its help's key). tables gives them in fixed units ("MB up
# (total)" to 2 decimals: bbt-fed's 10 KB read 0.01); here each value takes its own (byte_text).
COMPARE_BYTES = {
    "kb_up_per_client_round": (1024, "bytes up / client-round", "bytes_up_per_client_round"),
    "kb_down_per_client_round": (1024, "bytes down / client-round", "bytes_down_per_client_round"),
    "mb_up": (2**20, "bytes up (total)", "total_bytes_up"),
    "mb_down": (2**20, "bytes down (total)", "total_bytes_down"),
}
COMPARE_GROUPS = ("variant", "backbone", "dataset", "partition", "runs")  # the comparison's columns that are no mean


# One definition per column: a column that appears in several tables (the run list's
# final_accuracy is the comparison's "final acc") has one help text, shown as the tooltip of
# its header wherever it appears (column_help). tests/unit/test_dashboard.py checks every
# column any table can show has one.
COLUMN_HELP: dict[str, str] = {
    # the run list (runs_table)
    "run_id": "The run's id: its folder's name under the records (start time, method, dataset, seed). "
              "Click a cell for the run's drill-down.",
    "experiment": "The experiment the run belongs to: the one --experiment names, else the compare runner's "
                  "output folder (experiment.json) under --runs, or, for a run started by hand, dataset · "
                  "partition · shots per class.",
    "label": "The run's line on the charts: its variant (run-config run-name), else its method, plus, for a "
             "hand-started run, the method options that differ from their defaults. Seeds of one label are "
             "averaged (mean ± std).",
    "method": "The federated method (run-config method).",
    "dataset": "The dataset (run-config dataset, its folder's name).",
    "partition": "How the training data is split over the clients (run-config partition: iid, dirichlet with "
                 "concentration α, ...).",
    "seed": "The run's seed (run-config seed).",
    "holdout": "The held-out (non-participant) clients: partition ids or domain names that never train "
               "(run-config holdout); empty: none.",
    "options": "The run's own method options that differ from the method's defaults (method.key=value).",
    "status": "running (the server's heartbeat is fresh), finished or failed (summary.json; the error in the note), "
              "stale (no heartbeat for stale-after-s: the server died), malformed (a record file is not a "
              "record: the reason in the note; never charted or counted).",
    "rounds_done": "The last round recorded (round 0 is the initial model's evaluation, before training).",
    "final_accuracy": "Global accuracy: the global model's accuracy on the server's test split after the last "
                      "evaluated round (a fraction, 0-1).",
    "best_accuracy": "The highest global accuracy (server's test split) of any round, round 0 included (0-1).",
    "initial_accuracy": "Global accuracy of the initial model (round 0, before training) on the server's test "
                        "split (0-1).",
    "final_client_accuracy_mean": "Mean over the evaluated clients of their accuracy on their own test splits in "
                                  "the last round that evaluated clients (0-1).",
    "p_accuracy": "P acc: mean accuracy of the participating clients on their own test splits after post-tuning "
                  "(FedDLS §5.1); the global prompt's when there was no post-tuning. From the last round that "
                  "evaluated clients (0-1).",
    "np_accuracy": "NP acc: the same for the held-out (non-participant) clients, which never trained: mean "
                   "accuracy on their own test splits after post-tuning (FedDLS §5.1), the global prompt's when "
                   "there was no post-tuning (0-1).",
    "total_bytes_up": "Bytes uploaded by all clients over the run: measured serialized fit uploads, summed over "
                      "clients and rounds. B, KB = 1,024 B, MB = 1,024 KB, GB = 1,024 MB; 3 significant figures.",
    "total_bytes_down": "Bytes downloaded by all clients over the run: measured serialized fit downloads (the "
                        "global state sent to each trained client), summed over clients and rounds. B, KB = "
                        "1,024 B, MB = 1,024 KB, GB = 1,024 MB; 3 significant figures.",
    "epsilon": "ε: the privacy the run spent, client-level (ε, δ)-differential privacy at its dp-delta δ (the "
               "comparison says it in brackets), from the RDP accountant after its last round (rounds.jsonl "
               "privacy.epsilon; DP runs only: dp=central or local; -: no DP). ∞: no noise was added (dp-noise=0), "
               "no bound. Smaller is more private.",
    "dp_delta": "δ: the dp-delta the run's ε holds at (the probability the ε bound may fail); DP runs only.",
    "note": "What to know about the run: malformed lines in rounds.jsonl, the error of a failed run, why a run "
            "is stale or malformed. Hover a cell for the whole text.",
    # the comparison table (simulations.tables.compare_table; the byte columns: COMPARE_BYTES)
    "variant": "The variant: the run-config run-name (the compare runner's label, e.g. feddls-phi3), else the "
               "method. One row per variant, dataset and partition.",
    "backbone": "The backbone the row's runs used (run-config model, without its hub owner); shown where the "
                "selected runs used several: the same comparison on each backbone, a row each.",
    "runs": "How many runs the row's mean ± std is over (seeds, and held-out groups for P/NP experiments).",
    "trainable_parameters": "Parameters the method's model trains (config.json trainable-parameters, recorded "
                            "by the server at the start).",
    "bytes_up_per_client_round": "Bytes one client uploads in one round: a run's mean over trained rounds of the "
                                 "round's bytes up per uploading client (measured serialized bytes). KB = 1,024 B, "
                                 "MB = 1,024 KB.",
    "bytes_down_per_client_round": "Bytes one client downloads in one round: a run's mean over trained rounds of "
                                   "the round's bytes down per client (measured serialized bytes). KB = 1,024 B, "
                                   "MB = 1,024 KB.",
    "model_queries": "Sequences the clients pushed through the backbone over the run (fit + eval), summed over "
                     "clients and rounds.",
    "peak_client_rss_mb": "Peak resident memory of a client process over the run, in MB (2**20 bytes).",
    "peak_client_gpu_mb": "Peak GPU memory torch allocated in a client over the run, in MB (2**20 bytes); clients "
                          "on a GPU only.",
    "client_s_per_round": "A client's local training seconds per client-round (client_fit_s / num_clients, mean "
                          "over rounds).",
    "server_distill_s_per_round": "Seconds the server spent distilling per round (FedDRS, FedDF; mean over "
                                  "trained rounds).",
    "server_peak_mb": "Peak resident memory of the server process, reported by methods that distil on the "
                      "server (FedDRS), in MB (2**20 bytes).",
    "wall_time_s": "Wall-clock seconds from the strategy's start to the run's end.",
    # a run's rounds in the drill-down (run_detail: one rounds.jsonl line a row)
    "round": "The round (0: the initial model, evaluated before any training).",
    "global_accuracy": "The global model's accuracy on the server's test split after this round (0-1; empty: "
                       "not evaluated this round).",
    "global_loss": "The global model's loss on the server's test split after this round.",
    "client_accuracy_mean": "Mean over the clients evaluated this round of the global model's accuracy on their "
                            "own test splits (0-1).",
    "num_clients": "Clients whose fit result was aggregated this round.",
    "bytes_up": "Bytes uploaded this round: measured serialized fit uploads, summed over clients. KB = 1,024 B, "
                "MB = 1,024 KB, GB = 1,024 MB; 3 significant figures.",
    "bytes_down": "Bytes downloaded this round: measured serialized fit downloads, summed over clients. KB = "
                  "1,024 B, MB = 1,024 KB, GB = 1,024 MB; 3 significant figures.",
    "model_queries_round": "Sequences the clients pushed through the backbone this round (fit + eval).",
    "train_loss": "Mean of the clients' reported local training losses this round.",
    "dropped": "Fit results the server did not use, and clients that failed, this round: client: reason.",
    "round_time_s": "Seconds the round took (wall clock).",
    "method_metric": "A scalar the method reports from aggregation (rounds.jsonl method_metrics), e.g. FedBPT's "
                     "sigma_prime; its unit is the method's.",
    # a run's config in the drill-down (config_table) and the ticked runs' config diff
    "key": "A run-config key (config.json).",
    "value": "This run's value of the key (JSON but for text; (not set): the run lacks the key).",
    "others": "The values the other compared runs (the ticked runs, else the listed ones) have where they differ "
              "from this run's; empty: the same in every compared run.",
    "diff_run": "This run's value of the key (its label above its id; (not set): the run lacks the key).",
    # the per-client view's table (dashboard_explore.client_spread)
    "clients": "Clients the global model was evaluated on this round.",
    "min": "The lowest client accuracy this round: the global model on a client's own test split (0-1).",
    "median": "The median client accuracy this round (0-1; the mean of the middle two for an even number).",
    "max": "The highest client accuracy this round (0-1).",
    "worst_client": "The client (partition id) with the lowest accuracy this round (on a tie the first id).",
}

# Which help a table's column takes where its id is not its help's key (a comparison column
# is named as the page shows it; a drill-down round's model_queries is that round's, not the
# run's total); a "m:" column of the drill-down is a method metric, every column of the config
# diff but "key" a run.
TABLE_HELP_KEYS: dict[str, dict[str, str]] = {
    "compare": {"method": "variant", **{name: key for _, name, key in COMPARE_BYTES.values()}},
    "rounds": {"model_queries": "model_queries_round"},
}


def column_help(column: str, table: str = "runs") -> str | None:
    """What ``column`` of ``table`` holds and its unit (:data:`COLUMN_HELP`), None for a column
    with no help. ``table``: ``runs`` (the run list), ``compare`` (the comparison table, its
    columns as shown: ``final acc``), ``rounds`` (a run's rounds), ``config`` (a run's
    config), ``config-diff`` (its columns but ``key`` are run ids) or ``clients``."""
    from simulations.tables import COLUMNS

    if table == "config-diff" and column != "key":
        return COLUMN_HELP["diff_run"]
    if table == "rounds" and column.startswith("m:"):
        return f"{column[2:]}: {COLUMN_HELP['method_metric']}"
    key = TABLE_HELP_KEYS.get(table, {}).get(column, column)
    if table != "compare":
        return COLUMN_HELP.get(key)
    if key not in COLUMN_HELP:
        key = {name: field for field, name in COLUMNS.items()}.get(column, key)
    text = COLUMN_HELP.get(key)
    if text and key not in COMPARE_GROUPS:
        text += " Here: the mean ± std over the row's runs (the value alone for one run)."
    return text


def header_tooltips(columns: Iterable[str], table: str = "runs") -> dict[str, str]:
    """A DataTable's ``tooltip_header``: each column's :func:`column_help` (columns without
    one left out)."""
    return {c: text for c in columns if (text := column_help(c, table))}


SERIES_COLUMNS = [
    "run_id", "experiment", "label", "run_label", "seed", "round", "global_accuracy", "global_loss",
    "cum_bytes_up", "cum_bytes_down", "cum_bytes_total", "cum_model_queries", "cum_sim_time_s",
    "client_acc_min", "client_acc_mean", "client_acc_max", "client_peak_rss_mb", "wall_time_s", "epsilon",
]


def round_series(root: str | Path | RunStore, run_ids: list[str] | None = None) -> pd.DataFrame:
    """One row per (run, round) for the charts: accuracy and loss, cumulative bytes up, down
    and both, cumulative model queries and simulated device time, per-client accuracy
    spread, client peak memory, wall time, and (DP runs) the ε spent so far. Malformed runs
    are left out."""
    rows = []
    for run in store(root).loaded(run_ids):
        if run["status"] != "malformed":
            if "series_rows" not in run:  # once per version of the run's files
                run["series_rows"] = _series_rows(run)
            rows.extend(run["series_rows"])
    df = pd.DataFrame(rows, columns=SERIES_COLUMNS)
    num = SERIES_COLUMNS[SERIES_COLUMNS.index("global_accuracy"):]
    df[num] = df[num].astype(float)
    return df


def _series_rows(run: dict[str, Any]) -> list[tuple]:
    cfg = run["cfg"]
    run_label = f"{run['label']} s{cfg.get('seed', '?')}" + (f" -{cfg['holdout']}" if cfg.get("holdout") else "")
    rows = []
    up = down = queries = 0.0
    sim: float | None = None
    private = any(isinstance(r.get("privacy"), dict) for r in run["rounds"])
    for r in sorted(run["rounds"], key=lambda r: r["round"]):
        up += _num(r.get("bytes_up"))
        down += _num(r.get("bytes_down"))
        queries += _num(r.get("model_queries"))
        step = record_number(r.get("sim_time_s"))
        if step is not None:
            sim = (sim or 0.0) + step
        accs = r.get("client_accuracy")
        accs = [a for a in map(record_number, accs.values()) if a is not None] if isinstance(accs, dict) else []
        rows.append((
            run["run_id"], run["experiment"], run["label"], run_label, cfg.get("seed"), r["round"],
            record_number(r.get("global_accuracy")), record_number(r.get("global_loss")),
            up, down, up + down, queries, sim,
            min(accs) if accs else None, sum(accs) / len(accs) if accs else None, max(accs) if accs else None,
            record_number(r.get("client_peak_rss_mb")), record_number(r.get("wall_time_s")),
            _epsilon(r, private),
        ))
    return rows


def _epsilon(record: dict[str, Any], private: bool) -> float | None:
    """The ε a DP run had spent by the end of this round (its ``privacy`` entry's, cumulative); 0 for
    a DP run's round 0 (nothing released yet); None without DP, or where no noise gave no bound."""
    entry = record.get("privacy")
    if isinstance(entry, dict):
        return record_number(entry.get("epsilon"))
    return 0.0 if private and record.get("round") == 0 else None


def aggregate(series: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Seeds aggregated per (experiment, label, round): mean x, mean y, sample std of y (ddof=1,
    NaN for one run) and the number of runs with a value, over the runs that have y there.

    Averaging at equal rounds is how the papers draw seed bands; on the bytes axes the
    runs of a label have the same x, on time axes x is the mean over seeds.
    """
    cols = ["experiment", "label", "round", "x", "y", "std", "n"]
    if series.empty:
        return pd.DataFrame(columns=cols)
    d = series.dropna(subset=[x, y])
    if d.empty:
        return pd.DataFrame(columns=cols)
    g = d.groupby(["experiment", "label", "round"], sort=True)
    means = g[list(dict.fromkeys([x, y]))].mean()  # x may be y (queries against queries)
    out = pd.DataFrame({"x": means[x], "y": means[y], "std": g[y].std(), "n": g[y].count()})
    return out.reset_index()[cols]


def comparison(root: str | Path | RunStore, run_ids: list[str] | None = None) -> pd.DataFrame:
    """The papers' kind of table (mean ± std over seeds) for the selected runs
    (:func:`simulations.tables.compare_table`), its byte columns in units that keep small
    and large values readable (:data:`COMPARE_BYTES`, :func:`byte_text`)."""
    from simulations.tables import COLUMNS, compare_keys, compare_table, run_rows

    runs = run_rows(r for r in store(root).loaded(run_ids) if r["status"] != "malformed")
    if runs.empty:
        return pd.DataFrame()
    table = compare_table(runs)
    by = compare_keys(runs)  # a row per backbone where the selection has several
    groups = {key: g for key, g in runs.groupby(by, sort=False, dropna=False)}
    shown = {"variant": "method", "model": "backbone"}
    keys = list(zip(*(table[shown.get(k, k)] for k in by), strict=True))
    for column, (scale, name, _) in COMPARE_BYTES.items():
        shown = COLUMNS.get(column)
        if shown in table.columns and column in runs.columns:
            table[shown] = [bytes_mean_std(pd.to_numeric(groups[k][column], errors="coerce").dropna() * scale)
                            if k in groups else "-" for k in keys]
            table = table.rename(columns={shown: name})
    return table


def bytes_mean_std(values: pd.Series) -> str:
    """``2.38 MB ± 12.1 KB``: the mean and sample std of byte counts (:func:`byte_text`; the
    mean alone for one value, ``-`` for none, as :func:`simulations.tables.compare_table`)."""
    if values.empty:
        return "-"
    mean = byte_text(values.mean())
    return mean if len(values) == 1 else f"{mean} ± {byte_text(values.std(ddof=1))}"


def run_detail(root: str | Path | RunStore, run_id: str) -> tuple[pd.DataFrame, str]:
    """A run's rounds as a table (accuracy, bytes, queries, dropped clients with their
    reasons, the method's own metrics such as FedBPT's σ′) and, as JSON text, its status,
    note, summary, start and machine (its config is :func:`config_table`'s)."""
    runs = store(root).loaded([run_id])
    if not runs:
        return pd.DataFrame(), f"no run {run_id}"
    run = runs[0]
    rows = []
    for r in sorted(run["rounds"], key=lambda r: r["round"]):
        dropped = r.get("dropped") if isinstance(r.get("dropped"), list) else []
        row = {
            "round": r["round"], "global_accuracy": record_number(r.get("global_accuracy")),
            "global_loss": record_number(r.get("global_loss")), "client_accuracy_mean": record_number(r.get("client_accuracy_mean")),
            "num_clients": _cell(r.get("num_clients")), "bytes_up": _cell(r.get("bytes_up")),
            "bytes_down": _cell(r.get("bytes_down")), "model_queries": _cell(r.get("model_queries")),
            "train_loss": record_number(r.get("train_loss")),
            "dropped": "; ".join(f"{d.get('client')}: {d.get('reason')}" for d in dropped if isinstance(d, dict)),
            "round_time_s": record_number(r.get("round_time_s")),
        }
        metrics = r.get("method_metrics")
        if isinstance(metrics, dict):
            row.update({f"m:{k}": v for k, v in metrics.items() if isinstance(v, (int, float, str))})
        rows.append(row)
    meta = run["config"] or {}  # config.json as read: None when it is not a record
    text = json.dumps({"run_id": run_id, "status": run["status"], "note": run["note"], "summary": run["summary"],
                       "started": meta.get("started"), "machine": meta.get("machine")}, indent=2, default=str)
    return pd.DataFrame(rows), text


def _cell(v: Any) -> Any:
    """A round field as a table cell: a single value as it is, anything else (a garbled
    field's list or object, which a DataTable refuses) as its short text."""
    return v if isinstance(v, (str, int, float, bool, type(None))) else json.dumps(v)[:80]


ABSENT = "(not set)"  # a config key one of the compared runs lacks


def config_diff(root: str | Path | RunStore, run_ids: list[str]) -> pd.DataFrame:
    """How the configs of ``run_ids`` differ: one row per config key whose value is not the
    same in every run (a key a run lacks differs, shown as :data:`ABSENT`), one column per
    run in the order given, the keys in the order the runs' configs list them. Values are
    compared as JSON (``1`` and ``1.0``, ``true`` and ``1`` differ); a run id with no
    record is left out. Empty (no rows) when the configs are the same."""
    by_id = {r["run_id"]: r for r in store(root).loaded(run_ids)}
    ids = [i for i in dict.fromkeys(run_ids) if i in by_id]
    cfgs = [by_id[i]["cfg"] for i in ids]
    keys = list(dict.fromkeys(k for cfg in cfgs for k in cfg))
    rows = {}
    for key in keys:
        if len({json.dumps(cfg[key], sort_keys=True, default=str) if key in cfg else None for cfg in cfgs}) > 1:
            rows[key] = [cfg[key] if key in cfg else ABSENT for cfg in cfgs]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=ids, dtype=object)
    table.index.name = "key"
    return table


CONFIG_COLUMNS = ["key", "value", "others"]


def value_text(v: Any) -> str:
    """A config value as text (a table cell, a sweep's category): a string as it is
    (:data:`ABSENT` too), else its JSON (``true``, ``[1, 2]``; keys sorted)."""
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)


def config_table(root: str | Path | RunStore, run_id: str, compared: Iterable[str] = ()) -> pd.DataFrame:
    """A run's config as key/value rows (:data:`CONFIG_COLUMNS`), the keys whose values differ
    across the ``compared`` runs and ``run_id`` first (:func:`config_diff`: a key a run lacks
    differs; this run's value :data:`ABSENT` when it is one of them), in the configs' order,
    then the keys that are the same in every compared run, in the run's order. ``others``:
    for a differing key the other runs' values that are not this run's, each once, in the
    runs' order (``"1, 2"``); ``""`` for a key that is the same everywhere. Values are text
    (JSON but for strings). A compared run without a readable config is left out (it would
    make every key differ); no rows for an unknown run or one whose config is unreadable."""
    runs = {r["run_id"]: r for r in store(root).loaded([run_id, *compared])}
    if not runs.get(run_id, {}).get("cfg"):
        return pd.DataFrame(columns=CONFIG_COLUMNS)
    # a malformed run (no readable config) would make every key differ: not compared
    ids = [i for i in dict.fromkeys([run_id, *compared]) if runs.get(i, {}).get("cfg")]
    diff = config_diff(root, ids)
    rows = []
    for key, values in diff.iterrows():
        mine = value_text(values[run_id])
        others = dict.fromkeys(t for c, v in values.items() if c != run_id and (t := value_text(v)) != mine)
        rows.append((key, mine, ", ".join(others)))
    rows += [(key, value_text(v), "") for key, v in runs[run_id]["cfg"].items() if key not in diff.index]
    return pd.DataFrame(rows, columns=CONFIG_COLUMNS)


def integer_dtick(top: float, max_ticks: int = 8) -> int:
    """The tick step of an axis of whole numbers (rounds) from 0 to ``top``: the smallest of
    1, 2, 5, 10, 20, 50, ... that gives at most ``max_ticks`` intervals, so no tick falls
    between two rounds."""
    top, max_ticks = max(float(top), 1.0), max(int(max_ticks), 1)
    step, scale = 1, 1
    while True:
        for m in (1, 2, 5):
            step = m * scale
            if top / step <= max_ticks:
                return step
        scale *= 10


def _digit_ticks(lo: float, hi: float, digits: Iterable[int]) -> list[float]:
    """``d * 10**k`` for every ``d`` in ``digits`` and every decade ``k`` with the value in
    ``[lo, hi]`` (a relative tolerance of 1e-9: 1000 is in ``[1000, 2000]``), ascending."""
    first, last = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    # 3 * 10**-1 is 0.30000000000000004 as a float: 12 significant digits print it back as 0.3
    values = (float(f"{d * 10.0 ** k:.12g}") for k in range(first, last + 1) for d in digits)
    return sorted(v for v in values if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9))


def log_ticks(lo: float, hi: float, max_labels: int = 8) -> tuple[list[float], list[float]]:
    """The labelled (major) and unlabelled (minor) ticks of a log axis from ``lo`` to ``hi``
    (both > 0), so that no label crowds another:

    * the decades (1, 10, 100, ...) when at least 3 fall in the range, the digits 2-9 of
      each decade as minor ticks; when more than ``max_labels`` decades would be labelled,
      every ``s``-th (``s = ceil(decades / max_labels)``, exponents divisible by ``s``) and the
      others as minor ticks;
    * else 1, 2 and 5 times the decades when at least 3 of them fall in the range (the other
      digits minor);
    * else every digit 1-9 times the decades when at least 2 do (a range under a factor of
      5: the labels are few however fine), no minor ticks;
    * else ``([], [])``: a range inside one digit's step (24k to 26k), left to Plotly.

    Plotly's own log ticks ("D1") label every digit 2-9 between decades once the range is
    under about two decades: up to 17 labels on a chart half the page wide.
    """
    if not (lo > 0 and hi >= lo and math.isfinite(hi)):
        return [], []
    decades = _digit_ticks(lo, hi, (1,))
    if len(decades) >= 3:
        step = math.ceil(len(decades) / max(int(max_labels), 1))
        if step == 1:
            return decades, _digit_ticks(lo, hi, range(2, 10))
        major = [v for v in decades if round(math.log10(v)) % step == 0]
        return major, [v for v in decades if v not in major]
    one_two_five = _digit_ticks(lo, hi, (1, 2, 5))
    if len(one_two_five) >= 3:
        return one_two_five, _digit_ticks(lo, hi, (3, 4, 6, 7, 8, 9))
    digits = _digit_ticks(lo, hi, range(1, 10))
    return (digits, []) if len(digits) >= 2 else ([], [])


SI_PREFIXES = ["", "k", "M", "G", "T", "P", "E"]


def short_number(v: float) -> str:
    """A tick label: ``20k``, ``1.5M``, ``2G`` from 1,000 up (SI prefixes, powers of 1,000:
    the axis titles say bytes or queries, so ``1M`` reads as 10**6 of them), ``0.5``, ``20``
    below, at most 3 significant digits."""
    x, i = float(f"{v:.3g}"), 0  # 999.7 rounds to 1,000 first: "1k", not "1e+03"
    while abs(x) >= 1000 and i < len(SI_PREFIXES) - 1:
        x, i = x / 1000, i + 1
    return f"{x:.3g}{SI_PREFIXES[i]}" if abs(x) < 1000 else f"{v:.3g}"


UNKNOWN = "unknown"  # a provenance field the record lacks (recorded before it existed) or could not tell


# How the drill-down names a run's code_origin (fedtext.records.CODE_ORIGINS)
CODE_FROM = {"git": "git checkout", "fab": "Flower app bundle (FAB, installed by Flower)",
             "installed": "installed fedtext package (no checkout, no FAB)"}


def provenance_rows(config_file: dict | None) -> dict[str, str]:
    """The drill-down's provenance block from a run's ``config.json`` (as loaded, or None):
    where the code came from and what names it (:func:`fedtext.records.code_origin`: a
    git commit and tree state; or, under ``flwr run``, the app bundle Flower installed, its
    id, version and SHA-256), package versions, SuperNodes launched, nodes connected at
    training start, Flower's run id (:func:`fedtext.records.provenance`). A field the
    record lacks reads :data:`UNKNOWN`; a run recorded before provenance existed still
    shows its Python version, from ``machine``. A resumed run shows its first start's."""
    meta = config_file if isinstance(config_file, dict) else {}
    prov = meta.get("provenance") if isinstance(meta.get("provenance"), dict) else {}
    versions = prov.get("versions") if isinstance(prov.get("versions"), dict) else {}
    machine = meta.get("machine") if isinstance(meta.get("machine"), dict) else {}
    dirty = prov.get("git_dirty")
    # records from before code_origin existed: a git commit still names the code
    origin = prov.get("code_origin") or ("git" if prov.get("git_commit") else None)
    if origin == "fab":  # a FAB run has no git commit to show: its bundle names the code
        code = {"FAB": " ".join(str(prov[k]) for k in ("fab_id", "fab_version") if prov.get(k)) or None,
                "FAB sha256": prov.get("fab_hash")}
    elif origin == "installed":
        code = {}  # the fedtext row below is all there is
    else:
        code = {"git commit": prov.get("git_commit"),
                "git tree": ("dirty (uncommitted changes)" if dirty else "clean") if isinstance(dirty, bool) else None}
    rows = {
        "code from": CODE_FROM.get(origin) if isinstance(origin, str) else None,
        **code,
        **{name: versions.get(name) for name in PROVENANCE_PACKAGES},
        "python": versions.get("python") or machine.get("python"),
        "SuperNodes launched": prov.get("num_supernodes"),
        "nodes at start": prov.get("nodes_at_start"),
        # partition -> the CPU architecture its node reported: "0: aarch64, 1: x86_64"
        "node platforms": ", ".join(f"{k}: {v}" for k, v in sorted(platforms.items(), key=lambda kv: kv[0].zfill(9)))
        if isinstance(platforms := prov.get("node_platforms"), dict) and platforms else None,
        "Flower run id": prov.get("flower_run_id"),
    }
    return {k: UNKNOWN if v is None else str(v) for k, v in rows.items()}


def run_provenance(root: str | Path | RunStore, run_id: str) -> str:
    """A run's provenance block as text, one ``field: value`` line each (:func:`provenance_rows`)."""
    runs = store(root).loaded([run_id])
    if not runs:
        return f"no run {run_id}"
    rows = provenance_rows(runs[0]["config"])
    width = max(map(len, rows))
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows.items())


# ------------------------------------------------------------------- lines to draw
@dataclass
class Line:
    """One line of a chart, drawn the same way by the dashboard (plotly) and the plot
    command (matplotlib): ``lo``/``hi`` is its band (± std over seeds, or the clients'
    min-max for one run's client accuracy), ``run_id`` is set for a single run's line."""

    experiment: str
    label: str  # the method or variant: one colour, one legend entry
    name: str  # legend text
    color: str
    x: list[float]
    y: list[float]
    lo: list[float] | None = None
    hi: list[float] | None = None
    run_id: str | None = None


def chart_lines(series: pd.DataFrame, chart: Chart, x_axis: str, mode: str = "mean",
                log_x: bool = False, labels: Iterable[str] = ()) -> list[Line]:
    """The lines of one chart: ``mode="mean"`` gives one line per (experiment, label) with a
    ± std band over its seeds; ``mode="runs"`` one line per run. On a log x-axis points at
    x <= 0 (round 0 has sent no bytes) are left out."""
    if mode not in ("mean", "runs"):
        raise ValueError(f"mode must be 'mean' or 'runs', not {mode!r}")
    x = X_AXES[x_axis].column
    labels = sorted(set(labels) | (set(series["label"]) if not series.empty else set()))
    lines: list[Line] = []
    if series.empty:
        return lines
    if mode == "mean":
        agg = aggregate(series, x, chart.y)
        if log_x:
            agg = agg[agg["x"] > 0]
        for (exp, label), g in agg.groupby(["experiment", "label"], sort=True):
            runs = int(g["n"].max())
            std = g["std"].fillna(0.0)
            band = runs > 1
            lines.append(Line(exp, label, f"{label} (n={runs})" if runs > 1 else label, color_of(label, labels),
                              g["x"].tolist(), g["y"].tolist(),
                              (g["y"] - std).tolist() if band else None, (g["y"] + std).tolist() if band else None))
        return lines
    d = series.dropna(subset=[x, chart.y])
    if log_x:
        d = d[d[x] > 0]
    for (exp, run_id), g in d.groupby(["experiment", "run_id"], sort=True):
        g = g.sort_values("round")
        label = g["label"].iloc[0]
        band = chart.y == "client_acc_mean" and g["client_acc_min"].notna().all()
        lines.append(Line(exp, label, g["run_label"].iloc[0], color_of(label, labels), g[x].tolist(),
                          g[chart.y].tolist(), g["client_acc_min"].tolist() if band else None,
                          g["client_acc_max"].tolist() if band else None, run_id=run_id))
    return lines
