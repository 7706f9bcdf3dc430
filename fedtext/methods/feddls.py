"""FedDLS's config and model (../shared/papers/000_332a35b1d96e4ed4.txt, §4, App. E).

Global array: p' float32 ``[T, D]`` (the server's; what travels down is a codec's
compressed update, see :mod:`fedtext.compression`). Upload: ``ids`` uint16 ``[T]``,
the chosen natural-token id or :data:`fedtext.compression.SENTINEL` per position,
``2 T + 128`` B (T=50: 228 B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedtext.comm import ArraySpec
from fedtext.compression import check_upload
from fedtext.config import ConfigError, MethodConfig, check_choice, check_range
from fedtext.model import PromptModel

COMPRESSIONS = ("lasso", "full", "pca", "quant")


class FedDLSModel(PromptModel):
    """p' is the global prompt; uploads are token ids checked against the natural vocabulary."""

    def upload_specs(self) -> list[ArraySpec]:
        return [ArraySpec("ids", (self.cfg.prompt_length,), "uint16")]

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        return check_upload(upload["ids"], self.backbone.natural_token_ids())


@dataclass(frozen=True)
class FedDLSConfig(MethodConfig):
    """``feddls.*``: local search (Alg. 3) and download compression (Alg. 2, App. E)."""

    name: ClassVar[str] = "feddls"
    model_class: ClassVar[type] = FedDLSModel
    strategy: ClassVar[str] = "strategies.feddls:FedDLS"
    client: ClassVar[str] = "clients.feddls:FedDLSClient"

    candidates: int = 5  # K
    steps: int = 40  # S
    compression: str = "lasso"
    phi: int = 5
    lasso_alpha: float = 0.2
    lasso_screen: int = 100
    pca_components: int = 10
    quant_bits: int = 3

    def __post_init__(self) -> None:
        for f in ("candidates", "steps", "phi", "lasso_screen", "pca_components"):
            check_range(self.key(f), getattr(self, f), 1)
        check_range(self.key("lasso_alpha"), self.lasso_alpha, 0)
        check_range(self.key("quant_bits"), self.quant_bits, 2, 8)
        check_choice(self.key("compression"), self.compression, COMPRESSIONS)
        if self.lasso_screen < self.phi:
            raise ConfigError(
                f"{self.key('lasso_screen')} ({self.lasso_screen}) must be >= {self.key('phi')} ({self.phi}): "
                "Alg. 2 keeps L = [screen, phi]"
            )
