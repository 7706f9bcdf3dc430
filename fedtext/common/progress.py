"""Progress lines with an ETA for long work, and the ``fedtext`` logger's routing.

Long steps (a client's local training or pseudo-labelling, FedDRS/FedDF's server
distillation, a CMA-ES population scored in many encoder calls, a large evaluation)
report through :class:`Progress`::

    with Progress("FedDRS distillation, round 3", total=len(models), unit="teachers") as bar:
        for model in models:
            ...
            bar.advance()

It writes to the ``fedtext`` logger, so a run's ``run.log`` holds the lines too, and it
stays out of the way of non-interactive logs:

* nothing before ``after_s`` (:data:`AFTER_S`, 10 s): work that ends sooner never
  prints a line;
* then at most one line every ``every_s`` (:data:`EVERY_S`, 20 s):
  ``fedtext: FedDRS distillation, round 3: 2/5 teachers (40%), 24 s, ETA 36 s``;
* and, only when it printed anything, one closing line (``done: 5/5 teachers in 61 s``);
* nested work reports once: while a :class:`Progress` is open in a thread, the ones
  opened inside it (a population scored inside a CMA-ES loop) stay silent;
* inside :func:`muted` (a client's message, unless run-config ``client-progress=true`` or
  ``verbose=true``: ``fedtext.node.node``) nothing in that thread prints, so a default
  simulation prints one line per round, not the interleaved lines of every client actor.

Nothing here touches a number a method computes; it only reads the clock
(``clock``, injectable: tests pass a fake one).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

log = logging.getLogger("fedtext")

AFTER_S = 10.0  # no line for work that ends within this many seconds
EVERY_S = 20.0  # at most one line per this many seconds (non-interactive logs stay short)

T = TypeVar("T")
_active = threading.local()  # .depth: Progress objects open in this thread; .muted: lines off in it


@contextlib.contextmanager
def muted(on: bool = True) -> Iterator[None]:
    """While open (with ``on``), no :class:`Progress` of this thread writes a line, closing
    lines included; the work and its timing are unchanged. Nests: the outer state is back
    afterwards, even if the block raises."""
    before = getattr(_active, "muted", False)
    _active.muted = before or on
    try:
        yield
    finally:
        _active.muted = before


def setup_logging() -> None:
    """Route the ``fedtext`` logger through Flower's handlers (once per process), so
    ``flwr run --stream`` shows its lines, a ClientApp's progress lines included.
    A run's own ``run.log`` handler (:class:`fedtext.records.RunLogHandler`) does not
    count as routing."""
    from flwr.common.logger import FLOWER_LOGGER

    fedtext_log = logging.getLogger("fedtext")
    if not [h for h in fedtext_log.handlers if not getattr(h, "fedtext_run_log", False)]:
        for handler in FLOWER_LOGGER.handlers:
            fedtext_log.addHandler(handler)
        fedtext_log.setLevel(logging.INFO)
        fedtext_log.propagate = False


def format_seconds(s: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """A progress report of ``total`` steps of ``what``, rate-limited (module doc).

    Parameters
    ----------
    what
        What is being done, e.g. ``"client 3: pseudo-labelling"``.
    total
        Steps expected (0 or less: unknown, no percentage or ETA).
    unit
        What a step is (``"batches"``).
    after_s, every_s
        Quiet start and the least time between two lines (default: :data:`AFTER_S`,
        :data:`EVERY_S`, read when the work starts).
    clock
        Seconds, monotonic (default :func:`time.monotonic`).
    emit
        Where a line goes (default: ``fedtext`` logger, INFO).
    """

    def __init__(self, what: str, total: int, unit: str = "steps", *, after_s: float | None = None,
                 every_s: float | None = None, clock: Callable[[], float] | None = None,
                 emit: Callable[[str], None] | None = None) -> None:
        self.what, self.total, self.unit = what, int(total), unit
        self.after_s = AFTER_S if after_s is None else after_s
        self.every_s = EVERY_S if every_s is None else every_s
        self.clock = clock or time.monotonic
        self.emit = emit or (lambda line: log.info("%s", line))
        self.done = 0
        self.lines = 0  # lines written so far
        self.start = self.clock()
        self._last: float | None = None  # when the last line was written
        self._open = False
        self._outer = False  # the outermost Progress of its thread: the one that reports

    # ------------------------------------------------------------- context
    def __enter__(self) -> "Progress":
        depth = getattr(_active, "depth", 0)
        self._outer = depth == 0
        _active.depth = depth + 1
        self._open = True
        self.start = self.clock()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(ok=exc_type is None)

    def close(self, ok: bool = True) -> None:
        """End the report: one closing line if any line was written (none otherwise)."""
        if not self._open:
            return
        self._open = False
        _active.depth = max(0, getattr(_active, "depth", 1) - 1)
        if self.lines and self._outer:
            elapsed = self.clock() - self.start
            state = "done" if ok else "stopped"
            self._write(f"fedtext: {self.what}: {state}: {self._count()} in {format_seconds(elapsed)}")

    # ------------------------------------------------------------ progress
    def advance(self, n: int = 1) -> None:
        """``n`` more steps are done; maybe write a line (never more often than allowed)."""
        self.done += n
        line = self.line_due()
        if line is not None:
            self._write(line)

    def line_due(self) -> str | None:
        """The line to write now, or None: too early, too soon after the last line, or
        nested inside another open :class:`Progress` of this thread."""
        if self._open and not self._outer:
            return None
        now = self.clock()
        elapsed = now - self.start
        if elapsed < self.after_s or (self._last is not None and now - self._last < self.every_s):
            return None
        if self.total > 0 and self.done >= self.total:
            return None  # the closing line says it
        eta = ""
        if self.total > 0 and self.done > 0:
            eta = f", ETA {format_seconds(elapsed / self.done * (self.total - self.done))}"
        return f"fedtext: {self.what}: {self._count()}, {format_seconds(elapsed)}{eta}"

    def _count(self) -> str:
        if self.total > 0:
            return f"{self.done}/{self.total} {self.unit} ({100 * self.done / self.total:.0f}%)"
        return f"{self.done} {self.unit}"

    def _write(self, line: str) -> None:
        if getattr(_active, "muted", False):
            return  # not counted either: a muted report writes no closing line
        self._last = self.clock()
        self.lines += 1
        try:
            self.emit(line)
        except Exception:  # noqa: BLE001 - a progress line must never stop the work it reports
            pass


def track(items: Iterable[T], what: str, total: int | None = None, unit: str = "steps", **kwargs) -> Iterator[T]:
    """``items``, reporting progress after each (:class:`Progress`); ``total`` defaults
    to ``len(items)`` where it has one."""
    if total is None:
        total = len(items) if hasattr(items, "__len__") else 0  # type: ignore[arg-type]
    with Progress(what, total, unit, **kwargs) as bar:
        for item in items:
            yield item
            bar.advance()
