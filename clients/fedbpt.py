"""FedBPT client (Algorithm 1, ClientUpdate): local CMA-ES on perturbed inputs."""

from __future__ import annotations

import numpy as np
from flwr.common import NDArrays, Scalar

from fedtext.learning.blackbox import WhitenedCMA
from fedtext.client.numpy_client import SubspaceClient, client_seed
from fedtext.methods.fedbpt.perturb import perturb


class FedBPTClient(SubspaceClient):
    """I local CMA-ES iterations from N(z_t, sigma_t^2 C_t); forward passes only.

    pycma starts from N(z_t, sigma_t^2 C_t) through :class:`fedtext.learning.blackbox.WhitenedCMA`
    (whitened coordinates), so the step sizes it reports are the sigma^k_{t,j} of eq. (9).
    Local rank-mu: mu_l = lambda_k/2 equal weights (``CMA_recombination_weights``).
    Every iteration draws new token masks and random tokens (Alg. 1 lines 12-16;
    ``fedbpt.keep-rate`` = r_p, 1 turns it off); all lambda_k candidates of an iteration
    see the same perturbed batch, scored in one batched forward.

    Iterations: Alg. 1 loops ``j = 1..I-1`` after sampling with sigma_{t,1}, i.e. I
    search distributions; the paper's eq. (9)-(13) sum sigma^k_{t,j} over j = 1..I. We
    run I = ``fedbpt.local-steps`` ask/tell iterations and report the I step sizes each
    sampled with (sigma_{t,1} = the downloaded sigma_t, then the I-1 that CMA-ES adapted),
    which is that same set of I distributions; the uploaded mean is the one after the
    I-th update.

    ``fedbpt.fitness=ratio`` (the authors' code): a candidate's fitness is its loss on
    the shots over its loss on the same iteration's perturbed shots, two batched
    forwards (2 lambda_k |shots| queries per iteration); the uploaded F is that ratio
    for the final mean on a fresh perturbation. ``fedbpt.server-step=reference`` runs
    pycma's default local recombination (mu_l = floor(lambda/2) log-decreasing
    weights, active CMA), as the code does.
    """

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        seed = client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0)))
        es = WhitenedCMA(
            mean=arrays[0],
            sigma=float(arrays[1][0]),
            cov=np.asarray(arrays[2], dtype=np.float64) if len(arrays) > 2 else None,  # compact: C = I
            popsize=mc.popsize,
            seed=seed,
            equal_weights=mc.server_step == "paper",  # paper: local rank-mu, mu_l = lambda_k / 2, equal weights
        )
        rng = np.random.default_rng(seed)
        sigmas = []
        for _ in self.progress(range(mc.local_steps), "CMA-ES", unit="iterations"):
            sigmas.append(es.sigma)  # sigma^k_{t,j}: the step size this iteration samples with
            es.tell(self.objective(es.ask(), rng))  # lambda candidates, batched forwards
        z = es.mean
        loss = float(self.fitness(z[None])[0])  # the loss on the unperturbed shots
        upload = loss if mc.fitness == "perturbed" else float(self.objective(z[None], rng)[0])  # F^k(z^k_{t+1})
        return [self.model.pack_upload(z, sigmas, upload)], len(self.train_batch), loss

    def objective(self, candidates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """What the local CMA-ES minimises, on one fresh perturbation of the shots (Alg. 1
        lines 12-16): the perturbed loss (``fedbpt.fitness=perturbed``) or loss / perturbed
        loss (``ratio``)."""
        perturbed = self.fitness(candidates, perturb(self.backbone, self.train_batch, self.mcfg.keep_rate, rng))
        if self.mcfg.fitness == "perturbed":
            return perturbed
        return self.fitness(candidates) / np.maximum(perturbed, 1e-12)

