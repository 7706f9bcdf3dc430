"""BBT (Fed) client: CMA-ES on z in a fixed random subspace, forward passes only."""

from __future__ import annotations

import numpy as np
from flwr.common import NDArrays, Scalar

from fedtext.learning.blackbox import WhitenedCMA
from fedtext.client.numpy_client import SubspaceClient, client_seed


class BBTFedClient(SubspaceClient):
    """BBT (Sun et al. 2022) from the downloaded z: ``local-steps`` CMA-ES iterations.

    Every population of ``bbt-fed.popsize`` candidate prompts ``p0 + A z_i`` is scored
    in one batched forward over the client's shots; the fitness is the mean
    cross-entropy. ``bbt-fed.average=z`` (BBT-Fed): start at N(z, sigma0^2 I), upload
    the final search mean. ``z-sigma-C`` (FedBPT Fig. 2's contrast): start at the
    downloaded (z, sigma, C) and upload the final (z, sigma, C), which the server averages.
    """

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        full = mc.average == "z-sigma-C"
        es = WhitenedCMA(
            mean=arrays[0],
            sigma=float(arrays[1][0]) if full else mc.sigma0,
            cov=np.asarray(arrays[2], dtype=np.float64) if full else None,
            popsize=mc.popsize,
            seed=client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0))),
            bound=mc.bound,
        )
        for _ in self.progress(range(mc.local_steps), "CMA-ES", unit="iterations"):
            es.tell(self.fitness(es.ask()))  # popsize candidates, one batched forward
        z = es.mean.astype(np.float32)
        final = float(self.fitness(z[None])[0])
        upload = [z, np.array([es.sigma], np.float32), es.cov.astype(np.float32)] if full else [z]
        return upload, len(self.train_batch), final
