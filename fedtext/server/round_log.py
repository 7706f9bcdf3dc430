"""Round recording: what a round learns goes into one record, written once when it ends.

The strategy's Flower hooks hand their messages and replies to a :class:`RoundLog`, which
fills the current :class:`fedtext.records.RoundRecord`: bytes down (``configure_fit``,
``configure_evaluate``), bytes up, queries, memory, timings and simulated device time
(``aggregate_fit``), the server's evaluation (``evaluate``) and the clients' accuracies
(``aggregate_evaluate``). :meth:`RoundLog.write` writes the record as one
``rounds.jsonl`` line, then checkpoints the round (after the line: a kill in between
redoes this round on resume) and, after the last round, finishes the run with its
status and the participant partitions that never trained (:meth:`RoundLog.never_trained`).
Every client is named by the partition the server bound its node to
(:meth:`fedtext.server.sampling.ClientSampler.info_if_known`), never by what its reply says.

:class:`fedtext.server.strategy.FedTextStrategy` holds one :class:`RoundLog`
(``strategy.rounds``); ``strategy.record`` is its current record, which a method's
strategy may add to (``method_metrics``, ``resync_bytes``, ``intervals``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
from flwr.common import EvaluateIns, EvaluateRes, FitIns, FitRes, Scalar
from flwr.server.client_proxy import ClientProxy

from fedtext.common import comm
from fedtext.common.config import RunConfig
from fedtext.records.schema import RoundRecord
from fedtext.records.writer import RunRecorder
from fedtext.server.secagg import StageLog, secagg_message_bytes
from fedtext.server.validation import FIT_METRICS, Upload, check_metrics

log = logging.getLogger("fedtext")


class RoundLog:
    """The current round's record, and the run's records on disk.

    Parameters
    ----------
    cfg
        The validated run configuration (``num-server-rounds``: the round after which
        the run is finished).
    recorder
        Where round records go (``None``: nothing is written, e.g. in unit tests).
    checkpoint
        Saves the state after a round, given its number (the strategy's
        ``save_checkpoint``); called after the round's line is written.
    error
        Why the run failed, or ``None`` (:meth:`fedtext.server.validation.UploadValidator.never_valid`);
        asked once, when the last round is written.
    partitions
        The federation's participant partitions
        (:meth:`fedtext.server.sampling.ClientSampler.partitions`); asked once, when the last
        round is written (:meth:`never_trained`).
    """

    def __init__(self, cfg: RunConfig, recorder: RunRecorder | None, checkpoint: Callable[[int], None],
                 error: Callable[[], str | None], partitions: Callable[[], list[int]] = list) -> None:
        self.cfg = cfg
        self.recorder = recorder
        self.checkpoint = checkpoint
        self.error = error
        self.partitions = partitions
        self.record = RoundRecord(round=0)
        self.down_bytes: dict[str, int] = {}  # cid -> bytes sent this round (simulated time)
        # wall_time_s: since the run began, less any pause before a resume (the recorder's worked_s)
        self._t0 = time.time() - (recorder.worked_s if recorder is not None else 0.0)

    def begin(self, server_round: int) -> RoundRecord:
        """Start the record of ``server_round`` (its timer starts now)."""
        self.record = RoundRecord(round=server_round)
        return self.record

    def write(self) -> None:
        """Write the current round's record (once), checkpoint the round and, after the
        last round, write the summary."""
        if self.record.written:
            return
        self.record.written = True
        if self.recorder is not None:
            self.recorder.log_round(self.record.to_json(self._t0))
            if self.record.round > 0:  # after the line: a kill in between redoes this round on resume
                self.checkpoint(self.record.round)
            if self.record.round == self.cfg.num_server_rounds:
                error = self.error()
                self.recorder.finish("failed" if error else "finished", error=error,
                                     partitions_never_trained=self.never_trained())

    def never_trained(self) -> list[int] | None:
        """The participant partitions (:attr:`partitions`) no round of the run aggregated an
        upload of (the union of the records' ``trained``, rounds before a resume included),
        with a warning when there are any: a partition whose node never connected, was
        refused (another node claimed it first) or only ever sent uploads that were dropped.
        ``None`` when a round record lacks ``trained`` (written before it existed: unknown)."""
        if self.recorder is None:
            return None
        rounds = [r for r in self.recorder.rounds if r.get("round", 0) > 0]
        if any(not isinstance(r.get("trained"), list) for r in rounds):
            return None
        trained = {str(p) for r in rounds for p in r["trained"]}
        participants = self.partitions()
        never = [p for p in participants if str(p) not in trained]
        if never:
            shown = ", ".join(map(str, never[:20])) + (f", ... ({len(never) - 20} more)" if len(never) > 20 else "")
            log.warning("fedtext: %d of %d participant partitions never trained in this run (no upload of theirs "
                        "was aggregated): %s", len(never), len(participants), shown)
        return never

    # ------------------------------------------------------------ what a round sends
    def fit_sent(self, instructions: list[tuple[ClientProxy, FitIns]]) -> None:
        """The bytes of the fit instructions: in total, per client, and each client's
        own (the download half of its simulated device time)."""
        down = [comm.payload_bytes(ins.parameters) for _, ins in instructions]
        self.record.bytes_down, self.record.bytes_down_per_client = sum(down), _mean(down)
        self.down_bytes = {proxy.cid: d for (proxy, _), d in zip(instructions, down, strict=True)}

    def secagg_sent(self, stages: dict[str, StageLog]) -> None:
        """``secagg=true``: the round's bytes are the SecAgg+ protocol's (:mod:`fedtext.server.secagg`).
        ``stages`` maps each stage to its :class:`fedtext.server.secagg.StageLog`. Up: every reply's
        SecAgg+ record (keys, encrypted shares, the masked vector, unmasking shares), per client
        over those whose masked vector is in the sum (``trained``); down: the fit instructions'
        arrays (:meth:`fit_sent`) plus every record sent, per client over those sent the setup."""
        r = self.record
        r.secagg_bytes = secagg_message_bytes(stages)
        sent = len(self.down_bytes) or 1
        r.bytes_up = sum(s["up"] for s in r.secagg_bytes.values())
        r.bytes_down += sum(s["down"] for s in r.secagg_bytes.values())
        r.bytes_up_per_client = r.bytes_up / len(r.trained) if r.trained else None
        r.bytes_down_per_client = r.bytes_down / sent

    def evaluate_sent(self, instructions: list[tuple[ClientProxy, EvaluateIns]]) -> None:
        """The bytes of the evaluate instructions and how many clients were sent one."""
        self.record.eval_bytes_down = sum(comm.payload_bytes(ins.parameters) for _, ins in instructions)
        self.record.clients_evaluated = len(instructions)

    # ------------------------------------------------------------ what comes back
    def fit_results(self, results: list[tuple[ClientProxy, FitRes]], uploads: list[Upload],
                    is_upload: Callable[[FitRes], bool],
                    simulated_seconds: Callable[[dict[str, Scalar], int], float]) -> None:
        """Bytes up of every result (per client over those that are uploads,
        ``is_upload``), the valid ``uploads`` and their mean train loss, and the telemetry
        of every result whose metrics are well typed (a dropped upload still cost its
        queries): queries, memory, timings and ``simulated_seconds`` of its bytes."""
        up = [comm.payload_bytes(res.parameters) for _, res in results]
        r = self.record
        r.bytes_up, r.num_clients = sum(up), len(uploads)
        r.trained = sorted({u.partition_id for u in uploads}, key=_partition_order)
        r.bytes_up_per_client = _mean([u for (_, res), u in zip(results, up, strict=True) if is_upload(res)])
        typed = [(proxy, res, u) for (proxy, res), u in zip(results, up, strict=True)
                 if check_metrics(res.metrics, FIT_METRICS) is None]
        r.fit_queries = sum(int(res.metrics.get("queries", 0)) for _, res, _ in typed)
        r.client_rss_mb += [float(res.metrics.get("peak_rss_mb", 0)) for _, res, _ in typed]
        r.client_gpu_mb += [float(res.metrics["peak_gpu_mb"]) for _, res, _ in typed if "peak_gpu_mb" in res.metrics]
        for proxy, res, u in typed:
            r.timing(res.metrics, "fit_time_s")
            r.sim_s.append(simulated_seconds(res.metrics, self.down_bytes.get(proxy.cid, 0) + u))
        r.train_loss = _mean([float(u.metrics["train_loss"]) for u in uploads if "train_loss" in u.metrics])

    def server_evaluation(self, evaluate: Callable[[], tuple[float, float, int]]) -> tuple[float, float]:
        """Run the server's ``evaluate`` (loss, accuracy, queries), timed as busy time of
        the round; its loss and accuracy."""
        t0 = time.time()
        loss, acc, queries = evaluate()
        r = self.record
        r.global_loss, r.global_accuracy, r.server_queries = loss, acc, queries
        r.server_eval_s = time.time() - t0
        r.intervals.append((t0, t0 + r.server_eval_s))
        return loss, acc

    def evaluate_results(self, results: list[tuple[ClientProxy, EvaluateRes]],
                         participant: Callable[[ClientProxy], bool], name: Callable[[ClientProxy], str]) -> None:
        """The clients' accuracies (before and after post-tuning) by partition id (``name``:
        the partition the server bound the node to, never the reply's word), their mean
        and spread, which of them are participants, queries, memory and timings."""
        accs = {name(p): float(r.metrics["accuracy"]) for p, r in results}
        rec = self.record
        rec.client_accuracy = accs
        rec.client_post_accuracy = {
            name(p): float(r.metrics["post_accuracy"]) for p, r in results if "post_accuracy" in r.metrics
        }
        rec.participants = sorted(name(p) for p, r in results if participant(p))
        rec.client_accuracy_mean = _mean(list(accs.values()))
        rec.client_accuracy_std = float(np.std(list(accs.values()))) if accs else None
        rec.eval_queries = sum(int(r.metrics.get("queries", 0)) for _, r in results)
        rec.client_rss_mb += [float(r.metrics.get("peak_rss_mb", 0)) for _, r in results]
        rec.client_gpu_mb += [float(r.metrics["peak_gpu_mb"]) for _, r in results if "peak_gpu_mb" in r.metrics]
        for _, res in results:
            rec.timing(res.metrics, "eval_time_s")


def _partition_order(pid: str) -> tuple[int, int | str]:
    """Partition ids in number order (``"2"`` before ``"10"``), other names after."""
    return (0, int(pid)) if pid.isdigit() else (1, pid)


def _mean(xs: list[float]) -> float | None:
    return float(sum(xs) / len(xs)) if xs else None
