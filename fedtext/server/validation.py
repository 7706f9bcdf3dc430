"""Upload validation and failure tracking: what the server does with a client's reply.

Every reply is first screened (:meth:`UploadValidator.replies`): the partition it
claims must be the one its node is bound to (:meth:`fedtext.server.sampling.ClientSampler.claim`),
and its metrics must meet their declarations (:func:`check_metrics`): the telemetry every
client sends (:data:`FIT_METRICS`, :data:`EVAL_METRICS`) and the method's own (its
config's ``fit_metrics`` / ``evaluate_metrics``, :class:`fedtext.common.metrics.MetricSpec`). A
reply that fails is dropped with a logged reason before any strategy reads it, so no value
a client sends can raise in a method's code or reach the records unchecked. A metric no
declaration names is **ignored with a warning** (once per metric name per run) and
removed from the reply: nothing reads it, so it can skew nothing, and a client one
version ahead of the server still takes part; ``tests/unit/test_method_metrics.py`` keeps
every metric fedtext's own clients send declared.

Every fit result is then decoded once, checked (a plausible example count,
``model.upload_specs()``: count, shape, dtype, finite, range; ``model.check_upload``;
``model.check_scale`` against the global arrays) and either kept as an :class:`Upload`
or dropped with a logged reason; the round goes on with the rest. Evaluate replies are
checked likewise (:func:`check_eval_reply`). Every result is recorded under the partition
the server bound its node to, never under what the reply says. A sampled client that
fails (raises, times out) is recorded under its partition id, not as an anonymous
exception: every client is sent through a :class:`Tracked` proxy, whose failures
(:class:`ClientFailure`) carry the client's id.

The drops of a whole run are counted by kind, so that a run whose results were never
valid ends ``failed`` with their commonest reason (:meth:`UploadValidator.never_valid`)
instead of ``finished`` at its initial model.

:class:`fedtext.server.strategy.FedTextStrategy` holds one :class:`UploadValidator`
(``strategy.validator``); its ``validate`` hook (FeS overrides it) delegates to
:meth:`UploadValidator.uploads`.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import (DisconnectRes, EvaluateIns, EvaluateRes, FitIns, FitRes, GetParametersIns,
                         GetParametersRes, GetPropertiesIns, GetPropertiesRes, ReconnectIns, Scalar)
from flwr.server.client_proxy import ClientProxy

from fedtext.common import comm
from fedtext.common.config import RunConfig
from fedtext.common.metrics import (MAX_EPOCH_S, MAX_LOSS, MAX_MEMORY_MB, MAX_QUERIES, MAX_SECONDS, IntervalSpec,
                             MetricSpec)
from fedtext.learning.model import Model
from fedtext.records.schema import RoundRecord
from fedtext.server.sampling import PARTITION_ID, ClientSampler

log = logging.getLogger("fedtext")

# The telemetry every fedtext client's replies may carry (fedtext.client.numpy_client.FedTextClient.fit
# and .evaluate, the timings fedtext.node.node.Node adds), each optional, each a finite number in
# the range fedtext.common.metrics derives (MAX_SECONDS, MAX_QUERIES, MAX_LOSS, MAX_MEMORY_MB,
# MAX_EPOCH_S), queries a whole count; the intervals' ends in order (INTERVALS). accuracy and
# post_accuracy are checked to lie in [0, 1] by check_eval_reply, whose reasons the records
# have always given.
_SECONDS = (0.0, MAX_SECONDS)  # a duration: one message, one build
_EPOCH = (0.0, MAX_EPOCH_S)  # a timestamp: epoch seconds, 1970 to 2100 (clients' clocks are their own)
_MEMORY = (0.0, MAX_MEMORY_MB)
_TIMINGS = (MetricSpec("peak_rss_mb", low=_MEMORY[0], high=_MEMORY[1]),
            MetricSpec("peak_gpu_mb", low=_MEMORY[0], high=_MEMORY[1]),
            MetricSpec("load_s", low=_SECONDS[0], high=_SECONDS[1]),
            *(MetricSpec(k, low=_EPOCH[0], high=_EPOCH[1])
              for k in ("busy_start", "busy_end", "startup_start", "startup_end")))
_QUERIES = MetricSpec("queries", whole=True, low=0, high=MAX_QUERIES)
#: The fit telemetry (a method's own fit metrics: its config's ``fit_metrics``).
FIT_METRICS: tuple[MetricSpec, ...] = (PARTITION_ID, _QUERIES, MetricSpec("fit_time_s", low=_SECONDS[0], high=_SECONDS[1]),
                                       MetricSpec("train_loss", low=0, high=MAX_LOSS), *_TIMINGS)
#: The evaluate telemetry (a method's own: its config's ``evaluate_metrics``).
EVAL_METRICS: tuple[MetricSpec, ...] = (PARTITION_ID, _QUERIES, MetricSpec("accuracy"), MetricSpec("post_accuracy"),
                                        MetricSpec("eval_time_s", low=_SECONDS[0], high=_SECONDS[1]), *_TIMINGS)
#: The evaluate reply's loss (``EvaluateRes.loss``, not a metric): a mean cross-entropy, as ``train_loss``.
EVAL_LOSS = MetricSpec("loss", low=0, high=MAX_LOSS)
#: The intervals a reply's timestamps bound: one message's busy time is at most a message's
#: (MAX_SECONDS); a process's start-up has no ceiling (a SuperNode process may run for days
#: before its first message), and the record clips both to the round (RoundRecord.to_json).
INTERVALS: tuple[IntervalSpec, ...] = (IntervalSpec("busy_start", "busy_end", longest=MAX_SECONDS),
                                       IntervalSpec("startup_start", "startup_end"))


@dataclass(frozen=True)
class Upload:
    """One client's fit result, decoded once and validated.

    ``arrays`` maps the names of ``model.upload_specs()`` to the arrays, in spec order.
    """

    proxy: ClientProxy
    partition_id: str
    num_examples: int
    arrays: dict[str, np.ndarray]
    metrics: dict[str, Scalar]

    def array_list(self) -> list[np.ndarray]:
        """The arrays in upload-spec order."""
        return list(self.arrays.values())


class ClientFailure(Exception):
    """A sampled client's fit or evaluate failed; carries which client (``cid``)."""

    def __init__(self, cid: str, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cid = cid


class Tracked(ClientProxy):
    """A client proxy whose failures name the client (:class:`ClientFailure`).

    Flower's round loop hands a failed client's exception to ``aggregate_fit`` without
    the proxy it came from; this wrapper keeps the two together. Results come back
    with the wrapper as their proxy; ``cid`` is the wrapped client's.
    """

    def __init__(self, inner: ClientProxy) -> None:
        super().__init__(inner.cid)
        self.inner = inner
        # Flower's workflows (SecAgg+, fedtext.server.secagg) address a client by its node id
        self.node_id = getattr(inner, "node_id", None)

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - re-raised with the client's id
            raise ClientFailure(self.cid, exc) from exc

    def get_properties(self, ins: GetPropertiesIns, timeout: float | None, group_id: int | None) -> GetPropertiesRes:
        return self._call(self.inner.get_properties, ins, timeout, group_id)

    def get_parameters(self, ins: GetParametersIns, timeout: float | None, group_id: int | None) -> GetParametersRes:
        return self._call(self.inner.get_parameters, ins, timeout, group_id)

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        return self._call(self.inner.fit, ins, timeout, group_id)

    def evaluate(self, ins: EvaluateIns, timeout: float | None, group_id: int | None) -> EvaluateRes:
        return self._call(self.inner.evaluate, ins, timeout, group_id)

    def reconnect(self, ins: ReconnectIns, timeout: float | None, group_id: int | None) -> DisconnectRes:
        return self.inner.reconnect(ins, timeout, group_id)


class UploadValidator:
    """Checks a round's fit and evaluate replies and counts the run's drops by kind.

    Parameters
    ----------
    cfg
        The validated run configuration (``upload-bound``, ``client-test-size``,
        ``num-server-rounds``).
    model
        The method's model: the upload specs and checks.
    sampler
        Who the clients are: the most examples each may claim, and the partition id a
        failed client is recorded under.
    client_failed
        Told of every failed client as ``(cid, phase, reason)`` (the strategy's
        ``client_failed`` hook, bound, so that a method's override is the one called:
        FedDLS resyncs a node that lost its state).
    """

    def __init__(self, cfg: RunConfig, model: Model, sampler: ClientSampler,
                 client_failed: Callable[[str, str, str], None]) -> None:
        self.cfg = cfg
        self.model = model
        self.sampler = sampler
        self.client_failed = client_failed
        mc = cfg.method_config
        # what a reply may carry: the shared telemetry, then the method's own (its config's)
        self.specs: dict[str, tuple[MetricSpec, ...]] = {"fit": FIT_METRICS + mc.fit_metrics,
                                                        "evaluate": EVAL_METRICS + mc.evaluate_metrics}
        self.ignored: set[str] = set()  # undeclared metric names already warned about (once each per run)
        self.valid_rounds = 0  # rounds of this process that aggregated at least one valid upload
        self.drop_reasons: Counter[str] = Counter()  # every drop's reason, digits masked (the run's common reason)
        self._drop_example: dict[str, str] = {}  # masked reason -> its first drop's own words

    def replies(self, record: RoundRecord, results: list[tuple[ClientProxy, Any]], phase: str
                ) -> list[tuple[ClientProxy, Any]]:
        """The fit or evaluate replies (``phase``) whose identity and metrics hold; the
        others are noted in ``record`` with a reason. Undeclared metrics are removed from
        the replies kept (:meth:`ignore_undeclared`).

        In order: the partition the reply claims (``partition_id``, when it names one) must
        be its node's (:meth:`fedtext.server.sampling.ClientSampler.claim`, which binds a node on
        its first report), then every declared metric present must meet its
        :class:`~fedtext.common.metrics.MetricSpec` (:func:`check_metrics`; a count of the
        client's texts at most its training rows, :meth:`ClientSampler.max_examples`).
        Called once per round by the strategy's Flower hooks, before any method reads a
        metric (``FedTextStrategy.aggregate_fit``, :meth:`evaluations`).
        """
        specs = self.specs[phase]
        kept = []
        for proxy, res in results:
            claim = res.metrics.get("partition_id")
            reason = PARTITION_ID.check(claim) if claim is not None else None
            if reason is None and claim is not None:
                reason = self.sampler.claim(proxy.cid, claim)
            if reason is None:
                rows = self.sampler.max_examples(proxy) if any(s.within_rows and s.name in res.metrics
                                                                for s in specs) else None
                reason = check_metrics(res.metrics, specs, rows)
            if reason is None:
                self.ignore_undeclared(record.round, proxy, res, specs)
                kept.append((proxy, res))
            elif phase == "fit":
                self.drop(record, self.sampler.info_if_known(proxy.cid), reason)
            else:
                self.drop_evaluation(record, proxy, reason)
        return kept

    def ignore_undeclared(self, server_round: int, proxy: ClientProxy, res: FitRes | EvaluateRes,
                          specs: tuple[MetricSpec, ...]) -> None:
        """Remove from ``res`` the metrics no spec of ``specs`` declares, warning once per
        metric name per run: a key nobody declared is read by nobody (module docstring)."""
        declared = {s.name for s in specs}
        extra = sorted(k for k in res.metrics if k not in declared)
        if not extra:
            return
        for key in extra:
            if key not in self.ignored:
                self.ignored.add(key)
                log.warning("round %d: client %s sent metric %r, which %s does not declare: ignored (said once)",
                            server_round, self.sampler.info_if_known(proxy.cid), key, self.cfg.method)
        res.metrics = {k: v for k, v in res.metrics.items() if k in declared}

    def uploads(self, record: RoundRecord, results: list[tuple[ClientProxy, FitRes]], failures: list[Any],
                reference: dict[str, np.ndarray]) -> list[Upload]:
        """Decode every result once; keep those meeting the model's upload specs and
        checks, note the others (and every failure) in ``record`` with a reason. The
        results have passed :meth:`replies`; each is named by its node's partition.

        In order (the telemetry and the method's metrics were checked by :meth:`replies`):
        ``0 < num_examples <=`` what the server assigned the client (:meth:`claim_limit`:
        FedAvg's weight ``n_k / n`` made one client claiming 10^12 examples the whole global
        model, and one claiming its partition's 400 rows after training on 16 held 96 % of
        it), decodable arrays
        meeting ``model.upload_specs()`` (count, shape, dtype, finite, range),
        ``model.check_upload`` (e.g. sigma > 0, C positive definite) and
        ``model.check_scale`` against ``reference``, the global arrays by name
        (``upload-bound``).
        """
        specs = self.model.upload_specs()
        uploads = []
        for proxy, res in results:
            pid = self.sampler.info_if_known(proxy.cid)
            limit, what = self.claim_limit(proxy)  # its metrics were checked by replies()
            reason = (None if 0 < res.num_examples <= limit
                      else f"num_examples={res.num_examples} outside 1..{limit} ({what})")
            if reason is None:
                try:
                    arrays = comm.view(res.parameters)  # read-only, no copy: the server holds every reply
                    reason = comm.check_arrays(arrays, specs)
                    if reason is None:
                        named = {s.name: a for s, a in zip(specs, arrays, strict=True)}
                        reason = (self.model.check_upload(named)
                                  or self.model.check_scale(named, reference, self.cfg.upload_bound))
                except Exception as exc:  # noqa: BLE001 - undecodable payload
                    reason = f"cannot decode upload: {type(exc).__name__}"
            if reason is None:
                uploads.append(Upload(proxy, pid, res.num_examples, named, dict(res.metrics)))
            else:
                self.drop(record, pid, reason)
        for failure in failures:
            self.failed(record, failure, "fit")
        return uploads

    def claim_limit(self, proxy: ClientProxy) -> tuple[int, str]:
        """The most examples ``proxy``'s fit reply may claim, and what that is in words: the
        labelled rows the server assigned it (:meth:`ClientSampler.assigned_examples`), or, for a
        method whose config says its labelled set grows on the client
        (``claims_assigned_rows = False``: FeS's family), its partition's rows."""
        if self.cfg.method_config is None or self.cfg.method_config.claims_assigned_rows:
            return self.sampler.assigned_examples(proxy)
        return self.sampler.max_examples(proxy), "the client's partition rows"

    def evaluations(self, record: RoundRecord, results: list[tuple[ClientProxy, EvaluateRes]],
                    failures: list[Any]) -> list[tuple[ClientProxy, EvaluateRes]]:
        """The evaluate replies that pass :meth:`replies` and :func:`check_eval_reply`;
        the failures and the other replies are noted in ``record`` with a reason."""
        for failure in failures:
            self.failed(record, failure, "evaluate")
        checked = []
        for p, res in self.replies(record, results, "evaluate"):
            reason = check_eval_reply(res, self.cfg.client_test_size)
            if reason is None:
                checked.append((p, res))
            else:
                self.drop_evaluation(record, p, reason)
        return checked

    def drop_evaluation(self, record: RoundRecord, proxy: ClientProxy, reason: str) -> None:
        """Note an evaluate reply not used in ``record`` (under its node's partition)."""
        client = self.sampler.info_if_known(proxy.cid)
        log.warning("round %d: dropped evaluation of client %s: %s", record.round, client, reason)
        record.drop(client, f"evaluate reply: {reason}")

    def failed(self, record: RoundRecord, failure: Any, phase: str) -> None:
        """Record a failed client under its partition id (and tell ``client_failed``)."""
        reason = failure_reason(failure)
        exc = failure[1] if isinstance(failure, tuple) else failure
        cid = exc.cid if isinstance(exc, ClientFailure) else None
        if cid is None and isinstance(failure, tuple):
            cid = failure[0].cid
        pid = self.sampler.info_if_known(cid)
        record.client_failures += 1
        if phase == "fit":
            self.drop(record, pid, f"client failed: {reason}")
        else:
            log.warning("round %d: client %s failed to evaluate: %s", record.round, pid, reason)
            record.drop(pid, f"evaluate failed: {reason}")
        if cid is not None:
            self.client_failed(cid, phase, reason)

    def drop(self, record: RoundRecord, client: Any, reason: str) -> None:
        """Note a fit result not used in ``record`` and count its reason's kind."""
        log.warning("round %d: dropped client %s: %s", record.round, client, reason)
        record.drop(client, reason)
        kind = re.sub(r"\d+", "N", reason)  # one kind whatever the round or client numbers in it
        self.drop_reasons[kind] += 1
        self._drop_example.setdefault(kind, reason)

    def never_valid(self, resumed_round: int) -> str | None:
        """Why a run whose rounds never aggregated a valid client result failed (``None``
        when one did): it would otherwise read ``finished`` at its initial model (every
        client failing on ``fedprompt.lr`` it cannot use, or every upload dropped). The
        reason is the most common drop reason, with how often it occurred. A resumed run
        (``resumed_round`` > 0) counts its rounds before the checkpoint as valid (they are
        not recounted)."""
        if self.valid_rounds or resumed_round or self.cfg.num_server_rounds == 0:
            return None
        if not self.drop_reasons:
            return f"no client result in {self.cfg.num_server_rounds} rounds"
        kind, count = self.drop_reasons.most_common(1)[0]
        total = sum(self.drop_reasons.values())
        return (f"no valid client result in {self.cfg.num_server_rounds} rounds; {count} of {total} client "
                f"results dropped like this one: {self._drop_example[kind]}")


def check_metrics(metrics: dict[str, Scalar], specs: tuple[MetricSpec, ...], rows: int | None = None) -> str | None:
    """Why a reply's metrics cannot be used, or ``None``: each of ``specs`` present must
    meet its :class:`~fedtext.common.metrics.MetricSpec` (``queries="lots"`` stopped a whole run
    in ``int()``, FedDLS's ``dls_version="abc"`` likewise; FeS's ``pseudo_label_accuracy=1e30``
    went into the records), and the telemetry's intervals (:data:`INTERVALS`) must run
    forward. ``rows``: the client's training rows, the most a count of its own texts may be
    (``None``: not checked). Metrics ``specs`` does not name are not looked at here
    (:meth:`UploadValidator.ignore_undeclared`)."""
    for spec in specs:
        if spec.name in metrics:
            reason = spec.check(metrics[spec.name], rows)
            if reason is not None:
                return reason
    declared = {spec.name for spec in specs}
    for interval in INTERVALS:  # each end was checked above, when specs declare it (the telemetry does)
        reason = interval.check(metrics) if {interval.start, interval.end} <= declared else None
        if reason is not None:
            return reason
    return None


def check_eval_reply(res: EvaluateRes, max_examples: int) -> str | None:
    """Why an evaluate reply cannot be used, or ``None``: typed metrics, an ``accuracy``
    in [0, 1] (a reply without one raised ``KeyError`` and lost the round's evaluation),
    ``post_accuracy`` likewise, a finite loss in :data:`EVAL_LOSS`'s range (a mean
    cross-entropy: ``loss=-1e30`` was recorded), and ``0 <= num_examples <= client-test-size``
    (the local test split's size; the loss is weighted by it)."""
    reason = check_metrics(res.metrics, EVAL_METRICS)
    if reason:
        return reason
    if "accuracy" not in res.metrics:
        return "no accuracy"
    for key in ("accuracy", "post_accuracy"):
        if key in res.metrics and not 0 <= res.metrics[key] <= 1:
            return f"{key}={res.metrics[key]!r} outside [0, 1]"
    if not np.isfinite(res.loss):
        return f"loss={res.loss!r} is not finite"
    if not EVAL_LOSS.low <= res.loss <= EVAL_LOSS.high:
        return f"loss={res.loss!r} is not {EVAL_LOSS.domain}"
    if not 0 <= res.num_examples <= max_examples:
        return f"num_examples={res.num_examples} outside 0..{max_examples} (client-test-size)"
    return None


def failure_reason(failure: Any) -> str:
    """The last ``SomethingError: ...`` line of a client failure, without ANSI colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(failure[1] if isinstance(failure, tuple) else failure))
    lines = [ln.strip() for ln in re.split(r"\\n|\n", text) if re.search(r"\w(Error|Exception)\b:?", ln)]
    return (lines[-1] if lines else text or type(failure).__name__)[:300]
