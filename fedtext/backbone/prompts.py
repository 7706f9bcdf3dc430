"""Prompt parameterisations shared by server and clients.

BBT (App. B of FedDLS, eq. (12); Sun et al. 2022) tunes z in R^d and builds the
prompt as ``p = p0 + A z`` with ``A`` a fixed random ``(T*D) x d`` matrix. Both sides
rebuild ``A`` (and ``p0``) from the run seed, so neither is ever sent: a client
uploads only ``d`` numbers.

Scale of A: entries ~ N(0, s_e / (sqrt(d) sigma0)) with s_e the standard deviation of the
word embeddings (over every entry of e(V), population std as BBT's ``np.std``) and sigma0
the CMA-ES's initial step size, so that for z ~ N(0, sigma0^2 I) every prompt entry moves
by about one embedding standard deviation: BBT's ``std = alpha * std_hat / (sqrt(d) *
sigma)`` with alpha = 1 (``bbt.py``; checked in ``tools/reference/bbt.py``).

Where A z enters (``prompt-injection``). BBT and FedBPT feed the prompt positions with
input tokens (BBT: fixed placeholder tokens; here p0, the embeddings of T natural tokens
drawn with the run seed) and add ``A z`` to the embedding layer's *output* there, after
position embeddings and the embedding LayerNorm (``modeling_roberta.py``/``modeling_bert.py``
of BBT: ``embedding_output + extended_prompt_embedding``): ``embedding-output``, the
default, a :class:`SplitPrompt`. ``input-embedding`` passes ``p0 + A z`` as input
embeddings, so A z goes through the LayerNorm, which rescales it: for z ~ N(0, I) the
relative change at the prompt positions is about 0.1 under BBT's injection and 0.75 under
this one (MiniLM-L6; ``tools/reference/bbt.py``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from fedtext.common.config import PROMPT_INJECTIONS


class SplitPrompt(NamedTuple):
    """A BBT prompt as BBT feeds it: ``embeds`` enter the prompt positions as input
    embeddings (through position embeddings and the embedding LayerNorm), ``offsets`` are
    added to the embedding layer's output there. Both ``[T, D]`` (one prompt) or ``[P, T, D]``
    (P prompts), the same shape (:meth:`fedtext.backbone.Backbone.score` takes either form)."""

    embeds: np.ndarray
    offsets: np.ndarray


Prompts = np.ndarray | SplitPrompt  # what the prompt methods hand to the backbone


@functools.lru_cache(maxsize=4)
def projection(seed: int, out_dim: int, d: int, embedding_std: float, sigma0: float = 1.0) -> np.ndarray:
    """The fixed random projection A ``[out_dim, d]`` (float32), identical for a seed:
    entries ~ N(0, embedding_std / (sqrt(d) sigma0)) (BBT's calibration, module docstring)."""
    rng = np.random.default_rng([seed, 0xB88])
    a = rng.standard_normal((out_dim, d), dtype=np.float32)
    a *= np.float32(embedding_std / (np.sqrt(d) * sigma0))
    a.setflags(write=False)
    return a


def project(p0: Prompts, a: np.ndarray, z: np.ndarray, injection: str = "embedding-output") -> Prompts:
    """``p0 + A z`` for one z ``[d]`` or a population ``[P, d]``: ``[T, D]`` / ``[P, T, D]``.

    ``injection`` (the run's ``prompt-injection``): ``embedding-output`` returns a
    :class:`SplitPrompt` ``(p0, A z)`` (BBT: A z added after the embedding layer),
    ``input-embedding`` the sum ``p0 + A z`` as input embeddings. A ``p0`` that is itself a
    split prompt ``[T, D]`` (post-tuning a BBT prompt) keeps its input embeddings and adds
    ``A z`` to its offsets.
    """
    if injection not in PROMPT_INJECTIONS:
        raise ValueError(f"injection must be one of {PROMPT_INJECTIONS}, got {injection!r}")
    base, shift = (p0.embeds, p0.offsets) if isinstance(p0, SplitPrompt) else (p0, None)
    z = np.asarray(z, dtype=np.float32)
    offsets = (z @ a.T).reshape(*z.shape[:-1], *base.shape)  # [..., T*D] -> [..., T, D]
    if shift is not None:
        offsets = offsets + shift
    elif injection == "input-embedding":
        return base + offsets
    return SplitPrompt(np.ascontiguousarray(np.broadcast_to(base, offsets.shape)), offsets)


def bbt_space(backbone, prompt_length: int, intrinsic_dim: int, seed: int,
              sigma0: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``(p0 [T, D], A [T*D, d])`` of BBT, rebuilt identically by server and clients.

    p0 is the embedding of ``T`` natural vocabulary tokens drawn with ``seed``
    (:meth:`fedtext.backbone.Backbone.initial_prompt`); A is :func:`projection` for a
    CMA-ES starting at step size ``sigma0``.
    """
    p0 = backbone.initial_prompt(prompt_length, seed)
    a = projection(seed, prompt_length * backbone.dim, intrinsic_dim, backbone.embedding_std(), sigma0)
    return p0, a
