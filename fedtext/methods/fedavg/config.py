"""FedAvg's run-config keys (``[tool.flwr.app.config.fedavg]``), validated once; imports no
torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import GRADIENT, MEAN, MethodConfig, check_range
from fedtext.common.metrics import MetricSpec


@dataclass(frozen=True)
class FedAvgConfig(MethodConfig):
    """``fedavg.*``: AdamW on every weight, a larger step for the fresh head."""

    name: ClassVar[str] = "fedavg"
    model: ClassVar[str] = "fedtext.methods.fedavg.model:FedAvgModel"
    strategy: ClassVar[str] = "strategies.fedavg:FedAvgStrategy"
    client: ClassVar[str] = "clients.fedavg:FedAvgClient"
    server_aggregation: ClassVar[str] = MEAN  # the base strategy's example-weighted mean: server-optimizer composes
    # DP (central, local) and SecAgg+: its server only averages the uploads (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "dp-local", "secagg"})
    local_training: ClassVar[str] = GRADIENT  # AdamW through gradient_steps: proximal-mu applies
    summary: ClassVar[str] = "fine-tune the whole model"
    page: ClassVar[str] = "baselines"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "FedAvg (McMahan et al. 2017), the baseline of FedDRS and FeS: every client fine-tunes the whole encoder "
        "and a `linear` head (mean-pooled features → C logits) with AdamW (`fedavg.lr` encoder, `fedavg.head-lr` "
        "head, `fedavg.local-steps` steps of `fedavg.batch-size`); the server takes the example-weighted mean of "
        "every tensor.")
    travels: ClassVar[str] = "the whole model each way: `4·#weights + 128·#tensors` B"
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "batch-size": 4}
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    default_head: ClassVar[str] = "linear"
    heads: ClassVar[tuple[str, ...]] = ("linear", "similarity")

    local_steps: int = 4  # AdamW steps per round
    lr: float = 5e-5  # AdamW learning rate of the encoder
    head_lr: float = 5e-3  # AdamW learning rate of the (randomly initialised) linear head
    batch_size: int = 16  # examples per optimizer step

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("head_lr"), self.head_lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
