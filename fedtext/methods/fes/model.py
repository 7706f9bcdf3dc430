"""The few-shot model: which layers train (co-planning's frozen depth and bias-only layers),
shared by strategy and client.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from fedtext.config import ConfigError
from fedtext.model import NetworkModel

if TYPE_CHECKING:
    from fedtext.backbone import Backbone
    from fedtext.config import RunConfig


_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")


class FewShotModel(NetworkModel):
    """The co-planned weights train and travel (:func:`plan_predicate`).

    Raises ``ConfigError`` when the plan names more layers than the encoder has (at
    model build: before any training, on the server).
    """

    def __init__(self, cfg: "RunConfig", backbone: "Backbone") -> None:
        super().__init__(cfg, backbone)
        self.layers = num_layers(backbone)
        mc = self.mcfg
        self.frozen = mc.frozen_layers
        self.bias = self.layers - mc.frozen_layers if mc.bias_layers == -1 else mc.bias_layers
        if self.frozen + max(self.bias, 0) > self.layers:
            raise ConfigError(
                f"{mc.key('frozen_layers')}={mc.frozen_layers} + {mc.key('bias_layers')}={mc.bias_layers} "
                f"exceeds the {self.layers} layers of {backbone.name}"
            )

    def trainable(self) -> Callable[[str], bool]:
        return plan_predicate(self.layers, self.frozen, self.bias)

    def is_bias_only(self, name: str) -> bool:
        """Whether ``name`` trains at reduced capacity (its layer is bias-only): it gets ``bias-lr``."""
        return layer_capacity(name, self.layers, self.frozen, self.bias) == "bias"


# ------------------------------------------------------------------- co-planning
def num_layers(backbone: "Backbone") -> int:
    """Transformer layers of the encoder (6 for all-MiniLM-L6-v2)."""
    return int(backbone.encoder.config.num_hidden_layers)


def layer_capacity(name: str, layers: int, frozen: int, bias: int) -> str:
    """``frozen`` | ``bias`` | ``full`` for a weight name under the plan (§3.3, Fig. 7).

    Layer ``i`` is frozen below ``frozen``, bias-only below ``frozen + bias``, full above.
    Embeddings follow layer 0; a ``head.*`` always trains. The pooler feeds only the
    ``cls`` head (fedcls, which trains every weight); the prompt heads read mean-pooled
    states or ``[MASK]``, so only the plain full plan (``0, 0``: every weight, as
    fedavg) includes it.
    """
    if name.startswith("head."):
        return "full"
    m = _LAYER.search(name)
    if m:
        i = int(m.group(1))
    elif "pooler" in name:
        return "full" if frozen == 0 and bias == 0 else "frozen"
    else:  # embeddings
        i = 0
    return "frozen" if i < frozen else "bias" if i < frozen + bias else "full"


def plan_predicate(layers: int, frozen: int, bias: int) -> Callable[[str], bool]:
    """The co-planned trainable weights as a name predicate (bias-only layers: ``*.bias``)."""

    def wants(name: str) -> bool:
        cap = layer_capacity(name, layers, frozen, bias)
        return cap == "full" or (cap == "bias" and name.endswith(".bias"))

    return wants
