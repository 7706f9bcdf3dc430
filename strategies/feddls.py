"""FedDLS: discrete local search clients, token-id upload, compressed download.

Paper: "Personalized Federated Learning for Text Classification with Gradient-Free
Prompt Tuning" (../shared/papers/000_332a35b1d96e4ed4.txt; §4, Algorithms 1-3,
eqs. 5-11, App. A-E). Config and model (p', the token-id upload and its checks):
:mod:`fedtext.methods.feddls`.

The global prompt p' (``[T, D]``) starts as the embeddings of T natural vocabulary
tokens drawn with the run seed (Alg. 1, "initialize p with natural token
embeddings"); server and clients both derive it, so round 1 downloads nothing.

Client must (:class:`clients.feddls.FedDLSClient`): rebuild p' from the p'_{-1} it
keeps in ``context.state`` plus the updates it is sent (config ``dls_from``/``dls_to``
name their versions), run ``feddls.steps`` steps of discrete local search (Alg. 3,
eqs. 6-7) on its shots, and upload one ``uint16`` per position -- the chosen token
id or :data:`fedtext.methods.feddls.codecs.SENTINEL` -- reporting ``dls_version`` (the p'
version it holds) in its metrics.

Server, per round: drop uploads whose ids are neither the sentinel nor natural-token
ids; rebuild each p_i (``e(id)`` where changed, p'^t elsewhere); average them with
uniform weights (eq. 5: "we adopt FedAvg ... and assume uniform weighting"); compress
with the ``feddls.compression`` codec (eqs. 8-11 or App. E) and make the new p' with the
same ``decode`` the clients run.

Download bytes per client-round (``lasso``, a client that took part last round):
``4 Phi T + 2 * 128`` (T=50, Phi=5: 1,256 B; the paper's 8 Kbit + NPY headers).
A client that missed rounds gets every residual it missed (``lasso`` is incremental),
one that never trained (a non-participant at evaluation) all of them; absolute codecs
(``full``, ``pca``, ``quant``) send only the latest. Upload: ``2 T + 128``.

Resync: a node that lost its state (a restarted SuperNode) holds p'_0 again and fails
the round it is sent residuals it cannot apply; :meth:`FedDLS.client_failed` then
forgets its version, so its next download brings it to the server's p' whichever way
is smaller: the absolute p' (``dls_absolute``, ``4 T D + 128`` B; T=50: 76,928 B) or
every update from p'_0 (with ``lasso``, ~1.3 KB per round so far; both give exactly
the server's p', the same ``decode`` running on both sides). Those bytes count in
``bytes_down`` and, apart, in the round's ``resync_bytes``. Update history and client versions are checkpointed
(``checkpoint_attrs``). A resumed run's nodes get their p' and version back from their
node-state journal (:mod:`fedtext.node.state`); the server, which keys versions by node id
and sees new node ids after a resume (simulation), sends them every update from p'_0
and each client applies only those after the version it holds (the first round after a
resume downloads more bytes than the uninterrupted run, with the same p'). A node
without a journal starts from p'_0 and is resynced as above.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from flwr.common import FitRes, Scalar
from flwr.server.client_proxy import ClientProxy

from fedtext.common import comm
from fedtext.common.config import RunConfig
from fedtext.methods.feddls.codecs import SENTINEL, codec_for, rebuild_prompt
from fedtext.learning.model import Model
from fedtext.server.strategy import FedTextStrategy
from fedtext.server.validation import Upload

log = logging.getLogger("fedtext")
PICKLED_ARRAY_BYTES = 512  # what pickle adds to one small ndarray's bytes (about 150: class, dtype, shape)


class FedDLS(FedTextStrategy):
    """FedAvg in embedding space of token-id uploads (eq. 5) + compressed download (Alg. 2).

    State: the global p' (``global_arrays[0]``, float32 ``[T, D]``), the list of
    round updates (update k turns version k-1 into version k; version 0 = the seeded
    initial prompt), and the version each client holds (by node id).
    """

    checkpoint_attrs = ("updates", "synced")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.vocab = self.backbone.vocab_embeddings()
        self.codec = codec_for(self.mcfg, self.backbone)
        self.updates: list[list[np.ndarray]] = []
        self.synced: dict[str, int] = {}
        self.resync: set[str] = set()  # nodes whose state was lost: their next download counts as resync

    @classmethod
    def checkpoint_state_bytes(cls, cfg: RunConfig, model: Model) -> int:
        """The update history: one codec update a round (:meth:`Codec.specs` of the ``[T, D]``
        prompt, plus ``PICKLED_ARRAY_BYTES`` of pickle framing an array), for every round."""
        t, d = model.global_specs()[0].shape
        update = sum(s.nbytes() + PICKLED_ARRAY_BYTES for s in codec_for(cfg.method_config, model.backbone).specs(t, d))
        return cfg.num_server_rounds * update

    @property
    def version(self) -> int:
        """Number of compressed updates made so far (= rounds aggregated)."""
        return len(self.updates)

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {f"update{k + 1}_{i}": a for k, u in enumerate(self.updates) for i, a in enumerate(u)}

    def download(self, server_round: int, proxy: ClientProxy, purpose: str) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        """The updates ``proxy`` has not received (incremental codec) or the latest one."""
        have = self.synced.get(proxy.cid, 0)
        if self.codec.incremental:
            pending = self.updates[have:]
        else:
            pending = self.updates[-1:] if have < self.version else []
        arrays = [a for update in pending for a in update]
        extra: dict[str, Scalar] = {"dls_from": self.version - len(pending), "dls_to": self.version}
        if proxy.cid in self.resync:
            self.resync.discard(proxy.cid)
            absolute = [np.asarray(self.global_arrays[0], dtype=np.float32)]  # p' itself, [T, D]
            if comm.expected_bytes(absolute) < comm.expected_bytes(arrays):
                arrays, extra = absolute, {"dls_from": self.version, "dls_to": self.version, "dls_absolute": 1}
            self.record.resync_bytes += comm.expected_bytes(arrays)
        return arrays, extra

    def validate(self, results: list[tuple[ClientProxy, FitRes]], failures: list[Any]) -> list[Upload]:
        """The base checks, after one of FedDLS's own: a ``dls_version`` (declared a whole
        number >= 0, :class:`fedtext.methods.feddls.config.FedDLSConfig`) above the server's
        version is dropped: no client can hold a p' the server has not made, and the server
        would send that client nothing until its rounds caught up."""
        kept = []
        for proxy, res in results:
            v = res.metrics.get("dls_version", 0)
            if v > self.version:
                self.validator.drop(self.record, self.sampler.info_if_known(proxy.cid),
                                    f"metric dls_version={v!r} is above the server's p' version {self.version}")
            else:
                kept.append((proxy, res))
        return super().validate(kept, failures)

    def client_failed(self, cid: str, phase: str, reason: str) -> None:
        """A node that lost its p' (:class:`clients.feddls.FedDLSClient` says "node state
        was lost") is resent everything from p'_0 next time."""
        if "node state was lost" in reason:
            self.synced[cid] = 0
            self.resync.add(cid)
            log.info("feddls: client %s lost its state; its next download resyncs it from p'_0",
                     self.sampler.info_if_known(cid))

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray], dict[str, Scalar]]:
        p_prev = self.global_arrays[0]
        ids = [u.arrays["ids"] for u in uploads]
        p = np.mean([rebuild_prompt(i, p_prev, self.vocab) for i in ids], axis=0)  # eq. (5)
        update = self.codec.encode(p, p_prev)
        p_new = self.codec.decode(update, p_prev)  # exactly what every client will rebuild
        self.updates.append(update)
        for u in uploads:
            self.synced[u.proxy.cid] = int(u.metrics.get("dls_version", self.synced.get(u.proxy.cid, 0)))
        residual = float(np.linalg.norm(p - p_prev))
        return [p_new], {
            "positions_changed": float(np.mean([(i != SENTINEL).sum() for i in ids])),
            "compression_rel_error": float(np.linalg.norm(p_new - p) / residual) if residual else 0.0,
            "update_bytes": comm.expected_bytes(update),
        }
