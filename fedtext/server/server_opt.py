"""Server optimizers: the server's step from the mean of a round's uploads (``server-optimizer``).

Reddi et al. (2021), "Adaptive Federated Optimization" (ICLR), Algorithm 2: the server
treats ``Δ_t = mean_k(x_k) − x_t`` (the example-weighted mean of the uploads minus the
global arrays it sent) as a pseudo-gradient and takes an optimizer step with it:

* ``fedavg``: ``x_{t+1} = x_t + η Δ_t`` (η = 1: exactly the mean, returned as computed);
* ``fedavgm`` (Hsu et al. 2019): ``v_t = β v_{t-1} − Δ_t`` (``v_1 = −Δ_1``), ``x_{t+1} = x_t − η v_t``;
* ``fedadam``: ``m_t = β1 m_{t-1} + (1−β1) Δ_t``, ``v_t = β2 v_{t-1} + (1−β2) Δ_t²``,
  ``x_{t+1} = x_t + η_t m_t / (√v_t + τ)`` with Flower's bias-corrected
  ``η_t = η √(1−β2^{t+1}) / (1−β1^{t+1})`` (t the server round);
* ``fedyogi``: as fedadam with ``v_t = v_{t-1} − (1−β2) Δ_t² sign(v_{t-1} − Δ_t²)`` and no
  bias correction;
* ``fedadagrad``: ``m_t = Δ_t`` (Flower fixes β1 = 0), ``v_t = v_{t-1} + Δ_t²``,
  ``x_{t+1} = x_t + η m_t / (√v_t + τ)``.

The arithmetic is Flower 1.42's (``flwr.server.strategy.FedAvgM`` / ``FedAdam`` /
``FedYogi`` / ``FedAdagrad``: the same operations in the same order, ``m_0 = v_0 = 0``),
so on float64 arrays the result is Flower's bit for bit (``tests/unit/test_server_opt.py``
drives Flower's classes on the same inputs). Departures, each because those classes are
whole strategies rather than an update: (1) the update is applied to the mean fedtext's
strategy already computed from validated uploads, not to Flower's own mean of raw
``FitRes``; (2) every array keeps its dtype (float32 stays float32: Flower's FedAdam
multiplies by a float64 ``η_t`` and so returns float64 arrays); (3) a round whose uploads
were all dropped leaves x, m and v as they were (Flower's FedAvgM asserts its momentum
exists from round 2 on, which a first round without valid uploads would break); (4) the
state ``m``, ``v`` is checkpointed with the global arrays (:meth:`ServerOptimizer.state`),
so ``resume=`` continues with the same moments; (5) a step that turns finite arrays into
non-finite ones (an overflow: ``server-lr=1e300``) ends the run with one configuration-error
line (:meth:`ServerOptimizer.check_finite`), where Flower would send them to the clients.

Defaults (``server-lr=0`` and ``server-tau=0`` mean "the optimizer's own") are Flower's:
:data:`fedtext.common.config.SERVER_OPTIMIZERS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedtext.common.config import SERVER_OPTIMIZERS, ConfigError, RunConfig

Arrays = list[np.ndarray]


class ServerOptimizer:
    """One server optimizer and its state (``m``, ``v``: one array per global array, or None).

    Parameters
    ----------
    name
        A key of :data:`fedtext.common.config.SERVER_OPTIMIZERS`.
    lr, momentum, beta1, beta2, tau
        η, β (fedavgm), β1, β2, τ, already resolved (no "0 = default" here).
    """

    def __init__(self, name: str, lr: float, momentum: float = 0.0, beta1: float = 0.9, beta2: float = 0.99,
                 tau: float = 1e-9) -> None:
        if name not in SERVER_OPTIMIZERS:
            raise ValueError(f"unknown server optimizer {name!r}")
        self.name = name
        self.lr, self.momentum, self.beta1, self.beta2, self.tau = lr, momentum, beta1, beta2, tau
        self.m: Arrays | None = None  # fedavgm's momentum vector v, or the adaptive methods' first moment
        self.v: Arrays | None = None  # second moment (fedadam, fedyogi, fedadagrad)

    @classmethod
    def from_config(cls, cfg: RunConfig) -> ServerOptimizer:
        """The optimizer ``cfg``'s ``server-*`` keys name, its defaults resolved."""
        return cls(cfg.server_optimizer, cfg.resolved_server_lr, cfg.server_momentum, cfg.server_beta1,
                   cfg.server_beta2, cfg.resolved_server_tau)

    @property
    def is_identity(self) -> bool:
        """Whether the step returns the mean itself (fedavg, or fedavgm without momentum, at η = 1)."""
        return self.name in ("fedavg", "fedavgm") and self.lr == 1.0 and self.momentum == 0.0

    @property
    def moments(self) -> int:
        """How many arrays of state it keeps per global array (checkpoint bound)."""
        return {"fedavg": 0, "fedavgm": 1}.get(self.name, 2)

    # ----------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps: ``{"m": ..., "v": ...}`` (lists of arrays, or None)."""
        return {"m": self.m, "v": self.v}

    def reset(self) -> None:
        """Forget the moments (m, v): the next step starts them afresh. For a round whose new
        global arrays are a replacement, not a step (FedDPGu's G <- G_c^u): moments built from
        training on the forgotten examples would otherwise keep pushing along their direction."""
        self.m = self.v = None

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state`'s output (a resumed run)."""
        self.m = None if state.get("m") is None else [np.asarray(a) for a in state["m"]]
        self.v = None if state.get("v") is None else [np.asarray(a) for a in state["v"]]

    # ------------------------------------------------------------------ step
    def step(self, server_round: int, x: Sequence[np.ndarray], mean: Sequence[np.ndarray]) -> Arrays:
        """``x_{t+1}`` from the global arrays ``x`` (``x_t``, what was sent) and ``mean``
        (the mean of this round's uploads); updates ``m`` and ``v``.

        Every array keeps ``x``'s dtype (python-float scalars keep numpy's arithmetic in it).
        """
        if self.is_identity:
            return [np.asarray(a) for a in mean]
        x = [np.asarray(a) for a in x]
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported by check_finite, in one line
            delta = [np.asarray(a, dtype=b.dtype) - b for a, b in zip(mean, x, strict=True)]
            if self.name in ("fedavg", "fedavgm"):
                new = self._sgd(server_round, x, delta)
            else:
                new = self._adaptive(server_round, x, delta)
            new = [np.asarray(a, dtype=b.dtype) for a, b in zip(new, x, strict=True)]
        self.check_finite(server_round, [*x, *mean], new)
        return new

    def check_finite(self, server_round: int, given: Arrays, new: Arrays) -> None:
        """Raise one ``ConfigError`` line when the step made ``new`` or the state (m, v)
        non-finite from finite ``given`` arrays (x_t and the mean of validated uploads).

        Why a configuration error: the uploads were finite, so the overflow is the
        optimizer's own (``server-lr=1e300`` overflows float32 in the first step). Left
        alone, the non-finite global arrays went to every client, whose evaluations were
        then dropped as ``loss=nan`` (blamed on the clients) and the run finished. Raised
        inside the round, the ServerApp ends the run ``failed`` with this line
        (:class:`fedtext.server_app.RecordingServer`)."""
        if not all(np.isfinite(a).all() for a in given):
            return  # not the optimizer's doing; the uploads' validation speaks for them
        state = [("the global arrays", new), ("its state m", self.m or []), ("its state v", self.v or [])]
        bad = next((what for what, arrays in state if not all(np.isfinite(a).all() for a in arrays)), None)
        if bad is not None:
            raise ConfigError(f"server-optimizer={self.name} with server-lr={self.lr:g} made {bad} non-finite in "
                              f"round {server_round}: lower server-lr")

    def _sgd(self, server_round: int, x: Arrays, delta: Arrays) -> Arrays:
        """Flower's FedAvgM: pseudo-gradient ``g = x − mean = −Δ``; ``v = β v + g`` (round
        1, or the first with uploads: ``v = g``); ``x − η v`` (torch.optim.SGD's convention)."""
        grad = [-d for d in delta]  # x − mean, as Flower computes it: (x − m) is −(m − x) exactly
        if self.momentum > 0.0:
            self.m = grad if self.m is None else [self.momentum * v + g for v, g in zip(self.m, grad, strict=True)]
            grad = self.m
        return [a - self.lr * g for a, g in zip(x, grad, strict=True)]

    def _adaptive(self, server_round: int, x: Arrays, delta: Arrays) -> Arrays:
        """Flower's FedAdam / FedYogi / FedAdagrad update (module docstring)."""
        beta1 = 0.0 if self.name == "fedadagrad" else self.beta1
        if self.m is None:
            self.m = [np.zeros_like(d) for d in delta]
        self.m = [np.multiply(beta1, m) + (1 - beta1) * d for m, d in zip(self.m, delta, strict=True)]
        if self.v is None:
            self.v = [np.zeros_like(d) for d in delta]
        if self.name == "fedadam":
            self.v = [self.beta2 * v + (1 - self.beta2) * np.multiply(d, d) for v, d in zip(self.v, delta, strict=True)]
            # Kingma & Ba's alpha_t, with Flower's exponent t + 1; a python float keeps float32 arrays float32
            eta = float(self.lr * np.sqrt(1 - np.power(self.beta2, server_round + 1.0))
                        / (1 - np.power(self.beta1, server_round + 1.0)))
        elif self.name == "fedyogi":
            self.v = [v - (1.0 - self.beta2) * np.multiply(d, d) * np.sign(v - np.multiply(d, d))
                      for v, d in zip(self.v, delta, strict=True)]
            eta = self.lr
        else:  # fedadagrad
            self.v = [v + np.multiply(d, d) for v, d in zip(self.v, delta, strict=True)]
            eta = self.lr
        return [a + eta * m / (np.sqrt(v) + self.tau) for a, m, v in zip(x, self.m, self.v, strict=True)]


def state_bytes(cfg: RunConfig, global_nbytes: int, arrays: int) -> int:
    """The most bytes :meth:`ServerOptimizer.state`, pickled, holds for a model of
    ``global_nbytes`` bytes in ``arrays`` arrays: one copy per moment (float64 at most:
    factor 2 over float32 specs), plus pickle framing per array (a few hundred bytes)."""
    moments = ServerOptimizer.from_config(cfg).moments
    return moments * (2 * global_nbytes + 512 * arrays)
