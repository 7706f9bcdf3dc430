"""The round record: what the strategy learns about one round, written as one
``rounds.jsonl`` line (:class:`RoundRecord`, keys :data:`ROUND_FIELDS`), and the
busy-interval arithmetic its time split uses (:func:`busy_seconds`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from fedtext.records.probes import current_rss_mb

ROUND_FIELDS = (
    "round",  # 0 = before training
    "global_accuracy",  # server-side, on the global test split (None on rounds not evaluated)
    "global_loss",
    "client_accuracy",  # {partition_id: accuracy on its local test split}
    "client_accuracy_mean",
    "client_accuracy_std",
    "client_post_accuracy",  # {partition_id: accuracy after post-tuning} (last round, post-tune-steps > 0)
    "participants",  # partition ids that may train (the rest are non-participants, FedDLS §5.1)
    "num_clients",  # clients whose fit result was aggregated
    "trained",  # their partition ids (the server's binding of each node, not what its reply said)
    "dropped",  # [{"client": id, "reason": "..."}]: fit results not used, and clients that failed
    "client_failures",  # sampled clients whose fit or evaluate message failed (raised, timed out)
    "bytes_up",  # sum over clients of serialized fit uploads this round
    "bytes_down",  # sum over clients of serialized fit downloads this round
    "bytes_up_per_client",
    "bytes_down_per_client",
    "eval_bytes_down",  # global model sent for client-side evaluation (measurement only)
    "resync_bytes",  # part of bytes_down that re-sent state a client had lost (FedDLS after a node restart)
    "model_queries",  # sequences the clients pushed through the backbone this round (fit + eval)
    "server_queries",  # sequences the server evaluated this round
    "client_peak_rss_mb",  # max over clients of the peak resident memory of their process
    "client_peak_gpu_mb",  # max over clients of the GPU memory torch allocated at peak (None on CPUs)
    "train_loss",  # mean of the clients' reported local training losses
    "method_metrics",  # scalars a method reports from aggregation (e.g. FedBPT's sigma')
    "secagg_bytes",  # secagg=true: {stage: {"down", "up"}} bytes of the SecAgg+ records per protocol stage (fedtext.server.secagg); null without secagg
    "privacy",  # dp runs: {"mode", "epsilon" (spent so far at "delta"; null = no noise, no bound), "delta", "noise_multiplier", "accountant" (rdp | pld), "accounting" (poisson | poisson-approximation | no-amplification: fedtext.trust.privacy.accounting), central: "sampling_rate", "clip", "noise_std", "clipped"}; null without dp
    "clients_evaluated",  # clients sent the global model for local testing (clients-per-eval)
    "client_fit_s",  # sum over clients of local training seconds (fit_time_s)
    "client_fit_s_max",  # the slowest client's training seconds
    "client_eval_s",  # sum over clients of local test seconds (eval_time_s)
    "client_load_s",  # sum over clients of seconds building the client (backbone load on a new actor, data, shots)
    "server_eval_s",  # the server's evaluation of the global model
    "busy_s",  # time some client or the server evaluation was computing (union of their intervals)
    "startup_s",  # time new client processes spent starting (Python, Flower, torch/transformers/fedtext imports; first message per Ray actor, every message of a deployment's ClientApp)
    "overhead_s",  # round_time_s - (busy or start-up): Flower/Ray messaging, scheduling, serialization, aggregation
    "sim_time_s",  # simulated device time of the round: max over fit clients of compute + (down + up bytes) / bandwidth-mbps
    "server_rss_mb",  # resident memory of the server process (ServerApp + strategy) as the round ends
    "round_time_s",
    "wall_time_s",  # since the strategy started
)
# A drop's reason as written: at most this many bytes once JSON-escaped (:func:`short_reason`); a
# client's failure or an odd metric value quoted in it must not make a round line unbounded.
DROP_REASON_BYTES = 300
# The longest ``rounds.jsonl`` line a writer writes (RunRecorder.log_round: json.dumps escapes every
# character outside ASCII, so a line's bytes are its characters); longer lines are malformed, never
# parsed (fedtext.records.reader.record_lines). What grows with the clients, per client, at most:
#   participants, trained:                 '"<id>", ' x 2, an id <= 32 bytes ("node <uint64>": 25)    72
#   client_accuracy, client_post_accuracy: '"<id>": <float>, ' x 2, a float's repr <= 24 bytes          124
#   dropped: its fit and its evaluate drop, '{"client": "<id>", "reason": "<reason>"}, ' each,
#            the reason <= DROP_REASON_BYTES                                                2 x 362 = 724
# = 920 bytes a client; 10,000 clients (the largest federation measured, simulations/experiments/scale.toml) = 9.2 MB,
# plus the fixed fields and a method's few scalar metrics (< 64 KiB): under 9.3 MB. Bound: 16 MiB.
ROUND_LINE_MAX = 16 * 2**20

# The fields the machine decides (seconds, memory): the same run on another machine, engine or
# node service (fedtext.node.service) differs in these and in nothing else.
MACHINE_FIELDS = frozenset({"client_peak_rss_mb", "client_peak_gpu_mb", "client_fit_s", "client_fit_s_max",
                            "client_eval_s", "client_load_s", "server_eval_s", "busy_s", "startup_s", "overhead_s",
                            "sim_time_s", "server_rss_mb", "round_time_s", "wall_time_s"})


@dataclass
class RoundRecord:
    """What the strategy's hooks learn about one round, written as one ``rounds.jsonl`` line.

    ``configure_fit`` fills the download bytes, ``aggregate_fit`` the upload bytes,
    clients, drops and queries, ``evaluate`` the global accuracy, ``aggregate_evaluate``
    the client accuracies; :meth:`to_json` gives exactly :data:`ROUND_FIELDS`.
    """

    round: int
    started: float = field(default_factory=time.time)
    global_accuracy: float | None = None
    global_loss: float | None = None
    client_accuracy: dict[str, float] = field(default_factory=dict)
    client_accuracy_mean: float | None = None
    client_accuracy_std: float | None = None
    client_post_accuracy: dict[str, float] = field(default_factory=dict)
    participants: list[str] | None = None
    num_clients: int = 0
    trained: list[str] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    client_failures: int = 0
    resync_bytes: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    bytes_up_per_client: float | None = None
    bytes_down_per_client: float | None = None
    eval_bytes_down: int = 0
    fit_queries: int = 0
    eval_queries: int = 0
    server_queries: int = 0
    client_rss_mb: list[float] = field(default_factory=list)
    client_gpu_mb: list[float] = field(default_factory=list)  # only clients on a GPU report one
    train_loss: float | None = None
    method_metrics: dict[str, float] = field(default_factory=dict)
    secagg_bytes: dict[str, dict[str, int]] | None = None  # secagg=true: per stage (fedtext.server.secagg)
    privacy: dict[str, Any] | None = None  # dp runs: what the round spent and released (fedtext.trust.privacy)
    clients_evaluated: int = 0
    fit_s: list[float] = field(default_factory=list)
    eval_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)
    server_eval_s: float | None = None
    sim_s: list[float] = field(default_factory=list)  # per fit client: compute + bytes / bandwidth
    intervals: list[tuple[float, float]] = field(default_factory=list)  # (start, end) epoch seconds
    startup: list[tuple[float, float]] = field(default_factory=list)  # process imports, same clock
    written: bool = False

    def drop(self, client: Any, reason: str) -> None:
        """Note a client result the server did not use, and why (the reason cut to
        :data:`DROP_REASON_BYTES`: a round line stays within :data:`ROUND_LINE_MAX`)."""
        self.dropped.append({"client": str(client), "reason": short_reason(reason)})

    def timing(self, metrics: dict[str, Any], seconds_key: str) -> None:
        """Note a client's compute seconds (``fit_time_s`` / ``eval_time_s``), build
        seconds, busy interval and, on a process's first message, its start-up
        interval (``startup_start``/``startup_end``) from its reported metrics
        (missing keys: skipped)."""
        target = self.fit_s if seconds_key == "fit_time_s" else self.eval_s
        if seconds_key in metrics:
            target.append(float(metrics[seconds_key]))
        if "load_s" in metrics:
            self.load_s.append(float(metrics["load_s"]))
        if "busy_start" in metrics and "busy_end" in metrics:
            self.intervals.append((float(metrics["busy_start"]), float(metrics["busy_end"])))
        if "startup_start" in metrics and "startup_end" in metrics:
            self.startup.append((float(metrics["startup_start"]), float(metrics["startup_end"])))

    def to_json(self, run_start: float) -> dict[str, Any]:
        """The ``rounds.jsonl`` object (keys = :data:`ROUND_FIELDS`, in that order)."""
        now = time.time()
        round_time = now - self.started
        # Clip to this round: a process may have started (imported) before the round did.
        busy_iv, startup_iv = _clip(self.intervals, self.started, now), _clip(self.startup, self.started, now)
        busy = busy_seconds(busy_iv) if self.intervals or self.server_eval_s is not None else None
        accounted = busy_seconds(busy_iv + startup_iv)
        return {
            "round": self.round,
            "global_accuracy": self.global_accuracy,
            "global_loss": self.global_loss,
            "client_accuracy": self.client_accuracy,
            "client_accuracy_mean": self.client_accuracy_mean,
            "client_accuracy_std": self.client_accuracy_std,
            "client_post_accuracy": self.client_post_accuracy,
            "participants": self.participants,
            "num_clients": self.num_clients,
            "trained": self.trained,
            "dropped": self.dropped,
            "client_failures": self.client_failures,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_up_per_client": self.bytes_up_per_client,
            "bytes_down_per_client": self.bytes_down_per_client,
            "eval_bytes_down": self.eval_bytes_down,
            "resync_bytes": self.resync_bytes,
            "model_queries": self.fit_queries + self.eval_queries,
            "server_queries": self.server_queries,
            "client_peak_rss_mb": max(self.client_rss_mb) if self.client_rss_mb else None,
            "client_peak_gpu_mb": max(self.client_gpu_mb) if self.client_gpu_mb else None,
            "train_loss": self.train_loss,
            "method_metrics": self.method_metrics,
            "secagg_bytes": self.secagg_bytes,
            "privacy": self.privacy,
            "clients_evaluated": self.clients_evaluated,
            "client_fit_s": _round(sum(self.fit_s)) if self.fit_s else None,
            "client_fit_s_max": _round(max(self.fit_s)) if self.fit_s else None,
            "client_eval_s": _round(sum(self.eval_s)) if self.eval_s else None,
            "client_load_s": _round(sum(self.load_s)) if self.load_s else None,
            "server_eval_s": _round(self.server_eval_s),
            "busy_s": _round(busy),
            "startup_s": _round(busy_seconds(startup_iv)) if startup_iv else None,
            "overhead_s": None if busy is None else _round(max(0.0, round_time - accounted)),
            "sim_time_s": _round(max(self.sim_s)) if self.sim_s else None,
            "server_rss_mb": round(current_rss_mb(), 1),
            "round_time_s": round(round_time, 3),
            "wall_time_s": round(now - run_start, 3),
        }


def short_reason(reason: str) -> str:
    """``reason``'s longest start that takes at most :data:`DROP_REASON_BYTES` bytes in a
    round line (JSON-escaped: ``\\u00e9`` is 6 bytes, a character beyond the BMP 12)."""
    size = 0
    for i, char in enumerate(reason):
        size += len(json.dumps(char)) - 2
        if size > DROP_REASON_BYTES:
            return reason[:i]
    return reason


def _clip(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    """``intervals`` cut to ``[lo, hi]`` (a process may have started before the round did)."""
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` intervals: the time at least one of them
    was running. ``[(0, 2), (1, 3), (5, 6)]`` -> 3 + 1 = 4.0."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _round(x: float | None) -> float | None:
    """``x`` to 3 decimals (seconds in a round record), None kept."""
    return None if x is None else round(x, 3)
