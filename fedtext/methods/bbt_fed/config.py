"""BBT-Fed's run-config keys (``[tool.flwr.app.config.bbt-fed]``), validated once; imports no
torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import MEAN, check_choice, check_range
from fedtext.common.metrics import MetricSpec
from fedtext.methods.subspace import SubspaceConfig

AVERAGES = ("z", "z-sigma-C")


@dataclass(frozen=True)
class BBTFedConfig(SubspaceConfig):
    """``bbt-fed.*``: BBT's CMA-ES, a box bound on z, and what the server averages."""

    name: ClassVar[str] = "bbt-fed"
    model: ClassVar[str] = "fedtext.methods.bbt_fed.model:BBTFedModel"
    strategy: ClassVar[str] = "strategies.bbt_fed:BBTFed"
    client: ClassVar[str] = "clients.bbt_fed:BBTFedClient"
    server_aggregation: ClassVar[str] = MEAN  # average=z: the base strategy's example-weighted mean of z
    # average=z only (effective_privacy): the server then only averages z (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "dp-local", "secagg"})
    summary: ClassVar[str] = "CMA-ES on a 100-d prompt subspace, no gradients"
    page: ClassVar[str] = "baselines"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "BBT: CMA-ES (pycma, seeded) on `z ∈ R^d`, prompt `p0 + A z`, `A` a fixed random projection both sides "
        "rebuild from the seed; the server takes FedAvg's mean of z. `bbt-fed.average=z-sigma-C`: average the "
        "local z, σ and C (FedBPT's Figure 2 contrast).")
    travels: ClassVar[str] = (
        "z: `d·4 + 128` B each way; with σ and C (`bbt-fed.average=z-sigma-C`): `4(d+1+d²) + 384` B")
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "popsize": 4, "intrinsic-dim": 20}
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()

    #: box bound on z (|z_i| ≤ bound); 0 = none
    bound: float = 0.0  # box bound on z components (|z_i| <= bound); 0 = unbounded
    #: `z` (FedAvg of z, BBT-Fed) or `z-sigma-C` (average the local z, σ and C: FedBPT Fig. 2)
    average: str = "z"  # z: FedAvg of z (BBT-Fed); z-sigma-C: average local z, sigma and C (FedBPT Fig. 2)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("bound"), self.bound, 0)
        check_choice(self.key("average"), self.average, AVERAGES)

    def effective_server_aggregation(self) -> str:
        """A plain mean of z only with ``average=z`` and no box bound: a server optimizer's
        step on the averaged sigma and C could leave sigma <= 0 or C not positive definite,
        and one on z could leave the box the clients keep it in."""
        if self.average != "z":
            return "a mean of z, sigma and C (an optimizer step could make sigma <= 0 or C indefinite)"
        if self.bound > 0:
            return f"a mean of z kept in the box |z_i| <= {self.key('bound')} (an optimizer step could leave it)"
        return self.server_aggregation

    def effective_privacy(self) -> tuple[frozenset[str], str]:
        """DP and SecAgg+ only where the server's step is a plain mean of z (``average=z``, no box:
        noise could leave the box the spec bounds z to, and an upload outside it is dropped)."""
        step = self.effective_server_aggregation()
        if step != MEAN:
            return frozenset(), f"bbt-fed's server step is {step}"
        return self.privacy, self.privacy_reason
