"""FedDRS's and FedDF's run-config keys (``[tool.flwr.app.config.feddrs]``, ``[...feddf]``),
validated once; imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fedtext.common.config import ConfigError, check_choice, check_range, looks_like_path
from fedtext.methods.fedavg.config import FedAvgConfig
from fedtext.common.metrics import MetricSpec

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
    # not fedavg's MEAN: the mean is the student's start, then the server distils into it
    server_aggregation: ClassVar[str] = "a distillation of the clients' models into the mean (not the mean itself)"
    privacy: ClassVar[frozenset[str]] = frozenset()  # not fedprompt's, whose mean it starts from
    privacy_reason: ClassVar[str] = ("its server distils from each client's model on its own (each one's logits on the "
                                     "server's texts), not from their sum")
    heads: ClassVar[tuple[str, ...]] = ("linear", "similarity")  # pooled heads: pseudo inputs have no [MASK]
    # no metrics of its own: its replies carry the telemetry every client sends (fedtext.server.validation)
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()

    iterations: int = 1  # I: sample-and-distil iterations per round (Alg. 1; paper 1)
    post_iterations: int = 3  # I*: iterations of post-processing after the last round (paper 3)
    post_only: bool = False  # PostOnly (Table 1): plain FedAvg until the last round, then post-processing
    #: student AdamW steps per iteration on eq. (8) (paper: one Adafactor step)
    distill_steps: int = 4  # student AdamW steps per iteration on eq. (8)
    #: η*: the student's AdamW learning rate (paper: Adafactor at 1e-5; at 1e-5 four AdamW steps changed nothing
    #: measurable here)
    distill_lr: float = 1e-4  # eta*: the student's AdamW learning rate (paper 1e-5 with Adafactor)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("iterations"), self.iterations, 0)
        check_range(self.key("post_iterations"), self.post_iterations, 0)
        check_range(self.key("distill_steps"), self.distill_steps, 1)
        check_range(self.key("distill_lr"), self.distill_lr, 0, low_open=True)


@dataclass(frozen=True)
class FedDRSConfig(DistillConfig):
    """``feddrs.*``: the fedavg keys, the distillation budget and the samplers."""

    name: ClassVar[str] = "feddrs"
    model: ClassVar[str] = "fedtext.methods.feddrs.model:FedDRSModel"
    strategy: ClassVar[str] = "strategies.feddrs:FedDRS"
    client: ClassVar[str] = "clients.feddrs:FedDRSClient"
    summary: ClassVar[str] = "fedavg + text-free server distillation"
    page: ClassVar[str] = "feddrs"
    results: ClassVar[str] = "feddrs_ag_news_alpha005"
    description: ClassVar[str] = (
        "FedDRS (text-free distillation without GAN): clients fine-tune as `fedavg`; the server takes FedAvg's "
        "mean (the student; the word-embedding matrix ω^emb stays exactly that mean), then, `feddrs.iterations` "
        "times per round (I), samples pseudo-embeddings per client model (teacher): `random` (mixes of rows of "
        "the averaged embedding matrix + noise), `target` (gradient descent on θ so the teacher outputs random "
        "pseudo labels γ_k drawn from the client's label counts, eq. 6), `adversarial` (teacher agrees with γ, "
        "student does not, λ, eq. 7), and takes `feddrs.distill-steps` AdamW steps on Σ_k KL(teacher_k ‖ "
        "student) over the task parameters ω^f (eq. 8); after the last round `feddrs.post-iterations` iterations "
        "(I*) with λ* (post-processing, Alg. 1). `feddrs.sampling`: `mixed` (all three), one sampler, or a "
        "`+`-joined set (Table 2); `feddrs.post-only=true` is PostOnly, `sampling=adversarial` AdOnly (Table 1). "
        "Server distillation seconds and peak memory: `method_metrics.server_distill_s`, `server_peak_rss_mb`.")
    travels: ClassVar[str] = "the whole model each way, as `fedavg`, plus `label_counts` [C] up: `4C + 128` B"
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "batch-size": 4, "sample-batch": 2, "sample-length": 4,
                                             "sample-steps": 1, "distill-steps": 1, "post-iterations": 1}

    #: samplers: `random`, `target`, `adversarial`, a `+`-joined set (`random+adversarial`), or `mixed` = all three
    sampling: str = "mixed"  # random | target | adversarial | '+'-joined set (random+adversarial) | mixed = all three
    #: pseudo labels γ_k drawn from the client's label counts (`client`) or `uniform`
    label_prior: str = "client"  # pseudo labels gamma_k drawn from the client's label counts | uniform
    sample_batch: int = 8  # pseudo sequences per teacher and sampler (paper 64)
    sample_length: int = 32  # pseudo positions per sequence between [CLS] and [SEP] (paper 64)
    #: gradient steps on θ per target/adversarial sampling (paper: 100)
    sample_steps: int = 5  # gradient steps on theta per target/adversarial sampling (paper 100)
    #: β, the step size of the sampling update (paper: 0.1; β·steps kept at 10: 2 × 5 here, 0.1 × 100 in the paper)
    beta: float = 2.0  # step size of the sampling update (paper 0.1 x 100 steps; here 2 x 5: same beta x steps)
    #: λ of eq. (7) in training rounds (paper: 0.1)
    lam: float = 0.1  # lambda of eq. (7) in training rounds (paper 0.1)
    #: λ* of eq. (7) in post-processing (paper: "increased")
    post_lam: float = 0.3  # lambda* of eq. (7) in post-processing (paper: "increased")
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
    model: ClassVar[str] = "fedtext.methods.fedavg.model:FedAvgModel"
    strategy: ClassVar[str] = "strategies.feddf:FedDF"
    client: ClassVar[str] = "clients.feddf:FedDFClient"
    summary: ClassVar[str] = "fedavg + distillation on public texts"
    page: ClassVar[str] = "feddrs"
    results: ClassVar[str] = "feddrs_ag_news_alpha005"
    description: ClassVar[str] = (
        "FedDF (Lin et al. 2020), FedDRS's data-based baseline: clients fine-tune as `fedavg`; the server "
        "distills the same averaged student toward the teachers' ensemble σ((1/K)Σ_k f(x; ω_k)) (eq. 2 of "
        "FedDRS) on `feddf.aux-size` unlabelled texts of another dataset (`feddf.aux-dataset`), with the same "
        "student-step budget as `feddrs` (every weight learns).")
    travels: ClassVar[str] = "the whole model each way, as `fedavg`"
    smoke: ClassVar[Mapping[str, object]] = {"local-steps": 1, "batch-size": 4, "distill-steps": 1, "post-iterations": 1,
                                             "aux-size": 8, "aux-batch": 8}

    #: 3e-5, as FedDF's KL rose during its steps at 1e-4
    distill_lr: float = 3e-5  # the student's AdamW learning rate (at 1e-4 its KL rose during the steps)
    aux_dataset: str = "demo"  # unlabelled auxiliary text: a data folder (its train texts) or demo
    aux_size: int = 256  # auxiliary texts drawn (seeded) once per run
    aux_batch: int = 64  # auxiliary texts per encoder call

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self.key("aux_size"), self.aux_size, 1)
        check_range(self.key("aux_batch"), self.aux_batch, 1)
        if looks_like_path(self.aux_dataset) and not Path(self.aux_dataset).expanduser().is_dir():
            raise ConfigError(f"{self.key('aux_dataset')} path '{self.aux_dataset}' does not exist "
                              f"(resolved to {Path(self.aux_dataset).expanduser().resolve()})")
