"""A journal of a node's fedtext state, so that ``resume=`` and restarted SuperNodes lose nothing.

What a client keeps between rounds lives in Flower's node ``context.state`` (FeS's
pseudo labels and filter choice, FedDPGu's forgotten indices, FedDLS's p' and its
version): a :class:`~flwr.app.RecordDict` held in the SuperNode's memory for one Flower
run. A run resumed from its checkpoint (``resume=<run-id>``) is a new Flower run: every
node starts with an empty state, while the server's checkpoint assumes the clients hold
what they held after the checkpointed round. This module keeps that state on disk, per
client, and puts it back. :class:`fedtext.node.node.Node` calls it around every fit and
evaluate (:meth:`Journal.prepare` before, :meth:`Journal.record` after); a method's client
just keeps using ``self.state``.

Where: ``<output-dir>/<run_key>/node-state/p<partition-id>/round-<r>.json``. ``run_key``
is the run folder's name, which the server sends in every fit and evaluate config
(:meth:`fedtext.server.strategy.FedTextStrategy.run_key`) and which stays the same after
``resume=``. ``output-dir`` is the run-config's, resolved *on the node*: in a simulation
the server's run folder (the clients share its disk); on a real device the same path on
the device's own disk (relative paths against the SuperNode's working directory), which
must be writable and survive the SuperNode. Without ``run_key`` (unit tests, a strategy
without a recorder) nothing is read or written: the state behaves exactly as before.

Which state: every :class:`~flwr.app.ConfigRecord` in ``context.state`` (other record
kinds are left alone and not journalled), as JSON -- never pickle, a node must not run
code from a file -- with each value's type kept (:func:`encode_records`): ints and
bools as JSON integers and booleans, floats as JSON numbers (Python writes the shortest
repr that reads back to the same float64, so a float32 stored as a Python float
round-trips exactly too; NaN and infinities are written as the strings ``"nan"``,
``"inf"``, ``"-inf"`` so the file stays strict JSON), strings as strings, bytes as
base64 (FedDLS's float32 p').

The stamp: the record :data:`STAMP_KEY` (``{"round": s, "prev": p}``) says that the
state is what the node held after round ``s`` (0: before any round), and ``p < s`` the
journal entry a redo of round ``s`` starts from. It is fedtext's own key, never journalled.

Rules, for a message of ``server_round`` r:

* **Before** (:meth:`Journal.prepare`): the live state is used as is -- no disk read --
  when it is stamped ``s < r``, or ``s == r`` for an evaluate (the same round's fit
  made it). Otherwise (a fresh node: no stamp; or a state stamped from the round being
  redone or later) it is *replaced* by the journal entry of the largest round ``< r``,
  or emptied when there is none. An evaluate of round r may also take an entry of
  round r, but only one written by this same Flower run (a SuperNode restarted between
  the fit and the evaluate of a round); an entry of round r left by an earlier Flower
  run belongs to a crashed attempt whose round r is being redone. Entries a fit of
  round r finds at rounds ``>= r`` (an evaluate: ``> r``, and that stale round-r entry)
  come from an abandoned attempt -- within one Flower run a node answers the rounds in
  order -- and are deleted.
* **After** (:meth:`Journal.record`): after a fit the state is written as the entry of
  round r whenever it holds anything (or held something before: an emptied state is
  written too) and stamped r; after an evaluate only if the evaluate changed it (none
  of fedtext's methods does). Writes go to a temporary file in the same folder, are
  flushed to disk, and renamed over the entry (:func:`write_entry`): a node killed
  while writing leaves the previous entry, never half a file.
* **Pruning**: a write keeps only two entries, the one written (round r) and the one
  the state was derived from (``prev``, the newest round before r): the first is what
  the next round starts from, the second what a redo of round r starts from when the
  run dies before the server's checkpoint of round r. Older and abandoned entries go.

What is not covered: two nodes serving the same partition id in one run share one
journal (a misconfiguration fedtext does not detect here); a partition that a crashed
attempt fitted in the round being redone but that the resumed attempt does not fit in
that round (sampling is seeded by round, so only a client missing at resume) keeps the
crashed attempt's entry until its next fit, and reads it if it restarts before then.
``FEDTEXT_NO_NODE_JOURNAL=1`` in a client's environment turns the journal off (a testing
aid: the resume tests show with it that they fail without the journal).

A journal write that fails (disk full, read-only), or a journal folder that cannot be
listed, is logged as a warning and the round goes on: training does not stop, only
resumability is lost, and the log says so. An entry that is there but is not a valid
fedtext entry (edited, not JSON, a pickle) fails the message with
:class:`NodeStateError` naming the file: that is never silently replaced by nothing.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, RecordDict

from fedtext.common.config import is_run_id  # the one rule of what a run id (a run folder's name) is

log = logging.getLogger("fedtext")

STAMP_KEY = "fedtext.state-round"  # {"round": s, "prev": p}: the round the state is valid after
DIR = "node-state"
FORMAT = 1
ENTRY = re.compile(r"^round-(\d+)\.json$")
DISABLE_ENV = "FEDTEXT_NO_NODE_JOURNAL"  # tests only: "1" turns the journal off (today's behaviour)


class NodeStateError(ValueError):
    """A journal entry or run key that cannot be used (malformed, not fedtext's, unsafe)."""


# ------------------------------------------------------------------ encoding
def _kind(value: Any) -> str:
    for name, cls in (("bool", bool), ("int", int), ("float", float), ("str", str), ("bytes", bytes)):
        if isinstance(value, cls):  # bool before int: a bool is an int
            return name
    raise NodeStateError(f"cannot journal a {type(value).__name__}")


def _enc(value: Any, kind: str) -> Any:
    if kind == "float":
        return float(value) if math.isfinite(value) else repr(float(value))  # "nan", "inf", "-inf"
    if kind == "bytes":
        return base64.b64encode(value).decode("ascii")
    return value


def _dec(value: Any, kind: str) -> Any:
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "float" and (isinstance(value, (int, float)) and not isinstance(value, bool)
                            or value in ("nan", "inf", "-inf")):
        return float(value)
    if kind == "str" and isinstance(value, str):
        return value
    if kind == "bytes" and isinstance(value, str):
        return base64.b64decode(value.encode("ascii"), validate=True)
    raise NodeStateError(f"a journalled {kind} holds {value!r}")


def encode_records(state: RecordDict) -> dict[str, dict[str, dict[str, Any]]]:
    """The ConfigRecords of ``state`` (the stamp left out) as JSON-ready dicts:
    ``{record: {key: {"type": t, "list": bool, "value": v}}}``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in sorted(state.keys()):
        rec = state[name]
        if name == STAMP_KEY or not isinstance(rec, ConfigRecord):
            continue
        fields = {}
        for key in sorted(rec.keys()):
            value = rec[key]
            if isinstance(value, list):
                kind = _kind(value[0]) if value else "int"
                fields[key] = {"type": kind, "list": True, "value": [_enc(v, kind) for v in value]}
            else:
                kind = _kind(value)
                fields[key] = {"type": kind, "list": False, "value": _enc(value, kind)}
        out[name] = fields
    return out


def decode_records(data: Any) -> dict[str, ConfigRecord]:
    """ConfigRecords from :func:`encode_records`'s form (each value checked against its type)."""
    if not isinstance(data, dict):
        raise NodeStateError("journalled records are not an object")
    out = {}
    for name, fields in data.items():
        if name == STAMP_KEY or not isinstance(fields, dict):
            raise NodeStateError(f"journalled record {name!r} is not a fedtext record")
        values: dict[str, Any] = {}
        for key, field in fields.items():
            if not isinstance(field, dict) or set(field) != {"type", "list", "value"}:
                raise NodeStateError(f"journalled field {name}.{key} is malformed")
            kind, value = field["type"], field["value"]
            if field["list"]:
                if not isinstance(value, list):
                    raise NodeStateError(f"journalled field {name}.{key} is not a list")
                values[key] = [_dec(v, kind) for v in value]
            else:
                values[key] = _dec(value, kind)
        out[name] = ConfigRecord(values)
    return out


# ------------------------------------------------------------------ files
def check_run_key(run_key: Any) -> str:
    """``run_key`` if it is one safe path component (it comes from the server), else an error."""
    if not isinstance(run_key, str) or not is_run_id(run_key):
        raise NodeStateError(f"run_key {run_key!r} is not a run folder name: no node state journalled under it")
    return run_key


def journal_dir(output_dir: str | os.PathLike, run_key: str, partition_id: int) -> Path:
    """``<output-dir>/<run_key>/node-state/p<partition-id>`` (on this node's disk)."""
    return Path(output_dir).expanduser() / check_run_key(run_key) / DIR / f"p{int(partition_id)}"


def entries(directory: Path) -> dict[int, Path]:
    """The journal entries in ``directory`` by round (none when it does not exist)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return {}
    return {int(m.group(1)): directory / name for name in names if (m := ENTRY.match(name))}


def write_entry(directory: Path, entry: Mapping[str, Any]) -> Path:
    """Write ``entry`` as ``round-<r>.json`` atomically: a temporary file in the same
    folder, flushed and fsynced, then renamed over the old entry."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"round-{int(entry['round'])}.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".round-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry, f, allow_nan=False, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def read_entry(path: Path) -> dict[str, Any]:
    """A journal entry, checked: fedtext's format, its round matching its name, records decodable."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise NodeStateError(f"unreadable node state {path}: {exc}") from None
    m = ENTRY.match(path.name)
    if (not isinstance(entry, dict) or entry.get("format") != FORMAT or m is None
            or entry.get("round") != int(m.group(1)) or not isinstance(entry.get("prev"), int)):
        raise NodeStateError(f"{path} is not a fedtext node-state entry (format {FORMAT})")
    try:
        entry["records"] = decode_records(entry.get("records"))
    except (NodeStateError, ValueError, TypeError) as exc:
        raise NodeStateError(f"{path}: {exc}") from None
    return entry


# ------------------------------------------------------------------ the journal
def stamp(state: RecordDict) -> tuple[int, int] | None:
    """(round, prev) the state is stamped with; None for a state without (fresh) stamp."""
    if STAMP_KEY not in state or not isinstance(state[STAMP_KEY], ConfigRecord):
        return None
    rec = state[STAMP_KEY]
    return int(rec["round"]), int(rec["prev"])


def set_stamp(state: RecordDict, server_round: int, prev: int) -> None:
    state[STAMP_KEY] = ConfigRecord({"round": int(server_round), "prev": int(prev)})


def replace_records(state: RecordDict, records: Mapping[str, ConfigRecord]) -> None:
    """Make ``records`` the state's ConfigRecords (in place: ``state`` is Flower's)."""
    for name in [k for k in state.keys() if isinstance(state[k], ConfigRecord)]:
        del state[name]
    for name, rec in records.items():
        state[name] = rec


class Journal:
    """One client's journal in one run (see the module doc for the rules).

    Parameters
    ----------
    directory
        ``<output-dir>/<run_key>/node-state/p<partition-id>``.
    flower_run
        Flower's run id of the current run (``context.run_id``), written into every entry;
        None when unknown (an entry of the current round is then never trusted).
    """

    def __init__(self, directory: Path, flower_run: int | None = None) -> None:
        self.directory = directory
        self.flower_run = flower_run

    @classmethod
    def of(cls, output_dir: str, config: Mapping[str, Any], partition_id: int,
           flower_run: int | None = None) -> Journal | None:
        """The journal for a message's ``config`` (None without ``run_key``, or when
        :data:`DISABLE_ENV` is set)."""
        run_key = config.get("run_key")
        if not run_key or os.environ.get(DISABLE_ENV) == "1":
            return None
        return cls(journal_dir(output_dir, run_key, partition_id), flower_run)

    def prepare(self, state: RecordDict, server_round: int, kind: str) -> dict[str, Any]:
        """Make ``state`` the state this ``kind`` ("fit"/"evaluate") message of
        ``server_round`` must start from; returns its encoded records (for :meth:`record`)."""
        st = stamp(state)
        if st is None or not (st[0] < server_round or (kind == "evaluate" and st[0] == server_round)):
            self.restore(state, server_round, kind)
        return encode_records(state)

    def restore(self, state: RecordDict, server_round: int, kind: str) -> int:
        """Replace ``state`` by the newest usable entry (see module doc); delete the
        abandoned ones. Returns the round restored (0: none, the state is emptied)."""
        try:
            found = entries(self.directory)
        except OSError as exc:
            log.warning("fedtext: could not read the node-state journal %s (%s): this client starts from "
                        "an empty state", self.directory, exc)
            found = {}
        chosen: dict[str, Any] | None = None
        for r in sorted(found, reverse=True):
            if r > server_round or (r == server_round and kind == "fit"):
                self._unlink(found[r])  # written by an abandoned attempt
                continue
            entry = read_entry(found[r])
            if r == server_round and (self.flower_run is None or entry.get("flower_run") != self.flower_run):
                self._unlink(found[r])  # this round of a crashed attempt, being redone now
                continue
            chosen = entry
            break
        if chosen is None:
            replace_records(state, {})
            set_stamp(state, 0, 0)
            return 0
        replace_records(state, chosen["records"])
        set_stamp(state, chosen["round"], chosen["prev"])
        log.info("fedtext: node state of round %d restored from %s", chosen["round"], self.directory)
        return int(chosen["round"])

    def record(self, state: RecordDict, server_round: int, kind: str, before: Mapping[str, Any]) -> Path | None:
        """Journal ``state`` after this message (module doc: when, and which entries stay)."""
        now = encode_records(state)
        if kind != "fit" and now == before:
            return None  # an evaluate that changed nothing: the stamp stays
        s, p = stamp(state) or (0, 0)
        prev = s if s < server_round else p
        set_stamp(state, server_round, prev)
        if not now and not before:
            return None  # nothing held, nothing to write
        entry = {"format": FORMAT, "round": int(server_round), "prev": int(prev), "flower_run": self.flower_run,
                 "records": now}
        try:
            path = write_entry(self.directory, entry)
            for r, other in entries(self.directory).items():
                if r not in (server_round, prev):
                    self._unlink(other)
        except OSError as exc:
            log.warning("fedtext: could not journal node state to %s (%s): a resumed run will not have "
                        "this client's state", self.directory, exc)
            return None
        return path

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
