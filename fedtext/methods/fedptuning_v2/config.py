"""P-tuning v2's run-config keys (``[tool.flwr.app.config.fedptuning-v2]``), validated once;
imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import GRADIENT, MEAN, MethodConfig, check_range
from fedtext.common.metrics import MetricSpec


@dataclass(frozen=True)
class FedPTuningV2Config(MethodConfig):
    """``fedptuning-v2.*``: Adam on the prefixes."""

    name: ClassVar[str] = "fedptuning-v2"
    model: ClassVar[str] = "fedtext.methods.fedptuning_v2.model:DeepPromptModel"
    strategy: ClassVar[str] = "strategies.fedptuning_v2:FedPTuningV2"
    client: ClassVar[str] = "clients.fedptuning_v2:FedPTuningV2Client"
    server_aggregation: ClassVar[str] = MEAN  # the base strategy's example-weighted mean of the prefixes
    # DP (central, local) and SecAgg+: its server only averages the uploads (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "dp-local", "secagg"})
    local_training: ClassVar[str] = GRADIENT  # Adam through gradient_steps
    summary: ClassVar[str] = "prefix keys/values at every layer (back-prop)"
    page: ClassVar[str] = "feddpg"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "Fed P-tuning v2 (FedDPG's Table 1 baseline; Liu et al. 2022): T prefix keys and values at every encoder "
        "layer (forward hooks overwrite T placeholder positions of each self-attention's key and value "
        "projections, the same as `past_key_values`; left out of pooling), trained with Adam through the frozen "
        "PLM; the server takes FedAvg's example-weighted mean.")
    travels: ClassVar[str] = "`prefix.key`, `prefix.value` `[L,T,D]` each way: `2·(4·L·T·D + 128)` B"
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "batch-size": 4}
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    heads: ClassVar[tuple[str, ...]] = ("similarity", "tied", "mlm")

    #: Adam steps on the prefixes per round (T = the shared `prompt-length`)
    local_steps: int = 4  # Adam steps on the prefixes per round
    lr: float = 5e-3  # Adam learning rate of the prefixes
    batch_size: int = 16  # examples per optimizer step

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
