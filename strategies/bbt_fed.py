"""BBT (Fed) baseline: BBT/CMA-ES clients, FedAvg of z on the server.

FedDLS App. B-C ("BBT (Fed)": federated training of z in eq. (12) with BBT on the
clients and FedAvg on the server); BBT is Sun et al. (2022). The prompt is
``p = p0 + A z`` with ``z in R^d`` and ``A`` a fixed random ``(T*D) x d`` projection
(:func:`fedtext.backbone.prompts.bbt_space`) that server and clients rebuild from the run seed
and never send. Config and model: :mod:`fedtext.methods.bbt_fed`.

Client must: start a CMA-ES (pycma, explicit per-client-per-round seed) at the
downloaded ``z`` with step size ``bbt-fed.sigma0`` and identity covariance, run
``bbt-fed.local-steps`` ask/tell iterations of ``bbt-fed.popsize`` candidates (each
population scored in one batched forward), and upload the final search mean ``z``
(float32 ``[d]``). The server averages the uploaded z weighted by examples (FedAvg).

Bytes per client-round, each way: ``d * 4 + 128`` (d=100: 528 B), where 128 is the
NPY header per array (:data:`fedtext.common.comm.NPY_HEADER_BYTES`).

``bbt-fed.average=z-sigma-C`` is the contrast of FedBPT's Figure 2: clients also upload
their final step size sigma and covariance C and the server averages all three
(example-weighted, like z) and sends them back; each way ``4 (d + 1 + d^2) + 3*128`` B.
"""

from __future__ import annotations

from fedtext.server.strategy import FedTextStrategy


class BBTFed(FedTextStrategy):
    """FedAvg of BBT's z (and sigma, C in ``z-sigma-C`` mode): the base :meth:`aggregate`."""
