"""Issue 58 item 2: every telemetry field a client sends has a declared finite range.

A probe's client sent ``train_loss=-1e30``, ``fit_time_s=1e30`` and ``queries=10^15``: all
three were accepted, and the round recorded ``model_queries`` 1e15 and ``sim_time_s`` 1e30 in
a run that ended ``finished``. Each field of ``FIT_METRICS``/``EVAL_METRICS`` (and the
evaluate reply's loss) now has a range derived in :mod:`fedtext.common.metrics`; here each is
checked at its boundary (kept) and one float step or one count past it (dropped), the
probe's three values are dropped with their reason while the honest upload is aggregated
exactly and its telemetry alone recorded, and the intervals' ends must run forward.
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, EvaluateRes, FitRes, Status

from fedtext.common import comm
from fedtext.common.metrics import (MAX_EPOCH_S, MAX_LOSS, MAX_MEMORY_MB, MAX_QUERIES, MAX_QUERIES_PER_S, MAX_SECONDS,
                             IntervalSpec)
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from fedtext.server.validation import EVAL_METRICS, FIT_METRICS, check_metrics
from strategies.fedprompt import FedPrompt


def past(x: float) -> float:
    """The next float above ``x``: one step past a closed upper bound."""
    return float(np.nextafter(x, np.inf))


BELOW_ZERO = float(np.nextafter(0.0, -np.inf))  # -5e-324: one step past a lower bound of 0
T0 = 1_800_000_000.0  # an epoch second in 2027


def test_the_bounds_are_the_stated_arithmetic():
    assert MAX_SECONDS == 24 * 60 * 60 == 86_400
    assert MAX_QUERIES == MAX_SECONDS * MAX_QUERIES_PER_S == 86_400 * 10**6 == 86_400_000_000
    assert MAX_MEMORY_MB == 4 * 1024 * 1024 == 4_194_304  # 4 TiB in MB
    assert MAX_EPOCH_S == datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC).timestamp()
    assert MAX_LOSS == 1e4


# (field, lowest kept, highest kept, one step below, one step above) for every ranged telemetry field
RANGES = [
    ("queries", 0, 86_400_000_000, -1, 86_400_000_001),
    ("fit_time_s", 0.0, MAX_SECONDS, BELOW_ZERO, past(MAX_SECONDS)),
    ("eval_time_s", 0.0, MAX_SECONDS, BELOW_ZERO, past(MAX_SECONDS)),
    ("load_s", 0.0, MAX_SECONDS, BELOW_ZERO, past(MAX_SECONDS)),
    ("train_loss", 0.0, MAX_LOSS, BELOW_ZERO, past(MAX_LOSS)),
    ("peak_rss_mb", 0.0, MAX_MEMORY_MB, BELOW_ZERO, past(MAX_MEMORY_MB)),
    ("peak_gpu_mb", 0.0, MAX_MEMORY_MB, BELOW_ZERO, past(MAX_MEMORY_MB)),
    *((k, 0.0, MAX_EPOCH_S, BELOW_ZERO, past(MAX_EPOCH_S))
      for k in ("busy_start", "busy_end", "startup_start", "startup_end")),
]


@pytest.mark.parametrize("field, low, high, under, over", RANGES)
def test_each_telemetry_field_is_kept_at_its_bounds_and_dropped_one_step_past(field, low, high, under, over):
    specs = FIT_METRICS if field != "eval_time_s" else EVAL_METRICS
    assert check_metrics({field: low}, specs) is None and check_metrics({field: high}, specs) is None
    domain = next(s for s in specs if s.name == field).domain
    for bad in (under, over):
        assert check_metrics({field: bad}, specs) == f"metric {field}={bad!r} is not {domain}"


def test_the_fit_and_evaluate_telemetry_are_all_ranged():
    """No telemetry number is left as "any finite number" (accuracy and post_accuracy are
    checked to lie in [0, 1] by check_eval_reply, partition_id is a name)."""
    unranged = {s.name for s in FIT_METRICS + EVAL_METRICS if np.isinf(s.low) or np.isinf(s.high)}
    assert unranged == {"partition_id", "accuracy", "post_accuracy"}
    assert {f for f, *_ in RANGES} == {s.name for s in FIT_METRICS + EVAL_METRICS} - unranged


def test_an_interval_may_not_run_backwards_and_a_busy_one_lasts_at_most_a_day():
    assert check_metrics({"busy_start": T0, "busy_end": T0}, FIT_METRICS) is None
    assert check_metrics({"busy_start": T0, "busy_end": T0 + MAX_SECONDS}, FIT_METRICS) is None
    assert (check_metrics({"busy_start": T0, "busy_end": T0 - 0.5}, FIT_METRICS)
            == f"metric busy_end={T0 - 0.5!r} is before busy_start={T0!r}")
    end = past(T0 + MAX_SECONDS)
    assert (check_metrics({"busy_start": T0, "busy_end": end}, EVAL_METRICS)
            == f"metrics busy_start..busy_end span {end - T0:g} s, more than 86400")
    # a process's start-up has no ceiling (a SuperNode may run for days before its first message)
    assert check_metrics({"startup_start": T0, "startup_end": T0 + 10 * MAX_SECONDS}, FIT_METRICS) is None
    assert (check_metrics({"startup_start": T0, "startup_end": T0 - 1}, FIT_METRICS)
            == f"metric startup_end={T0 - 1!r} is before startup_start={T0!r}")
    assert check_metrics({"busy_start": T0}, FIT_METRICS) is None  # one end: nothing to compare (the record skips it)
    assert IntervalSpec("a", "b").check({"a": 2.0, "b": 1.0}) == "metric b=1.0 is before a=2.0"


# ------------------------------------------------------------- the probe, through a round
def fit_res(arrays, n, pid, **metrics):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}))


@pytest.fixture()
def fedprompt(backbone, tmp_path):
    cfg = make_config("fedprompt", prompt_length=2, max_length=64, output_dir=str(tmp_path))
    strat = FedPrompt(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    return strat


@pytest.mark.parametrize("bad, reason", [
    ({"train_loss": -1e30}, "metric train_loss=-1e+30 is not a number in [0, 10000]"),
    ({"fit_time_s": 1e30}, "metric fit_time_s=1e+30 is not a number in [0, 86400]"),
    ({"queries": 10**15}, "metric queries=1000000000000000 is not a whole number in [0, 8.64e+10]"),
])
def test_the_probes_telemetry_is_dropped_and_never_recorded(fedprompt, bad, reason):
    base = fedprompt.global_arrays[0]
    honest = base + 0.1
    results = [fit_res([honest], 2, 0, queries=5, fit_time_s=1.0, train_loss=0.25),
               fit_res([base - 0.3], 2, 1, **{"queries": 7, "fit_time_s": 2.0, **bad})]
    params, _ = fedprompt.aggregate_fit(1, results, [])
    np.testing.assert_allclose(comm.decode(params)[0], honest, rtol=1e-6)  # the honest upload alone
    assert fedprompt.record.dropped == [{"client": "1", "reason": reason}]
    out = fedprompt.record.to_json(run_start=0.0)
    assert out["model_queries"] == 5 and out["client_fit_s_max"] == 1.0 and out["train_loss"] == 0.25
    assert out["sim_time_s"] < 2.0  # the honest client's 1 s plus its bytes at 1 MB/s


def test_an_evaluate_reply_out_of_range_is_dropped_with_its_reason(fedprompt):
    def eval_res(pid, loss=0.5, **metrics):
        return (SimpleNamespace(cid=str(pid)),
                EvaluateRes(Status(Code.OK, ""), loss, 8, {"partition_id": pid, "accuracy": 0.5, **metrics}))

    fedprompt.aggregate_evaluate(1, [eval_res(0, loss=MAX_LOSS, queries=3, eval_time_s=MAX_SECONDS),
                                     eval_res(1, loss=-1e30), eval_res(2, loss=past(MAX_LOSS)),
                                     eval_res(3, eval_time_s=1e30), eval_res(4, queries=10**15)], [])
    assert fedprompt.record.client_accuracy == {"0": 0.5}
    got = {d["client"]: d["reason"] for d in fedprompt.record.dropped}
    assert got == {"1": "evaluate reply: loss=-1e+30 is not a number in [0, 10000]",
                   "2": f"evaluate reply: loss={past(MAX_LOSS)!r} is not a number in [0, 10000]",
                   "3": "evaluate reply: metric eval_time_s=1e+30 is not a number in [0, 86400]",
                   "4": "evaluate reply: metric queries=1000000000000000 is not a whole number in [0, 8.64e+10]"}
    assert fedprompt.record.eval_queries == 3


def test_an_evaluate_loss_of_exactly_0_is_kept_and_one_step_below_dropped(fedprompt):
    """The loss's range is closed at 0: a mean cross-entropy of 0.0 (every test text at probability
    1 in float) is a valid reply; the next float below 0 is not."""
    below = float(np.nextafter(0.0, -1.0))
    replies = [(SimpleNamespace(cid=str(pid)),
                EvaluateRes(Status(Code.OK, ""), loss, 8, {"partition_id": pid, "accuracy": 1.0}))
               for pid, loss in ((0, 0.0), (1, below))]
    fedprompt.aggregate_evaluate(1, replies, [])
    assert fedprompt.record.client_accuracy == {"0": 1.0}
    assert [d["client"] for d in fedprompt.record.dropped] == ["1"]
