"""What every fedtext strategy shares: sampling, validation, bytes, evaluation, records.

``FedTextStrategy`` is Flower's ``FedAvg`` plus the bookkeeping that makes methods
comparable. A method subclasses it and overrides the smallest hooks:

* :meth:`initial_arrays` -- the global state's arrays at round 0;
* :meth:`upload_specs` -- what a client's upload must look like (shape, dtype, range);
  anything else is dropped with a logged reason and the round goes on;
* :meth:`prompt_of` -- the ``[T, D]`` prompt that global arrays stand for (server eval);
* :meth:`aggregate` -- the math on validated uploads; by default FedAvg's
  example-weighted mean (``super().aggregate_fit``);
* :meth:`download` -- what one client is sent (default: the global arrays; FedDLS
  sends each client the compressed updates it has not seen yet).

Client sampling is seeded and reproducible: once per client the server asks for its
properties (partition id, domain), keeps the clients that ``holdout`` does not name
(the participants), and draws ``clients-per-round`` of them with
``default_rng([seed, round])``. Non-participants never train; they evaluate the
global model (and post-tune it on the last round) like everyone else, which gives
the P/NP accuracies of FedDLS §5.1.

Server state between rounds is explicit: the global arrays (``self.global_arrays``)
plus what a subclass reports from :meth:`state_arrays`; both are plain numpy arrays so
they can be checkpointed.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import numpy as np
from flwr.common import EvaluateIns, EvaluateRes, FitIns, FitRes, GetPropertiesIns, Parameters, Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg

from fedtext import comm
from fedtext.backbone import Backbone, get_backbone
from fedtext.config import ConfigError, RunConfig
from fedtext.data import server_test
from fedtext.prompts import bbt_space, project
from fedtext.records import RunRecorder
from fedtext.tasks import Task

log = logging.getLogger("fedtext")

CONNECT_TIMEOUT_S = 60  # how long round 0 waits for clients-per-round clients to connect
PROPERTIES_TIMEOUT_S = 600  # a simulated client's first message loads the backbone (seconds)


class Evaluator:
    """Server-side evaluation of a global prompt on the (sub-sampled) test split."""

    def __init__(self, cfg: RunConfig, task: Task) -> None:
        self.backbone: Backbone = get_backbone(cfg.model, cfg.head, task.name, cfg.max_length)
        test = server_test(cfg)
        self.num_examples = len(test)
        self.batches = self.backbone.batches(list(test["text"]), list(test["label"]))

    def __call__(self, prompt: np.ndarray) -> tuple[float, float, int]:
        """(mean cross-entropy, accuracy, model queries used)."""
        before = self.backbone.queries
        loss, acc = self.backbone.evaluate(prompt, self.batches)
        return loss, acc, self.backbone.queries - before


class FedTextStrategy(FedAvg):
    """FedAvg with fedtext's validation, byte accounting, evaluation and run records.

    Parameters
    ----------
    cfg
        The validated run configuration.
    task
        The resolved task.
    evaluator
        Server-side evaluator of global prompts (``None``: no server evaluation).
    recorder
        Where round records go (``None``: nothing is written, e.g. in unit tests).
    """

    def __init__(
        self,
        cfg: RunConfig,
        task: Task,
        evaluator: Evaluator | None = None,
        recorder: RunRecorder | None = None,
    ) -> None:
        super().__init__(
            fraction_fit=1.0,
            fraction_evaluate=1.0,
            min_fit_clients=1,
            min_evaluate_clients=1,
            min_available_clients=1,
            accept_failures=True,
            on_fit_config_fn=self.fit_config,
        )
        self.cfg = cfg
        self.task = task
        self.evaluator = evaluator
        self.recorder = recorder
        self.backbone = evaluator.backbone if evaluator else get_backbone(
            cfg.model, cfg.head, task.name, cfg.max_length
        )
        self.global_arrays: list[np.ndarray] = []
        self.client_info: dict[str, dict[str, Any]] = {}  # cid -> partition_id, domain, participant
        self._t0 = time.time()
        self._round: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(method={self.cfg.method})"

    # ------------------------------------------------------------------ hooks
    def initial_arrays(self) -> list[np.ndarray]:
        """Global arrays at round 0 (subclasses must override)."""
        raise NotImplementedError

    def upload_specs(self) -> list[comm.ArraySpec]:
        """Specs a client upload must meet; default: same shapes and dtypes as the global arrays."""
        return [
            comm.ArraySpec(f"array{i}", tuple(a.shape), str(a.dtype)) for i, a in enumerate(self.global_arrays)
        ]

    def check_upload(self, arrays: list[np.ndarray]) -> str | None:
        """Method-specific checks after :meth:`upload_specs` passed (e.g. sigma > 0)."""
        return None

    def prompt_of(self, arrays: list[np.ndarray]) -> np.ndarray:
        """The ``[T, D]`` prompt that global ``arrays`` stand for (subclasses must override)."""
        raise NotImplementedError

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Server state beyond the global arrays (checkpointing); none by default."""
        return {}

    def fit_config(self, server_round: int) -> dict[str, Scalar]:
        """Config sent with every fit instruction; subclasses may add keys."""
        return {"server_round": server_round}

    def download(
        self, server_round: int, proxy: ClientProxy, parameters: Parameters, purpose: str
    ) -> tuple[Parameters, dict[str, Scalar]]:
        """What ``proxy`` is sent for ``purpose`` ("fit" or "evaluate"): the payload and
        extra config keys. Default: the global arrays, nothing extra."""
        return parameters, {}

    # -------------------------------------------------------- client sampling
    def info(self, proxy: ClientProxy) -> dict[str, Any]:
        """A client's partition id, domain and participation (asked once, then cached)."""
        if proxy.cid not in self.client_info:
            props: dict[str, Any] = {}
            try:
                props = dict(proxy.get_properties(GetPropertiesIns({}), PROPERTIES_TIMEOUT_S, None).properties)
            except Exception as exc:  # noqa: BLE001 - a client without properties still trains
                log.warning("client %s did not report properties (%s); treated as a participant", proxy.cid, exc)
            pid = props.get("partition_id", proxy.cid)
            domain = props.get("domain") or None
            self.client_info[proxy.cid] = {
                "partition_id": str(pid),
                "domain": domain,
                "participant": self.cfg.is_participant(pid, domain),
                "order": (0, int(pid)) if isinstance(pid, int) else (1, str(pid)),
            }
        return self.client_info[proxy.cid]

    def clients(self, client_manager: ClientManager, participants_only: bool) -> list[ClientProxy]:
        """Connected clients (or only the participants) in partition-id order."""
        found = [p for p in client_manager.all().values() if not participants_only or self.info(p)["participant"]]
        return sorted(found, key=lambda p: self.info(p)["order"])

    def sample_clients(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        """``clients-per-round`` participants drawn with ``default_rng([seed, round])``."""
        client_manager.wait_for(max(1, self.cfg.clients_per_round), timeout=CONNECT_TIMEOUT_S)
        participants = self.clients(client_manager, participants_only=True)
        if not participants:
            raise ConfigError(f"holdout='{self.cfg.holdout}' leaves no participant client to train")
        n = self.cfg.clients_per_round or len(participants)
        if n > len(participants):
            raise ConfigError(
                f"clients-per-round={n} exceeds the {len(participants)} participant clients "
                f"({len(client_manager.all())} connected, holdout='{self.cfg.holdout}')"
            )
        rng = np.random.default_rng([self.cfg.seed, server_round, 0x5A3])
        picked = np.sort(rng.choice(len(participants), size=n, replace=False))
        return [participants[i] for i in picked]

    # ---------------------------------------------------------- Flower hooks
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        """Check clients-per-round against the connected clients, then send round-0 arrays.

        SuperNodes may still be connecting (real devices, or the simulation engine
        registering its nodes), so wait up to ``CONNECT_TIMEOUT_S`` for enough of them.
        """
        if self.cfg.clients_per_round:
            client_manager.wait_for(self.cfg.clients_per_round, timeout=CONNECT_TIMEOUT_S)
            self.cfg.check_num_clients(client_manager.num_available())
        self.global_arrays = [np.asarray(a) for a in self.initial_arrays()]
        return comm.encode(self.global_arrays)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Seeded sample of participants, each sent :meth:`download` and :meth:`fit_config`."""
        self._round = {"round": server_round, "t": time.time(), "dropped": []}
        instructions = []
        for proxy in self.sample_clients(server_round, client_manager):
            payload, extra = self.download(server_round, proxy, parameters, "fit")
            instructions.append((proxy, FitIns(payload, {**self.fit_config(server_round), **extra})))
        down = [comm.payload_bytes(ins.parameters) for _, ins in instructions]
        self._round.update(bytes_down=sum(down), bytes_down_per_client=_mean(down))
        return instructions

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Validate every upload, account bytes, then aggregate the valid ones."""
        valid = self.validate_results(server_round, results, failures)
        up = [comm.payload_bytes(res.parameters) for _, res in results]
        self._round.update(
            bytes_up=sum(up),
            bytes_up_per_client=_mean(up),
            num_clients=len(valid),
            fit_queries=sum(int(r.metrics.get("queries", 0)) for _, r in results),
            fit_rss=[float(r.metrics.get("peak_rss_mb", 0)) for _, r in results],
            train_loss=_mean([float(r.metrics["train_loss"]) for _, r in valid if "train_loss" in r.metrics]),
        )
        if not valid:
            log.warning("round %d: no valid client result; global model unchanged", server_round)
            return None, {}
        parameters, metrics = self.aggregate(server_round, valid)
        self._round["method_metrics"] = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        if parameters is not None:
            self.global_arrays = comm.decode(parameters)
        return parameters, metrics

    def aggregate(
        self, server_round: int, results: list[tuple[ClientProxy, FitRes]]
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """The method's aggregation of validated results; default FedAvg (example-weighted)."""
        return super().aggregate_fit(server_round, results, [])

    def validate_results(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[Any],
    ) -> list[tuple[ClientProxy, FitRes]]:
        """Keep results whose arrays meet :meth:`upload_specs`; log why others are dropped."""
        specs = self.upload_specs()
        valid = []
        for proxy, res in results:
            reason = None
            if res.num_examples <= 0:
                reason = f"num_examples={res.num_examples}"
            else:
                try:
                    arrays = comm.decode(res.parameters)
                    reason = comm.check_arrays(arrays, specs) or self.check_upload(arrays)
                except Exception as exc:  # noqa: BLE001 - undecodable payload
                    reason = f"cannot decode upload: {type(exc).__name__}"
            if reason is None:
                valid.append((proxy, res))
            else:
                self._drop(server_round, res.metrics.get("partition_id", proxy.cid), reason)
        for failure in failures:
            self._drop(server_round, "?", f"client failed: {failure_reason(failure)}")
        return valid

    def _drop(self, server_round: int, client: Any, reason: str) -> None:
        log.warning("round %d: dropped client %s: %s", server_round, client, reason)
        self._round.setdefault("dropped", []).append({"client": str(client), "reason": reason})

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Server-side evaluation of the global prompt on eval rounds (and round 0)."""
        if server_round == 0:
            self.global_arrays = comm.decode(parameters)
            self._round = {"round": 0, "t": time.time(), "dropped": []}
        if self.evaluator is None or not self._is_eval_round(server_round):
            if server_round == 0:
                self._write_round()
            return None
        loss, acc, queries = self.evaluator(self.prompt_of(comm.decode(parameters)))
        self._round.update(global_loss=loss, global_accuracy=acc, server_queries=queries)
        if server_round == 0:
            self._write_round()
        return loss, {"accuracy": acc}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        """On eval rounds every client (participant or not) tests the global model on its
        local test split; on the last round it first post-tunes it (``post-tune-steps``)."""
        if not self._is_eval_round(server_round) or self.cfg.client_test_size == 0:
            self._write_round()
            return []
        final = int(server_round == self.cfg.num_server_rounds)
        instructions = []
        for proxy in self.clients(client_manager, participants_only=False):
            payload, extra = self.download(server_round, proxy, parameters, "evaluate")
            config = {"server_round": server_round, "final": final, **extra}
            instructions.append((proxy, EvaluateIns(payload, config)))
        self._round["eval_bytes_down"] = sum(comm.payload_bytes(ins.parameters) for _, ins in instructions)
        return instructions

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[Any],
    ) -> tuple[float | None, dict[str, Scalar]]:
        # A client too small for a local test split reports 0 examples: not an accuracy of 0.
        results = [(p, r) for p, r in results if r.num_examples > 0]
        accs = {str(r.metrics.get("partition_id", p.cid)): float(r.metrics["accuracy"]) for p, r in results}
        post = {
            str(r.metrics.get("partition_id", p.cid)): float(r.metrics["post_accuracy"])
            for p, r in results if "post_accuracy" in r.metrics
        }
        self._round.update(
            client_accuracy=accs,
            client_post_accuracy=post,
            participants=sorted(
                str(r.metrics.get("partition_id", p.cid)) for p, r in results if self.info(p)["participant"]
            ),
            client_accuracy_mean=_mean(list(accs.values())),
            client_accuracy_std=float(np.std(list(accs.values()))) if accs else None,
            eval_queries=sum(int(r.metrics.get("queries", 0)) for _, r in results),
            eval_rss=[float(r.metrics.get("peak_rss_mb", 0)) for _, r in results],
        )
        self._write_round()
        if not results:
            return None, {}
        return super().aggregate_evaluate(server_round, results, failures)

    # ------------------------------------------------------------- recording
    def _is_eval_round(self, server_round: int) -> bool:
        return server_round % self.cfg.eval_every == 0 or server_round == self.cfg.num_server_rounds

    def _write_round(self) -> None:
        r = self._round
        if not r or "written" in r:
            return
        r["written"] = True
        rss = r.get("fit_rss", []) + r.get("eval_rss", [])
        record = {
            "round": r["round"],
            "global_accuracy": r.get("global_accuracy"),
            "global_loss": r.get("global_loss"),
            "client_accuracy": r.get("client_accuracy", {}),
            "client_accuracy_mean": r.get("client_accuracy_mean"),
            "client_accuracy_std": r.get("client_accuracy_std"),
            "client_post_accuracy": r.get("client_post_accuracy", {}),
            "participants": r.get("participants"),
            "num_clients": r.get("num_clients", 0),
            "dropped": r.get("dropped", []),
            "bytes_up": r.get("bytes_up", 0),
            "bytes_down": r.get("bytes_down", 0),
            "bytes_up_per_client": r.get("bytes_up_per_client"),
            "bytes_down_per_client": r.get("bytes_down_per_client"),
            "eval_bytes_down": r.get("eval_bytes_down", 0),
            "model_queries": r.get("fit_queries", 0) + r.get("eval_queries", 0),
            "server_queries": r.get("server_queries", 0),
            "client_peak_rss_mb": max(rss) if rss else None,
            "train_loss": r.get("train_loss"),
            "method_metrics": r.get("method_metrics", {}),
            "round_time_s": round(time.time() - r["t"], 3),
            "wall_time_s": round(time.time() - self._t0, 3),
        }
        if self.recorder is not None:
            self.recorder.log_round(record)
            if record["round"] == self.cfg.num_server_rounds:
                self.recorder.finish("finished")


class SubspaceStrategy(FedTextStrategy):
    """Base of strategies whose global prompt is ``p0 + A z`` (bbt-fed, fedbpt).

    Rebuilds p0 and A from the run seed (:func:`fedtext.prompts.bbt_space`), exactly
    as the clients do; z is the first ``intrinsic-dim`` values of the first global array.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.p0, self.A = bbt_space(self.backbone, cfg.prompt_length, cfg.intrinsic_dim, cfg.seed)

    def prompt_of(self, arrays: list[np.ndarray]) -> np.ndarray:
        return project(self.p0, self.A, arrays[0][: self.cfg.intrinsic_dim])


def failure_reason(failure: Any) -> str:
    """The last ``SomethingError: ...`` line of a client failure, without ANSI colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(failure[1] if isinstance(failure, tuple) else failure))
    lines = [ln.strip() for ln in re.split(r"\\n|\n", text) if re.search(r"\w(Error|Exception)\b:?", ln)]
    return (lines[-1] if lines else text or type(failure).__name__)[:300]


def _mean(xs: list[float]) -> float | None:
    return float(sum(xs) / len(xs)) if xs else None
