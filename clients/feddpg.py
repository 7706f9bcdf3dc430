"""FedDPG client: trains the prompt generator G through the frozen PLM; FedDPGu's unlearning."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import ConfigRecord
from flwr.common import NDArrays, Scalar

from fedtext.client.numpy_client import FedTextClient, client_seed, minibatches
from fedtext.methods.feddpg.model import FedDPGModel
from fedtext.methods.feddpg.unlearning import forget_split, unlearn, unlearn_seed


class FedDPGClient(FedTextClient):
    """AdamW on G for ``feddpg.local-steps`` mini-batches of ``feddpg.batch-size``.

    Each text's prompt is ``G(ē)`` (eqs. 2-3); the loss is eq. (4)'s cross-entropy
    (mean over the mini-batch); gradients reach G through the frozen encoder and
    nothing else. With ``unlearn=1`` in the fit config the client forgets
    ``feddpg.forget-fraction`` of its examples instead (:func:`fedtext.methods.feddpg.unlearning.unlearn`)
    and keeps their indices in ``context.state``, so that no later round trains on
    them again (journalled by :mod:`fedtext.node.state`: a resumed run keeps them too).
    """

    model: FedDPGModel
    FORGOTTEN_KEY = "feddpg.forgotten"

    def forgotten(self) -> np.ndarray:
        """Indices of this client's examples it has forgotten (none before unlearning)."""
        if self.FORGOTTEN_KEY in self.state:
            return np.asarray(self.state[self.FORGOTTEN_KEY]["indices"], dtype=np.int64)
        return np.zeros(0, dtype=np.int64)

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        server_round = int(config.get("server_round", 0))
        if int(config.get("unlearn", 0)):
            forget = forget_split(len(self.train_batch), mc.forget_fraction, self.cfg.seed, self.partition_id)
            new, metrics = unlearn(self.model, arrays, self.train_batch, forget,
                                   unlearn_seed(self.cfg, self.partition_id, server_round))
            self.state[self.FORGOTTEN_KEY] = ConfigRecord({"indices": [int(i) for i in forget]})
            self.fit_metrics.update(metrics)
            return new, len(self.train_batch) - len(forget), metrics["unlearn_loss"]
        keep = np.setdiff1d(np.arange(len(self.train_batch)), self.forgotten())
        batch = self.train_batch if len(keep) == len(self.train_batch) else self.train_batch.take(keep)
        gen = self.model.load(arrays, trainable=True)
        opt = torch.optim.AdamW(gen.parameters(), lr=mc.lr)
        rng = np.random.default_rng(client_seed(self.cfg, self.partition_id, server_round))
        loss = self.gradient_steps(minibatches(batch, mc.batch_size, mc.local_steps, rng), self.model.logits, opt,
                                   mc.local_steps)
        gen.requires_grad_(False)
        return self.model.arrays(), len(batch), loss
