"""FedDLS's run-config keys (``[tool.flwr.app.config.feddls]``), validated once; imports no
torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedtext.config import ConfigError, MethodConfig, check_choice, check_range
from fedtext.metrics import MetricSpec

COMPRESSIONS = ("lasso", "full", "pca", "quant")


@dataclass(frozen=True)
class FedDLSConfig(MethodConfig):
    """``feddls.*``: local search (Alg. 3) and download compression (Alg. 2, App. E)."""

    name: ClassVar[str] = "feddls"
    model: ClassVar[str] = "fedtext.methods.feddls.model:FedDLSModel"
    strategy: ClassVar[str] = "strategies.feddls:FedDLS"
    client: ClassVar[str] = "clients.feddls:FedDLSClient"
    server_aggregation: ClassVar[str] = "a mean of discrete-token prompts sent as compressed updates"  # eqs. 5, 8-11
    local_training: ClassVar[str] = "a discrete token search (no gradients)"
    # the p' version the client holds after the round (clients.feddls.FedDLSClient.train): the
    # server sends its next download from there (strategies.feddls.FedDLS.download)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = (MetricSpec("dls_version", whole=True, low=0),)
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()  # the evaluate telemetry only

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
