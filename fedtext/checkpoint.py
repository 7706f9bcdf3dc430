"""Checkpoints: the server's whole state after a round, in the run's folder.

``<run-dir>/checkpoint.npz`` holds, after round ``r``:

* ``global_<i>``: the global arrays (what the next round downloads), float as sent;
* ``state``: the strategy's own state, pickled (``FedTextStrategy.checkpoint_attrs``:
  FedBPT's server CMA-ES, pycma object included; FedDLS's update history and which
  version each client holds), as a ``uint8`` array;
* ``meta``: JSON (round, method, seed, fedtext's checkpoint format version);
* ``signature``: HMAC-SHA256 over every other entry (name, dtype, shape, bytes) with a
  32-byte key that only the user who ran the server can read (:func:`key_path`,
  ``~/.fedtext/checkpoint.key`` by default, made with mode 0600 on the first save).

Client sampling needs no state: round ``t`` draws with ``default_rng([seed, t])``, and
clients seed their local search from (seed, partition, round), so a run resumed after
round ``r`` samples and trains exactly as the uninterrupted run would from round ``r+1``.

The file is written to a temporary name and renamed, so a run killed while saving
keeps the previous checkpoint.

Why a signature: ``state`` is a pickle (pycma's ES object has no array-only form), and
unpickling runs code. :func:`load` therefore refuses, before anything is unpickled, a
checkpoint whose signature does not verify with this user's key (written by someone else,
edited, or from fedtext's unsigned format 1) and a checkpoint path that resolves outside
its run folder (a symlink planted in ``output-dir``). Someone who can write the run
folder but cannot read the key cannot make fedtext run their code. The caller compares
the run-config before it calls :func:`load` (:func:`fedtext.server_app.resume_checkpoint`).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import pickle
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FILE = "checkpoint.npz"
FORMAT = 2  # 2: signed (1: unsigned, refused)
KEY_ENV = "FEDTEXT_CHECKPOINT_KEY"  # path of the signing key file, when not the default
KEY_BYTES = 32  # HMAC-SHA256 key: 256 bits


class CheckpointError(ValueError):
    """A checkpoint that must not be loaded (unsigned, tampered with, outside its run folder)."""


def key_path() -> Path:
    """Where the signing key lives: ``$FEDTEXT_CHECKPOINT_KEY`` or ``~/.fedtext/checkpoint.key``."""
    return Path(os.environ.get(KEY_ENV) or "~/.fedtext/checkpoint.key").expanduser()


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


def _signature(key: bytes, blobs: dict[str, np.ndarray]) -> bytes:
    """HMAC-SHA256 over every entry but ``signature``, in name order: name, dtype, shape, bytes
    (so a renamed, reshaped or retyped entry does not verify either)."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for name in sorted(blobs):
        if name == "signature":
            continue
        a = np.ascontiguousarray(blobs[name])
        mac.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        mac.update(a.tobytes())
    return mac.digest()


@dataclass(frozen=True)
class Checkpoint:
    """What :func:`save` wrote after ``round``."""

    round: int
    global_arrays: list[np.ndarray]
    state: dict[str, Any]
    meta: dict[str, Any]


def save(run_dir: str | Path, server_round: int, global_arrays: list[np.ndarray], state: dict[str, Any],
         meta: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint of ``server_round`` atomically; returns its path."""
    run_dir = Path(run_dir)
    info = {"round": server_round, "format": FORMAT, **(meta or {})}
    blobs = {f"global_{i}": np.asarray(a) for i, a in enumerate(global_arrays)}
    blobs["state"] = np.frombuffer(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    blobs["meta"] = np.frombuffer(json.dumps(info).encode(), dtype=np.uint8)
    blobs["signature"] = np.frombuffer(_signature(_key(create=True), blobs), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **blobs)
    tmp = run_dir / (FILE + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(run_dir / FILE)
    return run_dir / FILE


def load(run_dir: str | Path) -> Checkpoint:
    """Read ``<run_dir>/checkpoint.npz`` (``FileNotFoundError`` when there is none).

    Raises :class:`CheckpointError`, having unpickled nothing, when the path resolves
    outside ``run_dir``, the signature is missing or does not verify with this user's key,
    or the format is not :data:`FORMAT`."""
    run_dir = Path(run_dir)
    path = run_dir / FILE
    if not path.exists():
        raise FileNotFoundError(path)
    if not path.resolve().is_relative_to(run_dir.resolve()):
        raise CheckpointError(f"{path} resolves to {path.resolve()}, outside its run folder: refused")
    with np.load(path, allow_pickle=False) as z:  # arrays only: nothing here runs code
        blobs = {k: z[k] for k in z.files}
    if "signature" not in blobs:
        raise CheckpointError(f"{path} is not signed (fedtext's format 1, or not written by fedtext): refused, "
                              f"since loading it would unpickle code")
    if not hmac.compare_digest(bytes(blobs["signature"]), _signature(_key(create=False), blobs)):
        raise CheckpointError(f"{path}: signature does not verify with {key_path()} (written by another "
                              f"user or key, or modified): refused")
    meta = json.loads(bytes(blobs["meta"]).decode())
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')}, this fedtext reads {FORMAT}")
    n = sum(1 for k in blobs if k.startswith("global_"))
    arrays = [blobs[f"global_{i}"] for i in range(n)]
    state = pickle.loads(bytes(blobs["state"]))  # noqa: S301 - signed by this user's key (see module doc)
    return Checkpoint(int(meta["round"]), arrays, state, meta)
