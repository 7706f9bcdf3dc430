"""Architectures without weights, shipped in the repo: ``model=<name> weights=random``.

A *shape* is a Hugging Face model configuration (the fields of a ``config.json``,
``model_type`` first) and the model whose tokenizer it reads. With ``weights=random`` the
backbone builds it with seeded random weights (:func:`fedtext.backbone.loading.load`): the
same weights in every process of a run, whatever torch's global generator holds. Bytes,
memory and time measured on it are real; its accuracy is never a result.

Python, not JSON, because the Flower app bundle packs ``*.py`` files only. A new
architecture is one more entry of :data:`SHAPES`; its ``tokenizer`` must name a tokenizer
that loads offline (the default model's, a local folder) and whose vocabulary fits
``vocab_size``.

The papers' backbones (RoBERTa-large in all five, RoBERTa-base in FedDPG's and FeS's
tables, BERT-base in FeS's) are shapes for the cost tables (simulations/studies/costs.py):
their configurations are the published ``config.json`` files' fields. No package ships
RoBERTa's byte-level BPE vocabulary, so the RoBERTa shapes read the offline default's
WordPiece tokenizer (BERT-uncased, 30,522 of the 50,265 ids; its ``[PAD]`` is id 0, hence
``pad_token_id`` 0 where RoBERTa's is 1): the embedding table, and so every byte and
parameter count, is RoBERTa's; a sentence's token count is WordPiece's, not BPE's (both
split English into roughly a token per word; not measured here). BERT-base's tokenizer is
its own (the default's vocabulary is bert-base-uncased's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fedtext.common.config import DEFAULT_MODEL

if TYPE_CHECKING:
    from transformers import PretrainedConfig


@dataclass(frozen=True)
class Shape:
    """One architecture: its configuration and where its tokenizer comes from."""

    config: Mapping[str, Any]  # a transformers configuration's fields; "model_type" names the architecture
    tokenizer: str = DEFAULT_MODEL  # a model name or folder (fedtext.backbone.loading.resolve_model_path)
    note: str = field(default="", compare=False)  # what the shape is for, in a few words
    # The name is also a published checkpoint's hub id (roberta-large): `weights=pretrained` loads that
    # checkpoint from a hub or cache as any model (the paper profiles of simulations/experiments do),
    # `weights=random` builds this shape offline. False: a shape only, pretrained weights are an error.
    checkpoint: bool = False

    def hf_config(self) -> PretrainedConfig:
        """The transformers configuration object (``AutoConfig.for_model``)."""
        from transformers import AutoConfig

        fields = dict(self.config)
        return AutoConfig.for_model(fields.pop("model_type"), **fields)


# RoBERTa's published configuration fields common to its sizes (roberta-base's and roberta-large's
# config.json), with the stand-in tokenizer's padding id (module doc).
_ROBERTA: Mapping[str, Any] = MappingProxyType({
    "model_type": "roberta", "vocab_size": 50265, "max_position_embeddings": 514, "type_vocab_size": 1,
    "layer_norm_eps": 1e-5, "pad_token_id": 0})

# Shape name (run-config ``model`` with ``weights=random``) -> its architecture.
SHAPES: Mapping[str, Shape] = MappingProxyType({
    # A 2-layer BERT of width 32 on the offline default's BERT-uncased vocabulary (30,522
    # tokens): plumbing tests of every method in seconds.
    "tiny-bert": Shape(
        {"model_type": "bert", "vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 512,
         "type_vocab_size": 2},
        tokenizer=DEFAULT_MODEL, note="plumbing tests"),
    # The same on RoBERTa's architecture and vocabulary size (50,265; one token type, positions
    # offset by the padding id): what the paper-shaped cost runs build, in seconds.
    "tiny-roberta": Shape(
        {**_ROBERTA, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64},
        tokenizer=DEFAULT_MODEL, note="plumbing tests of the RoBERTa shapes"),
    # The same on MPNet's architecture (all-mpnet-base-v2's family: attention.attn.{q,k,v,o}, a relative-position
    # bias table shared by the layers, positions after the padding index) and vocabulary size (30,527). The
    # default's BERT-uncased WordPiece tokenizer stands in for MPNet's (the same 30,522 words: MPNet adds <s>,
    # <pad>, </s>, <unk> in front and <mask> at the end), so pad_token_id is that tokenizer's 0.
    "tiny-mpnet": Shape(
        {"model_type": "mpnet", "vocab_size": 30527, "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 514,
         "relative_attention_num_buckets": 32, "layer_norm_eps": 1e-5, "pad_token_id": 0},
        tokenizer=DEFAULT_MODEL, note="plumbing tests of the MPNet architecture"),
    # RoBERTa-large (Liu et al. 2019): 24 layers, D = 1,024, 16 heads, FFN 4,096; 355,359,744
    # weights with the pooler. The backbone of all five papers' main tables.
    "roberta-large": Shape(
        {**_ROBERTA, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
         "intermediate_size": 4096},
        tokenizer=DEFAULT_MODEL, note="the papers' backbone (costs only)", checkpoint=True),
    # RoBERTa-base: 12 layers, D = 768, 12 heads, FFN 3,072; 124,645,632 weights.
    "roberta-base": Shape(
        {**_ROBERTA, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 3072},
        tokenizer=DEFAULT_MODEL, note="FedDPG's and FeS's smaller backbone (costs only)", checkpoint=True),
    # BERT-base-uncased (Devlin et al. 2019): 12 layers, D = 768; 109,482,240 weights; the
    # default's tokenizer is its own (its hub id is bert-base-uncased: this name is a shape only).
    "bert-base": Shape(
        {"model_type": "bert", "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
         "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512,
         "type_vocab_size": 2, "layer_norm_eps": 1e-12},
        tokenizer=DEFAULT_MODEL, note="FeS's BERT rows (costs only)"),
})


def shape_of(model: str, weights: str) -> Shape | None:
    """The shape ``model`` builds with ``weights``: its entry of :data:`SHAPES`, except where
    pretrained weights are asked of a name that is also a published checkpoint (``roberta-large``:
    loaded from a hub or a cache as any other model); None for any other model."""
    shape = SHAPES.get(model)
    return None if shape is None or (weights != "random" and shape.checkpoint) else shape
