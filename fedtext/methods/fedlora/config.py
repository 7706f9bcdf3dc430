"""FedLoRA's run-config keys (``[tool.flwr.app.config.fedlora]``), validated once; imports no
torch (the target module names are checked against the encoder when the model is built:
:class:`fedtext.methods.fedlora.model.LoRAModel`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Mapping
from typing import ClassVar

from fedtext.common.config import ConfigError, GRADIENT, MEAN, MethodConfig, check_range
from fedtext.common.metrics import MetricSpec

# one item of target-modules: a role (fedtext.backbone.architectures.LINEAR_ROLES: query, value,
# attention-output, ...) or a module's own name (dense, q)
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z0-9_]+)*")


@dataclass(frozen=True)
class FedLoRAConfig(MethodConfig):
    """``fedlora.*``: LoRA (Hu et al. 2022) on the frozen encoder, AdamW on its factors;
    ``freeze-a`` is FFA-LoRA (Sun et al. 2024: A frozen at its seeded value, only B trains
    and travels)."""

    name: ClassVar[str] = "fedlora"
    model: ClassVar[str] = "fedtext.methods.fedlora.model:LoRAModel"
    strategy: ClassVar[str] = "strategies.fedlora:FedLoRA"
    client: ClassVar[str] = "clients.fedlora:FedLoRAClient"
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    summary: ClassVar[str] = "LoRA on the frozen encoder (PEFT), A and B averaged"
    page: ClassVar[str] = "lora"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "LoRA (Hu et al. 2022) through Hugging Face PEFT: `W x + (α/r) B A x` on the linear layers "
        "`fedlora.target-modules` names (default the query and value projections, found per architecture: BERT's "
        "`attention.self.query`, MPNet's `attention.attn.q`) in every layer of the model's own copy of the "
        "frozen encoder; A seeded from the run seed (the same everywhere), B = 0 (round 0 is the frozen model); "
        "the client trains A, B (and the `linear` head) with AdamW; the server takes the example-weighted mean "
        "of A and of B separately (FederatedScope-LLM, FlowerTune), which is not the mean of the clients' B A. "
        "`fedlora.freeze-a=true` is FFA-LoRA (Sun et al. 2024): A never trains nor travels, and the mean is "
        "exact.")
    travels: ClassVar[str] = (
        "A and B of every wrapped layer each way: `4·r·(d_in+d_out)·L·|targets| + 128·2·L·|targets|` B "
        "(`freeze-a`: B only, `4·r·d_out·L·|targets| + 128·L·|targets|` B); a C-class `linear` head adds "
        "`4(CD+C) + 256` B")
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "batch-size": 4, "rank": 2}
    server_aggregation: ClassVar[str] = MEAN  # the base strategy's example-weighted mean of the LoRA factors: server-optimizer composes
    # DP (central, local) and SecAgg+: its server only averages the uploads (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "dp-local", "secagg"})
    local_training: ClassVar[str] = GRADIENT  # fedavg's AdamW loop through gradient_steps: proximal-mu applies
    # LoRA's GLUE runs train a classifier on top (linear); the frozen-PLM heads work too
    default_head: ClassVar[str] = "linear"
    heads: ClassVar[tuple[str, ...]] = ("linear", "similarity", "tied", "mlm")

    rank: int = 8  # r of every LoRA pair A [r, d_in], B [d_out, r] (LoRA's RoBERTa GLUE: 8)
    alpha: float = 8.0  # LoRA alpha: B A x is scaled by alpha / r (LoRA's RoBERTa GLUE: 8)
    dropout: float = 0.0  # dropout on the LoRA branch's input (PEFT's default)
    target_modules: str = "query,value"  # what LoRA wraps in every layer: roles (query, key, value, attention-output, intermediate, output) or module names
    freeze_a: bool = False  # FFA-LoRA: A frozen at its seeded value, only B trains and travels (exact mean)
    local_steps: int = 4  # AdamW steps per round
    lr: float = 5e-4  # AdamW learning rate of the LoRA factors (LoRA's RoBERTa-base GLUE: 4e-4 .. 5e-4)
    head_lr: float = 5e-3  # AdamW learning rate of the (randomly initialised) linear head (as fedavg)
    batch_size: int = 16  # examples per optimizer step

    def __post_init__(self) -> None:
        check_range(self.key("rank"), self.rank, 1)
        check_range(self.key("alpha"), self.alpha, 0, low_open=True)
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"{self.key('dropout')} must be in [0, 1), got {self.dropout}")
        self.targets  # noqa: B018 - parses, raising ConfigError on a malformed list
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("head_lr"), self.head_lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)

    @property
    def targets(self) -> tuple[str, ...]:
        """``target-modules`` split at commas: the last name of each linear layer LoRA wraps."""
        key = self.key("target_modules")
        items = tuple(x.strip() for x in self.target_modules.split(","))
        bad = [x for x in items if not MODULE_NAME.fullmatch(x)]
        if bad:
            raise ConfigError(f"{key}='{self.target_modules}' wants comma-separated module names (query,value), "
                              f"got '{bad[0]}'")
        if len(set(items)) < len(items):
            raise ConfigError(f"{key}='{self.target_modules}' names a module twice")
        return items
