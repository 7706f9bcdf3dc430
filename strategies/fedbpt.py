"""FedBPT: federated black-box prompt tuning with a server-level CMA-ES step.

Paper: ../shared/papers/003_d1c16544ac440cf9.txt, §4 (Algorithms 1 and 2, eqs. (4)-(13));
config and model (global arrays, the packed upload): :mod:`fedtext.methods.fedbpt`.
The prompt is ``p0 + A z`` with the same fixed random projection as ``bbt-fed``
(:func:`fedtext.backbone.prompts.bbt_space`, rebuilt from the seed by both sides, never sent),
so that the two methods differ only in what the paper changes: the server step and
the clients' input perturbation.

Server (Algorithm 2): keeps the global CMA-ES state (z, sigma, C, p_sigma, p_c) in
``self.server`` (:class:`PaperStep`). Each round it orders the clients by their uploaded local loss, sets
``z_{t+1}`` to the mean of the best mu = floor(|S_t|/2) (eq. (5)), computes the
corrected step size sigma' of eq. (12) (= eq. (4)/(13) for equal lambda_k and even
|S_t|) from the best half's local step sizes, and updates p_sigma, p_c, sigma and C
with sigma' in place of the intractable sigma_t (eqs. (6)-(7)); see
:mod:`fedtext.methods.fedbpt.cmaes` for the update written out. The new sigma uses CMA-ES's damping
``c_s/d_s`` by default; ``fedbpt.sigma-update=printed`` uses Alg. 2 line 5 as printed,
``sigma' exp(|p_sigma|/E|N| - 1)``.

``fedbpt.server-step=reference`` replaces Algorithm 2 by the authors' public server
(NVIDIA/NVFlare ``research/fed-bpt/src/global_es.py``; :class:`fedtext.methods.fedbpt.cmaes.ReferenceServerES`):
a pycma CMA-ES with population = parents = m clients recombines *all* uploads with
pycma's rank weights, sigma' = sqrt(sum_all sum_j sigma^2 / (m mu_l)) (no factor 2, no
best half), and clients are sent (sigma_after / sigma') times the previous client step
size. The departures are tabulated in :mod:`fedtext.methods.fedbpt`.

Client must (Algorithm 1, ClientUpdate): start a CMA-ES at N(z_t, sigma_t^2 C_t), run
``fedbpt.local-steps`` = I iterations of population ``fedbpt.popsize`` = lambda_k with
local rank-mu mu_l = lambda_k/2 (equal weights; pycma's default weights with
``server-step=reference``), drawing fresh token masks (keep rate
``fedbpt.keep-rate`` = r_p) and random replacement tokens every iteration for the
fitness, and upload ``[z^k_{t+1} | sigma^k_{t,1..I} | F^k(z^k_{t+1})]``, F being the
loss on its unperturbed shots (``fedbpt.fitness=ratio``: loss / perturbed loss).

Bytes per client-round: up ``4 (d + I + 1) + 128`` (d=100, I=4: 548 B); down, mode
``fedbpt.download=full`` (Algorithm 1: z_t, sigma_t, C_t): ``4 (d + 1 + d^2) + 3*128``
(40,788 B), mode ``compact`` (z_t, sigma_t; clients start from an isotropic C):
``4 (d + 1) + 2*128`` (660 B).
"""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np
from flwr.common import Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedtext.common.config import RunConfig
from fedtext.methods.fedbpt.cmaes import (
    CMAState,
    ReferenceServerES,
    corrected_sigma,
    reference_sigma_prime,
    server_step,
)
from fedtext.methods.fedbpt.config import FedBPTConfig
from fedtext.methods.fedbpt.model import FedBPTModel, FedBPTUpload
from fedtext.server.strategy import FedTextStrategy
from fedtext.server.validation import Upload

log = logging.getLogger(__name__)


class ServerStep(Protocol):
    """The global search distribution and its update from one round's uploads."""

    def distribution(self) -> tuple[np.ndarray, float, np.ndarray]:
        """(z, sigma, C) that clients start their local CMA-ES from."""

    def step(self, clients: list[FedBPTUpload], population: int = 0) -> dict[str, Scalar]:
        """Update from the round's valid uploads; the round's metrics. ``population``: the
        clients a round asks for (``clients-per-round``; 0: as many as uploaded)."""

    def arrays(self) -> dict[str, np.ndarray]:
        """The state as plain arrays (checkpointing)."""


class PaperStep:
    """Algorithm 2: best half, sigma' of eq. (12), CMA-ES update written out
    (:mod:`fedtext.methods.fedbpt.cmaes`)."""

    def __init__(self, mcfg: FedBPTConfig, seed: int) -> None:
        self.mcfg = mcfg
        self.cma = CMAState.initial(mcfg.intrinsic_dim, mcfg.sigma0)

    def distribution(self) -> tuple[np.ndarray, float, np.ndarray]:
        return self.cma.mean, self.cma.sigma, self.cma.C

    def step(self, clients: list[FedBPTUpload], population: int = 0) -> dict[str, Scalar]:
        """Algorithm 2 on the valid uploads alone (their best half, eq. (12) over it):
        ``population`` does not enter."""
        losses = [c.loss for c in clients]
        sigma_prime = corrected_sigma([c.sigmas for c in clients], losses, [self.mcfg.popsize] * len(clients))
        z = np.stack([c.z for c in clients])
        self.cma = server_step(self.cma, z, losses, sigma_prime, self.mcfg.sigma_update)
        return {"sigma_prime": sigma_prime, "sigma": self.cma.sigma}

    def arrays(self) -> dict[str, np.ndarray]:
        return self.cma.arrays()


class ReferenceStep:
    """The authors' server (``global_es.py``): pycma over the round's uploads, ratio-scaled client sigma.

    pycma's population is built, at the first step, for the clients a round asks for
    (``population``: ``clients-per-round``, or with 0 the clients asked that round), as the
    reference fixes it to its client count m, whatever number of that round's uploads were
    valid; a round with another number k of valid uploads recombines those k with pycma's
    weights for k, and sigma' divides by the same k
    (:class:`fedtext.methods.fedbpt.cmaes.ReferenceServerES`).
    """

    def __init__(self, mcfg: FedBPTConfig, seed: int) -> None:
        self.mcfg, self.seed = mcfg, seed
        self.es: ReferenceServerES | None = None

    def distribution(self) -> tuple[np.ndarray, float, np.ndarray]:
        if self.es is None:
            s = CMAState.initial(self.mcfg.intrinsic_dim, self.mcfg.sigma0)
            return s.mean, s.sigma, s.C
        return self.es.mean, self.es.sigma_local, self.es.C

    def step(self, clients: list[FedBPTUpload], population: int = 0) -> dict[str, Scalar]:
        if self.es is None:
            m = max(2, population or len(clients))
            self.es = ReferenceServerES(self.mcfg.intrinsic_dim, self.mcfg.sigma0, m, self.seed,
                                        self.mcfg.reference_clamp)
        sigma_prime = reference_sigma_prime([c.sigmas for c in clients], self.mcfg.popsize)
        sigma_after = self.es.tell(np.stack([c.z for c in clients]), [c.loss for c in clients], sigma_prime)
        if sigma_after is None:  # fewer than 2 uploads (FedBPT.aggregate does not call with those)
            return {"sigma_prime": sigma_prime, "sigma": self.es.sigma_local, "server_step_skipped": 1}
        return {"sigma_prime": sigma_prime, "sigma": self.es.sigma_local, "sigma_after": sigma_after}

    def arrays(self) -> dict[str, np.ndarray]:
        if self.es is None:
            return CMAState.initial(self.mcfg.intrinsic_dim, self.mcfg.sigma0).arrays()
        return self.es.arrays()


SERVER_STEPS: dict[str, type] = {"paper": PaperStep, "reference": ReferenceStep}


class FedBPT(FedTextStrategy):
    """Server-level CMA-ES over the clients' local CMA-ES means (FedBPT Alg. 2, or the authors' code)."""

    model: FedBPTModel
    checkpoint_attrs = ("server",)  # the global CMA-ES (PaperStep's CMAState, or ReferenceStep's pycma object)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # pycma seed of the reference server: > 0, from the run seed, apart from the clients' (cf. client_seed)
        seed = int(np.random.SeedSequence([self.cfg.seed, 0xFEDB]).generate_state(1)[0] % (2**31 - 2)) + 1
        self.server = SERVER_STEPS[self.mcfg.server_step](self.mcfg, seed)
        self.asked = 0  # clients sent a fit instruction this round (0: none sampled here, e.g. a test's round)

    @classmethod
    def checkpoint_state_bytes(cls, cfg: RunConfig, model: FedBPTModel) -> int:
        """The server CMA-ES in ``d`` dimensions: a few ``d x d`` float64 matrices (pycma's
        object pickles to 2.2-4.1 times one at d = 400..50, PaperStep's CMAState to 1.0-1.1),
        so 4 of them."""
        return 4 * 8 * model.d**2

    def sample_clients(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        """The round's clients, counted: with ``clients-per-round=0`` they are the
        population the reference server is built for (:class:`ReferenceStep`)."""
        sampled = super().sample_clients(server_round, client_manager)
        self.asked = len(sampled)
        return sampled

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The global CMA-ES state (z, sigma, C, ...)."""
        return self.server.arrays()

    def global_state(self) -> list[np.ndarray]:
        """What Algorithm 1 sends of the current global state (:meth:`FedBPTModel.download_arrays`)."""
        return self.model.download_arrays(*self.server.distribution())

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """One server step (``fedbpt.server-step``) on the round's decoded valid uploads.

        Both steps count the same clients in the recombination and in sigma': the round's
        valid uploads (dropped ones are in neither). The reference server's pycma object is
        built for the configured clients per round, not round 1's valid count
        (:class:`ReferenceStep`). Fewer than 2 valid uploads are no population (eq. (4) keeps
        the best floor(|S_t|/2)): the step is skipped, the state kept, the round recorded
        with ``server_step_skipped`` and a warning.
        """
        if len(uploads) < 2:
            log.warning("fedbpt round %d: server step skipped, %d valid upload(s); a CMA-ES step needs >= 2",
                        server_round, len(uploads))
            return self.global_state(), {"server_step_skipped": 1.0,
                                         "z_norm": float(np.linalg.norm(self.server.distribution()[0]))}
        metrics = self.server.step([self.model.unpack_upload(u.arrays) for u in uploads],
                                   self.cfg.clients_per_round or self.asked)
        metrics["z_norm"] = float(np.linalg.norm(self.server.distribution()[0]))  # |z_{t+1}|, for the records
        return self.global_state(), metrics
