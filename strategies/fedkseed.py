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
non-finite value (its spec), and then one whose largest ``|G[k]|`` exceeds
``fedkseed.round-factor`` times the round's median upload scale
(:func:`fedtext.methods.fedkseed.model.round_outliers`, in :meth:`FedKSeedStrategy.validate`).

Bytes per client-round, each way: ``4 K + 128`` (K = 64: 384 B).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.common import FitRes, Scalar
from flwr.server.client_proxy import ClientProxy

from fedtext.methods.fedkseed.model import UPLOAD, accumulate, round_outliers
from fedtext.server.strategy import FedTextStrategy
from fedtext.server.validation import Upload


class FedKSeedStrategy(FedTextStrategy):
    """The accumulator A is the global model; a round adds the clients' weighted mean G."""

    def validate(self, results: list[tuple[ClientProxy, FitRes]], failures: list[Any]) -> list[Upload]:
        """The uploads that pass every client's checks and are in scale with the round's
        (:func:`fedtext.methods.fedkseed.model.round_outliers`): a statistic over the round,
        so it runs once every upload is decoded; each one dropped is noted with its reason.
        The others are aggregated exactly as if it had never been sent."""
        uploads = super().validate(results, failures)
        reasons = round_outliers([u.arrays[UPLOAD] for u in uploads], self.mcfg.round_factor)
        for upload, reason in zip(uploads, reasons, strict=True):
            if reason is not None:
                self.validator.drop(self.record, upload.partition_id, reason)
        return [u for u, reason in zip(uploads, reasons, strict=True) if reason is None]

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray] | None, dict[str, Scalar]]:
        a = accumulate(self.global_arrays[0], [u.arrays[UPLOAD] for u in uploads], [u.num_examples for u in uploads])
        # seeds_used: how many z_k a replay of the new model draws (its cost: one d-vector each)
        return [a], {"seeds_used": int(np.count_nonzero(a))}
