"""Checkpoints: the server's whole state after a round, in the run's folder.

``<run-dir>/checkpoint.npz`` (a zip of ``.npy`` members, readable by ``np.load``) holds,
after round ``r``:

* ``global_<i>``: the global arrays (what the next round downloads), float as sent;
* ``state``: the strategy's own state, pickled (``FedTextStrategy.checkpoint_attrs``:
  FedBPT's server CMA-ES, pycma object included; FedDLS's update history and which
  version each client holds), as a ``uint8`` array;
* ``meta``: JSON: round, fedtext's checkpoint format (:data:`FORMAT`), the run it belongs
  to (:class:`Binding`: run id, method, :func:`config_hash`), seed, and the byte count and
  SHA-256 of every other member;
* ``signature``: HMAC-SHA256 of ``meta``'s bytes with a 32-byte key that only the user who
  ran the server can read (:func:`key_path`, ``~/.fedtext/server/checkpoint.key`` by default, made
  with mode 0600 on the first save). Signing ``meta`` signs every member through its digest.

Client sampling needs no state: round ``t`` draws with ``default_rng([seed, t])``, and
clients seed their local search from (seed, partition, round), so a run resumed after
round ``r`` samples and trains exactly as the uninterrupted run would from round ``r+1``.

The file is written to a temporary name and renamed, so a run killed while saving
keeps the previous checkpoint.

Why a signature: ``state`` is a pickle (pycma's ES object has no array-only form), and
unpickling runs code. Someone who can write the run folder but cannot read the key cannot
make fedtext run their code. Why a binding: a checkpoint signed with the same key but
written by another run (a fedprompt checkpoint copied into a bbt-fed run folder) verifies
too; its arrays would reach the wrong model (a matmul error deep in round 1) and its
pickle the wrong strategy. Why bounds: the zip's members may be compressed, so a 1.4 MB
file can inflate to gigabytes before a signature is even checked.

:func:`load` therefore reads, in this order, and refuses in one line
(:class:`CheckpointError`) at the first failure, before anything is unpickled:

1. the path, which must resolve inside its run folder (a symlink planted in ``output-dir``);
2. its size on disk and the zip's member list: only the members above, each declaring
   (``zipfile.ZipInfo.file_size``) at most its bound (:class:`Limits`), all together at
   most the total;
3. ``meta`` and ``signature`` (small members, read with a cap): the format (an older
   one: "made by an older fedtext; start a new run"), then the signature;
4. the binding: run id, method and config hash must be the resuming run's (each that
   differs is named);
5. every other member: its signed byte count against its bound, then read in chunks with
   that count as a cap (a zip header that understates the size inflates no further), its
   SHA-256 against the signed one, its ``.npy`` header against its length;
6. ``state`` is unpickled last.

The caller compares the run-config before it calls :func:`load`
(:func:`fedtext.server_app.resume_checkpoint`).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import math
import os
import pickle
import re
import secrets
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedtext.common.comm import data_bytes, npy_header  # numpy only: analysis scripts read checkpoints without Flower

if TYPE_CHECKING:
    from fedtext.common.comm import ArraySpec

FILE = "checkpoint.npz"
FORMAT = 3  # 3: signed meta with binding and digests (2: signed, bound to nothing; 1: unsigned: both refused)
KEY_ENV = "FEDTEXT_CHECKPOINT_KEY"  # path of the signing key file, when not the default
KEY_BYTES = 32  # HMAC-SHA256 key: 256 bits

# Keys a resumed run may change: how long to wait, how to report; not what is learnt.
# trainable-parameters is derived (runs recorded before it existed lack it). Left out of
# :func:`config_hash` too.
RESUMABLE_CHANGES = frozenset({"resume", "num-server-rounds", "stale-after-s", "round-timeout-s",
                               "client-failure-rate", "trainable-parameters", "tracker", "verbose",
                               "client-progress",
                               # a re-registered SuperNode (new key, new node id) is re-pinned
                               "node-partitions"})

# Bounds (:class:`Limits`), in bytes of a member's uncompressed ``.npy``.
NPY_HEADER_BOUND = 4096  # an .npy header: numpy writes 128 bytes for fedtext's shapes
ARRAY_FACTOR = 2  # a global array may be kept as float64 where its spec says float32
STATE_ALLOWANCE = 4 * 2**20  # pickle framing, FeS's labelled set and pacer, FedDLS's client versions
META_BOUND = 2**20  # meta's JSON: a digest line per member (hundreds for a whole encoder)
SIGNATURE_BOUND = NPY_HEADER_BOUND + hashlib.sha256().digest_size
CEILING = 16 * 2**30  # what :func:`load` reads when no model is named (analysis of one's own runs)
ZIP_SLACK = 2**20  # zip headers and directory on disk beyond the members' bytes
CHUNK = 2**20  # decompression step
_MEMBER = re.compile(r"global_(0|[1-9][0-9]*)|state|meta|signature")


class CheckpointError(ValueError):
    """A checkpoint that must not be loaded (unsigned, tampered with, outside its run
    folder, of another run, larger than its run's model can hold, or of an older format)."""


def key_path() -> Path:
    """Where the signing key lives: ``$FEDTEXT_CHECKPOINT_KEY`` or ``~/.fedtext/server/checkpoint.key``."""
    return Path(os.environ.get(KEY_ENV) or "~/.fedtext/server/checkpoint.key").expanduser()


def _key(create: bool) -> bytes:
    """This user's signing key; made (32 random bytes, mode 0600) when ``create`` and missing."""
    path = key_path()
    if not path.exists() and create:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another server process made it first: use theirs
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"no checkpoint key readable at {path} ({exc.strerror}): only the user whose "
                              f"server wrote a checkpoint can resume it") from None
    if len(key) < KEY_BYTES:
        raise CheckpointError(f"checkpoint key {path} is {len(key)} bytes, expected {KEY_BYTES}")
    return key


def _mac(key: bytes, meta: bytes) -> bytes:
    """HMAC-SHA256 of ``meta``'s JSON bytes (which hold every other member's digest)."""
    return hmac.new(key, meta, digestmod=hashlib.sha256).digest()


def config_hash(config: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a run-config as ``config.json`` records it, less
    :data:`RESUMABLE_CHANGES`: what the run learns, the same after a JSON round trip."""
    kept = {k: v for k, v in config.items() if k not in RESUMABLE_CHANGES}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Binding:
    """The run a checkpoint belongs to, signed into its ``meta``: the run id (its folder's
    name), the method, and :func:`config_hash` of the run-config."""

    run_id: str
    method: str
    config_hash: str

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, str) or not value:
                raise ValueError(f"Binding.{name} must be a non-empty string, got {value!r}")

    def differences(self, meta: Mapping[str, Any]) -> list[str]:
        """What of this binding a checkpoint's ``meta`` does not hold, as ``method 'fedprompt'
        (this run: 'bbt-fed')``; empty when it is this run's."""
        out = []
        for name, value in asdict(self).items():
            theirs = meta.get(name)
            if theirs != value:
                if name == "config_hash":  # 12 hex digits tell two configs apart in a line
                    theirs, value = theirs[:12] if isinstance(theirs, str) else theirs, value[:12]
                out.append(f"{name.replace('_', ' ')} {theirs!r} (this run: {value!r})")
        return out


@dataclass(frozen=True)
class Limits:
    """The most bytes each member of a checkpoint may hold, uncompressed (its ``.npy``).

    For a run's model (:meth:`for_model`): global array ``i`` at most
    ``ARRAY_FACTOR * spec_i.nbytes() + NPY_HEADER_BOUND`` (its :class:`~fedtext.common.comm.ArraySpec`
    from ``Model.global_specs()``; the factor 2 lets an array be float64 where its spec says
    float32); ``state`` at most ``STATE_ALLOWANCE + NPY_HEADER_BOUND`` plus what the method
    declares its state can grow to (``FedTextStrategy.checkpoint_state_bytes``: FedBPT's
    CMA-ES, O(d^2); FedDLS's update history, rounds x an update); ``meta`` at most
    :data:`META_BOUND`, ``signature`` :data:`SIGNATURE_BOUND`. ``total`` is their sum.
    With no model (``global_bytes=None``): any number of global arrays, each and all
    together at most :data:`CEILING` (reading one's own runs for analysis).
    """

    global_bytes: tuple[int, ...] | None
    state_bytes: int

    def __post_init__(self) -> None:
        if self.state_bytes < 0 or any(b < 0 for b in self.global_bytes or ()):
            raise ValueError(f"checkpoint limits must not be negative: {self}")

    @classmethod
    def for_model(cls, specs: Sequence[ArraySpec], state_bytes: int = 0) -> Limits:
        """The limits of a run whose model's global arrays are ``specs`` and whose method
        declares ``state_bytes`` of state beyond :data:`STATE_ALLOWANCE`."""
        return cls(tuple(ARRAY_FACTOR * s.nbytes() + NPY_HEADER_BOUND for s in specs),
                   STATE_ALLOWANCE + int(state_bytes) + NPY_HEADER_BOUND)

    @property
    def total(self) -> int:
        """The most bytes all members together may hold."""
        if self.global_bytes is None:
            return CEILING
        return sum(self.global_bytes) + self.state_bytes + META_BOUND + SIGNATURE_BOUND

    def bound(self, name: str) -> int | None:
        """The most bytes member ``name`` may hold; None: no such member in this run's checkpoints."""
        if name == "meta":
            return META_BOUND
        if name == "signature":
            return SIGNATURE_BOUND
        if name == "state":
            return min(self.state_bytes, self.total)
        if self.global_bytes is None:
            return CEILING
        i = int(name.removeprefix("global_"))
        return self.global_bytes[i] if i < len(self.global_bytes) else None


UNBOUNDED = Limits(None, CEILING)  # no model named: only the ceiling


@dataclass(frozen=True)
class Checkpoint:
    """What :func:`save` wrote after ``round``."""

    round: int
    global_arrays: list[np.ndarray]
    state: dict[str, Any]
    meta: dict[str, Any]


def _npy_bytes(a: np.ndarray) -> bytes:
    """``a`` as an ``.npy`` file (no pickles)."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def save(run_dir: str | Path, server_round: int, global_arrays: list[np.ndarray], state: dict[str, Any],
         meta: dict[str, Any] | None = None, binding: Binding | None = None) -> Path:
    """Write the checkpoint of ``server_round`` atomically; returns its path.

    ``binding`` (the strategy always gives it) ties the checkpoint to its run: :func:`load`
    with another run's binding refuses it. ``meta``: more JSON fields to record (the seed).
    """
    run_dir = Path(run_dir)
    members = {f"global_{i}": _npy_bytes(a) for i, a in enumerate(global_arrays)}
    members["state"] = _npy_bytes(np.frombuffer(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), np.uint8))
    info = {**(meta or {}), **(asdict(binding) if binding else {}), "round": server_round, "format": FORMAT,
            "members": {name: {"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for name, b in members.items()}}
    text = json.dumps(info).encode()
    members["meta"] = _npy_bytes(np.frombuffer(text, np.uint8))
    members["signature"] = _npy_bytes(np.frombuffer(_mac(_key(create=True), text), np.uint8))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:  # np.savez's layout
        for name, b in members.items():
            zf.writestr(f"{name}.npy", b)
    tmp = run_dir / (FILE + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(run_dir / FILE)
    return run_dir / FILE


def peek(run_dir: str | Path, binding: Binding | None = None, limits: Limits = UNBOUNDED) -> Checkpoint:
    """:func:`load`'s checks up to the signature, the binding and the member list, reading the
    meta alone: a :class:`Checkpoint` with its ``round`` and ``meta`` and no arrays or state
    (nothing decompressed past the meta, nothing unpickled). What a runner asks before it
    starts a resume (:func:`simulations.compare.resumable_run`); the run's server then loads
    it whole. Raises as :func:`load` does."""
    return load(run_dir, binding, limits, meta_only=True)


def load(run_dir: str | Path, binding: Binding | None = None, limits: Limits = UNBOUNDED,
         meta_only: bool = False) -> Checkpoint:
    """Read ``<run_dir>/checkpoint.npz`` (``FileNotFoundError`` when there is none).

    Parameters
    ----------
    run_dir
        The run's folder.
    binding
        The run resuming it (``resume=``): a checkpoint of another run id, method or
        run-config is refused, naming what differs. None: any run of this user's.
    limits
        What the run's model can hold (:meth:`Limits.for_model`); checked against the
        zip's declared sizes before anything is decompressed, and as a cap while it is.
    meta_only
        Stop after the member list, before the arrays and the state (:func:`peek`).

    Raises
    ------
    CheckpointError
        In the order of the module's list, having unpickled nothing: the path resolves
        outside ``run_dir``; a member is no checkpoint's or declares more than its bound;
        the format is older (one line: start a new run); the signature is missing or
        does not verify with this user's key; the binding differs; a member's bytes do
        not match its signed digest. One line each.
    """
    run_dir = Path(run_dir)
    path = run_dir / FILE
    if not path.exists():
        raise FileNotFoundError(path)
    if not path.resolve().is_relative_to(run_dir.resolve()):
        raise CheckpointError(f"{path} resolves to {path.resolve()}, outside its run folder: refused")
    size = path.stat().st_size
    if size > limits.total + ZIP_SLACK:
        raise CheckpointError(f"{path} is {size} bytes, more than the {limits.total} a checkpoint of this run's "
                              f"model can hold: refused")
    try:
        with zipfile.ZipFile(path) as zf:
            return _read(path, zf, binding, limits, meta_only)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint archive ({exc}): refused") from None


def _read(path: Path, zf: zipfile.ZipFile, binding: Binding | None, limits: Limits,
          meta_only: bool = False) -> Checkpoint:
    """:func:`load`'s steps 2-6 on the open archive (``meta_only``: up to the member list)."""
    infos: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        name = info.filename.removesuffix(".npy")
        if not _MEMBER.fullmatch(name) or name in infos or name == info.filename:
            raise CheckpointError(f"{path}: member {info.filename!r} is no part of a fedtext checkpoint: refused")
        infos[name] = info
    declared = sum(i.file_size for i in infos.values())
    if declared > limits.total:
        raise CheckpointError(f"{path}: its members declare {declared} bytes uncompressed, more than the "
                              f"{limits.total} a checkpoint of this run's model can hold: refused")
    if "signature" not in infos:
        raise CheckpointError(f"{path} is not signed (fedtext's format 1, or not written by fedtext): refused, "
                              f"since loading it would unpickle code")
    if "meta" not in infos:
        raise CheckpointError(f"{path} has no meta: not a fedtext checkpoint: refused")
    text = _array(path, "meta", _member(path, zf, infos["meta"], META_BOUND)).tobytes()
    signature = _array(path, "signature", _member(path, zf, infos["signature"], SIGNATURE_BOUND)).tobytes()
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError):
        meta = None
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if fmt != FORMAT:
        if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt < FORMAT:
            raise CheckpointError(f"{path} was made by an older fedtext (checkpoint format {fmt}, this one reads "
                                  f"{FORMAT}); start a new run")
        raise CheckpointError(f"{path}: checkpoint format {fmt!r}, this fedtext reads {FORMAT}: refused")
    if not hmac.compare_digest(signature, _mac(_key(create=False), text)):
        raise CheckpointError(f"{path}: signature does not verify with {key_path()} (written by another "
                              f"user or key, or modified): refused")
    # signed by this user's key from here on: meta is as save() wrote it
    if binding is not None and (diffs := binding.differences(meta)):
        raise CheckpointError(f"{path} belongs to another run: {', '.join(diffs)}: refused")
    signed: dict[str, dict[str, Any]] = meta["members"]
    if set(signed) != set(infos) - {"meta", "signature"}:
        raise CheckpointError(f"{path}: its members {sorted(infos)} are not the signed ones "
                              f"{sorted(signed)} (modified): refused")
    n = sum(1 for name in signed if name.startswith("global_"))
    if set(signed) != {"state", *(f"global_{i}" for i in range(n))}:
        raise CheckpointError(f"{path}: members {sorted(signed)} are not global_0..global_{n - 1} and state: refused")
    if limits.global_bytes is not None and n != len(limits.global_bytes):
        raise CheckpointError(f"{path} holds {n} global arrays, this run's model has {len(limits.global_bytes)}: "
                              f"refused")
    if meta_only:
        return Checkpoint(int(meta["round"]), [], {}, meta)
    blobs: dict[str, np.ndarray] = {}
    for name in ["state", *(f"global_{i}" for i in range(n))]:
        nbytes, bound = int(signed[name]["bytes"]), limits.bound(name)
        if bound is None or nbytes > bound:
            raise CheckpointError(f"{path}: {name} holds {nbytes} bytes, more than the {bound} this run's model "
                                  f"can hold: refused")
        if infos[name].file_size != nbytes:
            raise CheckpointError(f"{path}: {name} does not verify: it declares {infos[name].file_size} bytes, "
                                  f"its signed size is {nbytes} (modified): refused")
        data = _member(path, zf, infos[name], nbytes)
        if not hmac.compare_digest(hashlib.sha256(data).hexdigest(), str(signed[name]["sha256"])):
            raise CheckpointError(f"{path}: {name} does not verify against its signed digest (modified): refused")
        blobs[name] = _array(path, name, data)
    state = pickle.loads(blobs.pop("state").tobytes())  # noqa: S301 - signed by this user's key (see module doc)
    return Checkpoint(int(meta["round"]), [blobs[f"global_{i}"] for i in range(n)], state, meta)


def _member(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> bytes:
    """Member ``info``'s bytes, decompressed ``CHUNK`` at a time and never past ``cap``
    (its declared size is checked first, then what it inflates to: a header may lie)."""
    name = info.filename.removesuffix(".npy")
    if info.file_size > cap:
        raise CheckpointError(f"{path}: {name} declares {info.file_size} bytes uncompressed, more than the {cap} "
                              f"it may hold: refused")
    out = bytearray()
    with zf.open(info) as f:
        while chunk := f.read(min(CHUNK, cap + 1 - len(out))):
            out += chunk
            if len(out) > cap:
                raise CheckpointError(f"{path}: {name} inflates past the {cap} bytes it may hold: refused")
    return bytes(out)


def _array(path: Path, name: str, data: bytes) -> np.ndarray:
    """The array of an ``.npy`` member's bytes, its header checked against its length (no
    object arrays: nothing here unpickles)."""
    try:
        shape, fortran, dtype, offset = npy_header(data, max_header_size=NPY_HEADER_BOUND)
    except ValueError as exc:
        raise CheckpointError(f"{path}: {name} is not an .npy array ({exc}): refused") from None
    count = math.prod(shape)
    if len(data) - offset != data_bytes(shape, dtype):
        raise CheckpointError(f"{path}: {name}'s header ({dtype}, {shape}) does not match its "
                              f"{len(data) - offset} bytes: refused")
    flat = np.frombuffer(memoryview(data)[offset:], dtype=dtype, count=count)
    return flat.reshape(shape, order="F" if fortran else "C").copy()
