"""The writer of a run's records: :class:`RunRecorder` (``config.json``, ``rounds.jsonl``,
``summary.json``, the ``heartbeat`` it rewrites while the run is open) with the folder
name of a new run (:func:`run_folder_name`) and the ``run.log`` handler
(:class:`RunLogHandler`). The open recorders are registered here for
:func:`fedtext.records.signals.finish_open_runs`."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import re
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedtext.common.config import RUN_ID_CHARS, ConfigError
from fedtext.records.probes import launch_fields, machine, provenance
from fedtext.records.reader import (
    DEFAULT_STALE_AFTER_S, FINISHED, HEARTBEAT_FILE, finite_record, progress_line, read_rounds,
    round_without_accuracy, summarize,
)
from fedtext.records.schema import ROUND_LINE_MAX
from fedtext.common.tracking import Trackers

try:  # POSIX: Linux, macOS, the boards
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, a resume trusts the heartbeat alone
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("fedtext")

_OPEN: "weakref.WeakSet[RunRecorder]" = weakref.WeakSet()  # recorders without a summary yet (finish_open_runs)


def open_recorders() -> list[RunRecorder]:
    """This process's recorders whose run has no summary yet (the one registry of open runs,
    kept by :class:`RunRecorder`; :func:`fedtext.records.signals.finish_open_runs` closes them)."""
    return list(_OPEN)


def hold_run(run_dir: Path) -> int | None:
    """An exclusive lock (``flock``) on the run folder itself, held by the process that writes
    the run: the descriptor to close when it is done (:func:`release_run`), ``None`` where the
    system or the folder's filesystem has no ``flock`` (a warning; the heartbeat alone then
    tells a live writer). The kernel drops it when the process ends, SIGKILL included, so a
    held lock means a live writer on this machine, whatever its heartbeat says (a suspended
    process); over a network disk another machine's writer may not show. Raises
    ``BlockingIOError`` when another open descriptor holds it (another process, or another
    recorder of this one)."""
    if fcntl is None:  # pragma: no cover
        return None
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise
    except OSError as exc:  # ENOLCK, EOPNOTSUPP: a filesystem without flock; the run goes on unlocked
        os.close(fd)
        log.warning("fedtext: %s cannot be locked (%s): a resume trusts its heartbeat alone", run_dir, exc)
        return None
    return fd


def release_run(fd: int | None) -> None:
    """Drop :func:`hold_run`'s lock and close its descriptor (``LOCK_UN`` first: a child forked
    while it was held would otherwise keep it)."""
    if fd is None or fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def run_in_use(run_dir: Path) -> bool:
    """Whether a live process still writes the run in ``run_dir`` (:func:`hold_run`'s lock is
    held): such a run is never resumed or taken over."""
    try:
        fd = hold_run(run_dir)
    except BlockingIOError:
        return True
    except OSError:  # no such folder, not readable: no writer holds it through this path
        return False
    release_run(fd)
    return False


def run_folder_name(config: Mapping[str, Any], when: _dt.datetime | None = None) -> str:
    """The folder name of a new run: ``<stamp>-<method>-<dataset>-s<seed>[-<run-name>]``.

    A part the run-config does not hold (a refused start's config may lack any key) is left
    out rather than written as ``None``, and each part is reduced to the characters of a run
    id (:data:`fedtext.common.config.RUN_ID`: every other character, ``/`` and spaces included,
    becomes ``_``, and ``..`` becomes ``_.``), so a refused start's odd ``method`` or
    ``run-name`` can neither read as ``None`` nor point outside ``output-dir``, and a
    dataset folder named ``my data`` gives a run id every node accepts as its journal's
    key (:func:`fedtext.node.state.check_run_key`; they refused ``my data`` after the whole
    first round). The dataset's part keeps its first 64 characters, so that the name stays
    within a run id's 200. A run-config whose values are made of those characters is named
    as it always was.

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
        "" if dataset is None else Path(str(dataset)).name[:DATASET_PART_MAX],
        "" if seed is None else f"s{seed}",
        str(config.get("run-name") or ""),
    )]
    return "-".join(x for x in parts if x)


def _path_part(text: str) -> str:
    """``text`` as a part of a run id: ``.``/``..`` -> ``""``, a character a run id does not
    hold -> ``_`` (a ``run-name`` such as ``a/b`` used to open a sub-folder that ``status``
    never finds), a dot before another dot -> ``_``."""
    if text in (".", ".."):
        return ""
    return _DOT_BEFORE_DOT.sub("_", _NOT_IN_RUN_ID.sub("_", text))


DATASET_PART_MAX = 64  # characters of the dataset's folder name in a run id
_NOT_IN_RUN_ID = re.compile(f"[^{RUN_ID_CHARS}]")
_DOT_BEFORE_DOT = re.compile(r"\.(?=\.)")


RUN_LOG_FILE = "run.log"
_LEVEL_BEFORE_RUN_LOGS = logging.NOTSET  # the fedtext logger's level before the first open run log


class RunLogHandler(logging.Handler):
    """Appends the ``fedtext`` logger's records to a run's ``run.log``.

    The file is opened for each line (a run writes a few lines a round) so that no
    descriptor stays open; a line that cannot be written (a full disk, a removed
    folder) is skipped silently: the console still has it.
    """

    fedtext_run_log = True  # not a console route (fedtext.common.progress.setup_logging)

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
    the run resumes from) and an old ``summary.json`` (``failed``) is removed; its
    ``wall_time_s`` goes on from the last kept round's (the pause in between not counted).

    ``launch`` (:data:`~fedtext.records.probes.LAUNCH_FIELDS`) goes into ``config.json``'s
    ``provenance`` with the code's (:func:`provenance`); a resumed run records its own
    process's in its ``resumed`` entry (the code may have changed in between).

    ``trackers`` (names of :data:`fedtext.common.tracking.TRACKERS`, their packages checked
    before) get every round record and the summary too (:class:`fedtext.common.tracking.Trackers`).
    The ``fedtext`` logger's lines go to ``run.log`` in the folder from the start until
    :meth:`finish` (:class:`RunLogHandler`).
    """

    def __init__(self, output_dir: str | Path, config: dict[str, Any], run_id: str | None = None,
                 resume: bool = False, keep_rounds: int | None = None,
                 launch: Mapping[str, Any] | None = None, trackers: tuple[str, ...] = ()) -> None:
        self._tracker_names = tuple(trackers)
        if resume:
            run_dir = Path(output_dir).expanduser().resolve() / str(run_id)
            try:  # before anything in the folder changes: a live writer keeps its run
                lock = hold_run(run_dir)
            except BlockingIOError:
                raise ConfigError(f"resume='{run_dir.name}': the run is still open in a live process (its folder is "
                                  f"locked); stop that process first") from None
            self._open_holding(lock, self._reopen, run_dir, config, keep_rounds, launch)
            return
        base = run_id or run_folder_name(config)
        root = Path(output_dir).expanduser().resolve()
        self.dir = root / base
        i = 1
        while self.dir.exists():  # two runs started in the same second
            i += 1
            self.dir = root / f"{base}-{i}"
        self.dir.mkdir(parents=True)
        self._open_holding(hold_run(self.dir), self._create, config, launch)  # new and empty: nobody holds it

    def _open_holding(self, lock: int | None, step: Any, *args: Any) -> None:
        """Run ``step`` (:meth:`_create` or :meth:`_reopen`) holding the folder's ``lock``
        (:func:`hold_run`); a step that fails leaves the run never opened: nothing holds the folder."""
        self._lock = lock
        try:
            step(*args)
        except BaseException:
            self._detach_log()
            release_run(self._lock)
            raise

    def _create(self, config: dict[str, Any], launch: Mapping[str, Any] | None) -> None:
        self.run_id = self.dir.name
        self._attach_log()
        self.start = time.time()
        self.worked_s = 0.0  # the seconds the run worked before this process took it over (a resumed run's)
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
        # the rounds as written (read_rounds, not load_run: a random-weight run's accuracy stays in its record)
        kept = [r for r in read_rounds(run_dir / "rounds.jsonl", run_dir)[0]
                if keep_rounds is None or r["round"] <= keep_rounds]
        self.rounds = kept
        # wall_time_s goes on from the kept rounds' last: the time the run's processes worked up to its checkpoint
        # and since the resume, not the pause between (a run stopped at night and resumed the next day took hours
        # less than its first start's clock says); where no kept round says, the clock since the first start
        worked = kept[-1].get("wall_time_s") if kept else None
        if not (isinstance(worked, (int, float)) and 0 <= worked < math.inf):
            worked = max(0.0, time.time() - float(meta.get("started_epoch", time.time())))
        self.worked_s = float(worked)
        self.start = time.time() - self.worked_s
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
        """Add :data:`~fedtext.records.probes.LAUNCH_FIELDS` learnt after the start
        (``nodes_at_start``) to the provenance in ``config.json`` (the last ``resumed``
        entry's for a resumed run)."""
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
        """Start the trackers and the heartbeat, and register for
        :func:`fedtext.records.signals.finish_open_runs`."""
        # a resumed run's kept rounds: not sent again, counted in the trackers' byte totals
        self.trackers = Trackers(self._tracker_names, self.dir, self.run_id, self.config, previous=self.rounds)
        stale = float(self.config.get("stale-after-s", DEFAULT_STALE_AFTER_S))
        self.heartbeat_s = max(0.5, min(30.0, stale / 10))
        self._closed = threading.Event()
        self.beat()
        _OPEN.add(self)
        threading.Thread(target=self._beat_loop, name="fedtext-heartbeat", daemon=True).start()

    def _release(self) -> None:
        lock, self._lock = getattr(self, "_lock", None), None
        release_run(lock)

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
        # a NaN loss or an inf metric is stored as null (unknown): the readers refuse non-finite numbers
        line = json.dumps(finite_record(record), allow_nan=False)
        if len(line) > ROUND_LINE_MAX:  # beyond what schema.ROUND_LINE_MAX's arithmetic allows for
            log.warning("fedtext: round %s's record is %d bytes, over the %d a reader reads: it will count "
                        "as a malformed line", record.get("round"), len(line), ROUND_LINE_MAX)
        with open(self.dir / "rounds.jsonl", "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
        # a weights=random run: its accuracy stays in the record, never on the screen or a tracker's page
        random = self.config.get("weights") == "random"
        log.info(progress_line(record, int(self.config.get("num-server-rounds", 0)), random_weights=random))
        self.trackers.log_round(round_without_accuracy(record) if random else record)

    def finish(self, status: str = FINISHED, error: str | None = None,
               partitions_never_trained: list[int] | None = None) -> dict[str, Any]:
        """Write ``summary.json`` (idempotent: the first call wins). ``partitions_never_trained``:
        the participant partitions no round aggregated an upload of, when the run reached its
        last round (:meth:`fedtext.server.round_log.RoundLog.never_trained`); ``None``: not known."""
        path = self.dir / "summary.json"
        if path.exists():  # closed before (or by another writer): the lock and the heartbeat go too
            self._closed.set()
            self._release()
            return json.loads(path.read_text())
        self._closed.set()
        _OPEN.discard(self)
        try:
            summary = summarize(self.rounds)
            summary.update(
                run_id=self.run_id, status=status, error=error,
                method=self.config.get("method"), dataset=self.config.get("dataset"),
                partition=self.config.get("partition"), seed=self.config.get("seed"),
                wall_time_s=round(time.time() - self.start, 2), partitions_never_trained=partitions_never_trained,
            )
            _write_json(path, summary)
            self.beat()
        finally:
            self._release()  # the run is closed: a rerun may resume it now
        if status != FINISHED:
            log.error("fedtext: run %s %s: %s", self.run_id, status, error)
        self.trackers.finish(summary)
        self._detach_log()
        return summary



def _write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` to ``path`` as indented JSON, atomically (a ``.tmp`` file, then a rename)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(finite_record(obj), indent=2, default=str, allow_nan=False))
    tmp.replace(path)  # atomic: a reader never sees half a file
