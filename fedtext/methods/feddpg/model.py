"""FedDPG's model: the prompt generator G (eqs. (2)-(3)) on the frozen backbone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedtext.backbone import Backbone, EncodedBatch
from fedtext.common.comm import ArraySpec
from fedtext.methods.feddpg.config import PADDED_LENGTH
from fedtext.learning.model import Model

if TYPE_CHECKING:
    from fedtext.common.config import RunConfig


def make_generator(dim: int, hidden: int, prompts: int) -> torch.nn.Sequential:
    """G of eq. (2): ``Linear(D, h) -> ReLU -> Linear(h, |P|·D)``."""
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, prompts * dim))


def mean_embedding(backbone: Backbone, batch: EncodedBatch, pad_to: int = 0) -> torch.Tensor:
    """ē per text ``[B, D]``: the mean word embedding over its n attended tokens (eq. 2's
    (1/n) Σ e_i), or with ``pad_to`` = N > 0 over N positions, the text's n tokens and
    N - n copies of the padding token's embedding (the authors' code: every text padded to
    N = 128, ``inputs_embeds.mean(dim=1)``); a text longer than N counts its n tokens."""
    tok = backbone.token_embeddings(batch.input_ids)  # [B, L, D], on the CPU where G lives
    w = batch.attention_mask.unsqueeze(-1).to(tok.dtype)
    total, n = (tok * w).sum(1), w.sum(1)
    if pad_to:
        pad = backbone.token_embeddings(torch.tensor([[backbone.pad_id]]))[0]  # [1, D], tok's dtype (same lookup)
        return (total + (pad_to - n).clamp(min=0.0) * pad) / n.clamp(min=float(pad_to))
    return total / n.clamp(min=1.0)


class FedDPGModel(Model):
    """G's weights are the global arrays; a text's prompt is ``G(ē)`` reshaped to ``[|P|, D]``."""

    @classmethod
    def inserted_positions(cls, cfg: "RunConfig") -> tuple[str, int]:
        return cfg.method_config.key("prompts"), cfg.method_config.prompts  # |P| generated vectors after [CLS]

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        self.generator = make_generator(backbone.dim, self.mcfg.hidden, self.mcfg.prompts)
        self.generator.requires_grad_(False)

    def global_specs(self) -> list[ArraySpec]:
        return [ArraySpec(f"generator.{n}", tuple(p.shape), "float32") for n, p in self.generator.named_parameters()]

    def initial_arrays(self) -> list[np.ndarray]:
        """G with PyTorch's default ``Linear`` initialisation, drawn from the run seed
        (every client starts from the server's copy)."""
        seed = int(np.random.SeedSequence([self.cfg.seed, 0xD96]).generate_state(1)[0])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            fresh = make_generator(self.backbone.dim, self.mcfg.hidden, self.mcfg.prompts)
        return [p.detach().numpy().astype(np.float32, copy=True) for p in fresh.parameters()]

    def load(self, arrays: Sequence[np.ndarray], trainable: bool = False) -> torch.nn.Sequential:
        """This model's G with ``arrays`` in it (``trainable``: gradients on)."""
        with torch.no_grad():
            for p, a in zip(self.generator.parameters(), arrays, strict=True):
                p.copy_(torch.as_tensor(np.asarray(a, dtype=np.float32)))
        self.generator.requires_grad_(trainable)
        return self.generator

    def arrays(self) -> list[np.ndarray]:
        """G's current weights, float32, in :meth:`global_specs` order."""
        return [p.detach().numpy().astype(np.float32, copy=True) for p in self.generator.parameters()]

    def prompts(self, batch: EncodedBatch) -> torch.Tensor:
        """Per-text prompts ``[B, |P|, D]`` = reshape(G(ē)) (eqs. 2-3)."""
        pad_to = PADDED_LENGTH if self.mcfg.mean_embedding == "padded" else 0
        e_bar = mean_embedding(self.backbone, batch, pad_to)
        return self.generator(e_bar).reshape(len(batch), self.mcfg.prompts, self.backbone.dim)

    def logits(self, batch: EncodedBatch) -> torch.Tensor:
        """Class logits ``[B, C]`` under the configured input (autograd as the caller set it)."""
        mode = self.mcfg.input
        if mode == "text":
            return self.backbone.forward(None, batch)
        prompts = self.prompts(batch)
        if mode == "prompt":  # [CLS] P [SEP]: the text is seen only through ē
            return self.backbone.forward(prompts, prompt_only(self.backbone, batch))
        return self.backbone.forward(prompts, batch)

    def evaluate(self, arrays: Sequence[np.ndarray], batches: Sequence[EncodedBatch]) -> tuple[float, float]:
        self.load(arrays)
        loss, correct, n = 0.0, 0, 0
        with torch.no_grad():
            for batch in batches:
                logits = self.logits(batch)
                loss += float(torch.nn.functional.cross_entropy(logits, batch.labels, reduction="sum"))
                correct += int((logits.argmax(-1) == batch.labels).sum())
                n += len(batch)
        return loss / max(n, 1), correct / max(n, 1)


def prompt_only(backbone: Backbone, batch: EncodedBatch) -> EncodedBatch:
    """``[CLS] [SEP]`` per row (the prompt goes between them), same labels."""
    b = len(batch)
    ids = torch.tensor([[backbone.cls_id, backbone.sep_id]] * b, dtype=torch.long)
    return EncodedBatch(ids, torch.ones_like(ids), batch.labels, None)
