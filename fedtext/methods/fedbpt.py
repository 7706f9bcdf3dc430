"""FedBPT's config and model (../shared/papers/003_d1c16544ac440cf9.txt, §4).

Global arrays (what Algorithm 1 sends): ``z`` ``[d]``, ``sigma`` ``[1]`` and, with
``fedbpt.download=full``, ``C`` ``[d, d]`` (float32): ``4 (d + 1 + d^2) + 3 * 128`` B
(d=100: 40,788 B); ``compact`` drops C (clients start from C = I): ``4 (d + 1) + 256``.

Upload: one float32 array ``[z^k_{t+1} (d) | sigma^k_{t,1..I} (I) | F^k(z^k_{t+1}) (1)]``,
``4 (d + I + 1) + 128`` B (d=100, I=4: 548 B). :meth:`FedBPTModel.pack_upload` and
:meth:`FedBPTModel.unpack_upload` are its only writer and reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from fedtext.cmaes import SIGMA_UPDATES, CMAState
from fedtext.comm import ArraySpec
from fedtext.config import check_choice, check_range
from fedtext.methods.subspace import SubspaceConfig
from fedtext.model import SubspaceModel

DOWNLOADS = ("full", "compact")
UPLOAD = "z|sigmas|loss"


class FedBPTUpload(NamedTuple):
    """One client's decoded upload."""

    z: np.ndarray  # [d] float64
    sigmas: np.ndarray  # [I] sigma^k_{t,1..I}
    loss: float  # F^k(z^k_{t+1}) on its unperturbed shots


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

    def download_arrays(self, state: CMAState) -> list[np.ndarray]:
        """What Algorithm 1 sends of a global CMA-ES state: (z_t, sigma_t, C_t), or
        (z_t, sigma_t) with ``fedbpt.download=compact`` (float32, in :meth:`global_specs` order)."""
        arrays = [state.mean.astype(np.float32), np.array([state.sigma], np.float32)]
        if self.mcfg.download == "full":
            arrays.append(state.C.astype(np.float32))
        return arrays

    def initial_arrays(self) -> list[np.ndarray]:
        """The download of the initial state: z_0 = 0, sigma_0, C_0 = I."""
        return self.download_arrays(CMAState.initial(self.d, self.mcfg.sigma0))

    def pack_upload(self, z: np.ndarray, sigmas: list[float], loss: float) -> np.ndarray:
        """The client's one upload array."""
        return np.concatenate([z, sigmas, [loss]]).astype(np.float32)

    def unpack_upload(self, upload: dict[str, np.ndarray]) -> FedBPTUpload:
        """Inverse of :meth:`pack_upload` (float64, for the server's CMA-ES step)."""
        u = upload[UPLOAD].astype(np.float64)
        return FedBPTUpload(u[: self.d], u[self.d : -1], float(u[-1]))

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        sigmas = self.unpack_upload(upload).sigmas
        if not (sigmas > 0).all():
            return f"local step sizes must be > 0, got min {sigmas.min():.3g}"
        return None


@dataclass(frozen=True)
class FedBPTConfig(SubspaceConfig):
    """``fedbpt.*``: local CMA-ES, input perturbation, download and sigma update."""

    name: ClassVar[str] = "fedbpt"
    model_class: ClassVar[type] = FedBPTModel

    keep_rate: float = 0.9  # r_p
    download: str = "full"  # full | compact
    sigma_update: str = "damped"  # damped (c_s/d_s, CMA-ES tutorial) | printed (Alg. 2 line 5 as printed)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("keep_rate"), self.keep_rate, 0, 1, low_open=True)
        check_choice(self.key("download"), self.download, DOWNLOADS)
        check_choice(self.key("sigma_update"), self.sigma_update, SIGMA_UPDATES)
