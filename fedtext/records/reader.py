"""Reading run records: decoding and validating each record file (:func:`decode_json`,
:func:`check_config`, :func:`check_summary`, :func:`round_line`, ``read_*``), loading a
run folder (:func:`load_run`, :func:`runs_under`, :func:`runs_since`), its status
(:func:`run_status`, :func:`read_heartbeat`) and the summaries and lines computed from
its rounds (:func:`summarize`, :func:`participant_accuracy`, :func:`progress_line`).
No torch, no Flower: the dashboard and the tables load this."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from fedtext.records.schema import ROUND_LINE_MAX

FINISHED = "finished"  # the status of a run that completed (summary.json); the others: run_status
HEARTBEAT_FILE = "heartbeat"
DEFAULT_STALE_AFTER_S = 300.0  # the run-config default of stale-after-s


# ------------------------------------------------------------ reading records
# Every reader (this module, the dashboard, the tables, ``simulations.status``) reads the
# record files through the functions below: each file is checked once, here, against what
# the writer (:mod:`fedtext.records.writer`) writes, and a file that is not that is reported
# with a one-line reason (``problem``) instead of reaching code that would raise on it.

MAX_JSON_DEPTH = 32  # records nest 5 deep at most (config.json: resumed[].provenance.versions)
# The longest config.json or summary.json read (issue 69: both were read whole, whatever their size). A writer's
# stays far under it: config.json is ~4 KB plus ~2 KB a resume (its resumed[] entries), summary.json ~1 KB plus
# about 40 B a client (partitions_never_trained), under the 920 B a client of a round line; the bound is a
# round line's (ROUND_LINE_MAX, 16 MiB), what a reader already holds at once.
RECORD_FILE_MAX = ROUND_LINE_MAX
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
                   "mean_bytes_up_per_client", "mean_bytes_down_per_client", "peak_client_rss_mb", "wall_time_s",
                   "epsilon", "dp_delta")
# ... text: the status and its reason, the run's DP mode (central, local; null without DP) ...
SUMMARY_TEXT = ("run_id", "status", "error", "dp")
# ... and lists of partition ids (null: not known, e.g. a run that ended before its last round).
SUMMARY_LISTS = ("partitions_never_trained",)


class RecordError(ValueError):
    """Text that is not a record: not JSON, or nested deeper than :data:`MAX_JSON_DEPTH`."""


_FLOAT_MAX = sys.float_info.max


def fits_a_record(value: Any) -> bool:
    """Whether a number may stand in a record: a finite float, or an integer that converts
    to one (``10**400`` does not: ``float()`` and ``math.isfinite`` raise OverflowError on it).
    Booleans and non-numbers: True (not numbers, nothing to check)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -_FLOAT_MAX <= value <= _FLOAT_MAX  # exact: Python compares int and float exactly
    return True



def _strict_float(text: str) -> float:
    """A JSON number with a fraction or exponent; ``1e400`` (which overflows to inf) refused."""
    value = float(text)
    if not fits_a_record(value):
        raise RecordError(f"number {text[:24]} is not finite")
    return value


def _strict_int(text: str) -> int:
    """A JSON integer; one beyond a float's range (``10**400``) refused."""
    value = int(text)  # ValueError past Python's 4300 digits: "not JSON"
    if not fits_a_record(value):
        raise RecordError(f"integer of {len(text.lstrip('-'))} digits does not fit a float")
    return value


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's json reads them, no record holds them."""
    raise RecordError(f"{name} is not a finite number")


def decode_json(text: str) -> Any:
    """``text`` as JSON, refusing what no writer writes.

    Every reader of records (this module, the dashboard, the tables, ``simulations.status``)
    decodes through here, so one rule holds everywhere: numbers are finite and fit a float
    (:func:`fits_a_record`; the writer stores anything else as null,
    :func:`finite_record`).

    Raises
    ------
    RecordError
        Not JSON (including integers too long to convert); a number that is not finite or
        does not fit a float (``NaN``, ``-Infinity``, ``1e400``, ``10**400``), which would
        raise OverflowError or reach a chart as inf; or nested deeper than
        :data:`MAX_JSON_DEPTH` (100 000 nested lists would raise ``RecursionError`` in
        the decoder, and a few hundred would in any later ``json.dumps``). Its message is
        one line.
    """
    try:
        obj = json.loads(text, parse_float=_strict_float, parse_int=_strict_int, parse_constant=_no_constant)
    except RecursionError:
        raise RecordError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except RecordError:
        raise
    except ValueError as exc:  # JSONDecodeError, and "Exceeds the limit (4300 digits)"
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise RecordError(f"not JSON ({first[:120]})") from None
    # at most MAX_JSON_DEPTH brackets cannot nest deeper: the common case costs two counts
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth(obj) > MAX_JSON_DEPTH:
        raise RecordError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return obj


def finite_record(obj: Any) -> Any:
    """``obj`` with every number :func:`decode_json` would refuse (NaN, inf, an integer
    beyond a float) replaced by None: what the writer stores, so that fedtext never writes
    a record its readers refuse (a diverged loss reads as unknown)."""
    if isinstance(obj, dict):
        return {k: finite_record(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_record(v) for v in obj]
    return obj if fits_a_record(obj) else None


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


def _inside(path: Path, root: Path | None) -> Path | None:
    """``path`` resolved, when that lies inside ``root`` (None: ``path``'s own folder), else None."""
    resolved = path.resolve()
    return resolved if resolved.is_relative_to((path.parent if root is None else Path(root)).resolve()) else None


def _outside(path: Path) -> str:
    """The one-line reason a record file outside the records folder is not read."""
    return f"{path.name} resolves outside the records folder: not read"


def file_problem(path: Path, root: Path | None = None) -> str | None:
    """Why ``path`` cannot be read as a record file, or None: a regular file inside ``root``,
    or absent.

    ``root`` is the records folder the reader was given (``--runs``; None: the folder
    ``path`` is in). A path that resolves outside it (a ``config.json`` symlinked to a file
    elsewhere, or through a symlinked folder) is refused: a reader never leaves its records
    folder, so nothing outside it is shown. The others: a directory, a socket or FIFO that
    a read would block on, no permission.
    """
    try:
        if _inside(path, root) is None:
            return _outside(path)
    except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before Python 3.13)
        return f"{path.name} unresolvable ({getattr(exc, 'strerror', None) or type(exc).__name__})"
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


class _Moved(OSError):
    """A record file that left the records folder between :func:`file_problem` and the read."""


def open_checked(path: Path, root: Path | None = None) -> BinaryIO:
    """Open ``path`` for reading as :func:`file_problem` checked it: its resolved path, again
    inside ``root`` (default: its own folder), with ``O_NOFOLLOW`` on the last component, and
    a regular file by ``fstat`` of what was opened. A link swapped in after the check is
    refused (:class:`_Moved`), not followed out of the records folder."""
    resolved = _inside(path, root)
    if resolved is None:
        raise _Moved(_outside(path))
    try:
        fd = os.open(resolved, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component became a link after resolve()
            raise _Moved(_outside(path)) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _Moved(f"{path.name} is not a regular file")
    return os.fdopen(fd, "rb")


def read_text(path: Path, errors: str = "strict", root: Path | None = None,
              limit: int | None = None) -> tuple[str | None, str | None]:
    """``(text, None)`` of a record file, ``(None, None)`` when it does not exist, else
    ``(None, reason)`` (:func:`file_problem` with ``root``, not UTF-8 with ``errors="strict"``,
    longer than ``limit`` bytes: never more than ``limit + 1`` bytes are read to tell)."""
    problem = file_problem(path, root)
    if problem:
        return None, problem
    too_long = f"{path.name}: longer than {limit} bytes, more than a writer writes: not read"
    try:
        with open_checked(path, root) as fh:
            if limit is None:
                data = fh.read()
            else:  # by its size first: read(n) allocates n bytes up front, whatever the file holds
                size = os.fstat(fh.fileno()).st_size
                if size > limit:
                    return None, too_long
                data = fh.read(size + 1)
                if len(data) > size:  # it grew since the fstat: the rest, still bounded
                    data += fh.read(limit + 1 - len(data))
                if len(data) > limit:
                    return None, too_long
            return data.decode("utf-8", errors=errors), None
    except FileNotFoundError:  # removed between the stat and the read
        return None, None
    except _Moved as exc:
        return None, str(exc)
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
    """Why a decoded ``summary.json`` is not a run summary (:meth:`fedtext.records.writer.RunRecorder.finish`), or
    None: an object whose :data:`SUMMARY_TOTALS` are numbers, :data:`SUMMARY_NUMBERS`
    numbers or null, :data:`SUMMARY_TEXT` strings or null, :data:`SUMMARY_LISTS` lists of
    integers or null, and whose ``method``,
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
    for key in SUMMARY_LISTS:
        value = summary.get(key)
        if value is not None and (not isinstance(value, list) or not all(_is_int(x) for x in value)):
            return f"summary.json: {key} is {_kind(value)}, not a list of partition ids"
    for key in ("method", "dataset", "partition", "seed"):  # they name the run: single values
        if not isinstance(summary.get(key), _SCALARS):
            return f"summary.json: {key} is {_kind(summary[key])}, not a single value"
    return None


def _read_record(path: Path, check: Callable[[Any], str | None], root: Path | None = None
                 ) -> tuple[dict[str, Any] | None, str | None]:
    """``(object, None)`` of a JSON record file that passes ``check``; ``(None, None)`` when
    absent; ``(None, reason)`` when outside ``root``, unreadable, longer than
    :data:`RECORD_FILE_MAX` (never read whole), not JSON (a number that is not finite
    included), too deep or failing ``check``."""
    text, problem = read_text(path, root=root, limit=RECORD_FILE_MAX)
    if text is None:
        return None, problem
    try:
        obj = decode_json(text)
    except RecordError as exc:
        return None, f"{path.name}: {exc}"
    problem = check(obj)
    return (None, problem) if problem else (obj, None)


def read_config(path: Path, root: Path | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """A run's ``config.json``: ``(object, None)``, ``(None, None)`` when absent, or
    ``(None, reason)`` when it is not a config record (:func:`check_config`) or resolves
    outside ``root`` (:func:`file_problem`)."""
    return _read_record(path, check_config, root)


def read_summary(path: Path, root: Path | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """A run's ``summary.json``: ``(object, None)``, ``(None, None)`` when absent (the run
    has not ended), or ``(None, reason)`` when it is not a summary (:func:`check_summary`)
    or resolves outside ``root`` (:func:`file_problem`)."""
    return _read_record(path, check_summary, root)


TOO_LONG = f"longer than {ROUND_LINE_MAX} bytes, the longest round record a writer writes: not read"


def configured_rounds(config: Any) -> int | None:
    """The ``num-server-rounds`` of a run's ``config.json`` (as :func:`read_config` reads it):
    the highest round its ``rounds.jsonl`` can hold (a resumed run records the new, larger
    figure); None when it does not say (a refused start's config)."""
    cfg = config.get("config") if isinstance(config, dict) else None
    rounds = cfg.get("num-server-rounds") if isinstance(cfg, dict) else None
    return rounds if _is_int(rounds) and rounds >= 0 else None


def round_line(line: str | bytes | None, rounds: int | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """One ``rounds.jsonl`` line: ``(record, None)``, or ``(None, reason)`` when it is not a
    JSON object with an integer ``round`` (a truncated write, garbage, too deep a nesting),
    is longer than :data:`~fedtext.records.schema.ROUND_LINE_MAX` (``None``: one
    :func:`record_lines` did not read; it is not parsed), or, given the run's ``rounds``
    (:func:`configured_rounds`), its round lies outside ``0..rounds`` (no run writes one:
    a planted ``round: 2`` of a 1-round run read as "rounds 2/1").

    The record's other fields are not checked: every reader treats a field of the wrong
    type as missing (:func:`finite_number`), so one garbled field loses that field only.
    """
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if line is None or len(line) - line.endswith("\n") > ROUND_LINE_MAX:
        return None, TOO_LONG
    try:
        record = decode_json(line)
    except RecordError as exc:
        return None, str(exc)
    if not isinstance(record, dict):
        return None, f"holds {_kind(record)}, not an object"
    if not _is_int(record.get("round")):
        return None, "has no integer 'round'"
    if rounds is not None and not 0 <= record["round"] <= rounds:
        return None, f"round {record['round']} is outside 0..{rounds} (num-server-rounds)"
    return record, None


def parse_round_line(line: str) -> dict[str, Any] | None:
    """One ``rounds.jsonl`` line as a round record, or None when it is not a JSON object
    with an integer ``round`` (:func:`round_line`)."""
    return round_line(line)[0]


READ_CHUNK = 2**20  # bytes of a line read at a time (record_lines)


def record_lines(fh: BinaryIO) -> Iterator[tuple[bytes | None, int, bool]]:
    """The lines of ``fh`` from where it stands: ``(line, size, complete)``, ``line`` its
    bytes, ``None`` when it is longer than :data:`~fedtext.records.schema.ROUND_LINE_MAX`;
    ``size`` the bytes it takes; ``complete`` whether its newline was read (the last line
    may lack it: a write in progress).

    A line is read :data:`READ_CHUNK` bytes at a time, and one past the bound is let go as
    soon as it is: it is never held whole (one 50 MB line took 31 s and 795 MB in
    ``simulations.status`` when it was read and parsed as a round)."""
    while True:
        parts: list[bytes] | None = []
        size, complete = 0, False
        while not complete and (part := fh.readline(READ_CHUNK)):
            size, complete = size + len(part), part.endswith(b"\n")
            if parts is not None:
                parts.append(part)
                if size - complete > ROUND_LINE_MAX:  # the newline aside
                    parts = None
        if not size:
            return
        yield (None if parts is None else b"".join(parts)), size, complete


def read_rounds(path: Path, root: Path | None = None, rounds: int | None = None
                ) -> tuple[list[dict[str, Any]], int, str | None, str | None]:
    """A run's ``rounds.jsonl``: ``(records, malformed lines, first malformed line's reason,
    file problem)``; a file that cannot be read (a directory, outside ``root``) has the
    last, an absent one reads as no rounds. ``rounds``: the run's ``num-server-rounds``
    (:func:`configured_rounds`; a line of a round beyond it is malformed)."""
    problem = file_problem(path, root)
    records: list[dict[str, Any]] = []
    bad, first = 0, None
    if problem:
        return records, bad, first, problem
    try:
        with open_checked(path, root) as fh:
            for number, (line, _, _) in enumerate(record_lines(fh), 1):
                record, why = round_line(line, rounds)
                if record is None:
                    bad += 1
                    first = first or f"line {number}: {why}"
                else:
                    records.append(record)
    except FileNotFoundError:  # removed between the stat and the read
        pass
    except _Moved as exc:
        problem = str(exc)
    except OSError as exc:
        problem = f"{path.name} unreadable ({exc.strerror or type(exc).__name__})"
    return records, bad, first, problem


# A run on random weights (run-config ``weights=random``: plumbing and cost runs) measures bytes,
# memory and time; its accuracy is a random model's and is no result: what shows results (the
# compare tables and the guide through simulations.tables, the dashboard's store,
# ``simulations.status``, the round line and the trackers) reads it through :func:`without_accuracy`.
# The record files and :func:`load_run` keep it as written (resume, the tests' equality checks).
RANDOM_WEIGHTS_NOTE = "random weights: accuracy is no result, not shown"
ROUND_ACCURACY = {"global_accuracy": None, "client_accuracy": {}, "client_accuracy_mean": None,
                  "client_accuracy_std": None, "client_post_accuracy": {}}
SUMMARY_ACCURACY = ("initial_accuracy", "final_accuracy", "best_accuracy", "final_client_accuracy_mean",
                    "p_accuracy", "np_accuracy", "p_accuracy_global", "np_accuracy_global")


def random_weights(config: Any) -> bool:
    """Whether a run's ``config.json`` (as :func:`read_config` reads it) says ``weights=random``."""
    return isinstance(config, dict) and isinstance(config.get("config"), dict) and \
        config["config"].get("weights") == "random"


def round_without_accuracy(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of one round record with its accuracies unknown (the keys it has: :data:`ROUND_ACCURACY`)."""
    return {**record, **{k: v for k, v in ROUND_ACCURACY.items() if k in record}}


def without_accuracy(run: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``run`` (:func:`load_run`'s dict) with every accuracy of its rounds and summary
    unknown; ``run`` itself is left as it is."""
    summary = run.get("summary")
    if isinstance(summary, dict):
        summary = {**summary, **{k: None for k in SUMMARY_ACCURACY if k in summary}}
    return {**run, "summary": summary, "rounds": [round_without_accuracy(r) for r in run["rounds"]]}


def load_run(run_dir: str | Path, root: str | Path | None = None) -> dict[str, Any]:
    """Read one run directory, tolerating half-written or malformed files.

    Each file is read and checked by its reader (:func:`read_config`, :func:`read_summary`,
    :func:`read_rounds`). A ``config.json`` / ``summary.json`` that is not its record reads
    as ``None``; a line of ``rounds.jsonl`` that is not a JSON object with an integer
    ``round`` (e.g. a truncated last line, a NaN), is longer than the longest a writer writes
    or holds a round beyond the config's ``num-server-rounds`` (:func:`round_line`) is
    skipped and counted in ``malformed_lines``
    (the first one's reason in ``line_problem``). ``problem`` is the first file's reason
    (None: every file present is its record), and makes the run ``malformed``. ``status``
    and ``reason`` are :func:`run_status`'s. ``root``: the records folder the run was found
    in (None: ``run_dir`` itself); a file resolving outside it is not read (its problem).
    ``random_weights``: the run has ``weights=random`` (no accuracy of it is a result:
    :func:`without_accuracy`).
    """
    run_dir = Path(run_dir)
    root = Path(root) if root is not None else run_dir
    out: dict[str, Any] = {"dir": str(run_dir), "root": str(root)}
    out["config"], config_problem = read_config(run_dir / "config.json", root)
    out["summary"], summary_problem = read_summary(run_dir / "summary.json", root)
    out["rounds"], out["malformed_lines"], out["line_problem"], rounds_problem = read_rounds(
        run_dir / "rounds.jsonl", root, configured_rounds(out["config"]))
    out["problem"] = config_problem or summary_problem or rounds_problem
    out["status"], out["reason"] = run_status(out)
    out["random_weights"] = random_weights(out["config"])  # what shows results reads it without accuracy
    return out


# ------------------------------------------------------------ run folders and their status
def runs_under(root: str | Path) -> Iterator[dict[str, Any]]:
    """:func:`load_run` of every run directory under ``root`` (any depth), in path order."""
    for cfg_file in sorted(Path(root).rglob("config.json")):
        yield load_run(cfg_file.parent, root)


def runs_since(output_dir: str | Path, since: float) -> list[dict[str, Any]]:
    """:func:`load_run` of every run under ``output_dir`` started (or resumed) at or after
    ``since`` (epoch seconds): what one command just ran."""
    root = Path(output_dir).expanduser()
    found = []
    for cfg_file in sorted(root.glob("*/config.json")):
        if cfg_file.stat().st_mtime >= since - 1:
            found.append(load_run(cfg_file.parent, root))
    return found


HEARTBEAT_BYTES = 64  # "1763849095.123\n": a heartbeat is read no further


def read_heartbeat(run_dir: str | Path, root: str | Path | None = None) -> float | None:
    """The run's last heartbeat (epoch seconds), or None (also when the file resolves
    outside ``root``, default ``run_dir``, or is no regular file: :func:`file_problem`)."""
    path = Path(run_dir) / HEARTBEAT_FILE
    if file_problem(path, Path(root) if root is not None else Path(run_dir)):
        return None
    try:
        with open_checked(path, Path(root) if root is not None else Path(run_dir)) as fh:
            beat = float(fh.read(HEARTBEAT_BYTES).strip())
        if math.isfinite(beat):
            return beat
    except _Moved:
        return None
    except (OSError, ValueError):
        pass
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
    root = Path(run.get("root") or run_dir)
    beat = read_heartbeat(run_dir, root)
    if beat is None:  # the newest record file's time, of those inside the records folder
        stamps = [p.stat().st_mtime for p in run_dir.glob("*") if not file_problem(p, root) and p.is_file()]
        beat = max(stamps) if stamps else None
    if beat is not None and stale_after > 0:
        silence = (time.time() if now is None else now) - beat
        if silence > stale_after:
            return "stale", f"no heartbeat for {silence:.0f} s (> stale-after-s={stale_after:g}): server killed or SuperLink lost"
    return "running", None


# ------------------------------------------------------------ summaries of round records
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
    gpu = [x for x in (finite_number(r.get("client_peak_gpu_mb")) for r in rounds) if x is not None]

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
        "peak_client_gpu_mb": max(gpu) if gpu else None,  # clients on a GPU only
        "client_failures": int(total("client_failures", trained)),
        **privacy_spent(rounds),
    }


def privacy_spent(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The privacy a run has spent: ``dp`` (its mode, ``central`` or ``local``), ``epsilon``
    and ``dp_delta`` of the last round with a ``privacy`` entry (ε is cumulative: the last
    one is the run's). ``epsilon`` None with ``dp`` set: no noise was added, no bound (ε ∞).
    All None without DP, and for records from before rounds had the field."""
    entry = next((r["privacy"] for r in reversed(rounds)
                  if isinstance(r.get("privacy"), dict) and "delta" in r["privacy"]), None)
    if entry is None:
        return {"dp": None, "epsilon": None, "dp_delta": None}
    mode = entry.get("mode")
    return {"dp": mode if isinstance(mode, str) else "?", "epsilon": finite_number(entry.get("epsilon")),
            "dp_delta": finite_number(entry.get("delta"))}


def spent_text(dp: Any, epsilon: Any, delta: Any) -> str:
    """``ε 1.23 (δ 1e-05, central)``: the privacy spent as :func:`privacy_spent` gives it
    (``ε ∞`` when no noise was added: no bound), ``""`` without DP (``dp`` None)."""
    if dp is None:
        return ""
    shown = "∞" if epsilon is None else f"{epsilon:.2f}" if finite_number(epsilon) is not None else "?"
    at = f"{delta:g}" if finite_number(delta) is not None else "?"
    return f"ε {shown} (δ {at}, {dp})"


def _is_int(v: Any) -> bool:
    """``v`` is an integer and not a boolean (a round number)."""
    return isinstance(v, int) and not isinstance(v, bool)


def finite_number(v: Any) -> float | None:
    """A record's finite number as it is (int stays int), else None (``"12"``, ``True``,
    NaN, a list: None): how every reader of records treats a garbled field."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and fits_a_record(v):
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


def progress_line(r: dict[str, Any], total: int, random_weights: bool = False) -> str:
    """``round 3/10 | acc 0.812 loss 0.421 | clients mean 0.790 | up 0.5 KB down 0.5 KB | round 4.1 s, total 12.3 s``:
    the round's own seconds (``round_time_s``) and the seconds since the run started (``wall_time_s``).

    ``clients mean`` is the plain mean of the clients' accuracies on their own test splits
    (``client_accuracy_mean``: every client counts once); Flower's history (run-config
    ``verbose=true``) shows the mean weighted by test examples
    (:func:`fedtext.server.strategy.weighted_accuracy`), which differs when clients hold different
    numbers of test examples. With ``random_weights`` (a ``weights=random`` run) no accuracy is
    printed."""
    if random_weights:  # a random model's accuracy is no result: not printed (RANDOM_WEIGHTS_NOTE)
        r = round_without_accuracy(r)
    acc = ("acc - (random weights)" if random_weights else
           "acc   -  " if r.get("global_accuracy") is None else f"acc {r['global_accuracy']:.3f}")
    loss = "" if r.get("global_loss") is None else f" loss {r['global_loss']:.3f}"
    cli = "" if r.get("client_accuracy_mean") is None else f" | clients mean {r['client_accuracy_mean']:.3f}"
    if r.get("client_post_accuracy"):
        pa = participant_accuracy([r])
        cli += f" | post-tuned P {pa['p_accuracy']:.3f}" + (
            "" if pa["np_accuracy"] is None else f" NP {pa['np_accuracy']:.3f}"
        )
    kb = f" | up {r.get('bytes_up', 0) / 1024:.1f} KB down {r.get('bytes_down', 0) / 1024:.1f} KB"
    drop = f" | dropped {len(r['dropped'])}" if r.get("dropped") else ""
    drop += privacy_text(r.get("privacy"))
    took = f"round {r['round_time_s']:.1f} s, " if isinstance(r.get("round_time_s"), (int, float)) else ""
    return f"fedtext round {r['round']}/{total} | {acc}{loss}{cli}{kb}{drop} | {took}total {r.get('wall_time_s', 0):.1f} s"


def privacy_text(entry: Any) -> str:
    """`` | ε 1.23 (δ 1e-05, central)`` of a round's ``privacy`` entry (``ε ∞`` when no noise was
    added: no bound), or ``""`` (no DP, or an entry that is not one)."""
    if not isinstance(entry, dict) or "delta" not in entry:
        return ""
    return " | " + spent_text(entry.get("mode") or "?", entry.get("epsilon"), entry["delta"])


def _mean(xs: list[float]) -> float | None:
    """The mean of ``xs``, None when empty."""
    return sum(xs) / len(xs) if xs else None
