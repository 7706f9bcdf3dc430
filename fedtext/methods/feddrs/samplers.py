"""FedDRS's data-free samplers (§4, eqs. (6)-(7)): random, target and adversarial pseudo
embeddings, and their pseudo labels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from fedtext.backbone import Backbone
from fedtext.methods.feddrs.model import EmbeddingsNet


# ---------------------------------------------------------------- the samplers
def word_embedding_name(net: Backbone) -> str:
    """The name of ω^emb, the word-embedding matrix, among ``net.named_parameters()``."""
    return next(n for n, p in net.named_parameters() if p is net.embeddings.weight)


def sequence_ends(net: Backbone) -> Tensor:
    """The ``[2, D]`` embeddings of [CLS] and [SEP] in ``net`` (the student: averaged)."""
    return net.embeddings.weight[[net.cls_id, net.sep_id]].detach().clone()


def wrap(ends: Tensor, theta: Tensor) -> Tensor:
    """``[CLS] θ [SEP]``: pseudo positions ``[N, L, D]`` -> a sequence ``[N, L+2, D]``
    (``ends``: :func:`sequence_ends`)."""
    n = len(theta)
    return torch.cat([ends[0].expand(n, 1, -1), theta, ends[1].expand(n, 1, -1)], dim=1)


def random_embeddings(net: Backbone, n: int, length: int, noise: float, rng: np.random.Generator) -> Tensor:
    """θ^rd ``[n, length, D]``: per position ``u·e_a + (1-u)·e_b + noise·σ⊙ε`` with a, b
    natural vocabulary tokens, u ~ U(0, 1), ε ~ N(0, I) and σ the per-dimension std of
    the (averaged) embedding matrix: samples "in the embedding's distribution" (§4 (1))."""
    emb = net.embeddings.weight.detach()
    a, b = (torch.as_tensor(rng.choice(net.natural_token_ids(), size=(n, length))) for _ in range(2))
    u = emb.new_tensor(rng.random((n, length, 1)))  # emb's dtype and device (a GPU's, on one)
    eps = emb.new_tensor(rng.standard_normal((n, length, emb.shape[1])))
    return u * emb[a] + (1 - u) * emb[b] + noise * emb.std(0) * eps


def pseudo_labels(counts: np.ndarray | None, n: int, num_classes: int, rng: np.random.Generator) -> Tensor:
    """γ_k: n labels drawn from the client's label distribution ``counts`` (``None``:
    uniform)."""
    # in float64 throughout: counts arrive as float32 arrays, whose own sum drops small counts
    # beside large ones (2**24 + 1 + 1 -> 2**24), leaving p summing past rng.choice's tolerance
    c = None if counts is None else np.asarray(counts, dtype=np.float64)
    p = None if c is None else c / c.sum()
    return torch.as_tensor(rng.choice(num_classes, size=n, p=p), dtype=torch.long)


def descend(theta: Tensor, loss_fn: Callable[[Tensor], Tensor], steps: int, beta: float) -> Tensor:
    """``steps`` plain gradient-descent steps θ <- θ - β ∇_θ loss(θ) (Alg. 1 lines
    13-14); only θ's gradient is computed (model weights get none)."""
    theta = theta.detach().clone()
    for _ in range(steps):
        theta.requires_grad_(True)
        (grad,) = torch.autograd.grad(loss_fn(theta), theta)
        theta = (theta - beta * grad).detach()
    return theta


def target_loss(teacher: EmbeddingsNet, ends: Tensor, theta: Tensor, gamma: Tensor) -> Tensor:
    """One teacher's term of L_tar (eq. 6): CE(σ(f(θ; ω_k)), γ_k), mean over samples."""
    return torch.nn.functional.cross_entropy(teacher.embeds_logits(wrap(ends, theta)), gamma)


def adversarial_loss(teacher: EmbeddingsNet, student: EmbeddingsNet, ends: Tensor, theta: Tensor, gamma: Tensor,
                     lam: float) -> Tensor:
    """One teacher's term of L_adv (eq. 7): CE(f(θ; ω_k), γ) - λ·CE(f(θ; ω_S), γ)."""
    x = wrap(ends, theta)
    ce = torch.nn.functional.cross_entropy
    return ce(teacher.embeds_logits(x), gamma) - lam * ce(student.embeds_logits(x), gamma)


def target_samples(teacher: EmbeddingsNet, ends: Tensor, theta0: Tensor, gamma: Tensor, steps: int,
                   beta: float) -> Tensor:
    """θ^tr: random samples moved so that teacher k outputs γ_k (eq. 6)."""
    return descend(theta0, lambda t: target_loss(teacher, ends, t, gamma), steps, beta)


def adversarial_samples(teacher: EmbeddingsNet, student: EmbeddingsNet, ends: Tensor, theta0: Tensor, gamma: Tensor,
                        lam: float, steps: int, beta: float) -> Tensor:
    """θ^ad: random samples moved so that teacher k outputs γ_k while the student
    does not (eq. 7, strength λ)."""
    return descend(theta0, lambda t: adversarial_loss(teacher, student, ends, t, gamma, lam), steps, beta)
