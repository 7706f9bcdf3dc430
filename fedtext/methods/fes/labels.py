"""Gold and pseudo labels: each client's gold shots and pool, how pseudo labels are picked."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedtext.methods.fes.config import FewShotConfig

PSEUDO_PICK_SALT = 0x9E1  # seeds pseudo_pick's RNG apart from every other draw of a client-round
LABEL_SALT = 0x1AB  # the server's draw of G_label, a stream apart from G_train's (fedtext.server.sampling.TRAIN_SALT)


# ------------------------------------------------------------------ data placement
def gold_count(cfg: FewShotConfig, partition_id: int) -> int:
    """Gold labels client ``partition_id`` holds: ``gold-labels`` split over clients
    ``0..L-1`` as evenly as possible (the first ``G mod L`` get one more)."""
    L = cfg.labelled_clients
    if partition_id >= L:
        return 0
    return cfg.gold_labels // L + (1 if partition_id < cfg.gold_labels % L else 0)


def split_pool(cfg: FewShotConfig, seed: int, partition_id: int, pool_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(gold rows, unlabelled rows) of a client's pool of ``pool_size`` texts, seeded.

    Gold rows come first in one permutation, then ``unlabeled-size`` unlabelled ones;
    with ``oracle`` every one of those texts is gold (the Full-set reference labels the
    same texts the few-shot methods see).
    """
    order = np.random.default_rng([seed, partition_id, 0xFE5]).permutation(pool_size)
    g = min(gold_count(cfg, partition_id), pool_size)
    u = pool_size - g if cfg.unlabeled_size == 0 else min(cfg.unlabeled_size, pool_size - g)
    if cfg.oracle:
        return np.sort(order[: g + u]), np.arange(0)
    return np.sort(order[:g]), np.sort(order[g : g + u])


# ------------------------------------------------------------------ pseudo labels
def pseudo_target(target: int, gold: int, gold_in_target: bool) -> int:
    """New pseudo labels a client keeps when its pace says ``target`` (§2.3, §3.1): all of
    them (ours), or ``target - gold`` (never below 0) when its ``gold`` labels count toward
    the target (``gold-in-target``; the authors' ``num_new_examples = augmented_point -
    len(train_data)``). Where ``gold >= target`` the authors skip labelling and keep the
    previous pseudo labels; here the client then holds none (its target is 0)."""
    return max(0, target - gold) if gold_in_target else target


def pick_top_k(probs: np.ndarray, target: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """§2.3's "top k highest confidence": the ``target`` rows of ``probs`` ``[N, C]`` with
    the largest softmax maximum (ties: lowest row), most confident first, and their argmax
    labels. ``rng`` is unused (the signature of :data:`PSEUDO_PICKS`)."""
    rows = np.argsort(-probs.max(1), kind="stable")[:target]
    return rows, probs.argmax(1)[rows]


def pick_class_quota(probs: np.ndarray, target: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The authors' pseudo-label choice (``pet/ipet.py``: ``generate_fedipet_train_sets``,
    ``generate_ipet_train_set`` and ``_draw_examples_by_label_probability``): each row gets
    its argmax label; class ``c`` gets the quota ``int(n_c * (target / N))`` (``n_c`` rows
    predicted ``c``), in floats as theirs (``multiplier = num_new_examples /
    len(train_data)``, ``int(epl * multiplier)``): one below the exact floor where the
    float product falls just under an integer (``49 * (1/49) = 0.999...``); the floors may
    leave the total below ``target``, as there. Each quota is drawn without replacement
    from its rows with probability proportional to their softmax maximum
    (``rng.choice(rows, size, replace=False, p)``). Rows come class by class. ``target >= 0``.

    The authors' ``n_c`` counts the labels the client's unlabelled examples carry (their
    ``train_data`` argument is the unlabelled set): the *true* labels, which no client
    knows, the first time, then the predictions their previous labelling wrote into the
    same objects. Here it counts the current predictions, so that a quota never exceeds
    its class (they upsample a class by repeating its texts then). Their
    RNG is ``np.random.RandomState(seed)`` made afresh every round; ``rng`` here is seeded
    per (run seed, client, round) by the caller (given a ``RandomState(seed)`` instead, the
    draws are theirs: ``tools/reference/fes.py``).
    """
    n, labels, conf = len(probs), probs.argmax(1), probs.max(1)
    multiplier = min(target, n) / n if n else 0.0  # the authors' num_new_examples / len(train_data)
    rows_out, labels_out = [np.zeros(0, dtype=int)], [np.zeros(0, dtype=int)]
    for c in range(probs.shape[1]):
        rows = np.flatnonzero(labels == c)
        quota = int(len(rows) * multiplier)  # int(n_c * (target / N)) in floats, as theirs
        if quota:
            rows_out.append(rng.choice(rows, size=quota, replace=False, p=conf[rows] / conf[rows].sum()))
            labels_out.append(np.full(quota, c))
    return np.concatenate(rows_out), np.concatenate(labels_out)


# ``pseudo-pick``: (softmax rows, how many, seeded RNG) -> (chosen rows, their labels)
PSEUDO_PICKS: dict[str, Callable[[np.ndarray, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]] = {
    "top-k": pick_top_k,
    "class-quota": pick_class_quota,
}
