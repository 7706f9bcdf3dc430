"""BBT-Fed's model: the subspace z, sigma and C, shared by its strategy and client."""

from __future__ import annotations

import numpy as np

from fedtext.common.comm import ArraySpec
from fedtext.learning.model import SubspaceModel


class BBTFedModel(SubspaceModel):
    """z (and in ``z-sigma-C`` mode sigma and C); z0 = 0, so round 0's prompt is p0."""

    def global_specs(self) -> list[ArraySpec]:
        d, bound = self.d, self.mcfg.bound or None
        specs = [ArraySpec("z", (d,), "float32", low=-bound if bound else None, high=bound)]
        if self.mcfg.average == "z-sigma-C":
            specs += [ArraySpec("sigma", (1,), "float32", low=1e-12), ArraySpec("C", (d, d), "float32")]
        return specs

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        """``z-sigma-C``: C must be a covariance, symmetric positive definite (clients take
        its eigen-decomposition; one non-PD C in the average made every client fail from
        then on)."""
        if "C" not in upload:
            return None
        C = upload["C"].astype(np.float64)
        if not np.allclose(C, C.T, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(C).max()))):
            return "C is not symmetric"
        try:
            np.linalg.cholesky(C)
        except np.linalg.LinAlgError:
            return "C is not positive definite"
        return None

    def initial_arrays(self) -> list[np.ndarray]:
        z = np.zeros(self.d, dtype=np.float32)
        if self.mcfg.average == "z":
            return [z]
        return [z, np.array([self.mcfg.sigma0], np.float32), np.eye(self.d, dtype=np.float32)]
