"""FeS's representational filter (eq. (2)): k-nearest-neighbour sets of the pool, the diverse
subset kept (eq. (2) exactly, or the authors' vote-k variant of it), and how many are kept.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


# ----------------------------------------------------------------------- filtering
def keep_count(n: int, ratio: float) -> int:
    """Texts the filter keeps of a client's ``n``: ``int(n * ratio)``, truncated, as the
    authors' ``select_num = int(len(unlabeled_data) * args.vote_k)`` (``pet/modeling.py``).
    Below one text (``n * ratio < 1``) it is 0: the client then has no candidate and labels
    nothing, as theirs (an empty selection skips the labelling)."""
    return int(n * ratio)


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
    """Greedy selection of eq. (2) (§3.2) on k-NN sets ``neighbours[x] = V(x)``
    (``fes.vote=eq2``, the default).

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


def votek_filter(neighbours: np.ndarray, keep: int, rho: float) -> list[int]:
    """The authors' selection (``fed/selective_annotating.py``, ``fast_votek``, from vote-k)
    on the same k-NN sets (``fes.vote=votek``): eq. (2)'s greedy choice, except that

    * a chosen text no longer votes: its term leaves every score (eq. (2) keeps it,
      weighted ``rho^-|V(x) ∩ L|``);
    * a text nobody votes for (``E(u)`` empty) is never chosen, and the selection stops
      when no unchosen text has an unchosen voter (their loop would then pick an already
      chosen text again: fewer than ``keep`` ids come back);
    * ties go to the text first in their ``votes`` list: more votes first, then the text
      that got its first vote earlier (voters in id order, each voting for its ``V(x)``
      from the least similar on, as ``argsort(...)[-k-1:-1]`` lists them).

    Scores are summed voter by voter in id order with Python's ``rho ** -t`` powers, as
    theirs, so sums that are equal, or differ in the last bit, are equal or differ exactly
    as there. Returns the ids in selection order.
    """
    n = len(neighbours)
    votes = np.zeros((n, n))  # votes[x, u] = 1 iff u in V(x)
    first = np.full(n, n * n, dtype=np.int64)  # when u got its first vote: voter x, then place in x's list
    for x, vs in enumerate(neighbours):
        votes[x, vs] = 1.0
        for j, u in enumerate(vs[::-1]):  # least similar first
            first[u] = min(first[u], x * n + j)
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((first, -votes.sum(axis=0)))] = np.arange(n)  # place in their `votes` list
    powers = np.array([rho ** -t for t in range(n + 1)])  # Python's float pow, as theirs
    times = np.zeros(n, dtype=np.int64)  # |V(x) ∩ L| per voter x
    free = np.ones(n, dtype=bool)
    chosen: list[int] = []
    for _ in range(min(keep, n)):
        weight = np.where(free, powers[times], 0.0)  # a chosen voter no longer votes
        score = np.cumsum(votes * weight[:, None], axis=0)[-1]  # voter by voter, in id order
        live = free & (votes[free].sum(axis=0) > 0)  # unchosen, with an unchosen voter
        if not live.any():
            break
        tied = np.flatnonzero(live & (score == score[live].max()))
        u = int(tied[np.argmin(rank[tied])])
        chosen.append(u)
        free[u] = False
        times += votes[:, u].astype(np.int64)
    return chosen


# ``fes.vote``: (k-NN sets, how many, rho) -> chosen ids in selection order
# (fedtext.methods.fes.config.VOTE_NAMES lists the names; tests/unit/test_fes.py checks the two agree)
VOTES: dict[str, Callable[[np.ndarray, int, float], list[int]]] = {
    "eq2": representational_filter,
    "votek": votek_filter,
}
