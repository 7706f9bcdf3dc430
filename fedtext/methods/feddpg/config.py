"""FedDPG's and FedDPGu's run-config keys (``[tool.flwr.app.config.feddpg]``), validated once;
imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fedtext.common.config import GRADIENT, MEAN, ConfigError, MethodConfig, RunConfig, check_choice, check_range
from fedtext.common.metrics import MetricSpec

INPUTS = ("prompt-text", "text", "prompt")  # §4.2.2: [P; x], x only, P only
# ē: the mean over the text's tokens (eq. 2), or over the authors' code's 128 padded positions
MEAN_EMBEDDINGS = ("tokens", "padded")
PADDED_LENGTH = 128  # the authors' max_length (data/glue.py: padding='max_length')


# the file in the run folder that keeps the global G an unlearning round replaced (written by
# strategies.feddpg, read by simulations.papers.feddpg.unlearning)
BEFORE_UNLEARNING = "before-unlearning.npz"


# ``unlearn-optimizer`` values; fedtext.methods.feddpg.unlearning.UNLEARN_OPTIMIZERS holds their
# torch classes (tests/unit/test_feddpg.py checks the two agree)
UNLEARN_OPTIMIZER_NAMES = ("adamw", "sgd")
UNLEARN_LOSSES = ("sets", "examples")  # eq. (5): λ weighs the relabelled set / each relabelled example

# What the unlearning client adds to its fit reply in the unlearning round
# (fedtext.methods.feddpg.unlearning.unlearn): accuracies before and after on its forget and
# retained sets (a retained accuracy only when it retains an example), how many it forgot
# (of its own rows), the mean loss of eq. (5) and the steps it took. Training rounds add none.
UNLEARN_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("forget_accuracy_before", low=0, high=1),
    MetricSpec("forget_accuracy_after", low=0, high=1),
    MetricSpec("retained_accuracy_before", low=0, high=1),
    MetricSpec("retained_accuracy_after", low=0, high=1),
    MetricSpec("forget_examples", whole=True, low=1, within_rows=True),  # forget_split: at least one
    MetricSpec("unlearn_loss", low=0),  # a mean of cross-entropies
    MetricSpec("unlearn_steps_taken", whole=True, low=0),
)


@dataclass(frozen=True)
class FedDPGConfig(MethodConfig):
    """``feddpg.*``: G's size and input configuration, AdamW on G, the FedDPGu scenario."""

    name: ClassVar[str] = "feddpg"
    model: ClassVar[str] = "fedtext.methods.feddpg.model:FedDPGModel"
    strategy: ClassVar[str] = "strategies.feddpg:FedDPG"
    client: ClassVar[str] = "clients.feddpg:FedDPGClient"
    # eq. (1)'s uniform mean of G (the unlearning round's replacement G <- G_c^u bypasses the server
    # optimizer: strategies.feddpg); AdamW on G through gradient_steps (unlearning: its own ascent)
    server_aggregation: ClassVar[str] = MEAN
    # DP (central, local): eq. (1) averages the uploads uniformly. Not SecAgg+: it weights each upload by its
    # example count, where FedDPG weighs every client the same (docs/privacy.md)
    privacy: ClassVar[frozenset[str]] = frozenset({"dp-central", "dp-local"})
    privacy_reason: ClassVar[str] = ("feddpg averages its clients' G uniformly (eq. (1)); SecAgg+ sums uploads weighted "
                                     "by their example counts")
    local_training: ClassVar[str] = GRADIENT
    summary: ClassVar[str] = "MLP prompt generator (back-prop); unlearning"
    page: ClassVar[str] = "feddpg"
    results: ClassVar[str] = "feddpg_table1_ag_news"
    description: ClassVar[str] = (
        "FedDPG (Shakeri et al.): a two-layer MLP G (`Linear(D,h)`-ReLU-`Linear(h,|P|·D)`, eq. 2) maps each "
        "text's mean word embedding ē to |P| prompt vectors placed in front of it (eq. 3, `[CLS] G(ē) x [SEP]`); "
        "the PLM and its head stay frozen, only G trains (AdamW through the frozen encoder, eq. 4) and travels; "
        "the server takes the **uniform** mean of G (eq. 1). `feddpg.input`: `prompt-text` ([P;x]), `text` (x "
        "only, G bypassed), `prompt` (P only) of §4.2.2. **FedDPGu** (§3.3): in round `feddpg.unlearn-round` "
        "only client `feddpg.unlearn-client` is asked; it relabels `feddpg.forget-fraction` of its examples to a "
        "random *other* class, trains G on CE(retained) + λ·CE(relabelled) (eq. 5; `feddpg.unlearn-loss` says "
        "whether λ weighs the set or each example) and the server **replaces** G with its upload; the client "
        "never trains on those examples again. On a finished run: `python -m "
        "simulations.papers.feddpg.unlearning forget <run-dir> --client C --num-partitions N`.")
    travels: ClassVar[str] = "G each way: `4·#G + 4·128` B, `#G = D·h + h + h·|P|·D + |P|·D` weights"
    smoke: ClassVar[Mapping[str, object]] = {"hidden": 5, "prompts": 2, "local-steps": 1, "batch-size": 4}
    smoke_modes: ClassVar[Mapping[str, object]] = {"unlearn-round": 1, "unlearn-client": 0}  # FedDPGu in round 1
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = UNLEARN_METRICS
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()  # the evaluate telemetry only

    #: h of G: hidden units of the two-layer MLP (paper: 5 / 10 / 20); h=20, |P|=10 give Table 1's parameter count with
    #: RoBERTa-base
    hidden: int = 20  # h: hidden units of the two-layer MLP G (paper: 5 / 10 / 20)
    #: |P| of G: prompt vectors G makes per text (paper: 1 / 5 / 10; |P|=10 with h=20 gives Table 1's parameter count,
    #: see `hidden`)
    prompts: int = 10  # |P|: prompt vectors G makes per text (paper: 1 / 5 / 10)
    #: input configuration of §4.2.2: `prompt-text` = [P; x], `text` = x only (G bypassed), `prompt` = P only
    input: str = "prompt-text"  # §4.2.2: prompt-text = [P; x] | text = x only (G bypassed) | prompt = P only
    #: G's input ē: `tokens` = the mean word embedding over the text's n tokens ([CLS] and [SEP] included), eq. (2)'s
    #: (1/n) Σ e_i; `padded` = the mean over 128 positions, the text's tokens and 128 − n copies of the [PAD]
    #: embedding, as the authors' code (every text padded to `max_length=128`; [papers/feddpg.md](papers/feddpg.md))
    mean_embedding: str = "tokens"  # G's input: mean over the text's tokens (eq. 2) | padded = over 128 positions, [PAD] included (authors' code)
    local_steps: int = 4  # AdamW steps on G per round
    lr: float = 1e-3  # AdamW learning rate of G (the authors' code: 1e-3)
    batch_size: int = 16  # examples per optimizer step
    #: FedDPGu scenario: the round in which `unlearn-client` unlearns and G is replaced (0 = none)
    unlearn_round: int = 0  # FedDPGu: round in which unlearn-client unlearns and G is replaced (0 = never)
    #: FedDPGu scenario: partition id of the client that asks to forget
    unlearn_client: int = 0  # FedDPGu: partition id of the client that asks to forget
    #: FedDPGu scenario: share of that client's training examples forgotten (§4.2.5: 20%)
    forget_fraction: float = 0.2  # FedDPGu: share of that client's training examples to forget (§4.2.5: 20%)
    #: FedDPGu: λ of eq. (5) on the relabelled examples
    unlearn_lambda: float = 1.0  # FedDPGu: lambda of eq. (5) on the relabelled examples
    #: how λ weighs eq. (5): `sets` = mean CE(retained) + λ·mean CE(relabelled) (λ=1: half the loss is the forget
    #: set's); `examples` = λ per relabelled example, (Σ CE(retained) + λ·Σ CE(relabelled)) / (n_r + λ·n_u) (λ=1 is the
    #: authors' code: one CE over the client's data, forgotten labels replaced in place)
    unlearn_loss: str = "sets"  # FedDPGu: sets = mean CE(retained) + lambda*mean CE(relabelled) | examples = lambda per example (1 = authors' code)
    #: FedDPGu: full-batch steps of the unlearning update (optimizer: `unlearn-optimizer`)
    unlearn_steps: int = 16  # FedDPGu: full-batch steps of the unlearning update (optimizer: unlearn-optimizer)
    #: FedDPGu: learning rate of those steps (0 = `feddpg.lr`)
    unlearn_lr: float = 0.0  # FedDPGu: their learning rate (0 = feddpg.lr)
    #: FedDPGu: stop before a step once the forget set's accuracy (true labels) has fallen by this many points (0 = run
    #: every step; a stopping rule of ours, the paper gives no length)
    unlearn_target: float = 0.0  # FedDPGu: stop once the forget set's accuracy fell by this many points (0 = run every step)
    #: optimizer of the unlearning steps (the paper names none): `adamw` (the authors' code; a fresh AdamW moves every
    #: weight by about the learning rate per step) or `sgd` (plain gradient steps, G moves in proportion to eq. (5)'s
    #: gradient; its gradients are large, use rates of 0.03-0.3)
    unlearn_optimizer: str = "adamw"  # FedDPGu: adamw (the authors' code) | sgd (plain gradient steps of eq. (5))

    def effective_privacy(self) -> tuple[frozenset[str], str]:
        """None in a run that unlearns: §3.3.1 replaces G by one client's unlearned G, which DP's
        clipping and noise would no longer be."""
        if self.unlearn_round:
            return frozenset(), (f"feddpg's unlearning round ({self.key('unlearn_round')}={self.unlearn_round}) "
                                 "replaces G by one client's upload (§3.3.1)")
        return self.privacy, self.privacy_reason

    def __post_init__(self) -> None:
        check_range(self.key("hidden"), self.hidden, 1)
        check_range(self.key("prompts"), self.prompts, 1)
        check_choice(self.key("input"), self.input, INPUTS)
        check_choice(self.key("mean_embedding"), self.mean_embedding, MEAN_EMBEDDINGS)
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
        check_choice(self.key("unlearn_optimizer"), self.unlearn_optimizer, UNLEARN_OPTIMIZER_NAMES)

    def check_run(self, run: RunConfig) -> None:
        """An ``unlearn-round`` after ``num-server-rounds`` is refused: the run would finish
        without ever unlearning, and say nothing."""
        if self.unlearn_round > run.num_server_rounds:
            raise ConfigError(f"{self.key('unlearn_round')}={self.unlearn_round} is after the last round "
                              f"(num-server-rounds={run.num_server_rounds}): the run would never unlearn; raise "
                              f"num-server-rounds or lower {self.key('unlearn_round')}")
