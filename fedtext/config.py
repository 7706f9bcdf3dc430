"""Run configuration: read once from Flower's run-config, validated, frozen.

Every key lives in ``[tool.flwr.app.config]`` of ``pyproject.toml`` in kebab-case
with a default and a one-line comment; this module maps it to a frozen dataclass
with snake_case fields and rejects bad values with one clear line each, before any
training starts (``RunConfig.from_run_config`` is called first thing in the
ServerApp and the ClientApp).

Paths (``dataset`` when it is a directory, ``output-dir``) are resolved against
the current working directory of the process that reads them. Under ``flwr run``
that is the directory where the local SuperLink was first started (normally the
project directory); the resolved absolute paths are logged at start.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

PARTITIONS = ("iid", "dirichlet", "domain")
HEADS = ("similarity", "tied", "mlm")
BBT_FED_AVERAGES = ("z", "z-sigma-C")
FEDBPT_DOWNLOADS = ("full", "compact")
COMPRESSIONS = ("lasso", "full", "pca", "quant")
DEFAULT_MODEL = "all-MiniLM-L6-v2"


class ConfigError(ValueError):
    """A run-config value is invalid. The message is one line a user can act on."""


@dataclass(frozen=True)
class RunConfig:
    """All run-config keys of fedtext (see ``pyproject.toml`` for the comments).

    Build it with :meth:`from_run_config`; constructing it directly also validates.
    """

    method: str = "bbt-fed"
    num_server_rounds: int = 3
    clients_per_round: int = 0
    dataset: str = "demo"
    task: str = "auto"
    partition: str = "iid"
    alpha: float = 0.5
    shots_per_class: int = 8
    client_test_size: int = 32
    eval_size: int = 200
    model: str = DEFAULT_MODEL
    head: str = "similarity"
    prompt_length: int = 8
    max_length: int = 128
    seed: int = 0
    local_steps: int = 4
    eval_every: int = 1
    output_dir: str = "runs"
    run_name: str = ""
    # fedprompt
    lr: float = 0.01
    batch_size: int = 16
    # bbt-fed
    intrinsic_dim: int = 100
    popsize: int = 10
    sigma0: float = 1.0
    bound: float = 0.0
    bbt_fed_average: str = "z"
    # fedbpt
    keep_rate: float = 0.9
    fedbpt_download: str = "full"
    # feddls
    dls_candidates: int = 5
    dls_steps: int = 40
    compression: str = "lasso"
    phi: int = 5
    lasso_alpha: float = 0.2
    lasso_screen: int = 100
    pca_components: int = 10
    quant_bits: int = 3
    # personalization and participant / non-participant evaluation (every method)
    post_tune_steps: int = 0
    post_tune_sigma: float = 0.1
    holdout: str = ""

    # ------------------------------------------------------------------ parsing
    @classmethod
    def from_run_config(
        cls,
        run_config: Mapping[str, Any],
        known_methods: Iterable[str] | None = None,
    ) -> "RunConfig":
        """Parse Flower's run-config (kebab-case keys) and validate.

        Parameters
        ----------
        run_config
            ``context.run_config``. Unknown keys are rejected so that a typo such as
            ``num-rounds=5`` is not silently ignored.
        known_methods
            Valid values of ``method`` (the keys of ``strategies.STRATEGIES``); the
            core package does not import the method registries itself.
        """
        by_key = {f.name.replace("_", "-"): f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in run_config.items():
            if key not in by_key:
                raise ConfigError(
                    f"unknown run-config key '{key}'; valid keys: {', '.join(sorted(by_key))}"
                )
            f = by_key[key]
            kwargs[f.name] = _coerce(key, raw, f.type)
        cfg = cls(**kwargs)
        if known_methods is not None:
            cfg.check_method(known_methods)
        return cfg

    def check_method(self, known_methods: Iterable[str]) -> None:
        """Raise ``ConfigError`` unless ``method`` is one of ``known_methods``."""
        known = sorted(known_methods)
        if self.method not in known:
            raise ConfigError(f"unknown method '{self.method}'; choose one of: {', '.join(known)}")

    def to_run_config(self) -> dict[str, Any]:
        """The kebab-case mapping Flower uses (inverse of :meth:`from_run_config`)."""
        return {k.replace("_", "-"): v for k, v in dataclasses.asdict(self).items()}

    def replace(self, **changes: Any) -> "RunConfig":
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    # --------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        positive = {
            "num-server-rounds": self.num_server_rounds,
            "prompt-length": self.prompt_length,
            "max-length": self.max_length,
            "local-steps": self.local_steps,
            "eval-every": self.eval_every,
            "batch-size": self.batch_size,
            "intrinsic-dim": self.intrinsic_dim,
            "dls-candidates": self.dls_candidates,
            "dls-steps": self.dls_steps,
            "phi": self.phi,
            "lasso-screen": self.lasso_screen,
            "pca-components": self.pca_components,
        }
        for key, value in positive.items():
            if value < 1:
                raise ConfigError(f"{key} must be >= 1, got {value}")
        non_negative = {
            "clients-per-round": self.clients_per_round,
            "shots-per-class": self.shots_per_class,
            "client-test-size": self.client_test_size,
            "eval-size": self.eval_size,
            "bound": self.bound,
            "lasso-alpha": self.lasso_alpha,
            "post-tune-steps": self.post_tune_steps,
        }
        for key, value in non_negative.items():
            if value < 0:
                raise ConfigError(f"{key} must be >= 0, got {value}")
        if not self.alpha > 0:
            raise ConfigError(f"alpha must be > 0, got {self.alpha}")
        if not self.lr > 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        if not self.sigma0 > 0:
            raise ConfigError(f"sigma0 must be > 0, got {self.sigma0}")
        if self.popsize < 2:
            raise ConfigError(f"popsize must be >= 2 (CMA-ES needs a population), got {self.popsize}")
        if not self.post_tune_sigma > 0:
            raise ConfigError(f"post-tune-sigma must be > 0, got {self.post_tune_sigma}")
        if not 2 <= self.quant_bits <= 8:
            raise ConfigError(f"quant-bits must be in 2..8, got {self.quant_bits}")
        if self.lasso_screen < self.phi:
            raise ConfigError(f"lasso-screen ({self.lasso_screen}) must be >= phi ({self.phi}): Alg. 2 keeps L = [screen, phi]")
        if not 0 < self.keep_rate <= 1:
            raise ConfigError(f"keep-rate must be in (0, 1], got {self.keep_rate}")
        choices = {
            "partition": (self.partition, PARTITIONS),
            "head": (self.head, HEADS),
            "bbt-fed-average": (self.bbt_fed_average, BBT_FED_AVERAGES),
            "fedbpt-download": (self.fedbpt_download, FEDBPT_DOWNLOADS),
            "compression": (self.compression, COMPRESSIONS),
        }
        for key, (value, allowed) in choices.items():
            if value not in allowed:
                raise ConfigError(f"unknown {key} '{value}'; choose one of: {', '.join(allowed)}")
        # Imported here: tasks is a leaf module, config must stay importable alone.
        from fedtext.tasks import TASKS

        if self.task != "auto" and self.task not in TASKS:
            raise ConfigError(
                f"unknown task '{self.task}'; choose one of: auto, {', '.join(sorted(TASKS))}"
            )
        if looks_like_path(self.dataset) and not Path(self.dataset).expanduser().is_dir():
            raise ConfigError(
                f"dataset path '{self.dataset}' does not exist (resolved to "
                f"{Path(self.dataset).expanduser().resolve()}); working directory is {os.getcwd()}"
            )
        if not self.output_dir:
            raise ConfigError("output-dir must not be empty")

    def check_num_clients(self, num_clients: int) -> None:
        """Raise ``ConfigError`` if more clients per round are asked than exist."""
        if self.clients_per_round > num_clients:
            raise ConfigError(
                f"clients-per-round={self.clients_per_round} exceeds the {num_clients} "
                "connected clients (set num-supernodes or lower clients-per-round)"
            )

    @property
    def holdout_set(self) -> frozenset[str]:
        """Non-participant clients named by ``holdout`` (partition ids or domain names)."""
        return frozenset(x.strip() for x in self.holdout.split(",") if x.strip())

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
            return float(raw)
        if type_name == "str":
            return str(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be {type_name}, got {raw!r}") from None
    raise ConfigError(f"{key}: unsupported type {type_name}")  # pragma: no cover
