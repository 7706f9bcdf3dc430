"""BBT-Fed's config and model: z in ``p0 + A z``, FedAvg of z.

FedDLS App. B-C ("BBT (Fed)"); BBT is Sun et al. (2022). Global arrays = upload =
``z`` float32 ``[d]``: ``d * 4 + 128`` B each way (d=100: 528 B). With
``bbt-fed.average=z-sigma-C`` (FedBPT Fig. 2's contrast) also ``sigma`` ``[1]`` and
``C`` ``[d, d]``: ``4 (d + 1 + d^2) + 3 * 128`` B each way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedtext.comm import ArraySpec
from fedtext.config import check_choice, check_range
from fedtext.methods.subspace import SubspaceConfig
from fedtext.model import SubspaceModel

AVERAGES = ("z", "z-sigma-C")


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


@dataclass(frozen=True)
class BBTFedConfig(SubspaceConfig):
    """``bbt-fed.*``: BBT's CMA-ES, a box bound on z, and what the server averages."""

    name: ClassVar[str] = "bbt-fed"
    model_class: ClassVar[type] = BBTFedModel
    strategy: ClassVar[str] = "strategies.bbt_fed:BBTFed"
    client: ClassVar[str] = "clients.bbt_fed:BBTFedClient"

    bound: float = 0.0  # |z_i| <= bound; 0 = none
    average: str = "z"  # z | z-sigma-C

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("bound"), self.bound, 0)
        check_choice(self.key("average"), self.average, AVERAGES)
