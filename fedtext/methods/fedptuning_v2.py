"""Fed P-tuning v2's config and model: trainable prefix keys and values at every layer.

P-tuning v2 (Liu et al. 2022, "deep prompt tuning"), the "Fed P-tuning V2" baseline of
FedDPG's Table 1 (``../shared/papers/004_03995fac2178d15f.txt`` §4.1, Fig. 1): at each of
the L encoder layers, T trainable prefix vectors enter every attention as extra keys
and values (Li & Liang's prefix-tuning without the reparameterisation MLP, P-tuning
v2's default for classification); the PLM stays frozen; clients train the prefixes by
back-propagation and the server averages them (FedAvg, example-weighted, as FedPrompt).

How the prefixes enter: T placeholder positions are inserted after [CLS] (as every
prompt method here does), and at every layer forward hooks on the self-attention's
``key`` and ``value`` projections overwrite those positions' outputs with that layer's
prefix key ``K_l [T, D]`` and value ``V_l [T, D]``. So what text tokens attend to at
layer l is exactly ``[K_l; W_k h]`` / ``[V_l; W_v h]``, as with HF ``past_key_values``
(the text's positions shift by T, as they do there). The placeholders' own outputs
are left out of the pooled heads (``pool_prompt=False``): a prefix is keys and values,
not an output position.

Global arrays = upload = ``prefix.key`` and ``prefix.value``, float32 ``[L, T, D]`` each:
``2 · 4·L·T·D + 2·128`` B each way (MiniLM: L = 6, D = 384, T = 8: 147,712 B).
They start as the keys and values the frozen encoder computes at each layer for T
natural tokens drawn from the run seed (``[CLS] t_1..t_T [SEP]``), so the first
prefix already has the scale of real keys and values (P-tuning v2 draws them from
N(0, 1), far off the scale of a MiniLM key; the paper is silent).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from fedtext.backbone import Backbone, EncodedBatch
from fedtext.comm import ArraySpec
from fedtext.config import ConfigError, MethodConfig, check_range
from fedtext.model import Model

if TYPE_CHECKING:
    from fedtext.config import RunConfig


def attention_projections(backbone: Backbone) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """The (key, value) projection modules of each self-attention, in layer order
    (BERT-style encoders: ``...attention.self.key`` / ``.value``)."""
    mods = dict(backbone.encoder.named_modules())
    keys = [n for n in mods if n.endswith("attention.self.key")]
    if not keys:
        raise ConfigError(f"fedptuning-v2 needs a BERT-style encoder (attention.self.key/value); {backbone.name} has none")
    return [(mods[n], mods[n[: -len("key")] + "value"]) for n in keys]


@contextlib.contextmanager
def deep_prompts(backbone: Backbone, keys: torch.Tensor, values: torch.Tensor) -> Iterator[None]:
    """While open, positions 1..T of every self-attention's keys/values are the prefixes
    ``keys[l]`` / ``values[l]`` ``[T, D]``. Hooks live only inside the block, so the
    process's shared frozen backbone is untouched outside it."""
    t = keys.shape[1]

    def overwrite(prefix: torch.Tensor):
        def hook(_mod: torch.nn.Module, _inp: tuple, out: torch.Tensor) -> torch.Tensor:
            return torch.cat([out[:, :1], prefix.to(out.dtype).expand(out.shape[0], t, out.shape[-1]), out[:, 1 + t:]], 1)
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
        seq = torch.tensor([[b.cls_id, *ids.tolist(), b.sep_id]])
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
        return [keys.numpy().astype(np.float32), values.numpy().astype(np.float32)]

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


@dataclass(frozen=True)
class FedPTuningV2Config(MethodConfig):
    """``fedptuning-v2.*``: Adam on the prefixes."""

    name: ClassVar[str] = "fedptuning-v2"
    model_class: ClassVar[type] = DeepPromptModel
    strategy: ClassVar[str] = "strategies.fedptuning_v2:FedPTuningV2"
    client: ClassVar[str] = "clients.fedptuning_v2:FedPTuningV2Client"
    heads: ClassVar[tuple[str, ...]] = ("similarity", "tied", "mlm")

    local_steps: int = 4  # Adam steps per round
    lr: float = 5e-3  # P-tuning v2's classification learning rates are 5e-3 .. 1e-2
    batch_size: int = 16

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
