"""FedPrompt's config and model: a soft prompt ``[T, D]`` trained by back-propagation.

"Prompt Tuning (Fed)" of FedDLS App. C (Guo et al. 2022; Zhao et al. 2023): the only
trainable (and communicated) parameters are T prompt vectors; the PLM stays frozen.
Global arrays = upload = ``prompt`` float32 ``[T, D]``: ``T * D * 4 + 128`` B each way
(T=8, D=384: 12,416 B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedtext.config import MethodConfig, check_range
from fedtext.model import PromptModel


class FedPromptModel(PromptModel):
    """The global array is the prompt itself, started at p0 (T seeded natural tokens)."""


@dataclass(frozen=True)
class FedPromptConfig(MethodConfig):
    """``fedprompt.*``: Adam on the prompt."""

    name: ClassVar[str] = "fedprompt"
    model_class: ClassVar[type] = FedPromptModel
    strategy: ClassVar[str] = "strategies.fedprompt:FedPrompt"
    client: ClassVar[str] = "clients.fedprompt:FedPromptClient"

    local_steps: int = 4  # Adam steps per round
    lr: float = 0.01
    batch_size: int = 16

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
