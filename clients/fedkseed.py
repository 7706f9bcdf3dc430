"""FedKSeed client: zeroth-order full-parameter steps along the run's K seeds."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import NDArrays, Scalar

from fedtext.client.numpy_client import FedTextClient, client_seed, minibatches
from fedtext.methods.fedkseed.model import FedKSeedModel, seed_sums, zo_step


class FedKSeedClient(FedTextClient):
    """``fedkseed.local-steps`` zeroth-order steps on the shots (Qin et al. 2024, Algorithm 1's
    client): each draws a seed index uniformly from the K (seeded by run, client and round),
    scores one mini-batch at ``w +- eps z_k`` (two forwards, ``2 x batch`` model queries,
    no back-propagation) and moves ``w <- w - lr g z_k``.

    The encoder stays in eval mode (no dropout): the two losses of a step then differ only
    by the perturbation, which the estimate ``g`` assumes. Uploads ``G`` ``[K]``, the step's
    ``g`` summed per seed index (:func:`fedtext.methods.fedkseed.model.seed_sums`).
    """

    model: FedKSeedModel

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        net = self.model.load(arrays)
        params = [p for _, p in net.named_trainable()]
        rng = np.random.default_rng(client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0))))
        picks = rng.integers(0, mc.seeds, size=mc.local_steps)  # FedKSeed: uniform over the K seeds
        grads, step_losses = [], []
        batches = minibatches(self.train_batch, mc.batch_size, mc.local_steps, rng)
        try:
            for k, batch in zip(picks, self.progress(batches, "zeroth-order steps", mc.local_steps), strict=True):
                def loss(batch=batch) -> float:
                    with torch.no_grad():
                        return float(torch.nn.functional.cross_entropy(net.forward(None, batch), batch.labels))

                g, step_loss = zo_step(params, self.model.seeds[int(k)], mc.eps, mc.lr, loss)
                grads.append(g)
                step_losses.append(step_loss)
        finally:
            self.model.forget()  # the network no longer holds the downloaded A
        return [seed_sums(picks, grads, mc.seeds)], len(self.train_batch), float(np.mean(step_losses))
