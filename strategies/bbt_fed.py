"""BBT (Fed) baseline: BBT/CMA-ES clients, FedAvg of z on the server.

FedDLS App. B-C ("BBT (Fed)": federated training of z in eq. (12) with BBT on the
clients and FedAvg on the server); BBT is Sun et al. (2022). The prompt is
``p = p0 + A z`` with ``z in R^d`` and ``A`` a fixed random ``(T*D) x d`` projection
(:func:`fedtext.prompts.bbt_space`) that server and clients rebuild from the run seed
and never send.

Client must: start a CMA-ES (pycma, explicit per-client-per-round seed) at the
downloaded ``z`` with step size ``sigma0`` and identity covariance, run
``local-steps`` ask/tell iterations of ``popsize`` candidates (each population scored
in one batched forward), and upload the final search mean ``z`` (float32 ``[d]``).
The server averages the uploaded z weighted by examples (FedAvg's ``aggregate_fit``).

Bytes per client-round, each way: ``d * 4 + 128`` (d=100: 528 B), where 128 is the
NPY header per array (:data:`fedtext.comm.NPY_HEADER_BYTES`).
"""

from __future__ import annotations

import numpy as np

from fedtext import comm
from fedtext.prompts import bbt_space, project
from fedtext.strategy import FedTextStrategy


class BBTFed(FedTextStrategy):
    """FedAvg of BBT's z; evaluates ``p0 + A z`` on the server."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.cfg
        self.p0, self.A = bbt_space(self.backbone, cfg.prompt_length, cfg.intrinsic_dim, cfg.seed)

    def initial_arrays(self) -> list[np.ndarray]:
        """z0 = 0, i.e. the round-0 prompt is p0."""
        return [np.zeros(self.cfg.intrinsic_dim, dtype=np.float32)]

    def upload_specs(self) -> list[comm.ArraySpec]:
        bound = self.cfg.bound or None
        return [comm.ArraySpec("z", (self.cfg.intrinsic_dim,), "float32", low=-bound if bound else None, high=bound)]

    def prompt_of(self, arrays: list[np.ndarray]) -> np.ndarray:
        return project(self.p0, self.A, arrays[0])
