"""The numbers a client reply may carry, declared: :class:`MetricSpec`.

A fit or evaluate reply's metrics are the client's word, and the server reads them: as
telemetry (``queries``, ``fit_time_s``, ...), as round records (FeS's ``pseudo_labels``,
FedDPGu's ``forget_accuracy_before``), and as method state (FedDLS's ``dls_version``
decides which updates a client is sent next). ``int("abc")`` in any of those readers
used to end the whole run ``failed``, and a finite ``1e30`` went into the records as if
it were measured. So every metric the server accepts is declared with its type and its
range, and :func:`fedtext.server.validation.check_metrics` checks a reply against the
declarations as :func:`fedtext.common.comm.check_arrays` checks arrays against their specs.

Who declares what: the telemetry every fedtext client sends is declared in
:mod:`fedtext.server.validation` (``FIT_METRICS``, ``EVAL_METRICS``); a method's own metrics
beside its config, as its config class's ``fit_metrics`` and ``evaluate_metrics``
(:class:`fedtext.common.config.MethodConfig`), e.g. ``fedtext/methods/feddls/config.py``.
This module imports nothing but the standard library: method configs are read by
the dashboard, without torch or numpy.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

# The ceilings of the telemetry every client sends (fedtext.server.validation's FIT_METRICS and
# EVAL_METRICS), each from one stated definition, so that a record never carries an impossible
# figure (issue 58: train_loss=-1e30, fit_time_s=1e30 and queries=10^15 were recorded). Generous
# on purpose: an honest reply outside one is dropped whole, so each is far above any measurement.
#: The longest one client message (a fit or evaluate, a client's build) may take: a day, in seconds.
#: The slowest committed client fit took 325 s (bbt-fed under arm64 emulation,
#: simulations/results/edge): a day is 266x that.
MAX_SECONDS = 86_400.0
#: The most sequences a second one client can push through its backbone: 10^6. An H100's ~10^15
#: FLOP/s over all-MiniLM-L6-v2's 2 x 22.7 M weights x 128 tokens = 5.8 GFLOP a sequence is
#: 1.7 x 10^5 a second; 10^6 leaves room for a smaller encoder or shorter texts.
MAX_QUERIES_PER_S = 1e6
#: The most model queries one reply may count: MAX_SECONDS x MAX_QUERIES_PER_S = 8.64 x 10^10
#: (a whole day at a throughput no device reaches; the largest committed client-round made 3,360).
MAX_QUERIES = MAX_SECONDS * MAX_QUERIES_PER_S
#: The largest mean cross-entropy a client may report, in nats: 10^4. Every fedtext client's
#: ``train_loss`` is a mean cross-entropy (FedKSeed's the mean of L+ and L-, FedBPT's on its
#: unperturbed shots, FedDPGu's unlearning sets), so it lies in [0, inf); it starts at ln C (1.39
#: on 4 classes), the similarity head's logits lie in [-20, 20] (a loss <= 40 + ln C), and 10^4
#: nats is a logit margin of 10^4 against the label: a model that far has diverged (the largest
#: committed round's train_loss is 4.2).
MAX_LOSS = 1e4
#: The most memory (resident or GPU) a client may report, in MB: 4 TiB = 4 x 2^20 MB, above the
#: RAM of any one machine a client runs on and about 15x the largest GPU's (288 GB).
MAX_MEMORY_MB = 4.0 * 2**20
#: The latest epoch second a timestamp may carry: 2100-01-01T00:00:00Z (the earliest is 0, 1970).
MAX_EPOCH_S = 4_102_444_800.0


@dataclass(frozen=True)
class MetricSpec:
    """One metric a client reply may carry: its name, kind and range.

    Parameters
    ----------
    name
        The key in the reply's metrics.
    whole
        Whether it must be a whole number (a count, a version, a flag); an integral
        float (``3.0``) counts as whole, since Flower carries both kinds.
    low, high
        The closed range it must lie in (default: any finite number).
    within_rows
        Whether it may not exceed the client's training rows (a count of the client's
        own texts: FeS's labels, FedDPGu's forgotten examples), checked when the
        server is given them (:meth:`check`'s ``rows``).

    Examples
    --------
    >>> MetricSpec("dls_version", whole=True, low=0).check("abc")
    "metric dls_version='abc' is not a finite number"
    >>> MetricSpec("pseudo_label_accuracy", low=0, high=1).check(1e30)
    'metric pseudo_label_accuracy=1e+30 is not a number in [0, 1]'
    """

    name: str
    whole: bool = False
    low: float = -math.inf
    high: float = math.inf
    within_rows: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a MetricSpec needs a name")
        if not self.low <= self.high:
            raise ValueError(f"MetricSpec {self.name}: low {self.low} > high {self.high}")

    @property
    def domain(self) -> str:
        """What a valid value is, in words: ``a whole number >= 0``, ``a number in [0, 1]``,
        ``a finite number``."""
        kind = "a whole number" if self.whole else "a number"
        if math.isinf(self.low) and math.isinf(self.high):
            return kind if self.whole else "a finite number"
        if math.isinf(self.high):
            return f"{kind} >= {self.low:g}"
        if math.isinf(self.low):
            return f"{kind} <= {self.high:g}"
        return f"{kind} in [{self.low:g}, {self.high:g}]"

    def check(self, value: Any, rows: int | None = None) -> str | None:
        """Why ``value`` is not a valid value of this metric, or ``None``.

        Parameters
        ----------
        value
            What the reply carries under :attr:`name` (any type: the client's word).
        rows
            The client's training rows, when the server knows them; checked only for a
            :attr:`within_rows` metric.

        Returns
        -------
        str | None
            ``metric <name>=<value!r> is not <domain>`` (or ``... exceeds the client's
            N training rows``); ``None`` when valid.
        """
        # numbers.Real: Python's int and float and numpy's scalars; bool is an int in
        # Python but never a number a client means ("peak_rss_mb": True)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not _finite(value):
            return f"metric {self.name}={value!r} is not a finite number"
        if (self.whole and value != int(value)) or not self.low <= value <= self.high:
            return f"metric {self.name}={value!r} is not {self.domain}"
        if self.within_rows and rows is not None and value > rows:
            return f"metric {self.name}={value!r} exceeds the client's {rows} training rows"
        return None


@dataclass(frozen=True)
class IntervalSpec:
    """Two metrics that are one interval's ends, in epoch seconds (a client's busy time,
    its process's start-up): the end may not come before the start (the round record's
    busy and start-up seconds are lengths of unions of these intervals, which a reversed one
    shortens), nor lie more than ``longest`` seconds after it.

    Each end is checked on its own first (a :class:`MetricSpec`); an interval with one end
    missing is not checked (the record skips it too).

    Examples
    --------
    >>> IntervalSpec("busy_start", "busy_end", longest=10).check({"busy_start": 5.0, "busy_end": 4.0})
    'metric busy_end=4.0 is before busy_start=5.0'
    """

    start: str
    end: str
    longest: float = math.inf

    def check(self, metrics: dict[str, Any]) -> str | None:
        """Why the interval ``metrics`` carries is impossible, or ``None``."""
        if self.start not in metrics or self.end not in metrics:
            return None
        a, b = metrics[self.start], metrics[self.end]
        if b < a:
            return f"metric {self.end}={b!r} is before {self.start}={a!r}"
        if b - a > self.longest:
            return f"metrics {self.start}..{self.end} span {b - a:g} s, more than {self.longest:g}"
        return None


def _finite(value: numbers.Real) -> bool:
    """``math.isfinite`` that says False for a Python int too large for a float (10**400
    raises OverflowError there) instead of raising."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
