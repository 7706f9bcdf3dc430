"""FedBPT's model: the global arrays (z, sigma, C) and the packed upload, shared by its
strategy and client.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedtext.common.comm import ArraySpec
from fedtext.methods.fedbpt.cmaes import CMAState
from fedtext.learning.model import SubspaceModel, over_bound

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
        return (over_bound("z", u.z, reference["z"], bound)
                or over_bound("sigma", u.sigmas, reference["sigma"], bound))
