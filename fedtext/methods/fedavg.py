"""FedAvg's config and model: full fine-tuning of the encoder and a ``linear`` head.

The baseline FedDRS and FeS compare against (McMahan et al. 2017): every client
fine-tunes the whole model on its shots and the server takes the example-weighted
mean of every trained tensor. The global arrays are all of them (encoder weights in
``named_parameters`` order, then ``head.weight`` ``[C, D]`` and ``head.bias`` ``[C]``),
float32, one NPY blob each: the whole model travels both ways every client-round
(all-MiniLM-L6-v2 + a 2-class head: 22,713,986 weights in 105 tensors, 90,869,384 B = 86.7 MiB each way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedtext.config import MethodConfig, check_range
from fedtext.model import NetworkModel


class FedAvgModel(NetworkModel):
    """Every weight trains and travels (``trainable() == "all"``)."""


@dataclass(frozen=True)
class FedAvgConfig(MethodConfig):
    """``fedavg.*``: AdamW on every weight, a larger step for the fresh head."""

    name: ClassVar[str] = "fedavg"
    model_class: ClassVar[type] = FedAvgModel
    strategy: ClassVar[str] = "strategies.fedavg:FedAvgStrategy"
    client: ClassVar[str] = "clients.fedavg:FedAvgClient"
    default_head: ClassVar[str] = "linear"
    heads: ClassVar[tuple[str, ...]] = ("linear", "similarity")

    local_steps: int = 4  # AdamW steps per round
    lr: float = 5e-5  # encoder
    head_lr: float = 5e-3  # linear head (randomly initialised)
    batch_size: int = 16

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("head_lr"), self.head_lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
