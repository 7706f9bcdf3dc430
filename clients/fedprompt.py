"""FedPrompt client: soft prompt tuned by back-propagation through the frozen PLM."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import NDArrays, Scalar

from fedtext.client import FedTextClient, client_seed


class FedPromptClient(FedTextClient):
    """Adam on the prompt ``[T, D]`` for ``local-steps`` mini-batches (``batch-size``).

    Mini-batches are drawn without replacement, reshuffled per pass over the shots.
    """

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        cfg = self.cfg
        prompt = torch.tensor(np.asarray(arrays[0], dtype=np.float32), requires_grad=True)
        opt = torch.optim.Adam([prompt], lr=cfg.lr)
        rng = np.random.default_rng(client_seed(cfg, self.partition_id, int(config.get("server_round", 0))))
        n = len(self.train_batch)
        order, pos, step_losses = rng.permutation(n), 0, []
        for _ in range(cfg.local_steps):
            if pos >= n:
                order, pos = rng.permutation(n), 0
            idx = order[pos : pos + cfg.batch_size]
            pos += cfg.batch_size
            batch = self.train_batch.take(idx)
            loss = torch.nn.functional.cross_entropy(self.backbone.forward(prompt, batch), batch.labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step_losses.append(float(loss))
        return [prompt.detach().numpy().astype(np.float32)], n, float(np.mean(step_losses))

    def prompt_of(self, arrays: NDArrays) -> np.ndarray:
        return np.asarray(arrays[0], dtype=np.float32)
