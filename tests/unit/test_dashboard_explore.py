"""The dashboard's exploration views' data (simulations/dashboard_explore.py) on hand-made
run folders: which fields the any-metric list offers, the picked field per round, each
client's spread and the worst client, a sweep's points and mean ± std per key value, and
the figures built from them. The page itself: tests/system/test_dashboard_explore_browser.py."""

from __future__ import annotations

import math

import pytest

from simulations import dashboard as page
from simulations import dashboard_explore as de
from simulations.dashboard_data import ABSENT, RunStore, chart_lines

from .test_dashboard import _round, write_experiment, write_run


def _runs(store: RunStore, *ids: str) -> list[dict]:
    by_id = {r["run_id"]: r for r in store.loaded(list(ids))}
    return [by_id[i] for i in ids]


@pytest.fixture
def store(tmp_path) -> RunStore:
    """Two methods, two seeds of one; FedBPT-like method metrics, a train loss that is
    null in round 0, a text and a boolean method metric, per-client accuracies; a
    compare-runner experiment, so a run's label is its method (seeds aggregate)."""
    root = write_experiment(tmp_path / "results", "exp")
    write_run(root, "r1-fedbpt-s0", "fedbpt", 0, [
        _round(0, 0.5, train_loss=None, method_metrics={}),
        _round(1, 0.6, 1000, 1000, {"0": 0.5, "1": 0.9, "2": 0.7}, train_loss=0.8,
               method_metrics={"sigma": 0.9, "codec": "fp16", "clamped": True}),
        _round(2, 0.7, 1000, 1000, {"0": 0.6, "1": 0.4, "2": 0.8, "10": 0.4}, train_loss=0.6,
               method_metrics={"sigma": 0.7, "z_norm": 3.0}, client_post_accuracy={"1": 0.55}),
    ], **{"fedbpt.popsize": 4})
    write_run(root, "r2-fedbpt-s1", "fedbpt", 1, [
        _round(0, 0.5, train_loss=None, method_metrics={}),
        _round(1, 0.64, 1000, 1000, train_loss=0.7, method_metrics={"sigma": 0.8}),
        _round(2, 0.8, 1000, 1000, train_loss=0.5, method_metrics={"sigma": 0.5}),
    ], **{"fedbpt.popsize": 8})
    write_run(root, "r3-fedprompt", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.55, 500, 700)],
              **{"fedbpt.popsize": 8})
    return RunStore(tmp_path / "results")


# ------------------------------------------------------------------- any metric
def test_numeric_fields_list_method_metrics_and_leave_out_what_is_not_a_number(store):
    fields = de.numeric_fields(store.runs())
    # method metrics: numeric ones of any run, after the record's own fields
    assert [f for f in fields if f.startswith("method_metrics.")] == ["method_metrics.sigma", "method_metrics.z_norm"]
    assert fields.index("method_metrics.sigma") > fields.index("wall_time_s")
    assert {"global_accuracy", "train_loss", "bytes_up", "client_peak_rss_mb", "wall_time_s",
            "bytes_up_per_client"} <= set(fields)
    # the x-axis, objects, lists, text and booleans are not fields to chart
    for absent in ("round", "client_accuracy", "client_post_accuracy", "method_metrics", "dropped",
                   "method_metrics.codec", "method_metrics.clamped"):
        assert absent not in fields
    # in the record's own order (ROUND_FIELDS), not alphabetical
    assert fields.index("global_accuracy") < fields.index("bytes_up") < fields.index("train_loss")
    # only the given runs count: fedprompt's run records no method metric
    assert not any(f.startswith("method_metrics.") for f in de.numeric_fields(_runs(store, "r3-fedprompt")))


def test_field_value_reads_method_metrics_and_refuses_non_numbers():
    record = {"round": 1, "train_loss": 0.25, "flag": True, "text": "0.5", "nan": math.nan,
              "method_metrics": {"sigma": 2, "a.b": 1.5, "codec": "fp16"}}
    assert de.field_value(record, "train_loss") == 0.25
    assert de.field_value(record, "method_metrics.sigma") == 2.0
    assert de.field_value(record, "method_metrics.a.b") == 1.5  # a metric name with a dot
    for field in ("flag", "text", "nan", "missing", "method_metrics.codec", "method_metrics.missing"):
        assert de.field_value(record, field) is None, field
    assert de.field_value({"method_metrics": [1, 2]}, "method_metrics.sigma") is None


def test_metric_series_skips_null_rounds_and_draws_mean_and_std_per_method(store):
    series = de.metric_series(store, ["r1-fedbpt-s0", "r2-fedbpt-s1", "r3-fedprompt"], "method_metrics.sigma")
    r1 = series[series.run_id == "r1-fedbpt-s0"].sort_values("round")
    assert r1["metric"].isna().tolist() == [True, False, False] and r1["metric"].tolist()[1:] == [0.9, 0.7]
    assert r1["cum_bytes_total"].tolist() == [0, 2000, 4000]  # the x-axes come along
    chart = de.metric_chart("method_metrics.sigma")
    lines = chart_lines(series, chart, "round", "mean")
    assert [line.name for line in lines] == ["fedbpt (n=2)"]  # fedprompt records no sigma: no line
    (line,) = lines
    assert line.x == [1, 2] and line.y == pytest.approx([0.85, 0.6])  # round 0 is null: no point
    # sample std over the two seeds: |0.9-0.8|/sqrt(2), |0.7-0.5|/sqrt(2)
    assert [h - y for h, y in zip(line.hi, line.y)] == pytest.approx([0.1 / math.sqrt(2), 0.2 / math.sqrt(2)])
    # against cumulative bytes (up + down): round 1 at 2000, round 2 at 4000 in both seeds
    (by_bytes,) = chart_lines(series, chart, "bytes", "mean", log_x=True)
    assert by_bytes.x == [2000, 4000]
    runs = chart_lines(series, chart, "round", "runs")
    assert sorted((line.run_id, tuple(line.y)) for line in runs) == [("r1-fedbpt-s0", (0.9, 0.7)),
                                                                    ("r2-fedbpt-s1", (0.8, 0.5))]


# ------------------------------------------------------------------- per client
def test_client_spread_min_median_max_and_worst_client_on_hand_values(store):
    (run,) = _runs(store, "r1-fedbpt-s0")
    accs = de.client_accuracies(run)
    # numeric ids in number order ("2" before "10"); post-tuning rows after the global ones
    assert accs[accs["round"] == 2]["client"].tolist() == ["0", "1", "2", "10", "1"]
    assert accs["kind"].tolist()[-1] == "post" and accs["accuracy"].tolist()[-1] == 0.55
    spread = de.client_spread(accs)
    assert spread["round"].tolist() == [1, 2] and spread["clients"].tolist() == [3, 4]
    assert spread["min"].tolist() == [0.5, 0.4] and spread["max"].tolist() == [0.9, 0.8]
    # round 1: median of 0.5, 0.7, 0.9 = 0.7; round 2: of 0.4, 0.4, 0.6, 0.8 = (0.4 + 0.6) / 2
    assert spread["median"].tolist() == pytest.approx([0.7, 0.5])
    # round 1's worst is client 0; round 2's a tie of 1 and 10 at 0.4: the first id (1)
    assert spread["worst_client"].tolist() == ["0", "1"]
    assert de.worst_client(accs) == ("1", 2, 0.4)  # the last evaluated round decides, not round 1
    (other,) = _runs(store, "r2-fedbpt-s1")
    assert de.client_spread(de.client_accuracies(other)).empty and de.worst_client(de.client_accuracies(other)) is None


def test_client_view_offers_runs_with_client_accuracies_and_draws_band_median_worst(store):
    options = de.client_runs(store.runs())
    assert [o["value"] for o in options] == ["r1-fedbpt-s0"]  # the others record none
    assert options[0]["label"] == "fedbpt s0 · r1-fedbpt-s0"
    fig = de.client_figure(_runs(store, "r1-fedbpt-s0")[0], page)
    by_meta = {}
    for trace in fig["data"]:
        by_meta.setdefault(trace["meta"], []).append(trace)
    assert sorted(by_meta) == ["band", "client", "global", "median", "post", "worst"]
    assert len(by_meta["client"]) == 4 and sum(t["showlegend"] for t in by_meta["client"]) == 1
    band = by_meta["band"][0]
    assert band["x"] == [1, 2, 2, 1] and band["y"] == [0.9, 0.8, 0.4, 0.5]  # max out, min back
    assert by_meta["median"][0]["y"] == pytest.approx([0.7, 0.5])
    (worst,) = by_meta["worst"]
    assert worst["name"] == "worst client 1 (0.400 in round 2)" and worst["y"] == [0.9, 0.4]
    assert by_meta["post"][0]["y"] == [0.55]
    assert "no run" in de.client_figure(None, page)["layout"]["annotations"][0]["text"]


def test_client_view_of_one_evaluated_round_draws_whiskers_and_client_markers():
    """One round: a filled band and lines would draw nothing; the median gets min-max whiskers."""
    run = {"run_id": "one", "rounds": [{"round": 0, "global_accuracy": 0.5, "client_accuracy": {}},
                                       {"round": 1, "global_accuracy": 0.6,
                                        "client_accuracy": {"0": 0.5, "1": 0.6, "2": 0.9}}]}
    fig = de.client_figure(run, page)
    metas = [t["meta"] for t in fig["data"]]
    assert "band" not in metas and metas.count("client") == 3
    assert all(t["mode"] == "lines+markers" for t in fig["data"] if t["meta"] == "client")
    (median,) = [t for t in fig["data"] if t["meta"] == "median"]
    assert median["y"] == pytest.approx([0.6])  # whiskers up to the max 0.9, down to the min 0.5
    assert median["error_y"]["array"] == pytest.approx([0.3]) and median["error_y"]["arrayminus"] == pytest.approx([0.1])
    assert not median["error_y"]["symmetric"]


# ------------------------------------------------------------------- sweep
@pytest.fixture
def sweep(tmp_path) -> RunStore:
    """lr 0.1 (3 seeds), 0.01 (2 seeds), 0.001 (1 seed) for fedprompt; 0.1 once for bbt-fed
    and once a run without the key; final accuracies by hand."""
    runs = write_experiment(tmp_path / "results", "sweep")
    finals = {("fedprompt", 0.1): [0.7, 0.8, 0.9], ("fedprompt", 0.01): [0.6, 0.64], ("fedprompt", 0.001): [0.5],
              ("bbt-fed", 0.1): [0.55]}
    for (method, lr), accs in finals.items():
        for seed, acc in enumerate(accs):
            write_run(runs, f"{method}-lr{lr}-s{seed}", method, seed,
                      [_round(0, 0.4), _round(1, acc - 0.05, 100 * seed + 100, 300), _round(2, acc, 100, 300)],
                      lr=lr, optimizer="adam" if lr > 0.05 else "sgd")
    write_run(runs, "fedprompt-nolr-s0", "fedprompt", 0, [_round(0, 0.4), _round(1, 0.3)], optimizer="adam")
    return RunStore(tmp_path / "results")


def test_sweep_keys_are_the_keys_that_vary(sweep):
    ids = [r["run_id"] for r in sweep.runs()]
    keys = de.sweep_keys(sweep, ids)
    assert set(keys) == {"method", "seed", "lr", "optimizer"}
    assert de.default_key(["seed", "lr"]) == "lr" and de.default_key(["seed"]) == "seed"
    assert de.sweep_keys(sweep, ids[:1]) == []


def test_sweep_mean_and_std_per_key_value_on_hand_values(sweep):
    points, axis = de.sweep_points(sweep.runs(), "lr", "final_accuracy")
    assert axis == "log"  # 0.001 .. 0.1 spans two decades
    assert "fedprompt-nolr-s0" not in set(points["run_id"])  # no lr: no point on a numeric axis
    assert len(points) == 7
    # optimizer co-varies with lr (adam at 0.1, sgd below): it splits nothing
    assert set(points["series"]) == {"fedprompt", "bbt-fed"}
    summary = de.sweep_summary(points).set_index(["series", "x"])
    assert summary.loc[("fedprompt", 0.1), "mean"] == pytest.approx(0.8)
    assert summary.loc[("fedprompt", 0.1), "std"] == pytest.approx(0.1)  # sample std of 0.7, 0.8, 0.9
    assert summary.loc[("fedprompt", 0.01), "mean"] == pytest.approx(0.62)
    assert summary.loc[("fedprompt", 0.01), "std"] == pytest.approx(0.04 / math.sqrt(2))
    assert summary.loc[("fedprompt", 0.001), "n"] == 1 and math.isnan(summary.loc[("fedprompt", 0.001), "std"])
    assert summary.loc[("bbt-fed", 0.1), "mean"] == pytest.approx(0.55)  # methods kept apart
    # total bytes up + down: seed 2 of lr 0.1 sent 300 + 100 up and 600 down
    points, _ = de.sweep_points(sweep.runs(), "lr", "total_bytes")
    assert points.set_index("run_id").loc["fedprompt-lr0.1-s2", "y"] == 1000


def test_sweep_on_a_text_key_is_categorical_and_keeps_runs_without_the_key(sweep):
    points, axis = de.sweep_points(sweep.runs(), "lr", "final_accuracy")
    assert axis != "category"
    points, axis = de.sweep_points(sweep.runs(), "optimizer", "final_accuracy")
    assert axis == "category" and len(points) == 8
    summary = de.sweep_summary(points).set_index(["series", "x"])
    # adam holds lr 0.1 runs (0.7, 0.8, 0.9) and the run without lr (0.3); sgd lr 0.01 and 0.001:
    # lr differs at one optimizer value, so it splits the series (no mean over different lr)
    assert summary.loc[("fedprompt · lr=0.1", "adam"), "n"] == 3
    assert summary.loc[("fedprompt · lr=0.1", "adam"), "mean"] == pytest.approx(0.8)
    assert summary.loc[(f"fedprompt · lr={ABSENT}", "adam"), "mean"] == pytest.approx(0.3)
    assert summary.loc[("fedprompt · lr=0.01", "sgd"), "mean"] == pytest.approx(0.62)
    assert summary.loc[("fedprompt · lr=0.001", "sgd"), "n"] == 1
    assert summary.loc[("bbt-fed", "adam"), "mean"] == pytest.approx(0.55)
    points, axis = de.sweep_points(sweep.runs(), "missing-key", "final_accuracy")
    assert axis == "category" and set(points["x"]) == {ABSENT}
    # a numeric key with a close range: linear; a boolean key: categorical as JSON text
    assert de.sweep_points(_fake_runs([1, 2, 50]), "k", "final_accuracy")[1] == "linear"
    assert de.sweep_points(_fake_runs([True, False]), "k", "final_accuracy")[0]["x"].tolist() == ["true", "false"]


def test_sweep_series_split_by_experiment_and_by_keys_that_differ_at_one_value():
    """Two datasets (experiments) at the same prompt length, and two variants differing in
    another key at the same value, are never averaged; seeds are."""
    def run(i, exp, plen, acc, **cfg):
        return {"run_id": f"r{i}", "status": "finished", "label": "fedprompt", "experiment": exp,
                "cfg": {"method": "fedprompt", "prompt-length": plen, "seed": i, "run-name": f"n{i}", **cfg},
                "summary_or_partial": {"final_accuracy": acc}}
    runs = [run(0, "sst2", 5, 0.90), run(1, "sst2", 5, 0.80), run(2, "agnews", 5, 0.60), run(3, "sst2", 10, 0.95),
            run(4, "sst2", 5, 0.50, lr=0.1), run(5, "sst2", 5, 0.70, lr=0.1)]
    runs[0]["cfg"]["lr"] = runs[1]["cfg"]["lr"] = runs[3]["cfg"]["lr"] = 0.01
    runs[2]["cfg"]["lr"] = 0.01
    points, _ = de.sweep_points(runs, "prompt-length", "final_accuracy")
    series = dict(zip(points["run_id"], points["series"]))
    assert series == {"r0": "fedprompt · sst2 · lr=0.01", "r1": "fedprompt · sst2 · lr=0.01",
                      "r2": "fedprompt · agnews · lr=0.01", "r3": "fedprompt · sst2 · lr=0.01",
                      "r4": "fedprompt · sst2 · lr=0.1", "r5": "fedprompt · sst2 · lr=0.1"}
    summary = de.sweep_summary(points).set_index(["series", "x"])
    assert summary.loc[("fedprompt · sst2 · lr=0.01", 5.0), "mean"] == pytest.approx(0.85)  # seeds 0, 1 only
    assert summary.loc[("fedprompt · sst2 · lr=0.01", 5.0), "std"] == pytest.approx(0.1 / math.sqrt(2))
    assert summary.loc[("fedprompt · agnews · lr=0.01", 5.0), "n"] == 1
    assert summary.loc[("fedprompt · sst2 · lr=0.1", 5.0), "mean"] == pytest.approx(0.6)
    fig = de.sweep_figure(points, "linear", "prompt-length", "final_accuracy", page)
    names = {t["name"] for t in fig["data"] if t["meta"] == "mean"}
    assert names == {"fedprompt · sst2 · lr=0.01 mean ± std (up to n=2)", "fedprompt · agnews · lr=0.01 mean ± std",
                     "fedprompt · sst2 · lr=0.1 mean ± std (up to n=2)"}
    # one method's series share its colour and differ in marker symbol
    symbols = [t["marker"]["symbol"] for t in fig["data"] if t["meta"] == "mean"]
    colors = {t["marker"]["color"] for t in fig["data"] if t["meta"] == "mean"}
    assert len(set(symbols)) == 3 and len(colors) == 1


def _fake_runs(values: list) -> list[dict]:
    return [{"run_id": f"r{i}", "status": "finished", "label": "m", "cfg": {"method": "m", "k": v, "seed": i},
             "summary_or_partial": {"final_accuracy": 0.5 + i / 10}} for i, v in enumerate(values)]


def test_summary_values_and_fields():
    values = de.summary_values({"final_accuracy": 0.8, "seed": 3, "status": "finished", "total_bytes_up": 10,
                                "total_bytes_down": 30, "best_accuracy": None, "flag": True})
    assert values == {"final_accuracy": 0.8, "total_bytes_up": 10.0, "total_bytes_down": 30.0, "total_bytes": 40.0}
    runs = [{"summary_or_partial": {"wall_time_s": 3, "final_accuracy": 0.5, "total_bytes_up": 1,
                                    "total_bytes_down": 2, "best_accuracy": 0.6}}]
    assert de.summary_fields(runs) == ["final_accuracy", "best_accuracy", "total_bytes", "total_bytes_down",
                                       "total_bytes_up", "wall_time_s"]


def test_sweep_figure_has_a_point_per_run_and_a_mean_per_method(sweep):
    points, axis = de.sweep_points(sweep.runs(), "lr", "final_accuracy")
    fig = de.sweep_figure(points, axis, "lr", "final_accuracy", page)
    runs = [t for t in fig["data"] if t["meta"] == "run"]
    means = {t["name"]: t for t in fig["data"] if t["meta"] == "mean"}
    assert sum(len(t["x"]) for t in runs) == 7
    assert set(means) == {"bbt-fed mean ± std", "fedprompt mean ± std (up to n=3)"}
    fp = means["fedprompt mean ± std (up to n=3)"]
    assert fp["x"] == [0.001, 0.01, 0.1] and fp["y"] == pytest.approx([0.5, 0.62, 0.8])
    assert fp["error_y"]["array"] == pytest.approx([0.0, 0.04 / math.sqrt(2), 0.1])  # one run: no bar
    assert fig["layout"]["xaxis"]["type"] == "log"
    cat = de.sweep_figure(*de.sweep_points(sweep.runs(), "optimizer", "final_accuracy"), "optimizer", "final_accuracy", page)
    assert cat["layout"]["xaxis"]["type"] == "category" and cat["layout"]["xaxis"]["categoryarray"] == ["adam", "sgd"]


# ------------------------------------------------------------------- issue 59: the privacy spent
def test_a_dp_runs_epsilon_per_round_is_a_metric_to_chart(tmp_path):
    """A round's ``privacy`` entry (an object) was left out of the any-metric list: its
    numbers are offered as ``privacy.<name>`` where ``privacy`` stands in the record,
    ``privacy.epsilon`` first, and read per round (a round without DP, or no noise: no point)."""
    root = write_experiment(tmp_path / "results", "exp")
    entry = {"mode": "central", "delta": 1e-5, "noise_multiplier": 1.1, "clip": 0.5}
    write_run(root, "dp", "fedprompt", 0, [_round(0, 0.5, privacy=None),
                                            _round(1, 0.6, privacy={**entry, "epsilon": 0.7}),
                                            _round(2, 0.7, privacy={**entry, "epsilon": 1.1})])
    write_run(root, "plain", "fedprompt", 1, [_round(0, 0.5), _round(1, 0.6)])
    store = RunStore(tmp_path / "results")
    fields = de.numeric_fields(store.runs())
    private = [f for f in fields if f.startswith("privacy.")]
    assert private == ["privacy.epsilon", "privacy.clip", "privacy.delta", "privacy.noise_multiplier"]
    assert fields.index("bytes_up") < fields.index("privacy.epsilon") < fields.index("wall_time_s")
    assert not any(f.startswith("privacy.") for f in de.numeric_fields(_runs(store, "plain")))
    series = de.metric_series(store, ["dp", "plain"], "privacy.epsilon")
    dp = series[series.run_id == "dp"].sort_values("round")
    assert dp["metric"].isna().tolist() == [True, False, False] and dp["metric"].tolist()[1:] == [0.7, 1.1]
    assert series[series.run_id == "plain"]["metric"].isna().all()
    assert de.field_value({"privacy": {"mode": "local", "epsilon": None}}, "privacy.epsilon") is None  # no bound
    # the sweep's y list has the run's ε too (its summary)
    assert "epsilon" in de.summary_fields(_runs(store, "dp")) and "epsilon" not in de.summary_fields(_runs(store, "plain"))
