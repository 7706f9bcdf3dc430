"""Prompt parameterisations shared by server and clients.

BBT (App. B of FedDLS, eq. (12); Sun et al. 2022) tunes z in R^d and builds the
prompt as ``p = p0 + A z`` with ``A`` a fixed random ``(T*D) x d`` matrix. Both sides
rebuild ``A`` (and ``p0``) from the run seed, so neither is ever sent: a client
uploads only ``d`` numbers.

Scale of A: entries ~ N(0, s_e / sqrt(d)) with s_e the standard deviation of the
word embeddings, so that for z ~ N(0, I) (CMA-ES with sigma = 1) every prompt entry
moves by about one embedding standard deviation, the scale BBT calibrates A to.
"""

from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=4)
def projection(seed: int, out_dim: int, d: int, embedding_std: float) -> np.ndarray:
    """The fixed random projection A ``[out_dim, d]`` (float32), identical for a seed."""
    rng = np.random.default_rng([seed, 0xB88])
    a = rng.standard_normal((out_dim, d), dtype=np.float32)
    a *= np.float32(embedding_std / np.sqrt(d))
    a.setflags(write=False)
    return a


def project(p0: np.ndarray, a: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``p0 + A z`` for one z ``[d]`` or a population ``[P, d]`` -> ``[T, D]`` / ``[P, T, D]``."""
    z = np.asarray(z, dtype=np.float32)
    flat = z @ a.T  # [..., T*D]
    return p0 + flat.reshape(*z.shape[:-1], *p0.shape)


def bbt_space(backbone, prompt_length: int, intrinsic_dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(p0 [T, D], A [T*D, d])`` of BBT, rebuilt identically by server and clients.

    p0 is the embedding of ``T`` natural vocabulary tokens drawn with ``seed``
    (:meth:`fedtext.backbone.Backbone.initial_prompt`); A is :func:`projection`.
    """
    p0 = backbone.initial_prompt(prompt_length, seed)
    a = projection(seed, prompt_length * backbone.dim, intrinsic_dim, backbone.embedding_std())
    return p0, a
