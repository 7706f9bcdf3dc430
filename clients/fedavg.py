"""FedAvg client: full fine-tuning of the encoder and the ``linear`` head on the shots."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import NDArrays, Scalar

from fedtext.client.numpy_client import FedTextClient, client_seed, minibatches
from fedtext.methods.fedavg.model import FedAvgModel


class FedAvgClient(FedTextClient):
    """AdamW for ``fedavg.local-steps`` mini-batches of ``fedavg.batch-size`` shots.

    The downloaded weights go into this client's own trainable copy of the backbone
    (``self.model.network``; the process's frozen backbone is never touched, so
    clients hosted in one process never see each other's weights). Dropout is on
    while training (the encoder's ``train()`` mode), off for evaluation. The
    randomly initialised head learns with ``fedavg.head-lr``, the pretrained encoder
    with ``fedavg.lr``. Uploads every trained tensor, float32.
    """

    model: FedAvgModel

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        net = self.model.load(arrays)
        head = [p for n, p in net.named_trainable() if n.startswith("head.")]
        body = [p for n, p in net.named_trainable() if not n.startswith("head.")]
        opt = torch.optim.AdamW([{"params": body, "lr": mc.lr}, {"params": head, "lr": mc.head_lr}])
        seed = client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0)))
        torch.manual_seed(seed)  # dropout masks
        rng = np.random.default_rng(seed)
        net.encoder.train()
        try:
            loss = self.gradient_steps(minibatches(self.train_batch, mc.batch_size, mc.local_steps, rng),
                                       lambda batch: net.forward(None, batch), opt, mc.local_steps)
        finally:
            net.encoder.eval()
        return net.trainable_arrays(), len(self.train_batch), loss
