"""FeS's representational filter (eq. (2)): k-nearest-neighbour sets of the pool, the diverse
subset kept.
"""

from __future__ import annotations

import numpy as np


# ----------------------------------------------------------------------- filtering
def knn_sets(embeddings: np.ndarray, k: int, centre: bool = False) -> np.ndarray:
    """``V(x)`` of §3.2: the ``k`` most cosine-similar other texts of each text, ``[N, k]``
    ids, most similar first (ties: lowest id). ``centre``: subtract the mean embedding
    first (the authors' code; ``fes.centre-proxy``)."""
    e = np.asarray(embeddings, dtype=np.float64)
    if centre:
        e = e - e.mean(axis=0, keepdims=True)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    sim = e @ e.T
    np.fill_diagonal(sim, -np.inf)
    k = min(k, len(e) - 1)
    return np.argsort(-sim, axis=1, kind="stable")[:, :k]


def representational_filter(neighbours: np.ndarray, keep: int, rho: float) -> list[int]:
    """Greedy selection of eq. (2) (§3.2) on k-NN sets ``neighbours[x] = V(x)``.

    ``score(u) = sum_{x in E(u)} rho^-|V(x) ∩ L|`` with ``E(u) = {x : u in V(x)}`` and
    ``L`` the texts chosen so far; the highest score is chosen (ties: lowest id), then
    scores are updated. Returns ``keep`` ids in selection order.

    Scores are float64 sums (a matrix product): two scores that are exactly equal under
    eq. (2) but summed from inexact powers (rho = 10: ``1 + 0.1 + 0.1 + 0.1`` in two
    orders) can differ in the last bit, and then the larger float wins, not the lower id.
    For rho a power of 2 every score is exact and the tie rule holds exactly.
    """
    n = len(neighbours)
    votes = np.zeros((n, n))  # votes[x, u] = 1 iff u in V(x)
    for x, vs in enumerate(neighbours):
        votes[x, vs] = 1.0
    in_l = np.zeros(n)  # |V(x) ∩ L| per x
    chosen: list[int] = []
    free = np.ones(n, dtype=bool)
    for _ in range(min(keep, n)):
        score = (rho ** -in_l) @ votes  # score[u] = sum_x votes[x, u] rho^-|V(x) ∩ L|
        score[~free] = -np.inf
        u = int(np.argmax(score))
        chosen.append(u)
        free[u] = False
        in_l += votes[:, u]
    return chosen
