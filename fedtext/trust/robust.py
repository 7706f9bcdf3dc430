"""How the server combines a round's valid uploads (``aggregator``, ``update-clip``).

Every method whose server step is a mean of the uploaded arrays (its config declares
``server_aggregation = MEAN``: fedprompt, fedavg, fedlora, fedadapter, fedptuning-v2, feddpg,
bbt-fed with ``average=z``) takes that mean through :meth:`fedtext.server.strategy.FedTextStrategy.combine`;
two keys change it, both applied through the server's release step (:mod:`fedtext.server.release`:
``update-clip`` on the uploads before the method's aggregation, ``aggregator`` as combine's rule):

``aggregator``
    * ``mean`` (default): FedAvg's example-weighted mean (:func:`weighted_mean`, Flower's
      ``aggregate_inplace`` arithmetic), the papers' rule;
    * ``median``: the coordinate-wise median (Yin et al. 2018; Flower's ``FedMedian``);
    * ``trimmed-mean``: per coordinate, drop the ``⌊β n⌋`` smallest and largest values and
      average the rest (Yin et al. 2018; Flower's ``FedTrimmedAvg``, β = ``trim-beta``);
    * ``krum``: the upload whose ``n − f − 2`` nearest uploads are closest in squared L2
      distance (Blanchard et al. 2017, f = ``krum-malicious``); with ``krum-keep`` = m > 0,
      multi-Krum: the example-weighted mean of the m best-scored uploads (Flower's ``Krum``).

    The math is Flower 1.42's own (``flwr.server.strategy.aggregate``: ``aggregate_median``,
    ``aggregate_trimmed_avg``, ``aggregate_krum``), called on the decoded, validated uploads;
    ``tests/unit/test_robust.py`` drives Flower's ``FedMedian``, ``FedTrimmedAvg`` and ``Krum``
    strategies on the same replies and compares. Median, trimmed mean and Krum ignore the
    example counts (an upload is one vote), so a client lying about its examples gains
    nothing there; multi-Krum's mean and ``mean`` weight by the counts, which the server
    bounds by what it assigned (:meth:`fedtext.server.sampling.ClientSampler.assigned_examples`).
    Every result keeps the dtype of the global arrays (``np.median`` of float32 stays float32;
    a float64 result is cast back).

``update-clip``
    Before the method aggregates (:class:`fedtext.server.release.UpdateClip`), each update
    ``Δ_k = x_k − x_t`` (the upload minus the global arrays the client was sent, all arrays as one vector) longer than ``update-clip × median_k ‖Δ_k‖`` is
    scaled down to that length: FLAME's adaptive norm bound (Nguyen et al. 2022, §5: clip to the
    median of the round's update norms; ``update-clip=1`` is FLAME's bound, a larger factor
    leaves honest spread alone). Clipped, not dropped: the client still counts, its update no
    longer than the bound, so a 1,000× update moves a mean no more than an update of the
    bound's length would. How many were clipped and the bound go into the round record's
    ``method_metrics`` (``clipped``, ``clip_bound``). With one upload the median is its own
    norm: nothing is clipped.

Both compose with ``server-optimizer``: the combined arrays are the "mean" whose difference
from x_t is Reddi et al.'s pseudo-gradient (:meth:`fedtext.server.strategy.FedTextStrategy.server_update`).
A method whose server does not average arrays is refused either key in one line at config
time (:meth:`fedtext.common.config.RunConfig.check_composition`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.server.strategy.aggregate import aggregate_krum, aggregate_median, aggregate_trimmed_avg

from fedtext.common.config import RunConfig
from fedtext.trust.clipping import along, update_norms  # the one norm and scaling of an update (float64)

Arrays = list[np.ndarray]


def weighted_mean(arrays: list[Arrays], weights: list[int]) -> Arrays:
    """FedAvg's example-weighted mean of each array across clients.

    The float operations are those of Flower's ``aggregate_inplace`` (what
    ``FedAvg.aggregate_fit`` runs): scale each client's arrays by ``n_k / n`` in their
    own dtype, then add in arrival order, so results match Flower's bit for bit.
    """
    total = sum(weights)
    scale = np.asarray([w / total for w in weights])

    def scaled(x: np.ndarray, s: np.float64) -> np.ndarray:
        x = np.array(x, copy=True)
        return np.multiply(x, s, out=x) if np.can_cast(s, x.dtype, casting="same_kind") else np.multiply(
            x, np.array(s, x.dtype), out=x)

    out = [scaled(x, scale[0]) for x in arrays[0]]
    for k, client in enumerate(arrays[1:], start=1):
        for total_x, x in zip(out, client, strict=True):
            np.add(total_x, scaled(x, scale[k]), out=total_x)
    return out


def _median(arrays: list[Arrays], weights: list[int], cfg: RunConfig) -> Arrays:
    return aggregate_median(list(zip(arrays, weights, strict=True)))


def _trimmed_mean(arrays: list[Arrays], weights: list[int], cfg: RunConfig) -> Arrays:
    return aggregate_trimmed_avg(list(zip(arrays, weights, strict=True)), cfg.trim_beta)


def _krum(arrays: list[Arrays], weights: list[int], cfg: RunConfig) -> Arrays:
    # Flower's multi-Krum slices the best `to_keep` scores from the end: more than there are
    # uploads (a short round) is all of them, as keep = n
    keep = min(cfg.krum_keep, len(arrays))
    return aggregate_krum(list(zip(arrays, weights, strict=True)), cfg.krum_malicious, keep)


#: ``aggregator`` -> how a round's uploads (each a list of arrays, with its example count)
#: become the new "mean". One entry per choice: the config's choices are these keys.
AGGREGATORS: dict[str, Callable[[list[Arrays], list[int], RunConfig], Arrays]] = {
    "mean": lambda arrays, weights, cfg: weighted_mean(arrays, weights),
    "median": _median,
    "trimmed-mean": _trimmed_mean,
    "krum": _krum,
}


def combine(arrays: list[Arrays], weights: list[int], cfg: RunConfig, like: Arrays) -> Arrays:
    """``cfg.aggregator`` of the uploads ``arrays`` (example counts ``weights``). A robust
    aggregator's result arrays take the dtypes of ``like`` (the global arrays; the uploads'
    own where there are none); the mean's are Flower's, as :func:`weighted_mean` returns them."""
    out = AGGREGATORS[cfg.aggregator](arrays, weights, cfg)
    if cfg.aggregator == "mean":  # Flower's FedAvg arithmetic as it always was, dtype included
        return out
    dtypes = [a.dtype for a in (like or arrays[0])]
    return [np.asarray(a).astype(d, copy=False) for a, d in zip(out, dtypes, strict=True)]


def clip_updates(arrays: list[Arrays], reference: Arrays, factor: float) -> tuple[list[Arrays], int, float]:
    """FLAME's norm bound (module docstring): each update longer than ``factor`` × the median
    update norm scaled to that length.

    Returns
    -------
    (uploads, clipped, bound)
        The uploads with long updates scaled (``x_t + Δ_k · bound / ‖Δ_k‖``, in each array's
        dtype; the others as they came), how many were clipped, and the bound.
    """
    norms = update_norms(arrays, reference)
    bound = factor * float(np.median(norms))
    out, clipped = [], 0
    for upload, norm in zip(arrays, norms, strict=True):
        if norm > bound:
            clipped += 1
            upload = along(reference, upload, bound / norm)
        out.append(upload)
    return out, clipped, bound
