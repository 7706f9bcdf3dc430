"""The one norm and clip of an update that every trust mechanism uses.

An update is what a client's upload moved the global arrays by, ``Δ_k = x_k − x_t``, all its
arrays taken as **one vector** (Flower's FlatClip, McMahan et al. 2018). Three mechanisms measure
and shorten it, and all three go through this module so that they cannot drift apart:

* central DP clips each update to the norm C before the noised mean
  (:class:`fedtext.trust.privacy.CentralDP`), local DP a client's own (:func:`fedtext.trust.privacy.local_update`):
  :func:`clip`;
* ``update-clip`` scales every update longer than a multiple of the round's median norm down to it
  (FLAME, :func:`fedtext.trust.robust.clip_updates`): :func:`update_norms` and :func:`along`;
* the simulated attacks scale a client's update along its own direction (:mod:`fedtext.client.attacks`):
  :func:`along`.

Arithmetic: everything in float64. The norm is Flower 1.42's ``get_norm`` (``flwr.supercore.
differential_privacy``: the root of the sum of each array's squared ``np.linalg.norm``) taken on
float64 values, because fedtext's uploads are float32 and a float32 update's squares overflow past
``|Δ| ~ 1.8e19`` (a lying client's 1e20 would measure inf and clip to nothing). The scaling is
Flower's ``clip_inputs_inplace`` (``Δ · min(1, C / ‖Δ‖)``), in place on the float64 copies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flwr.supercore.differential_privacy import clip_inputs_inplace, get_norm

Arrays = list[np.ndarray]


def norm(arrays: Sequence[np.ndarray]) -> float:
    """‖·‖₂ of ``arrays`` as one vector, in float64 (Flower's ``get_norm`` on float64 values)."""
    return float(get_norm([np.asarray(a, dtype=np.float64) for a in arrays]))


def difference(upload: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> Arrays:
    """``x_k − x_t`` per array, in float64 (one cast per difference: float32's would round
    ``3e-8 − (−1)`` to 1)."""
    return [np.subtract(x, r, dtype=np.float64) for x, r in zip(upload, reference, strict=True)]


def update_norms(arrays: Sequence[Sequence[np.ndarray]], reference: Sequence[np.ndarray]) -> np.ndarray:
    """‖x_k − x_t‖₂ of each upload of ``arrays`` against ``reference`` (x_t), in float64."""
    return np.asarray([norm(difference(upload, reference)) for upload in arrays])  # Python floats: float64


def along(reference: Sequence[np.ndarray], upload: Sequence[np.ndarray], factor: float) -> Arrays:
    """``x_t + factor · (x_k − x_t)`` per array, computed in float64 and cast back to the
    upload's dtypes: an update scaled along its own direction (a clip, an attack)."""
    # the sum with a float32 x_t is float64 by numpy's promotion, the difference being float64
    return [(r + factor * d).astype(np.asarray(x).dtype)
            for x, r, d in zip(upload, reference, difference(upload, reference), strict=True)]


def clip(update: Sequence[np.ndarray], bound: float) -> tuple[Arrays, bool]:
    """``update`` (Δ itself, not an upload) as float64 copies scaled to L2 norm at most ``bound``
    (Flower's ``clip_inputs_inplace``), and whether it was within the bound already (Andrew et
    al. 2021's b_k, the bit adaptive clipping counts)."""
    out = [np.array(a, dtype=np.float64) for a in update]
    unclipped = norm(out) <= bound
    if not unclipped:
        clip_inputs_inplace(out, bound)
    return out, bool(unclipped)
