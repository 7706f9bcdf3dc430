"""What every fedtext client shares: its data, the frozen backbone, evaluation, telemetry.

``FedTextClient`` is a ``NumPyClient``. A method subclasses it and implements

* :meth:`train` -- local training from the downloaded arrays; returns the arrays to
  upload, the number of examples used and the local training loss;
* :meth:`prompt_of` -- the ``[T, D]`` prompt that downloaded arrays stand for (used
  by :meth:`evaluate` on the client's local test split).

``fit``/``evaluate`` wrap those with the telemetry every run records: model queries
(sequences pushed through the backbone), the peak resident memory of the client's
process, and wall time. Everything the server controls reaches the client through
the fit/evaluate ``config`` dict or the run-config; clients never import strategies.
"""

from __future__ import annotations

import resource
import time

import numpy as np
from flwr.client import NumPyClient
from flwr.common import NDArrays, Scalar

from fedtext.backbone import Backbone, EncodedBatch, get_backbone, losses
from fedtext.config import RunConfig
from fedtext.data import ClientData
from fedtext.prompts import bbt_space, project
from fedtext.tasks import Task


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def client_seed(cfg: RunConfig, partition_id: int, server_round: int) -> int:
    """A positive 31-bit seed per (run seed, client, round).

    pycma treats ``seed=0`` as "seed from the clock", so seeds must never be 0.
    """
    return int(np.random.SeedSequence([cfg.seed, partition_id, server_round]).generate_state(1)[0] % (2**31 - 2)) + 1


class FedTextClient(NumPyClient):
    """Base NumPyClient of every fedtext method.

    Parameters
    ----------
    cfg
        The validated run configuration.
    task
        The resolved task.
    data
        This client's labelled shots, local test split and unlabelled rest.
    backbone
        The frozen backbone (shared by all clients hosted in the same process).
    """

    def __init__(self, cfg: RunConfig, task: Task, data: ClientData, backbone: Backbone | None = None) -> None:
        self.cfg = cfg
        self.task = task
        self.data = data
        self.partition_id = data.partition_id
        self.backbone = backbone or get_backbone(cfg.model, cfg.head, task.name, cfg.max_length)
        self.train_batch: EncodedBatch = self.backbone.encode(list(data.train["text"]), list(data.train["label"]))
        self.test_batches = (
            self.backbone.batches(list(data.test["text"]), list(data.test["label"])) if len(data.test) else []
        )

    # ------------------------------------------------------------------ hooks
    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        """Local training: (arrays to upload, examples used, local training loss)."""
        raise NotImplementedError

    def prompt_of(self, arrays: NDArrays) -> np.ndarray:
        """The ``[T, D]`` prompt that downloaded ``arrays`` stand for."""
        raise NotImplementedError

    # ---------------------------------------------------------- Flower hooks
    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        t0, q0 = time.time(), self.backbone.queries
        arrays, n, loss = self.train(parameters, config)
        return arrays, n, {
            "partition_id": self.partition_id,
            "train_loss": float(loss),
            "queries": self.backbone.queries - q0,
            "peak_rss_mb": peak_rss_mb(),
            "fit_time_s": time.time() - t0,
        }

    def evaluate(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[float, int, dict[str, Scalar]]:
        q0 = self.backbone.queries
        if not self.test_batches:
            return 0.0, 0, {"partition_id": self.partition_id, "accuracy": 0.0, "queries": 0}
        loss, acc = self.backbone.evaluate(self.prompt_of(parameters), self.test_batches)
        return loss, len(self.data.test), {
            "partition_id": self.partition_id,
            "accuracy": acc,
            "queries": self.backbone.queries - q0,
            "peak_rss_mb": peak_rss_mb(),
        }


class SubspaceClient(FedTextClient):
    """Base of black-box clients whose prompt is ``p0 + A z`` (bbt-fed, fedbpt).

    p0 and A come from :func:`fedtext.prompts.bbt_space`, rebuilt from the run seed
    exactly as the server does; only z (the first ``intrinsic-dim`` values of the
    first array) ever travels.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.p0, self.A = bbt_space(self.backbone, cfg.prompt_length, cfg.intrinsic_dim, cfg.seed)

    def prompt_of(self, arrays: NDArrays) -> np.ndarray:
        return project(self.p0, self.A, np.asarray(arrays[0], dtype=np.float32)[: self.cfg.intrinsic_dim])

    def fitness(self, candidates: np.ndarray, batch: EncodedBatch | None = None) -> np.ndarray:
        """Mean cross-entropy of each candidate z ``[P, d]`` on ``batch`` (default: the shots),
        all P prompts in one batched forward."""
        batch = self.train_batch if batch is None else batch
        return losses(self.backbone.score(project(self.p0, self.A, candidates), batch), batch.labels).numpy()
