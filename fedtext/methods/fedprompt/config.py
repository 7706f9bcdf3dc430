"""FedPrompt's run-config keys (``[tool.flwr.app.config.fedprompt]``), validated once; imports
no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import GRADIENT, MEAN, MethodConfig, check_range
from fedtext.common.metrics import MetricSpec


@dataclass(frozen=True)
class FedPromptConfig(MethodConfig):
    """``fedprompt.*``: Adam on the prompt."""

    name: ClassVar[str] = "fedprompt"
    model: ClassVar[str] = "fedtext.methods.fedprompt.model:FedPromptModel"
    strategy: ClassVar[str] = "strategies.fedprompt:FedPrompt"
    client: ClassVar[str] = "clients.fedprompt:FedPromptClient"
    server_aggregation: ClassVar[str] = MEAN  # the base strategy's example-weighted mean of the prompt
    # DP (central, local) and SecAgg+: its server only averages the uploads (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "dp-local", "secagg"})
    local_training: ClassVar[str] = GRADIENT  # Adam through gradient_steps
    summary: ClassVar[str] = "soft prompt, back-prop through the frozen PLM"
    page: ClassVar[str] = "baselines"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "A soft prompt of T vectors, inserted after [CLS], trained by back-propagation (Adam) through the frozen "
        "PLM; the server takes FedAvg's example-weighted mean of the prompts.")
    travels: ClassVar[str] = "prompt `T·D·4 + 128` B each way"
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "batch-size": 4}
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()

    local_steps: int = 4  # Adam steps on the prompt per round
    lr: float = 0.01  # Adam learning rate for the soft prompt
    batch_size: int = 16  # examples per optimizer step

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
