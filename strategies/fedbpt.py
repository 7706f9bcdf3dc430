"""FedBPT: federated black-box prompt tuning with a server-level CMA-ES step.

Paper: ../shared/papers/003_d1c16544ac440cf9.txt, §4 (Algorithms 1 and 2, eqs. (4)-(13)).
The prompt is ``p0 + A z`` with the same fixed random projection as ``bbt-fed``
(:func:`fedtext.prompts.bbt_space`, rebuilt from the seed by both sides, never sent),
so that the two methods differ only in what the paper changes: the server step and
the clients' input perturbation.

Server (Algorithm 2): keeps the global CMA-ES state (z, sigma, C, p_sigma, p_c) in
``self.cma``. Each round it orders the clients by their uploaded local loss, sets
``z_{t+1}`` to the mean of the best mu = floor(|S_t|/2) (eq. (5)), computes the
corrected step size sigma' of eq. (12) (= eq. (4)/(13) for equal lambda_k and even
|S_t|) from the best half's local step sizes, and updates p_sigma, p_c, sigma and C
with sigma' in place of the intractable sigma_t (eqs. (6)-(7)); see
:mod:`fedtext.cmaes` for the update written out.

Client must (Algorithm 1, ClientUpdate): start a CMA-ES at N(z_t, sigma_t^2 C_t), run
``local-steps`` = I iterations of population ``popsize`` = lambda_k with local rank-mu
mu_l = lambda_k/2 (equal weights), drawing fresh token masks (keep rate ``keep-rate`` =
r_p) and random replacement tokens every iteration for the fitness, and upload one
float32 array ``[z^k_{t+1} (d) | sigma^k_{t,1..I} (I) | F^k(z^k_{t+1}) (1)]``, F being the
loss on its unperturbed shots.

Bytes per client-round: up ``4 (d + I + 1) + 128`` (d=100, I=4: 548 B); down, mode
``fedbpt-download=full`` (Algorithm 1: z_t, sigma_t, C_t): ``4 (d + 1 + d^2) + 3*128``
(40,788 B), mode ``compact`` (z_t, sigma_t; clients start from an isotropic C):
``4 (d + 1) + 2*128`` (660 B).
"""

from __future__ import annotations

import numpy as np
from flwr.common import FitRes, Parameters, Scalar
from flwr.server.client_proxy import ClientProxy

from fedtext import comm
from fedtext.cmaes import CMAState, corrected_sigma, server_step
from fedtext.strategy import SubspaceStrategy


class FedBPT(SubspaceStrategy):
    """Server-level CMA-ES over the clients' local CMA-ES means (FedBPT Alg. 2)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cma = CMAState.initial(self.cfg.intrinsic_dim, self.cfg.sigma0)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The global CMA-ES state (z, sigma, C, p_sigma, p_c, generation)."""
        return self.cma.arrays()

    def global_state(self) -> list[np.ndarray]:
        """What Algorithm 1 sends: (z_t, sigma_t, C_t), or (z_t, sigma_t) in compact mode."""
        arrays = [self.cma.mean.astype(np.float32), np.array([self.cma.sigma], np.float32)]
        if self.cfg.fedbpt_download == "full":
            arrays.append(self.cma.C.astype(np.float32))
        return arrays

    def initial_arrays(self) -> list[np.ndarray]:
        return self.global_state()

    def upload_specs(self) -> list[comm.ArraySpec]:
        d, i = self.cfg.intrinsic_dim, self.cfg.local_steps
        return [comm.ArraySpec("z|sigmas|loss", (d + i + 1,), "float32")]

    def check_upload(self, arrays: list[np.ndarray]) -> str | None:
        d = self.cfg.intrinsic_dim
        sigmas = arrays[0][d:-1]
        if not (sigmas > 0).all():
            return f"local step sizes must be > 0, got min {sigmas.min():.3g}"
        return None


    def aggregate(
        self, server_round: int, results: list[tuple[ClientProxy, FitRes]]
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """sigma' (eq. (12)) from the best half, then one CMA-ES step (Alg. 2) with it."""
        d = self.cfg.intrinsic_dim
        uploads = [comm.decode(res.parameters)[0].astype(np.float64) for _, res in results]
        z = np.stack([u[:d] for u in uploads])
        sigmas = [u[d:-1] for u in uploads]
        losses = [float(u[-1]) for u in uploads]
        sigma_prime = corrected_sigma(sigmas, losses, [self.cfg.popsize] * len(uploads))
        self.cma = server_step(self.cma, z, losses, sigma_prime)
        return comm.encode(self.global_state()), {"sigma_prime": sigma_prime, "sigma": self.cma.sigma}
