"""Extra terms of a client's local objective: the hook of :func:`fedtext.client.numpy_client.gradient_steps`.

Every gradient client minimises, per mini-batch, the mean cross-entropy of its logits plus
the terms :meth:`fedtext.client.numpy_client.FedTextClient.local_terms` returns (none by default):

    loss = CE(logits(batch), labels) + sum_j term_j(step)

A term is a :class:`LocalTerm`: :meth:`LocalTerm.start` is called once, at the start of
local training, with the trained tensors (those in the optimizer's param groups that
require a gradient, in group order), which hold the downloaded values then; the term
snapshots what it needs. Then each step calls it with a :class:`LocalStep` (the trained
tensors, the mini-batch and its logits) and adds the scalar tensor it returns to the loss,
so that ``backward`` sees it. The reported ``train_loss`` stays the cross-entropy alone
(comparable across runs with and without terms).

Built in: :class:`ProximalTerm`, FedProx's (μ/2)·||w − w_t||² (``proximal-mu``).

How other methods would use the hook (none ships here):

* SCAFFOLD (Karimireddy et al. 2020): the client's control variate c_i lives in
  ``self.state`` (journalled with the node, :mod:`fedtext.node.state`) and the server's c
  comes with the download's config; a term returning ``sum((c - c_i) * w)`` adds
  ``c − c_i`` to every gradient, which is SCAFFOLD's corrected step (its c_i update runs
  after training, in the client's ``train``).
* MOON (Li et al. 2021): its contrastive term needs the representations of the current,
  global and previous local models on the batch. ``step.batch`` lets the term run the
  global and previous models (snapshotted in ``start`` or kept in ``self.state``);
  the current model's representation is the client's: its ``logits`` function can also
  leave the pooled features on the term (or a subclass of :class:`LocalStep` can carry
  them) before the term is called, since the term is called after ``logits(batch)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from fedtext.backbone import EncodedBatch


@dataclass(frozen=True)
class LocalStep:
    """What a term sees at one local step.

    Attributes
    ----------
    params
        The trained tensors (the optimizer's, that require a gradient), as
        :meth:`LocalTerm.start` got them.
    batch
        The step's mini-batch.
    logits
        ``logits(batch)`` of the current model, ``[B, C]`` (part of the graph).
    """

    params: tuple[torch.Tensor, ...]
    batch: EncodedBatch
    logits: torch.Tensor


@runtime_checkable
class LocalTerm(Protocol):
    """One extra term of the local objective (module docstring)."""

    def start(self, params: Sequence[torch.Tensor]) -> None:
        """Local training starts: ``params`` hold the values it starts from (the download)."""

    def __call__(self, step: LocalStep) -> torch.Tensor:
        """The term's value at this step: a scalar tensor, differentiable in ``step.params``."""


class ProximalTerm:
    """FedProx's proximal term (μ/2)·||w − w_t||² (Li et al., MLSys 2020, eq. (2) /
    Algorithm 1: each client minimises h_k(w; w_t) = F_k(w) + (μ/2)||w − w_t||²).

    ``w`` is every trained tensor, ``w_t`` its value at :meth:`start` (the downloaded
    global values); its gradient is ``μ (w − w_t)``. ||·||² sums over all trained tensors
    together (one norm of the concatenated vector, as the paper's w), in float32 whatever
    the encoder's compute precision. Memory: one copy of the trained tensors (fedavg's
    whole MiniLM: 90.9 MB).
    """

    def __init__(self, mu: float) -> None:
        if not mu > 0:
            raise ValueError(f"proximal mu must be > 0, got {mu}")
        self.mu = float(mu)
        self.anchor: tuple[torch.Tensor, ...] = ()

    def start(self, params: Sequence[torch.Tensor]) -> None:
        self.anchor = tuple(p.detach().clone() for p in params)

    def __call__(self, step: LocalStep) -> torch.Tensor:
        if len(step.params) != len(self.anchor):
            raise RuntimeError(f"proximal term started with {len(self.anchor)} tensors, called with "
                               f"{len(step.params)} (start() was not called at the start of local training)")
        squared = sum(((p.float() - w.float()) ** 2).sum() for p, w in zip(step.params, self.anchor, strict=True))
        return 0.5 * self.mu * squared
