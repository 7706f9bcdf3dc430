"""A node's memory limit, and a client that would pass it stopped in one line, not killed.

On a board the kernel's OOM killer ends a process that passes its memory limit (a cgroup's
``memory.max``, systemd's ``MemoryMax``) with SIGKILL: mid-round, with nothing said, the node
service restarted and the round's client lost. Here a node knows its limit
(:func:`node_limit_mb`: its cgroup's, or ``memory-limit-mb`` in the node config, the smaller)
and every fit and evaluate runs under a :class:`MemoryGuard`:

* **at once**, before the client computes: the memory the node already holds (torch, the
  backbone, the data) plus :data:`RESERVE_FRACTION` of the limit must fit, else
  :class:`NodeMemoryError` (a RoBERTa-large backbone on a 1 GB board never starts a step);
* **while it computes**: a thread reads the working set every :data:`POLL_S` s and, past the
  limit less the reserve, raises :class:`NodeMemoryError` in the computing thread at its next
  Python instruction, before the kernel would kill it: the client's tensors are freed, the
  message fails with one line naming the limit, the peak and the options that bring the
  method under it, and the node serves the next message.

Why not predict each method's peak: it is a model of 16 methods' allocations (activations by
head, injection, precision and batch; optimizer states; FeS's plans; distillation) that every
change would make wrong; the guard measures. The reserve covers what one torch operation
allocates between two Python instructions (MiniLM's largest tensor, the embedding table, is 47
MB; an encoder layer's activations for a batch of 16 x 128 tokens ~25 MB).

The working set is the cgroup's anonymous memory plus its mapped file pages
(:func:`working_set_mb`), what the kernel cannot take back before it kills; without a cgroup
limit, the process's resident memory. ``python -m simulations.compare simulations/experiments/memory.toml`` (the
memory study, :mod:`simulations.studies.memory`) measures every method under 1 and 2 GB (docs/deployment.md, "Memory
on a small board").
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from fedtext.common.config import GRADIENT
from fedtext.records.probes import current_rss_mb

MEMORY_LIMIT_KEY = "memory-limit-mb"  # node-config key: this node's memory limit in MB (0/absent: its cgroup's)
RESERVE_FRACTION = 0.08  # of the limit, kept free for one operation's allocations between two checks
POLL_S = 0.005  # seconds between two reads of the working set while a client computes
_UNLIMITED = 1 << 60


class NodeMemoryError(MemoryError):
    """A client that would pass its node's memory limit (the message fails; the node stays)."""


class _LimitReached(BaseException):
    """Raised asynchronously in the computing thread; turned into :class:`NodeMemoryError`.
    A ``BaseException`` so that no ``except Exception`` in a client swallows it."""


def _own_cgroup() -> tuple[Path, bool] | None:
    """This process's memory cgroup folder and whether it is cgroup v2 (None: none found)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if folder.is_dir():
                return folder, False
    for line in lines:
        if line.startswith("0::"):
            folder = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
            if (folder / "memory.max").exists():
                return folder, True
    return None


def cgroup_limit_mb() -> float | None:
    """This process's cgroup memory limit in MB (None: no limit, or no cgroup)."""
    found = _own_cgroup()
    if found is None:
        return None
    folder, v2 = found
    try:
        text = (folder / ("memory.max" if v2 else "memory.limit_in_bytes")).read_text().strip()
    except OSError:
        return None
    if text == "max" or int(text) >= _UNLIMITED // 2:
        return None
    return int(text) / 2**20


def working_set_mb(cgroup: tuple[Path, bool] | None = None) -> float:
    """What the kernel cannot take back before it kills, in a cgroup: its anonymous memory (no
    swap: it cannot be evicted) plus the file pages mapped into its processes (the code and
    libraries running; evicted, they fault straight back). Page cache nobody maps is left out:
    the kernel reclaims it first. Without a cgroup: this process's resident memory."""
    found = cgroup or _own_cgroup()  # ``cgroup``: :func:`_own_cgroup`'s answer, where the caller has it
    if found is not None:
        folder, v2 = found
        try:
            stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
            keys = ("anon", "file_mapped") if v2 else ("total_rss", "total_mapped_file")
            return sum(int(stat[k]) for k in keys) / 2**20
        except (OSError, ValueError, KeyError):
            pass
    return current_rss_mb()


def node_limit_mb(node_config: Mapping[str, Any] | None = None) -> float | None:
    """The node's memory limit in MB: the smaller of its cgroup's and the node config's
    ``memory-limit-mb`` (None: neither sets one)."""
    limits = [x for x in (cgroup_limit_mb(),) if x]
    raw = (node_config or {}).get(MEMORY_LIMIT_KEY)
    if raw not in (None, "", 0):
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"node config {MEMORY_LIMIT_KEY}={raw!r} is not a number of MB") from None
        if value < 0:
            raise ValueError(f"node config {MEMORY_LIMIT_KEY}={raw!r} must be >= 0")
        if value > 0:  # 0, typed or quoted ("0" from a node-config string): no limit of its own, the cgroup's
            limits.append(value)
    return min(limits) if limits else None


def options_for(cfg: Any) -> str:
    """The run-config changes that lower ``cfg``'s client's peak, for the one-line error, the
    ones that moved most in the memory study (:mod:`simulations.studies.memory`) first (docs/deployment.md:
    FeS's depth plan took FedFSL from over 1 GB to ~0.5 GB; bf16 and a batch of 4 left
    fedavg over 1 GB, whose AdamW keeps three copies of every weight)."""
    mcfg = cfg.method_config
    out = []
    if hasattr(mcfg, "frozen_layers"):
        now = "-1, 2/3 of the layers" if mcfg.frozen_layers == -1 else mcfg.frozen_layers
        out.append(f"more {mcfg.key('frozen_layers')} (FeS's depth plan; now {now})")
    out.append("a method that trains fewer weights (fedprompt, fedlora, fedadapter) or none (bbt-fed, fedbpt)")
    if "bf16" in getattr(mcfg, "precisions", ()) and cfg.precision != "bf16":
        out.append("precision=bf16 (the encoder's activations at half the bytes)")
    if hasattr(mcfg, "batch_size"):
        out.append(f"a smaller {mcfg.key('batch_size')} (now {mcfg.batch_size})")
    out.append(f"a shorter max-length (now {cfg.max_length})")
    if mcfg.local_training != GRADIENT and not cfg.max_client_memory_mb:
        out.append("max-client-memory-mb=<MB> (forward passes scored in smaller chunks)")
    return "; ".join(out)


class MemoryGuard:
    """Run a client's fit or evaluate under the node's memory limit (see the module doc).

    Parameters
    ----------
    limit_mb
        The node's limit (:func:`node_limit_mb`); None: nothing is checked.
    what
        Names the work in the error ("fedavg's fit of partition 0").
    options
        The changes that lower the peak (:func:`options_for`).
    usage
        Reads the working set in MB (default :func:`working_set_mb` of this process's cgroup,
        looked up once here, not at every read).
    """

    def __init__(self, limit_mb: float | None, what: str, options: str,
                 usage: Callable[[], float] | None = None) -> None:
        if usage is None:
            cgroup = _own_cgroup() if limit_mb is not None else None
            usage = lambda: working_set_mb(cgroup)  # the folder found once
        self.limit_mb, self.what, self.options, self.usage = limit_mb, what, options, usage
        self.threshold = None if limit_mb is None else limit_mb * (1 - RESERVE_FRACTION)
        self.peak_mb = 0.0
        self.tripped: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def error(self, held_mb: float, when: str) -> NodeMemoryError:
        return NodeMemoryError(
            f"{self.what} {when} {held_mb:,.0f} MB of this node's memory limit of {self.limit_mb:,.0f} MB "
            f"(a reserve of {RESERVE_FRACTION:.0%} kept for one operation): stopped before the kernel would kill "
            f"it; options: {self.options}")

    def __enter__(self) -> Self:
        if self.threshold is None:
            return self
        held = self.usage()
        self.peak_mb = held
        if held > self.threshold:  # what the node holds already leaves no room: at once
            raise self.error(held, "would start with")
        target = threading.get_ident()

        def watch() -> None:
            while not self._stop.wait(POLL_S):
                now = self.usage()
                self.peak_mb = max(self.peak_mb, now)
                if now > self.threshold:
                    self.tripped = now
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), ctypes.py_object(_LimitReached))
                    return

        self._thread = threading.Thread(target=watch, name="fedtext-memory-guard", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        try:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
        except _LimitReached as late:  # landed here, after the work: the same stop
            exc = late
        if isinstance(exc, _LimitReached) or (exc is None and self.tripped is not None):
            if exc is None:  # the async exception had not landed when the work ended: clear it
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)
            raise self.error(self.tripped or self.peak_mb, "reached") from None
        return False
