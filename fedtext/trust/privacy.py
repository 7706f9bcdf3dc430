"""Client-level differential privacy (``dp=central|local``) and its accountant.

What is protected is a *client*: its whole contribution to a round, the update
``Δ_k = x_k − x_t`` (its upload minus the global arrays it was sent; :meth:`fedtext.learning.model.Model.update`,
FedKSeed: its per-seed gradient sums ``G_k`` themselves). Adding or removing one client changes
what the server releases by at most the clipping norm C.

**Central** (DP-FedAvg, McMahan et al. 2018, Algorithm 1 with the fixed-denominator estimator
``f̃_f``; Flower's ``DifferentialPrivacyServerSideFixedClipping``). The server clips each valid
update in L2 (:func:`fedtext.trust.clipping.clip`, Flower's ``clip_inputs_inplace``: ``Δ · min(1, C / ‖Δ‖)``,
all arrays as one vector),
then releases

    Δ̃ = (1/m) Σ_k clip_C(Δ_k) + N(0, (z C / m)² I)           (Flower's ``compute_stdv``)

with m the clients *sampled* this round (not those whose upload arrived: a dropped client adds
0, so the sensitivity stays C/m) and z = ``dp-noise``. Every client weighs the same: an
example-weighted mean would let one client's claim move the sensitivity. The method's server
then takes ``x_t + Δ̃`` as the round's only upload (FedKSeed: ``Δ̃`` itself), so a server
optimizer's step on it is post-processing.

**Adaptive clipping** (Andrew et al. 2021, Algorithm 1; ``dp-clipping=adaptive``): with
``b_k = 1[‖Δ_k‖ ≤ C]`` (the update was *not* clipped), the server noises the count,
``b̄ = (Σ_k b_k + N(0, σ_b²)) / m``, and moves C geometrically toward the γ-quantile of the norms,
``C ← C · exp(−η_C (b̄ − γ))``; the update noise is ``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)`` so that the
two releases together cost what one Gaussian of multiplier z does (their Theorem 1; Flower's
``compute_adaptive_noise_params``, whose default σ_b = m / 20 fedtext keeps). Departure from
Flower 1.42: its ``DifferentialPrivacyServerSideAdaptiveClipping`` counts the *clipped* updates
(``norm_bit = scaling_factor < 1``) into the same ``exp(−η(b̄ − γ))`` step, so C shrinks when most
updates are clipped (tests/unit/test_privacy.py measures both); fedtext follows the paper.

**Local** (each client its own Gaussian mechanism): the client clips its update to C and adds
``N(0, (z C)² I)`` before uploading (:func:`local_update`); the server averages as it would without
DP (anything after the release is post-processing).

**Poisson cohorts** (``client-sampling=poisson``, :meth:`fedtext.server.sampling.ClientSampler.poisson_draw`):
each participant joins with probability q on its own; the release divides by the expected cohort
m = qN (``clients-per-round``) whatever was drawn, and runs every round, a cohort of nobody
included (noise alone), so that what ran is the sampled Gaussian mechanism the accountant composes.

**Accountant** (:func:`epsilon`, ``dp-accountant``): Rényi DP of the sampled Gaussian mechanism
(Mironov, Talwar and Zhang 2019), or its privacy loss distribution (tighter), composed over the
releases and converted to (ε, δ) by Google's packaged ``dp_accounting`` (``rdp.RdpAccountant``,
``pld.PLDAccountant``, their defaults). Central: q = m / participants per round, exact under
Poisson sampling; the fixed-size sampler (exactly m without replacement) is accounted as if
Poisson-sampled, the practice of DP-FedAvg papers (the exact accounting of that, replace-one
adjacency, is not what the papers report): :func:`accounting` names which. Local: the server
knows who it sampled, so no amplification: q = 1, composed over the most rounds any one client
has trained in.

Why not Flower's DP strategy wrappers themselves: they replace ``aggregate_fit``'s inputs before
the wrapped strategy sees them, so a client's update would be clipped before fedtext's validation
had dropped a malformed one; their noise is drawn from NumPy's global generator (no seed: a run
could not be repeated); and the wrapped FedAvg weights uploads by example counts, which makes
the sensitivity C/m untrue. fedtext uses Flower's arithmetic (``clip_inputs_inplace``,
``compute_stdv``, ``compute_adaptive_noise_params``) inside its own hook, with seeded noise.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from flwr.supercore.differential_privacy import compute_adaptive_noise_params, compute_stdv

from fedtext.common.config import ConfigError, RunConfig
from fedtext.trust.clipping import clip  # the one flat clip (Flower's FlatClip arithmetic, float64)

# SeedSequence streams of the noise, one per use, so that no two draws share a stream
CENTRAL_STREAM = 0x44501  # the server's noise on the mean update
COUNT_STREAM = 0x44502  # adaptive clipping: the server's noise on the unclipped count
LOCAL_STREAM = 0x44503  # a client's noise on its own update
MAX_EXP = math.log(sys.float_info.max)  # ~709.78: math.exp of more raises OverflowError


def noise_rng(cfg: RunConfig, stream: int, server_round: int, partition_id: int = -1) -> np.random.Generator:
    """The generator of one noise draw: seeded by the run seed, the stream, the round and (local DP)
    the client's partition, so that a run (and a resumed run's later rounds) repeats exactly."""
    return np.random.default_rng(np.random.SeedSequence([cfg.seed, stream, server_round, partition_id + 1]))


def gaussian(arrays: Sequence[np.ndarray], std: float, rng: np.random.Generator) -> list[np.ndarray]:
    """``arrays`` plus N(0, std²) noise on every element, in each array's dtype."""
    return [np.asarray(a + rng.normal(0.0, std, np.shape(a))).astype(np.asarray(a).dtype) for a in arrays]


@dataclass
class Release:
    """What the server released for a round under central DP, and the figures the record keeps."""

    update: list[np.ndarray]  # Δ̃: the noised mean of the clipped updates
    clip: float  # C used this round
    noise_std: float  # std of the noise on each element of Δ̃
    clipped: int  # updates whose norm exceeded C
    next_clip: float  # C of the next round (adaptive clipping; fixed: C)


class CentralDP:
    """The server's side of ``dp=central``: clip, average over the m sampled, noise
    (:func:`release`), and adaptive clipping's C (its state: :meth:`state`)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.clip = float(cfg.dp_clip)  # adaptive clipping moves it every round

    def state(self) -> dict[str, float]:
        """What a checkpoint keeps: the current clipping norm."""
        return {"clip": self.clip}

    def load_state(self, state: dict[str, float]) -> None:
        """Continue from a checkpoint's :meth:`state` (an older checkpoint has none: ``dp-clip``)."""
        self.clip = float(state.get("clip", self.cfg.dp_clip))

    def noise_params(self, m: int) -> tuple[float, float]:
        """(z_Δ, σ_b): the update's noise multiplier and the count's noise std. Fixed clipping:
        (z, 0). Adaptive: Flower's ``compute_adaptive_noise_params`` (σ_b = ``dp-count-noise``, or
        m / 20 when 0), which raises when z ≥ 2σ_b (no z_Δ gives the budget)."""
        if self.cfg.dp_clipping != "adaptive":
            return float(self.cfg.dp_noise), 0.0
        try:
            sigma_b, z_delta = compute_adaptive_noise_params(self.cfg.dp_noise, m, self.cfg.dp_count_noise or None)
        except ValueError:  # clients-per-round=0 (every client): m known only now
            raise ConfigError(f"dp-noise={self.cfg.dp_noise} under adaptive clipping needs dp-count-noise > "
                              f"{self.cfg.dp_noise / 2:g} with {m} clients a round (sigma_b = m / 20 = "
                              f"{m / 20:g} is too small)") from None
        return float(z_delta), float(sigma_b)

    def release(self, updates: Sequence[Sequence[np.ndarray]], m: int, server_round: int,
                zeros: Sequence[np.ndarray] | None = None) -> Release:
        """Δ̃ = (1/m) Σ clip_C(Δ_k) + N(0, (z_Δ C / m)²) and, adaptive, the next C.

        Parameters
        ----------
        updates
            The valid uploads' updates Δ_k (arrays each); none in a Poisson round that drew nobody
            (then Δ̃ is the noise alone, on arrays shaped as ``zeros``).
        m
            The denominator: ``client-sampling=fixed``, the clients sampled this round
            (≥ ``len(updates)``); ``poisson``, the *expected* cohort qN (``clients-per-round``),
            whatever the cohort drawn (McMahan et al. 2018's fixed-denominator estimator f̃_f:
            dividing by the cohort drawn would tell its size, which depends on who is in it).
        server_round
            Seeds the noise (:func:`noise_rng`).
        zeros
            Zero arrays of an update's shapes: needed only when ``updates`` is empty.
        """
        poisson = self.cfg.client_sampling == "poisson"
        if m < 1 or (m < len(updates) and not poisson):
            raise ValueError(f"m={m} sampled clients, but {len(updates)} updates")
        if not updates and zeros is None:
            raise ValueError("a release of no update needs the update's shapes (zeros)")
        z_delta, sigma_b = self.noise_params(m)
        bound = self.clip
        clipped = [clip(u, bound) for u in updates]
        parts = [c[0] for c in clipped] or [[np.zeros(np.shape(a)) for a in zeros]]
        total = [np.sum([p[i] for p in parts], axis=0) for i in range(len(parts[0]))]
        std = compute_stdv(z_delta, bound, m)
        mean = gaussian([t / m for t in total], std, noise_rng(self.cfg, CENTRAL_STREAM, server_round))
        unclipped = sum(c[1] for c in clipped)
        next_clip = bound
        if self.cfg.dp_clipping == "adaptive":
            count = unclipped + noise_rng(self.cfg, COUNT_STREAM, server_round).normal(0.0, sigma_b)
            step = -self.cfg.dp_clip_lr * (count / m - self.cfg.dp_target_quantile)
            # the config bounds a noiseless step (RunConfig.check_privacy); the count's noise can still take
            # C out of float64 (math.exp raised OverflowError) or to 0, after which it never moves again
            next_clip = bound * math.exp(step) if step < MAX_EXP else math.inf
            if not (math.isfinite(next_clip) and next_clip > 0):
                raise ConfigError(f"adaptive clipping's C = {bound:g} x exp({step:g}) left float64 in round "
                                  f"{server_round} (dp-clip-lr={self.cfg.dp_clip_lr:g}, count noise sigma_b="
                                  f"{sigma_b:g}): lower dp-clip-lr or dp-count-noise")
        self.clip = next_clip
        return Release(mean, bound, std, len(updates) - unclipped, next_clip)


def local_update(cfg: RunConfig, update: Sequence[np.ndarray], server_round: int, partition_id: int) -> list[np.ndarray]:
    """``dp=local``: the client's own Gaussian mechanism, clip_C(Δ) + N(0, (z C)² I)."""
    clipped, _ = clip(update, cfg.dp_clip)
    return gaussian(clipped, cfg.dp_noise * cfg.dp_clip, noise_rng(cfg, LOCAL_STREAM, server_round, partition_id))


def rdp_accountant(q: float, z: float, steps: int):  # -> dp_accounting.rdp.RdpAccountant
    """``dp_accounting``'s RDP accountant (its default orders) after ``steps`` compositions of the
    Gaussian mechanism of noise multiplier ``z`` on a Poisson sample of rate ``q`` (``q = 1``: no
    sampling, the plain Gaussian mechanism)."""
    import dp_accounting  # scipy and mpmath: only where ε is computed

    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(sampled_gaussian(q, z), int(steps))
    return accountant


def pld_accountant(q: float, z: float, steps: int):  # -> dp_accounting.pld.PLDAccountant
    """``dp_accounting``'s privacy-loss-distribution accountant (Koskela et al. 2020; Doroshenko et al.
    2022: its default discretisation 1e-4, add-or-remove-one adjacency, as the RDP one) after the same
    compositions as :func:`rdp_accountant`. It bounds the same mechanism tighter: q = 0.3, z = 1, 4 steps,
    δ = 1e-5 gives ε 4.76 against RDP's 5.46 (tests/unit/test_privacy.py)."""
    from dp_accounting import pld

    accountant = pld.PLDAccountant()
    accountant.compose(sampled_gaussian(q, z), int(steps))
    return accountant


def sampled_gaussian(q: float, z: float):  # -> dp_accounting.DpEvent
    """The DP event of one round: the Gaussian mechanism of multiplier ``z``, on a Poisson sample of rate
    ``q`` when ``q < 1``."""
    import dp_accounting

    # absl warns per fractional RDP order whose series does not converge at a large q / small z; the
    # accountant leaves that order out (a valid bound from the rest), so the warning is not the user's
    logging.getLogger("absl").setLevel(logging.ERROR)
    event = dp_accounting.GaussianDpEvent(z)
    return dp_accounting.PoissonSampledDpEvent(q, event) if q < 1 else event


# ``dp-accountant``'s choices (fedtext.common.config.DP_ACCOUNTANTS names them; a test keeps the two equal)
ACCOUNTANTS = {"rdp": rdp_accountant, "pld": pld_accountant}


def epsilon(q: float, z: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """ε at ``delta`` after ``steps`` rounds of the sampled Gaussian mechanism, by the ``accountant``
    of :data:`ACCOUNTANTS` (``rdp``: its RDP-to-(ε, δ) conversion; ``pld``: the privacy loss
    distribution's). 0 steps: 0; z = 0: ∞ (no noise, no guarantee).

    Examples
    --------
    Abadi et al. (2016) §3.1: q = 0.01, σ = 4, δ = 10⁻⁵, 10,000 steps: ε ≈ 1.26 with the moments
    accountant (the same RDP curve, converted the classic way, gives 1.2586); this conversion,
    tighter, about 1.04 (tests/unit/test_privacy.py).
    """
    if steps <= 0:
        return 0.0
    if z <= 0:
        return math.inf
    return float(ACCOUNTANTS[accountant](q, z, steps).get_epsilon(delta))


def sampling_rate(cfg: RunConfig, participants: int) -> float:
    """q of central DP: the clients sampled per round over the participants (``clients-per-round=0``: all).
    ``client-sampling=poisson``: each participant's probability of joining a round
    (:meth:`fedtext.server.sampling.ClientSampler.poisson_rate`, the same ratio); ``fixed``: the fraction the
    Poisson accounting stands in for."""
    if participants <= 0:
        return 1.0
    return min(1.0, (cfg.clients_per_round or participants) / participants)


def accounting(cfg: RunConfig) -> str:
    """What the record's ε is the ε of (the privacy entry's ``accounting``): ``poisson``, the sampled
    Gaussian that ran (``client-sampling=poisson``, central DP); ``poisson-approximation``, a
    fixed-size cohort accounted as if Poisson-sampled (the DP-FedAvg papers' practice; the exact
    accounting of sampling without replacement is not what they report); ``no-amplification``, local
    DP (the server knows whom it asked, so a client's ε composes over the rounds it trained in)."""
    if cfg.dp == "local":
        return "no-amplification"
    return "poisson" if cfg.client_sampling == "poisson" else "poisson-approximation"


def spent(cfg: RunConfig, rounds: int, participants: int, most_rounds_of_a_client: int) -> float:
    """ε at ``dp-delta`` by ``dp-accountant`` after ``rounds`` releases: central, Poisson rate
    :func:`sampling_rate` over every release; local, no amplification, over the most rounds one client
    trained in."""
    if cfg.dp == "central":
        return epsilon(sampling_rate(cfg, participants), cfg.dp_noise, rounds, cfg.dp_delta, cfg.dp_accountant)
    return epsilon(1.0, cfg.dp_noise, most_rounds_of_a_client, cfg.dp_delta, cfg.dp_accountant)
