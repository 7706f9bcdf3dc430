"""Prompt injections: where per-prompt values enter the encoder besides the prompt's input
embeddings, one class each, registered in :data:`INJECTIONS` by name.

Every encoder call of a backbone takes ``[CLS] p_1..p_T x_1..x_L [SEP]``: the prompt's T
vectors are input embeddings inserted after ``[CLS]`` (:meth:`fedtext.backbone.encoder.Network.hidden_states`).
An injection adds something more, per prompt, at the prompt positions of one encoder
call, through forward hooks that exist only while the call runs
(:meth:`Injection.added`). A method that needs a new place (a layer's output, the
attention's keys) adds a class here and registers it; the backbone's classes do not change:
callers name it in ``hidden_states(..., injected={name: values})``.

* ``embedding-output``: BBT's and FedBPT's injection, the offsets ``A z`` added to the
  embedding layer's *output* (after position embeddings and the embedding LayerNorm;
  ``embedding_output + extended_prompt_embedding`` in BBT's ``modeling_bert.py``). What a
  :class:`fedtext.backbone.prompts.SplitPrompt`'s offsets are (:data:`SPLIT_OFFSETS`).

``prompt-injection=input-embedding`` (:data:`fedtext.common.config.PROMPT_INJECTIONS`) needs none:
its ``p0 + A z`` *is* the prompt's input embeddings (:func:`fedtext.backbone.prompts.project`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from fedtext.common.config import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class Injection:
    """One place of an encoder where per-prompt values are added during an encoder call.

    Parameters
    ----------
    encoder
        The encoder the values enter (a backbone's, or a trainable copy's own modules).
    model
        The model's name, for the one-line error of an encoder without that place.
    """

    name: ClassVar[str]

    def __init__(self, encoder: PreTrainedModel, model: str) -> None:
        self.encoder = encoder
        self.model = model

    @contextlib.contextmanager
    def added(self, values: Tensor, rows: int) -> Iterator[None]:
        """While open, every call of the encoder adds ``values`` ``[P, ...]`` (one entry per
        prompt) to its rows: the call's ``P * rows`` sequences are prompt-major (row ``i``
        belongs to prompt ``i // rows``)."""
        raise NotImplementedError


class EmbeddingOutput(Injection):
    """Offsets ``[P, T, D]`` added to the embedding layer's output at positions ``1..T``."""

    name = "embedding-output"

    def __init__(self, encoder: PreTrainedModel, model: str) -> None:
        super().__init__(encoder, model)
        layer = getattr(encoder, "embeddings", None)
        if not isinstance(layer, torch.nn.Module):
            raise ConfigError(f"prompt-injection=embedding-output needs an encoder with an embedding layer module "
                              f"(BERT/RoBERTa-style 'embeddings'); model '{model}' has none: use "
                              "prompt-injection=input-embedding")
        self.layer = layer  # word + position (+ type) embeddings and LayerNorm

    @contextlib.contextmanager
    def added(self, values: Tensor, rows: int) -> Iterator[None]:
        p, t, d = values.shape
        flat = values[:, None].expand(p, rows, t, d).reshape(p * rows, t, d)

        def add(_module: torch.nn.Module, _inputs: tuple, out: Tensor) -> Tensor:
            return torch.cat([out[:, :1], out[:, 1 : 1 + t] + flat.to(out.device, out.dtype), out[:, 1 + t :]], dim=1)

        handle = self.layer.register_forward_hook(add)
        try:
            yield
        finally:
            handle.remove()


# Injection name -> its class.
INJECTIONS: dict[str, type[Injection]] = {injection.name: injection for injection in (EmbeddingOutput,)}
SPLIT_OFFSETS = EmbeddingOutput.name  # where a SplitPrompt's offsets enter (fedtext.backbone.prompts.SplitPrompt)


def injection(name: str, encoder: PreTrainedModel, model: str) -> Injection:
    """The registered injection ``name`` on ``encoder`` (one-line error where it cannot go)."""
    kind = INJECTIONS.get(name)
    if kind is None:
        raise ValueError(f"injection must be one of {', '.join(INJECTIONS)}, got {name!r}")
    return kind(encoder, model)
