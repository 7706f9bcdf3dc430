"""Run records: ``<output-dir>/<run-id>/{config.json, rounds.jsonl, summary.json}``.

The compare runner and the dashboard read nothing but these files, so every method
shows up in comparisons without code changes there.

* ``config.json``: the run-config, the resolved task, the machine, the start time.
* ``rounds.jsonl``: one JSON object per round, appended and flushed as the round ends
  (round 0 = the initial global model). Fields: see :data:`ROUND_FIELDS`.
* ``summary.json``: written when the run ends, with ``status`` ``finished`` or
  ``failed``; a run without it is still running (or was killed).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("fedtext")

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
    "dropped",  # [{"client": id, "reason": "..."}]
    "bytes_up",  # sum over clients of serialized fit uploads this round
    "bytes_down",  # sum over clients of serialized fit downloads this round
    "bytes_up_per_client",
    "bytes_down_per_client",
    "eval_bytes_down",  # global model sent for client-side evaluation (measurement only)
    "model_queries",  # sequences the clients pushed through the backbone this round (fit + eval)
    "server_queries",  # sequences the server evaluated this round
    "client_peak_rss_mb",  # max over clients of the peak resident memory of their process
    "train_loss",  # mean of the clients' reported local training losses
    "method_metrics",  # scalars a method reports from aggregation (e.g. FedBPT's sigma')
    "clients_evaluated",  # clients sent the global model for local testing (clients-per-eval)
    "client_fit_s",  # sum over clients of local training seconds (fit_time_s)
    "client_fit_s_max",  # the slowest client's training seconds
    "client_eval_s",  # sum over clients of local test seconds (eval_time_s)
    "client_load_s",  # sum over clients of seconds building the client (backbone load on a new actor, data, shots)
    "server_eval_s",  # the server's evaluation of the global model
    "busy_s",  # time some client or the server evaluation was computing (union of their intervals)
    "startup_s",  # time new client processes spent importing torch/transformers/fedtext (first message per Ray actor)
    "overhead_s",  # round_time_s - (busy or start-up): Flower/Ray messaging, scheduling, serialization, aggregation
    "server_rss_mb",  # resident memory of the server process (ServerApp + strategy) as the round ends
    "round_time_s",
    "wall_time_s",  # since the strategy started
)


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
    dropped: list[dict[str, str]] = field(default_factory=list)
    bytes_up: int = 0
    bytes_down: int = 0
    bytes_up_per_client: float | None = None
    bytes_down_per_client: float | None = None
    eval_bytes_down: int = 0
    fit_queries: int = 0
    eval_queries: int = 0
    server_queries: int = 0
    client_rss_mb: list[float] = field(default_factory=list)
    train_loss: float | None = None
    method_metrics: dict[str, float] = field(default_factory=dict)
    clients_evaluated: int = 0
    fit_s: list[float] = field(default_factory=list)
    eval_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)
    server_eval_s: float | None = None
    intervals: list[tuple[float, float]] = field(default_factory=list)  # (start, end) epoch seconds
    startup: list[tuple[float, float]] = field(default_factory=list)  # process imports, same clock
    written: bool = False

    def drop(self, client: Any, reason: str) -> None:
        """Note a client result the server did not use, and why."""
        self.dropped.append({"client": str(client), "reason": reason})

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
            "dropped": self.dropped,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_up_per_client": self.bytes_up_per_client,
            "bytes_down_per_client": self.bytes_down_per_client,
            "eval_bytes_down": self.eval_bytes_down,
            "model_queries": self.fit_queries + self.eval_queries,
            "server_queries": self.server_queries,
            "client_peak_rss_mb": max(self.client_rss_mb) if self.client_rss_mb else None,
            "train_loss": self.train_loss,
            "method_metrics": self.method_metrics,
            "clients_evaluated": self.clients_evaluated,
            "client_fit_s": _round(sum(self.fit_s)) if self.fit_s else None,
            "client_fit_s_max": _round(max(self.fit_s)) if self.fit_s else None,
            "client_eval_s": _round(sum(self.eval_s)) if self.eval_s else None,
            "client_load_s": _round(sum(self.load_s)) if self.load_s else None,
            "server_eval_s": _round(self.server_eval_s),
            "busy_s": _round(busy),
            "startup_s": _round(busy_seconds(startup_iv)) if startup_iv else None,
            "overhead_s": None if busy is None else _round(max(0.0, round_time - accounted)),
            "server_rss_mb": round(current_rss_mb(), 1),
            "round_time_s": round(round_time, 3),
            "wall_time_s": round(now - run_start, 3),
        }


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


def current_rss_mb() -> float:
    """Resident memory of this process now, in MiB (``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def machine() -> dict[str, Any]:
    """Where a run happened (README numbers quote it)."""
    return {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


class RunRecorder:
    """Writes one run's records. Created by the ServerApp, fed by the strategy."""

    def __init__(self, output_dir: str | Path, config: dict[str, Any], run_id: str | None = None) -> None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = config.get("run-name") or ""
        base = run_id or "-".join(
            x for x in (stamp, str(config.get("method")), Path(str(config.get("dataset"))).name,
                        f"s{config.get('seed')}", name) if x
        )
        root = Path(output_dir).expanduser().resolve()
        self.dir = root / base
        i = 1
        while self.dir.exists():  # two runs started in the same second
            i += 1
            self.dir = root / f"{base}-{i}"
        self.dir.mkdir(parents=True)
        self.run_id = self.dir.name
        self.start = time.time()
        self.rounds: list[dict[str, Any]] = []
        self.config = config
        _write_json(self.dir / "config.json", {
            "run_id": self.run_id, "config": config, "machine": machine(),
            "started": _dt.datetime.now().isoformat(timespec="seconds"), "started_epoch": self.start,
        })
        log.info("fedtext: run records -> %s", self.dir)

    def log_round(self, record: dict[str, Any]) -> None:
        """Append one round and print the progress line."""
        self.rounds.append(record)
        with open(self.dir / "rounds.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
        log.info(progress_line(record, int(self.config.get("num-server-rounds", 0))))

    def finish(self, status: str = "finished", error: str | None = None) -> dict[str, Any]:
        """Write ``summary.json`` (idempotent: the first call wins)."""
        path = self.dir / "summary.json"
        if path.exists():
            return json.loads(path.read_text())
        summary = summarize(self.rounds)
        summary.update(
            run_id=self.run_id, status=status, error=error,
            method=self.config.get("method"), dataset=self.config.get("dataset"),
            partition=self.config.get("partition"), seed=self.config.get("seed"),
            wall_time_s=round(time.time() - self.start, 2),
        )
        _write_json(path, summary)
        return summary


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals and best/final accuracy over a run's round records."""
    accs = [(r["round"], r["global_accuracy"]) for r in rounds if r.get("global_accuracy") is not None]
    trained = [r for r in rounds if r["round"] > 0]
    rss = [r.get("client_peak_rss_mb") for r in rounds if r.get("client_peak_rss_mb")]
    return {
        "rounds_done": max((r["round"] for r in rounds), default=0),
        "initial_accuracy": accs[0][1] if accs and accs[0][0] == 0 else None,
        "final_accuracy": accs[-1][1] if accs else None,
        "best_accuracy": max((a for _, a in accs), default=None),
        "final_client_accuracy_mean": next(
            (r["client_accuracy_mean"] for r in reversed(rounds) if r.get("client_accuracy_mean") is not None),
            None,
        ),
        **participant_accuracy(rounds),
        "total_bytes_up": sum(r.get("bytes_up", 0) for r in trained),
        "total_bytes_down": sum(r.get("bytes_down", 0) for r in trained),
        "mean_bytes_up_per_client": _mean([r["bytes_up_per_client"] for r in trained if r.get("num_clients")]),
        "mean_bytes_down_per_client": _mean([r["bytes_down_per_client"] for r in trained if r.get("num_clients")]),
        "total_model_queries": sum(r.get("model_queries", 0) for r in rounds),
        "peak_client_rss_mb": max(rss) if rss else None,
    }


def participant_accuracy(rounds: list[dict[str, Any]]) -> dict[str, float | None]:
    """P and NP accuracy (FedDLS §5.1) from the last round with client evaluations.

    ``p_accuracy`` / ``np_accuracy``: mean over participant / non-participant clients of
    the accuracy after post-tuning (the global prompt's when there was none);
    ``*_global``: of the global prompt itself.
    """
    last = next((r for r in reversed(rounds) if r.get("client_accuracy")), None)
    out: dict[str, float | None] = {"p_accuracy": None, "np_accuracy": None,
                                    "p_accuracy_global": None, "np_accuracy_global": None}
    if last is None:
        return out
    pre = last["client_accuracy"]
    post = last.get("client_post_accuracy") or pre
    parts = set(last.get("participants") or pre)
    for prefix, accs in (("", post), ("_global", pre)):
        out[f"p_accuracy{prefix}"] = _mean([a for k, a in accs.items() if k in parts])
        out[f"np_accuracy{prefix}"] = _mean([a for k, a in accs.items() if k not in parts])
    return out


def progress_line(r: dict[str, Any], total: int) -> str:
    """``round 3/10 | acc 0.812 loss 0.421 | clients 0.790 | up 0.5 KB down 0.5 KB | 12.3 s``."""
    acc = "acc   -  " if r.get("global_accuracy") is None else f"acc {r['global_accuracy']:.3f}"
    loss = "" if r.get("global_loss") is None else f" loss {r['global_loss']:.3f}"
    cli = "" if r.get("client_accuracy_mean") is None else f" | clients {r['client_accuracy_mean']:.3f}"
    if r.get("client_post_accuracy"):
        pa = participant_accuracy([r])
        cli += f" | post-tuned P {pa['p_accuracy']:.3f}" + (
            "" if pa["np_accuracy"] is None else f" NP {pa['np_accuracy']:.3f}"
        )
    kb = f" | up {r.get('bytes_up', 0) / 1024:.1f} KB down {r.get('bytes_down', 0) / 1024:.1f} KB"
    drop = f" | dropped {len(r['dropped'])}" if r.get("dropped") else ""
    return f"fedtext round {r['round']}/{total} | {acc}{loss}{cli}{kb}{drop} | {r.get('wall_time_s', 0):.1f} s"


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)  # atomic: a reader never sees half a file


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """Read one run directory, tolerating half-written or malformed files.

    A ``config.json`` / ``summary.json`` that is not a JSON object reads as ``None``; a
    line of ``rounds.jsonl`` that is not a JSON object with an integer ``round`` (e.g. a
    truncated last line) is skipped and counted in ``malformed_lines``.
    """
    run_dir = Path(run_dir)
    out: dict[str, Any] = {"dir": str(run_dir), "rounds": [], "malformed_lines": 0}
    for name in ("config", "summary"):
        p = run_dir / f"{name}.json"
        try:
            obj = json.loads(p.read_text()) if p.exists() else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            obj = None
        out[name] = obj if isinstance(obj, dict) else None
    p = run_dir / "rounds.jsonl"
    if p.exists():
        for line in p.read_text(errors="replace").splitlines():
            record = parse_round_line(line)
            if record is None:
                out["malformed_lines"] += 1
            else:
                out["rounds"].append(record)
    return out


def parse_round_line(line: str) -> dict[str, Any] | None:
    """One ``rounds.jsonl`` line as a round record, or None when it is not a JSON object
    with an integer ``round`` (a truncated or garbled line)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    if isinstance(record, dict) and isinstance(record.get("round"), int) and not isinstance(record["round"], bool):
        return record
    return None
