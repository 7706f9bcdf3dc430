"""Checkpoints: the server's whole state after a round, in the run's folder.

``<run-dir>/checkpoint.npz`` holds, after round ``r``:

* ``global_<i>``: the global arrays (what the next round downloads), float as sent;
* ``state``: the strategy's own state, pickled (``FedTextStrategy.checkpoint_attrs``:
  FedBPT's server CMA-ES, pycma object included; FedDLS's update history and which
  version each client holds), as a ``uint8`` array;
* ``meta``: JSON (round, method, seed, fedtext's checkpoint format version).

Client sampling needs no state: round ``t`` draws with ``default_rng([seed, t])``, and
clients seed their local search from (seed, partition, round), so a run resumed after
round ``r`` samples and trains exactly as the uninterrupted run would from round ``r+1``.

The file is written to a temporary name and renamed, so a run killed while saving
keeps the previous checkpoint. It is read only from a run folder the user names with
``resume=``: pickle runs code, so never resume from a folder you did not write.
"""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FILE = "checkpoint.npz"
FORMAT = 1


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
    buf = io.BytesIO()
    np.savez(buf, **blobs)
    tmp = run_dir / (FILE + ".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(run_dir / FILE)
    return run_dir / FILE


def load(run_dir: str | Path) -> Checkpoint:
    """Read ``<run_dir>/checkpoint.npz`` (``FileNotFoundError`` when there is none)."""
    path = Path(run_dir) / FILE
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        n = sum(1 for k in z.files if k.startswith("global_"))
        arrays = [z[f"global_{i}"] for i in range(n)]
        state = pickle.loads(bytes(z["state"]))  # noqa: S301 - our own run folder (see module doc)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: checkpoint format {meta.get('format')}, this fedtext reads {FORMAT}")
    return Checkpoint(int(meta["round"]), arrays, state, meta)
