"""What the two BBT-style methods (bbt-fed, fedbpt) share: CMA-ES on z in ``p0 + A z``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import MethodConfig, check_range


@dataclass(frozen=True)
class SubspaceConfig(MethodConfig):
    """Local CMA-ES on z in R^d (BBT, Sun et al. 2022); each method keeps its own copy
    of these keys (``bbt-fed.popsize``, ``fedbpt.popsize``), so a comparison states
    both budgets."""

    local_training: ClassVar[str] = "CMA-ES (derivative-free, no gradients)"

    #: CMA-ES iterations per round (FedBPT's I local iterations)
    local_steps: int = 4  # CMA-ES iterations per round
    intrinsic_dim: int = 100  # d: dimension of z (A is (T*D) x d, rebuilt from seed, never sent)
    #: CMA-ES population λ per iteration (FedBPT's λ_k)
    popsize: int = 10  # CMA-ES population lambda per iteration
    #: initial CMA-ES step size σ (BBT uses 1.0; FedBPT's σ_0)
    sigma0: float = 1.0  # initial CMA-ES step size (BBT uses 1.0)

    def __post_init__(self) -> None:
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("intrinsic_dim"), self.intrinsic_dim, 1)
        check_range(self.key("popsize"), self.popsize, 2)  # CMA-ES needs a population
        check_range(self.key("sigma0"), self.sigma0, 0, low_open=True)

