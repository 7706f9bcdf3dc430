"""Local CMA-ES for black-box clients (bbt-fed, FedBPT), started from any N(z, sigma^2 C).

pycma always starts from an isotropic distribution. To start from a downloaded
``N(z_t, sigma_t^2 C_t)`` we search in whitened coordinates ``z = z_t + L u`` with
``C_t = L L^T`` (Cholesky): CMA-ES is invariant under affine maps of the search space,
so pycma's ``u ~ N(m_u, sigma^2 C_u)`` is exactly ``z ~ N(z_t + L m_u, sigma^2 L C_u L^T)``,
and pycma's sigma is the step size in z-space.

A box bound ``|z_i| <= bound`` is handled by repair: candidates are clipped before
they are evaluated (pycma is told the fitness of the repaired point).
"""

from __future__ import annotations

import cma
import numpy as np


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
        self.es = cma.CMAEvolutionStrategy(np.zeros(d), float(sigma), opts)
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
