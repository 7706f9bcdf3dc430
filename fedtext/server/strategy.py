"""What every fedtext strategy shares: Flower's hooks around a method's few own hooks.

``FedTextStrategy`` is Flower's ``FedAvg`` plus the bookkeeping that makes methods
comparable. The method's :class:`fedtext.learning.model.Model` (``self.model``, the same class
its client builds) says what the global arrays and uploads are and how to evaluate
them; a method's strategy overrides the smallest hooks:

* :meth:`aggregate` -- the math on validated, decoded uploads
  (:class:`fedtext.server.validation.Upload`: arrays by name) as the release step left them;
  default :meth:`combine` (FedAvg's example-weighted mean, or ``aggregator``'s robust rule:
  :mod:`fedtext.trust.robust`), then :meth:`server_update` (``server-optimizer``: FedAvgM, FedAdam, FedYogi, FedAdagrad,
  :mod:`fedtext.server.server_opt`; a method whose config declares ``server_aggregation = MEAN``
  and overrides :meth:`aggregate` passes its mean through :meth:`server_update` too);
* :meth:`release` -- what the server does to the valid uploads before :meth:`aggregate`
  (default: every mechanism the config turns on, :mod:`fedtext.server.release`); FedDPG
  skips it in its unlearning round;
* :meth:`download` -- what one client is sent (default: the global arrays; FedDLS
  sends each client the compressed updates it has not seen yet);
* :meth:`fit_config` -- extra keys of the fit instruction;
* :meth:`state_arrays` -- server state beyond the global arrays, as arrays (tests, records);
* :attr:`checkpoint_attrs` -- the attributes that hold that state: after every round
  they are pickled with the global arrays into ``<run-dir>/checkpoint.npz``
  (:mod:`fedtext.server.checkpoint`), and ``resume=<run-id>`` restores them;
* :meth:`client_failed` -- a sampled client failed (raised, timed out); e.g. FedDLS
  resyncs a client whose node lost its state;
* :meth:`sample_clients`, :meth:`check_sizes`, :meth:`validate`, :meth:`is_upload` --
  who trains a round, the method's check of the partitions, and which replies are
  uploads (FeS, FedDPG).

The four jobs around those hooks live in their own modules, each held by the strategy:

* :mod:`fedtext.server.sampling` (``self.sampler``) -- who the clients are (asked once) and the
  seeded draws of who trains and who tests each round;
* :mod:`fedtext.server.validation` (``self.validator``) -- every upload decoded once and checked,
  dropped with a logged reason when it fails (the round goes on with the rest), failed
  clients recorded under their partition ids, the run's drops counted;
* :mod:`fedtext.server.release` (``self.release_step``) -- what the server does to the valid
  uploads before the method's :meth:`aggregate` (SecAgg+'s mean, central DP's clip-and-noise,
  ``update-clip``) and the rule :meth:`combine` takes the mean by (``aggregator``): one step,
  :meth:`release`, one mechanism class each;
* :mod:`fedtext.server.round_log` (``self.rounds``) -- the round's record (``self.record``),
  written when the round ends, then the checkpoint and, after the last round, the run's status.

Server state between rounds is explicit: the global arrays (``self.global_arrays``)
plus the attributes named in :attr:`checkpoint_attrs`; both are checkpointed after every
round.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
from flwr.common import EvaluateIns, EvaluateRes, FitIns, FitRes, Parameters, Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg

from fedtext.common import comm

from fedtext.server import checkpoint, server_opt

from fedtext.trust import privacy
from fedtext.backbone import Backbone, EncodedBatch, backbone_for
from fedtext.common.config import ConfigError, RunConfig
from fedtext.learning.data import server_test
from fedtext.learning.model import Model
from fedtext.records.schema import RoundRecord
from fedtext.records.writer import RunRecorder
from fedtext.server.release import Released, ReleaseStep, RoundView
from fedtext.server.round_log import RoundLog

# CONNECT_TIMEOUT_S and TRAIN_SALT are only re-exported: both were defined here, and code outside
# the project may still name them as fedtext.server.strategy.CONNECT_TIMEOUT_S / TRAIN_SALT (the waits
# read fedtext.server.sampling.CONNECT_TIMEOUT_S: set it there)
from fedtext.server.sampling import CONNECT_TIMEOUT_S, TRAIN_SALT, ClientSampler, wait_for_nodes  # noqa: F401
from fedtext.common.tasks import Task
from fedtext.server.validation import Tracked, Upload, UploadValidator

log = logging.getLogger("fedtext")


class Encoded:
    """:func:`fedtext.common.comm.encode`, once per arrays object: the clients of a round that are
    sent the same list (the default :meth:`FedTextStrategy.download`: the global arrays) share one
    payload instead of one copy each.

    Why. Flower's ``fit_round`` holds every instruction until the round is aggregated, so one
    encoded copy of the global model per sampled client sat in the server beside the replies: at
    110 M weights (438 MB) and 6 clients a round, 2.6 GB (FedDRS's harness at base scale, issue
    67). Bytes on the wire and in the round record are unchanged: each message still carries the
    whole payload. A method whose :meth:`~FedTextStrategy.download` builds a list per client gets
    one payload per list, as before. The arrays objects are kept beside their payloads so that an
    ``id`` is never reused within a round.
    """

    def __init__(self) -> None:
        self._payloads: dict[int, tuple[list[np.ndarray], Parameters]] = {}

    def __call__(self, arrays: list[np.ndarray]) -> Parameters:
        if id(arrays) not in self._payloads:  # the list is kept below, so its id names it alone
            self._payloads[id(arrays)] = (arrays, comm.encode(arrays))
        return self._payloads[id(arrays)][1]


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
        self.noted_platforms: dict[str, str] = {}
        self.backbone = evaluator.backbone if evaluator else backbone_for(cfg, task)
        self.model: Model = self.mcfg.model_class()(cfg, self.backbone)
        self.global_arrays: list[np.ndarray] = []
        # server-optimizer's state (m, v) lives here and is checkpointed beside checkpoint_attrs
        self.server_opt = server_opt.ServerOptimizer.from_config(cfg)
        # SecAgg+'s mean, central DP, update-clip and aggregator's rule (fedtext.server.release)
        self.release_step = ReleaseStep(cfg, self.model)
        # the accountant's counts, checkpointed with the server optimizer's state: rounds with a
        # central release, and the rounds each partition was sampled to train in (local DP's ε)
        self.dp_releases = 0
        self.dp_sampled: dict[str, int] = {}
        self.sampled_this_round = 0  # m: the clients sent a fit instruction this round
        # The jobs get the hooks as bound methods, so that a method's overrides are the ones called.
        self.sampler = ClientSampler(cfg, self.check_sizes)
        self.validator = UploadValidator(cfg, self.model, self.sampler, self.client_failed)
        self.rounds = RoundLog(cfg, recorder, self.save_checkpoint,
                               lambda: self.validator.never_valid(self.resumed_round), self.sampler.partitions)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(method={self.cfg.method})"

    #: Attributes holding server state beyond the global arrays; pickled into every
    #: checkpoint and restored by ``resume=`` (FedBPT: its server CMA-ES; FedDLS: the
    #: update history and client versions).
    checkpoint_attrs: ClassVar[tuple[str, ...]] = ()
    #: The checkpoint's state key of the server optimizer's m and v (every method's checkpoint has it).
    SERVER_OPT_STATE: ClassVar[str] = "server_optimizer"
    #: The checkpoint's state key of the privacy accountant's counts and adaptive clipping's C.
    PRIVACY_STATE: ClassVar[str] = "privacy"
    resumed_round = 0  # the round a resumed run's checkpoint was taken after (0: a new run)

    @property
    def record(self) -> RoundRecord:
        """The current round's record (:class:`fedtext.server.round_log.RoundLog`), which a
        method's hooks may add to."""
        return self.rounds.record

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
        (:mod:`fedtext.node.state`); nothing in unit tests without a recorder."""
        return {"run_key": self.recorder.run_id} if self.recorder is not None else {}

    def download(self, server_round: int, proxy: ClientProxy, purpose: str) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """What ``proxy`` is sent for ``purpose`` ("fit" or "evaluate"): the arrays and
        extra config keys. Default: the global arrays, nothing extra.

        The same list object returned for two clients is encoded once and sent to both
        (:class:`Encoded`): arrays that differ per client need a list of their own, and a list
        returned must not be changed in place while the round's instructions are built."""
        return self.global_arrays, {}

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray] | None, dict[str, Scalar]]:
        """The method's aggregation of validated uploads: new global arrays (``None``:
        keep them) and scalar metrics for the round record. Default: FedAvg's
        example-weighted mean, through :meth:`server_update`."""
        mean, metrics = self.combine(uploads, [u.num_examples for u in uploads])
        return self.server_update(server_round, mean), metrics

    def combine(self, uploads: list[Upload], weights: list[int]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """The round's "mean" of ``uploads`` (weights ``weights``: example counts, or FedDPG's
        uniform ones) by ``aggregator`` (:meth:`fedtext.server.release.ReleaseStep.combine`; default
        the weighted mean itself), with no metrics of its own (``update-clip`` ran before, in
        :meth:`release`, and reports there)."""
        return self.release_step.combine([u.array_list() for u in uploads], weights, self.global_arrays), {}

    def server_update(self, server_round: int, mean: list[np.ndarray]) -> list[np.ndarray]:
        """x_{t+1} from ``mean``, the mean of this round's uploads: ``server-optimizer``'s step
        with the pseudo-gradient Δ = mean − x_t (Reddi et al. 2021, Algorithm 2;
        :mod:`fedtext.server.server_opt`), x_t the global arrays the round's clients were sent.
        ``server-optimizer=fedavg`` with ``server-lr`` 1 (the default) returns ``mean`` itself.
        Only methods whose config declares ``server_aggregation = MEAN`` may run another
        optimizer (refused at config time otherwise)."""
        if not self.global_arrays:  # nothing to step from (a strategy used without initialize_parameters)
            return mean
        return self.server_opt.step(server_round, self.global_arrays, mean)

    def client_failed(self, cid: str, phase: str, reason: str) -> None:
        """Client ``cid`` failed its ``phase`` ("fit"/"evaluate") message; nothing by default."""

    def sample_clients(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        """The clients that train this round: default
        :meth:`fedtext.server.sampling.ClientSampler.sample_train` (too few participants is a
        configuration error in this process's first round, a recorded drop later)."""
        sampled = self.sampler.sample_train(server_round, client_manager, self.is_first_round(server_round),
                                            self.record)
        if self.recorder is not None and self.sampler.platforms != self.noted_platforms:
            self.noted_platforms = dict(self.sampler.platforms)
            self.recorder.note_launch(node_platforms=self.noted_platforms)  # provenance: where each partition ran
        return sampled

    def is_first_round(self, server_round: int) -> bool:
        """Whether ``server_round`` is this process's first training round (1, or the one
        after a resumed run's checkpoint): what goes wrong there is the configuration's."""
        return server_round <= self.resumed_round + 1

    def check_sizes(self, sizes: list[int]) -> None:
        """The method's own feasibility check of the clients' train rows (``sizes[pid]``;
        raise ``ConfigError``), once the sampler knows the partitions; nothing by default."""

    def validate(self, results: list[tuple[ClientProxy, FitRes]], failures: list[Any]) -> list[Upload]:
        """The valid uploads of a round (:meth:`fedtext.server.validation.UploadValidator.uploads`);
        the others, and every failure, are noted in the round record with a reason.
        ``results`` have passed :meth:`fedtext.server.validation.UploadValidator.replies` (their
        node's partition, their declared metrics), so a method's override may read their
        metrics."""
        return self.validator.uploads(self.record, results, failures, self.global_named())

    def is_upload(self, res: FitRes) -> bool:
        """Whether a fit result carries an upload (bytes up per client-round average over
        these). A method whose clients may answer with a report only says no to those
        (FeS's labelling-only clients)."""
        return True

    def simulated_seconds(self, metrics: dict[str, Scalar], nbytes: int) -> float:
        """A client-round on a device (FeS §4.1's emulation): its measured compute
        (``fit_time_s``) plus its bytes over a ``bandwidth-mbps`` link; the round takes
        as long as its slowest client (``sim_time_s``)."""
        return float(metrics.get("fit_time_s", 0.0)) + nbytes / (self.cfg.bandwidth_mbps * 1e6)

    def global_named(self) -> dict[str, np.ndarray]:
        """The global arrays by their :meth:`Model.global_specs` names (``upload-bound``'s reference)."""
        names = [s.name for s in self.model.global_specs()]
        return dict(zip(names, self.global_arrays, strict=False))

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, server_round: int) -> None:
        """Write the state after ``server_round`` to the run folder (:mod:`fedtext.server.checkpoint`)."""
        if self.recorder is None:
            return
        state = {name: getattr(self, name) for name in self.checkpoint_attrs}
        state[self.SERVER_OPT_STATE] = self.server_opt.state()
        state[self.PRIVACY_STATE] = self.privacy_state()
        binding = checkpoint.Binding(self.recorder.run_id, self.cfg.method, checkpoint.config_hash(self.recorder.config))
        checkpoint.save(self.recorder.dir, server_round, self.global_arrays, state, {"seed": self.cfg.seed}, binding)

    @classmethod
    def checkpoint_state_bytes(cls, cfg: RunConfig, model: Model) -> int:
        """The most bytes :attr:`checkpoint_attrs`, pickled, can grow to in a run of ``cfg``
        beyond :data:`fedtext.server.checkpoint.STATE_ALLOWANCE` (which holds small state: FeS's
        labelled set and pacer); a method whose state grows with the model or the rounds
        says by how much. Bounds what ``resume=`` reads (:meth:`checkpoint_limits`)."""
        return 0

    @classmethod
    def checkpoint_limits(cls, cfg: RunConfig, model: Model) -> checkpoint.Limits:
        """What a checkpoint of a run of ``cfg`` can hold (:meth:`fedtext.server.checkpoint.Limits.for_model`
        of ``model``'s global specs and :meth:`checkpoint_state_bytes`): ``resume=`` refuses a
        larger one before decompressing it."""
        specs = model.global_specs()
        opt_bytes = server_opt.state_bytes(cfg, sum(s.nbytes() for s in specs), len(specs))  # m, v: one model each
        return checkpoint.Limits.for_model(specs, cls.checkpoint_state_bytes(cfg, model) + opt_bytes)

    def restore(self, ckpt: checkpoint.Checkpoint) -> None:
        """Continue from ``ckpt``: its global arrays and strategy state."""
        missing = set(self.checkpoint_attrs) - set(ckpt.state)
        if missing:
            raise ConfigError(f"checkpoint of round {ckpt.round} lacks {sorted(missing)} (another method?)")
        self.global_arrays = [np.asarray(a) for a in ckpt.global_arrays]
        for name in self.checkpoint_attrs:
            setattr(self, name, ckpt.state[name])
        # a checkpoint from before server optimizers ran plain FedAvg, which keeps no state
        self.server_opt.load_state(ckpt.state.get(self.SERVER_OPT_STATE, {}))
        saved = ckpt.state.get(self.PRIVACY_STATE, {})  # a checkpoint from before privacy: nothing spent
        self.dp_releases = int(saved.get("releases", 0))
        self.dp_sampled = {str(k): int(v) for k, v in saved.get("sampled", {}).items()}
        if self.central_dp is not None:
            self.central_dp.load_state(saved.get("central", {}))
        self.resumed_round = ckpt.round

    # ---------------------------------------------------------- Flower hooks
    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        """Check clients-per-round and clients-per-eval against the connected clients, then
        send round-0 arrays.

        SuperNodes may still be connecting (real devices, or the simulation engine
        registering its nodes), so wait up to ``CONNECT_TIMEOUT_S`` for enough of them
        (:func:`fedtext.server.sampling.wait_for_nodes`: none at all is its own error).
        """
        if self.cfg.clients_asked:
            wait_for_nodes(client_manager, self.cfg.clients_asked)
            self.cfg.check_num_clients(client_manager.num_available())
        self.global_arrays = [np.asarray(a) for a in self.initial_arrays()]
        return comm.encode(self.global_arrays)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Seeded sample of participants, each sent :meth:`download` and :meth:`fit_config`.
        In this process's first round, for every method's sampling alike, no SuperNode at all
        is one configuration error (:func:`fedtext.server.sampling.wait_for_nodes`)."""
        self.rounds.begin(server_round)
        if self.is_first_round(server_round):
            wait_for_nodes(client_manager, 1)
        instructions = []
        encoded = Encoded()
        for proxy in self.sample_clients(server_round, client_manager):
            arrays, extra = self.download(server_round, proxy, "fit")
            instructions.append((Tracked(proxy), FitIns(encoded(arrays), {**self.fit_config(server_round), **extra})))
        self.rounds.fit_sent(instructions)
        self.sampled_this_round = len(instructions)
        if self.cfg.dp != "none":  # local DP's ε counts the rounds a client was asked to release an update
            for proxy, _ in instructions:
                pid = self.sampler.info_if_known(proxy.cid)
                self.dp_sampled[pid] = self.dp_sampled.get(pid, 0) + 1
        return instructions

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Screen every reply (identity, declared metrics), validate the uploads, account
        bytes (of every result: a dropped one was still sent), then :meth:`aggregate` the
        valid ones, once, as :meth:`release` leaves them.

        The replies pass the release step's screen first (:mod:`fedtext.server.release`:
        ``secagg=true``'s results each carry SecAgg+'s mean in float64, cast to the upload specs'
        dtypes there so that validation checks it; :mod:`fedtext.server.secagg` says what it can
        still check). Under SecAgg+ the round's bytes are the protocol's
        (:meth:`fedtext.server.round_log.RoundLog.secagg_sent`, after this hook)."""
        results = self.release_step.screen(results)
        uploads = self.validate(self.validator.replies(self.record, results, "fit"), failures)
        self.rounds.fit_results(results, uploads, self.is_upload, self.simulated_seconds)
        # no valid upload: nothing to aggregate, but the Poisson mechanism releases its noise whatever arrived
        if not uploads and not self.poisson_release():
            log.warning("round %d: no valid client result; global model unchanged", server_round)
            self.note_privacy(None)  # nothing released centrally; local DP's clients still sent theirs
            return None, {}
        if uploads:
            self.validator.valid_rounds += 1
        released = self.release(server_round, uploads)
        arrays, metrics = self.aggregate(server_round, released.uploads)
        metrics = {**released.metrics, **metrics}
        self.record.method_metrics = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        self.note_privacy(released.privacy)
        if arrays is None:
            return None, metrics
        # a rule that keeps one upload itself (Krum, a median of one) returns a read-only view of its reply
        # (comm.view): the global arrays are the server's own, copied then
        self.global_arrays = [a if isinstance(a, np.ndarray) and a.flags.writeable else np.array(a) for a in arrays]
        return comm.encode(self.global_arrays), metrics

    # ------------------------------------------------------- release, privacy
    def release(self, server_round: int, uploads: list[Upload]) -> Released:
        """The one release step (:meth:`fedtext.server.release.ReleaseStep.apply`): the round's valid
        uploads through SecAgg+'s merge, central DP's noised mean (counted here: the accountant
        composes one release per round) and ``update-clip``, whichever the config turned on, against
        the global arrays the round's clients were sent and the m clients sampled."""
        rnd = RoundView(server_round, self.global_arrays, self.sampled_this_round)
        released = self.release_step.apply(rnd, uploads)
        if released.privacy is not None:
            self.dp_releases += 1
        return released

    @property
    def central_dp(self) -> privacy.CentralDP | None:
        """``dp=central``'s clipping norm (adaptive clipping moves it) and noise; ``None`` otherwise."""
        return self.release_step.central_dp

    def poisson_release(self) -> bool:
        """Whether this round releases under central DP whatever arrives
        (:meth:`fedtext.server.release.ReleaseStep.every_round`: Poisson cohorts)."""
        return self.release_step.every_round()

    def privacy_state(self) -> dict[str, Any]:
        """The accountant's counts and adaptive clipping's C, for the checkpoint."""
        return {"releases": self.dp_releases, "sampled": dict(self.dp_sampled),
                "central": self.central_dp.state() if self.central_dp is not None else {}}

    def note_privacy(self, release: privacy.Release | None) -> None:
        """The round record's ``privacy``: ε at ``dp-delta`` spent so far (:func:`fedtext.trust.privacy.spent`)
        and, central, this round's C, noise std and clipped count; nothing when ``dp=none``."""
        if self.cfg.dp == "none":
            return
        # n of q = m / n: the participants the round was drawn from (client-ids=lazy: the connected ones, where
        # partitions() knows only those heard of, 124 of 3,000 after a round of 120: q was 0.97 instead of 0.04)
        participants = self.sampler.population or len(self.sampler.partitions()) or self.sampled_this_round
        eps = privacy.spent(self.cfg, self.dp_releases, participants, max(self.dp_sampled.values(), default=0))
        eps = eps if np.isfinite(eps) else None  # dp-noise=0: no bound (JSON has no infinity)
        entry: dict[str, Any] = {"mode": self.cfg.dp, "epsilon": eps, "delta": self.cfg.dp_delta,
                                 "noise_multiplier": self.cfg.dp_noise, "accountant": self.cfg.dp_accountant,
                                 "accounting": privacy.accounting(self.cfg)}
        if self.cfg.dp == "central":
            entry["sampling_rate"] = privacy.sampling_rate(self.cfg, participants)
        if release is not None:
            entry.update(clip=release.clip, noise_std=release.noise_std, clipped=release.clipped)
        self.record.privacy = entry

    def evaluate(self, server_round: int, parameters: Parameters) -> tuple[float, dict[str, Scalar]] | None:
        """Server-side evaluation of the global model on eval rounds (and round 0)."""
        if server_round == 0:
            self.rounds.begin(0)
        if self.evaluator is None or not self._is_eval_round(server_round):
            if server_round == 0:
                self.rounds.write()
            return None
        loss, acc = self.rounds.server_evaluation(lambda: self.evaluator(self.model, self.global_arrays))
        if server_round == 0:
            self.rounds.write()
        return loss, {"accuracy": acc}

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: ClientManager):
        """On eval rounds the sampled clients (:meth:`fedtext.server.sampling.ClientSampler.sample_eval`,
        participants or not) test the global model on their local test split; on the last
        round they first post-tune it (``post-tune-steps``)."""
        if not self._is_eval_round(server_round) or self.cfg.client_test_size == 0:
            self.rounds.write()
            return []
        final = int(server_round == self.cfg.num_server_rounds)
        instructions = []
        encoded = Encoded()
        for proxy in self.sampler.sample_eval(server_round, client_manager):
            arrays, extra = self.download(server_round, proxy, "evaluate")
            config = {"server_round": server_round, "final": final, **self.run_key(), **extra}
            instructions.append((Tracked(proxy), EvaluateIns(encoded(arrays), config)))
        self.rounds.evaluate_sent(instructions)
        return instructions

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[Any],
    ) -> tuple[float | None, dict[str, Scalar]]:
        """Check the replies, record the clients' accuracies, write the round's record."""
        checked = self.validator.evaluations(self.record, results, failures)
        # A client too small for a local test split reports 0 examples: not an accuracy of 0.
        results = [(p, r) for p, r in checked if r.num_examples > 0]
        self.rounds.evaluate_results(results, lambda p: self.sampler.info(p)["participant"],
                                     lambda p: self.sampler.info_if_known(p.cid))
        self.rounds.write()
        if not results:
            return None, {}
        return super().aggregate_evaluate(server_round, results, failures)

    def _is_eval_round(self, server_round: int) -> bool:
        return server_round % self.cfg.eval_every == 0 or server_round == self.cfg.num_server_rounds


def weighted_accuracy(metrics: list[tuple[int, dict[str, Scalar]]]) -> dict[str, Scalar]:
    """Flower's ``evaluate_metrics_aggregation_fn``: the clients' accuracy weighted by their
    test examples (what Flower's history keeps; fedtext's round record has each client's)."""
    total = sum(n for n, _ in metrics)
    return {"accuracy": sum(n * float(m["accuracy"]) for n, m in metrics) / total} if total else {}
