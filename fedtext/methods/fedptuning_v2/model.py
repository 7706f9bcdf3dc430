"""P-tuning v2's model: prefix keys and values at every layer."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from fedtext.backbone import Backbone, EncodedBatch
from fedtext.backbone.architectures import architecture_of
from fedtext.common.comm import ArraySpec
from fedtext.learning.model import Model

if TYPE_CHECKING:
    from fedtext.common.config import RunConfig


def attention_projections(backbone: Backbone) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """The (key, value) projection modules of each self-attention, in layer order, as the
    encoder's architecture names them (:mod:`fedtext.backbone.architectures`: BERT's and
    RoBERTa's ``attention.self.key`` / ``.value``, MPNet's ``attention.attn.k`` / ``.v``); one
    ``ConfigError`` line for an encoder of another family."""
    return architecture_of(backbone.encoder, backbone.name, "fedptuning-v2").key_value(backbone.encoder)


@contextlib.contextmanager
def deep_prompts(backbone: Backbone, keys: torch.Tensor, values: torch.Tensor) -> Iterator[None]:
    """While open, positions 1..T of every self-attention's keys/values are the prefixes
    ``keys[l]`` / ``values[l]`` ``[T, D]``. Hooks live only inside the block, so the
    process's shared frozen backbone is untouched outside it."""
    t = keys.shape[1]

    def overwrite(prefix: torch.Tensor):
        def hook(_mod: torch.nn.Module, _inp: tuple, out: torch.Tensor) -> torch.Tensor:
            # the prefix in the projection's dtype and on its device (the trained keys/values stay
            # float32 on the CPU, autograd follows the copy)
            return torch.cat([out[:, :1], prefix.to(out).expand(out.shape[0], t, out.shape[-1]), out[:, 1 + t:]], 1)
        return hook

    handles = []
    try:
        for layer, (k, v) in enumerate(attention_projections(backbone)):
            handles.append(k.register_forward_hook(overwrite(keys[layer])))
            handles.append(v.register_forward_hook(overwrite(values[layer])))
        yield
    finally:
        for h in handles:
            h.remove()


class DeepPromptModel(Model):
    """Prefix keys and values ``[L, T, D]`` are the global arrays."""

    natural_prompt: ClassVar[bool] = True  # T natural tokens' keys and values start every layer's prefix

    @classmethod
    def inserted_positions(cls, cfg: "RunConfig") -> tuple[str, int]:
        return "prompt-length", cfg.prompt_length  # T placeholders after [CLS], overwritten in every layer

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        self.layers = len(attention_projections(backbone))

    def global_specs(self) -> list[ArraySpec]:
        shape = (self.layers, self.cfg.prompt_length, self.backbone.dim)
        return [ArraySpec("prefix.key", shape, "float32"), ArraySpec("prefix.value", shape, "float32")]

    def initial_arrays(self) -> list[np.ndarray]:
        """Each layer's keys and values of T seeded natural tokens (see module doc)."""
        rng = np.random.default_rng([self.cfg.seed, 0x9A0])  # the same tokens as the other methods' p0
        ids = rng.choice(self.backbone.natural_token_ids(), size=self.cfg.prompt_length, replace=False)
        b = self.backbone
        # float32 on any precision: the round-0 arrays are the same whatever a run computes in
        seq = torch.tensor([[b.cls_id, *ids.tolist(), b.sep_id]], device=b.device)
        captured: list[torch.Tensor] = []
        handles = [m.register_forward_hook(lambda _m, _i, out: captured.append(out[0, 1:-1].detach().clone()))
                   for pair in attention_projections(b) for m in pair]
        try:
            with torch.no_grad():
                b.encoder(input_ids=seq, attention_mask=torch.ones_like(seq))
        finally:
            for h in handles:
                h.remove()
        keys, values = torch.stack(captured[0::2]), torch.stack(captured[1::2])
        return [keys.cpu().numpy().astype(np.float32), values.cpu().numpy().astype(np.float32)]

    def logits(self, keys: torch.Tensor, values: torch.Tensor, batch: EncodedBatch) -> torch.Tensor:
        """Logits ``[B, C]`` with the prefixes in place (autograd as the caller set it)."""
        placeholder = keys.new_zeros(self.cfg.prompt_length, self.backbone.dim)
        with deep_prompts(self.backbone, keys, values):
            return self.backbone.forward(placeholder, batch, pool_prompt=False)

    def evaluate(self, arrays: Sequence[np.ndarray], batches: Sequence[EncodedBatch]) -> tuple[float, float]:
        keys, values = (torch.as_tensor(np.asarray(a, dtype=np.float32)) for a in arrays)
        loss, correct, n = 0.0, 0, 0
        with torch.no_grad():
            for batch in batches:
                logits = self.logits(keys, values, batch)
                loss += float(torch.nn.functional.cross_entropy(logits, batch.labels, reduction="sum"))
                correct += int((logits.argmax(-1) == batch.labels).sum())
                n += len(batch)
        return loss / max(n, 1), correct / max(n, 1)
