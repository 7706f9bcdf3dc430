"""FeS and its baselines (Cai et al., MobiCom '23, ``../shared/papers/001_*``): configs,
the model, and the three designs as pure functions both sides use.

Setting (§2.3, §4.1): ``gold-labels`` labelled texts in all (64) held by the first
``labelled-clients`` clients (partition ids ``0..L-1``, the skewed placement of
Table 1); every client holds ``unlabeled-size`` unlabelled texts of its partition. The
placement is a function of the run config, so server and clients agree on it without
a message (:func:`split_pool`).

Methods (Table 3):

* ``fedcls``: head-based (the checkpoint's ``cls`` head: pooler on ``[CLS]`` + a fresh
  linear layer, one learning rate; ``head=linear`` + ``head-lr``: mean-pooled, faster
  head), gold labels only, full fine-tuning.
  With ``fedcls.oracle=true`` every pool text is labelled: the "Full-set (oracle)"
  reference of Table 1, on the same clients and texts.
* ``fedfsl``: prompt-based + pseudo labels, static pacing (each labelling client keeps
  its ``static-labels`` most confident pseudo labels, every round, ``static-clients``
  labelling clients), the whole model trains and travels.
* ``fedfsl-bias``: ``fedfsl`` tuning only the biases (BitFit).
* ``fes``: curriculum pacing chosen by AUG-E (§3.1, eq. (1), Alg. 1), representational
  filtering (§3.2, eq. (2)), depth/capacity co-planning (§3.3). Ablations:
  ``fes.pacing=static``, ``fes.filter=false``, ``fes.frozen-layers=0 fes.bias-layers=0``.

Prompt-based = a frozen PLM's own classifier over a task description: the offline
backbone (all-MiniLM-L6-v2) has no MLM head, so "prompt" here is the project's
``similarity`` head (cosine of the pooled encoding with encoded label descriptions,
``fedtext.tasks``), or the cloze template + verbalizer of the ``tied`` head; with an
MLM checkpoint ``head=mlm`` is PET's pattern/verbalizer pair exactly (§2.2).

Where the paper is silent, or the authors' code (UbiquitousLearning/FeS) differs:

* Confidence and choice (§2.3 "the data with the top k highest confidence (logits) are
  added"): by default (``pseudo-pick=top-k``) the ``k`` texts with the largest softmax
  maximum, each labelled with its argmax (:func:`pick_top_k`). The authors' code
  (``pet/ipet.py``, ``generate_ipet_train_set``) does not rank: it splits the count into
  per-class quotas and, within each predicted class, *draws* texts without replacement
  with probability proportional to their softmax maximum; ``pseudo-pick=class-quota`` is
  that rule (:func:`pick_class_quota`). Their quotas follow the class counts of the
  labels the client's unlabelled examples carry (``train_data=unlabeled_data`` in
  ``pet/modeling.py``): the *true* labels the first time (which a client cannot know),
  the previous labelling's predictions afterwards (written into the same objects); ours
  follow the current predictions.
* Gold labels and the count (§2.3 is silent): by default a client's gold labels come on
  top of its pseudo-label count; the authors' ``pet/modeling.py`` counts them toward it
  (``num_new_examples = augmented_point - len(train_data)``): ``gold-in-target=true``
  (:func:`pseudo_target`).
* Curriculum (§3.1 "k ... linear increase"): a client labelled in round ``i`` keeps
  ``floor(|U| * k/100 * i/f)`` pseudo labels (its most confident ones under ``top-k``),
  re-labelling all earlier ones (§2.3); this is the authors' ``augmented_point`` formula. Static pacing
  keeps ``static-labels`` (the paper's "100 pseudo labels per selected client per
  round"; the code keeps min(100, |U|) in total, which is what we do).
* Filtering: eq. (2) exactly, ``score(u) = sum_{x in E(u)} rho^-|V(x) ∩ L|``; the code
  (``fed/selective_annotating.py``, from vote-k) also skips voters x that are themselves
  selected, breaks ties by vote count rather than id, and uses a 12-layer
  paraphrase-mpnet proxy with k=150 neighbours, rho=10 and a 10 % keep ratio; we use
  the process's own frozen MiniLM as the proxy and scale k to the pools here. The
  authors subtract the mean embedding of the client's texts before the cosine k-NN
  (``calculate_sentence_transformer_embedding(mean=True)``); we do not by default
  (§3.2 says "cosine similarity between the embedding vectors"): ``centre-proxy=true``.
* The configurator (Alg. 1) is not in the authors' code (their pace was swept offline
  with ``sweep_aug.py``); here it runs online as Alg. 1 says, trials one after another.
* Co-planning: the paper freezes bottom layers, tunes biases of middle ones and fully
  tunes the top ones; its AG News plan (§3.3: RoBERTa-large's layers 0-15 frozen, the
  biases of 16-23 tuned, no full layer; §4.4: "up to 66.7 %" frozen, "up to 33.3 %" at
  reduced capacity) is our default scaled to 6 layers: 4 frozen, 2 bias-only, 0 full;
  embeddings follow layer 0's capacity, the pooler (read by fedcls's ``cls`` head only)
  trains only under the full plan (so ``frozen=0, bias=0`` is full fine-tuning as fedavg,
  ``frozen=0, bias=-1`` BitFit).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from fedtext.config import ConfigError, MethodConfig, check_choice, check_range
from fedtext.model import NetworkModel

if TYPE_CHECKING:
    from fedtext.backbone import Backbone
    from fedtext.config import RunConfig

PACINGS = ("curriculum", "static", "none")
PSEUDO_PICK_SALT = 0x9E1  # seeds pseudo_pick's RNG apart from every other draw of a client-round
LABEL_SALT = 0x1AB  # the server's draw of G_label, a stream apart from G_train's (fedtext.sampling.TRAIN_SALT)
_LAYER = re.compile(r"(?:^|\.)layer\.(\d+)\.")


# ------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class FewShotConfig(MethodConfig):
    """Keys every few-shot method shares: label placement, local training, co-planning.

    ``frozen_layers``/``bias_layers``: the bottom layers that are frozen and the middle
    ones that tune only their biases; the rest (top) tune everything (§3.3).
    """

    name: ClassVar[str] = ""
    pacing_default: ClassVar[str] = "none"

    gold_labels: int = 64  # labelled texts in the whole federation (Table 2: 64)
    labelled_clients: int = 2  # clients 0..L-1 hold them (skewed, Table 1)
    unlabeled_size: int = 256  # unlabelled texts per client (0 = the whole partition)
    oracle: bool = False  # every pool text labelled (the Full-set reference)
    batch_size: int = 4  # §4.1: mini-batch 4
    local_epochs: int = 1  # §4.1: one local epoch over gold + pseudo labels
    max_local_steps: int = 0  # cap on steps per client-round (0 = no cap)
    lr: float = 5e-5  # AdamW, fully tuned weights
    bias_lr: float = 1e-3  # AdamW, bias-only layers (BitFit's rate; the authors' code: 1e-3)
    frozen_layers: int = 0  # bottom encoder layers frozen
    bias_layers: int = 0  # middle layers tuning only biases (-1 = every layer above the frozen ones)

    def __post_init__(self) -> None:
        check_range(self.key("gold_labels"), self.gold_labels, 0)
        check_range(self.key("labelled_clients"), self.labelled_clients, 1)
        check_range(self.key("unlabeled_size"), self.unlabeled_size, 0)
        check_range(self.key("batch_size"), self.batch_size, 1)
        check_range(self.key("local_epochs"), self.local_epochs, 1)
        check_range(self.key("max_local_steps"), self.max_local_steps, 0)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("bias_lr"), self.bias_lr, 0, low_open=True)
        check_range(self.key("frozen_layers"), self.frozen_layers, 0)
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

    static_labels: int = 100  # static pacing: pseudo labels a labelling client keeps (§4.1: 100)
    static_clients: int = 5  # static pacing: labelling clients per round (§4.1: 5)
    infer_batch: int = 4  # texts per inference batch (l_i is measured per batch of this size)
    pseudo_pick: str = "top-k"  # top-k (§2.3) | class-quota (authors' pet/ipet.py: quotas, drawn ∝ max softmax)
    gold_in_target: bool = False  # gold labels count toward the pseudo-label target (authors' pet/modeling.py)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("static_labels"), self.static_labels, 0)
        check_range(self.key("static_clients"), self.static_clients, 1)
        check_range(self.key("infer_batch"), self.infer_batch, 1)
        check_choice(self.key("pseudo_pick"), self.pseudo_pick, tuple(PSEUDO_PICKS))


class FewShotModel(NetworkModel):
    """The co-planned weights train and travel (:func:`plan_predicate`).

    Raises ``ConfigError`` when the plan names more layers than the encoder has (at
    model build: before any training, on the server).
    """

    def __init__(self, cfg: "RunConfig", backbone: "Backbone") -> None:
        super().__init__(cfg, backbone)
        self.layers = num_layers(backbone)
        mc = self.mcfg
        self.frozen = mc.frozen_layers
        self.bias = self.layers - mc.frozen_layers if mc.bias_layers == -1 else mc.bias_layers
        if self.frozen + max(self.bias, 0) > self.layers:
            raise ConfigError(
                f"{mc.key('frozen_layers')}={mc.frozen_layers} + {mc.key('bias_layers')}={mc.bias_layers} "
                f"exceeds the {self.layers} layers of {backbone.name}"
            )

    def trainable(self) -> Callable[[str], bool]:
        return plan_predicate(self.layers, self.frozen, self.bias)

    def is_bias_only(self, name: str) -> bool:
        """Whether ``name`` trains at reduced capacity (its layer is bias-only): it gets ``bias-lr``."""
        return layer_capacity(name, self.layers, self.frozen, self.bias) == "bias"


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
    model_class: ClassVar[type] = FewShotModel
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"
    default_head: ClassVar[str] = "cls"
    heads: ClassVar[tuple[str, ...]] = ("cls", "linear")

    head_lr: float = 0.0  # AdamW rate of the fresh head (0 = lr: one rate for every weight, as the paper)

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
    model_class: ClassVar[type] = FewShotModel
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"


@dataclass(frozen=True)
class FedFSLBiasConfig(PseudoLabelConfig):
    """``fedfsl-bias.*`` (Table 3): ``fedfsl`` tuning only biases (every layer bias-only)."""

    name: ClassVar[str] = "fedfsl-bias"
    model_class: ClassVar[type] = FewShotModel
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"

    bias_layers: int = -1  # every layer bias-only (BitFit)


@dataclass(frozen=True)
class FeSConfig(PseudoLabelConfig):
    """``fes.*``: curriculum pacing (AUG-E), representational filtering, co-planning."""

    name: ClassVar[str] = "fes"
    model_class: ClassVar[type] = FewShotModel
    strategy: ClassVar[str] = "strategies.fes:FewShotStrategy"
    client: ClassVar[str] = "clients.fes:FewShotClient"

    pacing: str = "curriculum"  # curriculum (Alg. 1) | static (ablation: fedfsl's pacing)
    paces: str = "1-2-10,1-4-5,2-4-10"  # initial list of <f, n, k>: every f rounds n clients keep k%·i/f of U
    trial_rounds: int = 1  # r: rounds each configuration is tried (Alg. 1 line 13)
    candidates: int = 2  # t: top-t configurations kept for switching
    threshold: float = 0.0  # s: AUG-E below this switches (Alg. 1 line 7)
    eta: float = 1.0  # eta in eq. (1)
    theta: float = 1.0  # theta in eq. (1): weight of training cost
    filter: bool = True  # representational filtering (§3.2)
    keep_ratio: float = 0.25  # share of a client's unlabelled texts the filter keeps
    rho: float = 10.0  # rho > 1 in eq. (2) (authors' code: 10)
    neighbours: int = 16  # k of the k-NN sets V(x) (authors' code: 150 of ~1,200 texts)
    centre_proxy: bool = False  # subtract the mean proxy embedding before the k-NN (authors' code: yes)
    frozen_layers: int = 4  # §3.3/§4.4's AG News plan, 2/3 frozen: MiniLM-L6 layers 0-3
    bias_layers: int = 2  # the top 1/3 bias-only (layers 4-5), no full layer

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

    @property
    def pacing_mode(self) -> str:
        return self.pacing


# ------------------------------------------------------------------ data placement
def gold_count(cfg: FewShotConfig, partition_id: int) -> int:
    """Gold labels client ``partition_id`` holds: ``gold-labels`` split over clients
    ``0..L-1`` as evenly as possible (the first ``G mod L`` get one more)."""
    L = cfg.labelled_clients
    if partition_id >= L:
        return 0
    return cfg.gold_labels // L + (1 if partition_id < cfg.gold_labels % L else 0)


def split_pool(cfg: FewShotConfig, seed: int, partition_id: int, pool_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(gold rows, unlabelled rows) of a client's pool of ``pool_size`` texts, seeded.

    Gold rows come first in one permutation, then ``unlabeled-size`` unlabelled ones;
    with ``oracle`` every one of those texts is gold (the Full-set reference labels the
    same texts the few-shot methods see).
    """
    order = np.random.default_rng([seed, partition_id, 0xFE5]).permutation(pool_size)
    g = min(gold_count(cfg, partition_id), pool_size)
    u = pool_size - g if cfg.unlabeled_size == 0 else min(cfg.unlabeled_size, pool_size - g)
    if cfg.oracle:
        return np.sort(order[: g + u]), np.arange(0)
    return np.sort(order[:g]), np.sort(order[g : g + u])


# ------------------------------------------------------------------- co-planning
def num_layers(backbone: "Backbone") -> int:
    """Transformer layers of the encoder (6 for all-MiniLM-L6-v2)."""
    return int(backbone.encoder.config.num_hidden_layers)


def layer_capacity(name: str, layers: int, frozen: int, bias: int) -> str:
    """``frozen`` | ``bias`` | ``full`` for a weight name under the plan (§3.3, Fig. 7).

    Layer ``i`` is frozen below ``frozen``, bias-only below ``frozen + bias``, full above.
    Embeddings follow layer 0; a ``head.*`` always trains. The pooler feeds only the
    ``cls`` head (fedcls, which trains every weight); the prompt heads read mean-pooled
    states or ``[MASK]``, so only the plain full plan (``0, 0``: every weight, as
    fedavg) includes it.
    """
    if name.startswith("head."):
        return "full"
    m = _LAYER.search(name)
    if m:
        i = int(m.group(1))
    elif "pooler" in name:
        return "full" if frozen == 0 and bias == 0 else "frozen"
    else:  # embeddings
        i = 0
    return "frozen" if i < frozen else "bias" if i < frozen + bias else "full"


def plan_predicate(layers: int, frozen: int, bias: int) -> Callable[[str], bool]:
    """The co-planned trainable weights as a name predicate (bias-only layers: ``*.bias``)."""

    def wants(name: str) -> bool:
        cap = layer_capacity(name, layers, frozen, bias)
        return cap == "full" or (cap == "bias" and name.endswith(".bias"))

    return wants


def search_depth(accuracy_of: Callable[[int], float], low: int, high: int, tolerance: float) -> int:
    """§3.3's offline plan search: the deepest freeze in ``[low, high]`` whose accuracy
    stays within ``tolerance`` of the shallowest freeze's, by binary search.

    ``accuracy_of(frozen)`` trains the plan on a public proxy task (the paper's "FedFSL
    simulator") and returns its accuracy; it is called O(log(high - low)) times. Assumes
    accuracy falls with depth (what binary search needs).
    """
    target = accuracy_of(low) - tolerance
    lo, hi = low, high  # invariant: lo meets the target
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if accuracy_of(mid) >= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ----------------------------------------------------------------------- filtering
def knn_sets(embeddings: np.ndarray, k: int, centre: bool = False) -> np.ndarray:
    """``V(x)`` of §3.2: the ``k`` most cosine-similar other texts of each text, ``[N, k]``
    ids, most similar first (ties: lowest id). ``centre``: subtract the mean embedding
    first (the authors' code; ``fes.centre-proxy``)."""
    e = np.asarray(embeddings, dtype=np.float64)
    if centre:
        e = e - e.mean(axis=0, keepdims=True)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    sim = e @ e.T
    np.fill_diagonal(sim, -np.inf)
    k = min(k, len(e) - 1)
    return np.argsort(-sim, axis=1, kind="stable")[:, :k]


def representational_filter(neighbours: np.ndarray, keep: int, rho: float) -> list[int]:
    """Greedy selection of eq. (2) (§3.2) on k-NN sets ``neighbours[x] = V(x)``.

    ``score(u) = sum_{x in E(u)} rho^-|V(x) ∩ L|`` with ``E(u) = {x : u in V(x)}`` and
    ``L`` the texts chosen so far; the highest score is chosen (ties: lowest id), then
    scores are updated. Returns ``keep`` ids in selection order.

    Scores are float64 sums (a matrix product): two scores that are exactly equal under
    eq. (2) but summed from inexact powers (rho = 10: ``1 + 0.1 + 0.1 + 0.1`` in two
    orders) can differ in the last bit, and then the larger float wins, not the lower id.
    For rho a power of 2 every score is exact and the tie rule holds exactly.
    """
    n = len(neighbours)
    votes = np.zeros((n, n))  # votes[x, u] = 1 iff u in V(x)
    for x, vs in enumerate(neighbours):
        votes[x, vs] = 1.0
    in_l = np.zeros(n)  # |V(x) ∩ L| per x
    chosen: list[int] = []
    free = np.ones(n, dtype=bool)
    for _ in range(min(keep, n)):
        score = (rho ** -in_l) @ votes  # score[u] = sum_x votes[x, u] rho^-|V(x) ∩ L|
        score[~free] = -np.inf
        u = int(np.argmax(score))
        chosen.append(u)
        free[u] = False
        in_l += votes[:, u]
    return chosen


# ------------------------------------------------------------------ pseudo labels
def pseudo_target(target: int, gold: int, gold_in_target: bool) -> int:
    """New pseudo labels a client keeps when its pace says ``target`` (§2.3, §3.1): all of
    them (ours), or ``target - gold`` (never below 0) when its ``gold`` labels count toward
    the target (``gold-in-target``; the authors' ``num_new_examples = augmented_point -
    len(train_data)``). Where ``gold >= target`` the authors skip labelling and keep the
    previous pseudo labels; here the client then holds none (its target is 0)."""
    return max(0, target - gold) if gold_in_target else target


def pick_top_k(probs: np.ndarray, target: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """§2.3's "top k highest confidence": the ``target`` rows of ``probs`` ``[N, C]`` with
    the largest softmax maximum (ties: lowest row), most confident first, and their argmax
    labels. ``rng`` is unused (the signature of :data:`PSEUDO_PICKS`)."""
    rows = np.argsort(-probs.max(1), kind="stable")[:target]
    return rows, probs.argmax(1)[rows]


def pick_class_quota(probs: np.ndarray, target: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The authors' pseudo-label choice (``pet/ipet.py``: ``generate_ipet_train_set`` and
    ``_draw_examples_by_label_probability``): each row gets its argmax label; class ``c``
    gets the quota ``floor(n_c * target / N)`` (``n_c`` rows predicted ``c``; the floors
    may leave the total below ``target``, as there), drawn without replacement from those
    rows with probability proportional to their softmax maximum. Rows come class by class.
    ``target >= 0``.

    The authors' ``n_c`` counts the labels the client's unlabelled examples carry (their
    ``train_data`` argument is the unlabelled set): the *true* labels, which no client
    knows, the first time, then the predictions their previous labelling wrote into the
    same objects. Here it counts the current predictions, so that a quota never exceeds
    its class (they upsample a class by repeating its texts then). Their
    RNG is ``np.random.RandomState(seed)`` made afresh every round; ``rng`` here is seeded
    per (run seed, client, round) by the caller.
    """
    n, labels, conf = len(probs), probs.argmax(1), probs.max(1)
    target = min(target, n)
    rows_out, labels_out = [np.zeros(0, dtype=int)], [np.zeros(0, dtype=int)]
    for c in range(probs.shape[1]):
        rows = np.flatnonzero(labels == c)
        quota = len(rows) * target // max(n, 1)  # floor(n_c * target / N), exact
        if quota:
            rows_out.append(rng.choice(rows, size=quota, replace=False, p=conf[rows] / conf[rows].sum()))
            labels_out.append(np.full(quota, c))
    return np.concatenate(rows_out), np.concatenate(labels_out)


# ``pseudo-pick``: (softmax rows, how many, seeded RNG) -> (chosen rows, their labels)
PSEUDO_PICKS: dict[str, Callable[[np.ndarray, int, np.random.Generator], tuple[np.ndarray, np.ndarray]]] = {
    "top-k": pick_top_k,
    "class-quota": pick_class_quota,
}


# ------------------------------------------------------------------------ pacing
@dataclass(frozen=True)
class Pace:
    """``<f, n, k>`` (§3.1): label every ``f`` rounds, on ``n`` clients, ``k`` % more each time."""

    f: int
    n: int
    k: float

    def __str__(self) -> str:
        return f"{self.f}-{self.n}-{self.k:g}"

    def labels_round(self, server_round: int) -> bool:
        """Whether ``server_round`` (1-based) is a labelling round."""
        return server_round % self.f == 0

    def target(self, unlabeled: int, server_round: int) -> int:
        """Pseudo labels a client labelled in ``server_round`` keeps: ``|U| k/100 i/f``."""
        return min(unlabeled, int(math.floor(unlabeled * self.k / 100 * server_round / self.f)))


def parse_paces(text: str, key: str = "fes.paces") -> list[Pace]:
    """``"1-2-10,2-4-5"`` -> paces; one clear error for anything else."""
    paces = []
    for item in text.split(","):
        parts = item.strip().split("-")
        try:
            f, n, k = int(parts[0]), int(parts[1]), float(parts[2])
            if len(parts) != 3 or f < 1 or n < 1 or k <= 0:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError(f"{key}: '{item.strip()}' is not f-n-k with integers f, n >= 1 and k > 0 "
                              "(e.g. 1-2-10)") from None
        paces.append(Pace(f, n, k))
    return paces


def aug_e(delta_acc: float, pace: Pace, l_infer: float, l_train: float, eta: float = 1.0,
          theta: float = 1.0) -> float:
    """Eq. (1): ``eta * delta_acc / (C_infer + theta * C_train)``, ``C_infer = l_i * n / f``,
    ``C_train = l_t * k``; ``l_i``, ``l_t`` are seconds per inference / training batch."""
    cost = l_infer * pace.n / pace.f + theta * l_train * pace.k
    return eta * delta_acc / cost if cost > 0 else 0.0


@dataclass
class Pacer:
    """Algorithm 1's configurator: try each pace for ``r`` rounds, keep the best (by
    AUG-E) and the top-``t`` candidates; while running, a window of ``r`` rounds whose
    AUG-E falls below ``s`` re-tries the candidates and switches to their best. A window
    lasts ``max(r, f)`` rounds, so that every pace labels at least once in its trial.

    The server calls :meth:`pace` when it configures a round and :meth:`observe` after
    evaluating it; latencies come from the clients' measurements (:meth:`latency`).
    Every trial result and switch is returned as an event for the run record.
    """

    initial: list[Pace]
    trial_rounds: int = 1
    top: int = 2
    threshold: float = 0.0
    eta: float = 1.0
    theta: float = 1.0
    queue: list[Pace] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    current: Pace | None = None
    searching: bool = True
    candidates: list[Pace] = field(default_factory=list)
    window_start_acc: float | None = None
    window_rounds: int = 0
    l_infer: list[float] = field(default_factory=list)
    l_train: list[float] = field(default_factory=list)
    trials: list[dict] = field(default_factory=list)  # every (pace, AUG-E) ever measured

    def __post_init__(self) -> None:
        if self.current is None:
            self.queue = list(self.initial[1:])
            self.current = self.initial[0]

    def pace(self) -> Pace:
        """The pace of the next round."""
        return self.current

    def latency(self, l_infer: float | None, l_train: float | None) -> None:
        """Note a client's measured seconds per inference / training batch."""
        if l_infer:
            self.l_infer.append(float(l_infer))
        if l_train:
            self.l_train.append(float(l_train))

    def start(self, accuracy: float) -> None:
        """The accuracy the first window starts from (round 0)."""
        if self.window_start_acc is None:
            self.window_start_acc = accuracy

    def observe(self, accuracy: float) -> dict[str, float]:
        """After a round: close the window when ``r`` rounds are done; returns the events
        (``aug_e``, ``trial_done``, ``chosen``, ``switch``) as record metrics."""
        self.start(accuracy)
        self.window_rounds += 1
        events: dict[str, float] = {}
        # A window spans at least one labelling cycle (f rounds): a pace with f > r tried
        # for r rounds might not have labelled at all, and its AUG-E would say nothing.
        if self.window_rounds < max(self.trial_rounds, self.current.f):
            return events
        e = aug_e(accuracy - self.window_start_acc, self.current,
                  float(np.mean(self.l_infer)) if self.l_infer else 0.0,
                  float(np.mean(self.l_train)) if self.l_train else 0.0, self.eta, self.theta)
        events["aug_e"] = e
        self.trials.append({"pace": str(self.current), "aug_e": e, "searching": self.searching})
        if self.searching:
            self.scores[str(self.current)] = e
            events["trial_done"] = 1.0
            if self.queue:
                self.current = self.queue.pop(0)
            else:
                tried = sorted(self.scores, key=lambda p: -self.scores[p])
                by_name = {str(p): p for p in [*self.initial, *self.candidates]}
                self.current = by_name[tried[0]]
                self.candidates = [by_name[p] for p in tried[: self.top]]
                self.searching = False
                events["chosen"] = 1.0
        elif e < self.threshold:
            # Alg. 1 line 8: repeat the search over the top-t candidates only
            self.queue = list(self.candidates[1:])
            self.current = self.candidates[0]
            self.scores = {}
            self.searching = True
            events["switch"] = 1.0
        self.window_start_acc, self.window_rounds = accuracy, 0
        return events
