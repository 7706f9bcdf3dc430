"""FedDRS's model: FedAvg's whole network, named apart so the strategy can distil on it,
and the network below its word-embedding lookup that takes pseudo embeddings."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedtext.backbone import Backbone
from fedtext.common.comm import ArraySpec
from fedtext.backbone.heads import POOLED_HEADS, PooledHead
from fedtext.methods.fedavg.model import FedAvgModel


class FedDRSModel(FedAvgModel):
    """FedAvg's arrays (every weight, both ways); an upload adds ``label_counts`` [C]:
    the client's examples per label, from which the server draws γ_k."""

    def upload_specs(self) -> list[ArraySpec]:
        return [*self.global_specs(), ArraySpec("label_counts", (self.backbone.task.num_classes,), "float32")]

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        counts = upload["label_counts"]
        if (counts < 0).any() or counts.sum() <= 0:
            return f"label_counts must be >= 0 with a positive sum, got {counts.tolist()}"
        return None


class EmbeddingsNet:
    """A backbone seen from below its word-embedding lookup, where FedDRS's pseudo
    embeddings go (§4): the network ``f(θ; ω)`` of eqs. (6)-(8) that
    :mod:`fedtext.methods.feddrs.samplers` and :mod:`fedtext.methods.feddrs.distill` call.

    Parameters
    ----------
    backbone
        A teacher (a client's model loaded into a trainable copy) or the student; its head
        must be pooled (a pseudo-embedding has no ``[MASK]`` position to read).
    """

    def __init__(self, backbone: Backbone) -> None:
        if not isinstance(backbone.head_impl, PooledHead):  # before any forward, which would count queries
            raise ValueError(f"FedDRS's pseudo embeddings need a pooled head ({', '.join(POOLED_HEADS)}), "
                             f"not head={backbone.head}")
        self.backbone = backbone

    def embeds_logits(self, embeds: Tensor) -> Tensor:
        """Logits ``[N, C]`` with autograd of input embeddings ``[N, L, D]``, every position
        attended (position and type embeddings and the embedding LayerNorm still apply: in a
        BERT encoder they come after the lookup). Counts N model queries."""
        net = self.backbone
        att = torch.ones(embeds.shape[:2], dtype=torch.long, device=net.device)
        with net.precision.autocast():  # the encoder in the run's compute dtype, the head in float32
            hidden = net.encoder(inputs_embeds=embeds.to(net.device), attention_mask=att).last_hidden_state.float()
        net.counter.n += len(embeds)
        return net.head_impl.pooled_logits(net, hidden, att).cpu()
