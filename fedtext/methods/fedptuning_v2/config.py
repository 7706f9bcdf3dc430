"""P-tuning v2's run-config keys (``[tool.flwr.app.config.fedptuning-v2]``), validated once;
imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedtext.config import GRADIENT, MEAN, MethodConfig, check_range
from fedtext.metrics import MetricSpec


@dataclass(frozen=True)
class FedPTuningV2Config(MethodConfig):
    """``fedptuning-v2.*``: Adam on the prefixes."""

    name: ClassVar[str] = "fedptuning-v2"
    model: ClassVar[str] = "fedtext.methods.fedptuning_v2.model:DeepPromptModel"
    strategy: ClassVar[str] = "strategies.fedptuning_v2:FedPTuningV2"
    client: ClassVar[str] = "clients.fedptuning_v2:FedPTuningV2Client"
    server_aggregation: ClassVar[str] = MEAN  # the base strategy's example-weighted mean of the prefixes
    local_training: ClassVar[str] = GRADIENT  # Adam through gradient_steps
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    heads: ClassVar[tuple[str, ...]] = ("similarity", "tied", "mlm")

    local_steps: int = 4  # Adam steps per round
    lr: float = 5e-3  # P-tuning v2's classification learning rates are 5e-3 .. 1e-2
    batch_size: int = 16

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
