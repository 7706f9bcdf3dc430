"""Run records: ``<output-dir>/<run-id>/{config.json, rounds.jsonl, summary.json}``.

The compare runner and the dashboard read nothing but these files, so every method
shows up in comparisons without code changes there.

* ``config.json``: the run-config, the resolved task, the machine, the start time and
  the run's ``provenance`` (:func:`provenance`: git commit and dirty flag of the code,
  package versions, Flower's run id, SuperNodes launched and connected). Records from
  before a field existed lack it; readers show it as unknown.
* ``rounds.jsonl``: one JSON object per round, appended and flushed as the round ends
  (round 0 = the initial global model). Fields: see :data:`ROUND_FIELDS`.
* ``summary.json``: written when the run ends, with ``status`` ``finished`` or
  ``failed`` (and ``error``: the exception, ``terminated by SIGTERM``, ...).
* ``heartbeat``: the epoch time the server last showed it was alive, rewritten every
  few seconds while the run is open. A run without ``summary.json`` whose heartbeat is
  older than its ``stale-after-s`` is ``stale`` (its server was killed with SIGKILL, or
  the SuperLink died), not ``running`` forever: :func:`run_status`.
* ``checkpoint.npz``: the server's state after the last finished round (``fedtext.server_app``: ``resume=<run-id>`` continues from it).
* ``run.log``: the ``fedtext`` logger's lines while the run is open (round lines,
  warnings, progress lines), appended from when the recorder opens the run (or
  reopens it on resume) until it finishes (:class:`RunLogHandler`).
* ``tensorboard/``, ``wandb/``: the files of the experiment trackers ``tracker=`` names
  (:mod:`fedtext.tracking`), fed from the same round records and summary.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import logging
import math
import os
import platform
import resource
import signal
import stat
import subprocess
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedtext.tracking import Trackers

log = logging.getLogger("fedtext")

ROUND_FIELDS = (
    "round",  # 0 = before training
    "global_accuracy",  # server-side, on the global test split (None on rounds not evaluated)
    "global_loss",
    "client_accuracy",  # {partition_id: accuracy on its local test split}
    "client_accuracy_mean",
    "client_accuracy_std",
    "client_post_accuracy",  # {partition_id: accuracy after post-tuning} (last round, post-tune-steps > 0)
    "participants",  # partition ids that may train (the rest are non-participants, FedDLS §5.1)
    "num_clients",  # clients whose fit result was aggregated
    "dropped",  # [{"client": id, "reason": "..."}]: fit results not used, and clients that failed
    "client_failures",  # sampled clients whose fit or evaluate message failed (raised, timed out)
    "bytes_up",  # sum over clients of serialized fit uploads this round
    "bytes_down",  # sum over clients of serialized fit downloads this round
    "bytes_up_per_client",
    "bytes_down_per_client",
    "eval_bytes_down",  # global model sent for client-side evaluation (measurement only)
    "resync_bytes",  # part of bytes_down that re-sent state a client had lost (FedDLS after a node restart)
    "model_queries",  # sequences the clients pushed through the backbone this round (fit + eval)
    "server_queries",  # sequences the server evaluated this round
    "client_peak_rss_mb",  # max over clients of the peak resident memory of their process
    "train_loss",  # mean of the clients' reported local training losses
    "method_metrics",  # scalars a method reports from aggregation (e.g. FedBPT's sigma')
    "clients_evaluated",  # clients sent the global model for local testing (clients-per-eval)
    "client_fit_s",  # sum over clients of local training seconds (fit_time_s)
    "client_fit_s_max",  # the slowest client's training seconds
    "client_eval_s",  # sum over clients of local test seconds (eval_time_s)
    "client_load_s",  # sum over clients of seconds building the client (backbone load on a new actor, data, shots)
    "server_eval_s",  # the server's evaluation of the global model
    "busy_s",  # time some client or the server evaluation was computing (union of their intervals)
    "startup_s",  # time new client processes spent importing torch/transformers/fedtext (first message per Ray actor)
    "overhead_s",  # round_time_s - (busy or start-up): Flower/Ray messaging, scheduling, serialization, aggregation
    "sim_time_s",  # simulated device time of the round: max over fit clients of compute + (down + up bytes) / bandwidth-mbps
    "server_rss_mb",  # resident memory of the server process (ServerApp + strategy) as the round ends
    "round_time_s",
    "wall_time_s",  # since the strategy started
)


@dataclass
class RoundRecord:
    """What the strategy's hooks learn about one round, written as one ``rounds.jsonl`` line.

    ``configure_fit`` fills the download bytes, ``aggregate_fit`` the upload bytes,
    clients, drops and queries, ``evaluate`` the global accuracy, ``aggregate_evaluate``
    the client accuracies; :meth:`to_json` gives exactly :data:`ROUND_FIELDS`.
    """

    round: int
    started: float = field(default_factory=time.time)
    global_accuracy: float | None = None
    global_loss: float | None = None
    client_accuracy: dict[str, float] = field(default_factory=dict)
    client_accuracy_mean: float | None = None
    client_accuracy_std: float | None = None
    client_post_accuracy: dict[str, float] = field(default_factory=dict)
    participants: list[str] | None = None
    num_clients: int = 0
    dropped: list[dict[str, str]] = field(default_factory=list)
    client_failures: int = 0
    resync_bytes: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    bytes_up_per_client: float | None = None
    bytes_down_per_client: float | None = None
    eval_bytes_down: int = 0
    fit_queries: int = 0
    eval_queries: int = 0
    server_queries: int = 0
    client_rss_mb: list[float] = field(default_factory=list)
    train_loss: float | None = None
    method_metrics: dict[str, float] = field(default_factory=dict)
    clients_evaluated: int = 0
    fit_s: list[float] = field(default_factory=list)
    eval_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)
    server_eval_s: float | None = None
    sim_s: list[float] = field(default_factory=list)  # per fit client: compute + bytes / bandwidth
    intervals: list[tuple[float, float]] = field(default_factory=list)  # (start, end) epoch seconds
    startup: list[tuple[float, float]] = field(default_factory=list)  # process imports, same clock
    written: bool = False

    def drop(self, client: Any, reason: str) -> None:
        """Note a client result the server did not use, and why."""
        self.dropped.append({"client": str(client), "reason": reason})

    def timing(self, metrics: dict[str, Any], seconds_key: str) -> None:
        """Note a client's compute seconds (``fit_time_s`` / ``eval_time_s``), build
        seconds, busy interval and, on a process's first message, its start-up
        interval (``startup_start``/``startup_end``) from its reported metrics
        (missing keys: skipped)."""
        target = self.fit_s if seconds_key == "fit_time_s" else self.eval_s
        if seconds_key in metrics:
            target.append(float(metrics[seconds_key]))
        if "load_s" in metrics:
            self.load_s.append(float(metrics["load_s"]))
        if "busy_start" in metrics and "busy_end" in metrics:
            self.intervals.append((float(metrics["busy_start"]), float(metrics["busy_end"])))
        if "startup_start" in metrics and "startup_end" in metrics:
            self.startup.append((float(metrics["startup_start"]), float(metrics["startup_end"])))

    def to_json(self, run_start: float) -> dict[str, Any]:
        """The ``rounds.jsonl`` object (keys = :data:`ROUND_FIELDS`, in that order)."""
        now = time.time()
        round_time = now - self.started
        # Clip to this round: a process may have started (imported) before the round did.
        busy_iv, startup_iv = _clip(self.intervals, self.started, now), _clip(self.startup, self.started, now)
        busy = busy_seconds(busy_iv) if self.intervals or self.server_eval_s is not None else None
        accounted = busy_seconds(busy_iv + startup_iv)
        return {
            "round": self.round,
            "global_accuracy": self.global_accuracy,
            "global_loss": self.global_loss,
            "client_accuracy": self.client_accuracy,
            "client_accuracy_mean": self.client_accuracy_mean,
            "client_accuracy_std": self.client_accuracy_std,
            "client_post_accuracy": self.client_post_accuracy,
            "participants": self.participants,
            "num_clients": self.num_clients,
            "dropped": self.dropped,
            "client_failures": self.client_failures,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_up_per_client": self.bytes_up_per_client,
            "bytes_down_per_client": self.bytes_down_per_client,
            "eval_bytes_down": self.eval_bytes_down,
            "resync_bytes": self.resync_bytes,
            "model_queries": self.fit_queries + self.eval_queries,
            "server_queries": self.server_queries,
            "client_peak_rss_mb": max(self.client_rss_mb) if self.client_rss_mb else None,
            "train_loss": self.train_loss,
            "method_metrics": self.method_metrics,
            "clients_evaluated": self.clients_evaluated,
            "client_fit_s": _round(sum(self.fit_s)) if self.fit_s else None,
            "client_fit_s_max": _round(max(self.fit_s)) if self.fit_s else None,
            "client_eval_s": _round(sum(self.eval_s)) if self.eval_s else None,
            "client_load_s": _round(sum(self.load_s)) if self.load_s else None,
            "server_eval_s": _round(self.server_eval_s),
            "busy_s": _round(busy),
            "startup_s": _round(busy_seconds(startup_iv)) if startup_iv else None,
            "overhead_s": None if busy is None else _round(max(0.0, round_time - accounted)),
            "sim_time_s": _round(max(self.sim_s)) if self.sim_s else None,
            "server_rss_mb": round(current_rss_mb(), 1),
            "round_time_s": round(round_time, 3),
            "wall_time_s": round(now - run_start, 3),
        }


def _clip(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """``intervals`` cut to ``[lo, hi]`` (a process may have started before the round did)."""
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals: the time at least one of them
    was running. ``[(0, 2), (1, 3), (5, 6)]`` -> 3 + 1 = 4.0."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb() -> float:
    """Resident memory of this process now, in MiB (``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def machine() -> dict[str, Any]:
    """Where a run happened (README numbers quote it)."""
    return {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


# The packages whose versions decide a run's numbers (recorded in its provenance).
PROVENANCE_PACKAGES = ("fedtext", "flwr", "torch", "transformers", "numpy")
# What the process starting the server knows of the run (None when it does not):
# Flower's run id, the SuperNodes a simulation launched, the nodes connected at training start.
LAUNCH_FIELDS = ("flower_run_id", "num_supernodes", "nodes_at_start")
GIT_TIMEOUT_S = 5.0  # a hung git (network file system, lock) must not hold up a run


def provenance(launch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What made a run: the code (:func:`git_state` of this module's checkout), the package
    versions (:func:`package_versions`) and ``launch``'s :data:`LAUNCH_FIELDS` (None where
    not given). Costs three short git calls and no import.

    Parameters
    ----------
    launch
        Fields of :data:`LAUNCH_FIELDS` the caller knows (e.g. ``{"flower_run_id": 7}``).

    Raises
    ------
    ValueError
        ``launch`` holds a key that is not one of :data:`LAUNCH_FIELDS`.
    """
    return {**git_state(), "versions": package_versions(), **dict.fromkeys(LAUNCH_FIELDS), **launch_fields(launch)}


def launch_fields(fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """``fields`` as a dict, after checking every key is one of :data:`LAUNCH_FIELDS`
    (raises ``ValueError`` naming the others)."""
    unknown = set(fields or {}) - set(LAUNCH_FIELDS)
    if unknown:
        raise ValueError(f"unknown provenance fields {sorted(unknown)} (known: {', '.join(LAUNCH_FIELDS)})")
    return dict(fields or {})


def git_state(path: Path = Path(__file__)) -> dict[str, Any]:
    """``{"git_commit": <40 hex digits>, "git_dirty": <bool>}`` of the git checkout that
    tracks ``path`` (default: this module), or None values where that cannot be told: git
    missing or hung (:data:`GIT_TIMEOUT_S`), no checkout, or ``path`` not tracked there (an
    installed copy inside some repository's ignored virtualenv is not that repository's
    code). Dirty: a tracked file differs from the commit (untracked files, such as new
    results, do not count).
    """
    path = Path(path).resolve()

    def git(*args: str) -> str | None:
        try:  # --no-optional-locks: never write the index of a tree others are working in
            proc = subprocess.run(["git", "--no-optional-locks", "-C", str(path.parent), *args],
                                  capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    if git("ls-files", "--error-unmatch", "--", path.name) is None or (commit := git("rev-parse", "HEAD")) is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit.strip(), "git_dirty": None if status is None else bool(status.strip())}


def package_versions() -> dict[str, str | None]:
    """Installed versions of :data:`PROVENANCE_PACKAGES` (None: not installed) and Python's,
    read from package metadata (nothing is imported)."""

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {**{name: version(name) for name in PROVENANCE_PACKAGES}, "python": platform.python_version()}


FINISHED = "finished"  # the status of a run that completed (summary.json); the others: run_status
HEARTBEAT_FILE = "heartbeat"
DEFAULT_STALE_AFTER_S = 300.0  # the run-config default of stale-after-s
_OPEN: "weakref.WeakSet[RunRecorder]" = weakref.WeakSet()  # recorders without a summary yet


def run_folder_name(config: Mapping[str, Any], when: _dt.datetime | None = None) -> str:
    """The folder name of a new run: ``<stamp>-<method>-<dataset>-s<seed>[-<run-name>]``.

    A part the run-config does not hold (a refused start's config may lack any key) is left
    out rather than written as ``None``, and each part is reduced to one path component
    (separators become ``_``), so a refused start's odd ``method`` or ``run-name`` can
    neither read as ``None`` nor point outside ``output-dir``. A run-config that holds its
    keys, none with a ``/``, is named as it always was.

    Parameters
    ----------
    config
        The flattened run-config (``method``, ``dataset``, ``seed``, ``run-name``).
    when
        The start time in the name (default: now).

    Returns
    -------
    str
        E.g. ``20261122-220455-bbt-fed-demo-s0``.
    """
    stamp = (when or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    method, dataset, seed = config.get("method"), config.get("dataset"), config.get("seed")
    parts = [_path_part(x) for x in (
        stamp,
        "" if method is None else str(method),
        "" if dataset is None else Path(str(dataset)).name,
        "" if seed is None else f"s{seed}",
        str(config.get("run-name") or ""),
    )]
    return "-".join(x for x in parts if x)


def _path_part(text: str) -> str:
    """``text`` as one harmless path component: ``/`` and NUL -> ``_``; ``.``/``..`` -> ``""``
    (a ``run-name`` such as ``a/b`` used to open a sub-folder that ``status`` never finds)."""
    text = text.replace("/", "_").replace("\0", "_")
    return "" if text in (".", "..") else text


RUN_LOG_FILE = "run.log"
_LEVEL_BEFORE_RUN_LOGS = logging.NOTSET  # the fedtext logger's level before the first open run log


class RunLogHandler(logging.Handler):
    """Appends the ``fedtext`` logger's records to a run's ``run.log``.

    The file is opened for each line (a run writes a few lines a round) so that no
    descriptor stays open; a line that cannot be written (a full disk, a removed
    folder) is skipped silently: the console still has it.
    """

    fedtext_run_log = True  # not a console route (fedtext.progress.setup_logging)

    def __init__(self, path: Path) -> None:
        super().__init__(logging.INFO)
        self.path = path
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except Exception:  # noqa: BLE001 - a log line must never stop a run
            pass


class RunRecorder:
    """Writes one run's records. Created by the ServerApp, fed by the strategy.

    While the run is open a daemon thread rewrites ``heartbeat`` every
    ``stale-after-s / 10`` seconds (at most 30 s), so a reader tells a long round from a
    dead server. ``resume=True`` reopens the existing folder ``<output-dir>/<run_id>``:
    round lines after ``keep_rounds`` are cut (they were written after the checkpoint
    the run resumes from) and an old ``summary.json`` (``failed``) is removed.

    ``launch`` (:data:`LAUNCH_FIELDS`) goes into ``config.json``'s ``provenance`` with the
    code's (:func:`provenance`); a resumed run records its own process's in its
    ``resumed`` entry (the code may have changed in between).

    ``trackers`` (names of :data:`fedtext.tracking.TRACKERS`, their packages checked
    before) get every round record and the summary too (:class:`fedtext.tracking.Trackers`).
    The ``fedtext`` logger's lines go to ``run.log`` in the folder from the start until
    :meth:`finish` (:class:`RunLogHandler`).
    """

    def __init__(self, output_dir: str | Path, config: dict[str, Any], run_id: str | None = None,
                 resume: bool = False, keep_rounds: int | None = None,
                 launch: Mapping[str, Any] | None = None, trackers: tuple[str, ...] = ()) -> None:
        self._tracker_names = tuple(trackers)
        if resume:
            self._reopen(Path(output_dir).expanduser().resolve() / str(run_id), config, keep_rounds, launch)
            return
        base = run_id or run_folder_name(config)
        root = Path(output_dir).expanduser().resolve()
        self.dir = root / base
        i = 1
        while self.dir.exists():  # two runs started in the same second
            i += 1
            self.dir = root / f"{base}-{i}"
        self.dir.mkdir(parents=True)
        self.run_id = self.dir.name
        self._attach_log()
        self.start = time.time()
        self.rounds: list[dict[str, Any]] = []
        self.config = config
        _write_json(self.dir / "config.json", {
            "run_id": self.run_id, "config": config, "machine": machine(),
            "started": _dt.datetime.now().isoformat(timespec="seconds"), "started_epoch": self.start,
            "provenance": provenance(launch),
        })
        log.info("fedtext: run records -> %s", self.dir)
        self._open()

    def _reopen(self, run_dir: Path, config: dict[str, Any], keep_rounds: int | None,
                launch: Mapping[str, Any] | None) -> None:
        self.dir, self.run_id, self.config = run_dir, run_dir.name, config
        self._attach_log()
        meta = json.loads((run_dir / "config.json").read_text())
        self.start = float(meta.get("started_epoch", time.time()))
        kept = [r for r in load_run(run_dir)["rounds"] if keep_rounds is None or r["round"] <= keep_rounds]
        self.rounds = kept
        tmp = run_dir / "rounds.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        tmp.replace(run_dir / "rounds.jsonl")
        (run_dir / "summary.json").unlink(missing_ok=True)
        meta["config"] = config  # the same but for RESUMABLE_CHANGES (e.g. more rounds)
        meta.setdefault("resumed", []).append({
            "from_round": keep_rounds, "at": _dt.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
            "provenance": provenance(launch)})
        _write_json(run_dir / "config.json", meta)
        log.info("fedtext: resuming run %s after round %s -> %s", self.run_id, keep_rounds, run_dir)
        self._open()

    def note_launch(self, **fields: Any) -> None:
        """Add :data:`LAUNCH_FIELDS` learnt after the start (``nodes_at_start``) to the
        provenance in ``config.json`` (the last ``resumed`` entry's for a resumed run)."""
        fields = launch_fields(fields)
        try:
            meta = json.loads((self.dir / "config.json").read_text())
            entry = meta["resumed"][-1] if meta.get("resumed") else meta
            entry.setdefault("provenance", {}).update(fields)
            _write_json(self.dir / "config.json", meta)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # a provenance note must not stop training (a full disk, a hand-edited file)
            log.warning("fedtext: could not add %s to %s: %s", fields, self.dir / "config.json", exc)

    def _attach_log(self) -> None:
        """Start appending the ``fedtext`` logger's lines to ``run.log`` (INFO and up: a
        logger left at Python's default WARNING is set to INFO until :meth:`finish`)."""
        global _LEVEL_BEFORE_RUN_LOGS
        logger = logging.getLogger("fedtext")
        if not any(getattr(h, "fedtext_run_log", False) for h in logger.handlers):
            _LEVEL_BEFORE_RUN_LOGS = logger.level
        self._log_handler = RunLogHandler(self.dir / RUN_LOG_FILE)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.addHandler(self._log_handler)

    def _detach_log(self) -> None:
        handler = getattr(self, "_log_handler", None)
        if handler is None:
            return
        logger = logging.getLogger("fedtext")
        logger.removeHandler(handler)
        self._log_handler = None
        if not logger.handlers:  # the last open run, and nothing routes the logger (setup_logging) since:
            logger.setLevel(_LEVEL_BEFORE_RUN_LOGS)  # the level the first one found

    def _open(self) -> None:
        """Start the trackers and the heartbeat, and register for :func:`finish_open_runs`."""
        self.trackers = Trackers(self._tracker_names, self.dir, self.run_id, self.config)
        stale = float(self.config.get("stale-after-s", DEFAULT_STALE_AFTER_S))
        self.heartbeat_s = max(0.5, min(30.0, stale / 10))
        self._closed = threading.Event()
        self.beat()
        _OPEN.add(self)
        threading.Thread(target=self._beat_loop, name="fedtext-heartbeat", daemon=True).start()

    def beat(self) -> None:
        """Write the heartbeat (epoch seconds) atomically."""
        tmp = self.dir / f"{HEARTBEAT_FILE}.tmp"
        try:
            tmp.write_text(f"{time.time():.3f}\n")
            tmp.replace(self.dir / HEARTBEAT_FILE)
        except OSError:  # a full disk must not kill training; the reader will say stale
            pass

    def _beat_loop(self) -> None:
        while not self._closed.wait(self.heartbeat_s):
            self.beat()

    def log_round(self, record: dict[str, Any]) -> None:
        """Append one round and print the progress line."""
        self.rounds.append(record)
        with open(self.dir / "rounds.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
        log.info(progress_line(record, int(self.config.get("num-server-rounds", 0))))
        self.trackers.log_round(record)

    def finish(self, status: str = FINISHED, error: str | None = None) -> dict[str, Any]:
        """Write ``summary.json`` (idempotent: the first call wins)."""
        path = self.dir / "summary.json"
        if path.exists():
            return json.loads(path.read_text())
        self._closed.set()
        _OPEN.discard(self)
        summary = summarize(self.rounds)
        summary.update(
            run_id=self.run_id, status=status, error=error,
            method=self.config.get("method"), dataset=self.config.get("dataset"),
            partition=self.config.get("partition"), seed=self.config.get("seed"),
            wall_time_s=round(time.time() - self.start, 2),
        )
        _write_json(path, summary)
        self.beat()
        if status != FINISHED:
            log.error("fedtext: run %s %s: %s", self.run_id, status, error)
        self.trackers.finish(summary)
        self._detach_log()
        return summary


def finish_open_runs(status: str, error: str) -> None:
    """Close every run of this process that has no summary yet (a signal handler's job)."""
    for recorder in list(_OPEN):
        recorder.finish(status, error=error)


def exit_reason(exc: BaseException) -> str:
    """The record's reason for a run ended by ``exc``: ``terminated by SIGTERM`` for the
    ``SystemExit(15)`` Ray's driver handler raises on SIGTERM, ``terminated by SIGINT``
    for ``KeyboardInterrupt``, else the exception's one-line form."""
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code in {s.value for s in signal.Signals}:
        return f"terminated by {signal.Signals(exc.code).name}"
    if isinstance(exc, KeyboardInterrupt):
        return "terminated by SIGINT"
    return "".join(traceback.format_exception_only(exc)).strip()


def signal_reason(signum: int, parent_at_start: int, parent_now: int) -> str:
    """The record's reason for a run ended by signal ``signum``.

    Under a SuperLink, the ServerApp process is started by the SuperLink's SuperExec,
    which exits when the SuperLink dies; the orphaned ServerApp keeps retrying the
    SuperLink and, when one answers that no longer knows its run (a restarted SuperLink),
    Flower sends it SIGINT (``flwr.supercore.retry``): a killed SuperLink read as
    ``terminated by SIGINT``, as if a user had pressed Ctrl-C. A process whose parent
    changed (it was re-parented, so the parent died) says what happened instead."""
    name = signal.Signals(signum).name
    if parent_now != parent_at_start and parent_at_start > 1:
        return (f"the SuperLink went away: the process that started the ServerApp (pid {parent_at_start}) "
                f"had stopped ({name})")
    return f"terminated by {name}"


def install_signal_handlers() -> bool:
    """Record ``failed: terminated by SIGTERM`` (SIGINT, SIGHUP, SIGQUIT alike) in every
    open run before the process goes down the way it would have without us.

    The previous handler (Flower's graceful exit, Python's ``KeyboardInterrupt``) runs
    next; where it was the default action, the process exits with ``128 + signum``.
    Signal handlers can only be set from the main thread: elsewhere (a ServerApp inside
    ``run_simulation``) nothing is installed and ``False`` returned; the caller's main
    thread installs them instead (``simulations.simulate``).
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    parent = os.getppid()  # the SuperLink, for a ServerApp it started (Flower's subprocess isolation)
    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None), getattr(signal, "SIGQUIT", None)):
        if sig is None:
            continue
        previous = signal.getsignal(sig)
        if getattr(previous, "_fedtext", False):
            continue

        def handler(signum: int, frame: Any, previous: Any = previous) -> None:
            finish_open_runs("failed", signal_reason(signum, parent, os.getppid()))
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                os._exit(128 + signum)

        handler._fedtext = True  # type: ignore[attr-defined]
        signal.signal(sig, handler)
    return True


def runs_under(root: str | Path) -> Iterator[dict[str, Any]]:
    """:func:`load_run` of every run directory under ``root`` (any depth), in path order."""
    for cfg_file in sorted(Path(root).rglob("config.json")):
        yield load_run(cfg_file.parent)


def runs_since(output_dir: str | Path, since: float) -> list[dict[str, Any]]:
    """:func:`load_run` of every run under ``output_dir`` started (or resumed) at or after
    ``since`` (epoch seconds): what one command just ran."""
    root = Path(output_dir).expanduser()
    found = []
    for cfg_file in sorted(root.glob("*/config.json")):
        if cfg_file.stat().st_mtime >= since - 1:
            found.append(load_run(cfg_file.parent))
    return found


def read_heartbeat(run_dir: str | Path) -> float | None:
    """The run's last heartbeat (epoch seconds), or None."""
    path = Path(run_dir) / HEARTBEAT_FILE
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        try:
            return path.stat().st_mtime
        except OSError:
            return None


def run_status(run: dict[str, Any], now: float | None = None) -> tuple[str, str | None]:
    """``(status, reason)`` of a :func:`load_run` dict.

    ``malformed``: a record file is not its record (``problem``: :func:`load_run`'s
    reason, e.g. ``summary.json: total_bytes_up is a string, not a number``);
    ``finished``/``failed``: from ``summary.json`` (reason: its ``error``);
    ``malformed``: no summary and no readable round although ``rounds.jsonl`` has lines
    (e.g. binary garbage; the reason names the first such line's fault); ``stale``: no
    summary and no heartbeat for longer than the run's ``stale-after-s`` (its server died
    without a word: SIGKILL, a lost SuperLink);
    else ``running``. A run from before heartbeats falls back to its newest file's time.
    """
    if run.get("problem"):  # a record file that is not its record (load_run's readers)
        return "malformed", str(run["problem"])
    summary = run.get("summary")
    if isinstance(summary, dict) and summary.get("status"):
        return str(summary["status"]), summary.get("error")
    if not run.get("rounds") and run.get("malformed_lines"):
        detail = f" ({run['line_problem']})" if run.get("line_problem") else ""
        return "malformed", f"rounds.jsonl has no readable round{detail}"
    meta = run.get("config") if isinstance(run.get("config"), dict) else {}
    cfg = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    try:
        stale_after = float(cfg.get("stale-after-s", DEFAULT_STALE_AFTER_S))
    except (TypeError, ValueError):
        stale_after = DEFAULT_STALE_AFTER_S
    run_dir = Path(run["dir"])
    beat = read_heartbeat(run_dir)
    if beat is None:
        stamps = [p.stat().st_mtime for p in run_dir.glob("*") if p.is_file()]
        beat = max(stamps) if stamps else None
    if beat is not None and stale_after > 0:
        silence = (time.time() if now is None else now) - beat
        if silence > stale_after:
            return "stale", f"no heartbeat for {silence:.0f} s (> stale-after-s={stale_after:g}): server killed or SuperLink lost"
    return "running", None


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals and best/final accuracy over a run's round records.

    A field of the wrong type (a garbled or hand-edited line) counts as missing, never
    raises: the dashboard and the compare tables call this on whatever is on disk.
    """
    rounds = [r for r in rounds if isinstance(r, dict) and _is_int(r.get("round"))]
    accs = [(r["round"], finite_number(r.get("global_accuracy"))) for r in rounds]
    accs = [(k, a) for k, a in accs if a is not None]
    trained = [r for r in rounds if r["round"] > 0]
    rss = [x for x in (finite_number(r.get("client_peak_rss_mb")) for r in rounds) if x]

    def total(key: str, rows: list[dict[str, Any]]) -> float:
        return sum(finite_number(r.get(key)) or 0 for r in rows)

    return {
        "rounds_done": max((r["round"] for r in rounds), default=0),
        "initial_accuracy": accs[0][1] if accs and accs[0][0] == 0 else None,
        "final_accuracy": accs[-1][1] if accs else None,
        "best_accuracy": max((a for _, a in accs), default=None),
        "final_client_accuracy_mean": next(
            (x for x in (finite_number(r.get("client_accuracy_mean")) for r in reversed(rounds)) if x is not None), None),
        **participant_accuracy(rounds),
        "total_bytes_up": total("bytes_up", trained),
        "total_bytes_down": total("bytes_down", trained),
        "total_resync_bytes": total("resync_bytes", trained),
        "mean_bytes_up_per_client": _mean([x for r in trained if finite_number(r.get("num_clients"))
                                           for x in [finite_number(r.get("bytes_up_per_client"))] if x is not None]),
        "mean_bytes_down_per_client": _mean([x for r in trained if finite_number(r.get("num_clients"))
                                             for x in [finite_number(r.get("bytes_down_per_client"))] if x is not None]),
        "total_model_queries": total("model_queries", rounds),
        "peak_client_rss_mb": max(rss) if rss else None,
        "client_failures": int(total("client_failures", trained)),
    }


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def finite_number(v: Any) -> float | None:
    """A record's finite number as it is (int stays int), else None (``"12"``, ``True``,
    NaN, a list: None): how every reader of records treats a garbled field."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return v
    return None


def participant_accuracy(rounds: list[dict[str, Any]]) -> dict[str, float | None]:
    """P and NP accuracy (FedDLS §5.1) from the last round with client evaluations.

    ``p_accuracy`` / ``np_accuracy``: mean over participant / non-participant clients of
    the accuracy after post-tuning (the global prompt's when there was none);
    ``*_global``: of the global prompt itself.
    """
    last = next((r for r in reversed(rounds) if isinstance(r.get("client_accuracy"), dict) and r["client_accuracy"]),
                None)
    out: dict[str, float | None] = {"p_accuracy": None, "np_accuracy": None,
                                    "p_accuracy_global": None, "np_accuracy_global": None}
    if last is None:
        return out
    pre = last["client_accuracy"]
    post = last.get("client_post_accuracy") if isinstance(last.get("client_post_accuracy"), dict) else None
    post = post or pre
    parts = last.get("participants") if isinstance(last.get("participants"), list) else None
    parts = {str(x) for x in (parts or pre)}
    for prefix, accs in (("", post), ("_global", pre)):
        out[f"p_accuracy{prefix}"] = _mean([a for k, a in accs.items() if k in parts and finite_number(a) is not None])
        out[f"np_accuracy{prefix}"] = _mean([a for k, a in accs.items() if k not in parts and finite_number(a) is not None])
    return out


def progress_line(r: dict[str, Any], total: int) -> str:
    """``round 3/10 | acc 0.812 loss 0.421 | clients 0.790 | up 0.5 KB down 0.5 KB | 12.3 s``."""
    acc = "acc   -  " if r.get("global_accuracy") is None else f"acc {r['global_accuracy']:.3f}"
    loss = "" if r.get("global_loss") is None else f" loss {r['global_loss']:.3f}"
    cli = "" if r.get("client_accuracy_mean") is None else f" | clients {r['client_accuracy_mean']:.3f}"
    if r.get("client_post_accuracy"):
        pa = participant_accuracy([r])
        cli += f" | post-tuned P {pa['p_accuracy']:.3f}" + (
            "" if pa["np_accuracy"] is None else f" NP {pa['np_accuracy']:.3f}"
        )
    kb = f" | up {r.get('bytes_up', 0) / 1024:.1f} KB down {r.get('bytes_down', 0) / 1024:.1f} KB"
    drop = f" | dropped {len(r['dropped'])}" if r.get("dropped") else ""
    return f"fedtext round {r['round']}/{total} | {acc}{loss}{cli}{kb}{drop} | {r.get('wall_time_s', 0):.1f} s"


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)  # atomic: a reader never sees half a file


# ------------------------------------------------------------ reading records
# Every reader (this module, the dashboard, the tables, ``simulations.status``) reads the
# record files through the functions below: each file is checked once, here, against what
# the writers above write, and a file that is not that is reported with a one-line reason
# (``problem``) instead of reaching code that would raise on it.

MAX_JSON_DEPTH = 32  # records nest 5 deep at most (config.json: resumed[].provenance.versions)
_SCALARS = (str, int, float, bool, type(None))
# config.json's own fields (absent or null: unknown, as in records from before they existed)
CONFIG_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "started": (str,), "started_epoch": (int, float), "machine": (dict,),
    "provenance": (dict,), "resumed": (list,),
}
# summary.json: totals every reader divides or sums (summarize always writes numbers)...
SUMMARY_TOTALS = ("rounds_done", "total_bytes_up", "total_bytes_down", "total_resync_bytes",
                  "total_model_queries", "client_failures")
# ... numbers that may be unknown (None) ...
SUMMARY_NUMBERS = ("initial_accuracy", "final_accuracy", "best_accuracy", "final_client_accuracy_mean",
                   "p_accuracy", "np_accuracy", "p_accuracy_global", "np_accuracy_global",
                   "mean_bytes_up_per_client", "mean_bytes_down_per_client", "peak_client_rss_mb", "wall_time_s")
# ... and text: the status and its reason.
SUMMARY_TEXT = ("run_id", "status", "error")


class RecordError(ValueError):
    """Text that is not a record: not JSON, or nested deeper than :data:`MAX_JSON_DEPTH`."""


def decode_json(text: str) -> Any:
    """``text`` as JSON, refusing what no writer writes.

    Raises
    ------
    RecordError
        Not JSON (including integers too long to convert), or nested deeper than
        :data:`MAX_JSON_DEPTH` (100 000 nested lists would raise ``RecursionError`` in
        the decoder, and a few hundred would in any later ``json.dumps``). Its message is
        one line.
    """
    try:
        obj = json.loads(text)
    except RecursionError:
        raise RecordError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, and "Exceeds the limit (4300 digits)"
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise RecordError(f"not JSON ({first[:120]})") from None
    # at most MAX_JSON_DEPTH brackets cannot nest deeper: the common case costs two counts
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth(obj) > MAX_JSON_DEPTH:
        raise RecordError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return obj


def _depth(obj: Any) -> int:
    """How deep lists and dicts nest in ``obj`` (``1`` for ``[]``), walked without recursion;
    stops counting past :data:`MAX_JSON_DEPTH`."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            break
        stack.extend((child, level + 1) for child in item)
    return deepest


def _kind(value: Any) -> str:
    """``a list``, ``a string``, ...: the JSON type of ``value`` for a reason line."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a record file (a directory, a socket or FIFO that a
    read would block on, no permission), or None: a regular file, or absent."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path.name} unreadable ({exc.strerror or type(exc).__name__})"
    if stat.S_ISDIR(mode):
        return f"{path.name} is a directory"
    if not stat.S_ISREG(mode):
        return f"{path.name} is not a regular file"
    return None


def read_text(path: Path, errors: str = "strict") -> tuple[str | None, str | None]:
    """``(text, None)`` of a record file, ``(None, None)`` when it does not exist, else
    ``(None, reason)`` (:func:`file_problem`, not UTF-8 with ``errors="strict"``)."""
    problem = file_problem(path)
    if problem:
        return None, problem
    try:
        return path.read_text(encoding="utf-8", errors=errors), None
    except FileNotFoundError:  # removed between the stat and the read
        return None, None
    except UnicodeDecodeError:
        return None, f"{path.name} is not UTF-8 text"
    except OSError as exc:
        return None, f"{path.name} unreadable ({exc.strerror or type(exc).__name__})"


def check_config(meta: Any) -> str | None:
    """Why a decoded ``config.json`` is not a run's config record, or None.

    It must be an object whose ``config`` (the run-config) is an object of single values
    (Flower's run-config holds only strings, numbers and booleans; a refused start records
    whatever scalars it was given, so their types are not checked further), and whose own
    fields (:data:`CONFIG_FIELDS`) have their types. E.g. ``config.seed is a list``.
    """
    if not isinstance(meta, dict):
        return f"config.json holds {_kind(meta)}, not an object"
    cfg = meta.get("config")
    if cfg is None:
        return "config.json has no run-config ('config')"
    if not isinstance(cfg, dict):
        return f"config.json: 'config' is {_kind(cfg)}, not an object"
    for key, value in cfg.items():
        if not isinstance(value, _SCALARS):
            return f"config.json: config.{key} is {_kind(value)}, not a single value"
    for key, types in CONFIG_FIELDS.items():
        value = meta.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            return f"config.json: {key} is {_kind(value)}"
    return None


def check_summary(summary: Any) -> str | None:
    """Why a decoded ``summary.json`` is not a run summary (:meth:`RunRecorder.finish`), or
    None: an object whose :data:`SUMMARY_TOTALS` are numbers, :data:`SUMMARY_NUMBERS`
    numbers or null, :data:`SUMMARY_TEXT` strings or null, and whose ``method``,
    ``dataset``, ``partition`` and ``seed`` are single values (a string ``total_bytes_up``
    is malformed). A field that is absent is not checked: older summaries lack some, and
    readers use ``.get`` with a default."""
    if not isinstance(summary, dict):
        return f"summary.json holds {_kind(summary)}, not an object"
    for key in SUMMARY_TOTALS + SUMMARY_NUMBERS:
        value = summary.get(key)
        if key not in summary or (value is None and key in SUMMARY_NUMBERS):
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"summary.json: {key} is {_kind(value)}, not a number"
    for key in SUMMARY_TEXT:
        value = summary.get(key)
        if value is not None and not isinstance(value, str):
            return f"summary.json: {key} is {_kind(value)}, not a string"
    for key in ("method", "dataset", "partition", "seed"):  # they name the run: single values
        if not isinstance(summary.get(key), _SCALARS):
            return f"summary.json: {key} is {_kind(summary[key])}, not a single value"
    return None


def _read_record(path: Path, check: Callable[[Any], str | None]) -> tuple[dict[str, Any] | None, str | None]:
    """``(object, None)`` of a JSON record file that passes ``check``; ``(None, None)`` when
    absent; ``(None, reason)`` when unreadable, not JSON, too deep or failing ``check``."""
    text, problem = read_text(path)
    if text is None:
        return None, problem
    try:
        obj = decode_json(text)
    except RecordError as exc:
        return None, f"{path.name}: {exc}"
    problem = check(obj)
    return (None, problem) if problem else (obj, None)


def read_config(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A run's ``config.json``: ``(object, None)``, ``(None, None)`` when absent, or
    ``(None, reason)`` when it is not a config record (:func:`check_config`)."""
    return _read_record(path, check_config)


def read_summary(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A run's ``summary.json``: ``(object, None)``, ``(None, None)`` when absent (the run
    has not ended), or ``(None, reason)`` when it is not a summary (:func:`check_summary`)."""
    return _read_record(path, check_summary)


def round_line(line: str) -> tuple[dict[str, Any] | None, str | None]:
    """One ``rounds.jsonl`` line: ``(record, None)``, or ``(None, reason)`` when it is not a
    JSON object with an integer ``round`` (a truncated write, garbage, too deep a nesting).

    The record's other fields are not checked: every reader treats a field of the wrong
    type as missing (:func:`finite_number`), so one garbled field loses that field only.
    """
    try:
        record = decode_json(line)
    except RecordError as exc:
        return None, str(exc)
    if not isinstance(record, dict):
        return None, f"holds {_kind(record)}, not an object"
    if not _is_int(record.get("round")):
        return None, "has no integer 'round'"
    return record, None


def parse_round_line(line: str) -> dict[str, Any] | None:
    """One ``rounds.jsonl`` line as a round record, or None when it is not a JSON object
    with an integer ``round`` (:func:`round_line`)."""
    return round_line(line)[0]


def read_rounds(path: Path) -> tuple[list[dict[str, Any]], int, str | None, str | None]:
    """A run's ``rounds.jsonl``: ``(records, malformed lines, first malformed line's reason,
    file problem)``; a file that cannot be read (a directory) has the last, an absent one
    reads as no rounds."""
    text, problem = read_text(path, errors="replace")
    records: list[dict[str, Any]] = []
    bad, first = 0, None
    for number, line in enumerate((text or "").splitlines(), 1):
        record, why = round_line(line)
        if record is None:
            bad += 1
            first = first or f"line {number}: {why}"
        else:
            records.append(record)
    return records, bad, first, problem


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """Read one run directory, tolerating half-written or malformed files.

    Each file is read and checked by its reader (:func:`read_config`, :func:`read_summary`,
    :func:`read_rounds`). A ``config.json`` / ``summary.json`` that is not its record reads
    as ``None``; a line of ``rounds.jsonl`` that is not a JSON object with an integer
    ``round`` (e.g. a truncated last line) is skipped and counted in ``malformed_lines``
    (the first one's reason in ``line_problem``). ``problem`` is the first file's reason
    (None: every file present is its record), and makes the run ``malformed``. ``status``
    and ``reason`` are :func:`run_status`'s.
    """
    run_dir = Path(run_dir)
    out: dict[str, Any] = {"dir": str(run_dir)}
    out["config"], config_problem = read_config(run_dir / "config.json")
    out["summary"], summary_problem = read_summary(run_dir / "summary.json")
    out["rounds"], out["malformed_lines"], out["line_problem"], rounds_problem = read_rounds(run_dir / "rounds.jsonl")
    out["problem"] = config_problem or summary_problem or rounds_problem
    out["status"], out["reason"] = run_status(out)
    return out
