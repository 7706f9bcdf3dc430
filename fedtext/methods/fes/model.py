"""The few-shot model: which layers train (co-planning's frozen depth and bias-only layers),
shared by strategy and client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fedtext.backbone.architectures import Architecture, architecture_of
from fedtext.common.config import ConfigError
from fedtext.methods.fes.config import PAPER_FROZEN_SHARE
from fedtext.learning.model import NetworkModel

if TYPE_CHECKING:
    from fedtext.backbone import Backbone
    from fedtext.common.config import RunConfig



class FewShotModel(NetworkModel):
    """The co-planned weights train and travel (:func:`plan_predicate`).

    Raises ``ConfigError`` when the plan names more layers than the encoder has (at
    model build: before any training, on the server).
    """

    def __init__(self, cfg: "RunConfig", backbone: "Backbone") -> None:
        super().__init__(cfg, backbone)
        mc = self.mcfg
        self.layers = num_layers(backbone)
        self.frozen = planned_frozen(mc.frozen_layers, self.layers)
        self.bias = self.layers - self.frozen if mc.bias_layers == -1 else mc.bias_layers
        # A plan that treats every layer alike (fedfsl, fedcls: all full; fedfsl-bias: all bias-only) needs no
        # layer told apart, so it runs on any encoder; a terraced one asks the encoder's architecture.
        uniform = self.frozen == 0 and self.bias in (0, self.layers)
        self.arch = None if uniform else architecture_of(backbone.encoder, backbone.name, f"{mc.name}'s layer plan")
        if self.frozen + max(self.bias, 0) > self.layers:
            frozen = f"{mc.frozen_layers} ({self.frozen})" if mc.frozen_layers == -1 else f"{mc.frozen_layers}"
            raise ConfigError(
                f"{mc.key('frozen_layers')}={frozen} + {mc.key('bias_layers')}={mc.bias_layers} "
                f"exceeds the {self.layers} layers of {backbone.name}"
            )

    def trainable(self) -> Callable[[str], bool]:
        return plan_predicate(self.layers, self.frozen, self.bias, self.arch)

    def is_bias_only(self, name: str) -> bool:
        """Whether ``name`` trains at reduced capacity (its layer is bias-only): it gets ``bias-lr``."""
        return layer_capacity(name, self.layers, self.frozen, self.bias, self.arch) == "bias"


# ------------------------------------------------------------------- co-planning
def planned_frozen(frozen_layers: int, layers: int) -> int:
    """The frozen depth of a plan: ``frozen-layers``, or with -1 the paper's share of the
    encoder's ``layers`` (:data:`fedtext.methods.fes.config.PAPER_FROZEN_SHARE`, rounded: 4 of 6,
    8 of 12, 16 of 24)."""
    return round(layers * PAPER_FROZEN_SHARE) if frozen_layers == -1 else frozen_layers


def num_layers(backbone: "Backbone") -> int:
    """Transformer layers of the encoder (6 for all-MiniLM-L6-v2, 12 for all-mpnet-base-v2)."""
    return int(backbone.encoder.config.num_hidden_layers)


def layer_capacity(name: str, layers: int, frozen: int, bias: int, arch: Architecture | None) -> str:
    """``frozen`` | ``bias`` | ``full`` for a weight name under the plan (§3.3, Fig. 7).

    Layer ``i`` (as ``arch`` finds it in the name; ``None`` for a plan that treats every layer
    alike, ``frozen = 0`` and ``bias`` 0 or all, where any layer's capacity is layer 0's) is
    frozen below ``frozen``, bias-only below ``frozen + bias``, full above. Embeddings follow layer 0, and so do the tables every layer
    reads (MPNet's relative-position bias, outside every layer: the bottom layers read it too, so
    it trains only where layer 0 does); a ``head.*`` always trains. The pooler feeds only the
    ``cls`` head (fedcls, which trains every weight); the prompt heads read mean-pooled
    states or ``[MASK]``, so only the plain full plan (``0, 0``: every weight, as
    fedavg) includes it.
    """
    if name.startswith("head."):
        return "full"
    i = arch.layer_index(name) if arch is not None else None
    if i is None:
        if "pooler" in name:
            return "full" if frozen == 0 and bias == 0 else "frozen"
        i = 0  # embeddings, shared tables
    return "frozen" if i < frozen else "bias" if i < frozen + bias else "full"


def plan_predicate(layers: int, frozen: int, bias: int, arch: Architecture | None) -> Callable[[str], bool]:
    """The co-planned trainable weights as a name predicate (bias-only layers: ``*.bias``)."""

    def wants(name: str) -> bool:
        cap = layer_capacity(name, layers, frozen, bias, arch)
        return cap == "full" or (cap == "bias" and name.endswith(".bias"))

    return wants
