"""FedKSeed: the server's step in seed space (Qin et al. 2024, Algorithm 1).

Config and model (the seeds, the replay, the math): :mod:`fedtext.methods.fedkseed`.

Client must: rebuild ``w = w_0 - lr sum_k A[k] z_k`` from the downloaded accumulator A
(:meth:`fedtext.methods.fedkseed.model.FedKSeedModel.load`), take ``fedkseed.local-steps``
zeroth-order steps (a seed index drawn uniformly from the K, two forwards on a mini-batch
of ``fedkseed.batch-size`` shots, ``w <- w - lr g z``), and upload its scalar gradients
summed per seed, ``G`` float32 ``[K]``.

Server: ``A <- A + sum_c (n_c / n) G_c`` (:func:`fedtext.methods.fedkseed.model.accumulate`).
An upload whose ``|G[k]|`` exceeds ``local-steps x grad-bound`` is dropped before this with
its reason (the model's ``check_upload``), as is one of the wrong length or with a
non-finite value (its spec).

Bytes per client-round, each way: ``4 K + 128`` (K = 64: 384 B).
"""

from __future__ import annotations

import numpy as np
from flwr.common import Scalar

from fedtext.methods.fedkseed.model import UPLOAD, accumulate
from fedtext.strategy import FedTextStrategy
from fedtext.validation import Upload


class FedKSeedStrategy(FedTextStrategy):
    """The accumulator A is the global model; a round adds the clients' weighted mean G."""

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray] | None, dict[str, Scalar]]:
        a = accumulate(self.global_arrays[0], [u.arrays[UPLOAD] for u in uploads], [u.num_examples for u in uploads])
        # seeds_used: how many z_k a replay of the new model draws (its cost: one d-vector each)
        return [a], {"seeds_used": int(np.count_nonzero(a))}
