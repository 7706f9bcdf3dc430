"""FedAdapter's run-config keys (``[tool.flwr.app.config.fedadapter]``), validated once;
imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import ClassVar

from fedtext.common.config import GRADIENT, MEAN, MethodConfig, check_choice, check_range
from fedtext.common.metrics import MetricSpec

ACTIVATIONS = ("gelu", "relu", "tanh", "silu")  # sigma of h + W_up sigma(W_down h)


@dataclass(frozen=True)
class FedAdapterConfig(MethodConfig):
    """``fedadapter.*``: Houlsby bottleneck adapters (Houlsby et al. 2019) in every layer of the
    frozen encoder, AdamW on them (and on the layers' LayerNorms)."""

    name: ClassVar[str] = "fedadapter"
    model: ClassVar[str] = "fedtext.methods.fedadapter.model:AdapterModel"
    strategy: ClassVar[str] = "strategies.fedadapter:FedAdapter"
    client: ClassVar[str] = "clients.fedadapter:FedAdapterClient"
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    summary: ClassVar[str] = "Houlsby bottleneck adapters + LayerNorms"
    page: ClassVar[str] = "adapters"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "Houlsby bottleneck adapters (Houlsby et al. 2019), a small module of ours (AdapterHub's `adapters` "
        "needs transformers 4.57, PEFT has none): `h + W_up σ(W_down h)` after the attention and the "
        "feed-forward output projections of every layer, before the residual add and LayerNorm; W_down seeded "
        "(N(0, 0.01²) truncated at 2σ), W_up = 0 (round 0 is the frozen model); the client trains the adapters, "
        "the layers' LayerNorms (`fedadapter.train-layernorm`) and the `linear` head with AdamW; the server "
        "takes FedAvg's example-weighted mean.")
    travels: ClassVar[str] = (
        "adapters `2L·(4(2md+m+d) + 512)` B plus LayerNorms `4L·(4d+128)` B each way; a C-class `linear` head "
        "adds `4(CD+C) + 256` B, as `fedlora`'s")
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "batch-size": 4, "bottleneck": 4}
    server_aggregation: ClassVar[str] = MEAN  # the base strategy's example-weighted mean of the adapter weights: server-optimizer composes
    # DP (central, local) and SecAgg+: its server only averages the uploads (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "dp-local", "secagg"})
    local_training: ClassVar[str] = GRADIENT  # fedavg's AdamW loop through gradient_steps: proximal-mu applies
    # Houlsby et al. train a classifier on top (linear); the frozen-PLM heads work too
    default_head: ClassVar[str] = "linear"
    heads: ClassVar[tuple[str, ...]] = ("linear", "similarity", "tied", "mlm")

    bottleneck: int = 64  # m: bottleneck size of each adapter (Houlsby: 8, 64 or 256; their code: 64)
    activation: str = "gelu"  # sigma of h + W_up sigma(W_down h): gelu (Houlsby's code) | relu | tanh | silu
    train_layernorm: bool = True  # the layers' LayerNorms train and travel too (Houlsby et al.)
    local_steps: int = 4  # AdamW steps per round
    lr: float = 3e-4  # AdamW learning rate of adapters and LayerNorms (Houlsby's sweep: 3e-5, 3e-4, 3e-3)
    head_lr: float = 5e-3  # AdamW learning rate of the (randomly initialised) linear head (as fedavg)
    batch_size: int = 16  # examples per optimizer step

    def __post_init__(self) -> None:
        check_range(self.key("bottleneck"), self.bottleneck, 1)
        check_choice(self.key("activation"), self.activation, ACTIVATIONS)
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("head_lr"), self.head_lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
