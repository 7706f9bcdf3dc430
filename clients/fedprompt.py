"""FedPrompt client: soft prompt tuned by back-propagation through the frozen PLM."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import NDArrays, Scalar

from fedtext.client.numpy_client import FedTextClient, client_seed, minibatches


class FedPromptClient(FedTextClient):
    """Adam on the prompt ``[T, D]`` for ``fedprompt.local-steps`` mini-batches of
    ``fedprompt.batch-size`` (``fedprompt.lr``).

    Mini-batches are drawn without replacement, reshuffled per pass over the shots.
    """

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        prompt = torch.tensor(self.model.prompt(arrays), requires_grad=True)
        opt = torch.optim.Adam([prompt], lr=mc.lr)
        rng = np.random.default_rng(client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0))))
        loss = self.gradient_steps(minibatches(self.train_batch, mc.batch_size, mc.local_steps, rng),
                                   lambda batch: self.backbone.forward(prompt, batch), opt, mc.local_steps)
        return [prompt.detach().numpy().astype(np.float32)], len(self.train_batch), loss
