"""BBT (Fed) client: CMA-ES on z in a fixed random subspace, forward passes only."""

from __future__ import annotations

import cma
import numpy as np
from flwr.common import NDArrays, Scalar

from fedtext.backbone import losses
from fedtext.client import FedTextClient, client_seed
from fedtext.prompts import bbt_space, project


class BBTFedClient(FedTextClient):
    """BBT (Sun et al. 2022) from the downloaded z: ``local-steps`` CMA-ES iterations.

    Every population of ``popsize`` candidate prompts ``p0 + A z_i`` is scored in one
    batched forward over the client's shots; the fitness is the mean cross-entropy.
    The upload is the search mean after the last ``tell`` (the distribution's centre,
    which is what averaging across clients is meant to combine).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.p0, self.A = bbt_space(self.backbone, cfg.prompt_length, cfg.intrinsic_dim, cfg.seed)

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        cfg = self.cfg
        opts = {
            "popsize": cfg.popsize,
            "seed": client_seed(cfg, self.partition_id, int(config.get("server_round", 0))),
            "verbose": -9,
        }
        if cfg.bound:
            opts["bounds"] = [-cfg.bound, cfg.bound]
        es = cma.CMAEvolutionStrategy(np.asarray(arrays[0], dtype=np.float64), cfg.sigma0, opts)
        labels = self.train_batch.labels
        for _ in range(cfg.local_steps):
            candidates = np.asarray(es.ask())  # [popsize, d]
            fitness = losses(self.backbone.score(project(self.p0, self.A, candidates), self.train_batch), labels)
            es.tell(list(candidates), fitness.tolist())
        z = np.asarray(es.mean, dtype=np.float32)
        if cfg.bound:
            z = np.clip(z, -cfg.bound, cfg.bound)
        final = float(losses(self.backbone.score(self.prompt_of([z])[None], self.train_batch), labels)[0])
        return [z], len(self.train_batch), final

    def prompt_of(self, arrays: NDArrays) -> np.ndarray:
        return project(self.p0, self.A, arrays[0])
