"""Issue 37 item 5: a run prints no Flower noise that fedtext can avoid (docs/flower.md)."""

from __future__ import annotations

import logging

from flwr.common.logger import FLOWER_LOGGER

from fedtext.server_app import QuietFlower, quiet_flower
from fedtext.strategy import weighted_accuracy


def _record(msg: str, *args) -> logging.LogRecord:
    return logging.LogRecord("flwr", logging.INFO, __file__, 1, msg, args, None)


def test_quiet_flower_drops_only_the_lines_fedtext_repeats_or_causes_on_purpose():
    f = QuietFlower()
    assert not f.filter(_record("fit progress: (%s, %s, %s, %s)", 1, 0.5, {"accuracy": 0.7}, 3.0))
    assert not f.filter(_record("DEPRECATED FEATURE: %s", "The `run_simulation` function is deprecated and will go"))
    assert f.filter(_record("round 1: dropped client 0: %s", "bad"))
    assert f.filter(_record("DEPRECATED FEATURE: %s", "something else"))  # other notices stay


def test_quiet_flower_is_installed_once_on_flowers_logger():
    quiet_flower()
    quiet_flower()
    assert sum(isinstance(f, QuietFlower) for f in FLOWER_LOGGER.filters) == 1


def test_evaluate_metrics_are_aggregated_so_flower_does_not_warn(caplog):
    assert weighted_accuracy([(2, {"accuracy": 1.0}), (6, {"accuracy": 0.5})]) == {"accuracy": 0.625}
    assert weighted_accuracy([(0, {"accuracy": 1.0})]) == {}
    from types import SimpleNamespace

    from flwr.common import Code, EvaluateRes, Status

    from fedtext.registry import make_config
    from fedtext.tasks import TASKS
    from strategies.fedprompt import FedPrompt

    strat = FedPrompt(make_config("fedprompt", prompt_length=2, max_length=64), TASKS["demo"])
    strat.rounds.begin(1)
    res = [(SimpleNamespace(cid=str(k)), EvaluateRes(Status(Code.OK, ""), 0.5, 8, {"partition_id": k, "accuracy": a}))
           for k, a in ((0, 0.25), (1, 0.75))]
    with caplog.at_level(logging.WARNING):
        _, metrics = strat.aggregate_evaluate(1, res, [])
    assert metrics == {"accuracy": 0.5}
    assert "No evaluate_metrics_aggregation_fn" not in caplog.text
