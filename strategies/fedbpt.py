"""FedBPT: federated black-box prompt tuning with a server-level CMA-ES step.

Paper: ../shared/papers/003_d1c16544ac440cf9.txt, §4 (Algorithms 1 and 2, eqs. (4)-(13));
config and model (global arrays, the packed upload): :mod:`fedtext.methods.fedbpt`.
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
:mod:`fedtext.cmaes` for the update written out. The new sigma uses CMA-ES's damping
``c_s/d_s`` by default; ``fedbpt.sigma-update=printed`` uses Alg. 2 line 5 as printed,
``sigma' exp(|p_sigma|/E|N| - 1)``.

Client must (Algorithm 1, ClientUpdate): start a CMA-ES at N(z_t, sigma_t^2 C_t), run
``fedbpt.local-steps`` = I iterations of population ``fedbpt.popsize`` = lambda_k with
local rank-mu mu_l = lambda_k/2 (equal weights), drawing fresh token masks (keep rate
``fedbpt.keep-rate`` = r_p) and random replacement tokens every iteration for the
fitness, and upload ``[z^k_{t+1} | sigma^k_{t,1..I} | F^k(z^k_{t+1})]``, F being the
loss on its unperturbed shots.

Bytes per client-round: up ``4 (d + I + 1) + 128`` (d=100, I=4: 548 B); down, mode
``fedbpt.download=full`` (Algorithm 1: z_t, sigma_t, C_t): ``4 (d + 1 + d^2) + 3*128``
(40,788 B), mode ``compact`` (z_t, sigma_t; clients start from an isotropic C):
``4 (d + 1) + 2*128`` (660 B).
"""

from __future__ import annotations

import numpy as np
from flwr.common import Scalar

from fedtext.cmaes import CMAState, corrected_sigma, server_step
from fedtext.methods.fedbpt import FedBPTModel
from fedtext.strategy import FedTextStrategy, Upload


class FedBPT(FedTextStrategy):
    """Server-level CMA-ES over the clients' local CMA-ES means (FedBPT Alg. 2)."""

    model: FedBPTModel

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cma = CMAState.initial(self.mcfg.intrinsic_dim, self.mcfg.sigma0)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The global CMA-ES state (z, sigma, C, p_sigma, p_c, generation)."""
        return self.cma.arrays()

    def global_state(self) -> list[np.ndarray]:
        """What Algorithm 1 sends of the current global state (:meth:`FedBPTModel.download_arrays`)."""
        return self.model.download_arrays(self.cma)

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """sigma' (eq. (12)) from the best half, then one CMA-ES step (Alg. 2) with it."""
        clients = [self.model.unpack_upload(u.arrays) for u in uploads]
        losses = [c.loss for c in clients]
        sigma_prime = corrected_sigma([c.sigmas for c in clients], losses, [self.mcfg.popsize] * len(clients))
        z = np.stack([c.z for c in clients])
        self.cma = server_step(self.cma, z, losses, sigma_prime, self.mcfg.sigma_update)
        return self.global_state(), {"sigma_prime": sigma_prime, "sigma": self.cma.sigma}
