"""FedBPT's config and model (../shared/papers/003_d1c16544ac440cf9.txt, §4).

Global arrays (what Algorithm 1 sends): ``z`` ``[d]``, ``sigma`` ``[1]`` and, with
``fedbpt.download=full``, ``C`` ``[d, d]`` (float32): ``4 (d + 1 + d^2) + 3 * 128`` B
(d=100: 40,788 B); ``compact`` drops C (clients start from C = I): ``4 (d + 1) + 256``.

Upload: one float32 array ``[z^k_{t+1} (d) | sigma^k_{t,1..I} (I) | F^k(z^k_{t+1}) (1)]``,
``4 (d + I + 1) + 128`` B (d=100, I=4: 548 B). :meth:`FedBPTModel.pack_upload` and
:meth:`FedBPTModel.unpack_upload` are its only writer and reader. F is the fitness of
``fedbpt.fitness``: the loss on the unperturbed shots (``perturbed``, the paper), or
loss(shots) / loss(perturbed shots) (``ratio``, the authors' code).

Two server steps (``fedbpt.server-step``), one set of arrays: ``paper`` (Algorithm 2,
:func:`fedtext.cmaes.server_step`) and ``reference``, the authors' public code
(:class:`fedtext.cmaes.ReferenceServerES`). Where the code departs from the paper
(NVIDIA/NVFlare ``research/fed-bpt``, ``src/global_es.py`` and ``src/fedbpt_train.py``,
cma==3.4.0):

===============================  ==========================================  =============================================
                                 paper (§4, Alg. 1-2)                        reference code
===============================  ==========================================  =============================================
server mean                      mean of the best floor(|S|/2), eq. (5)      all m clients, pycma weights of ``CMA_mu=m``
sigma'                           2 sqrt(sum_best sum_j s^2 / (|S| lambda))   sqrt(sum_all sum_j s^2 / (m mu_l))
sigma sent to clients            the server's new sigma                      (sigma_after / sigma') * previous sent sigma
local recombination              mu_l = lambda/2, equal weights              pycma default (log weights, active CMA)
fitness (perturbation on)        loss on perturbed inputs                    loss(shots) / loss(perturbed shots)
perturbation                     new masks every local iteration, r_p=0.9    one perturbed copy per round, 50% replaced
local seed                       --                                          the same seed every round
===============================  ==========================================  =============================================

``server-step=reference`` takes the first four rows (the server's and the local
recombination, so that mu_l in sigma' is what the clients ran); ``fitness=ratio`` the
fifth; the last two stay ours (fresh masks every iteration with ``keep-rate``, a new
seed per client and round), set ``fedbpt.keep-rate=0.5`` for the reference's rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from fedtext.cmaes import REFERENCE_CLAMPS, SIGMA_UPDATES, CMAState
from fedtext.comm import ArraySpec
from fedtext.config import ConfigError, check_choice, check_range
from fedtext.methods.subspace import SubspaceConfig
from fedtext.model import SubspaceModel, _over_bound

DOWNLOADS = ("full", "compact")
SERVER_STEPS = ("paper", "reference")
FITNESSES = ("perturbed", "ratio")
UPLOAD = "z|sigmas|loss"


class FedBPTUpload(NamedTuple):
    """One client's decoded upload."""

    z: np.ndarray  # [d] float64
    sigmas: np.ndarray  # [I] sigma^k_{t,1..I}
    loss: float  # F^k(z^k_{t+1}): loss on the unperturbed shots, or the ratio (fitness=ratio)


class FedBPTModel(SubspaceModel):
    """Global CMA-ES state (z, sigma[, C]) down, ``[z | sigmas | loss]`` up."""

    def global_specs(self) -> list[ArraySpec]:
        d = self.d
        specs = [ArraySpec("z", (d,), "float32"), ArraySpec("sigma", (1,), "float32", low=1e-12)]
        if self.mcfg.download == "full":
            specs.append(ArraySpec("C", (d, d), "float32"))
        return specs

    def upload_specs(self) -> list[ArraySpec]:
        return [ArraySpec(UPLOAD, (self.d + self.mcfg.local_steps + 1,), "float32")]

    def download_arrays(self, mean: np.ndarray, sigma: float, C: np.ndarray) -> list[np.ndarray]:
        """What Algorithm 1 sends of a global search distribution: (z_t, sigma_t, C_t), or
        (z_t, sigma_t) with ``fedbpt.download=compact`` (float32, in :meth:`global_specs` order)."""
        arrays = [mean.astype(np.float32), np.array([sigma], np.float32)]
        if self.mcfg.download == "full":
            arrays.append(C.astype(np.float32))
        return arrays

    def initial_arrays(self) -> list[np.ndarray]:
        """The download of the initial state: z_0 = 0, sigma_0, C_0 = I."""
        s = CMAState.initial(self.d, self.mcfg.sigma0)
        return self.download_arrays(s.mean, s.sigma, s.C)

    def pack_upload(self, z: np.ndarray, sigmas: list[float], loss: float) -> np.ndarray:
        """The client's one upload array."""
        return np.concatenate([z, sigmas, [loss]]).astype(np.float32)

    def unpack_upload(self, upload: dict[str, np.ndarray]) -> FedBPTUpload:
        """Inverse of :meth:`pack_upload` (float64, for the server's CMA-ES step)."""
        u = upload[UPLOAD].astype(np.float64)
        return FedBPTUpload(u[: self.d], u[self.d : -1], float(u[-1]))

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        u = self.unpack_upload(upload)
        if not (u.sigmas > 0).all():
            return f"local step sizes must be > 0, got min {u.sigmas.min():.3g}"
        if u.loss < 0:  # a cross-entropy, or a ratio of two: never negative; a negative one would always rank best
            return f"fitness must be >= 0, got {u.loss:.3g}"
        return None

    def check_scale(self, upload: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                    bound: float) -> str | None:
        """``upload-bound`` on the packed upload: z^k against the global z, each
        sigma^k_{t,i} against the global sigma_t (sigma's range: (0, bound * max(1, sigma_t)];
        a local CMA-ES of I steps changes sigma by a small factor, a 1e30 sigma enters
        eq. (4)'s sigma' and every later round)."""
        if not bound:
            return None
        u = self.unpack_upload(upload)
        return (_over_bound("z", u.z, reference["z"], bound)
                or _over_bound("sigma", u.sigmas, reference["sigma"], bound))


@dataclass(frozen=True)
class FedBPTConfig(SubspaceConfig):
    """``fedbpt.*``: local CMA-ES, input perturbation, download, server step and fitness."""

    name: ClassVar[str] = "fedbpt"
    model_class: ClassVar[type] = FedBPTModel
    strategy: ClassVar[str] = "strategies.fedbpt:FedBPT"
    client: ClassVar[str] = "clients.fedbpt:FedBPTClient"

    keep_rate: float = 0.9  # r_p
    download: str = "full"  # full | compact
    sigma_update: str = "damped"  # damped (c_s/d_s, CMA-ES tutorial) | printed (Alg. 2 line 5 as printed)
    server_step: str = "paper"  # paper (Alg. 2) | reference (the authors' global_es.py)
    fitness: str = "perturbed"  # perturbed (loss on perturbed shots) | ratio (loss / perturbed loss)
    reference_clamp: str = "as-run"  # as-run (no clamp) | as-logged (sigma_local in [0.5, previous])

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("keep_rate"), self.keep_rate, 0, 1, low_open=True)
        check_choice(self.key("download"), self.download, DOWNLOADS)
        check_choice(self.key("sigma_update"), self.sigma_update, SIGMA_UPDATES)
        check_choice(self.key("server_step"), self.server_step, SERVER_STEPS)
        check_choice(self.key("fitness"), self.fitness, FITNESSES)
        check_choice(self.key("reference_clamp"), self.reference_clamp, REFERENCE_CLAMPS)
        if self.fitness == "ratio" and self.keep_rate >= 1:
            raise ConfigError(f"{self.key('fitness')}='ratio' needs perturbed inputs: set {self.key('keep_rate')} < 1 "
                              "(with keep-rate=1 every ratio is 1)")
        if self.server_step == "reference" and self.sigma_update != "damped":
            raise ConfigError(f"{self.key('sigma_update')} applies to {self.key('server_step')}='paper' only "
                              "(the reference step uses pycma's own step-size update)")
        if self.server_step == "paper" and self.reference_clamp != "as-run":
            raise ConfigError(f"{self.key('reference_clamp')} applies to {self.key('server_step')}='reference' only")
