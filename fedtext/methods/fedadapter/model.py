"""FedAdapter's model: Houlsby bottleneck adapters in the model's own copy of the encoder."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from fedtext.backbone import Backbone
from fedtext.backbone.architectures import AdapterSite, architecture_of
from fedtext.methods.injected import InjectedModel

if TYPE_CHECKING:
    from fedtext.common.config import RunConfig

# sigma of the bottleneck, by fedadapter.activation (fedtext.methods.fedadapter.config.ACTIVATIONS)
ACTIVATION: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": torch.nn.functional.gelu,
    "relu": torch.nn.functional.relu,
    "tanh": torch.tanh,
    "silu": torch.nn.functional.silu,
}
INIT_STD = 1e-2  # W_down's std (Houlsby §3.6: zero-mean normal, std 1e-2, truncated at 2 std)


class Bottleneck(torch.nn.Module):
    """``h + W_up sigma(W_down h + b_down) + b_up`` (Houlsby et al. 2019, Fig. 2 right).

    Parameters
    ----------
    dim
        d, the hidden size.
    size
        m, the bottleneck size.
    activation
        sigma's name, a key of :data:`ACTIVATION`.
    """

    def __init__(self, dim: int, size: int, activation: str) -> None:
        super().__init__()
        self.down = torch.nn.Linear(dim, size)  # W_down [m, d], b_down [m]
        self.up = torch.nn.Linear(size, dim)  # W_up [d, m], b_up [d]
        self.activation = activation

    def forward(self, h: Tensor) -> Tensor:
        return h + self.up(ACTIVATION[self.activation](self.down(h)))


class AdaptedDropout(torch.nn.Module):
    """An output block's dropout followed by its adapter: ``adapter(dropout(x))``. It takes the
    place of the block's ``dropout``, so the block's own forward, ``LayerNorm(dropout(proj(x))
    + residual)`` (BERT's ``BertSelfOutput``/``BertOutput``, MPNet's ``MPNetAttention``/
    ``MPNetOutput``), becomes ``LayerNorm(adapter(dropout(proj(x))) + residual)``: the adapter
    after the dropout, before the residual add, where Houlsby's code and AdapterHub put it.

    The adapter is registered on the block (``...attention.output.adapter.down.weight``), not
    here: this module only holds a reference to it, so each weight has one name.
    """

    def __init__(self, dropout: torch.nn.Module, adapter: Bottleneck) -> None:
        super().__init__()
        self.dropout = dropout
        self.__dict__["adapter"] = adapter  # a plain reference: the block owns the module

    def forward(self, hidden_states: Tensor) -> Tensor:
        return self.__dict__["adapter"](self.dropout(hidden_states))


def output_blocks(encoder: torch.nn.Module, name: str) -> list[tuple[str, torch.nn.Module, AdapterSite]]:
    """``(block name, block module, site)`` of every layer's two output blocks, in layer order,
    as the encoder's architecture names them (:mod:`fedtext.backbone.architectures`: BERT's
    ``layer.N.attention.output`` and ``layer.N.output``; MPNet's ``layer.N.attention`` and
    ``layer.N.output``). ``name`` (the model's) is for the one-line error of an encoder of
    another family."""
    arch = architecture_of(encoder, name, "fedadapter")
    return [(f"{arch.layers}.{i}.{site.block}", layer.get_submodule(site.block), site)
            for i, layer in enumerate(arch.layer_modules(encoder)) for site in arch.adapter_sites]


class AdapterModel(InjectedModel):
    """Every adapter's ``down``/``up`` weights and biases (and, with
    ``fedadapter.train-layernorm``, the layers' LayerNorms) are the global arrays, then the
    ``linear`` head. Raises ``ConfigError`` at model build for an encoder whose family
    :mod:`fedtext.backbone.architectures` does not know."""

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        arch = architecture_of(backbone.encoder, backbone.name, "fedadapter")
        # the LayerNorms the adapters feed, by their names in Backbone.named_parameters (an MLM
        # model's start with its base model's prefix, e.g. "bert.")
        root = backbone.mlm or backbone.encoder
        prefix = next((n + "." for n, m in root.named_modules() if m is backbone.encoder and n), "")
        self.layernorms = arch.layernorm_names(prefix)

    def inject(self, network: Backbone) -> None:
        """An adapter after the dropout of each output block of ``network.encoder`` (the copy's
        modules: the process's frozen backbone keeps its own; :class:`AdaptedDropout`), on the
        weights' device, registered on the block as ``adapter``."""
        mc = self.mcfg
        dim = int(network.encoder.config.hidden_size)  # every output block maps back to d
        for _, block, site in output_blocks(network.encoder, network.name):
            layernorm = block.get_submodule(site.layernorm)
            adapter = Bottleneck(dim, mc.bottleneck, mc.activation).to(layernorm.weight.device)
            block.adapter = adapter
            setattr(block, site.dropout, AdaptedDropout(block.get_submodule(site.dropout), adapter))

    def is_injected(self, name: str) -> bool:
        return ".adapter." in name

    def is_copied(self, name: str) -> bool:
        """The head, and the layers' LayerNorms with ``train-layernorm`` (deep-copied: they train)."""
        return super().is_copied(name) or (self.mcfg.train_layernorm and name in self.layernorms)

    def initial_value(self, name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """``down.weight``: N(0, INIT_STD^2) truncated at 2 std; everything else 0 (near-identity:
        the adapter starts as h -> h exactly)."""
        if name.endswith(".adapter.down.weight"):
            x = rng.standard_normal(shape)
            while np.any(bad := np.abs(x) > 2):  # redraw outside +-2 std (TensorFlow's truncated_normal)
                x[bad] = rng.standard_normal(int(bad.sum()))
            return (INIT_STD * x).astype(np.float32)
        return np.zeros(shape, np.float32)
