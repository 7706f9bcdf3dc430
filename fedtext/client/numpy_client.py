"""What every fedtext client shares: its data, the frozen backbone, evaluation, telemetry.

``FedTextClient`` is a ``NumPyClient``. It builds the method's
:class:`fedtext.learning.model.Model` (``self.model``, the same class its strategy builds), so
the client evaluates exactly as the server does. A method subclasses it and implements

* :meth:`train` -- local training from the downloaded arrays; returns the arrays to
  upload (in ``model.upload_specs()`` order), the number of examples used and the
  local training loss;
* :meth:`global_arrays` -- only when a download is not the global arrays themselves
  (FedDLS's compressed, incremental updates): how to rebuild them;
* :meth:`local_terms` -- extra terms of the local objective of a gradient client
  (:mod:`fedtext.client.local_terms`): the base gives FedProx's proximal term under
  ``proximal-mu > 0``; a method adds its own. A gradient client trains through
  :meth:`gradient_steps`, which adds them to the cross-entropy.

Personalization (FedDLS §4.3 end, App. B), the same for every prompt method: on the
last round, when ``post-tune-steps > 0``, :meth:`evaluate` first post-tunes the global
prompt p' with BBT on the client's own shots -- CMA-ES on z in ``p = p' + A z`` with
step size ``post-tune-sigma`` (0.1), population ``post-tune-popsize`` and
``d = post-tune-dim``, no communication -- and reports the accuracy of both p'
(``accuracy``) and the post-tuned prompt (``post_accuracy``). The paper post-tunes its
gradient baselines with gradient descent; we post-tune every method the same way so
that the comparison isolates what federated training produced.

``fit``/``evaluate`` wrap those with the telemetry every run records: model queries
(sequences pushed through the backbone), the peak resident memory of the client's
process, and compute seconds (``fit_time_s``, ``eval_time_s``; the node wrapper of
``fedtext.client_app`` adds build time and start/end stamps). Everything the server
controls reaches the client through the fit/evaluate ``config`` dict or the
run-config; clients never import strategies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from flwr.app import RecordDict
from flwr.client import NumPyClient
from flwr.common import NDArrays, Scalar

from fedtext.client import attacks

from fedtext.trust import privacy
from fedtext.backbone import Backbone, EncodedBatch, backbone_for, losses
from fedtext.common.config import RunConfig
from fedtext.learning.data import ClientData
from fedtext.backbone.devices import Precision, backward_step
from fedtext.client.local_terms import LocalStep, LocalTerm, ProximalTerm
from fedtext.learning.model import Model, SubspaceModel
from fedtext.common.progress import track
from fedtext.backbone.prompts import Prompts, SplitPrompt, project, projection
from fedtext.records.probes import peak_rss_mb
from fedtext.common.tasks import Task


def client_seed(cfg: RunConfig, partition_id: int, server_round: int) -> int:
    """A positive 31-bit seed per (run seed, client, round).

    pycma treats ``seed=0`` as "seed from the clock", so seeds must never be 0.
    """
    return int(np.random.SeedSequence([cfg.seed, partition_id, server_round]).generate_state(1)[0] % (2**31 - 2)) + 1


def minibatches(batch: EncodedBatch, size: int, steps: int, rng: np.random.Generator) -> Iterator[EncodedBatch]:
    """``steps`` mini-batches of ``size`` rows drawn without replacement, reshuffled
    after every pass over ``batch`` (the gradient methods' sampler)."""
    n = len(batch)
    order, pos = rng.permutation(n), 0
    for _ in range(steps):
        if pos >= n:
            order, pos = rng.permutation(n), 0
        yield batch.take(order[pos : pos + size])
        pos += size


def trained_tensors(opt: torch.optim.Optimizer) -> tuple[torch.Tensor, ...]:
    """The tensors ``opt`` trains: those of its param groups that require a gradient, in
    group order (what a local term's ``w`` is: exactly what the optimizer moves)."""
    return tuple(p for group in opt.param_groups for p in group["params"] if p.requires_grad)


def gradient_steps(batches: Iterable[EncodedBatch], logits: Callable[[EncodedBatch], torch.Tensor],
                   opt: torch.optim.Optimizer, precision: Precision, what: str = "local training",
                   total: int | None = None, *, terms: Sequence[LocalTerm]) -> float:
    """One ``opt`` step per mini-batch on the mean cross-entropy of ``logits(batch)`` plus
    each of ``terms`` (the gradient methods' local loop, :mod:`fedtext.client.local_terms`),
    loss-scaled under ``precision=fp16`` (:meth:`fedtext.backbone.devices.Precision.loss_scaler`);
    returns the mean cross-entropy over the steps (the terms excluded).

    ``terms`` is required (a client passes :meth:`FedTextClient.local_terms`, or calls
    :meth:`FedTextClient.gradient_steps`), so no gradient client can skip ``proximal-mu``;
    each is started on :func:`trained_tensors` of ``opt`` before the first step. With no
    terms the loop is the cross-entropy alone, as before the hook.
    A loop longer than a few seconds reports its progress as ``what`` (:mod:`fedtext.common.progress`;
    ``total``: the steps, for an ETA, default ``len(batches)`` where it has one)."""
    params = trained_tensors(opt)
    for term in terms:
        term.start(params)
    step_losses = []
    scaler = precision.loss_scaler()
    for batch in track(batches, what, total, unit="steps"):
        out = logits(batch)
        ce = torch.nn.functional.cross_entropy(out, batch.labels)
        loss = ce
        if terms:
            step = LocalStep(params, batch, out)
            for term in terms:
                loss = loss + term(step)
        backward_step(loss, opt, scaler)
        step_losses.append(ce.item())
    return float(np.mean(step_losses))


class FedTextClient(NumPyClient):
    """Base NumPyClient of every fedtext method.

    Parameters
    ----------
    cfg
        The validated run configuration (``cfg.method_config`` is the method's own).
    task
        The resolved task.
    data
        This client's labelled shots, local test split and unlabelled rest.
    backbone
        The frozen backbone (shared by all clients hosted in the same process; a
        method that trains weights trains its model's own copy).
    state
        The node's ``context.state``: what this client keeps between rounds (Flower
        builds a fresh client object for every message).
    """

    POST_TUNE_ROUND = 1_000_000  # seeds post-tuning apart from every training round

    def __init__(
        self,
        cfg: RunConfig,
        task: Task,
        data: ClientData,
        backbone: Backbone | None = None,
        state: RecordDict | None = None,
    ) -> None:
        self.cfg = cfg
        self.mcfg = cfg.method_config
        self.state = state if state is not None else RecordDict()
        self.fit_metrics: dict[str, Scalar] = {}  # extra metrics a method's train() reports
        self.task = task
        self.data = data
        self.partition_id = data.partition_id
        self.backbone = backbone or backbone_for(cfg, task)
        self.model: Model = self.mcfg.model_class()(cfg, self.backbone)
        self.train_batch: EncodedBatch = self.backbone.encode(list(data.train["text"]), list(data.train["label"]))
        self.test_batches = (
            self.backbone.batches(list(data.test["text"]), list(data.test["label"])) if len(data.test) else []
        )

    # ------------------------------------------------------------------ hooks
    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        """Local training: (arrays to upload, examples used, local training loss)."""
        raise NotImplementedError

    def global_arrays(self, arrays: NDArrays, config: dict[str, Scalar]) -> NDArrays:
        """The global arrays a download stands for (default: the download itself)."""
        return arrays

    def local_terms(self) -> list[LocalTerm]:
        """The extra terms of this client's local objective, fresh for each local training
        (:mod:`fedtext.client.local_terms`): FedProx's :class:`~fedtext.client.local_terms.ProximalTerm`
        under ``proximal-mu > 0``, else none. A method extends it
        (``return [*super().local_terms(), MyTerm(self.state, ...)]``): a term with
        per-client state (SCAFFOLD's c_i, MOON's previous model) reads and writes it in
        ``self.state``, which the node keeps between rounds."""
        return [ProximalTerm(self.cfg.proximal_mu)] if self.cfg.proximal_mu > 0 else []

    def gradient_steps(self, batches: Iterable[EncodedBatch], logits: Callable[[EncodedBatch], torch.Tensor],
                       opt: torch.optim.Optimizer, total: int | None = None) -> float:
        """:func:`gradient_steps` with this client's :meth:`local_terms`, its precision and
        progress line: the local loop of every gradient client."""
        what = f"client {self.partition_id}: local training"
        return gradient_steps(batches, logits, opt, self.backbone.precision, what, total, terms=self.local_terms())

    def progress(self, items: Iterable, what: str, total: int | None = None, unit: str = "steps") -> Iterator:
        """``items``, with a progress line ``client <partition id>: <what>`` when they take
        long (:func:`fedtext.common.progress.track`)."""
        return track(items, f"client {self.partition_id}: {what}", total, unit)

    @property
    def domain(self) -> str:
        """This client's domain when its data has exactly one, else ``""``."""
        domains = set(self.data.train["domain"]) | set(self.data.test["domain"])
        return next(iter(domains)) if len(domains) == 1 else ""

    def prompt_losses(self, prompts: Prompts, batch: EncodedBatch | None = None) -> np.ndarray:
        """Mean cross-entropy of each of ``[P, T, D]`` prompts on ``batch`` (default: the
        shots; or a :class:`fedtext.backbone.prompts.SplitPrompt`), all P prompts in one batched
        forward, in encoder calls that fit this client's run's ``max-client-memory-mb``."""
        batch = self.train_batch if batch is None else batch
        scored = self.backbone.score(prompts, batch, budget_mb=self.cfg.max_client_memory_mb)
        return losses(scored, batch.labels).numpy()

    def post_tune(self, prompt: Prompts) -> Prompts:
        """BBT post-tuning of p' (App. B): ``post-tune-steps`` CMA-ES iterations on z in
        ``p' + A z`` from z = 0 with sigma = ``post-tune-sigma``; returns ``p' + A z_mean``
        (a :class:`fedtext.backbone.prompts.SplitPrompt` under ``prompt-injection=embedding-output``:
        p' the input embeddings, A z added after the embedding layer, as BBT).

        A is BBT's fixed projection for this run (:func:`fedtext.backbone.prompts.projection`,
        ``post-tune-dim`` columns, scaled for sigma = 1: ``post-tune-sigma`` sets the step
        in that fixed space, FedDLS App. B's setting, rather than rescaling A by BBT's
        1/sigma0); ``post-tune-popsize`` candidates per iteration, scored in one batched
        forward.
        """
        from fedtext.learning.blackbox import WhitenedCMA  # pycma (3.4 s to import) only for clients that post-tune

        cfg = self.cfg
        size = int(np.prod(np.shape(prompt.embeds if isinstance(prompt, SplitPrompt) else prompt)))  # T * D
        a = projection(cfg.seed, size, cfg.post_tune_dim, self.backbone.embedding_std())
        es = WhitenedCMA(
            mean=np.zeros(cfg.post_tune_dim), sigma=cfg.post_tune_sigma, cov=None, popsize=cfg.post_tune_popsize,
            seed=client_seed(cfg, self.partition_id, self.POST_TUNE_ROUND),
        )
        inj = cfg.prompt_injection
        for _ in self.progress(range(cfg.post_tune_steps), "post-tuning (CMA-ES)", unit="iterations"):
            es.tell(self.prompt_losses(project(prompt, a, es.ask(), inj)))
        return project(prompt, a, es.mean, inj)

    # ---------------------------------------------------------- Flower hooks
    def get_properties(self, config: dict[str, Scalar]) -> dict[str, Scalar]:
        """Who this client is: the server samples participants by these (seeded)."""
        return {"partition_id": self.partition_id, "domain": self.domain}

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        t0, q0 = time.time(), self.backbone.queries
        arrays, n, loss = self.train(parameters, config)
        if self.cfg.dp == "local" and arrays:  # its own Gaussian mechanism before anything leaves (fedtext.trust.privacy)
            update = privacy.local_update(self.cfg, self.model.update(parameters, arrays),
                                          int(config.get("server_round", 0)), int(self.partition_id))
            arrays = self.model.apply_update(parameters, update)
        attack = attacks.for_client(self.cfg, self.partition_id)
        if attack is not None and arrays:  # a simulated poisoner (attack=, docs/reliability.md)
            rows = len(self.data.train) + len(self.data.test) + len(self.data.unlabeled)
            poisoned = attack(parameters, attacks.Reply(arrays, n), rows)
            arrays, n = poisoned.arrays, poisoned.num_examples
        return arrays, n, {
            "partition_id": self.partition_id,
            "train_loss": float(loss),
            "queries": self.backbone.queries - q0,
            "peak_rss_mb": peak_rss_mb(),
            **self.gpu_memory(),
            "fit_time_s": time.time() - t0,
            **self.fit_metrics,
        }

    def gpu_memory(self) -> dict[str, Scalar]:
        """``{"peak_gpu_mb": ...}`` when the backbone is on a GPU (beside the RSS, which does
        not see GPU memory), else nothing: CPU replies keep their metrics as they were."""
        peak = self.backbone.precision.peak_memory_mb()
        return {} if peak is None else {"peak_gpu_mb": peak}

    def evaluate(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[float, int, dict[str, Scalar]]:
        t0, q0 = time.time(), self.backbone.queries
        if not self.test_batches:
            return 0.0, 0, {"partition_id": self.partition_id, "accuracy": 0.0, "queries": 0, "eval_time_s": 0.0}
        arrays = self.global_arrays(parameters, config)
        loss, acc = self.model.evaluate(arrays, self.test_batches)
        metrics: dict[str, Scalar] = {"partition_id": self.partition_id, "accuracy": acc}
        if int(config.get("final", 0)) and self.cfg.post_tune_steps > 0 and len(self.train_batch):
            tuned = self.post_tune(self.model.prompt(arrays))
            loss, metrics["post_accuracy"] = self.backbone.evaluate(tuned, self.test_batches)
        metrics.update(queries=self.backbone.queries - q0, peak_rss_mb=peak_rss_mb(), **self.gpu_memory(),
                       eval_time_s=time.time() - t0)
        return loss, len(self.data.test), metrics


class SubspaceClient(FedTextClient):
    """Base of black-box clients whose prompt is ``p0 + A z`` (bbt-fed, fedbpt).

    ``self.model`` is a :class:`fedtext.learning.model.SubspaceModel` (p0 and A rebuilt from the
    run seed exactly as the server does); only z ever travels.
    """

    model: SubspaceModel

    def fitness(self, candidates: np.ndarray, batch: EncodedBatch | None = None) -> np.ndarray:
        """Mean cross-entropy of each candidate z ``[P, d]`` on ``batch`` (default: the shots),
        all P prompts in one batched forward."""
        return self.prompt_losses(self.model.project(candidates), batch)
