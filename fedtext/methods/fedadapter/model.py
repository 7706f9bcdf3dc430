"""FedAdapter's model: Houlsby bottleneck adapters in the model's own copy of the encoder."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from fedtext.backbone import Backbone
from fedtext.config import ConfigError
from fedtext.methods.injected import InjectedModel

if TYPE_CHECKING:
    from fedtext.config import RunConfig

# sigma of the bottleneck, by fedadapter.activation (fedtext.methods.fedadapter.config.ACTIVATIONS)
ACTIVATION: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": torch.nn.functional.gelu,
    "relu": torch.nn.functional.relu,
    "tanh": torch.tanh,
    "silu": torch.nn.functional.silu,
}
PARENT = re.compile(r"(?:^|\.)layer\.\d+(?:\.attention)?$")  # what holds an output block: layer.N(.attention)
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


class HoulsbyOutput(torch.nn.Module):
    """A BERT layer's output block (``BertSelfOutput`` / ``BertOutput``) with an adapter before
    the residual add: ``LayerNorm(adapter(dropout(dense(x))) + residual)``.

    Holds the block's own ``dense``, ``dropout`` and ``LayerNorm`` modules (their weights, the
    pretrained ones, keep their names: ``...attention.output.dense.weight``), and the adapter as
    ``adapter`` (``...attention.output.adapter.down.weight``). The adapter sits after the
    dropout, where Houlsby's code and AdapterHub put it.
    """

    def __init__(self, block: torch.nn.Module, adapter: Bottleneck) -> None:
        super().__init__()
        self.dense, self.dropout, self.LayerNorm = block.dense, block.dropout, block.LayerNorm
        self.adapter = adapter

    def forward(self, hidden_states: Tensor, input_tensor: Tensor) -> Tensor:
        return self.LayerNorm(self.adapter(self.dropout(self.dense(hidden_states))) + input_tensor)


def output_blocks(encoder: torch.nn.Module, name: str) -> list[tuple[str, torch.nn.Module, str]]:
    """``(parent name, parent module, attribute)`` of every layer's two output blocks, in layer
    order: ``layer.N.attention`` / ``output`` and ``layer.N`` / ``output`` (BERT / RoBERTa).
    ``name`` (the model's) is for the error: an encoder without them is one clear line."""
    blocks = []
    for parent_name, parent in encoder.named_modules():
        if not PARENT.search(parent_name):
            continue
        block = getattr(parent, "output", None)
        if all(isinstance(getattr(block, a, None), t) for a, t in
               (("dense", torch.nn.Linear), ("dropout", torch.nn.Dropout), ("LayerNorm", torch.nn.LayerNorm))):
            blocks.append((parent_name, parent, "output"))
    if not blocks:
        raise ConfigError(f"fedadapter needs a BERT-style encoder (layer.N.attention.output and layer.N.output, "
                          f"each dense + dropout + LayerNorm); {name} has none")
    return blocks


class AdapterModel(InjectedModel):
    """Every adapter's ``down``/``up`` weights and biases (and, with
    ``fedadapter.train-layernorm``, the layers' LayerNorms) are the global arrays, then the
    ``linear`` head. Raises ``ConfigError`` at model build for an encoder without BERT-style
    output blocks."""

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        blocks = output_blocks(backbone.encoder, backbone.name)
        # the LayerNorms the adapters feed, by their names in Backbone.named_parameters (an MLM
        # model's start with its base model's prefix, e.g. "bert.")
        root = backbone.mlm or backbone.encoder
        prefix = next((n + "." for n, m in root.named_modules() if m is backbone.encoder and n), "")
        self.layernorms = frozenset(f"{prefix}{p}.output.LayerNorm.{w}" for p, _, _ in blocks for w in ("weight", "bias"))

    def inject(self, network: Backbone) -> None:
        """A :class:`HoulsbyOutput` in place of each output block of ``network.encoder`` (the
        copy's modules: the process's frozen backbone keeps its own), on the weights' device."""
        mc = self.mcfg
        for _, parent, attr in output_blocks(network.encoder, network.name):
            block = getattr(parent, attr)
            adapter = Bottleneck(block.dense.out_features, mc.bottleneck, mc.activation).to(block.dense.weight.device)
            setattr(parent, attr, HoulsbyOutput(block, adapter))

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
