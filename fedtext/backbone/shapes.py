"""Architectures without weights, shipped in the repo: ``model=<name> weights=random``.

A *shape* is a Hugging Face model configuration (the fields of a ``config.json``,
``model_type`` first) and the model whose tokenizer it reads. With ``weights=random`` the
backbone builds it with seeded random weights (:func:`fedtext.backbone.loading.load`): the
same weights in every process of a run, whatever torch's global generator holds. Bytes,
memory and time measured on it are real; its accuracy is never a result.

Python, not JSON, because the Flower app bundle packs ``*.py`` files only. A new
architecture (RoBERTa-base/-large, BERT-base shapes for cost measurements) is one more
entry of :data:`SHAPES`; its ``tokenizer`` must name a tokenizer that loads offline (the
default model's, a local folder) and whose vocabulary fits ``vocab_size``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fedtext.config import DEFAULT_MODEL

if TYPE_CHECKING:
    from transformers import PretrainedConfig


@dataclass(frozen=True)
class Shape:
    """One architecture: its configuration and where its tokenizer comes from."""

    config: Mapping[str, Any]  # a transformers configuration's fields; "model_type" names the architecture
    tokenizer: str = DEFAULT_MODEL  # a model name or folder (fedtext.backbone.loading.resolve_model_path)
    note: str = field(default="", compare=False)  # what the shape is for, in a few words

    def hf_config(self) -> PretrainedConfig:
        """The transformers configuration object (``AutoConfig.for_model``)."""
        from transformers import AutoConfig

        fields = dict(self.config)
        return AutoConfig.for_model(fields.pop("model_type"), **fields)


# Shape name (run-config ``model``) -> its architecture.
SHAPES: Mapping[str, Shape] = MappingProxyType({
    # A 2-layer BERT of width 32 on the offline default's BERT-uncased vocabulary (30,522
    # tokens): plumbing tests of every method in seconds.
    "tiny-bert": Shape(
        {"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 512,
         "type_vocab_size": 2},
        tokenizer=DEFAULT_MODEL, note="plumbing tests"),
})
