"""FedBPT's input perturbation (Alg. 1 lines 12-16): clients score candidates on shots
whose text tokens are partly replaced by random natural tokens, so that a prompt found on a
few shots does not overfit them (§4.3)."""

from __future__ import annotations

import numpy as np
import torch

from fedtext.backbone import Backbone, EncodedBatch


def perturb(backbone: Backbone, batch: EncodedBatch, keep_rate: float, rng: np.random.Generator) -> EncodedBatch:
    """``X * M + X_hat * (1 - M)`` on the text tokens (FedBPT Alg. 1 lines 12-16).

    Each text token is kept with probability ``keep_rate`` (the mask M) and otherwise
    replaced by a random natural token of ``backbone``'s vocabulary (X_hat). [CLS], [SEP],
    padding and the head's template (with its [MASK]) are never touched. ``keep_rate=1``
    returns the batch unchanged.
    """
    if keep_rate >= 1:
        return batch
    ids, head = batch.input_ids, backbone.head_impl
    pos = torch.arange(ids.shape[1])
    end = batch.attention_mask.sum(1, keepdim=True) - 1 - len(head.suffix_ids)  # first suffix/[SEP] slot
    text = (pos >= 1 + len(head.prefix_ids)) & (pos < end)
    drop = torch.as_tensor(rng.random(ids.shape) >= keep_rate) & text
    random_ids = torch.as_tensor(rng.choice(backbone.natural_token_ids(), size=ids.shape))
    return EncodedBatch(torch.where(drop, random_ids, ids), batch.attention_mask, batch.labels, batch.mask_pos)
