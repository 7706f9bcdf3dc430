"""FedBPT client (Algorithm 1, ClientUpdate): local CMA-ES on perturbed inputs."""

from __future__ import annotations

import numpy as np
from flwr.common import NDArrays, Scalar

from fedtext.backbone import losses
from fedtext.blackbox import WhitenedCMA
from fedtext.client import FedTextClient, client_seed
from fedtext.prompts import bbt_space, project


class FedBPTClient(FedTextClient):
    """I local CMA-ES iterations from N(z_t, sigma_t^2 C_t); forward passes only.

    pycma starts from N(z_t, sigma_t^2 C_t) through :class:`fedtext.blackbox.WhitenedCMA`
    (whitened coordinates), so the step sizes it reports are the sigma^k_{t,j} of eq. (9).
    Local rank-mu: mu_l = lambda_k/2 equal weights (``CMA_recombination_weights``).
    Every iteration draws new token masks and random tokens (Alg. 1 lines 12-16;
    ``keep-rate`` = r_p, 1 turns it off); all lambda_k candidates of an iteration see
    the same perturbed batch, scored in one batched forward.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.p0, self.A = bbt_space(self.backbone, cfg.prompt_length, cfg.intrinsic_dim, cfg.seed)

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        cfg = self.cfg
        seed = client_seed(cfg, self.partition_id, int(config.get("server_round", 0)))
        es = WhitenedCMA(
            mean=arrays[0],
            sigma=float(arrays[1][0]),
            cov=np.asarray(arrays[2], dtype=np.float64) if len(arrays) > 2 else None,  # compact: C = I
            popsize=cfg.popsize,
            seed=seed,
            equal_weights=True,  # local rank-mu, mu_l = lambda_k / 2
        )
        rng = np.random.default_rng(seed)
        labels = self.train_batch.labels
        sigmas = []
        for _ in range(cfg.local_steps):
            sigmas.append(es.sigma)  # sigma^k_{t,j}: the step size this iteration samples with
            batch = self.backbone.perturb(self.train_batch, cfg.keep_rate, rng)
            candidates = es.ask()  # [lambda, d]
            es.tell(losses(self.backbone.score(project(self.p0, self.A, candidates), batch), labels))
        z = es.mean
        final = float(losses(self.backbone.score(self.prompt_of([z])[None], self.train_batch), labels)[0])
        return [np.concatenate([z, sigmas, [final]]).astype(np.float32)], len(self.train_batch), final

    def prompt_of(self, arrays: NDArrays) -> np.ndarray:
        return project(self.p0, self.A, np.asarray(arrays[0], dtype=np.float32)[: self.cfg.intrinsic_dim])
