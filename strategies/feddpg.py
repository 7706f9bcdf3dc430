"""FedDPG: uniform FedAvg of the dynamic prompt generator G; FedDPGu's replacement.

Shakeri et al. (``../shared/papers/004_03995fac2178d15f.txt``); config, model and the
unlearning update: :mod:`fedtext.methods.feddpg`.

Client must: load the downloaded G (four float32 tensors, ``model.global_specs()``),
take ``feddpg.local-steps`` AdamW steps (``feddpg.lr``, ``feddpg.batch-size``) on its
labelled examples with the prompts ``G(ē)`` of each text in front of the frozen PLM,
and upload G. In the unlearning round (``unlearn=1`` in its fit config) the client
named by ``feddpg.unlearn-client`` runs :func:`fedtext.methods.feddpg.unlearning.unlearn` instead
(eq. 5), uploads G_c^u with the forget/retained accuracies before and after as
metrics, and never trains on the forgotten examples again.

Server: eq. (1), the *uniform* mean of the selected clients' G ("all clients
contribute equally ... regardless of dataset size"). In round ``feddpg.unlearn-round``
only the unlearning client is sent a fit instruction, and the global G is *replaced*
by its upload (§3.3.1, G_global^{t+1} ← G_c^u), no averaging; the replaced G is kept
in the run folder as ``before-unlearning.npz``. Bytes per client-round,
each way: ``4·#G + 4·128`` (D=384, h=20, |P|=10: 353,872 B).
"""

from __future__ import annotations

import logging

import numpy as np
from flwr.common import Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedtext.server import sampling
from fedtext.common.config import ConfigError
from fedtext.methods.feddpg.config import BEFORE_UNLEARNING, UNLEARN_METRICS
from fedtext.server.release import Released
from fedtext.server.strategy import FedTextStrategy
from fedtext.server.validation import Upload

log = logging.getLogger("fedtext")



class FedDPG(FedTextStrategy):
    """Uniform mean of G (eq. 1); G ← G_c^u in the unlearning round (§3.3.1)."""

    def is_unlearn_round(self, server_round: int) -> bool:
        return bool(self.mcfg.unlearn_round) and server_round == self.mcfg.unlearn_round

    def sample_clients(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        if not self.is_unlearn_round(server_round):
            return super().sample_clients(server_round, client_manager)
        client_manager.wait_for(1, timeout=sampling.CONNECT_TIMEOUT_S)  # read at call time: tests shorten it
        want = str(self.mcfg.unlearn_client)
        found = [p for p in self.sampler.clients(client_manager, participants_only=False)
                 if self.sampler.info(p)["partition_id"] == want]
        if not found:
            raise ConfigError(f"feddpg.unlearn-client={want} is not a connected client's partition id")
        return found[:1]

    def fit_config(self, server_round: int) -> dict[str, Scalar]:
        return {**super().fit_config(server_round), "unlearn": int(self.is_unlearn_round(server_round))}

    def release(self, server_round: int, uploads: list[Upload]) -> Released:
        """The release step, except in the unlearning round: G ← G_c^u is the unlearned G itself
        (§3.3.1), which ``update-clip`` < 1 would shorten (dp=central is refused with unlearning, and
        FedDPG takes no SecAgg+: nothing else could touch it)."""
        if self.is_unlearn_round(server_round):
            return Released(uploads)
        return super().release(server_round, uploads)

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray] | None, dict[str, Scalar]]:
        if self.is_unlearn_round(server_round):
            (upload,) = uploads  # only the unlearning client was asked
            # declared, so checked before this reads them (a string here ended the run in float())
            metrics = {s.name: float(upload.metrics[s.name]) for s in UNLEARN_METRICS if s.name in upload.metrics}
            log.info("feddpg round %d: G replaced by client %s's unlearned G (forget acc %.3f -> %.3f)",
                     server_round, upload.partition_id, metrics.get("forget_accuracy_before", float("nan")),
                     metrics.get("forget_accuracy_after", float("nan")))
            if self.recorder is not None:  # the replaced G stays on disk: an operator can compare or roll back
                specs = self.model.global_specs()
                np.savez(self.recorder.dir / BEFORE_UNLEARNING,
                         **{s.name: a for s, a in zip(specs, self.global_arrays, strict=True)})
            # the partition it is bound to (a node only ever known by its node id: not a number)
            unlearned = float(upload.partition_id) if str(upload.partition_id).isdigit() else float("nan")
            # server-optimizer's moments were built from training that saw the forgotten examples: a
            # momentum would carry the unlearned G back along their direction, so they start afresh
            self.server_opt.reset()
            return upload.array_list(), {**metrics, "unlearned_client": unlearned}
        # eq. (1)'s uniform mean, then server-optimizer's step (the replacement above bypasses it: §3.3.1's
        # G <- G_c^u is the unlearned model itself, not a pseudo-gradient)
        mean, metrics = self.combine(uploads, [1] * len(uploads))
        return self.server_update(server_round, mean), metrics
