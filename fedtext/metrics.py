"""The numbers a client reply may carry, declared: :class:`MetricSpec`.

A fit or evaluate reply's metrics are the client's word, and the server reads them: as
telemetry (``queries``, ``fit_time_s``, ...), as round records (FeS's ``pseudo_labels``,
FedDPGu's ``forget_accuracy_before``), and as method state (FedDLS's ``dls_version``
decides which updates a client is sent next). ``int("abc")`` in any of those readers
used to end the whole run ``failed``, and a finite ``1e30`` went into the records as if
it were measured. So every metric the server accepts is declared with its type and its
range, and :func:`fedtext.validation.check_metrics` checks a reply against the
declarations as :func:`fedtext.comm.check_arrays` checks arrays against their specs.

Who declares what: the telemetry every fedtext client sends is declared in
:mod:`fedtext.validation` (``FIT_METRICS``, ``EVAL_METRICS``); a method's own metrics
beside its config, as its config class's ``fit_metrics`` and ``evaluate_metrics``
(:class:`fedtext.config.MethodConfig`), e.g. ``fedtext/methods/feddls/config.py``.
This module imports nothing but the standard library: method configs are read by
the dashboard, without torch or numpy.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any


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


def _finite(value: numbers.Real) -> bool:
    """``math.isfinite`` that says False for a Python int too large for a float (10**400
    raises OverflowError there) instead of raising."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
