"""Secure aggregation (``secagg=true``): a round's fit through Flower's SecAgg+ protocol.

Flower 1.42's ``SecAggPlusWorkflow`` (``flwr/server/workflow/secure_aggregation``) runs one
fit round in four stages, each one ``send_and_receive`` over the grid: *setup* (the protocol's
settings down, two public keys up), *share keys* (the neighbours' public keys down, the
encrypted shares of two secrets up), *collect masked vectors* (the fit instruction and the
shares meant for this client down, ``q(n_k / max_weight * x_k) + masks mod 2^32`` up, where
``secaggplus_mod`` runs the client's fit) and *unmask* (who answered down, the shares that
remove the survivors' private masks and the dropped clients' pairwise masks up). The server
then holds only the example-weighted mean ``sum n_k x_k / sum n_k`` of the uploads (each
value clipped to ``±secagg-clip-range`` and quantised to ``secagg-quantization`` levels, so
within ``2 * clip / levels`` of the plain mean), never one upload; a client lost in a
stage before unmasking is left out of the sum, as long as each client keeps at least
``secagg-threshold`` of its ``secagg-shares`` neighbours.

:func:`fit_round` runs that workflow as :class:`fedtext.server_app.RecordingServer`'s fit
round (its round loop, evaluations, resume and run record stay the legacy server's), on a
:class:`MeteredGrid` that counts each stage's bytes. Flower hands ``aggregate_fit`` every
surviving client's ``FitRes`` with ``parameters`` replaced by that mean (float64):
:meth:`fedtext.server.strategy.FedTextStrategy.aggregate_fit` casts it back to the upload specs'
dtypes (:func:`cast_mean`) and aggregates it once, as one upload of all their examples.

**What validation still checks** (issue 58's per-upload checks, :mod:`fedtext.server.validation`):
the claimed example counts (each reply's ``num_examples`` is still its own, in the clear),
the metrics, and on the *mean*: count, shape, dtype, finite values, ``upload-specs`` bounds,
``check_upload`` and ``upload-bound``'s scale. A client that lies in its upload can no longer
be spotted or dropped on its own: its values are only clipped to ``±secagg-clip-range`` and
reach the mean with its weight. Robust aggregators and ``update-clip`` need each upload and
are refused with ``secagg=true`` (:meth:`fedtext.common.config.RunConfig.check_privacy`).

**Bytes** (:class:`MeteredGrid`, :meth:`fedtext.server.round_log.RoundLog.secagg_sent`): a stage's
bytes are the protobuf-serialised size (``config_record_to_proto(...).ByteSize()``) of the
``secaggplus_configs`` record of every message sent and every reply received: keys,
encrypted shares, node-id lists, the masked vectors (``ndarray_to_bytes`` NPY blobs of
int64) and the stage's settings. The round record's ``bytes_up`` is the sum of the replies'
(the masked vector replaces the plain upload), ``bytes_down`` the fit instructions' arrays
(:func:`fedtext.common.comm.payload_bytes`, as without secagg) plus the records sent down;
``secagg_bytes`` keeps them per stage. Not counted, as without secagg: Flower's message
envelopes and the scalar config and metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common import FitRes, Parameters
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.common.serde import config_record_to_proto
from flwr.compat.common import recorddict_compat as compat
from flwr.server import Grid, ServerConfig
from flwr.server.client_proxy import ClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

from fedtext.common import comm
from fedtext.common.comm import ArraySpec
from fedtext.common.config import RunConfig
from fedtext.server.grid import ReplyPollingGrid
from fedtext.server.validation import ClientFailure

log = logging.getLogger("fedtext")

STAGES: tuple[str, ...] = Stage.all()  # setup, share_keys, collect_masked_vectors, unmask


def record_bytes(message: Message) -> int:
    """Serialised bytes of ``message``'s SecAgg+ record (0 when it has none)."""
    record = message.content.config_records.get(RECORD_KEY_CONFIGS) if message.has_content() else None
    return config_record_to_proto(record).ByteSize() if record is not None else 0


@dataclass
class StageLog:
    """One stage's traffic: bytes each way, and the nodes sent a message that did not answer."""

    down: int = 0
    up: int = 0
    lost: dict[int, str] = field(default_factory=dict)  # node id -> why (its error, or no reply)


class MeteredGrid(ReplyPollingGrid):
    """``grid`` (a :class:`fedtext.server.grid.ReplyPollingGrid`), counting each SecAgg+ stage's
    bytes and lost nodes in :attr:`stages` (keyed by the stage its messages name)."""

    def __init__(self, grid: Grid) -> None:
        super().__init__(grid)
        self.stages: dict[str, StageLog] = {}

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        if not messages:
            return []
        stage = str(messages[0].content.config_records[RECORD_KEY_CONFIGS][Key.STAGE])
        log_ = self.stages.setdefault(stage, StageLog())
        log_.down += sum(record_bytes(m) for m in messages)  # before sending: stage 2's record is the fit's
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        answered = set()
        for reply in replies:
            src = reply.metadata.src_node_id
            answered.add(src)
            if reply.has_error():
                log_.lost[src] = f"SecAgg+ {stage}: {reply.error.reason}"
            else:
                log_.up += record_bytes(reply)
        for m in messages:
            if m.metadata.dst_node_id not in answered:
                log_.lost[m.metadata.dst_node_id] = f"SecAgg+ {stage}: no reply within {timeout} s"
        return replies


class RecordedSecAggPlus(SecAggPlusWorkflow):
    """Flower's ``SecAggPlusWorkflow`` whose failures name their client and whose halted
    rounds are still recorded.

    Flower hands ``aggregate_fit`` anonymous ``Exception(msg.error)`` failures and, when a
    stage leaves too few clients ("Insufficient available nodes"), never calls it: the
    round record would lack its drops. Here the clients lost before unmasking (their upload
    is not in the sum) reach ``aggregate_fit`` as :class:`fedtext.server.validation.ClientFailure`
    under their proxy's id, and a halted round calls ``aggregate_fit`` with no results."""

    def __init__(self, cfg: RunConfig, grid: MeteredGrid, weight: Callable[[], float]) -> None:
        self.weight = weight  # read when the setup stage reads max_weight: after configure_fit sampled the round
        super().__init__(cfg.secagg_shares, cfg.secagg_threshold, max_weight=weight(),
                         clipping_range=cfg.secagg_clip_range, quantization_range=cfg.secagg_quantization,
                         timeout=cfg.round_timeout_s or None)
        self.metered = grid

    @property
    def max_weight(self) -> float:
        """Flower's ``max_weight``, computed when the setup stage reads it (after its
        ``configure_fit``: the round's clients are then bound to their partitions): :func:`max_weight`."""
        return self.weight()

    @max_weight.setter
    def max_weight(self, value: float) -> None:  # Flower's __init__ assigns it; the property computes it
        pass

    def named_failures(self, state: WorkflowState) -> list[BaseException]:
        """The sampled clients lost in any stage so far, each under its proxy's id."""
        lost: dict[int, str] = {}
        for stage in STAGES:
            for nid, why in self.metered.stages.get(stage, StageLog()).lost.items():
                lost.setdefault(nid, why)
        return [ClientFailure(state.nid_to_proxies[nid].cid, RuntimeError(why))
                for nid, why in lost.items() if nid in state.nid_to_proxies]

    def unmask_stage(self, grid: Grid, context: LegacyContext, state: WorkflowState) -> bool:
        state.failures = self.named_failures(state)  # before aggregate_fit reads them (in Flower's unmask_stage)
        return super().unmask_stage(grid, context, state)

    def __call__(self, grid: Grid, context: Context) -> None:
        state = WorkflowState()
        for step in (self.setup_stage, self.share_keys_stage, self.collect_masked_vectors_stage, self.unmask_stage):
            if not step(grid, context, state):
                log.warning("fedtext: SecAgg+ halted in %s: fewer than secagg-threshold=%d neighbours answered",
                            step.__name__, state.threshold)
                rnd = int(context.state.config_records[MAIN_CONFIGS_RECORD][WorkflowKey.CURRENT_ROUND])
                if state.nid_to_proxies:  # clients were sampled: record the round's drops, keep the model
                    context.strategy.aggregate_fit(rnd, [], self.named_failures(state))
                return


def fit_round(server: Any, grid: Grid, server_round: int) -> tuple[Parameters | None, dict[str, Any], tuple]:
    """One fit round of ``server`` (a :class:`fedtext.server_app.RecordingServer`) through
    SecAgg+ on ``grid``: what Flower's ``Server.fit_round`` returns (new parameters or None,
    the aggregation's metrics, and an empty results/failures pair: the strategy has seen them).
    The round's bytes go into the strategy's round record (:meth:`RoundLog.secagg_sent`)."""
    strategy = server.strategy
    metered = MeteredGrid(grid)
    context = LegacyContext(Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                            config=ServerConfig(num_rounds=strategy.cfg.num_server_rounds),
                            strategy=strategy, client_manager=server.client_manager())
    before = compat.parameters_to_arrayrecord(server.parameters, keep_input=True)
    context.state.array_records[MAIN_PARAMS_RECORD] = before
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: server_round})
    RecordedSecAggPlus(strategy.cfg, metered, lambda: max_weight(strategy, server.client_manager()))(metered, context)
    strategy.rounds.secagg_sent(metered.stages)
    after = context.state.array_records[MAIN_PARAMS_RECORD]
    parameters = None if after is before else compat.arrayrecord_to_parameters(after, keep_input=True)
    metrics = context.history.metrics_distributed_fit
    return parameters, {k: v[-1][1] for k, v in metrics.items()}, ([], [])


def max_weight(strategy: Any, client_manager: Any) -> float:
    """Flower's ``max_weight`` for the round: ``secagg-max-weight``, or when 0 the most examples
    any connected client may claim (:meth:`fedtext.server.validation.UploadValidator.claim_limit`: the
    rows the server assigned it). SecAgg+ multiplies a client's values by n_k / max_weight before
    quantising them to ``secagg-quantization`` levels over ``±secagg-clip-range`` (stochastic
    rounding, from NumPy's global generator: a SecAgg+ run is not bit-reproducible), so the mean's
    error per value is below ``2 clip / levels × max_weight / mean n_k``: Flower's default 1,000
    against a few-shot n_k = 8 costs a factor 125 (2.6e-4 measured on a tiny prompt, where the
    claim-sized weight gives 2.7e-6: tests/integration/test_flower_engine.py)."""
    if strategy.cfg.secagg_max_weight > 0:
        return float(strategy.cfg.secagg_max_weight)
    # the clients whose partition the server knows (the round's, once configure_fit has sampled them)
    known = [p for p in client_manager.all().values() if strategy.sampler.known_partition(p) is not None]
    return float(max((strategy.validator.claim_limit(p)[0] for p in known), default=1))


def cast_mean(results: list[tuple[ClientProxy, FitRes]], specs: list[ArraySpec]) -> list[tuple[ClientProxy, FitRes]]:
    """The results SecAgg+ hands ``aggregate_fit``, each carrying the unmasked mean (float64
    from Flower's dequantisation), with that mean cast to the upload specs' dtypes (fedtext
    sends float32), encoded once and shared by every result."""
    if not results:
        return results
    mean = comm.decode(results[0][1].parameters)
    if len(mean) == len(specs):  # else validation reports the count
        mean = [a.astype(s.dtype) if s.dtype is not None else a for a, s in zip(mean, specs, strict=True)]
    shared = comm.encode(mean)
    for _, res in results:
        res.parameters = shared
    return results


def secagg_message_bytes(stages: dict[str, StageLog]) -> dict[str, dict[str, int]]:
    """``{stage: {"down": bytes, "up": bytes}}`` in protocol order: the round record's ``secagg_bytes``."""
    return {s: {"down": stages[s].down, "up": stages[s].up} for s in STAGES if s in stages}

