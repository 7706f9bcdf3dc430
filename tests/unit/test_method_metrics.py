"""Issue 45 item 2: a method's own metrics are declared beside its config and checked like arrays.

Each method's config declares the metrics its client adds to a reply
(``fit_metrics``/``evaluate_metrics``, :class:`fedtext.common.metrics.MetricSpec`). The first
test runs every registered method's real client (fit, the modes only some rounds have --
FeS labelling, FedDPGu unlearning --, evaluate with post-tuning) and checks that what the
client sends beyond the shared telemetry is exactly what its config declares: a metric
added to a client without a declaration, or a declaration no client sends, fails here.
Then each poison issue 45 found (FedDLS ``dls_version="abc"``, FeS ``num_labels="x"``,
FedDPGu ``forget_accuracy_before="x"``, FeS ``pseudo_labels=1e30`` and
``pseudo_label_accuracy=1e30``) is sent beside honest uploads on mock client proxies: the
poisoned reply is dropped with its reason and the round aggregates the honest uploads
exactly, by hand.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, EvaluateIns, EvaluateRes, FitIns, FitRes, Status

from fedtext.common import comm
from fedtext.common.config import RunConfig
from fedtext.common.metrics import MetricSpec
from fedtext.methods.feddls.codecs import SENTINEL
from fedtext.learning.model import PromptModel
from fedtext.common.registry import METHODS, make_config
from fedtext.server_app import build
from fedtext.common.tasks import TASKS
from fedtext.server.validation import EVAL_METRICS, FIT_METRICS
from strategies.feddpg import FedDPG
from strategies.fes import FewShotStrategy

from ..inprocess import TINY, InProcessProxy, smoke, tiny_bert

SHARED = {"fit": {s.name for s in FIT_METRICS}, "evaluate": {s.name for s in EVAL_METRICS}}


# ------------------------------------------------------------- the declarations
def test_a_spec_says_what_is_wrong_in_one_line():
    whole = MetricSpec("dls_version", whole=True, low=0)
    assert whole.check(3) is None and whole.check(3.0) is None and whole.check(np.int64(2)) is None
    assert whole.check("abc") == "metric dls_version='abc' is not a finite number"
    assert whole.check(True) == "metric dls_version=True is not a finite number"
    assert whole.check(float("nan")) == "metric dls_version=nan is not a finite number"
    assert whole.check(2.5) == "metric dls_version=2.5 is not a whole number >= 0"
    assert whole.check(-1) == "metric dls_version=-1 is not a whole number >= 0"
    share = MetricSpec("pseudo_label_accuracy", low=0, high=1)
    assert share.check(0) is None and share.check(1) is None  # closed range
    assert share.check(1e30) == "metric pseudo_label_accuracy=1e+30 is not a number in [0, 1]"
    assert share.check(-1.0) == "metric pseudo_label_accuracy=-1.0 is not a number in [0, 1]"
    rows = MetricSpec("pseudo_labels", whole=True, low=0, within_rows=True)
    assert rows.check(240, rows=240) is None and rows.check(10**9) is None  # rows unknown: not checked
    assert rows.check(241, rows=240) == "metric pseudo_labels=241 exceeds the client's 240 training rows"
    assert MetricSpec("fit_time_s").check(float("inf")) == "metric fit_time_s=inf is not a finite number"
    with pytest.raises(ValueError, match="low 1 > high 0"):
        MetricSpec("x", low=1, high=0)


def test_a_spec_accepts_its_bounds_exactly_and_refuses_one_step_past_each():
    """Each bound at the value itself and at the next representable number past it (a
    range check off by one, ``<`` for ``<=`` or ``high + 1``, is invisible far outside)."""
    share = MetricSpec("pseudo_label_accuracy", low=0, high=1)
    assert share.check(0.0) is None and share.check(1.0) is None
    assert share.check(np.nextafter(1.0, 2.0)) == f"metric pseudo_label_accuracy={np.nextafter(1.0, 2.0)!r} " \
                                                  "is not a number in [0, 1]"
    assert share.check(np.nextafter(0.0, -1.0)) is not None
    count = MetricSpec("pseudo_labels", whole=True, low=0, high=5, within_rows=True)
    assert count.check(0) is None and count.check(5) is None
    assert count.check(6) == "metric pseudo_labels=6 is not a whole number in [0, 5]"
    assert count.check(-1) == "metric pseudo_labels=-1 is not a whole number in [0, 5]"
    assert count.check(4, rows=4) is None
    assert count.check(5, rows=4) == "metric pseudo_labels=5 exceeds the client's 4 training rows"


@pytest.mark.parametrize("method", list(METHODS))
def test_no_method_redeclares_a_shared_metric_or_one_twice(method):
    config = METHODS[method]
    for phase, specs in (("fit", config.fit_metrics), ("evaluate", config.evaluate_metrics)):
        names = [s.name for s in specs]
        assert len(names) == len(set(names)), names
        assert not set(names) & SHARED[phase], f"{method} redeclares shared {phase} metrics"


class RecordingProxy(InProcessProxy):
    """An in-process client proxy that keeps the metric names of every reply it hands back
    (before the server, which would ignore an undeclared one, sees them)."""

    sent: dict[str, set[str]]

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        res = super().fit(ins, timeout, group_id)
        self.sent["fit"] |= set(res.metrics)
        return res

    def evaluate(self, ins: EvaluateIns, timeout: float | None, group_id: int | None) -> EvaluateRes:
        res = super().evaluate(ins, timeout, group_id)
        self.sent["evaluate"] |= set(res.metrics)
        return res


# What reaches every mode a method's client has, beside its smoke keys: every prompt method
# post-tunes before its last evaluation (post_accuracy); a mode only some rounds reach is the
# method's own declaration, its config's ``smoke_modes`` (FeS's and FedFSL's clients label in
# round 2, FedDPGu's client 0 unlearns in round 1).
POST_TUNE = {"post-tune-popsize": 4, "post-tune-dim": 4}


@pytest.mark.parametrize("method", list(METHODS))
def test_every_metric_a_methods_client_sends_is_exactly_what_its_config_declares(method, tmp_path: Path):
    """The registry's methods, their real clients: what they send beyond the shared
    telemetry (``FIT_METRICS``, ``EVAL_METRICS``) equals their config's declarations."""
    config = METHODS[method]
    prompt = issubclass(config.model_class(), PromptModel)  # a network method has no prompt to post-tune
    run_config = {"method": method, **TINY, **smoke(method), **POST_TUNE, "post-tune-steps": int(prompt),
                  **config.run_config(config.smoke_modes), **tiny_bert(method), "output-dir": str(tmp_path)}
    cfg = RunConfig.from_run_config(run_config, METHODS)
    server, server_config = build(cfg)
    sent: dict[str, set[str]] = {"fit": set(), "evaluate": set()}
    for pid in range(2):
        proxy = RecordingProxy(run_config, pid, 2)
        proxy.sent = sent
        server.client_manager().register(proxy)
    server.fit(num_rounds=server_config.num_rounds, timeout=None)
    run = next(p.parent for p in tmp_path.rglob("config.json"))
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert all(r["dropped"] == [] for r in rounds), [r["dropped"] for r in rounds]
    assert sent["fit"] - SHARED["fit"] == {s.name for s in config.fit_metrics}
    assert sent["evaluate"] - SHARED["evaluate"] == {s.name for s in config.evaluate_metrics}
    assert "accuracy" in sent["evaluate"] and "partition_id" in sent["fit"]


def test_fit_metrics_the_server_does_not_declare_are_ignored_with_one_warning(fedprompt_round, caplog):
    """Undeclared: the reply is kept (a client a version ahead still takes part), the key is
    removed before any strategy or record sees it, and the warning is given once per name."""
    strat = fedprompt_round
    base = strat.global_arrays[0]
    results = [fit_res([base + 1], 2, 0, shiny=7.0), fit_res([base + 3], 2, 1, shiny="x")]
    with caplog.at_level(logging.WARNING, logger="fedtext"):
        params, _ = strat.aggregate_fit(1, results, [])
    np.testing.assert_allclose(comm.decode(params)[0], base + 2, rtol=1e-6)
    assert strat.record.dropped == [] and strat.record.num_clients == 2
    assert all("shiny" not in res.metrics for _, res in results)
    said = [r.getMessage() for r in caplog.records if "shiny" in r.getMessage()]
    assert said == ["round 1: client 0 sent metric 'shiny', which fedprompt does not declare: ignored (said once)"]


# ------------------------------------------------------------- the poisons of issue 45
def fit_res(arrays, n, pid, cid=None, **metrics):
    return (SimpleNamespace(cid=str(pid) if cid is None else cid),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}))


def reasons(strat):
    return {d["client"]: d["reason"] for d in strat.record.dropped}


@pytest.fixture()
def fedprompt_round(backbone):
    from strategies.fedprompt import FedPrompt

    strat = FedPrompt(make_config("fedprompt", prompt_length=2, max_length=64), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    return strat


def test_feddls_dls_version_abc_is_dropped_and_the_honest_prompts_averaged(backbone, feddls_server, feddls_upload):
    """Before: ``int("abc")`` in FedDLS's aggregate raised ValueError and the run ended ``failed``."""
    strat = feddls_server(prompt_length=3, max_length=64, compression="full")
    vocab, prev = strat.vocab, strat.global_arrays[0]
    nat = backbone.natural_token_ids()
    a, b = int(nat[100]), int(nat[200])
    poisoned = feddls_upload(2, [a, a, a])
    poisoned[1].metrics["dls_version"] = "abc"
    params, _ = strat.aggregate_fit(1, [feddls_upload(0, [a, SENTINEL, SENTINEL]), poisoned,
                                        feddls_upload(1, [b, b, SENTINEL])], [])
    assert reasons(strat) == {"2": "metric dls_version='abc' is not a finite number"}
    expected = np.stack([(vocab[a] + vocab[b]) / 2, (prev[1] + vocab[b]) / 2, prev[2]])  # eq. (5), uniform, 2 clients
    np.testing.assert_allclose(comm.decode(params)[0], expected.astype(np.float16).astype(np.float32))
    assert strat.synced == {"node0": 0, "node1": 0}  # the poisoner's version was never read
    assert strat.record.num_clients == 2 and strat.record.trained == ["0", "1"]


def test_feddls_a_version_above_the_servers_is_dropped(backbone, feddls_server, feddls_upload):
    """A whole ``dls_version`` >= 0 can still be impossible: the server has made p' versions
    0..version only (here 0, before its first aggregation; 1 after it)."""
    strat = feddls_server(prompt_length=3, max_length=64, compression="full")
    a = int(backbone.natural_token_ids()[100])
    ahead = feddls_upload(1, [a, a, a])
    ahead[1].metrics["dls_version"] = 10**9
    strat.aggregate_fit(1, [feddls_upload(0, [a, SENTINEL, SENTINEL]), ahead], [])
    assert reasons(strat) == {"1": "metric dls_version=1000000000 is above the server's p' version 0"}
    assert strat.synced == {"node0": 0} and strat.record.trained == ["0"]
    strat.rounds.begin(2)
    at = feddls_upload(1, [a, a, a])
    at[1].metrics["dls_version"] = 1  # the version made in round 1: honest
    strat.aggregate_fit(2, [at], [])
    assert strat.record.dropped == [] and strat.synced == {"node0": 0, "node1": 1}


def fes_strategy():
    strat = FewShotStrategy(make_config("fes", gold_labels=8, max_length=32, client_test_size=0, eval_size=20,
                                        shots_per_class=4), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(2)
    return strat


def fes_honest(strat):
    """Two honest FeS uploads (arrays global + 1 on 2 labels, global + 3 on 6) and their
    FedAvg by hand: global + (2 * 1 + 6 * 3) / 8 = global + 2.5."""
    g = strat.global_arrays
    honest = [fit_res([a + 1 for a in g], 2, 0, trained=1, num_labels=2, num_pseudo=0, pseudo_labels=0),
              fit_res([a + 3 for a in g], 6, 1, trained=1, num_labels=6, num_pseudo=4, pseudo_labels=4,
                      pseudo_label_accuracy=0.5)]
    return honest, [a + 2.5 for a in g]


def assert_arrays(params, want):
    for got, w in zip(comm.decode(params), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-6)


def test_fes_num_labels_x_is_dropped_and_the_honest_uploads_averaged(backbone):
    """Before: ``int("x")`` in FeS's validate raised ValueError and the run ended ``failed``."""
    strat = fes_strategy()
    honest, want = fes_honest(strat)
    poisoned = fit_res([a + 10 for a in strat.global_arrays], 4, 2, trained=1, num_labels="x")
    params, _ = strat.aggregate_fit(2, [honest[0], poisoned, honest[1]], [])
    assert reasons(strat) == {"2": "metric num_labels='x' is not a finite number"}
    assert_arrays(params, want)
    assert strat.labelled == {"0", "1"}  # the poisoner did not join the labelled clients


@pytest.mark.parametrize("poison,reason", [
    # 1e30 is a whole number: it fails the bound, the demo's 960 train rows (its partition unknown here)
    ({"pseudo_labels": 1e30}, "metric pseudo_labels=1e+30 exceeds the client's 960 training rows"),
    ({"pseudo_labels": 2.5}, "metric pseudo_labels=2.5 is not a whole number >= 0"),
    ({"pseudo_label_accuracy": 1e30}, "metric pseudo_label_accuracy=1e+30 is not a number in [0, 1]"),
    ({"pseudo_label_accuracy": -1.0}, "metric pseudo_label_accuracy=-1.0 is not a number in [0, 1]"),
])
def test_fes_pseudo_label_figures_out_of_range_are_dropped_not_aggregated(backbone, poison, reason):
    """Before: accepted, its upload aggregated (weight 4 of 12) and its 1e30 in the round's
    ``pseudo_label_accuracy``."""
    strat = fes_strategy()
    honest, want = fes_honest(strat)
    poisoned = fit_res([a + 10 for a in strat.global_arrays], 4, 2, trained=1, num_labels=4, num_pseudo=4, **poison)
    params, _ = strat.aggregate_fit(2, [honest[0], poisoned, honest[1]], [])
    assert reasons(strat) == {"2": reason}
    assert_arrays(params, want)
    m = strat.record.method_metrics
    assert m["pseudo_label_accuracy"] == 0.5 and m["pseudo_labels"] == 4.0  # the honest client's figures alone


def test_a_label_count_beyond_the_clients_own_rows_is_dropped(backbone):
    """Counts of a client's own texts are bounded by its partition's rows, when the server
    knows its partition (client-ids=ask)."""
    from fedtext.learning.data import partition_train

    strat = fes_strategy()
    honest, want = fes_honest(strat)
    proxy = SimpleNamespace(cid="2")
    strat.sampler.learn(proxy, 2, None, 4)
    rows = len(partition_train(strat.cfg, 2, 4))
    _, res = fit_res([a + 10 for a in strat.global_arrays], 4, 2, trained=1, num_labels=4, pseudo_labels=rows + 1)
    params, _ = strat.aggregate_fit(2, [honest[0], (proxy, res), honest[1]], [])
    assert reasons(strat) == {"2": f"metric pseudo_labels={rows + 1} exceeds the client's {rows} training rows"}
    assert_arrays(params, want)


def test_feddpg_forget_accuracy_x_is_dropped_in_either_kind_of_round(backbone):
    """Before: ``float("x")`` in FedDPG's unlearning round raised ValueError and the run ended
    ``failed``. Now: in a training round the poisoned reply is dropped and G is the uniform
    mean of the honest ones (eq. 1); in the unlearning round, where only the unlearning
    client is asked, it is dropped and G stays as it was (nothing replaces it)."""
    strat = FedDPG(make_config("feddpg", prompts=1, hidden=2, unlearn_round=3, unlearn_client=1, max_length=32,
                               client_test_size=0, eval_size=20, shots_per_class=4), TASKS["demo"])
    g = [np.asarray(a) for a in strat.initial_arrays()]
    strat.global_arrays = g
    strat.rounds.begin(2)
    results = [fit_res([a + 1 for a in g], 10, 0), fit_res([a + 9 for a in g], 4, 2, forget_accuracy_before="x"),
               fit_res([a + 4 for a in g], 30, 1)]
    params, _ = strat.aggregate_fit(2, results, [])
    assert reasons(strat) == {"2": "metric forget_accuracy_before='x' is not a finite number"}
    assert_arrays(params, [a + 2.5 for a in g])  # uniform: (1 + 4) / 2
    before = [a.copy() for a in strat.global_arrays]
    strat.rounds.begin(3)
    params, metrics = strat.aggregate_fit(3, [fit_res([a + 7 for a in before], 6, 1, forget_accuracy_before="x",
                                                      forget_accuracy_after=0.0)], [])
    assert params is None and metrics == {}
    assert reasons(strat) == {"1": "metric forget_accuracy_before='x' is not a finite number"}
    for got, want in zip(strat.global_arrays, before, strict=True):
        np.testing.assert_array_equal(got, want)
    assert strat.record.method_metrics == {}


def test_a_whole_number_too_large_for_a_float_is_not_finite_not_an_overflow():
    """``math.isfinite(10**400)`` raises OverflowError; a spec says why in one line instead."""
    from fedtext.common.metrics import MetricSpec

    spec = MetricSpec("num_labels", whole=True, low=0)
    assert spec.check(10**400) == f"metric num_labels={10**400!r} is not a finite number"
    assert spec.check(3) is None
