"""FedDPGu's unlearning (§3.3, eq. (5)): the forget split, relabelling and the unlearning
update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedtext.backbone import EncodedBatch
from fedtext.backbone.devices import backward_step

if TYPE_CHECKING:
    from fedtext.common.config import RunConfig
from fedtext.methods.feddpg.model import FedDPGModel

# the unlearning update's optimizer (the paper names none): AdamW as the authors' code, or plain
# gradient steps, which move G in proportion to eq. (5)'s gradient instead of by ~lr per weight
UNLEARN_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


# ---------------------------------------------------------------------- FedDPGu
def forget_split(n: int, fraction: float, seed: int, partition_id: int) -> np.ndarray:
    """Indices (sorted) of the ``round(fraction · n)`` examples (at least 1) a client forgets,
    drawn from (seed, partition)."""
    k = min(n, max(1, round(fraction * n)))
    return np.sort(np.random.default_rng([seed, partition_id, 0xF06E7]).choice(n, size=k, replace=False))


def relabel(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """§3.3: each label replaced by one drawn uniformly from the *other* classes (ŷ ≠ y)."""
    labels = np.asarray(labels)
    shift = rng.integers(1, num_classes, size=labels.shape)  # 1..C-1: never the true class
    return (labels + shift) % num_classes


def accuracy(model: FedDPGModel, batch: EncodedBatch) -> float:
    """Accuracy of the model's current G on ``batch`` (its own labels)."""
    if not len(batch):
        return float("nan")
    with torch.no_grad():
        return float((model.logits(batch).argmax(-1) == batch.labels).float().mean())


def unlearning_loss(keep_logits: torch.Tensor | None, keep_labels: torch.Tensor, forget_logits: torch.Tensor,
                    relabels: torch.Tensor, lam: float, weighting: str = "sets") -> torch.Tensor:
    """Eq. (5) of FedDPG: ℓ(retained) + λ·ℓ(relabelled), cross-entropy, in one of two weightings.

    ``sets`` (default) takes each term's mean, mean_r CE + λ·mean_u CE: eq. (5) as
    written, Σ_i (ℓ(θ, y_c^i) + λ·ℓ(θ, y_c^u)), is n_c times that for one forgotten
    point, and λ then weighs the two sets whatever their sizes (λ = 1: half the loss is
    the relabelled set's). ``examples`` weighs each example, retained 1 and relabelled λ,
    (Σ_r CE + λ·Σ_u CE) / (n_r + λ·n_u): with λ = 1 it is the authors' code
    (``client_unlearn``: one cross-entropy over the client's data with the forgotten
    labels replaced in place), where the relabelled share of the loss is n_u / n_c
    (20% under §4.2.5's forget fraction). ``keep_logits = None``: nothing is retained.

    The retained set is *all* of the client's other training examples, full batch: §3.3
    trains on the relabelled data plus "some randomly selected correct samples" and does
    not say how many; the authors' code keeps them all, and so do we.
    """
    ce = torch.nn.functional.cross_entropy
    if weighting == "sets":
        loss = lam * ce(forget_logits, relabels)
        return loss if keep_logits is None else loss + ce(keep_logits, keep_labels)
    total, weight = lam * ce(forget_logits, relabels, reduction="sum"), lam * len(relabels)
    if keep_logits is not None:
        total, weight = total + ce(keep_logits, keep_labels, reduction="sum"), weight + len(keep_labels)
    return total / weight if weight > 0 else total


def unlearn_seed(cfg: "RunConfig", partition_id: int, server_round: int) -> int:
    """Seed of client ``partition_id``'s unlearning update in ``server_round`` (it draws the
    relabels): the client's per-round seed. The Flower client and
    :func:`simulations.papers.feddpg.unlearning.unlearn_run` both take it from here, so that unlearning
    again from ``before-unlearning.npz`` repeats the run's unlearning round exactly (with
    three or more classes the relabels depend on it)."""
    from fedtext.client.numpy_client import client_seed

    return client_seed(cfg, partition_id, server_round)


def unlearn(model: FedDPGModel, arrays: Sequence[np.ndarray], batch: EncodedBatch, forget: np.ndarray,
            seed: int) -> tuple[list[np.ndarray], dict[str, float]]:
    """FedDPGu's local update (§3.3, eq. 5) from the global G ``arrays``.

    ``forget`` indexes the rows of ``batch`` to forget; they are relabelled
    (:func:`relabel`) and each of ``unlearn-steps`` full-batch steps of ``unlearn-optimizer``
    (learning rate ``unlearn-lr``, or ``lr``) minimises :func:`unlearning_loss` (eq. 5, weighted as
    ``unlearn-loss`` says) over all the client's examples. With ``unlearn-target`` = T > 0
    the client stops before a step once its forget set's accuracy against the true labels
    has fallen by T points from where it started (read off the logits of that step's
    loss, so the check costs no forward): a stopping rule of ours, the paper gives no
    length; the client can apply it because it holds the forget set and its labels.
    Nothing is random but the relabels (drawn from ``seed``): G has no dropout. Returns
    G_c^u and the accuracies, against the true labels, of the forget set and of the
    retained examples (none when every example is forgotten) before and after, and the
    steps taken.
    """
    mc = model.mcfg
    rng = np.random.default_rng([seed, 0x0F6E7])
    keep = np.setdiff1d(np.arange(len(batch)), forget)
    forget_b, keep_b = batch.take(forget), batch.take(keep)
    relabelled = EncodedBatch(forget_b.input_ids, forget_b.attention_mask,
                              torch.as_tensor(relabel(forget_b.labels.numpy(), model.backbone.task.num_classes, rng)),
                              forget_b.mask_pos)
    model.load(arrays)
    # a retained accuracy only where the client retains an example (accuracy() of none is NaN,
    # which no declared metric may be: fedtext.methods.feddpg.config.UNLEARN_METRICS)
    retained = len(keep_b) > 0
    metrics = {"forget_accuracy_before": accuracy(model, forget_b), "forget_examples": float(len(forget))}
    if retained:
        metrics["retained_accuracy_before"] = accuracy(model, keep_b)
    gen = model.load(arrays, trainable=True)
    opt = UNLEARN_OPTIMIZERS[mc.unlearn_optimizer](gen.parameters(), lr=mc.unlearn_lr or mc.lr)
    losses, scaler = [], model.backbone.precision.loss_scaler()  # fp16 only (fedtext.backbone.devices)
    for _ in range(mc.unlearn_steps):  # full batch: eq. (5) sums over all the client's examples
        forget_logits = model.logits(relabelled)
        now = float((forget_logits.argmax(-1) == forget_b.labels).float().mean())  # true labels, not relabels
        if mc.unlearn_target and 100 * (metrics["forget_accuracy_before"] - now) >= mc.unlearn_target - 1e-9:
            break
        keep_logits = model.logits(keep_b) if len(keep_b) else None
        loss = unlearning_loss(keep_logits, keep_b.labels, forget_logits, relabelled.labels,
                               mc.unlearn_lambda, mc.unlearn_loss)
        backward_step(loss, opt, scaler)
        losses.append(loss.item())
    gen.requires_grad_(False)
    metrics.update(forget_accuracy_after=accuracy(model, forget_b),
                   unlearn_loss=float(np.mean(losses)) if losses else 0.0, unlearn_steps_taken=float(len(losses)))
    if retained:
        metrics["retained_accuracy_after"] = accuracy(model, keep_b)
    return model.arrays(), metrics
