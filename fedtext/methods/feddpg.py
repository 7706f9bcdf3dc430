"""FedDPG's config and model: a dynamic prompt generator G, and FedDPGu's unlearning.

FedDPG (Shakeri et al., ``../shared/papers/004_03995fac2178d15f.txt``, §3.2): a two-layer
MLP G maps the mean input embedding ē = (1/n) Σ_i e_i of a text (d_e) to |P|·d_e
values, reshaped to |P| prompt vectors (eq. 2) and prepended to the text's embeddings,
z = [P; x] (eq. 3). The PLM stays frozen; only G trains (back-propagation through the
frozen encoder) and travels, and the server takes the uniform mean of the clients' G
(eq. 1, every selected client counts equally).

Global arrays = upload = G's four tensors, float32, named as the module names them::

    generator.0.weight [h, D]   generator.0.bias [h]
    generator.2.weight [|P|·D, h]   generator.2.bias [|P|·D]

(h = ``feddpg.hidden``, |P| = ``feddpg.prompts``; D = 384, h = 20, |P| = 10:
7,700 + 80,640 = 88,340 weights = 353,360 B + 4 NPY headers = 353,872 B each way).

Choices where the paper is silent, and where the authors' code (gotobcn8/FedDPG,
``model/feddpg.py``, ``federated/``) departs from it:

* **activation**: ReLU between the two layers (the paper says "two-layer MLP"; the
  code uses ReLU).
* **ē**: the mean word embedding over the n tokens of the text as the tokenizer
  gives them ([CLS] and [SEP] included, padding excluded). The code averages over the
  padded batch width too, so a text's prompt depends on the longest text of its
  batch; we follow the paper's 1/n Σ.
* **where P goes**: after [CLS], like every prompt method here (the code prepends it
  before ``<s>`` and classifies from the ``<s>`` state after the prompt); with the
  similarity head, which pools every position, the order does not matter beyond
  the position embeddings.
* **what trains**: the paper trains G only (§3.2.2, "only G"). The code also trains
  and averages a classification head ``Linear(D,10)-Tanh-Linear(10,C)``. Here the head
  is the project's frozen prompt-style head (``similarity``: cosine to the encoded
  label descriptions; ``tied``/``mlm`` for cloze checkpoints), so nothing but G trains.
* **hidden size / |P|**: defaults h = 20, |P| = 10, which give Table 1's parameter
  count with RoBERTa-base (G 176,660 + the code's head 7,712 ≈ 185K). The code's
  default is h = 10.
* **input** (§4.2.2, Fig. 2): ``prompt-text`` = [P; x] (the method), ``text`` = x alone
  (G bypassed: with a frozen PLM and a frozen head nothing trains, so this is the
  zero-shot reference), ``prompt`` = P alone ([CLS] P [SEP]: the text reaches the PLM
  only through ē).

FedDPGu (§3.3): the client asking to forget relabels each forgotten example to a
random label different from its own, trains G_c with eq. (5),
ℓ(retained) + λ·ℓ(relabelled), and uploads G_c^u; the server replaces the global G
with it (no averaging). The paper gives neither λ nor how long the client trains. The
authors' code (``federated/client.py``, ``client_unlearn``) runs ``local_epochs``
mini-batch epochs of one cross-entropy over the client's data with the forgotten labels
replaced in place (each relabelled example weighs as much as a retained one) under a
linearly decaying AdamW rate; here ``unlearn-steps`` full-batch steps at ``unlearn-lr``
of ``unlearn-optimizer`` (AdamW as the code, or plain gradient steps: the paper names no
optimizer), and ``unlearn-loss`` picks the weighting (``sets``, the default: λ on the
relabelled set's mean; ``examples``: λ per example, the code's at λ = 1; see
:func:`unlearning_loss`). :func:`forget_split`, :func:`relabel` and :func:`unlearn` are
the one implementation, used by the client in the ``unlearn-round`` scenario and by
:func:`simulations.unlearning.unlearn_run` on a finished run's checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from fedtext.backbone import Backbone, EncodedBatch
from fedtext.comm import ArraySpec
from fedtext.config import MethodConfig, check_choice, check_range
from fedtext.model import Model

if TYPE_CHECKING:
    from fedtext.config import RunConfig

INPUTS = ("prompt-text", "text", "prompt")  # §4.2.2: [P; x], x only, P only
# the file in the run folder that keeps the global G an unlearning round replaced (written by
# strategies.feddpg, read by simulations.unlearning)
BEFORE_UNLEARNING = "before-unlearning.npz"
UNLEARN_LOSSES = ("sets", "examples")  # eq. (5): λ weighs the relabelled set / each relabelled example
# the unlearning update's optimizer (the paper names none): AdamW as the authors' code, or plain
# gradient steps, which move G in proportion to eq. (5)'s gradient instead of by ~lr per weight
UNLEARN_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


def make_generator(dim: int, hidden: int, prompts: int) -> torch.nn.Sequential:
    """G of eq. (2): ``Linear(D, h) -> ReLU -> Linear(h, |P|·D)``."""
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, prompts * dim))


def mean_embedding(backbone: Backbone, batch: EncodedBatch) -> torch.Tensor:
    """ē per text ``[B, D]``: the mean word embedding over its n attended tokens."""
    tok = backbone.embeddings(batch.input_ids)  # [B, L, D]
    w = batch.attention_mask.unsqueeze(-1).to(tok.dtype)
    return (tok * w).sum(1) / w.sum(1).clamp(min=1.0)


class FedDPGModel(Model):
    """G's weights are the global arrays; a text's prompt is ``G(ē)`` reshaped to ``[|P|, D]``."""

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        self.generator = make_generator(backbone.dim, self.mcfg.hidden, self.mcfg.prompts)
        self.generator.requires_grad_(False)

    def global_specs(self) -> list[ArraySpec]:
        return [ArraySpec(f"generator.{n}", tuple(p.shape), "float32") for n, p in self.generator.named_parameters()]

    def initial_arrays(self) -> list[np.ndarray]:
        """G with PyTorch's default ``Linear`` initialisation, drawn from the run seed
        (every client starts from the server's copy)."""
        seed = int(np.random.SeedSequence([self.cfg.seed, 0xD96]).generate_state(1)[0])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            fresh = make_generator(self.backbone.dim, self.mcfg.hidden, self.mcfg.prompts)
        return [p.detach().numpy().astype(np.float32, copy=True) for p in fresh.parameters()]

    def load(self, arrays: Sequence[np.ndarray], trainable: bool = False) -> torch.nn.Sequential:
        """This model's G with ``arrays`` in it (``trainable``: gradients on)."""
        with torch.no_grad():
            for p, a in zip(self.generator.parameters(), arrays, strict=True):
                p.copy_(torch.as_tensor(np.asarray(a, dtype=np.float32)))
        self.generator.requires_grad_(trainable)
        return self.generator

    def arrays(self) -> list[np.ndarray]:
        """G's current weights, float32, in :meth:`global_specs` order."""
        return [p.detach().numpy().astype(np.float32, copy=True) for p in self.generator.parameters()]

    def prompts(self, batch: EncodedBatch) -> torch.Tensor:
        """Per-text prompts ``[B, |P|, D]`` = reshape(G(ē)) (eqs. 2-3)."""
        e_bar = mean_embedding(self.backbone, batch)
        return self.generator(e_bar).reshape(len(batch), self.mcfg.prompts, self.backbone.dim)

    def logits(self, batch: EncodedBatch) -> torch.Tensor:
        """Class logits ``[B, C]`` under the configured input (autograd as the caller set it)."""
        mode = self.mcfg.input
        if mode == "text":
            return self.backbone.forward(None, batch)
        prompts = self.prompts(batch)
        if mode == "prompt":  # [CLS] P [SEP]: the text is seen only through ē
            return self.backbone.forward(prompts, prompt_only(self.backbone, batch))
        return self.backbone.forward(prompts, batch)

    def evaluate(self, arrays: Sequence[np.ndarray], batches: Sequence[EncodedBatch]) -> tuple[float, float]:
        self.load(arrays)
        loss, correct, n = 0.0, 0, 0
        with torch.no_grad():
            for batch in batches:
                logits = self.logits(batch)
                loss += float(torch.nn.functional.cross_entropy(logits, batch.labels, reduction="sum"))
                correct += int((logits.argmax(-1) == batch.labels).sum())
                n += len(batch)
        return loss / max(n, 1), correct / max(n, 1)


def prompt_only(backbone: Backbone, batch: EncodedBatch) -> EncodedBatch:
    """``[CLS] [SEP]`` per row (the prompt goes between them), same labels."""
    b = len(batch)
    ids = torch.tensor([[backbone.cls_id, backbone.sep_id]] * b, dtype=torch.long)
    return EncodedBatch(ids, torch.ones_like(ids), batch.labels, None)


@dataclass(frozen=True)
class FedDPGConfig(MethodConfig):
    """``feddpg.*``: G's size and input configuration, AdamW on G, the FedDPGu scenario."""

    name: ClassVar[str] = "feddpg"
    model_class: ClassVar[type] = FedDPGModel
    strategy: ClassVar[str] = "strategies.feddpg:FedDPG"
    client: ClassVar[str] = "clients.feddpg:FedDPGClient"

    hidden: int = 20  # h: hidden units of G (paper: 5 / 10 / 20)
    prompts: int = 10  # |P|: prompt vectors G makes per text (paper: 1 / 5 / 10)
    input: str = "prompt-text"  # §4.2.2: prompt-text = [P; x], text = x only, prompt = P only
    local_steps: int = 4  # AdamW steps per round
    lr: float = 1e-3  # the authors' code: AdamW, 1e-3
    batch_size: int = 16
    unlearn_round: int = 0  # FedDPGu: the round in which unlearn-client unlearns (0 = never)
    unlearn_client: int = 0  # partition id of the client that asks to forget
    forget_fraction: float = 0.2  # share of that client's training examples to forget (§4.2.5: 20%)
    unlearn_lambda: float = 1.0  # λ of eq. (5)
    unlearn_loss: str = "sets"  # sets: mean CE(retained) + λ·mean CE(relabelled); examples: λ per example
    unlearn_steps: int = 16  # full-batch steps of the unlearning update (at most, with unlearn-target)
    unlearn_lr: float = 0.0  # their learning rate (0 = feddpg.lr)
    unlearn_target: float = 0.0  # stop once forget-set accuracy (true labels) fell by this many points (0 = never)
    unlearn_optimizer: str = "adamw"  # adamw (the authors' code) or sgd (plain gradient steps)

    def __post_init__(self) -> None:
        check_range(self.key("hidden"), self.hidden, 1)
        check_range(self.key("prompts"), self.prompts, 1)
        check_choice(self.key("input"), self.input, INPUTS)
        check_range(self.key("local_steps"), self.local_steps, 1)
        check_range(self.key("lr"), self.lr, 0, low_open=True)
        check_range(self.key("batch_size"), self.batch_size, 1)
        check_range(self.key("unlearn_round"), self.unlearn_round, 0)
        check_range(self.key("unlearn_client"), self.unlearn_client, 0)
        check_range(self.key("forget_fraction"), self.forget_fraction, 0, 1, low_open=True)
        check_range(self.key("unlearn_lambda"), self.unlearn_lambda, 0)
        check_choice(self.key("unlearn_loss"), self.unlearn_loss, UNLEARN_LOSSES)
        check_range(self.key("unlearn_steps"), self.unlearn_steps, 1)
        check_range(self.key("unlearn_lr"), self.unlearn_lr, 0)
        check_range(self.key("unlearn_target"), self.unlearn_target, 0, 100)
        check_choice(self.key("unlearn_optimizer"), self.unlearn_optimizer, tuple(UNLEARN_OPTIMIZERS))


# ---------------------------------------------------------------------- FedDPGu
def forget_split(n: int, fraction: float, seed: int, partition_id: int) -> np.ndarray:
    """Indices (sorted) of the ``round(fraction · n)`` examples (at least 1) a client forgets,
    drawn from (seed, partition)."""
    k = min(n, max(1, round(fraction * n)))
    return np.sort(np.random.default_rng([seed, partition_id, 0xF06E7]).choice(n, size=k, replace=False))


def relabel(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """§3.3: each label replaced by one drawn uniformly from the *other* classes (ŷ ≠ y)."""
    labels = np.asarray(labels)
    shift = rng.integers(1, num_classes, size=labels.shape)  # 1..C-1: never the true class
    return (labels + shift) % num_classes


def accuracy(model: FedDPGModel, batch: EncodedBatch) -> float:
    """Accuracy of the model's current G on ``batch`` (its own labels)."""
    if not len(batch):
        return float("nan")
    with torch.no_grad():
        return float((model.logits(batch).argmax(-1) == batch.labels).float().mean())


def unlearning_loss(keep_logits: torch.Tensor | None, keep_labels: torch.Tensor, forget_logits: torch.Tensor,
                    relabels: torch.Tensor, lam: float, weighting: str = "sets") -> torch.Tensor:
    """Eq. (5) of FedDPG: ℓ(retained) + λ·ℓ(relabelled), cross-entropy, in one of two weightings.

    ``sets`` (default) takes each term's mean, mean_r CE + λ·mean_u CE: eq. (5) as
    written, Σ_i (ℓ(θ, y_c^i) + λ·ℓ(θ, y_c^u)), is n_c times that for one forgotten
    point, and λ then weighs the two sets whatever their sizes (λ = 1: half the loss is
    the relabelled set's). ``examples`` weighs each example, retained 1 and relabelled λ,
    (Σ_r CE + λ·Σ_u CE) / (n_r + λ·n_u): with λ = 1 it is the authors' code
    (``client_unlearn``: one cross-entropy over the client's data with the forgotten
    labels replaced in place), where the relabelled share of the loss is n_u / n_c
    (20% under §4.2.5's forget fraction). ``keep_logits = None``: nothing is retained.

    The retained set is *all* of the client's other training examples, full batch: §3.3
    trains on the relabelled data plus "some randomly selected correct samples" and does
    not say how many; the authors' code keeps them all, and so do we.
    """
    ce = torch.nn.functional.cross_entropy
    if weighting == "sets":
        loss = lam * ce(forget_logits, relabels)
        return loss if keep_logits is None else loss + ce(keep_logits, keep_labels)
    total, weight = lam * ce(forget_logits, relabels, reduction="sum"), lam * len(relabels)
    if keep_logits is not None:
        total, weight = total + ce(keep_logits, keep_labels, reduction="sum"), weight + len(keep_labels)
    return total / weight if weight > 0 else total


def unlearn_seed(cfg: "RunConfig", partition_id: int, server_round: int) -> int:
    """Seed of client ``partition_id``'s unlearning update in ``server_round`` (it draws the
    relabels): the client's per-round seed. The Flower client and
    :func:`simulations.unlearning.unlearn_run` both take it from here, so that unlearning
    again from ``before-unlearning.npz`` repeats the run's unlearning round exactly (with
    three or more classes the relabels depend on it)."""
    from fedtext.client import client_seed

    return client_seed(cfg, partition_id, server_round)


def unlearn(model: FedDPGModel, arrays: Sequence[np.ndarray], batch: EncodedBatch, forget: np.ndarray,
            seed: int) -> tuple[list[np.ndarray], dict[str, float]]:
    """FedDPGu's local update (§3.3, eq. 5) from the global G ``arrays``.

    ``forget`` indexes the rows of ``batch`` to forget; they are relabelled
    (:func:`relabel`) and each of ``unlearn-steps`` full-batch steps of ``unlearn-optimizer``
    (learning rate ``unlearn-lr``, or ``lr``) minimises :func:`unlearning_loss` (eq. 5, weighted as
    ``unlearn-loss`` says) over all the client's examples. With ``unlearn-target`` = T > 0
    the client stops before a step once its forget set's accuracy against the true labels
    has fallen by T points from where it started (read off the logits of that step's
    loss, so the check costs no forward): a stopping rule of ours, the paper gives no
    length; the client can apply it because it holds the forget set and its labels.
    Nothing is random but the relabels (drawn from ``seed``): G has no dropout. Returns
    G_c^u and the accuracies, against the true labels, of the forget set and of the
    retained examples before and after, and the steps taken.
    """
    mc = model.mcfg
    rng = np.random.default_rng([seed, 0x0F6E7])
    keep = np.setdiff1d(np.arange(len(batch)), forget)
    forget_b, keep_b = batch.take(forget), batch.take(keep)
    relabelled = EncodedBatch(forget_b.input_ids, forget_b.attention_mask,
                              torch.as_tensor(relabel(forget_b.labels.numpy(), model.backbone.task.num_classes, rng)),
                              forget_b.mask_pos)
    model.load(arrays)
    metrics = {"forget_accuracy_before": accuracy(model, forget_b), "retained_accuracy_before": accuracy(model, keep_b),
               "forget_examples": float(len(forget))}
    gen = model.load(arrays, trainable=True)
    opt = UNLEARN_OPTIMIZERS[mc.unlearn_optimizer](gen.parameters(), lr=mc.unlearn_lr or mc.lr)
    losses = []
    for _ in range(mc.unlearn_steps):  # full batch: eq. (5) sums over all the client's examples
        forget_logits = model.logits(relabelled)
        now = float((forget_logits.argmax(-1) == forget_b.labels).float().mean())  # true labels, not relabels
        if mc.unlearn_target and 100 * (metrics["forget_accuracy_before"] - now) >= mc.unlearn_target - 1e-9:
            break
        keep_logits = model.logits(keep_b) if len(keep_b) else None
        loss = unlearning_loss(keep_logits, keep_b.labels, forget_logits, relabelled.labels,
                               mc.unlearn_lambda, mc.unlearn_loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    gen.requires_grad_(False)
    metrics.update(forget_accuracy_after=accuracy(model, forget_b), retained_accuracy_after=accuracy(model, keep_b),
                   unlearn_loss=float(np.mean(losses)) if losses else 0.0, unlearn_steps_taken=float(len(losses)))
    return model.arrays(), metrics

