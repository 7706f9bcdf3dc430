"""The few-shot methods' run-config keys (FeS, FedFSL, FedFSL-bias, FedCLS), validated once;
imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import GRADIENT, MethodConfig, check_choice, check_range
from fedtext.methods.fes.pacing import parse_paces
from fedtext.common.metrics import MetricSpec

PACINGS = ("curriculum", "static", "none")
# FeS's AG News depth plan as a share of the encoder's layers: §4.4, "most of bottom layers (up to
# 66.7% on AGNEWS) are skipped ... some middle layers (up to 33.3%) are tuned with reduced capacity";
# §3.3's plan for RoBERTa-large freezes layers 0-15 of 24 and tunes the biases of 16-23. The paper
# plans by depth share (its 12-layer RoBERTa-base runs are not given a plan of their own), so
# ``frozen-layers = -1`` freezes round(2/3 L) of any encoder's L layers: 4 of MiniLM-L6's 6, 8 of
# MPNet-base's 12, 16 of RoBERTa-large's 24; ``bias-layers = -1`` tunes the biases of the rest.
PAPER_FROZEN_SHARE = 2 / 3
# ``pseudo-pick`` values; fedtext.methods.fes.labels.PSEUDO_PICKS holds their functions
# (tests/unit/test_fes.py checks the two agree)
PSEUDO_PICK_NAMES = ("top-k", "class-quota")
# ``fes.vote`` values; fedtext.methods.fes.filter.VOTES holds their functions (checked alike)
VOTE_NAMES = ("eq2", "votek")

# ------------------------------------------------------------------------- fit metrics
# What a few-shot client adds to every fit reply (clients.fes.FewShotClient.train): its
# roles this round, its label counts (gold + pseudo are texts of its own partition, so
# never more than its training rows) and its training latency, which the server's pacer
# reads (AUG-E, eq. 1). A labelling-only reply carries no arrays: these are all it says.
TRAIN_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("trained", whole=True, low=0, high=1),  # 0: a labelling-only reply (no upload)
    MetricSpec("labelled", whole=True, low=0, high=1),  # pseudo-labelled this round
    MetricSpec("num_gold", whole=True, low=0, within_rows=True),
    MetricSpec("num_pseudo", whole=True, low=0, within_rows=True),
    MetricSpec("num_labels", whole=True, low=0, within_rows=True),  # gold + pseudo: the labelled set
    MetricSpec("train_batches", whole=True, low=0),
    MetricSpec("train_s_per_batch", low=0),  # l_t of AUG-E
)
# ... and, in a round it pseudo-labels (clients.fes.FewShotClient.pseudo_label), what it
# labelled; pseudo_label_accuracy (diagnostic: a benchmark knows the truth) only when it
# chose a label to score.
PSEUDO_LABEL_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("pseudo_labels", whole=True, low=0, within_rows=True),
    MetricSpec("labelled_candidates", whole=True, low=0, within_rows=True),
    MetricSpec("pseudo_label_accuracy", low=0, high=1),
    MetricSpec("infer_batches", whole=True, low=0),
    MetricSpec("infer_s_per_batch", low=0),  # l_i of AUG-E
    MetricSpec("filter_s", low=0),
)


# ------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class FewShotConfig(MethodConfig):
    """Keys every few-shot method shares: label placement, local training, co-planning.

    ``frozen_layers``/``bias_layers``: the bottom layers that are frozen and the middle
    ones that tune only their biases; the rest (top) tune everything (§3.3).
    """

    # gold labels plus pseudo labels drawn from the client's own unlabelled rows: bounded by its
    # partition, not by the shots the server assigns (MethodConfig.claims_assigned_rows)
    claims_assigned_rows: ClassVar[bool] = False
    name: ClassVar[str] = ""
    pacing_default: ClassVar[str] = "none"
    # FedAvg of the trained uploads, but within FeS's train/label client groups and pacing (its
    # AUG-E reads the accuracy FedAvg gives): issue 46 keeps the four as their paper ran them
    server_aggregation: ClassVar[str] = ("FeS's few-shot server (FedAvg within its train/label groups and pacing, "
                                         "as the paper ran it)")
    privacy_reason: ClassVar[str] = ("FeS's server reads each client's pseudo-label counts and splits its clients into "
                                     "training and labelling groups")
    # strategies.fes.FewShotStrategy.sample_clients: G_train among the labelled clients and G_label, two fixed-size draws
    own_sampling: ClassVar[str] = "FeS's training and labelling groups, drawn among the labelled clients and all clients"
    local_training: ClassVar[str] = GRADIENT
    page: ClassVar[str] = "fes"  # FeS and its baselines: one page, one harness
    results: ClassVar[str] = "fes_ag_news"
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = TRAIN_METRICS  # fedcls: never asked to label
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()  # the evaluate telemetry only

    gold_labels: int = 64  # labelled texts in the whole federation (FeS Table 2: 64)
    #: clients 0..L−1 hold them, evenly (the skewed placement of FeS Table 1)
    labelled_clients: int = 2  # clients 0..L-1 hold them (the skewed placement of FeS Table 1)
    unlabeled_size: int = 256  # unlabelled texts per client (0 = its whole partition)
    oracle: bool = False  # every pool text labelled (the Full-set reference)
    batch_size: int = 4  # mini-batch (FeS §4.1: 4)
    local_epochs: int = 1  # local epochs over gold + pseudo labels (FeS §4.1: 1)
    max_local_steps: int = 0  # cap on optimizer steps per client-round (0 = none)
    lr: float = 5e-5  # AdamW learning rate of fully tuned weights
    bias_lr: float = 1e-3  # AdamW learning rate of bias-only layers (BitFit; FeS code: 1e-3)
    #: co-planning: bottom encoder layers frozen, the next `bias-layers` layers bias-only, the rest full
    #: (`frozen-layers` = `bias-layers` = 0: every weight tunes, as `fedfsl` and `fedcls` by default;
    #: −1 = FeS's share, the bottom 2/3 of the encoder's layers, rounded)
    frozen_layers: int = 0  # bottom encoder layers frozen (-1 = the bottom 2/3 of the encoder's layers, rounded)
    #: co-planning: the layers above the frozen ones that tune only biases (−1 = all above the frozen), the rest full
    bias_layers: int = 0  # middle layers tuning only biases (-1 = all above the frozen ones)

    def __post_init__(self) -> None:
        check_range(self.key("gold_labels"), self.gold_labels, 0)
        check_range(self.key("labelled_clients"), self.labelled_clients, 1)
        check_range(self.key("unlabeled_size"), self.unlabeled_size, 0)
        check_range(self.key("batch_size"), self.batch_size, 1)
        check_range(self.key("local_epochs"), self.local_epochs, 1)
        check_range(self.key("max_local_steps"), self.max_local_steps, 0)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("bias_lr"), self.bias_lr, 0, low_open=True)
        check_range(self.key("frozen_layers"), self.frozen_layers, -1)
        check_range(self.key("bias_layers"), self.bias_layers, -1)

    @property
    def pacing_mode(self) -> str:
        """``curriculum`` | ``static`` | ``none`` (no pseudo labels)."""
        return self.pacing_default

    @property
    def head_rate(self) -> float:
        """AdamW rate of a fresh ``head.*`` weight: ``lr`` (fedcls: ``head-lr`` when > 0)."""
        return self.lr


@dataclass(frozen=True)
class PseudoLabelConfig(FewShotConfig):
    """Few-shot methods that pseudo-label (§2.3): static pacing keys."""

    pacing_default: ClassVar[str] = "static"
    smoke: ClassVar[Mapping[str, object]] = {"gold-labels": 8, "unlabeled-size": 16, "max-local-steps": 1}
    smoke_modes: ClassVar[Mapping[str, object]] = {"num-server-rounds": 2}  # static pacing labels from round 2
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = TRAIN_METRICS + PSEUDO_LABEL_METRICS

    #: static pacing (`fedfsl`'s and `fedfsl-bias`'s; `fes.pacing=static`): pseudo labels a labelling client keeps (FeS
    #: §4.1: 100)
    static_labels: int = 100  # static pacing: pseudo labels a labelling client keeps (FeS §4.1: 100)
    #: static pacing: labelling clients per round, every round from round 2 on, as the authors' (FeS §4.1: 5)
    static_clients: int = 5  # static pacing: labelling clients per round (FeS §4.1: 5)
    infer_batch: int = 4  # texts per pseudo-labelling forward (l_i of AUG-E is per batch of this size)
    #: which pseudo labels a labelling client keeps: `top-k` = the most confident (FeS §2.3); `class-quota` = the
    #: authors' pet/ipet.py (per predicted class int(n_c·(target/N)) texts, in floats as theirs, drawn ∝ max softmax,
    #: seeded per client and round)
    pseudo_pick: str = "top-k"  # top-k (FeS §2.3: most confident) | class-quota (FeS code: per-class quotas drawn ∝ max softmax)
    #: `true`: gold labels count toward the pseudo-label target (the authors' pet/modeling.py) instead of on top
    gold_in_target: bool = False  # gold labels count toward the pseudo-label target (FeS code) instead of on top

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("static_labels"), self.static_labels, 0)
        check_range(self.key("static_clients"), self.static_clients, 1)
        check_range(self.key("infer_batch"), self.infer_batch, 1)
        check_choice(self.key("pseudo_pick"), self.pseudo_pick, PSEUDO_PICK_NAMES)


@dataclass(frozen=True)
class FedCLSConfig(FewShotConfig):
    """``fedcls.*`` (Table 3): head-based, gold labels only, full fine-tuning.

    Default = the paper's "vanilla federated fine-tuning" as the authors' code runs it
    (PET's ``sequence_classifier`` wrapper, ``--method fedclassifier``): the checkpoint's
    sequence-classification head (``cls``: pooler on ``[CLS]`` + a fresh linear layer)
    and one learning rate for every weight, head included ("the same set of
    hyper-parameters", §4.1; their scripts pass none, so PET's single
    ``--learning_rate`` applies). ``head=linear`` with ``head-lr`` (e.g. 5e-3) is a
    stronger variant of ours: the sentence encoder's mean-pooled embedding and a head
    that learns 100x faster.
    """

    name: ClassVar[str] = "fedcls"
    model: ClassVar[str] = "fedtext.methods.fes.model:FewShotModel"
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"
    summary: ClassVar[str] = "gold labels only, whole model"
    description: ClassVar[str] = (
        "FeS's FedCLS, \"vanilla federated fine-tuning\" as the authors' code runs it (PET's "
        "`sequence_classifier`): the checkpoint's `cls` head (pooler on [CLS] + a fresh linear layer), gold "
        "labels only, full fine-tuning, one learning rate for every weight (`fedcls.head-lr` > 0 gives the head "
        "its own; `head=linear`: mean-pooled features); the server's FedAvg is weighted by labelled examples. "
        "`fedcls.oracle=true` labels every pool text: the \"Full-set\" reference of FeS Table 1.")
    travels: ClassVar[str] = "the whole model each way, as `fedavg`"
    smoke: ClassVar[Mapping[str, object]] = {"gold-labels": 8, "max-local-steps": 1}
    default_head: ClassVar[str] = "cls"
    heads: ClassVar[tuple[str, ...]] = ("cls", "linear")

    #: AdamW learning rate of the fresh head (0 = `lr`: one rate for every weight, as FeS §4.1)
    head_lr: float = 0.0  # AdamW learning rate of the fresh head (0 = lr: one rate, as FeS §4.1)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("head_lr"), self.head_lr, 0)

    @property
    def head_rate(self) -> float:
        return self.head_lr or self.lr


@dataclass(frozen=True)
class FedFSLConfig(PseudoLabelConfig):
    """``fedfsl.*`` (Table 3): prompt-based + pseudo labels, static pacing, full model."""

    name: ClassVar[str] = "fedfsl"
    model: ClassVar[str] = "fedtext.methods.fes.model:FewShotModel"
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"
    summary: ClassVar[str] = "few-shot, static pacing, whole encoder"
    description: ClassVar[str] = (
        "FeS's baseline (Table 3): the same pipeline as `fes` with **static** pacing (`fedfsl.static-clients` "
        "labelling clients per round, each keeping its `fedfsl.static-labels` most confident pseudo labels; the "
        "paper: 5 and 100), no filtering, the whole encoder trained; the server's FedAvg is weighted by labelled "
        "examples.")
    travels: ClassVar[str] = "the whole encoder each way: `4·#weights + 128·#tensors` B"


@dataclass(frozen=True)
class FedFSLBiasConfig(PseudoLabelConfig):
    """``fedfsl-bias.*`` (Table 3): ``fedfsl`` tuning only biases (every layer bias-only)."""

    name: ClassVar[str] = "fedfsl-bias"
    model: ClassVar[str] = "fedtext.methods.fes.model:FewShotModel"
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"
    summary: ClassVar[str] = "fedfsl tuning biases only"
    description: ClassVar[str] = (
        "`fedfsl` tuning only the biases (BitFit): every layer bias-only, the rest of the encoder frozen; the "
        "server's FedAvg is weighted by labelled examples.")
    travels: ClassVar[str] = "every bias each way: `4·#biases + 128·#tensors` B"

    bias_layers: int = -1  # every layer bias-only (BitFit)


@dataclass(frozen=True)
class FeSConfig(PseudoLabelConfig):
    """``fes.*``: curriculum pacing (AUG-E), representational filtering, co-planning."""

    name: ClassVar[str] = "fes"
    model: ClassVar[str] = "fedtext.methods.fes.model:FewShotModel"
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"
    summary: ClassVar[str] = "few-shot: pseudo labels, pacing, bias-only top"
    description: ClassVar[str] = (
        "FeS (Cai et al., MobiCom '23), few-shot: `fes.gold-labels` gold labels on clients "
        "`0..fes.labelled-clients−1`, `fes.unlabeled-size` unlabelled texts on every client. Per round the "
        "server draws a training group (`clients-per-round` clients that hold gold or pseudo labels) and, on "
        "labelling rounds, a labelling group; a labelling client runs the global model on the texts its "
        "**representational filter** kept (§3.2, eq. (2): greedy k-NN score Σ_{x∈E(u)} ρ^−|V(x)∩L| on the frozen "
        "MiniLM's sentence embeddings, computed once, `fes.keep-ratio`) and keeps its ⌊|U|·k/100·(r−1)/f⌋ most "
        "confident predictions as pseudo labels, labelling in rounds r = 1+f, 1+2f, … with the global model "
        "after r−1 rounds (the authors' schedule; round 1 trains on gold labels only), re-labelling earlier ones "
        "(they live in `context.state` and survive rounds the client sits out). **Curriculum pacing** (§3.1, "
        "Alg. 1): each ⟨f, n, k⟩ of `fes.paces` is tried for `fes.trial-rounds` rounds and scored by AUG-E = "
        "η·Δacc / (l_i·n/f + θ·l_t·k) (eq. (1), l_i / l_t the clients' measured seconds per inference / training "
        "batch); the best runs on, the top-`fes.candidates` are re-tried when a window's AUG-E falls below "
        "`fes.threshold`. **Co-planning** (§3.3): the bottom `fes.frozen-layers` layers frozen, the next "
        "`fes.bias-layers` bias-only (`bias-lr`), the rest fully trained (`lr`); one local epoch of mini-batch 4 "
        "on gold + pseudo labels; the server's FedAvg is weighted by labelled examples. The default plan is the "
        "paper's AG News plan scaled to MiniLM-L6's layers (4 frozen, 2 bias-only: only the top two layers' "
        "biases train and travel); `fes.frozen-layers=3 fes.bias-layers=2` trains and sends a full top layer as "
        "well. Prompt-based = the `similarity` head (label descriptions; the offline MiniLM has no MLM head), "
        "`tied` = cloze template + verbalizer, `mlm` = PET exactly. Every round records its pace, AUG-E, "
        "trial/switch events, pseudo-label count and (diagnostic) accuracy in `method_metrics`.")
    travels: ClassVar[str] = (
        "the co-planned (trained) tensors each way, `4·#weights + 128·#tensors` B; a labelling-only client uploads "
        "nothing")
    smoke: ClassVar[Mapping[str, object]] = {"gold-labels": 8, "unlabeled-size": 16, "max-local-steps": 1,
                                             "paces": "1-3-20", "neighbours": 4}
    smoke_modes: ClassVar[Mapping[str, object]] = {"num-server-rounds": 2, "paces": "1-3-100"}
    # ^ labels in round 2 (1 + f with f = 1), keeping all of its 4 filtered candidates (k = 100 %: 20 % of 4
    #   texts is none, and an accuracy of no label is not sent)

    pacing: str = "curriculum"  # curriculum (Alg. 1, AUG-E) | static (ablation: fedfsl's pace)
    #: Alg. 1: the initial ⟨f-n-k⟩ list: n clients label in rounds 1+f, 1+2f, …, in round r with the model after r−1
    #: rounds, each keeping ⌊N·k/100·(r−1)/f⌋ of its N candidate texts (the authors' schedule)
    paces: str = "1-2-10,1-4-5,2-4-10"  # initial <f,n,k> list: in rounds 1+f, 1+2f, ... n clients keep k% x (round-1)/f of their texts
    trial_rounds: int = 1  # r: rounds each pace is tried (Alg. 1)
    candidates: int = 2  # t: top-t paces kept for switching
    threshold: float = 0.0  # s: a window's AUG-E below this re-tries the candidates
    #: η of eq. (1)
    eta: float = 1.0  # eta of eq. (1)
    #: θ of eq. (1): weight of the training cost
    theta: float = 1.0  # theta of eq. (1): weight of the training cost
    filter: bool = True  # §3.2 representational filtering of the texts to pseudo-label
    #: §3.2: share of a client's N unlabelled texts the filter keeps: ⌊N·ratio⌋, the authors' count (the FeS code's
    #: int(N × ratio)); none below one text
    keep_ratio: float = 0.25  # share of a client's unlabelled texts the filter keeps: int(N x ratio), as the FeS code
    #: ρ > 1 of eq. (2) (FeS code: 10)
    rho: float = 10.0  # rho > 1 of eq. (2) (FeS code: 10)
    neighbours: int = 16  # k of the k-NN sets V(x) (FeS code: 150 of ~1,200 texts)
    #: subtract the mean proxy embedding before the k-NN of eq. (2) (the authors' code does)
    centre_proxy: bool = False  # subtract the mean proxy embedding before the k-NN (FeS code: true)
    #: the filter's greedy choice: `eq2` = eq. (2) as the paper writes it (every voter counts, ties to the lowest id);
    #: `votek` = the authors' `fast_votek` (a chosen text stops voting, texts nobody votes for are never chosen, ties
    #: by vote count, then first vote)
    vote: str = "eq2"  # eq2 (FeS eq. (2)) | votek (FeS code's fast_votek: chosen texts stop voting, ties by vote count)
    #: §3.3 co-planning, the paper's AG News plan by depth share: the bottom 2/3 of the encoder's layers frozen
    #: (−1: round(2/3 L), MiniLM-L6 0-3, MPNet-base 0-7), or that many layers
    frozen_layers: int = -1  # bottom layers frozen; -1 = 2/3 of them, the paper's AG News plan (MiniLM-L6: 4, MPNet: 8)
    #: the paper's AG News plan: the layers above tune only their biases (−1: all of them, the top 1/3)
    bias_layers: int = -1  # layers above the frozen ones tuning only biases; -1 = all of them (the paper's top 1/3)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.key("pacing"), self.pacing, ("curriculum", "static"))
        parse_paces(self.paces, self.key("paces"))
        check_range(self.key("trial_rounds"), self.trial_rounds, 1)
        check_range(self.key("candidates"), self.candidates, 1)
        check_range(self.key("eta"), self.eta, 0, low_open=True)
        check_range(self.key("theta"), self.theta, 0)
        check_range(self.key("keep_ratio"), self.keep_ratio, 0, 1, low_open=True)
        check_range(self.key("rho"), self.rho, 1, low_open=True)
        check_range(self.key("neighbours"), self.neighbours, 1)
        check_choice(self.key("vote"), self.vote, VOTE_NAMES)

    @property
    def pacing_mode(self) -> str:
        return self.pacing
