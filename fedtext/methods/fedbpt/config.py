"""FedBPT's run-config keys (``[tool.flwr.app.config.fedbpt]``), validated once; imports no
torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedtext.config import ConfigError, check_choice, check_range
from fedtext.metrics import MetricSpec
from fedtext.methods.subspace import SubspaceConfig

DOWNLOADS = ("full", "compact")
SERVER_STEPS = ("paper", "reference")
FITNESSES = ("perturbed", "ratio")
SIGMA_UPDATES = ("damped", "printed")  # sigma_update of fedtext.methods.fedbpt.cmaes.server_step
REFERENCE_CLAMPS = ("as-run", "as-logged")  # clamp of fedtext.methods.fedbpt.cmaes.ReferenceServerES


@dataclass(frozen=True)
class FedBPTConfig(SubspaceConfig):
    """``fedbpt.*``: local CMA-ES, input perturbation, download, server step and fitness."""

    name: ClassVar[str] = "fedbpt"
    model: ClassVar[str] = "fedtext.methods.fedbpt.model:FedBPTModel"
    strategy: ClassVar[str] = "strategies.fedbpt:FedBPT"
    client: ClassVar[str] = "clients.fedbpt:FedBPTClient"
    server_aggregation: ClassVar[str] = "a CMA-ES update"  # Algorithm 2: the global search distribution, not a mean
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    # eq. (4) keeps the best floor(|S_t|/2) clients and the server's CMA-ES recombines a population:
    # one client per round would skip every server step (the authors' code refuses to start)
    min_clients_per_round: ClassVar[int] = 2

    keep_rate: float = 0.9  # r_p
    download: str = "full"  # full | compact
    sigma_update: str = "damped"  # damped (c_s/d_s, CMA-ES tutorial) | printed (Alg. 2 line 5 as printed)
    server_step: str = "paper"  # paper (Alg. 2) | reference (the authors' global_es.py)
    fitness: str = "perturbed"  # perturbed (loss on perturbed shots) | ratio (loss / perturbed loss)
    reference_clamp: str = "as-run"  # as-run (no clamp) | as-logged (sigma_local in [0.5, previous])

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("keep_rate"), self.keep_rate, 0, 1, low_open=True)
        check_choice(self.key("download"), self.download, DOWNLOADS)
        check_choice(self.key("sigma_update"), self.sigma_update, SIGMA_UPDATES)
        check_choice(self.key("server_step"), self.server_step, SERVER_STEPS)
        check_choice(self.key("fitness"), self.fitness, FITNESSES)
        check_choice(self.key("reference_clamp"), self.reference_clamp, REFERENCE_CLAMPS)
        if self.fitness == "ratio" and self.keep_rate >= 1:
            raise ConfigError(f"{self.key('fitness')}='ratio' needs perturbed inputs: set {self.key('keep_rate')} < 1 "
                              "(with keep-rate=1 every ratio is 1)")
        if self.server_step == "reference" and self.sigma_update != "damped":
            raise ConfigError(f"{self.key('sigma_update')} applies to {self.key('server_step')}='paper' only "
                              "(the reference step uses pycma's own step-size update)")
        if self.server_step == "paper" and self.reference_clamp != "as-run":
            raise ConfigError(f"{self.key('reference_clamp')} applies to {self.key('server_step')}='reference' only")
