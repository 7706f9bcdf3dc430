"""What every fedtext strategy shares: sampling, validation, bytes, evaluation, records.

``FedTextStrategy`` is Flower's ``FedAvg`` plus the bookkeeping that makes methods
comparable. The method's :class:`fedtext.model.Model` (``self.model``, the same class
its client builds) says what the global arrays and uploads are and how to evaluate
them; a method's strategy overrides the smallest hooks:

* :meth:`aggregate` -- the math on validated, decoded uploads
  (:class:`Upload`: arrays by name); default FedAvg's example-weighted mean;
* :meth:`download` -- what one client is sent (default: the global arrays; FedDLS
  sends each client the compressed updates it has not seen yet);
* :meth:`fit_config` -- extra keys of the fit instruction;
* :meth:`state_arrays` -- server state beyond the global arrays, as arrays (tests, records);
* :attr:`checkpoint_attrs` -- the attributes that hold that state: after every round
  they are pickled with the global arrays into ``<run-dir>/checkpoint.npz``
  (:mod:`fedtext.checkpoint`), and ``resume=<run-id>`` restores them;
* :meth:`client_failed` -- a sampled client failed (raised, timed out); e.g. FedDLS
  resyncs a client whose node lost its state.

Every upload is decoded once, checked against ``model.upload_specs()`` (count, shape,
dtype, finite, range) and ``model.check_upload``, and dropped with a logged reason
when it fails; the round goes on with the rest.

Client sampling is seeded and reproducible: once per client the server asks for its
properties (partition id, domain; all new clients at once, answered from the node
config), keeps the clients that ``holdout`` does not name (the participants), and
draws ``clients-per-round`` of them with ``default_rng([seed, round])``. With
``client-ids=lazy`` nobody is asked: the draw is over the connected clients in node-id
order, and partition ids reach the records with the results. That saves one message per
client, which matters in Flower 1.41's simulation engine, whose in-memory state scans
every node for every pending message (10,000 clients: see
docs/performance.md, "Federation size"); the price is that simulated node ids are random, so the same seed trains
other partitions in another run. Non-participants never train; they evaluate the
global model (and post-tune it on the last round) like everyone else, which gives
the P/NP accuracies of FedDLS §5.1.

Server state between rounds is explicit: the global arrays (``self.global_arrays``)
plus the attributes named in :attr:`checkpoint_attrs`; both are checkpointed after every
round. What a round learns goes into ``self.record``
(:class:`fedtext.records.RoundRecord`), written when the round ends. Every sampled
client is sent through a :class:`Tracked` proxy, so a client that fails (raises, times
out) is recorded under its partition id, not as an anonymous exception.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from flwr.common import (DisconnectRes, EvaluateIns, EvaluateRes, FitIns, FitRes, GetParametersIns,
                         GetParametersRes, GetPropertiesIns, GetPropertiesRes, Parameters, ReconnectIns, Scalar)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg

from fedtext import checkpoint, comm
from fedtext.backbone import Backbone, EncodedBatch, backbone_for
from fedtext.config import ConfigError, RunConfig
from fedtext.data import labelled, partition_sizes, partition_train, server_test
from fedtext.model import Model
from fedtext.records.schema import RoundRecord
from fedtext.records.writer import RunRecorder
from fedtext.tasks import Task

log = logging.getLogger("fedtext")

CONNECT_TIMEOUT_S = 60  # how long round 0 waits for clients-per-round clients to connect
# Salt of the training draw (:meth:`FedTextStrategy.draw`): a stream of its own beside the
# evaluation draw's and FeS's labelling draw's (fedtext.methods.fes.labels.LABEL_SALT).
TRAIN_SALT = 0x5A3
PROPERTIES_TIMEOUT_S = 600  # a simulated client's first message may start a Ray actor (seconds)
PROPERTIES_WORKERS = 64  # get_properties messages in flight at once (Flower's fit fan-out uses threads too)


class Evaluator:
    """The server's test split (``eval-size`` examples, seeded), encoded once."""

    def __init__(self, cfg: RunConfig, task: Task) -> None:
        self.backbone: Backbone = backbone_for(cfg, task)
        test = server_test(cfg)
        self.num_examples = len(test)
        self.batches: list[EncodedBatch] = self.backbone.batches(list(test["text"]), list(test["label"]))

    def __call__(self, model: Model, arrays: list[np.ndarray]) -> tuple[float, float, int]:
        """(mean cross-entropy, accuracy, model queries used) of ``model.evaluate``."""
        before = self.backbone.queries
        loss, acc = model.evaluate(arrays, self.batches)
        return loss, acc, self.backbone.queries - before


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


class FedTextStrategy(FedAvg):
    """FedAvg with fedtext's validation, byte accounting, evaluation and run records.

    Parameters
    ----------
    cfg
        The validated run configuration (``cfg.method_config`` is the method's own).
    task
        The resolved task.
    evaluator
        The server's test split (``None``: no server evaluation).
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
            evaluate_metrics_aggregation_fn=weighted_accuracy,
        )
        self.cfg = cfg
        self.mcfg = cfg.method_config
        self.task = task
        self.evaluator = evaluator
        self.recorder = recorder
        self.backbone = evaluator.backbone if evaluator else backbone_for(cfg, task)
        self.model: Model = self.mcfg.model_class()(cfg, self.backbone)
        self.global_arrays: list[np.ndarray] = []
        self.client_info: dict[str, dict[str, Any]] = {}  # cid -> partition_id, domain, participant
        self.record = RoundRecord(round=0)
        self._down_bytes: dict[str, int] = {}  # cid -> bytes sent this round (simulated time)
        self._partition_rows: dict[tuple[int, int], int] = {}  # (partition id, partitions) -> train rows
        self.valid_rounds = 0  # rounds of this process that aggregated at least one valid upload
        self.drop_reasons: Counter[str] = Counter()  # every drop's reason, digits masked (the run's common reason)
        self._drop_example: dict[str, str] = {}  # masked reason -> its first drop's own words
        self._t0 = time.time()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(method={self.cfg.method})"

    #: Attributes holding server state beyond the global arrays; pickled into every
    #: checkpoint and restored by ``resume=`` (FedBPT: its server CMA-ES; FedDLS: the
    #: update history and client versions).
    checkpoint_attrs: ClassVar[tuple[str, ...]] = ()
    resumed_round = 0  # the round a resumed run's checkpoint was taken after (0: a new run)

    # ------------------------------------------------------------------ hooks
    def initial_arrays(self) -> list[np.ndarray]:
        """Global arrays at round 0 (default: the model's)."""
        return self.model.initial_arrays()

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Server state beyond the global arrays (checkpointing); none by default."""
        return {}

    def fit_config(self, server_round: int) -> dict[str, Scalar]:
        """Config sent with every fit instruction; subclasses may add keys."""
        return {"server_round": server_round, **self.run_key()}

    def run_key(self) -> dict[str, Scalar]:
        """``{"run_key": <run id>}`` when the run is recorded: the run folder's name, the
        same after ``resume=``, under which clients journal their node state
        (:mod:`fedtext.node_state`); nothing in unit tests without a recorder."""
        return {"run_key": self.recorder.run_id} if self.recorder is not None else {}

    def download(self, server_round: int, proxy: ClientProxy, purpose: str) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """What ``proxy`` is sent for ``purpose`` ("fit" or "evaluate"): the arrays and
        extra config keys. Default: the global arrays, nothing extra."""
        return self.global_arrays, {}

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray] | None, dict[str, Scalar]]:
        """The method's aggregation of validated uploads: new global arrays (``None``:
        keep them) and scalar metrics for the round record. Default: FedAvg."""
        return weighted_mean([u.array_list() for u in uploads], [u.num_examples for u in uploads]), {}

    def client_failed(self, cid: str, phase: str, reason: str) -> None:
        """Client ``cid`` failed its ``phase`` ("fit"/"evaluate") message; nothing by default."""

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, server_round: int) -> None:
        """Write the state after ``server_round`` to the run folder (:mod:`fedtext.checkpoint`)."""
        if self.recorder is None:
            return
        state = {name: getattr(self, name) for name in self.checkpoint_attrs}
        checkpoint.save(self.recorder.dir, server_round, self.global_arrays, state,
                        {"method": self.cfg.method, "seed": self.cfg.seed, "run_id": self.recorder.run_id})

    def restore(self, ckpt: checkpoint.Checkpoint) -> None:
        """Continue from ``ckpt``: its global arrays and strategy state."""
        missing = set(self.checkpoint_attrs) - set(ckpt.state)
        if missing:
            raise ConfigError(f"checkpoint of round {ckpt.round} lacks {sorted(missing)} (another method?)")
        self.global_arrays = [np.asarray(a) for a in ckpt.global_arrays]
        for name in self.checkpoint_attrs:
            setattr(self, name, ckpt.state[name])
        self.resumed_round = ckpt.round

    # ------------------------------------------------------------ round state
    def begin_round(self, server_round: int) -> RoundRecord:
        """Start the record of ``server_round`` (its timer starts now)."""
        self.record = RoundRecord(round=server_round)
        return self.record

    # -------------------------------------------------------- client sampling
    def info(self, proxy: ClientProxy) -> dict[str, Any]:
        """A client's partition id, domain and participation (asked once, then cached)."""
        if proxy.cid not in self.client_info:
            if self.cfg.client_ids == "lazy":
                return {"partition_id": proxy.cid, "domain": None, "participant": True, "order": (1, proxy.cid)}
            self.identify([proxy])
        return self.client_info[proxy.cid]

    def identify(self, proxies: list[ClientProxy]) -> None:
        """Ask every client not seen before who it is, all at once, in parallel.

        A fedtext node answers from its node config without building the client
        (``fedtext.client_app.Node``), so this costs one small message per client,
        once per run; the domain is asked for only when ``holdout`` names domains.
        """
        new = [p for p in proxies if p.cid not in self.client_info]
        if not new:
            return
        ins = GetPropertiesIns({"domain": int(self.needs_domain)})

        def ask(proxy: ClientProxy) -> dict[str, Any]:
            try:
                return dict(proxy.get_properties(ins, PROPERTIES_TIMEOUT_S, None).properties)
            except Exception as exc:  # noqa: BLE001 - a client without properties still trains
                log.warning("client %s did not report properties (%s); treated as a participant", proxy.cid, exc)
                return {}

        with ThreadPoolExecutor(max_workers=min(PROPERTIES_WORKERS, len(new))) as pool:
            answers = list(pool.map(ask, new))
        for proxy, props in zip(new, answers, strict=True):
            self.learn(proxy, props.get("partition_id", proxy.cid), props.get("domain") or None,
                       props.get("num_partitions"))
        self.check_partitions({int(i["num_partitions"]) for i in self.client_info.values()
                               if i.get("num_partitions") is not None})

    def learn(self, proxy: ClientProxy, pid: Any, domain: str | None = None, num_partitions: Any = None) -> None:
        """Cache who ``proxy`` is, from its properties."""
        self.client_info[proxy.cid] = {
            "partition_id": str(pid),
            "num_partitions": num_partitions if isinstance(num_partitions, int) and num_partitions > 0 else None,
            "domain": domain,
            "participant": self.cfg.is_participant(pid, domain),
            "order": (0, int(pid)) if isinstance(pid, int) else (1, str(pid)),
        }

    def check_partitions(self, counts: set[int]) -> None:
        """Partition feasibility, on the server, before a client trains (a ConfigError
        that fails the run in one line): the nodes agree on the number of partitions,
        and the train split cut into that many leaves every client a row (flwr-datasets'
        Dirichlet draw may be impossible, ``alpha=0.001`` on 10 rows; an iid cut of 10
        rows into 16 clients left some empty and their IndexError came back every round).
        Each count is checked once (the sizes are cached for :meth:`max_examples`)."""
        if len(counts) > 1:
            raise ConfigError(f"the nodes disagree on num-partitions: {sorted(counts)} (node configs)")
        for parts in counts:
            if (0, parts) in self._partition_rows:
                continue
            sizes = partition_sizes(self.cfg, parts)
            empty = [pid for pid, n in enumerate(sizes) if n == 0]
            if empty:
                raise ConfigError(
                    f"partition={self.cfg.partition} leaves {len(empty)} of {parts} clients without training rows "
                    f"(first: partition {empty[0]}; {sum(sizes)} train rows): use fewer clients or more data")
            self.check_sizes(sizes)
            self._partition_rows.update({(pid, parts): n for pid, n in enumerate(sizes)})

    def check_sizes(self, sizes: list[int]) -> None:
        """The method's own feasibility check of the clients' train rows (``sizes[pid]``;
        raise ``ConfigError``); nothing by default."""

    @property
    def needs_domain(self) -> bool:
        """Whether ``holdout`` names a domain (then clients report theirs)."""
        return any(not x.isdigit() for x in self.cfg.holdout_set)

    def clients(self, client_manager: ClientManager, participants_only: bool) -> list[ClientProxy]:
        """Connected clients (or only the participants) in partition-id order."""
        connected = list(client_manager.all().values())
        if self.cfg.client_ids == "ask":
            self.identify(connected)
        found = [p for p in connected if not participants_only or self.info(p)["participant"]]
        return sorted(found, key=lambda p: self.info(p)["order"])

    def sample_clients(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        """``clients-per-round`` participants drawn with ``default_rng([seed, round, TRAIN_SALT])``.

        Too few participants in this process's first round is a configuration error
        (``holdout`` or ``clients-per-round`` against the federation). Later it is a
        runtime fault, a node lost mid-run: the server has waited ``CONNECT_TIMEOUT_S``
        for enough nodes, then the round goes on with the participants there are (none:
        the round trains nobody), and the record notes the shortfall as a drop."""
        client_manager.wait_for(max(1, self.cfg.clients_per_round), timeout=CONNECT_TIMEOUT_S)
        participants = self.clients(client_manager, participants_only=True)
        n = self.cfg.clients_per_round or len(participants)
        if n <= len(participants) and participants:
            return self.draw(participants, n, server_round, TRAIN_SALT)
        connected = len(client_manager.all())
        if server_round <= self.resumed_round + 1:
            if not participants:
                raise ConfigError(f"holdout='{self.cfg.holdout}' leaves no participant client to train")
            raise ConfigError(
                f"clients-per-round={n} exceeds the {len(participants)} participant clients "
                f"({connected} connected, holdout='{self.cfg.holdout}')"
            )
        reason = f"node lost: {len(participants)} of {n} participants connected ({connected} nodes)"
        log.warning("round %d: %s; the round goes on with them", server_round, reason)
        self.record.drop("missing", reason)
        return self.draw(participants, len(participants), server_round, TRAIN_SALT)

    def draw(self, pool: list[ClientProxy], n: int, server_round: int, salt: int) -> list[ClientProxy]:
        """``n`` clients of ``pool`` without replacement, kept in pool order, drawn with
        ``default_rng([seed, round, salt])``: a rerun of a seed draws the same clients, and
        each salt (training :data:`TRAIN_SALT`, FeS labelling
        :data:`fedtext.methods.fes.labels.LABEL_SALT`) is its own stream."""
        rng = np.random.default_rng([self.cfg.seed, server_round, salt])
        return [pool[i] for i in np.sort(rng.choice(len(pool), size=n, replace=False))]

    def sample_eval_clients(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        """The clients that test the global model this round: ``clients-per-eval`` of the
        connected clients (``RunConfig.eval_sample_size``; 0 = all), drawn with
        ``default_rng([seed, round, 0xE7A1])``.

        Participants and non-participants are drawn separately, in proportion to their
        numbers and at least one of each group that exists, so that the P and NP
        accuracies of the record stay defined (20 clients, 5 held out, 8 per eval:
        round(8 * 15/20) = 6 participants + 2 non-participants).
        """
        everyone = self.clients(client_manager, participants_only=False)
        n = self.cfg.eval_sample_size
        if not n or n >= len(everyone):
            return everyone
        part = [p for p in everyone if self.info(p)["participant"]]
        rest = [p for p in everyone if not self.info(p)["participant"]]
        n_p = min(len(part), max(1 if part else 0, round(n * len(part) / len(everyone))))
        n_np = min(len(rest), n - n_p)
        if rest and n_np == 0:  # keep one non-participant
            n_p, n_np = n_p - 1, 1
        rng = np.random.default_rng([self.cfg.seed, server_round, 0xE7A1])
        picked = [part[i] for i in rng.choice(len(part), size=n_p, replace=False)] + [
            rest[i] for i in rng.choice(len(rest), size=n_np, replace=False)]
        return sorted(picked, key=lambda p: self.info(p)["order"])

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
        record = self.begin_round(server_round)
        instructions = []
        for proxy in self.sample_clients(server_round, client_manager):
            arrays, extra = self.download(server_round, proxy, "fit")
            instructions.append((Tracked(proxy), FitIns(comm.encode(arrays), {**self.fit_config(server_round), **extra})))
        down = [comm.payload_bytes(ins.parameters) for _, ins in instructions]
        record.bytes_down, record.bytes_down_per_client = sum(down), _mean(down)
        self._down_bytes = {proxy.cid: d for (proxy, _), d in zip(instructions, down, strict=True)}
        return instructions

    def is_upload(self, res: FitRes) -> bool:
        """Whether a fit result carries an upload (bytes up per client-round average over
        these). A method whose clients may answer with a report only says no to those
        (FeS's labelling-only clients)."""
        return True

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Validate every upload, account bytes, then :meth:`aggregate` the valid ones."""
        uploads = self.validate(results, failures)
        up = [comm.payload_bytes(res.parameters) for _, res in results]
        r = self.record
        r.bytes_up, r.num_clients = sum(up), len(uploads)
        r.bytes_up_per_client = _mean([u for (_, res), u in zip(results, up, strict=True) if self.is_upload(res)])
        # telemetry of every result whose metrics are well typed (a dropped upload still cost its queries)
        typed = [(proxy, res, u) for (proxy, res), u in zip(results, up, strict=True)
                 if check_metrics(res.metrics, FIT_METRICS) is None]
        r.fit_queries = sum(int(res.metrics.get("queries", 0)) for _, res, _ in typed)
        r.client_rss_mb += [float(res.metrics.get("peak_rss_mb", 0)) for _, res, _ in typed]
        for proxy, res, u in typed:
            r.timing(res.metrics, "fit_time_s")
            r.sim_s.append(self.simulated_seconds(res.metrics, self._down_bytes.get(proxy.cid, 0) + u))
        r.train_loss = _mean([float(u.metrics["train_loss"]) for u in uploads if "train_loss" in u.metrics])
        if not uploads:
            log.warning("round %d: no valid client result; global model unchanged", server_round)
            return None, {}
        self.valid_rounds += 1
        arrays, metrics = self.aggregate(server_round, uploads)
        r.method_metrics = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        if arrays is None:
            return None, metrics
        self.global_arrays = [np.asarray(a) for a in arrays]
        return comm.encode(self.global_arrays), metrics

    def simulated_seconds(self, metrics: dict[str, Scalar], nbytes: int) -> float:
        """A client-round on a device (FeS §4.1's emulation): its measured compute
        (``fit_time_s``) plus its bytes over a ``bandwidth-mbps`` link; the round takes
        as long as its slowest client (``sim_time_s``)."""
        return float(metrics.get("fit_time_s", 0.0)) + nbytes / (self.cfg.bandwidth_mbps * 1e6)

    def validate(self, results: list[tuple[ClientProxy, FitRes]], failures: list[Any]) -> list[Upload]:
        """Decode every result once; keep those meeting the model's upload specs and
        checks, note the others (and every failure) in the round record with a reason.

        In order: typed telemetry (:func:`check_metrics`), ``0 < num_examples <=`` the
        client's partition (:meth:`max_examples`: FedAvg's weight ``n_k / n`` made one
        client claiming 10^12 examples the whole global model), decodable arrays meeting
        ``model.upload_specs()`` (count, shape, dtype, finite, range),
        ``model.check_upload`` (e.g. sigma > 0, C positive definite) and
        ``model.check_scale`` against the global arrays (``upload-bound``).
        """
        specs = self.model.upload_specs()
        reference = self.global_named()
        uploads = []
        for proxy, res in results:
            pid = str(res.metrics.get("partition_id", proxy.cid))
            reason = check_metrics(res.metrics, FIT_METRICS)
            limit = self.max_examples(proxy)
            if reason is None and not 0 < res.num_examples <= limit:
                reason = f"num_examples={res.num_examples} outside 1..{limit} (the client's training rows)"
            if reason is None:
                try:
                    arrays = comm.decode(res.parameters)
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
                self._drop(pid, reason)
        for failure in failures:
            self._failed(failure, "fit")
        return uploads

    def global_named(self) -> dict[str, np.ndarray]:
        """The global arrays by their :meth:`Model.global_specs` names (``upload-bound``'s reference)."""
        names = [s.name for s in self.model.global_specs()]
        return dict(zip(names, self.global_arrays, strict=False))

    def max_examples(self, proxy: ClientProxy) -> int:
        """The most examples a client can train on: the rows of its partition when the
        server knows its partition id and the federation's number of partitions
        (``client-ids=ask``: both come with its properties; the server partitions the
        same train split the same way, :func:`fedtext.data.partition_train`), else the
        whole train split (``client-ids=lazy``). FeS's pseudo labels come from the
        partition's own unlabelled rows, so gold + pseudo stays within it too."""
        info = self.client_info.get(proxy.cid, {})
        pid, parts = info.get("partition_id"), info.get("num_partitions")
        if parts is not None and str(pid).isdigit():
            key = (int(pid), int(parts))
            if key not in self._partition_rows:
                self._partition_rows[key] = len(partition_train(self.cfg, *key))
            return self._partition_rows[key]
        return len(labelled(self.cfg).splits.train)

    def _failed(self, failure: Any, phase: str) -> None:
        """Record a failed client under its partition id (and tell :meth:`client_failed`)."""
        reason = failure_reason(failure)
        exc = failure[1] if isinstance(failure, tuple) else failure
        cid = exc.cid if isinstance(exc, ClientFailure) else None
        if cid is None and isinstance(failure, tuple):
            cid = failure[0].cid
        pid = self.info_if_known(cid)
        self.record.client_failures += 1
        if phase == "fit":
            self._drop(pid, f"client failed: {reason}")
        else:
            log.warning("round %d: client %s failed to evaluate: %s", self.record.round, pid, reason)
            self.record.drop(pid, f"evaluate failed: {reason}")
        if cid is not None:
            self.client_failed(cid, phase, reason)

    def info_if_known(self, cid: str | None) -> str:
        """The partition id of node ``cid`` if the server knows it, else the node id."""
        if cid is None:
            return "?"
        known = self.client_info.get(cid)
        return known["partition_id"] if known else f"node {cid}"

    def _drop(self, client: Any, reason: str) -> None:
        log.warning("round %d: dropped client %s: %s", self.record.round, client, reason)
        self.record.drop(client, reason)
        kind = re.sub(r"\d+", "N", reason)  # one kind whatever the round or client numbers in it
        self.drop_reasons[kind] += 1
        self._drop_example.setdefault(kind, reason)

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Server-side evaluation of the global model on eval rounds (and round 0)."""
        if server_round == 0:
            self.begin_round(0)
        if self.evaluator is None or not self._is_eval_round(server_round):
            if server_round == 0:
                self.write_round()
            return None
        t0 = time.time()
        loss, acc, queries = self.evaluator(self.model, self.global_arrays)
        r = self.record
        r.global_loss, r.global_accuracy, r.server_queries = loss, acc, queries
        r.server_eval_s = time.time() - t0
        r.intervals.append((t0, t0 + r.server_eval_s))
        if server_round == 0:
            self.write_round()
        return loss, {"accuracy": acc}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        """On eval rounds the sampled clients (:meth:`sample_eval_clients`, participants or
        not) test the global model on their local test split; on the last round they
        first post-tune it (``post-tune-steps``)."""
        if not self._is_eval_round(server_round) or self.cfg.client_test_size == 0:
            self.write_round()
            return []
        final = int(server_round == self.cfg.num_server_rounds)
        instructions = []
        for proxy in self.sample_eval_clients(server_round, client_manager):
            arrays, extra = self.download(server_round, proxy, "evaluate")
            config = {"server_round": server_round, "final": final, **self.run_key(), **extra}
            instructions.append((Tracked(proxy), EvaluateIns(comm.encode(arrays), config)))
        self.record.eval_bytes_down = sum(comm.payload_bytes(ins.parameters) for _, ins in instructions)
        self.record.clients_evaluated = len(instructions)
        return instructions

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[Any],
    ) -> tuple[float | None, dict[str, Scalar]]:
        for failure in failures:
            self._failed(failure, "evaluate")
        def pid(p: ClientProxy, res: EvaluateRes) -> str:
            return str(res.metrics.get("partition_id", p.cid))

        checked = []
        for p, res in results:
            reason = check_eval_reply(res, self.cfg.client_test_size)
            if reason is None:
                checked.append((p, res))
            else:
                log.warning("round %d: dropped evaluation of client %s: %s", server_round, pid(p, res), reason)
                self.record.drop(pid(p, res), f"evaluate reply: {reason}")
        # A client too small for a local test split reports 0 examples: not an accuracy of 0.
        results = [(p, r) for p, r in checked if r.num_examples > 0]

        accs = {pid(p, r): float(r.metrics["accuracy"]) for p, r in results}
        rec = self.record
        rec.client_accuracy = accs
        rec.client_post_accuracy = {
            pid(p, r): float(r.metrics["post_accuracy"]) for p, r in results if "post_accuracy" in r.metrics
        }
        rec.participants = sorted(pid(p, r) for p, r in results if self.info(p)["participant"])
        rec.client_accuracy_mean = _mean(list(accs.values()))
        rec.client_accuracy_std = float(np.std(list(accs.values()))) if accs else None
        rec.eval_queries = sum(int(r.metrics.get("queries", 0)) for _, r in results)
        rec.client_rss_mb += [float(r.metrics.get("peak_rss_mb", 0)) for _, r in results]
        for _, res in results:
            rec.timing(res.metrics, "eval_time_s")
        self.write_round()
        if not results:
            return None, {}
        return super().aggregate_evaluate(server_round, results, failures)

    # ------------------------------------------------------------- recording
    def _is_eval_round(self, server_round: int) -> bool:
        return server_round % self.cfg.eval_every == 0 or server_round == self.cfg.num_server_rounds

    def write_round(self) -> None:
        """Write the current round's record (once) and, after the last round, the summary."""
        if self.record.written:
            return
        self.record.written = True
        if self.recorder is not None:
            self.recorder.log_round(self.record.to_json(self._t0))
            if self.record.round > 0:  # after the line: a kill in between redoes this round on resume
                self.save_checkpoint(self.record.round)
            if self.record.round == self.cfg.num_server_rounds:
                error = self.never_valid()
                self.recorder.finish("failed" if error else "finished", error=error)


    def never_valid(self) -> str | None:
        """Why a run whose rounds never aggregated a valid client result failed (``None``
        when one did): it would otherwise read ``finished`` at its initial model (every
        client failing on ``fedprompt.lr`` it cannot use, or every upload dropped). The
        reason is the most common drop reason, with how often it occurred. A resumed run
        counts its rounds before the checkpoint as valid (they are not recounted)."""
        if self.valid_rounds or self.resumed_round or self.cfg.num_server_rounds == 0:
            return None
        if not self.drop_reasons:
            return f"no client result in {self.cfg.num_server_rounds} rounds"
        kind, count = self.drop_reasons.most_common(1)[0]
        total = sum(self.drop_reasons.values())
        return (f"no valid client result in {self.cfg.num_server_rounds} rounds; {count} of {total} client "
                f"results dropped like this one: {self._drop_example[kind]}")


#: Telemetry keys a fit reply may carry that the server reads as numbers (missing ones
#: are fine); a method's own metrics are numbers too (Flower allows str/bytes/bool).
FIT_METRICS = ("queries", "peak_rss_mb", "fit_time_s", "train_loss", "load_s", "busy_start", "busy_end",
               "startup_start", "startup_end")
EVAL_METRICS = ("accuracy", "post_accuracy", "queries", "peak_rss_mb", "eval_time_s", "load_s", "busy_start",
                "busy_end", "startup_start", "startup_end")


def check_metrics(metrics: dict[str, Scalar], numeric: tuple[str, ...]) -> str | None:
    """Why a reply's metrics cannot be used, or ``None``: each of ``numeric`` present must
    be a finite int or float (``queries="lots"`` stopped a whole run in ``int()``), and
    ``queries`` a whole number >= 0."""
    for key in numeric:
        if key not in metrics:
            continue
        v = metrics[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            return f"metric {key}={v!r} is not a finite number"
    q = metrics.get("queries", 0)
    if q < 0 or q != int(q):
        return f"metric queries={q!r} is not a whole number >= 0"
    return None


def check_eval_reply(res: EvaluateRes, max_examples: int) -> str | None:
    """Why an evaluate reply cannot be used, or ``None``: typed metrics, an ``accuracy``
    in [0, 1] (a reply without one raised ``KeyError`` and lost the round's evaluation),
    ``post_accuracy`` likewise, a finite loss, and ``0 <= num_examples <= client-test-size``
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
    if not 0 <= res.num_examples <= max_examples:
        return f"num_examples={res.num_examples} outside 0..{max_examples} (client-test-size)"
    return None


def weighted_mean(arrays: list[list[np.ndarray]], weights: list[int]) -> list[np.ndarray]:
    """FedAvg's example-weighted mean of each array across clients.

    The float operations are those of Flower's ``aggregate_inplace`` (what
    ``FedAvg.aggregate_fit`` runs): scale each client's arrays by ``n_k / n`` in their
    own dtype, then add in arrival order, so results match Flower's bit for bit.
    """
    total = sum(weights)
    scale = np.asarray([w / total for w in weights])

    def scaled(x: np.ndarray, s: np.float64) -> np.ndarray:
        x = np.array(x, copy=True)
        return np.multiply(x, s, out=x) if np.can_cast(s, x.dtype, casting="same_kind") else np.multiply(
            x, np.array(s, x.dtype), out=x)

    out = [scaled(x, scale[0]) for x in arrays[0]]
    for k, client in enumerate(arrays[1:], start=1):
        for total_x, x in zip(out, client, strict=True):
            np.add(total_x, scaled(x, scale[k]), out=total_x)
    return out


def weighted_accuracy(metrics: list[tuple[int, dict[str, Scalar]]]) -> dict[str, Scalar]:
    """Flower's ``evaluate_metrics_aggregation_fn``: the clients' accuracy weighted by their
    test examples (what Flower's history keeps; fedtext's round record has each client's)."""
    total = sum(n for n, _ in metrics)
    return {"accuracy": sum(n * float(m["accuracy"]) for n, m in metrics) / total} if total else {}


def failure_reason(failure: Any) -> str:
    """The last ``SomethingError: ...`` line of a client failure, without ANSI colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(failure[1] if isinstance(failure, tuple) else failure))
    lines = [ln.strip() for ln in re.split(r"\\n|\n", text) if re.search(r"\w(Error|Exception)\b:?", ln)]
    return (lines[-1] if lines else text or type(failure).__name__)[:300]


def _mean(xs: list[float]) -> float | None:
    return float(sum(xs) / len(xs)) if xs else None
