"""Fed P-tuning v2 client: prefix keys and values at every layer, tuned by back-propagation."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import NDArrays, Scalar

from fedtext.client.numpy_client import FedTextClient, client_seed, minibatches
from fedtext.methods.fedptuning_v2.model import DeepPromptModel


class FedPTuningV2Client(FedTextClient):
    """Adam on ``prefix.key`` and ``prefix.value`` ``[L, T, D]`` for
    ``fedptuning-v2.local-steps`` mini-batches of ``fedptuning-v2.batch-size``; the
    encoder's weights get no gradient (they are the process's frozen backbone)."""

    model: DeepPromptModel

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        keys, values = (torch.tensor(np.asarray(a, dtype=np.float32), requires_grad=True) for a in arrays)
        opt = torch.optim.Adam([keys, values], lr=mc.lr)
        rng = np.random.default_rng(client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0))))
        loss = self.gradient_steps(minibatches(self.train_batch, mc.batch_size, mc.local_steps, rng),
                                   lambda batch: self.model.logits(keys, values, batch), opt, mc.local_steps)
        out = [keys.detach().numpy().astype(np.float32), values.detach().numpy().astype(np.float32)]
        return out, len(self.train_batch), loss
