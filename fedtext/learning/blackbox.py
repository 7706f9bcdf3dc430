"""Local CMA-ES for black-box clients (bbt-fed, FedBPT), started from any N(z, sigma^2 C).

pycma always starts from an isotropic distribution. To start from a downloaded
``N(z_t, sigma_t^2 C_t)`` we search in whitened coordinates ``z = z_t + L u`` with
``C_t = L L^T`` (Cholesky): CMA-ES is invariant under affine maps of the search space,
so pycma's ``u ~ N(m_u, sigma^2 C_u)`` is exactly ``z ~ N(z_t + L m_u, sigma^2 L C_u L^T)``,
and pycma's sigma is the step size in z-space.

A box bound ``|z_i| <= bound`` is handled by repair: candidates are clipped before
they are evaluated (pycma is told the fitness of the repaired point).

Step-size rule. Every pycma object of fedtext (the clients' local CMA-ES here, the
authors' reference server in :mod:`fedtext.methods.fedbpt.cmaes`) comes from :func:`new_es`,
which fixes the step-size adaptation to what the authors ran (BBT and FedBPT pin
``cma==3.4.0``): cumulative step-size adaptation (CSA) with cma 3.4's damping, whatever
pycma is installed. pycma >= 4 otherwise picks TPA instead of CSA from dimension 300 on
(``TPA_dimension``; FedBPT's d = 500) and computes CSA's damping d_sigma by a new formula:
at d = 500 the reference server's sigma after 5 rounds was 1.078 under cma 4.5 against
0.913 under cma 3.4, and at d = 10 sigma differed in the 6th digit
(``tools/reference/fedbpt.py``; fixtures in ``tests/unit/reference/fedbpt.json``).
"""

from __future__ import annotations

import cma
import numpy as np


def classic_csa_damping(es: cma.CMAEvolutionStrategy) -> float:
    """d_sigma of CSA as cma 3.4 computes it (``CMAAdaptSigmaCSA.initialize``) with pycma's
    default ``CSA_dampfac = 1`` and ``CSA_damp_mueff_exponent = 1/2`` (fedtext never sets
    them; :func:`new_es` refuses them)::

        d_sigma = 1/2 + min(1, (lam_mirr / (0.159 lambda) - 1)^2) / 2
                  + 2 max(0, ((mu_eff - 1) / (n + 1))^(1/2) - 1) + c_sigma

    Without mirrored samples (``lam_mirr = 0``) this is Hansen's (2016) tutorial value
    ``1 + 2 max(0, sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma``; pycma mirrors samples of
    populations below 6 (``CMA_mirrors``), which the first terms account for."""
    sp = es.sp
    return (0.5 + min(1.0, (sp.lam_mirr / (0.159 * sp.popsize) - 1) ** 2) / 2
            + 2 * max(0.0, ((sp.weights.mueff - 1) / (es.N + 1)) ** 0.5 - 1) + es.adapt_sigma.cs)


def classic_chi_n(n: int) -> float:
    """E|N(0, I_n)| as cma 3.4 approximates it in CSA's step-size update (``Mh.chiN``): exact
    values for n <= 6, else ``sqrt(n) (1 - 1/(4n) + 1/(26 n^2))``. cma 4.5 tabulates exact
    values up to n = 100 and uses ``1/(32 n^2)`` above (d = 10: 3.08433 against 3.08437, which
    moved sigma in the 6th digit per step)."""
    exact = {1: 0.7978845608028654, 2: 1.2533141373156, 3: 1.59576912160573, 4: 1.87997120597325,
             5: 2.1276921621409746, 6: 2.3499640074665633}
    return exact[n] if n in exact else n**0.5 * (1 - 1.0 / (4 * n) + 1.0 / (26 * n**2))


# pycma options that would change the step-size rule new_es pins (pycma matches option names
# case-insensitively; fedtext writes them as pycma documents them)
PINNED_OPTIONS = ("AdaptSigma", "CSA_dampfac", "CSA_damp_mueff_exponent", "CSA_squared")


def new_es(x0: np.ndarray, sigma0: float, opts: dict) -> cma.CMAEvolutionStrategy:
    """A pycma ``CMAEvolutionStrategy`` with CSA step-size adaptation, cma 3.4's damping
    (:func:`classic_csa_damping`) and cma 3.4's E|N(0, I)| (:func:`classic_chi_n`), as the
    authors ran pycma, on any installed version (``opts`` must not set :data:`PINNED_OPTIONS`).

    CSA's update reads E|N(0, I_n)| from pycma's process-wide cache
    (``MathHelperFunctions._chiN_dict``, the same private table in cma 3.4 and 4.x); the
    entry for this dimension is set to cma 3.4's value, for every pycma object of the
    process (fedtext makes all of them here)."""
    pinned = [k for k in PINNED_OPTIONS if k in opts]
    if pinned:
        raise ValueError(f"new_es sets {', '.join(pinned)} itself (CSA, as the authors ran pycma)")
    n = int(np.size(x0))
    cma.utilities.math.MathHelperFunctions._chiN_dict[n] = classic_chi_n(n)
    es = cma.CMAEvolutionStrategy(x0, sigma0, {**opts, "AdaptSigma": cma.sigma_adaptation.CMAAdaptSigmaCSA})
    a = es.adapt_sigma
    if not a.is_initialized:  # cma 3.x initialises CSA lazily, at the first tell; 4.x in the constructor
        a.initialize(es)
    a.damps = classic_csa_damping(es)
    return es


class WhitenedCMA:
    """ask/tell CMA-ES in z-space from N(mean, sigma^2 C).

    Parameters
    ----------
    mean, sigma, cov
        Start distribution; ``cov=None`` means the identity.
    popsize
        lambda.
    seed
        pycma seed (must be > 0: pycma treats 0 as "from the clock").
    equal_weights
        Local rank-mu with mu = lambda/2 equal weights (FedBPT's mu_l); otherwise
        pycma's default (log-decreasing positive and active negative weights).
    bound
        Box bound on z (0 = none).
    """

    def __init__(
        self,
        mean: np.ndarray,
        sigma: float,
        cov: np.ndarray | None,
        popsize: int,
        seed: int,
        equal_weights: bool = False,
        bound: float = 0.0,
    ) -> None:
        if seed <= 0:
            raise ValueError("pycma seeds must be > 0 (0 means 'seed from the clock')")
        self.z0 = np.asarray(mean, dtype=np.float64)
        d = self.z0.shape[0]
        self.L = None if cov is None else np.linalg.cholesky((cov + cov.T) / 2 + 1e-10 * np.eye(d))
        opts: dict = {"popsize": popsize, "seed": seed, "verbose": -9}
        if equal_weights:
            mu = popsize // 2
            opts["CMA_recombination_weights"] = [1.0] * mu + [0.0] * (popsize - mu)
        self.es = new_es(np.zeros(d), float(sigma), opts)
        self.bound = bound
        self._u: list[np.ndarray] = []

    def _to_z(self, u: np.ndarray) -> np.ndarray:
        z = self.z0 + (u if self.L is None else u @ self.L.T)
        return np.clip(z, -self.bound, self.bound) if self.bound else z

    def ask(self) -> np.ndarray:
        """lambda candidates ``[lambda, d]`` in z-space."""
        self._u = self.es.ask()
        return self._to_z(np.asarray(self._u))

    def tell(self, fitness: np.ndarray) -> None:
        """Fitness of the last :meth:`ask` (lower is better)."""
        self.es.tell(self._u, [float(f) for f in fitness])

    @property
    def sigma(self) -> float:
        return float(self.es.sigma)

    @property
    def mean(self) -> np.ndarray:
        """Current search mean in z-space."""
        return self._to_z(np.asarray(self.es.mean))

    @property
    def cov(self) -> np.ndarray:
        """Current covariance in z-space, ``L C_u L^T``."""
        c = np.asarray(self.es.sm.C)
        return c if self.L is None else self.L @ c @ self.L.T
