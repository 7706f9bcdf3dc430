"""Issue 37 item 5, issue 47 item 4: a run prints fedtext's lines and no Flower or Ray noise
that fedtext can avoid; run-config ``verbose=true`` brings Flower's lines back (docs/flower.md,
"Output"; fedtext.common.quiet)."""

from __future__ import annotations

import logging
import warnings

import pytest
from flwr.common.logger import FLOWER_LOGGER

from fedtext.common.quiet import FLOWER_STARTUP, RAY_TIP, QuietFlower, quiet_flower, quiet_ray_tip, strip_flower_prefix
from fedtext.server.strategy import weighted_accuracy


def _record(msg: str, *args, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("flwr", level, __file__, 1, msg, args, None)


def test_quiet_flower_drops_flowers_info_and_routine_warnings_keeps_other_warnings_and_errors():
    f = QuietFlower()
    # Flower's INFO lines of a round and of its summary: fedtext's round line says the same
    for info in ("[ROUND 1]", "configure_fit: strategy sampled 2 clients (out of 2)", "[SUMMARY]",
                 "\tHistory (metrics, distributed, evaluate):", "fit progress: (1, 0.5, {'accuracy': 0.7}, 3.0)", ""):
        assert not f.filter(_record("%s", info)), info
    # the routine warnings, each as Flower logs it
    assert not f.filter(_record("Manually terminating %s", "ClientAppActor", level=logging.WARNING))
    assert not f.filter(_record("Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.",
                                level=logging.WARNING))
    assert not f.filter(_record("DEPRECATED FEATURE: %s", "The `run_simulation` function is deprecated and will go",
                                level=logging.WARNING))
    # every other warning stays, and an error stays even when it quotes a routine warning
    assert f.filter(_record("DEPRECATED FEATURE: %s", "something else", level=logging.WARNING))
    assert f.filter(_record("round 1: dropped client 0: %s", "bad", level=logging.WARNING))
    assert f.filter(_record("Manually terminating %s", "ClientAppActor", level=logging.ERROR))


def test_quiet_flower_is_installed_once_and_verbose_removes_it():
    try:
        quiet_flower()
        quiet_flower()
        assert sum(isinstance(f, QuietFlower) for f in FLOWER_LOGGER.filters) == 1
        quiet_flower(verbose=True)
        assert not [f for f in FLOWER_LOGGER.filters if isinstance(f, QuietFlower)]
    finally:
        quiet_flower()  # the default, as a run leaves it


def test_fedtexts_own_lines_pass_with_flower_quiet():
    """fedtext logs to its own logger (routed through Flower's handlers): the quiet filter
    on Flower's logger never sees, so never drops, a fedtext line. One handler on both
    loggers stands for Flower's console handler that both share."""
    seen: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: seen.append(record.getMessage())
    fedtext_log = logging.getLogger("fedtext")
    level = fedtext_log.level
    quiet_flower()
    fedtext_log.addHandler(handler)
    FLOWER_LOGGER.addHandler(handler)
    try:
        fedtext_log.setLevel(logging.INFO)
        fedtext_log.info("fedtext round 1/3 | acc 0.675")
        FLOWER_LOGGER.info("[ROUND 1]")
        FLOWER_LOGGER.warning("Manually terminating %s", "ClientAppActor")
        FLOWER_LOGGER.warning("round 1: dropped client 0")
    finally:
        fedtext_log.removeHandler(handler)
        FLOWER_LOGGER.removeHandler(handler)
        fedtext_log.setLevel(level)
    assert seen == ["fedtext round 1/3 | acc 0.675", "round 1: dropped client 0"]


def test_verbose_is_a_run_config_key_off_by_default_and_resumable():
    from fedtext.server.checkpoint import RESUMABLE_CHANGES
    from fedtext.common.config import ConfigError, RunConfig
    from fedtext.common.registry import METHODS

    assert RunConfig().verbose is False
    assert RunConfig.from_run_config({"verbose": True}, METHODS).verbose is True
    assert RunConfig.from_run_config({"verbose": "false"}, METHODS).verbose is False
    with pytest.raises(ConfigError):
        RunConfig.from_run_config({"verbose": 2}, METHODS)
    assert "verbose" in RESUMABLE_CHANGES  # what a run prints does not change its numbers


def test_rays_accelerator_tip_is_hidden_and_other_future_warnings_are_not():
    message = ("Tip: In future versions of Ray, Ray will no longer override accelerator visible devices env var "
               "if num_gpus=0 or num_gpus=None (default). To enable this behavior and turn off this error message, "
               "set RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_ray_tip()
        warnings.warn(message, FutureWarning)
        warnings.warn("Tip: something else", FutureWarning)
        warnings.warn(message, UserWarning)  # only Ray's FutureWarning of that text
    assert [(w.category, str(w.message)[:20]) for w in seen] == [(FutureWarning, "Tip: something else"),
                                                                  (UserWarning, message[:20])]
    assert message.startswith(RAY_TIP)


# Lines of a default `flwr run . --stream` (Flower 1.42, 2026-11-26), colours as printed
STARTUP = """
Flower configuration not found. Created default configuration at /tmp/h/home/config.toml

Starting local SuperLink on 127.0.0.1:39291...
Using SuperLink: local (127.0.0.1:39291)
Successfully started run 16355777653413222105
\x1b[92mINFO \x1b[0m:      Starting logstream for run_id `16355777653413222105`
\x1b[92mINFO \x1b[0m:      Starting Flower Simulation
\x1b[93mWARNING \x1b[0m:   Since flwr 1.32, default simulated SuperNodes changed from 10 to 2.
\x1b[92mINFO \x1b[0m:      Federation `@none/default` (2 simulated SuperNodes)
\x1b[92mINFO \x1b[0m:      To change federation size, use the following command:
\x1b[92mINFO \x1b[0m:      \tflwr federation simulation-config @none/default <superlink> --num-supernodes <N>
Successfully installed fedtext to /tmp/h/home/apps/fedtext.fedtext.0.1.0.7cf3fcc0.
""".encode().decode("unicode_escape")


def test_flower_startup_patterns_match_each_startup_line_and_no_other_line():
    import re

    lines = [strip_flower_prefix(x) for x in STARTUP.splitlines() if x.strip()]
    assert len(lines) == 11
    for line in lines:
        assert sum(bool(re.fullmatch(p, line)) for p in FLOWER_STARTUP) == 1, line
    others = ["fedtext round 1/3 | acc 0.675 loss 0.683 | clients mean 0.688 | up 1.0 KB down 1.0 KB | 70.0 s",
              "[SUMMARY]", "Manually terminating ClientAppActor", "configure_fit: strategy sampled 2 clients (out of 2)",
              "/x/ray/_private/worker.py:2051: FutureWarning: Tip: In future versions of Ray"]
    assert not [o for o in others if any(re.fullmatch(p, o) for p in FLOWER_STARTUP)]
    assert strip_flower_prefix("\x1b[36m(ClientAppActor pid=16347)\x1b[0m \x1b[92mINFO \x1b[0m:      fedtext: client 0: x"
                               ) == "fedtext: client 0: x"


def test_evaluate_metrics_are_aggregated_so_flower_does_not_warn(caplog):
    assert weighted_accuracy([(2, {"accuracy": 1.0}), (6, {"accuracy": 0.5})]) == {"accuracy": 0.625}
    assert weighted_accuracy([(0, {"accuracy": 1.0})]) == {}
    from types import SimpleNamespace

    from flwr.common import Code, EvaluateRes, Status

    from fedtext.common.registry import make_config
    from fedtext.common.tasks import TASKS
    from strategies.fedprompt import FedPrompt

    strat = FedPrompt(make_config("fedprompt", prompt_length=2, max_length=64), TASKS["demo"])
    strat.rounds.begin(1)
    res = [(SimpleNamespace(cid=str(k)), EvaluateRes(Status(Code.OK, ""), 0.5, 8, {"partition_id": k, "accuracy": a}))
           for k, a in ((0, 0.25), (1, 0.75))]
    with caplog.at_level(logging.WARNING):
        _, metrics = strat.aggregate_evaluate(1, res, [])
    assert metrics == {"accuracy": 0.5}
    assert "No evaluate_metrics_aggregation_fn" not in caplog.text


def test_round_line_names_the_plain_client_mean_that_differs_from_flowers_weighted_one():
    """Two clients, 2 and 6 test examples, accuracies 1.0 and 0.5: fedtext's round line says
    ``clients mean 0.750`` (each client once: (1.0 + 0.5) / 2); Flower's history keeps
    (2·1.0 + 6·0.5) / 8 = 0.625 (weighted_accuracy): the two numbers the issue saw, named."""
    from types import SimpleNamespace

    from flwr.common import Code, EvaluateRes, Status

    from fedtext.records import progress_line
    from fedtext.common.registry import make_config
    from fedtext.common.tasks import TASKS
    from strategies.fedprompt import FedPrompt

    strat = FedPrompt(make_config("fedprompt", prompt_length=2, max_length=64), TASKS["demo"])
    strat.rounds.begin(1)
    res = [(SimpleNamespace(cid=str(k)), EvaluateRes(Status(Code.OK, ""), 0.5, n, {"partition_id": k, "accuracy": a}))
           for k, n, a in ((0, 2, 1.0), (1, 6, 0.5))]
    _, metrics = strat.aggregate_evaluate(1, res, [])
    assert metrics == {"accuracy": 0.625}
    rec = strat.rounds.record
    assert rec.client_accuracy_mean == 0.75
    line = progress_line({"round": 1, "global_accuracy": 0.7, "client_accuracy_mean": rec.client_accuracy_mean,
                          "bytes_up": 0, "bytes_down": 0}, 3)
    assert "| clients mean 0.750 |" in line and "0.625" not in line
