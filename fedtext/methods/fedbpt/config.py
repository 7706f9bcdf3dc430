"""FedBPT's run-config keys (``[tool.flwr.app.config.fedbpt]``), validated once; imports no
torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import ConfigError, check_choice, check_range
from fedtext.common.metrics import MetricSpec
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
    privacy_reason: ClassVar[str] = ("fedbpt's server CMA-ES ranks each client's z by its loss and reads each client's "
                                     "search distribution (Algorithm 2)")
    summary: ClassVar[str] = "bbt-fed + server CMA-ES step with corrected σ′"
    page: ClassVar[str] = "fedbpt"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "FedBPT: local CMA-ES (λ=`fedbpt.popsize`, μ_l=λ/2, I=`fedbpt.local-steps` iterations) on inputs with a "
        "share 1−r_p of tokens replaced; the server keeps the global CMA-ES state and runs one CMA-ES step over "
        "the best half of the clients' means with the corrected step size σ′ (eq. 4/12/13); the new σ uses "
        "CMA-ES's damping c_σ/d_σ (default, `fedbpt.sigma-update=damped`) or Alg. 2 line 5 as printed, "
        "`σ′·exp(‖p_σ‖/E‖N‖ − 1)` (`printed`). `fedbpt.server-step=reference` and `fedbpt.fitness=ratio` run the "
        "authors' public code instead (same bytes).")
    travels: ClassVar[str] = (
        "up: `[z, σ_1..σ_I, F]` = `4(d+I+1) + 128` B; down: `(z, σ, C)` = `4(d+1+d²) + 384` B, or `(z, σ)` = "
        "`4(d+1) + 256` B with `fedbpt.download=compact`")
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "popsize": 4, "intrinsic-dim": 20}
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    # eq. (4) keeps the best floor(|S_t|/2) clients and the server's CMA-ES recombines a population:
    # one client per round would skip every server step (the authors' code refuses to start)
    min_clients_per_round: ClassVar[int] = 2

    #: r_p, share of input tokens kept by the anti-overfitting perturbation (1 = off)
    keep_rate: float = 0.9  # r_p: share of input tokens kept when perturbing (1 = no perturbation)
    #: `full` sends (z, σ, C) as Algorithm 1; `compact` sends (z, σ) and clients start from C = I
    download: str = "full"  # full: send (z, sigma, C) as Algorithm 1; compact: (z, sigma), clients use C = I
    #: new global σ: `damped` = σ′·exp((c_σ/d_σ)(‖p_σ‖/E‖N‖ − 1)) (CMA-ES tutorial; what every table here used),
    #: `printed` = Alg. 2 line 5 as printed, without c_σ/d_σ
    sigma_update: str = "damped"  # damped: sigma' exp((c_s/d_s)(|p_s|/E|N| - 1)) (CMA-ES); printed: Alg. 2 line 5, no c_s/d_s
    #: `paper` = Algorithm 2 (best half, eq. (4) σ′, written out in `fedtext/methods/fedbpt/cmaes.py`); `reference` =
    #: the authors' NVFlare server (`research/fed-bpt/src/global_es.py`): a pycma CMA-ES with population = parents = m
    #: clients recombines **all** uploads with pycma's rank weights, σ′ = √(Σ_all Σ_j σ² / (m·μ_l)) (no factor 2),
    #: clients get (σ_after/σ′)·previous σ, and run pycma's default local weights
    server_step: str = "paper"  # paper: Alg. 2 (best half, eq. 4 sigma'); reference: the authors' NVFlare code (all clients, pycma weights)
    #: what a local candidate is scored by: `perturbed` = loss on the perturbed shots (Alg. 1); `ratio` = loss(shots) /
    #: loss(perturbed shots), the authors' code with perturbation on (2 forwards per candidate; needs `keep-rate` < 1)
    fitness: str = "perturbed"  # perturbed: loss on perturbed shots (Alg. 1); ratio: loss / perturbed loss (authors' code, 2x queries)
    #: `server-step=reference` only: `as-run` = the code as it runs (its clamp of σ to [0.5, previous] is undone by the
    #: line order, so no clamp); `as-logged` = the clamp its log lines describe
    reference_clamp: str = "as-run"  # server-step=reference: as-run (code order undoes the clamp) | as-logged (sigma in [0.5, previous])

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
