"""The release step: what the server does to a round's uploads before the method's own math.

Four mechanisms change what a method's server sees of a round, and each used to be its own
special case in ``aggregate_fit``. They now go through one step,
:class:`ReleaseStep` (``FedTextStrategy.release_step``), in the order a round meets them::

    replies --screen--> validation --apply--> method's aggregate --combine--> x_{t+1}

* **screen** (the replies as Flower hands them over, before validation): ``secagg=true``'s
  results each carry the round's unmasked mean in float64; it is cast to the upload specs'
  dtypes (:func:`fedtext.server.secagg.cast_mean`) so that validation checks it as it checks an
  upload.
* **apply** (the valid uploads, before the method's :meth:`~fedtext.server.strategy.FedTextStrategy.aggregate`),
  one :class:`Mechanism` each, in :data:`MECHANISMS`' order:

  1. :class:`SecAggSum` (``secagg=true``): the n copies of SecAgg+'s mean become one upload
     weighing all their examples (FedAvg's mean of it, or FedKSeed's ``accumulate``, is the mean
     itself; n copies would add float rounding and FedKSeed's outlier screen nothing);
  2. :class:`CentralPrivacy` (``dp=central``): the uploads become one, ``x_t + Δ̃``, Δ̃ the noised
     mean of their clipped updates over the m clients sampled, weight 1, so that the method's own
     aggregation of it is post-processing (:class:`fedtext.trust.privacy.CentralDP`);
  3. :class:`UpdateClip` (``update-clip`` > 0): every update longer than ``update-clip`` × the
     round's median update norm scaled to that length (FLAME; :func:`fedtext.trust.robust.clip_updates`),
     its ``clipped`` count and ``clip_bound`` into the round record's ``method_metrics``.

  The three never meet: each pair is refused at config time, one row each of
  :data:`fedtext.common.config.COMPOSITION` (SecAgg+ shows the server a sum, which neither central
  DP's per-update clip nor FLAME's median can read; FLAME's bound depends on the other clients'
  updates, so central DP's sensitivity C/m would not hold). Their order above is the order they
  would compose in.
* **combine** (inside the method's aggregate, with the method's weights: example counts, or
  FedDPG's uniform ones): ``aggregator``'s rule, the example-weighted mean or a robust one
  (:func:`fedtext.trust.robust.combine`). It stays inside the method's step because the weights
  are the method's.

Every norm and clip above is :mod:`fedtext.trust.clipping`'s (float64, Flower's FlatClip
arithmetic). Local DP (``dp=local``) is no server mechanism: each client clips and noises its own
update (:func:`fedtext.trust.privacy.local_update`); the server only accounts for it.

A method whose round must not meet a mechanism overrides
:meth:`fedtext.server.strategy.FedTextStrategy.release` and calls ``super()`` in the others: FedDPGu's
unlearning round replaces G by the one unlearned upload, which ``update-clip`` < 1 would shorten
(``strategies/feddpg.py``; ``update-clip`` ran inside ``combine`` before this step, which that round
never calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np
from flwr.common import FitRes, Scalar
from flwr.server.client_proxy import ClientProxy

from fedtext.common.config import RunConfig
from fedtext.learning.model import Model
from fedtext.server import secagg
from fedtext.server.validation import Upload
from fedtext.trust import privacy, robust

Arrays = list[np.ndarray]
Results = list[tuple[ClientProxy, FitRes]]


@dataclass
class Released:
    """What the release step hands the method's aggregate, and what it reports."""

    uploads: list[Upload]  # what the method aggregates
    metrics: dict[str, Scalar] = field(default_factory=dict)  # into the round record's method_metrics
    privacy: privacy.Release | None = None  # central DP's figures for the record's privacy entry


@dataclass(frozen=True)
class RoundView:
    """What a mechanism may read of the round."""

    number: int  # the server round
    sent: Arrays  # x_t: the global arrays the round's clients were sent
    sampled: int  # m: the clients sent a fit instruction this round


class Mechanism:
    """One thing the server does to a round's uploads before the method's math (subclass and add
    to :data:`MECHANISMS`)."""

    #: The run-config that turns it on, as the docs and the refusals name it.
    setting: ClassVar[str] = ""

    def __init__(self, cfg: RunConfig, model: Model) -> None:
        self.cfg = cfg
        self.model = model

    @staticmethod
    def wanted(cfg: RunConfig) -> bool:
        """Whether ``cfg`` turns this mechanism on."""
        raise NotImplementedError

    def screen(self, results: Results) -> Results:
        """The replies before validation; unchanged by default."""
        return results

    def apply(self, rnd: RoundView, uploads: list[Upload], out: Released) -> list[Upload]:
        """The valid uploads as the next mechanism (or the method) should see them; what it
        reports goes into ``out``."""
        raise NotImplementedError


class SecAggSum(Mechanism):
    """``secagg=true`` (:mod:`fedtext.server.secagg`): every result carries SecAgg+'s unmasked
    weighted mean; cast before validation, then aggregated once, as one upload of all the valid
    results' examples."""

    setting = "secagg=true"

    @staticmethod
    def wanted(cfg: RunConfig) -> bool:
        return cfg.secagg

    def screen(self, results: Results) -> Results:
        return secagg.cast_mean(results, self.model.upload_specs())

    def apply(self, rnd: RoundView, uploads: list[Upload], out: Released) -> list[Upload]:
        if not uploads:  # never under SecAgg+ in practice (Poisson cohorts are refused with it)
            return uploads
        # every result carries the same unmasked mean: one upload of it, weighing all their examples, that
        # stands for no one client (no proxy, no metrics), as central DP's release does
        return [Upload(None, "secagg-mean", sum(u.num_examples for u in uploads), uploads[0].arrays, {})]


class CentralPrivacy(Mechanism):
    """``dp=central`` (:mod:`fedtext.trust.privacy`): the round's valid uploads replaced by one,
    ``x_t + Δ̃`` (FedKSeed: Δ̃ itself, its ``apply_update``), Δ̃ the noised mean of their clipped
    updates (:meth:`fedtext.trust.privacy.CentralDP.release`), weight 1, no proxy, no metrics: it
    stands for no one client."""

    setting = "dp=central"

    def __init__(self, cfg: RunConfig, model: Model) -> None:
        super().__init__(cfg, model)
        self.dp = privacy.CentralDP(cfg)  # the clipping norm (adaptive clipping moves it) and the noise

    @staticmethod
    def wanted(cfg: RunConfig) -> bool:
        return cfg.dp == "central"

    def denominator(self, rnd: RoundView, uploads: Sequence[Upload]) -> int:
        """m of the mean: the expected cohort qN under Poisson sampling (``clients-per-round``: the
        cohort's size is not released), else the clients sampled (a dropped one adds 0, so the
        sensitivity stays C/m)."""
        if self.cfg.client_sampling == "poisson":
            return self.cfg.clients_per_round
        return max(rnd.sampled, len(uploads))

    def apply(self, rnd: RoundView, uploads: list[Upload], out: Released) -> list[Upload]:
        updates = [self.model.update(rnd.sent, u.array_list()) for u in uploads]
        # no upload (a Poisson round): the noise alone, shaped as an update of the arrays sent
        zeros = None if updates else [np.zeros(np.shape(a)) for a in self.model.update(rnd.sent, rnd.sent)]
        out.privacy = self.dp.release(updates, self.denominator(rnd, uploads), rnd.number, zeros)
        names = [spec.name for spec in self.model.upload_specs()]  # an Upload's arrays are keyed by them, in order
        arrays = self.model.apply_update(rnd.sent, out.privacy.update)
        return [Upload(None, "dp-mean", 1, dict(zip(names, arrays, strict=True)), {})]


class UpdateClip(Mechanism):
    """``update-clip`` (:func:`fedtext.trust.robust.clip_updates`, FLAME's bound): each update
    longer than ``update-clip`` × the round's median update norm scaled to that length, against
    the arrays sent (none yet, as in a strategy used without ``initialize_parameters``: nothing
    to measure against, nothing clipped)."""

    setting = "update-clip"

    @staticmethod
    def wanted(cfg: RunConfig) -> bool:
        return cfg.update_clip > 0

    def apply(self, rnd: RoundView, uploads: list[Upload], out: Released) -> list[Upload]:
        if not rnd.sent or not uploads:
            return uploads
        arrays, clipped, bound = robust.clip_updates([u.array_list() for u in uploads], rnd.sent, self.cfg.update_clip)
        out.metrics.update(clipped=clipped, clip_bound=bound)
        return [replace(u, arrays=dict(zip(u.arrays, a, strict=True))) for u, a in zip(uploads, arrays, strict=True)]


#: The mechanisms of the apply stage, in the order they would compose (module docstring).
MECHANISMS: tuple[type[Mechanism], ...] = (SecAggSum, CentralPrivacy, UpdateClip)


class ReleaseStep:
    """The mechanisms ``cfg`` turns on, run in :data:`MECHANISMS`' order (module docstring)."""

    def __init__(self, cfg: RunConfig, model: Model) -> None:
        self.cfg = cfg
        self.mechanisms = [kind(cfg, model) for kind in MECHANISMS if kind.wanted(cfg)]

    def find(self, kind: type[Mechanism]) -> Mechanism | None:
        """The running mechanism of ``kind``, if the config turned it on."""
        return next((m for m in self.mechanisms if isinstance(m, kind)), None)

    @property
    def central_dp(self) -> privacy.CentralDP | None:
        """Central DP's clipping norm and noise (``None`` without ``dp=central``)."""
        found = self.find(CentralPrivacy)
        return found.dp if isinstance(found, CentralPrivacy) else None

    def every_round(self) -> bool:
        """Whether a round releases whatever arrives: central DP on Poisson cohorts, whose
        accountant composes one sampled Gaussian every round (a round that drew nobody, or whose
        uploads were all dropped, still adds N(0, (z C / qN)²) to the global update)."""
        return self.central_dp is not None and self.cfg.client_sampling == "poisson"

    def screen(self, results: Results) -> Results:
        """The replies as validation should see them."""
        for mechanism in self.mechanisms:
            results = mechanism.screen(results)
        return results

    def apply(self, rnd: RoundView, uploads: list[Upload]) -> Released:
        """The valid uploads through every mechanism: what the method aggregates, and the reports."""
        out = Released(uploads)
        for mechanism in self.mechanisms:
            out.uploads = mechanism.apply(rnd, out.uploads, out)
        return out

    def combine(self, arrays: list[Arrays], weights: list[int], like: Arrays) -> Arrays:
        """``aggregator``'s rule on the uploads' arrays with the method's weights
        (:func:`fedtext.trust.robust.combine`; ``like``: the global arrays, whose dtypes a robust
        result takes)."""
        return robust.combine(arrays, weights, self.cfg, like)
