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

``bbt-fed-average=z-sigma-C`` is the contrast of FedBPT's Figure 2: clients also upload
their final step size sigma and covariance C and the server averages all three
(example-weighted, like z) and sends them back; each way ``4 (d + 1 + d^2) + 3*128`` B.
"""

from __future__ import annotations

import numpy as np

from fedtext import comm
from fedtext.strategy import SubspaceStrategy


class BBTFed(SubspaceStrategy):
    """FedAvg of BBT's z; evaluates ``p0 + A z`` on the server."""


    def initial_arrays(self) -> list[np.ndarray]:
        """z0 = 0 (the round-0 prompt is p0); with ``z-sigma-C`` also sigma0 and C = I."""
        d = self.cfg.intrinsic_dim
        z = np.zeros(d, dtype=np.float32)
        if self.cfg.bbt_fed_average == "z":
            return [z]
        return [z, np.array([self.cfg.sigma0], np.float32), np.eye(d, dtype=np.float32)]

    def upload_specs(self) -> list[comm.ArraySpec]:
        d, bound = self.cfg.intrinsic_dim, self.cfg.bound or None
        specs = [comm.ArraySpec("z", (d,), "float32", low=-bound if bound else None, high=bound)]
        if self.cfg.bbt_fed_average == "z-sigma-C":
            specs += [comm.ArraySpec("sigma", (1,), "float32", low=1e-12), comm.ArraySpec("C", (d, d), "float32")]
        return specs

