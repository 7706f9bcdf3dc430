"""FedKSeed's run-config keys (``[tool.flwr.app.config.fedkseed]``), validated once; imports
no torch."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import ClassVar

from fedtext.common.config import MethodConfig, check_range
from fedtext.common.metrics import MetricSpec

MAX_SEEDS = 65_536  # K: the seed index must fit the uint16 the paper's clients would send; replay cost grows with K


@dataclass(frozen=True)
class FedKSeedConfig(MethodConfig):
    """``fedkseed.*``: K shared seeds, zeroth-order SGD on every weight (Qin et al. 2024).

    The defaults are CPU-sized for all-MiniLM-L6-v2 (22.7 M weights), not the paper's
    billion-parameter LLMs (K = 4096, lr ~ 3e-7): see :mod:`fedtext.methods.fedkseed` and
    docs/papers/fedkseed.md.
    """

    name: ClassVar[str] = "fedkseed"
    model: ClassVar[str] = "fedtext.methods.fedkseed.model:FedKSeedModel"
    strategy: ClassVar[str] = "strategies.fedkseed:FedKSeedStrategy"
    client: ClassVar[str] = "clients.fedkseed:FedKSeedClient"
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    # g = (L+ - L-) / (2 eps) needs the loss to ~1e-3 at eps = 5e-4: bf16 autocast rounds the weights
    # in every matmul to 8 mantissa bits (~1e-4 at |w| ~ 0.03, the size of eps z): g was off by up to
    # 47% per step on MiniLM (15.5 vs 22.8; review of issue 46), so only fp32 is offered
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    precision_reason: ClassVar[str] = ("its two-point estimate (L+ - L-)/(2 eps) needs fp32 losses: bf16/fp16 "
                                       "round the weights by about eps z")
    summary: ClassVar[str] = "zeroth-order full model along K shared seeds"
    page: ClassVar[str] = "fedkseed"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "FedKSeed (Qin et al., ICML 2024): zeroth-order full-parameter tuning along K shared seeds. Each of "
        "`fedkseed.local-steps` client steps draws a seed index uniformly from the K (`fedkseed.seeds`), z ~ "
        "N(0, I_d) from it over every weight (encoder, and the `linear` head when used), g = (L(w+εz) − "
        "L(w−εz))/(2ε) on one mini-batch (two forwards, no back-propagation), w ← w − lr·g·z; the client uploads "
        "g summed per seed; the server adds the example-weighted mean to its accumulator A, and every node "
        "rebuilds w = w₀ − lr Σ_k A[k] z_k by replaying A from the pretrained weights.")
    travels: ClassVar[str] = "one float32 [K] each way, `4K + 128` B"
    smoke: ClassVar[Mapping[str, object]] = {"seeds": 4, "local-steps": 2, "batch-size": 4}
    # the server adds the weighted mean of per-seed scalar sums to A (not a mean of the model's weights;
    # a server optimizer on A is not FedKSeed), and the clients take zeroth-order steps (no gradients)
    server_aggregation: ClassVar[str] = "an accumulation of per-seed scalar gradients replayed from w_0"
    # Central DP and SecAgg+ on G, the per-seed gradient sums the server adds to A (Algorithm 1: a sum).
    # Not local DP: the server bounds each |G[k]| and drops an upload out of scale with the round's, and a
    # client's own noise would fail those checks (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "secagg"})
    privacy_reason: ClassVar[str] = ("fedkseed's server drops an upload whose |G[k]| exceeds local-steps x grad-bound or "
                                     "the round's scale, checks a client's own noise would fail")
    local_training: ClassVar[str] = "zeroth-order steps along shared seeds (no gradients)"
    # similarity: nothing randomly initialised, so every weight starts pretrained; linear: a
    # seeded head that the zeroth-order steps perturb with the encoder
    default_head: ClassVar[str] = "similarity"
    heads: ClassVar[tuple[str, ...]] = ("similarity", "linear")

    seeds: int = 64  # K candidate seeds shared by all nodes (paper: 4096; a replay draws d normals per seed in use)
    local_steps: int = 32  # zeroth-order steps per client-round, two forwards each (no back-propagation)
    eps: float = 5e-4  # perturbation scale: g = (L(w + eps z) - L(w - eps z)) / (2 eps) (paper: 5e-4)
    lr: float = 1e-4  # step w <- w - lr g z (paper: ~3e-7 on LLMs; MiniLM-L6 on AG News: 3e-4 diverges)
    batch_size: int = 16  # examples per step
    grad_bound: float = 1e3  # largest honest |g|: an upload with |G[k]| > local-steps x grad-bound is dropped
    round_factor: float = 100.0  # drop an upload whose largest |G[k]| exceeds this x the round's median upload scale (0 = off)

    def __post_init__(self) -> None:
        check_range(self.key("seeds"), self.seeds, 1, MAX_SEEDS)
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("eps"), self.eps, 0, low_open=True)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
        check_range(self.key("grad_bound"), self.grad_bound, 0, low_open=True)
        check_range(self.key("round_factor"), self.round_factor, 0)
