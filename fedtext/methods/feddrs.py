"""FedDRS and FedDF: server-side distillation after FedAvg, without text or with auxiliary text.

FedDRS (``../shared/papers/002_dcf03d4234fa6404.txt``, §4, Alg. 1): clients fine-tune
the whole task model as ``fedavg`` does; the server averages every weight, then
distils the *task parameters* ω^f (everything but the word-embedding matrix ω^emb,
which stays the clients' average, §4) from the round's client models (teachers ω_k)
into the averaged model (student ω_S). No text is involved: the inputs are
pseudo-embeddings θ ``[N, L, D]`` fed to the encoder *below* its word-embedding lookup
(:meth:`fedtext.backbone.Backbone.embeds_logits`), drawn three ways (§4, Fig. 2):

* **random** (θ^rd): per position, a random mix of two rows of the averaged embedding
  matrix plus Gaussian noise with the matrix's per-dimension spread
  (:func:`random_embeddings`);
* **target** (θ^tr, eq. 6): start from random samples and descend
  ``L_tar = Σ_k CE(σ(f(θ_k; ω_k)), γ_k)`` so that teacher k outputs the random pseudo
  labels γ_k (:func:`target_samples`);
* **adversarial** (θ^ad, eq. 7): descend
  ``L_adv = Σ_k CE(f(θ_k; ω_k), γ_k) - λ·CE(f(θ_k; ω_S), γ_k)``: teacher agrees with γ,
  the student does not (:func:`adversarial_samples`).

Distillation (eq. 8): ``L = Σ_k KL(σ(f(θ_k; ω_k)) || σ(f(θ_k; ω_S)))``, each teacher on
its own samples (all kinds), minimised over ω^f (:func:`distill_steps`). Alg. 1 runs
I iterations (sample, then distil) per round and I* iterations with a stronger λ as
post-processing after the last round.

FedDF (Lin et al. 2020, the paper's data-based baseline, eq. 2): the same averaged
student, distilled toward the *ensemble* ``σ((1/K) Σ_k f(x; ω_k))`` on unlabelled
auxiliary text from another source (the paper: BookCorpus; here ``feddf.aux-dataset``,
e.g. SST-2 sentences for an AG News federation), with the same student-step budget.

Choices where the paper is silent or where this machine forces a scale (written
down, as docs/methods.md repeats):

* **ω^emb** is the word-embedding matrix only: it is what a pseudo-embedding replaces.
  Position/type embeddings and the embedding LayerNorm act on θ, so they are task
  parameters and are distilled. The ``linear`` head is part of ω^f (ω^lm).
* **The student's start** is FedAvg's example-weighted mean (§4: "starting with the
  model obtained after FedAvg"; Alg. 1 line 11 writes the uniform 1/M mean; with
  equally sized clients the two agree), so FedDRS with no distillation *is* ``fedavg``.
* **Sequence layout**: a pseudo sequence is ``[CLS] θ_1..θ_L [SEP]`` with the real
  [CLS]/[SEP] embeddings (every real input has them); only θ is sampled and optimised.
* **γ_k**: drawn from client k's label distribution, which the client uploads as
  ``label_counts`` [C] (the paper's "label distribution information", §5.2; 4·C +
  128 B); ``label-prior=uniform`` draws from the uniform distribution instead.
* **Sampling update**: plain gradient descent with step β on θ (Alg. 1 lines 13-14),
  ``sample-steps`` steps per sampling. Paper: 100 steps of β = 0.1 on a 64×64×768
  batch; here 5 steps of β = 2 (the same β × steps = 10) on 8 sequences of 32
  positions of D = 384 per teacher and sampler: 0.4 s per teacher for target
  sampling on this machine's 2 cores, moving θ by 12% of its norm and the teacher's
  CE to γ from 1.37 to 0.86 (β = 0.1 × 10 steps moved θ by 0.7%, CE 1.39 to 1.37).
* **Distillation**: ``distill-steps`` = 4 AdamW steps at η* = 1e-4 per iteration, each
  on all of the iteration's samples (Alg. 1 line 15 is one step; the paper used
  Adafactor at η* = 1e-5 on RoBERTa-base). With AdamW, 4 steps at 1e-5 move the
  student by about 4e-5 per weight and changed nothing measurable (AG News, α -> 0,
  seed 0, one round: 0.515 FedAvg, 0.520 FedDRS); at 1e-4 the same round gave 0.820.
  Dropout is off in teachers and student (eval mode).
* **Post-processing** (Alg. 1 line 8): at the last round the server runs I*
  iterations with λ* (``post-lam``; the paper says only "increasing λ") on that
  round's client models (the clients it has; every client's latest model would mean
  keeping K models on the server).
* **Variants** (Table 1): ``sampling=adversarial`` is AdOnly; ``post-only=true`` is
  PostOnly (plain FedAvg until the last round, then post-processing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from fedtext.backbone import Backbone
from fedtext.comm import ArraySpec
from fedtext.config import ConfigError, check_choice, check_range, looks_like_path
from fedtext.methods.fedavg import FedAvgConfig, FedAvgModel

SAMPLERS = ("random", "target", "adversarial")  # §4 (1)-(3), in this order everywhere
LABEL_PRIORS = ("client", "uniform")  # where the pseudo labels γ_k are drawn from


def parse_sampling(value: str) -> tuple[str, ...]:
    """``mixed`` or ``+``-joined samplers (``random+adversarial``) -> samplers in
    :data:`SAMPLERS` order; a :class:`ConfigError` for anything else."""
    if value == "mixed":
        return SAMPLERS
    parts = [p.strip() for p in value.split("+")]
    if not all(p in SAMPLERS for p in parts) or len(set(parts)) != len(parts):
        raise ConfigError(f"unknown feddrs.sampling '{value}'; choose mixed or a '+'-joined set of: "
                          f"{', '.join(SAMPLERS)}")
    return tuple(s for s in SAMPLERS if s in parts)


# ------------------------------------------------------------------------ configs
@dataclass(frozen=True)
class DistillConfig(FedAvgConfig):
    """What FedDRS and FedDF share: local fine-tuning as ``fedavg`` (inherited keys),
    then the server's distillation budget."""

    name: ClassVar[str] = "distill"
    heads: ClassVar[tuple[str, ...]] = ("linear", "similarity")  # pooled heads: pseudo inputs have no [MASK]

    iterations: int = 1  # I: sample-and-distil iterations per round (Alg. 1; paper 1)
    post_iterations: int = 3  # I*: iterations of post-processing after the last round (paper 3)
    post_only: bool = False  # PostOnly: plain FedAvg until the last round, then post-processing
    distill_steps: int = 4  # student AdamW steps per iteration
    distill_lr: float = 1e-4  # eta*: the student's AdamW learning rate (paper 1e-5 with Adafactor)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("iterations"), self.iterations, 0)
        check_range(self.key("post_iterations"), self.post_iterations, 0)
        check_range(self.key("distill_steps"), self.distill_steps, 1)
        check_range(self.key("distill_lr"), self.distill_lr, 0, low_open=True)


class FedDRSModel(FedAvgModel):
    """FedAvg's arrays (every weight, both ways); an upload adds ``label_counts`` [C]:
    the client's examples per label, from which the server draws γ_k."""

    def upload_specs(self) -> list[ArraySpec]:
        return [*self.global_specs(), ArraySpec("label_counts", (self.backbone.task.num_classes,), "float32")]

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        counts = upload["label_counts"]
        if (counts < 0).any() or counts.sum() <= 0:
            return f"label_counts must be >= 0 with a positive sum, got {counts.tolist()}"
        return None


@dataclass(frozen=True)
class FedDRSConfig(DistillConfig):
    """``feddrs.*``: the fedavg keys, the distillation budget and the samplers."""

    name: ClassVar[str] = "feddrs"
    model_class: ClassVar[type] = FedDRSModel
    strategy: ClassVar[str] = "strategies.feddrs:FedDRS"
    client: ClassVar[str] = "clients.feddrs:FedDRSClient"

    sampling: str = "mixed"  # random | target | adversarial | '+'-joined set | mixed (all three)
    label_prior: str = "client"  # gamma_k from the client's label counts | uniform
    sample_batch: int = 8  # pseudo sequences per teacher and sampler (paper 64)
    sample_length: int = 32  # pseudo positions per sequence between [CLS] and [SEP] (paper 64)
    sample_steps: int = 5  # gradient steps on theta per target/adversarial sampling (paper 100)
    beta: float = 2.0  # step size of the sampling update (paper 0.1 x 100 steps; here 2 x 5: same beta x steps)
    lam: float = 0.1  # lambda of eq. (7) during training rounds (paper 0.1)
    post_lam: float = 0.3  # lambda* of eq. (7) in post-processing ("increased"; value ours)
    noise: float = 0.5  # random sampling noise, in units of the embeddings' per-dimension std

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_sampling(self.sampling)
        check_choice(self.key("label_prior"), self.label_prior, LABEL_PRIORS)
        for key in ("sample_batch", "sample_length", "sample_steps"):
            check_range(self.key(key), getattr(self, key), 1)
        check_range(self.key("beta"), self.beta, 0, low_open=True)
        for key in ("lam", "post_lam", "noise"):
            check_range(self.key(key), getattr(self, key), 0)

    @property
    def samplers(self) -> tuple[str, ...]:
        return parse_sampling(self.sampling)


@dataclass(frozen=True)
class FedDFConfig(DistillConfig):
    """``feddf.*``: the fedavg keys, the distillation budget and the auxiliary text."""

    name: ClassVar[str] = "feddf"
    model_class: ClassVar[type] = FedAvgModel
    strategy: ClassVar[str] = "strategies.feddf:FedDF"
    client: ClassVar[str] = "clients.feddf:FedDFClient"

    distill_lr: float = 3e-5  # the student's AdamW learning rate (at 1e-4 FedDF's KL rose during its steps)
    aux_dataset: str = "demo"  # unlabelled auxiliary text: a data folder (its train split's texts) or demo
    aux_size: int = 256  # auxiliary texts drawn (seeded) once per run
    aux_batch: int = 64  # auxiliary texts per student step

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("aux_size"), self.aux_size, 1)
        check_range(self.key("aux_batch"), self.aux_batch, 1)
        if looks_like_path(self.aux_dataset) and not Path(self.aux_dataset).expanduser().is_dir():
            raise ConfigError(f"{self.key('aux_dataset')} path '{self.aux_dataset}' does not exist "
                              f"(resolved to {Path(self.aux_dataset).expanduser().resolve()})")


# ---------------------------------------------------------------- the samplers
def word_embedding_name(net: Backbone) -> str:
    """The name of ω^emb, the word-embedding matrix, among ``net.named_parameters()``."""
    return next(n for n, p in net.named_parameters() if p is net.embeddings.weight)


def sequence_ends(net: Backbone) -> Tensor:
    """The ``[2, D]`` embeddings of [CLS] and [SEP] in ``net`` (the student: averaged)."""
    return net.embeddings.weight[[net.cls_id, net.sep_id]].detach().clone()


def wrap(ends: Tensor, theta: Tensor) -> Tensor:
    """``[CLS] θ [SEP]``: pseudo positions ``[N, L, D]`` -> a sequence ``[N, L+2, D]``
    (``ends``: :func:`sequence_ends`)."""
    n = len(theta)
    return torch.cat([ends[0].expand(n, 1, -1), theta, ends[1].expand(n, 1, -1)], dim=1)


def random_embeddings(net: Backbone, n: int, length: int, noise: float, rng: np.random.Generator) -> Tensor:
    """θ^rd ``[n, length, D]``: per position ``u·e_a + (1-u)·e_b + noise·σ⊙ε`` with a, b
    natural vocabulary tokens, u ~ U(0, 1), ε ~ N(0, I) and σ the per-dimension std of
    the (averaged) embedding matrix: samples "in the embedding's distribution" (§4 (1))."""
    emb = net.embeddings.weight.detach()
    a, b = (torch.as_tensor(rng.choice(net.natural_token_ids(), size=(n, length))) for _ in range(2))
    u = torch.as_tensor(rng.random((n, length, 1)), dtype=emb.dtype)
    eps = torch.as_tensor(rng.standard_normal((n, length, emb.shape[1])), dtype=emb.dtype)
    return u * emb[a] + (1 - u) * emb[b] + noise * emb.std(0) * eps


def pseudo_labels(counts: np.ndarray | None, n: int, num_classes: int, rng: np.random.Generator) -> Tensor:
    """γ_k: n labels drawn from the client's label distribution ``counts`` (``None``:
    uniform)."""
    # in float64 throughout: counts arrive as float32 arrays, whose own sum drops small counts
    # beside large ones (2**24 + 1 + 1 -> 2**24), leaving p summing past rng.choice's tolerance
    c = None if counts is None else np.asarray(counts, dtype=np.float64)
    p = None if c is None else c / c.sum()
    return torch.as_tensor(rng.choice(num_classes, size=n, p=p), dtype=torch.long)


def descend(theta: Tensor, loss_fn: Callable[[Tensor], Tensor], steps: int, beta: float) -> Tensor:
    """``steps`` plain gradient-descent steps θ <- θ - β ∇_θ loss(θ) (Alg. 1 lines
    13-14); only θ's gradient is computed (model weights get none)."""
    theta = theta.detach().clone()
    for _ in range(steps):
        theta.requires_grad_(True)
        (grad,) = torch.autograd.grad(loss_fn(theta), theta)
        theta = (theta - beta * grad).detach()
    return theta


def target_loss(teacher: Backbone, ends: Tensor, theta: Tensor, gamma: Tensor) -> Tensor:
    """One teacher's term of L_tar (eq. 6): CE(σ(f(θ; ω_k)), γ_k), mean over samples."""
    return torch.nn.functional.cross_entropy(teacher.embeds_logits(wrap(ends, theta)), gamma)


def adversarial_loss(teacher: Backbone, student: Backbone, ends: Tensor, theta: Tensor, gamma: Tensor,
                     lam: float) -> Tensor:
    """One teacher's term of L_adv (eq. 7): CE(f(θ; ω_k), γ) - λ·CE(f(θ; ω_S), γ)."""
    x = wrap(ends, theta)
    ce = torch.nn.functional.cross_entropy
    return ce(teacher.embeds_logits(x), gamma) - lam * ce(student.embeds_logits(x), gamma)


def target_samples(teacher: Backbone, ends: Tensor, theta0: Tensor, gamma: Tensor, steps: int,
                   beta: float) -> Tensor:
    """θ^tr: random samples moved so that teacher k outputs γ_k (eq. 6)."""
    return descend(theta0, lambda t: target_loss(teacher, ends, t, gamma), steps, beta)


def adversarial_samples(teacher: Backbone, student: Backbone, ends: Tensor, theta0: Tensor, gamma: Tensor,
                        lam: float, steps: int, beta: float) -> Tensor:
    """θ^ad: random samples moved so that teacher k outputs γ_k while the student
    does not (eq. 7, strength λ)."""
    return descend(theta0, lambda t: adversarial_loss(teacher, student, ends, t, gamma, lam), steps, beta)


@dataclass
class Teaching:
    """One teacher's distillation data: its inputs (pseudo sequences ``[N, L+2, D]`` or
    encoded text) and its softmax outputs on them ``[N, C]`` (fixed while the student
    learns)."""

    inputs: object
    probs: Tensor


def kl_to_student(student_logits: Tensor, teacher_probs: Tensor) -> Tensor:
    """KL(p_teacher || σ(student)), mean over samples (eqs. 2, 5 and 8)."""
    return torch.nn.functional.kl_div(torch.log_softmax(student_logits, -1), teacher_probs, reduction="batchmean")


def distill_steps(student: Backbone, params: Sequence[torch.nn.Parameter], teachings: Sequence[Teaching],
                  logits: Callable[[Backbone, object], Tensor], steps: int, lr: float) -> tuple[float, float]:
    """``steps`` AdamW steps (lr η*) on ``Σ_k KL(teacher_k || student)`` over every
    teacher's data (eq. 8; FedDF: one ensemble "teacher", eq. 2), updating ``params``
    only. Returns the loss before the first and after the last step."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

    def loss() -> Tensor:
        return sum(kl_to_student(logits(student, t.inputs), t.probs) for t in teachings)

    first = None
    for _ in range(steps):
        value = loss()
        first = float(value.detach()) if first is None else first
        opt.zero_grad()
        value.backward()
        opt.step()
    with torch.no_grad():
        return first, float(loss())
