"""What methods need of an encoder, found per architecture in one place.

Methods that reach inside the encoder (P-tuning v2's keys and values, LoRA's linear layers,
adapters' output blocks and LayerNorms, FeS's layer plan, the position limit) ask the
encoder's :class:`Architecture`, looked up by the configuration's ``model_type`` in
:data:`ARCHITECTURES`, instead of spelling a family's module names. BERT and RoBERTa name
a layer's parts ``attention.self.{query,key,value}``, ``attention.output.{dense,LayerNorm}``,
``intermediate.dense``, ``output.{dense,LayerNorm}``; MPNet (all-mpnet-base-v2) names them
``attention.attn.{q,k,v,o}``, ``attention.LayerNorm``, ``intermediate.dense``,
``output.{dense,LayerNorm}``, and adds one relative-position bias table shared by all layers
(``encoder.relative_attention_bias``: outside the layers, it follows the embeddings in a layer
plan). XLM-RoBERTa and CamemBERT are RoBERTa's code, ELECTRA BERT's layers. An encoder of another family stops a method that
needs its insides in one line (:func:`architecture_of`), never trains part of it.

Paths are relative to one transformer layer (``<layers>.<i>.``), the layers' ModuleList
being :attr:`Architecture.layers` below the base encoder (``encoder.layer`` in all three).

Positions. BERT's position ids start at 0 (512 positions: 512 tokens). RoBERTa's and
MPNet's start after the padding index (``padding_idx + 1``: RoBERTa's ``pad_token_id`` 1,
MPNet's embedding hard-codes 1), so their 514 positions hold 512 tokens
(:func:`max_tokens`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from fedtext.common.config import ConfigError

if TYPE_CHECKING:
    import torch

# The roles of a layer's linear maps (fedlora's target-modules take these names, or a
# layer's own module names): the attention's query, key, value and output projections, the
# feed-forward's first (intermediate) and second (output) maps.
LINEAR_ROLES = ("query", "key", "value", "attention-output", "intermediate", "output")


@dataclass(frozen=True)
class AdapterSite:
    """One place of a layer where a Houlsby adapter goes: the module ``block`` whose forward
    is ``LayerNorm(dropout(projection(x)) + residual)``, with its ``dropout`` and ``layernorm``
    attributes. The adapter enters after the dropout, before the residual add (Houlsby et
    al. 2019, Fig. 2; where their code and AdapterHub put it)."""

    block: str  # path in a layer: "attention.output" (BERT) | "attention" (MPNet) | "output"
    dropout: str = "dropout"
    layernorm: str = "LayerNorm"


@dataclass(frozen=True)
class Architecture:
    """One encoder family's layout (module doc).

    Parameters
    ----------
    name
        The family (a configuration's ``model_type``).
    layers
        Path of the layers' ModuleList below the base encoder.
    linear
        Role (:data:`LINEAR_ROLES`) -> the linear layer's path inside a layer.
    adapter_sites
        The layer's two output blocks, attention's then the feed-forward's.
    positions_offset
        Whether position ids start after the padding index (RoBERTa, MPNet) instead of at 0.
    attention_maps
        ``[B, H, L, L]`` tensors a forward holds per layer: the attention scores (1), and
        MPNet's relative-position bias, materialised once per forward and added to every
        layer's scores (2): the scoring memory bound counts them
        (:func:`fedtext.backbone.scoring.activation_bytes_per_token`).
    depth
        The number of layers of the encoder it was read from (:func:`architecture_of`).
    """

    name: str
    layers: str
    linear: Mapping[str, str]
    adapter_sites: tuple[AdapterSite, ...]
    positions_offset: bool
    attention_maps: int = 1
    depth: int = 0  # layers of the encoder it was read from (:func:`architecture_of`); 0 in the registry

    def __post_init__(self) -> None:
        if set(self.linear) != set(LINEAR_ROLES):
            raise ValueError(f"{self.name}: linear roles {sorted(self.linear)} != {sorted(LINEAR_ROLES)}")

    @property
    def layer_pattern(self) -> re.Pattern[str]:
        """Matches a weight or module name inside layer N, group 1 = N."""
        return re.compile(rf"(?:^|\.){re.escape(self.layers)}\.(\d+)\.")

    def layer_index(self, name: str) -> int | None:
        """The layer a module or weight name lies in (``encoder.layer.3.attention...`` -> 3),
        or ``None`` outside the layers (embeddings, pooler, shared tables, heads)."""
        m = self.layer_pattern.search(name + ".")
        return int(m.group(1)) if m else None

    def layer_modules(self, encoder: torch.nn.Module) -> list[torch.nn.Module]:
        """The encoder's transformer layers, in order."""
        return list(encoder.get_submodule(self.layers))

    def key_value(self, encoder: torch.nn.Module) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
        """Each layer's self-attention key and value projections (outputs ``[B, L, D]``)."""
        return [(layer.get_submodule(self.linear["key"]), layer.get_submodule(self.linear["value"]))
                for layer in self.layer_modules(encoder)]

    def layernorm_names(self, prefix: str = "") -> frozenset[str]:
        """Weight names of the LayerNorms the adapter sites feed, in each of the :attr:`depth`
        layers (``prefix``: the base encoder's name inside a masked-LM model, e.g. ``bert.``)."""
        return frozenset(f"{prefix}{self.layers}.{i}.{site.block}.{site.layernorm}.{w}"
                         for i in range(self.depth) for site in self.adapter_sites for w in ("weight", "bias"))


_BERT_LINEAR = MappingProxyType({
    "query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
    "attention-output": "attention.output.dense", "intermediate": "intermediate.dense", "output": "output.dense"})
_BERT_SITES = (AdapterSite("attention.output"), AdapterSite("output"))

# The families whose layouts differ, by model_type. RoBERTa's modules carry BERT's names (modeling_roberta.py).
_LAYOUTS: dict[str, Architecture] = {
    "bert": Architecture("bert", "encoder.layer", _BERT_LINEAR, _BERT_SITES, positions_offset=False),
    "roberta": Architecture("roberta", "encoder.layer", _BERT_LINEAR, _BERT_SITES, positions_offset=True),
    "mpnet": Architecture(
        "mpnet", "encoder.layer",
        MappingProxyType({"query": "attention.attn.q", "key": "attention.attn.k", "value": "attention.attn.v",
                          "attention-output": "attention.attn.o", "intermediate": "intermediate.dense",
                          "output": "output.dense"}),
        # MPNetAttention: LayerNorm(dropout(attn.o(c)) + h); MPNetOutput as BERT's
        (AdapterSite("attention"), AdapterSite("output")),
        positions_offset=True, attention_maps=2),
}
# model_type -> its layout: the families above, and those whose modules carry one's names
# (transformers' modeling_xlm_roberta.py and modeling_camembert.py are RoBERTa's code,
# modeling_electra.py BERT's layers behind embeddings of its own).
ARCHITECTURES: Mapping[str, Architecture] = MappingProxyType({
    **_LAYOUTS,
    **{kind: replace(_LAYOUTS[like], name=kind)
       for kind, like in (("xlm-roberta", "roberta"), ("camembert", "roberta"), ("electra", "bert"))},
})


def architecture_of(encoder: torch.nn.Module, model: str, needs: str = "") -> Architecture:
    """The :class:`Architecture` of ``encoder`` (a base encoder: ``AutoModel``'s), its depth
    set; one :class:`ConfigError` line naming ``needs`` (what the caller looks for) where the
    family is not one of :data:`ARCHITECTURES` or its layout differs from the entry's."""
    kind = getattr(encoder.config, "model_type", "")
    arch = ARCHITECTURES.get(kind)
    why = f"{needs} needs" if needs else "fedtext needs"
    if arch is None:
        raise ConfigError(f"{why} the layout of a {', '.join(ARCHITECTURES)} encoder; "
                          f"{model} is '{kind or type(encoder).__name__}'")
    try:
        layers = list(encoder.get_submodule(arch.layers))
        for layer in layers:
            for path in arch.linear.values():
                layer.get_submodule(path)
            for site in arch.adapter_sites:
                block = layer.get_submodule(site.block)
                block.get_submodule(site.dropout)
                block.get_submodule(site.layernorm)
    except AttributeError as exc:
        raise ConfigError(f"{why} a {kind} encoder laid out as transformers' ({exc}); {model} is not") from None
    return replace(arch, depth=len(layers))


def max_tokens(encoder: torch.nn.Module) -> int:
    """Tokens a sequence of ``encoder`` may hold: its position table's rows, less those before
    the first position where ids start after the padding index (RoBERTa, MPNet: 514 -> 512);
    0 where the configuration gives no limit. An encoder of an unknown family counts from 0."""
    limit = int(getattr(encoder.config, "max_position_embeddings", 0) or 0)
    arch = ARCHITECTURES.get(getattr(encoder.config, "model_type", ""))
    if not limit or arch is None or not arch.positions_offset:
        return limit
    padding = getattr(getattr(encoder, "embeddings", None), "padding_idx", None)
    return limit - (int(padding) + 1 if padding is not None else 0)
