"""ServerApp: run-config -> RunConfig (validated once) -> METHODS[method].strategy.

Everything that can be wrong with a run (method, numbers, data path, model, task,
partition vs. number of clients) is checked here, before the first round, and
reported as one line (``fedtext: configuration error: ...``).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from typing import Any

from flwr.common import Context
from flwr.server import Server, ServerApp, ServerAppComponents, ServerConfig, SimpleClientManager

from fedtext.config import ConfigError, RunConfig
from fedtext.data import load_splits
from fedtext.model import PromptModel
from fedtext.records import RunRecorder
from fedtext.registry import METHODS
from fedtext.strategy import Evaluator
from fedtext.tasks import resolve_task

log = logging.getLogger("fedtext")


def setup_logging() -> None:
    """Route fedtext's logger through Flower's, so ``flwr run --stream`` shows it."""
    from flwr.common.logger import FLOWER_LOGGER

    fedtext_log = logging.getLogger("fedtext")
    if not fedtext_log.handlers:
        for handler in FLOWER_LOGGER.handlers:
            fedtext_log.addHandler(handler)
        fedtext_log.setLevel(logging.INFO)
        fedtext_log.propagate = False


class RecordingServer(Server):
    """Flower's Server, marking the run record ``failed`` if training raises."""

    def __init__(self, *, recorder: RunRecorder, **kwargs) -> None:
        super().__init__(**kwargs)
        self.recorder = recorder

    def fit(self, num_rounds: int, timeout: float | None):
        try:
            return super().fit(num_rounds, timeout)
        except ConfigError as exc:
            log.error("fedtext: configuration error: %s", exc)
            self.recorder.finish("failed", error=str(exc))
            raise
        except BaseException as exc:
            self.recorder.finish("failed", error="".join(traceback.format_exception_only(exc)).strip())
            raise


def build(cfg: RunConfig) -> tuple[RecordingServer, ServerConfig]:
    """Load data and model, make the strategy and the server (raises ``ConfigError``)."""
    try:
        task = resolve_task(cfg.task, cfg.dataset)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    splits = load_splits(cfg.dataset)
    if splits.num_classes > task.num_classes:
        raise ConfigError(
            f"dataset has labels up to {splits.num_classes - 1} but task '{task.name}' has "
            f"{task.num_classes} classes"
        )
    if cfg.post_tune_steps and not issubclass(cfg.method_config.model_class, PromptModel):
        raise ConfigError(f"post-tune-steps tunes a prompt; method {cfg.method} has none (set post-tune-steps=0)")
    for name in sorted(cfg.holdout_set - {x for x in cfg.holdout_set if x.isdigit()}):
        if name not in splits.domains:
            raise ConfigError(
                f"holdout '{name}' is neither a partition id nor a domain of the dataset "
                f"(domains: {', '.join(splits.domains)})"
            )
        if cfg.partition != "domain":
            raise ConfigError(f"holdout by domain name ('{name}') needs partition=domain")
    evaluator = Evaluator(cfg, task)
    recorder = RunRecorder(cfg.output_dir, {**cfg.to_run_config(), "resolved-task": task.name})
    log.info(
        "fedtext: method=%s dataset=%s (%d train / %d test, server evaluates %d) task=%s model=%s head=%s",
        cfg.method, cfg.dataset_path or cfg.dataset, len(splits.train), len(splits.test),
        evaluator.num_examples, task.name, cfg.model, cfg.resolved_head,
    )
    strategy = METHODS[cfg.method].strategy(cfg, task, evaluator, recorder)
    server = RecordingServer(recorder=recorder, client_manager=SimpleClientManager(), strategy=strategy)
    return server, ServerConfig(num_rounds=cfg.num_server_rounds)


def make_server_app(overrides: Mapping[str, Any] | None = None) -> ServerApp:
    """A ServerApp whose run-config is Flower's, updated with ``overrides``.

    ``flwr run`` uses :data:`app` (no overrides); the compare runner and the tests
    call Flower's ``run_simulation`` (which passes an empty run-config) with the
    overrides they need.
    """

    def server_fn(context: Context) -> ServerAppComponents:
        setup_logging()
        try:
            cfg = RunConfig.from_run_config({**context.run_config, **(overrides or {})}, METHODS)
            server, config = build(cfg)
        except ConfigError as exc:
            log.error("fedtext: configuration error: %s", exc)
            raise
        return ServerAppComponents(server=server, config=config)

    return ServerApp(server_fn=server_fn)


app = make_server_app()
