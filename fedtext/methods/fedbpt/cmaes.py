"""The server-level CMA-ES step of FedBPT, written out (Algorithm 2, eqs. (4)-(13)).

FedBPT's server treats the clients' uploaded means ``z^k_{t+1}`` as one population
"sampled" around ``z_t`` and runs one CMA-ES update on it. The step size that
produced that population is intractable (each client took I local steps), so the
update uses the corrected step size ``sigma'_t`` of eq. (12)/(13) in its place.

The update is the standard CMA-ES of Hansen (2016, "The CMA Evolution Strategy: A
Tutorial"), which Algorithm 2 abbreviates, with the equal recombination weights
``w_i = 1/mu`` that eq. (5) prescribes (so mu_eff = mu):

    y_i      = (z_i - z_t) / sigma'                                  i = 1..mu (best first)
    <y>      = sum_i y_i / mu            -> z_{t+1} = z_t + sigma' <y>            eq. (5)
    p_sigma <- (1-c_s) p_sigma + sqrt(c_s (2-c_s) mu) C^{-1/2} <y>                eq. (6)
    h_sigma  = 1[ |p_sigma| / sqrt(1-(1-c_s)^(2(g+1))) < (1.4 + 2/(n+1)) E|N(0,I)| ]
    p_c     <- (1-c_c) p_c + h_sigma sqrt(c_c (2-c_c) mu) <y>
    C       <- (1 - c_1 - c_mu + c_h) C + c_1 p_c p_c^T + c_mu sum_i y_i y_i^T / mu
               with c_h = (1-h_sigma) c_1 c_c (2-c_c)          (Alg. 2 line 6's c_s term)
    sigma   <- sigma' exp((c_s/d_s) (|p_sigma| / E|N(0,I)| - 1))

Algorithm 2 line 5 prints ``sigma <- sigma' exp(|p_sigma|/E|N| - 1)``. The default
(``fedbpt.sigma-update=damped``) keeps the tutorial's damping ``c_s/d_s`` that the
paper's CMA-ES reference uses (without it sigma changes by a factor e per unit of
path-length deviation); ``printed`` runs the line as printed.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import cma
import numpy as np

from fedtext.learning.blackbox import new_es
from fedtext.methods.fedbpt.config import REFERENCE_CLAMPS, SIGMA_UPDATES


@dataclass(frozen=True)
class CMAState:
    """Global search distribution N(mean, sigma^2 C) and CMA-ES evolution paths."""

    mean: np.ndarray  # z_t, [n]
    sigma: float  # sigma_t
    C: np.ndarray  # C_t, [n, n]
    p_sigma: np.ndarray  # [n]
    p_c: np.ndarray  # [n]
    generation: int = 0

    @classmethod
    def initial(cls, n: int, sigma0: float, mean: np.ndarray | None = None) -> "CMAState":
        z = np.zeros(n) if mean is None else np.asarray(mean, dtype=np.float64)
        return cls(z, float(sigma0), np.eye(n), np.zeros(n), np.zeros(n), 0)

    def arrays(self) -> dict[str, np.ndarray]:
        """The state as plain arrays (checkpointing)."""
        return {
            "mean": self.mean, "sigma": np.array([self.sigma]), "C": self.C,
            "p_sigma": self.p_sigma, "p_c": self.p_c, "generation": np.array([self.generation]),
        }


@dataclass(frozen=True)
class CMAConstants:
    """Learning rates of CMA-ES for dimension n and mu equal weights (Hansen 2016, Table 1)."""

    n: int
    mu: int
    c_sigma: float
    d_sigma: float
    c_c: float
    c_1: float
    c_mu: float
    chi_n: float  # E|N(0, I)|

    @classmethod
    def for_population(cls, n: int, mu: int) -> "CMAConstants":
        mu_eff = float(mu)  # equal weights 1/mu
        c_sigma = (mu_eff + 2) / (n + mu_eff + 5)
        d_sigma = 1 + 2 * max(0.0, np.sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma
        c_c = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n)
        c_1 = 2 / ((n + 1.3) ** 2 + mu_eff)
        c_mu = min(1 - c_1, 2 * (mu_eff - 2 + 1 / mu_eff) / ((n + 2) ** 2 + mu_eff))
        chi_n = np.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n**2))
        return cls(n, mu, c_sigma, d_sigma, c_c, c_1, max(0.0, c_mu), float(chi_n))


def inv_sqrt(C: np.ndarray) -> np.ndarray:
    """C^{-1/2} of a symmetric positive definite matrix (eigen-decomposition)."""
    vals, vecs = np.linalg.eigh((C + C.T) / 2)
    return (vecs / np.sqrt(np.maximum(vals, 1e-20))) @ vecs.T


def corrected_sigma(
    local_sigmas: Sequence[np.ndarray], losses: Sequence[float], popsizes: Sequence[int]
) -> float:
    """sigma'_t of FedBPT eq. (12) over the best mu = floor(|S_t|/2) clients.

    ``sigma'^2 = sum_{k in S'} sum_j (sigma^k_{t,j})^2 / (mu * mu_l,k)`` with the local
    rank ``mu_l,k = lambda_k / 2``. With equal ``lambda_k`` and even ``|S_t|`` this is
    eq. (4)/(13), ``2 sqrt(sum sum sigma^2 / (|S_t| lambda_k))``; unequal populations are
    handled per client, as the derivation of eq. (11) allows.
    """
    if not (len(local_sigmas) == len(losses) == len(popsizes)) or not losses:
        raise ValueError("need one sigma list, loss and popsize per client")
    if any(lam < 2 for lam in popsizes):
        raise ValueError("every local population must have lambda_k >= 2")
    mu = max(1, len(losses) // 2)
    best = np.argsort(np.asarray(losses), kind="stable")[:mu]
    total = sum(float(np.sum(np.square(local_sigmas[k]))) / (popsizes[k] / 2) for k in best)
    return float(np.sqrt(total / mu))



def server_step(
    state: CMAState,
    solutions: np.ndarray,
    losses: Sequence[float],
    sigma_prime: float,
    sigma_update: str = "damped",
) -> CMAState:
    """One CMA-ES update of the global distribution (FedBPT Algorithm 2 with sigma').

    Parameters
    ----------
    state
        z_t, sigma_t, C_t and the evolution paths.
    solutions
        Uploaded client means ``[|S_t|, n]``.
    losses
        Their local losses ``F^k(z^k_{t+1})`` (lower is better).
    sigma_prime
        The corrected step size of eq. (12) that replaces sigma_t in the update.
    sigma_update
        ``damped``: ``sigma' exp((c_s/d_s)(|p_sigma|/E|N| - 1))`` (CMA-ES tutorial);
        ``printed``: ``sigma' exp(|p_sigma|/E|N| - 1)`` (Alg. 2 line 5 as printed).
    """
    if sigma_update not in SIGMA_UPDATES:
        raise ValueError(f"sigma_update must be one of {SIGMA_UPDATES}, got {sigma_update!r}")
    solutions = np.asarray(solutions, dtype=np.float64)
    n = state.mean.shape[0]
    mu = max(1, len(solutions) // 2)
    k = CMAConstants.for_population(n, mu)
    order = np.argsort(np.asarray(losses), kind="stable")[:mu]  # Alg. 2 line 1
    y = (solutions[order] - state.mean) / sigma_prime  # [mu, n]
    y_w = y.mean(0)
    mean = state.mean + sigma_prime * y_w  # eq. (5): mean of the best mu
    p_sigma = (1 - k.c_sigma) * state.p_sigma + np.sqrt(k.c_sigma * (2 - k.c_sigma) * mu) * (
        inv_sqrt(state.C) @ y_w
    )  # eq. (6)
    g = state.generation + 1
    norm = np.linalg.norm(p_sigma)
    h_sigma = float(norm / np.sqrt(1 - (1 - k.c_sigma) ** (2 * g)) < (1.4 + 2 / (n + 1)) * k.chi_n)
    p_c = (1 - k.c_c) * state.p_c + h_sigma * np.sqrt(k.c_c * (2 - k.c_c) * mu) * y_w
    c_h = (1 - h_sigma) * k.c_1 * k.c_c * (2 - k.c_c)
    C = (1 - k.c_1 - k.c_mu + c_h) * state.C + k.c_1 * np.outer(p_c, p_c) + k.c_mu * (y.T @ y) / mu
    damping = k.c_sigma / k.d_sigma if sigma_update == "damped" else 1.0
    sigma = sigma_prime * float(np.exp(damping * (norm / k.chi_n - 1)))
    return replace(state, mean=mean, sigma=sigma, C=(C + C.T) / 2, p_sigma=p_sigma, p_c=p_c, generation=g)


# ------------------------------------------------------------------ reference step


def reference_sigma_prime(local_sigmas: Sequence[np.ndarray], popsize: int) -> float:
    """sigma' of the authors' server (NVFlare ``research/fed-bpt``, ``global_es.py``).

    ``sigma'^2 = sum_k sum_j (sigma^k_{t,j})^2 / (m * mu_l)`` over **all** m clients of
    the round, with ``mu_l = floor(lambda / 2)``, pycma's default parent number of the
    local population (``RecombinationWeights(lambda).mu``). Against eq. (4) of the
    paper: no factor 2, no selection of the best half, mu_l in place of lambda.
    """
    if not local_sigmas:
        raise ValueError("need the local step sizes of at least one client")
    if popsize < 2:
        raise ValueError("the local population must have lambda >= 2")
    total = sum(float(np.sum(np.square(s))) for s in local_sigmas)
    return float(np.sqrt(total / len(local_sigmas) / (popsize // 2)))


def reference_local_sigma(
    sigma_after: float, sigma_prime: float, previous: float, clamp: str = "as-run", floor: float = 0.5
) -> float:
    """The step size the reference server sends to clients after its CMA-ES step.

    ``sigma_local <- (sigma_after / sigma') * sigma_local``: the server's own step-size
    adaptation, as a ratio, applied to the clients' step size. ``global_es.py`` then
    runs::

        global_es.sigma = sigma_after / sigma_old * local_sigma_current
        local_sigma_current = global_es.sigma
        if global_es.sigma < 0.5: global_es.sigma = 0.5                  # "Set sigma local: 0.5"
        if global_es.sigma > local_sigma_current: global_es.sigma = local_sigma_current

    ``local_sigma_current`` is reassigned *before* the two checks, so the second undoes
    the first: as run, the value is never clamped (``clamp="as-run"``). The log lines
    say the intent was ``[0.5, previous sigma_local]``; ``clamp="as-logged"`` does that.
    """
    if clamp not in REFERENCE_CLAMPS:
        raise ValueError(f"clamp must be one of {REFERENCE_CLAMPS}, got {clamp!r}")
    new = sigma_after / sigma_prime * previous
    if clamp == "as-logged":
        new = min(max(new, floor), previous)
    return float(new)


class ReferenceServerES:
    """The authors' server CMA-ES (NVFlare ``research/fed-bpt/src/global_es.py``), on pycma.

    One pycma ``CMAEvolutionStrategy`` over z with population = parent number = the round's
    clients (``popsize=m, CMA_mu=m``: pycma then recombines all m uploads with the positive
    half of its default weights for 2m, ``w_i ∝ ln((2m+1)/2) - ln i``, by their uploaded
    fitness). A round: ``sigma <- sigma'`` (:func:`reference_sigma_prime`), ``ask()`` (as the
    reference does; the samples are discarded), ``tell(client means, fitnesses)``; pycma
    treats the means as injected solutions (it shortens any whose Mahalanobis distance from
    the mean is implausibly long under N(z, sigma'^2 C)). The clients are then sent
    ``(mean, sigma_local, C)`` with :func:`reference_local_sigma`. pycma runs with the
    authors' step-size rule whatever version is installed (:func:`fedtext.learning.blackbox.new_es`).

    m is the round's clients as configured (``clients-per-round``; with 0, those asked in the
    round that builds it), not its valid uploads: the authors fix m to their client count.

    Dropped uploads. The authors' server waits for all m clients (``send_model_and_wait``);
    sigma' divides by m and pycma's weights are those of m. Here a round with k valid
    uploads recombines exactly those k, with pycma's weights for a population of k, and
    sigma' divides by the same k (:func:`reference_sigma_prime`): the round's step is pycma's
    step of a population-k ES carrying this one's state (mean, sigma, C and its
    decomposition, both paths, iteration count), which is bitwise pycma's own step when
    k = m (``tests/unit/test_fedbpt.py``). A round with fewer than 2 valid uploads is not a
    population: it is not told, the state is kept and :meth:`tell` returns ``None``.
    """

    def __init__(self, d: int, sigma0: float, m: int, seed: int, clamp: str = "as-run") -> None:
        if seed <= 0:
            raise ValueError("pycma seeds must be > 0 (0 means 'seed from the clock')")
        if clamp not in REFERENCE_CLAMPS:
            raise ValueError(f"clamp must be one of {REFERENCE_CLAMPS}, got {clamp!r}")
        if m < 2:
            raise ValueError("the server's population needs m >= 2 clients")
        self.seed, self.d = seed, d
        self.es = new_es(np.zeros(d), float(sigma0), self._opts(m))  # CSA as cma 3.4 (fedtext.learning.blackbox.new_es)
        self.m, self.clamp = m, clamp
        self.sigma_local = float(sigma0)  # what clients start from; sigma_0 at round 1

    def _opts(self, m: int) -> dict:
        return {"popsize": m, "CMA_mu": m, "seed": self.seed, "verbose": -9}

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.es.mean, dtype=np.float64)

    @property
    def C(self) -> np.ndarray:
        return np.asarray(self.es.sm.C, dtype=np.float64)

    def _population(self, k: int) -> cma.CMAEvolutionStrategy:
        """A pycma object for a population of k (its weights and learning rates; its search
        state is this server's, given by :func:`carry_state` before a step)."""
        return new_es(self.es.mean, self.es.sigma, self._opts(k))

    def weights(self, k: int | None = None) -> np.ndarray:
        """pycma's recombination weights of k ranked uploads (default m; sum 1)."""
        k = k or self.m
        es = self.es if k == self.m else self._population(k)
        return np.asarray(es.sp.weights[:k], dtype=np.float64)

    def tell(self, solutions: np.ndarray, fitnesses: Sequence[float], sigma_prime: float) -> float | None:
        """One server step on the round's k uploads; returns pycma's sigma after ``tell``
        (None: fewer than 2 uploads, not told)."""
        k = len(solutions)
        if k < 2:
            return None
        self.es.sigma = float(sigma_prime)
        es = self.es if k == self.m else self._population(k)
        with warnings.catch_warnings():  # the uploads are "injected" solutions by design
            warnings.simplefilter("ignore", cma.evolution_strategy.InjectionWarning)
            es.ask()
            if es is not self.es:
                carry_state(self.es, es)  # the population-k ES continues from this one's state
            es.tell([np.asarray(s, dtype=np.float64) for s in solutions], [float(f) for f in fitnesses])
        if es is not self.es:
            carry_state(es, self.es)
        sigma_after = float(self.es.sigma)
        self.sigma_local = reference_local_sigma(sigma_after, sigma_prime, self.sigma_local, self.clamp)
        self.es.sigma = self.sigma_local  # what global_es carries to the clients
        return sigma_after

    def arrays(self) -> dict[str, np.ndarray]:
        """The state as plain arrays (checkpointing; pycma's paths stay in the object)."""
        return {"mean": self.mean, "sigma": np.array([self.sigma_local]), "C": self.C,
                "generation": np.array([self.es.countiter])}


# What carries a pycma object's search state (cma 3.4 and 4.x): of the strategy, its mean,
# step size, rank-one path, iteration count and previous mean; of its covariance sampler
# (GaussFullSampler), C, its eigen decomposition and the counters of its lazy re-decomposition;
# of CSA, p_sigma (made at the first tell). Everything else (weights, learning rates, the
# lazy-update gap, lambda, mu_eff) belongs to the population and stays the receiver's. Besides,
# of the strategy, its wall-clock timer: pycma's ask() makes it at iteration 0 only and ticks it
# after, so a server whose first step went through a population-k ES (a short first round)
# needs it for its own next ask() (no number depends on it).
ES_STATE = ("mean", "sigma", "pc", "countiter", "mean_old", "timer")
SAMPLER_STATE = ("C", "B", "D", "_inverse_root_C", "count_eigen", "count_tell", "last_update", "_corr_condition",
                 "_corr_condition_count_eigen")
CSA_STATE = ("ps",)


def carry_state(src: cma.CMAEvolutionStrategy, dst: cma.CMAEvolutionStrategy) -> None:
    """Give ``dst`` copies of the search state of ``src`` (:data:`ES_STATE`,
    :data:`SAMPLER_STATE`, :data:`CSA_STATE`; an attribute ``src`` does not have yet is left
    alone): pycma's ``tell`` on ``dst`` then makes the step ``src`` would make with ``dst``'s
    population (equal to the last bit for the same population: tests/unit/test_fedbpt.py)."""
    for a, b, names in ((src, dst, ES_STATE), (src.sm, dst.sm, SAMPLER_STATE),
                        (src.adapt_sigma, dst.adapt_sigma, CSA_STATE)):
        for name in names:
            if hasattr(a, name):
                setattr(b, name, copy.deepcopy(getattr(a, name)))
