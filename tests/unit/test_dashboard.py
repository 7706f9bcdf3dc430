"""Dashboard: records -> experiments, seed aggregates, lines, callbacks; a refresh stays
under a second with 50 runs of 50 rounds. The plot command (a subprocess) is in
tests/integration/test_dashboard_plot.py, the page in headless Chromium in
tests/system/test_dashboard_browser.py; both write their records with this file's helpers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from simulations.dashboard_data import (
    ABSENT, CHARTS, RunStore, aggregate, chart_lines, color_of, comparison, config_diff, experiment_of,
    integer_dtick, round_series, run_detail, runs_table,
)

from .test_records import MALFORMED, SECRET


def _round(i, acc, up=528, down=528, clients=None, wall=None, **extra):
    return {"round": i, "global_accuracy": acc, "bytes_up": up * (i > 0), "bytes_down": down * (i > 0),
            "model_queries": 100 * i, "client_accuracy": clients or {}, "client_peak_rss_mb": 900.0 + i,
            "wall_time_s": 10.0 * i if wall is None else wall, "num_clients": 2, "bytes_up_per_client": up / 2,
            "bytes_down_per_client": down / 2, **extra}


def write_run(root: Path, run_id: str, method: str, seed: int, rounds: list[dict], finished: bool = True,
              tail: str = "", **options) -> Path:
    d = root / run_id
    d.mkdir(parents=True)
    cfg = {"method": method, "seed": seed, "dataset": "demo", "partition": "iid", "num-server-rounds": 2,
           "shots-per-class": 8, **options}
    (d / "config.json").write_text(json.dumps({"run_id": run_id, "config": cfg}))
    (d / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds) + tail)
    if finished:
        from fedtext.records import summarize

        (d / "summary.json").write_text(json.dumps({**summarize(rounds), "status": "finished", "run_id": run_id}))
    return d


def write_experiment(results: Path, name: str) -> Path:
    """A compare-runner output folder: ``<results>/<name>/{experiment.json, runs/}``."""
    (results / name / "runs").mkdir(parents=True)
    (results / name / "experiment.json").write_text(json.dumps({"name": name}))
    return results / name / "runs"


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    write_run(root, "r1-fedprompt", "fedprompt", 0,
              [_round(0, 0.5), _round(1, 0.6, 1000, 1000, {"0": 0.5, "1": 0.7}), _round(2, 0.7, 1000, 1000)])
    write_run(root, "r2-bbt-fed", "bbt-fed", 0, [_round(0, 0.5), _round(1, 0.55), _round(2, 0.65)],
              **{"bbt-fed.popsize": 4, "bbt-fed.sigma0": 1.0, "fedbpt.popsize": 6})
    # still running, its last line cut in the middle of a write
    write_run(root, "r3-bbt-fed", "bbt-fed", 1, [_round(0, 0.5), _round(1, 0.52)], finished=False,
              tail='{"round": 2, "global_acc')
    bad = root / "r4-broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    odd = root / "r5-odd"
    odd.mkdir()
    (odd / "config.json").write_text("[1, 2]")  # valid JSON, not a record
    (odd / "rounds.jsonl").write_text('{"round": "x"}\n')
    return root


def test_runs_table_statuses_and_truncated_records(runs):
    df = runs_table(runs).set_index("run_id")
    assert df.loc["r1-fedprompt", "status"] == "finished" and df.loc["r1-fedprompt", "rounds_done"] == 2
    assert df.loc["r1-fedprompt", "final_accuracy"] == 0.7 and df.loc["r1-fedprompt", "best_accuracy"] == 0.7
    assert df.loc["r1-fedprompt", "total_bytes_up"] == 2000  # bytes: the page shows them as text (byte_text)
    assert df.loc["r3-bbt-fed", "status"] == "running" and df.loc["r3-bbt-fed", "rounds_done"] == 1
    assert "1 malformed line(s)" in df.loc["r3-bbt-fed", "note"]
    assert df.loc["r4-broken", "status"] == "malformed" and "config.json" in df.loc["r4-broken", "note"]
    assert df.loc["r5-odd", "status"] == "malformed"
    # a run's own method keys that differ from their defaults (not the defaults, not other methods')
    assert df.loc["r2-bbt-fed", "options"] == "popsize=4" and df.loc["r1-fedprompt", "options"] == ""
    # hand-started runs group by dataset, partition and shots; a hand variant keeps its options
    assert df.loc["r1-fedprompt", "experiment"] == "demo · iid · 8 shots"
    assert df.loc["r2-bbt-fed", "label"] == "bbt-fed popsize=4" and df.loc["r3-bbt-fed", "label"] == "bbt-fed"


def test_round_series_accumulates_bytes_and_queries(runs):
    s = round_series(runs, ["r1-fedprompt", "r3-bbt-fed"])
    r1 = s[s.run_id == "r1-fedprompt"]
    assert r1["cum_bytes_up"].tolist() == [0, 1000, 2000] and r1["cum_model_queries"].tolist() == [0, 100, 300]
    assert r1["cum_bytes_total"].tolist() == [0, 2000, 4000]
    assert r1["client_acc_min"].iloc[1] == 0.5 and r1["client_acc_max"].iloc[1] == 0.7
    assert r1["client_acc_mean"].iloc[1] == pytest.approx(0.6)
    assert set(s.run_label) == {"fedprompt s0", "bbt-fed s1"}
    assert len(s[s.run_id == "r3-bbt-fed"]) == 2  # the cut line is skipped
    assert r1["cum_sim_time_s"].isna().all()  # no method here records simulated device time
    assert round_series(runs, []).empty
    assert round_series(runs, ["r4-broken", "r5-odd"]).empty  # malformed runs are never drawn


def test_comparison_groups_methods(runs):
    table = comparison(runs).set_index("method")
    assert table.loc["bbt-fed", "runs"] == 2 and table.loc["fedprompt", "runs"] == 1
    assert table.loc["fedprompt", "final acc"] == "0.700"


def test_experiments_from_compare_folders_legacy_folders_and_hand_runs(tmp_path):
    results = tmp_path / "results"
    a = write_experiment(results, "exp-a")
    write_run(a, "a1", "fedprompt", 0, [_round(0, 0.5)], **{"run-name": "fp-long"})
    write_run(a, "a2", "bbt-fed", 0, [_round(0, 0.5)], **{"bbt-fed.popsize": 4})  # the experiment's budget
    legacy = results / "old_exp" / "runs"  # a compare output from before experiment.json
    write_run(legacy, "l1", "bbt-fed", 0, [_round(0, 0.5)])
    (legacy.parent / "table.md").write_text("| method |\n")
    write_run(results / "by-hand", "h1", "bbt-fed", 0, [_round(0, 0.5)], partition="dirichlet", alpha=0.5,
              dataset="../shared/data/sst2", **{"shots-per-class": 16})
    write_run(results / "by-hand", "h2", "fedprompt", 0, [_round(0, 0.5)], partition="dirichlet-client", alpha=0.1,
              dataset="../shared/data/sst2", **{"shots-per-class": 8})
    df = runs_table(results).set_index("run_id")
    assert df.loc["a1", "experiment"] == "exp-a" and df.loc["a1", "label"] == "fp-long"
    assert df.loc["a2", "label"] == "bbt-fed" and df.loc["a2", "options"] == "popsize=4"
    assert df.loc["l1", "experiment"] == "old_exp"
    assert df.loc["h1", "experiment"] == "sst2 · dirichlet α=0.5 · 16 shots"
    assert df.loc["h2", "experiment"] == "sst2 · dirichlet-client α=0.1 · 8 shots"
    assert set(df.index[df["experiment"] == "exp-a"]) == {"a1", "a2"}
    # the experiment's own folder as the root: its experiment.json is inside it
    assert experiment_of(a / "a1", {}, root=a.parent) == "exp-a"


def test_no_reader_looks_above_the_runs_folder_and_the_compare_layout_names_its_experiment(tmp_path):
    """Issue 58: an ``experiment.json`` (or ``table.md``) above ``--runs`` renamed every run's
    experiment. Nothing above the records folder is read; a compare output opened at its
    ``runs/`` folder names its experiment (``--experiment``)."""
    from simulations import dashboard, plot

    a = write_experiment(tmp_path / "results", "exp-a")
    write_run(a, "a1", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)])
    (tmp_path / "results" / "exp-a" / "experiment.json").write_text(json.dumps({"name": "PLANTED"}))
    (tmp_path / "results" / "exp-a" / "table.md").write_text("| method |\n")
    hand = "demo · iid · 8 shots"
    assert runs_table(RunStore(a)).loc[0, "experiment"] == hand
    assert experiment_of(a / "a1", {"dataset": "demo", "partition": "iid", "shots-per-class": 8}, root=a) == hand
    named = runs_table(RunStore(a, experiment="exp-a")).loc[0]
    assert (named["experiment"], named["label"]) == ("exp-a", "fedprompt")
    # the commands pass it through: the page's experiment picker, the plot's subplot titles
    code, reply = dash_callback(dashboard.make_app(a, experiment="exp-a"), "..experiment.options",
                                {"version.data": "1"})
    assert code == 200 and reply["response"]["experiment"]["options"] == ["exp-a"]
    assert plot.main([str(a), "--out", str(tmp_path / "figs"), "--formats", "svg", "--experiment", "exp-a"]) == 0
    assert "<!-- exp-a -->" in (tmp_path / "figs" / "accuracy-vs-round.svg").read_text()  # its title


def test_seed_aggregate_by_hand(tmp_path):
    root = tmp_path / "runs"
    # two seeds of one method, with different wall times; one seed of another
    write_run(root, "s0", "bbt-fed", 0, [_round(0, 0.5, wall=0), _round(1, 0.6, wall=10), _round(2, 0.8, wall=20)])
    write_run(root, "s1", "bbt-fed", 1, [_round(0, 0.5, wall=0), _round(1, 0.7, wall=14), _round(2, 0.6, wall=30)])
    write_run(root, "p0", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.9)])
    series = round_series(root)
    agg = aggregate(series, "wall_time_s", "global_accuracy").set_index(["label", "round"])
    bbt = agg.loc["bbt-fed"]
    assert bbt.loc[1, "y"] == pytest.approx(0.65) and bbt.loc[1, "std"] == pytest.approx(math.sqrt(0.005))
    assert bbt.loc[2, "y"] == pytest.approx(0.7) and bbt.loc[2, "std"] == pytest.approx(math.sqrt(0.02))
    assert bbt.loc[1, "x"] == pytest.approx(12.0) and bbt.loc[2, "x"] == pytest.approx(25.0)  # mean x
    assert (bbt["n"] == 2).all()
    assert agg.loc[("fedprompt", 1), "n"] == 1 and math.isnan(agg.loc[("fedprompt", 1), "std"])

    lines = {ln.label: ln for ln in chart_lines(series, CHARTS["accuracy"], "bytes", "mean", log_x=True)}
    bbt_line = lines["bbt-fed"]
    assert bbt_line.name == "bbt-fed (n=2)" and bbt_line.x == [1056.0, 2112.0]  # round 0 (0 bytes) off a log axis
    assert bbt_line.lo == pytest.approx([0.65 - math.sqrt(0.005), 0.7 - math.sqrt(0.02)])
    assert bbt_line.hi == pytest.approx([0.65 + math.sqrt(0.005), 0.7 + math.sqrt(0.02)])
    assert lines["fedprompt"].lo is None  # one run: no band
    per_run = chart_lines(series, CHARTS["accuracy"], "round", "runs")
    assert sorted(ln.run_id for ln in per_run) == ["p0", "s0", "s1"]
    assert {ln.color for ln in per_run if ln.label == "bbt-fed"} == {bbt_line.color}  # one colour per method


def test_colors_are_per_method_and_stable():
    assert color_of("fedbpt") == color_of("fedbpt", ["zzz", "aaa"])  # a registered method's colour never moves
    assert len({color_of(m) for m in ("fedprompt", "bbt-fed", "fedbpt", "feddls", "fedavg")}) == 5
    assert color_of("feddls-phi3", ["feddls-phi3", "feddls-phi5"]) != color_of("feddls-phi5", ["feddls-phi3",
                                                                                                "feddls-phi5"])


def test_store_reads_only_what_was_appended_and_rereads_a_rewritten_file(tmp_path):
    root = tmp_path / "runs"
    d = write_run(root, "r", "bbt-fed", 0, [_round(0, 0.5), _round(1, 0.6)], finished=False, tail='{"round": 2',
                  **{"num-server-rounds": 3})
    store = RunStore(root)
    (run,) = store.runs()
    assert [r["round"] for r in run["rounds"]] == [0, 1] and run["malformed_lines"] == 1  # the unfinished line
    offset = store._rounds[d].offset
    with open(d / "rounds.jsonl", "a") as fh:  # the write completes, one more round follows
        fh.write(', "global_accuracy": 0.7}\n' + json.dumps(_round(3, 0.8)) + "\n")
    (run,) = store.runs()
    assert [r["round"] for r in run["rounds"]] == [0, 1, 2, 3] and run["malformed_lines"] == 0
    assert store._rounds[d].offset > offset
    assert store.runs()[0] is run  # nothing changed: the cached run, nothing re-read
    (d / "rounds.jsonl").write_text(json.dumps(_round(0, 0.4)) + "\n")  # rewritten, shorter
    assert [r["global_accuracy"] for r in store.runs()[0]["rounds"]] == [0.4]


def test_the_store_skips_a_line_over_the_bound_and_a_round_beyond_the_runs(tmp_path):
    """Issue 58: a line longer than the longest round record a writer writes is a malformed
    line, unparsed, also while it is still being written; a round beyond num-server-rounds
    is malformed too. The rounds around them stay."""
    from fedtext.records.schema import ROUND_LINE_MAX

    root = tmp_path / "runs"
    d = write_run(root, "r", "bbt-fed", 0, [_round(0, 0.5)], finished=False,
                  tail='{"round": 1, "pad": "' + "x" * (ROUND_LINE_MAX + 10))
    store = RunStore(root)
    (run,) = store.runs()
    assert [r["round"] for r in run["rounds"]] == [0] and run["malformed_lines"] == 1  # unfinished, too long
    with open(d / "rounds.jsonl", "a") as fh:
        fh.write('"}\n' + json.dumps(_round(1, 0.6)) + "\n" + json.dumps(_round(3, 0.9)) + "\n")
    (run,) = store.runs()
    assert [r["round"] for r in run["rounds"]] == [0, 1] and run["malformed_lines"] == 2  # line 2 and round 3
    assert run["line_problem"].startswith("line 2: longer than 16777216 bytes")
    assert store._rounds[d].offset == (d / "rounds.jsonl").stat().st_size  # every line consumed
    assert runs_table(store).loc[0, "rounds_done"] == 1  # round 3 of 2 is one of the malformed lines


def test_type_garbled_and_binary_records_never_raise(tmp_path):
    root = tmp_path / "runs"
    garbled = [_round(0, 0.5), {**_round(1, 0.6), "bytes_up": "lots", "global_accuracy": "high",
                                "client_accuracy": [1, 2], "wall_time_s": None}]
    write_run(root, "garbled", "bbt-fed", 0, garbled, finished=False)
    write_run(root, "ok", "bbt-fed", 1, [_round(0, 0.5), _round(1, 0.6)])
    binary = root / "binary"
    binary.mkdir()
    (binary / "config.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (binary / "rounds.jsonl").write_bytes(bytes(range(256)) * 4)
    df = runs_table(root).set_index("run_id")
    assert df.loc["binary", "status"] == "malformed"
    # a field of the wrong type counts as missing: the run stays listed with what is readable
    assert df.loc["garbled", "status"] == "running" and df.loc["garbled", "final_accuracy"] == 0.5
    assert df.loc["garbled", "total_bytes_up"] == 0
    series = round_series(root)
    assert set(series.run_id) == {"ok", "garbled"}
    assert series[series.run_id == "garbled"]["global_accuracy"].isna().tolist() == [False, True]
    from simulations.dashboard import render

    figs, table = render(RunStore(root), ["demo · iid · 8 shots"], None, None, ["running", "finished"], "mean",
                         "bytes", True, "bytes")
    assert len(figs) == 7 and list(table["method"]) == ["bbt-fed"]


def test_run_detail_lists_drops_and_method_metrics(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "r", "fedbpt", 0, [_round(0, 0.5), _round(1, 0.6, dropped=[{"client": "3", "reason": "NaN in z"}],
                                                                method_metrics={"sigma_prime": 0.42})])
    rounds, text = run_detail(root, "r")
    assert rounds.loc[1, "dropped"] == "3: NaN in z" and rounds.loc[1, "m:sigma_prime"] == 0.42
    detail = json.loads(text)  # status, note, summary; the config is config_table's
    assert detail["status"] == "finished" and detail["summary"]["rounds_done"] == 1 and "config" not in detail


def test_config_diff_lists_only_the_keys_that_differ(tmp_path):
    root = tmp_path / "runs"
    rounds = [_round(0, 0.5)]
    write_run(root, "a", "bbt-fed", 0, rounds, **{"bbt-fed.popsize": 4, "bbt-fed.sigma0": 1.0, "alpha": 1})
    write_run(root, "b", "bbt-fed", 1, rounds, **{"bbt-fed.popsize": 4, "bbt-fed.sigma0": 0.5, "alpha": 1.0})
    write_run(root, "c", "fedprompt", 0, rounds, **{"fedprompt.lr": 0.01, "alpha": 1, "flag": True})
    write_run(root, "d", "fedprompt", 0, rounds, **{"fedprompt.lr": 0.01, "alpha": 1, "flag": 1})
    diff = config_diff(root, ["b", "a"])
    # one column per run in the order asked; only the differing keys, in the configs' order;
    # 1 and 1.0 differ (the records say which one a run was given)
    assert list(diff.columns) == ["b", "a"] and list(diff.index) == ["seed", "bbt-fed.sigma0", "alpha"]
    assert diff.loc["seed"].tolist() == [1, 0] and diff.loc["bbt-fed.sigma0"].tolist() == [0.5, 1.0]
    diff = config_diff(root, ["a", "c", "nope"])  # a key only one run has differs; an unknown id is left out
    assert list(diff.columns) == ["a", "c"]
    assert list(diff.index) == ["method", "bbt-fed.popsize", "bbt-fed.sigma0", "fedprompt.lr", "flag"]
    assert diff.loc["fedprompt.lr"].tolist() == [ABSENT, 0.01] and diff.loc["bbt-fed.popsize", "c"] == ABSENT
    assert list(config_diff(root, ["c", "d"]).index) == ["flag"]  # true and 1 differ
    assert config_diff(root, ["a", "a"]).empty and config_diff(root, ["a"]).empty
    assert config_diff(root, ["c", "d", "c"]).columns.tolist() == ["c", "d"]


def test_round_axes_tick_whole_numbers():
    assert [integer_dtick(top) for top in (0, 1, 3, 8, 9, 16, 17, 40, 41, 100, 1000)] == [
        1, 1, 1, 1, 2, 2, 5, 5, 10, 20, 200]
    assert integer_dtick(10, max_ticks=2) == 5 and integer_dtick(3, max_ticks=0) == 5
    from simulations.dashboard import figure
    from simulations.dashboard_data import Line

    lines = [Line("e1", "m", "m", "#636EFA", [0, 1, 2, 3], [0.5, 0.6, 0.7, 0.8]),
             Line("e2", "m", "m", "#636EFA", [0, 30], [0.5, 0.6])]
    layout = figure(lines, CHARTS["accuracy"], "round", False, ["e1", "e2"])["layout"]
    for axis in ("xaxis", "xaxis2"):  # one step for the subplots, a whole number
        assert layout[axis]["tickformat"] == "d" and layout[axis]["tickmode"] == "linear"
        assert layout[axis]["dtick"] == 10 and layout[axis]["tick0"] == 0
    from simulations.dashboard import chart_title

    assert chart_title(CHARTS["accuracy"], "bytes") == "Global accuracy vs cumulative bytes, up + down"
    assert chart_title(CHARTS["client-accuracy"], "bytes") == "Mean client accuracy vs cumulative bytes, up + down"
    assert chart_title(CHARTS["client-accuracy"], "round") == "Mean client accuracy (local test splits) vs round"
    bytes_layout = figure(lines, CHARTS["accuracy"], "bytes", True, ["e1"])["layout"]
    assert "dtick" not in bytes_layout["xaxis"]  # other axes keep Plotly's ticks
    # the title stays below the toolbar's band at the top, at the left; the plot below both
    title = layout["title"]
    assert title["yref"] == "container" and title["yanchor"] == "top" and title["pad"]["t"] >= 30
    assert title["xanchor"] == "left" and layout["margin"]["t"] >= title["pad"]["t"] + 40


def dash_callback(app, output: str, values: dict[str, object]) -> tuple[int, dict]:
    """POST one callback as the page does, through Flask's test client: ``(HTTP status,
    response)``. ``output`` is the start of the callback's output key (``..experiment.options``),
    ``values`` its inputs and states by ``"<id>.<property>"`` (missing: None, as on first load)."""
    key = next(k for k in app.callback_map if k.startswith(output))
    callback = app.callback_map[key]
    outputs = [dict(zip(("id", "property"), o.rsplit(".", 1), strict=True)) for o in key.strip(".").split("...")]

    def props(items: list[dict]) -> list[dict]:
        return [{**i, "value": values.get(f"{i['id']}.{i['property']}")} for i in items]

    reply = app.server.test_client().post("/_dash-update-component", json={
        "output": key, "outputs": outputs if key.startswith("..") else outputs[0],
        "inputs": props(callback["inputs"]), "state": props(callback["state"]), "changedPropIds": list(values)})
    return reply.status_code, reply.get_json(silent=True) or {}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_run_is_listed_with_its_reason_and_the_rest_render(case, tmp_path):
    """The issue's cases (a list seed, a string total, 100 000 nested lists, config.json a
    directory, ``{"config": [..]}``): the dashboard starts, every callback answers 200, the
    broken run is listed ``malformed`` with its reason and left out of charts and tables,
    the others render as they would without it."""
    from simulations.dashboard import make_app

    root = tmp_path / "runs"
    for run_id, method in (("r1-fedprompt", "fedprompt"), ("r2-bbt-fed", "bbt-fed")):
        write_run(root, run_id, method, 0, [_round(0, 0.5), _round(1, 0.6), _round(2, 0.7)])
    clean = runs_table(RunStore(root))
    write_fn, reason = MALFORMED[case]
    write_fn(root)
    app = make_app(root)  # parses every record: a RecursionError here kept the dashboard from starting
    df = runs_table(RunStore(root)).set_index("run_id")
    assert df.loc["bad", "status"] == "malformed" and reason in df.loc["bad", "note"]
    # the others: exactly as before (value by value: with the broken run the seed column is of objects)
    assert df.drop(index="bad").reset_index().to_dict("records") == clean.to_dict("records")
    experiment = "demo · iid · 8 shots"
    # the experiment picker, first load and with every experiment ticked
    code, reply = dash_callback(app, "..experiment.options", {"version.data": "1"})
    assert code == 200 and reply["response"]["experiment"]["value"] == [experiment]
    everything = reply["response"]["experiment"]["options"]
    code, reply = dash_callback(app, "..experiment.options", {"version.data": "1", "experiment.value": everything})
    assert code == 200 and reply["response"]["seed-filter"]["options"] == [{"label": "0", "value": 0}]
    statuses = ["running", "finished", "failed", "stale", "malformed"]
    code, reply = dash_callback(app, "..runs.data", {"experiment.value": everything, "status-filter.value": statuses})
    rows = {r["run_id"]: r for r in reply["response"]["runs"]["data"]}
    assert code == 200 and rows["bad"]["status"] == "malformed" and reason in rows["bad"]["note"]
    code, reply = dash_callback(app, "..acc-bytes.figure", {
        "experiment.value": everything, "status-filter.value": statuses, "mode.value": "runs",
        "x-axis.value": "round", "log-x.value": [], "bytes-dir.value": "bytes"})
    assert code == 200
    drawn = {t["customdata"][0] for t in reply["response"]["acc-x"]["figure"]["data"] if t.get("customdata")}
    assert drawn == {"r1-fedprompt", "r2-bbt-fed"}  # the malformed run is never drawn
    assert sorted((r["method"], r["runs"]) for r in reply["response"]["compare"]["data"]) == [
        ("bbt-fed", 1), ("fedprompt", 1)]
    code, reply = dash_callback(app, "..detail-title", {"runs.active_cell": {"row": 0, "column": 0, "row_id": "bad"}})
    assert code == 200 and reason in json.loads(reply["response"]["detail-summary"]["children"])["note"]
    # its config as far as it is readable (none when config.json is the broken file)
    readable = RunStore(root).loaded(["bad"])[0]["cfg"]
    assert [r["key"] for r in reply["response"]["detail-config"]["data"]] == list(readable)
    # the compare runner's tables read the same records: the broken run is never counted
    from simulations.tables import compare_table, load_runs, one_run_per_seed

    assert set(compare_table(one_run_per_seed(load_runs(root)))["runs"]) == {1}


CHART_INPUTS = {"mode.value": "runs", "x-axis.value": "round", "log-x.value": [], "bytes-dir.value": "bytes",
                "status-filter.value": ["running", "finished", "failed", "stale", "malformed"]}


@pytest.mark.parametrize("number", ["1e400", "NaN", "-Infinity", str(10**400)])
def test_a_non_finite_number_in_a_round_line_never_breaks_a_chart(number, tmp_path):
    """Issue 45: a 1e400 in rounds.jsonl made every chart answer HTTP 500 (inf reached the
    figure). The line is a malformed line: the run is listed with a note, its other rounds
    drawn, and every chart callback answers 200 with finite numbers."""
    from simulations.dashboard import make_app

    root = tmp_path / "runs"
    write_run(root, "r1-fedprompt", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)],
              tail='{"round": 2, "global_accuracy": ' + number + ', "bytes_up": ' + number + "}\n")
    app = make_app(root)
    everything = ["demo · iid · 8 shots"]
    for x_axis in ("round", "bytes", "wall"):
        code, reply = dash_callback(app, "..acc-bytes.figure",
                                    {**CHART_INPUTS, "experiment.value": everything, "x-axis.value": x_axis})
        assert code == 200, (x_axis, code)
        figures = [v["figure"] for v in reply["response"].values() if "figure" in v]
        assert len(figures) == 7
        acc = next(t for t in reply["response"]["acc-x"]["figure"]["data"] if t.get("customdata"))
        assert acc["y"] == [0.5, 0.6]  # rounds 0 and 1; round 2's line is not read
        assert all(isinstance(v, (int, float)) and math.isfinite(v) for f in figures for t in f["data"]
                   for v in (t.get("x") or []) + (t.get("y") or []) if v is not None)
    code, reply = dash_callback(app, "..detail-title", {"runs.active_cell": {"row": 0, "column": 0,
                                                                              "row_id": "r1-fedprompt"}})
    assert code == 200 and [r["round"] for r in reply["response"]["detail-rounds"]["data"]] == [0, 1]
    row = runs_table(root).set_index("run_id").loc["r1-fedprompt"]
    assert row["status"] == "finished" and row["note"] == "1 malformed line(s) in rounds.jsonl"


def test_a_config_linked_outside_the_runs_is_never_shown(tmp_path):
    """Issue 45: a config.json symlinked to a file outside --runs was shown in the drill-down
    and the config diff. It is not read: the run is malformed, and nothing of the file
    reaches any callback's answer."""
    from simulations.dashboard import make_app

    from .test_records import _linked_config

    root = tmp_path / "runs"
    write_run(root, "good", "bbt-fed", 0, [_round(0, 0.5)])
    _linked_config(root)
    app = make_app(root)
    answers = [dash_callback(app, "..config-diff.data", {"runs.selected_row_ids": ["good", "bad"]}),
               dash_callback(app, "..detail-title", {"runs.active_cell": {"row": 0, "column": 0, "row_id": "bad"}}),
               dash_callback(app, "..runs.data", {"experiment.value": ["demo · iid · 8 shots"],
                                                  "status-filter.value": CHART_INPUTS["status-filter.value"]})]
    for code, reply in answers:
        assert code == 200 and SECRET not in json.dumps(reply) and "api-token" not in json.dumps(reply)
    detail = json.loads(answers[1][1]["response"]["detail-summary"]["children"])
    assert "config.json resolves outside the records folder: not read" in detail["note"]
    assert answers[1][1]["response"]["detail-config"]["data"] == []
    assert "api-token" not in config_diff(root, ["good", "bad"]).index
    assert runs_table(root).set_index("run_id").loc["bad", "status"] == "malformed"


def test_refresh_after_a_new_round_with_50_runs_of_50_rounds(tmp_path):
    """Each refresh after a round arrives renders every method's line (its speed is a
    benchmark's to measure, not a test's: timings on shared cores are noise)."""
    from simulations.dashboard import render

    runs_dir = write_experiment(tmp_path / "results", "big")
    methods = ["fedprompt", "bbt-fed", "fedbpt", "feddls", "fedavg"]
    for i in range(50):
        rounds = [_round(r, 0.5 + 0.4 * r / 50 + 0.01 * (i % 7), 1000 + i, 2000,
                         {str(c): 0.5 + 0.01 * c for c in range(10)}) for r in range(51)]
        write_run(runs_dir, f"run{i:02d}", methods[i % 5], i // 5, rounds)
    store = RunStore(tmp_path / "results")
    args = (["big"], None, None, ["running", "finished", "failed"])
    render(store, *args, "mean", "round", False, "bytes")  # first load parses everything
    for i, mode in enumerate(["mean", "runs", "mean"]):
        with open(runs_dir / f"run{i:02d}" / "rounds.jsonl", "a") as fh:  # a round arrives
            fh.write(json.dumps(_round(51, 0.9)) + "\n")
        assert store.version()
        figs, table = render(store, *args, mode, "bytes", True, "bytes")
        json.dumps(figs)  # what Dash sends
        assert len(table) == 5
    assert len([t for t in figs[1]["data"] if t["meta"] == "line"]) == 5  # one mean line per method


def test_the_compare_table_shows_gpu_memory_only_where_a_client_ran_on_a_gpu(tmp_path):
    """``peak client GPU MB``: the largest ``client_peak_gpu_mb`` of a run, mean over seeds;
    a table of CPU runs has no such column (as every all-empty column)."""
    from simulations.tables import compare_table, load_runs, one_run_per_seed

    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    write_run(cpu, "c0", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)])
    for seed, peaks in ((0, (1000.0, 1500.0)), (1, (2500.0, 900.0))):
        write_run(gpu, f"g{seed}", "fedprompt", seed, [_round(0, 0.5), _round(1, 0.6, client_peak_gpu_mb=peaks[0]),
                                                       _round(2, 0.7, client_peak_gpu_mb=peaks[1])])
    assert "peak client GPU MB" not in compare_table(one_run_per_seed(load_runs(cpu))).columns
    table = compare_table(one_run_per_seed(load_runs(gpu)))
    assert table["peak client GPU MB"].tolist() == ["2,000 ± 707"]  # runs' peaks 1,500 and 2,500


# ------------------------------------------------------------------- issue 47: the existing views fixed
def test_a_band_of_one_point_is_an_error_bar_of_the_bands_extent(tmp_path):
    """One-round runs on a log bytes axis are one point each (round 0 sent nothing): its
    ± std over seeds was a filled band of one point, which draws nothing. It is an error bar
    now, half-length the sample std; a band of several points stays a filled area."""
    from simulations.dashboard import figure

    root = tmp_path / "runs"
    write_run(root, "a0", "bbt-fed", 0, [_round(0, 0.5), _round(1, 0.6)])
    write_run(root, "a1", "bbt-fed", 1, [_round(0, 0.5), _round(1, 0.7)])
    series = round_series(root)
    (line,) = chart_lines(series, CHARTS["accuracy"], "bytes", "mean", log_x=True)
    assert line.x == [1056.0] and line.y == [pytest.approx(0.65)]
    fig = figure([line], CHARTS["accuracy"], "bytes", True, ["demo · iid · 8 shots"])
    (trace,) = fig["data"]  # no band trace beside it
    std = math.sqrt(((0.6 - 0.65) ** 2 + (0.7 - 0.65) ** 2) / 1)  # ddof=1 over 2 seeds: 0.0707
    assert trace["meta"] == "line" and trace["error_y"]["type"] == "data"
    assert trace["error_y"]["array"] == [pytest.approx(std)] and trace["error_y"]["arrayminus"] == [pytest.approx(std)]
    # against the round the same runs are two points: a band, no error bar
    (line,) = chart_lines(series, CHARTS["accuracy"], "round", "mean")
    fig = figure([line], CHARTS["accuracy"], "round", False, ["demo · iid · 8 shots"])
    assert [t["meta"] for t in fig["data"]] == ["band", "line"] and "error_y" not in fig["data"][1]
    # one run's clients' min-max around their mean, one point: an asymmetric bar
    write_run(tmp_path / "one", "c", "fedprompt", 0,
              [_round(0, 0.5), _round(1, 0.6, clients={"0": 0.5, "1": 0.6, "2": 0.9})])
    (line,) = chart_lines(round_series(tmp_path / "one"), CHARTS["client-accuracy"], "bytes", "runs", log_x=True)
    (trace,) = figure([line], CHARTS["client-accuracy"], "bytes", True, [line.experiment])["data"]
    assert trace["y"] == [pytest.approx(2 / 3)]  # mean of 0.5, 0.6, 0.9
    assert trace["error_y"]["array"] == [pytest.approx(0.9 - 2 / 3)]  # up to the best client
    assert trace["error_y"]["arrayminus"] == [pytest.approx(2 / 3 - 0.5)]  # down to the worst


def test_log_axes_label_decades_or_1_2_5_only():
    """Plotly's own log ticks label every digit 2-9 once a range is under two decades; the
    axes label decades (3 or more in range), else 1-2-5, else every digit (a narrow range),
    the rest as unlabelled minor ticks."""
    from simulations.dashboard_data import log_ticks, short_number

    # 871 to 60,200 (1.84 decades): 2 decades in range, six 1-2-5 values; the other digits
    # in range (900 below 1k, 60k above 50k too) unlabelled
    major, minor = log_ticks(871, 60_200)
    assert major == [1e3, 2e3, 5e3, 1e4, 2e4, 5e4]
    assert minor == [900, 3e3, 4e3, 6e3, 7e3, 8e3, 9e3, 3e4, 4e4, 6e4]
    major, minor = log_ticks(1e4, 2e9)  # 6 decades: those labelled, digits 2-9 minor
    assert major == [1e4, 1e5, 1e6, 1e7, 1e8, 1e9]
    assert len(minor) == 5 * 8 + 1 and minor[0] == 2e4 and minor[-2:] == [9e8, 2e9]
    major, minor = log_ticks(1, 1e20)  # 21 decades > 8: every 3rd (exponents 0, 3, ... 18)
    assert major == [10.0 ** k for k in range(0, 19, 3)]
    assert minor == [10.0 ** k for k in range(21) if k % 3]
    assert log_ticks(2e4, 6e4) == ([2e4, 3e4, 4e4, 5e4, 6e4], [])  # under a factor of 5: every digit
    assert log_ticks(0.25, 0.45) == ([0.3, 0.4], [])  # 3 * 0.1 is 0.30000000000000004 as a float
    assert log_ticks(24_000, 26_000) == ([], [])  # inside one digit's step: Plotly's ticks
    assert log_ticks(0, 10) == ([], []) and log_ticks(5, 1) == ([], [])
    assert [short_number(v) for v in (0.5, 1, 20, 999, 999.7, 1e3, 2e4, 1.5e6, 2e9, 123_456, 1e21)] == [
        "0.5", "1", "20", "999", "1k", "1k", "20k", "1.5M", "2G", "123k", "1e+21"]
    from simulations.dashboard import figure
    from simulations.dashboard_data import Line

    lines = [Line("e1", "m", "m", "#636EFA", [1056, 24832, 49664], [0.5, 0.6, 0.7]),
             Line("e2", "m", "m", "#636EFA", [1e9], [0.5])]
    layout = figure(lines, CHARTS["accuracy"], "bytes", True, ["e1", "e2"])["layout"]
    left, right = layout["xaxis"], layout["xaxis2"]  # each subplot its own range
    lo, hi = math.log10(1056), math.log10(49664)
    assert left["range"] == pytest.approx([lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)])  # 871 to 60,200
    assert left["ticktext"] == ["1k", "2k", "5k", "10k", "20k", "50k"] and left["tickvals"][0] == 1e3
    assert left["minor"]["tickvals"][:2] == [900, 3e3] and left["tickmode"] == "array"
    # one value: a factor of 2 either side (the narrowest axis, a factor of 4): 500M to 2G
    assert right["range"] == pytest.approx([9 - math.log10(2), 9 + math.log10(2)])
    assert right["ticktext"] == ["500M", "1G", "2G"] and right["minor"]["tickvals"] == [6e8, 7e8, 8e8, 9e8]


def test_one_legend_on_the_top_chart_naming_every_line(tmp_path):
    """Legends repeated on all seven charts; now the top chart's is the page's one legend:
    every other figure has none, and a line only the grid draws (a run with round 0 only:
    no point on a log bytes axis) still has its entry there, with no point of its own."""
    from simulations.dashboard import render

    root = tmp_path / "runs"
    write_run(root, "b0", "bbt-fed", 0, [_round(0, 0.5), _round(1, 0.6), _round(2, 0.7)])
    write_run(root, "b1", "bbt-fed", 1, [_round(0, 0.5), _round(1, 0.65), _round(2, 0.7)])
    write_run(root, "p0", "fedprompt", 0, [_round(0, 0.5)])
    figs, _ = render(RunStore(root), ["demo · iid · 8 shots"], None, None, ["finished"], "mean", "round", False,
                     "bytes")
    top, grid = figs[0], figs[1:]
    assert top["layout"]["showlegend"] is True
    entries = [t["name"] for t in top["data"] if t["showlegend"]]
    assert entries == ["bbt-fed (n=2)", "fedprompt"]  # each once
    placeholder = next(t for t in top["data"] if t["name"] == "fedprompt")
    assert placeholder["meta"] == "legend" and placeholder["x"] == [None] and placeholder["y"] == [None]
    assert placeholder["line"]["color"] == color_of("fedprompt")
    for fig in grid:
        assert fig["layout"]["showlegend"] is False and not any(t["showlegend"] for t in fig["data"])
    drawn = {t["name"] for fig in grid for t in fig["data"] if t["meta"] == "line"}
    assert drawn == {"bbt-fed (n=2)", "fedprompt"} and drawn <= set(entries)


def test_the_grid_leaves_out_the_chart_the_top_one_already_is(tmp_path):
    """With x = the bytes picked on top (log), the grid's first chart was the top chart
    again: it is hidden; any other x, direction or a linear scale is a different chart."""
    from simulations.dashboard import make_app, repeats_top

    assert repeats_top("bytes", True, "bytes") and repeats_top("bytes-up", True, "bytes-up")
    assert not repeats_top("bytes", False, "bytes")  # the same data on a linear axis: kept
    assert not repeats_top("bytes-up", True, "bytes") and not repeats_top("round", False, "bytes")
    root = tmp_path / "runs"
    write_run(root, "r", "bbt-fed", 0, [_round(0, 0.5), _round(1, 0.6)])
    app = make_app(root)
    for x_axis, log, bytes_dir, hidden in (("bytes", ["log"], "bytes", True), ("bytes", [], "bytes", False),
                                           ("round", [], "bytes", False), ("bytes-down", ["log"], "bytes-down", True),
                                           ("bytes-down", ["log"], "bytes", False)):
        code, reply = dash_callback(app, "..acc-bytes.figure", {
            **CHART_INPUTS, "experiment.value": ["demo · iid · 8 shots"], "x-axis.value": x_axis,
            "log-x.value": log, "bytes-dir.value": bytes_dir})
        assert code == 200
        assert reply["response"]["acc-x"]["style"] == ({"display": "none"} if hidden else {}), (x_axis, log, bytes_dir)


def test_memory_queries_and_wall_time_axes_start_at_zero():
    """Client memory of 900 and 980 MB drawn from 820 MB looked like twice as much; amounts
    compared as ratios start at 0, accuracy and loss (a few points apart) do not."""
    from simulations.dashboard import figure
    from simulations.dashboard_data import Line

    assert {k for k, c in CHARTS.items() if c.from_zero} == {"memory", "queries", "wall"}
    lines = [Line("e1", "m", "m", "#636EFA", [0, 1], [900.0, 980.0]), Line("e2", "m", "m", "#636EFA", [0, 1], [1, 2])]
    layout = figure(lines, CHARTS["memory"], "round", False, ["e1", "e2"])["layout"]
    assert layout["yaxis"]["rangemode"] == "tozero" and layout["yaxis2"]["rangemode"] == "tozero"
    layout = figure(lines, CHARTS["accuracy"], "round", False, ["e1", "e2"])["layout"]
    assert "rangemode" not in layout["yaxis"] and "rangemode" not in layout["yaxis2"]


def test_a_runs_config_table_lists_the_keys_that_differ_first(tmp_path):
    """The drill-down's config was a JSON dump; it is a key/value table, the keys whose values
    differ across the compared runs first (in the configs' order), with the other values."""
    from simulations.dashboard_data import CONFIG_COLUMNS, config_table

    root = tmp_path / "runs"
    rounds = [_round(0, 0.5)]
    write_run(root, "a", "bbt-fed", 0, rounds, **{"bbt-fed.popsize": 4, "bbt-fed.sigma0": 1.0, "alpha": 1})
    write_run(root, "b", "bbt-fed", 1, rounds, **{"bbt-fed.popsize": 4, "bbt-fed.sigma0": 0.5, "alpha": 1.0})
    write_run(root, "c", "fedprompt", 0, rounds, **{"fedprompt.lr": 0.01, "alpha": 1})
    bad = root / "zz-broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    table = config_table(root, "a", ["b", "c", "zz-broken", "nope"])  # a broken or unknown run is not compared
    assert list(table.columns) == CONFIG_COLUMNS
    rows = [tuple(r) for r in table.itertuples(index=False)]
    assert rows == [
        ("method", "bbt-fed", "fedprompt"),  # b's bbt-fed is a's own: only c's value
        ("seed", "0", "1"),
        ("bbt-fed.popsize", "4", ABSENT),  # c lacks it
        ("bbt-fed.sigma0", "1.0", f"0.5, {ABSENT}"),
        ("alpha", "1", "1.0"),  # 1 and 1.0 differ, as in the config diff
        ("fedprompt.lr", ABSENT, "0.01"),  # a key a lacks that another run has
        ("dataset", "demo", ""), ("partition", "iid", ""), ("num-server-rounds", "2", ""),
        ("shots-per-class", "8", ""),
    ]
    # compared with b alone: fewer keys differ; alone: the config in its own order
    assert list(config_table(root, "a", ["b"])["key"])[:3] == ["seed", "bbt-fed.sigma0", "alpha"]
    alone = config_table(root, "a")
    assert list(alone["key"]) == ["method", "seed", "dataset", "partition", "num-server-rounds", "shots-per-class",
                                  "bbt-fed.popsize", "bbt-fed.sigma0", "alpha"] and (alone["others"] == "").all()
    assert config_table(root, "nope").empty and config_table(root, "zz-broken", ["a"]).empty


def test_the_drill_down_compares_with_the_ticked_else_the_listed_runs(tmp_path):
    from simulations.dashboard import make_app

    root = tmp_path / "runs"
    write_run(root, "a", "bbt-fed", 0, [_round(0, 0.5)], **{"bbt-fed.sigma0": 1.0})
    write_run(root, "b", "bbt-fed", 1, [_round(0, 0.5)], **{"bbt-fed.sigma0": 1.0})
    write_run(root, "c", "bbt-fed", 0, [_round(0, 0.5)], **{"bbt-fed.sigma0": 0.5})
    app = make_app(root)
    cell = {"runs.active_cell": {"row": 0, "column": 0, "row_id": "a"}}
    listed = [{"run_id": i, "status": "finished"} for i in ("a", "b", "c")] + [{"run_id": "x", "status": "malformed"}]
    code, reply = dash_callback(app, "..detail-title",
                                {**cell, "runs.data": listed, "runs.selected_row_ids": ["a", "b"]})
    assert code == 200 and reply["response"]["detail-config-note"]["children"] == (
        "Its config: 1 key differs from the 1 other ticked run(s), listed first.")
    assert reply["response"]["detail-config"]["data"][0] == {"key": "seed", "value": "0", "others": "1"}
    code, reply = dash_callback(app, "..detail-title", {**cell, "runs.data": listed})  # nothing ticked
    assert reply["response"]["detail-config-note"]["children"] == (
        "Its config: 2 keys differ from the 2 other listed run(s), listed first.")  # the malformed one aside
    assert [r["key"] for r in reply["response"]["detail-config"]["data"][:2]] == ["seed", "bbt-fed.sigma0"]


def test_the_run_list_says_once_what_every_run_shares(tmp_path):
    """At 1,280 px the run list's 18 columns did not fit: a column with one value in every
    listed run (dataset, partition, experiment, status) is said once above the table, the
    method where it is every run's label and all-empty columns are left out."""
    from simulations.dashboard import make_app, shared_line, shared_values

    import pandas as pd

    df = pd.DataFrame({"a": [1, 1], "b": [1, 2], "c": [None, None], "d": ["x", "x"]})
    assert shared_values(df, ["a", "b", "c", "d", "zz"]) == {"a": 1, "d": "x"}
    assert shared_values(df.iloc[:0], ["a"]) == {} and shared_line("All", {}) == ""
    root = tmp_path / "runs"
    write_run(root, "p0", "fedprompt", 0, [_round(0, 0.5)])
    write_run(root, "p1", "fedprompt", 1, [_round(0, 0.5)])
    write_run(root, "b0", "bbt-fed", 0, [_round(0, 0.5)])
    bad = root / "zz-broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    app = make_app(root)
    code, reply = dash_callback(app, "..runs.data", {"experiment.value": ["demo · iid · 8 shots"],
                                                     "status-filter.value": ["finished"]})
    assert code == 200
    answer = reply["response"]
    assert answer["runs-shared"]["children"] == (
        "All 3 listed runs (1 malformed aside): experiment demo · iid · 8 shots; dataset demo; partition iid")
    shown = [c["id"] for c in answer["runs"]["columns"]]
    assert shown == ["run_id", "label", "seed", "status", "rounds_done", "final_accuracy", "best_accuracy",
                     "total_bytes_up", "total_bytes_down", "note"]  # status: the malformed run's differs
    assert {c["id"]: c["name"] for c in answer["runs"]["columns"]}["final_accuracy"] == "final acc"
    assert len(answer["runs"]["data"]) == 4 and all("dataset" in r for r in answer["runs"]["data"])


# ------------------------------------------------------------------- issue 55: bytes in units, every column explained
def test_bytes_show_in_units_that_keep_small_and_large_counts_readable():
    """``MB up`` to 2 decimals read ``0`` for bbt-fed's 528 B a client-round: a byte count
    takes the largest unit (KB = 1,024 B, as simulations/tables.py and the records' MB) that
    keeps its number under 1,000, to 3 significant figures."""
    from simulations.dashboard_data import BYTE_STEP, byte_text

    assert BYTE_STEP == 1024  # KB = 1,024 B, as tables.py's "KB up / client-round" (bytes / 1024)
    cases = {0: "0 B", 1: "1 B", 528: "528 B", 999: "999 B", 999.4: "999 B",
             # 1,000 to 1,023 B: under 1 KB, but 4 digits as bytes: shown in KB, 3 figures
             999.6: "0.976 KB", 1000: "0.977 KB", 1023: "0.999 KB", 1024: "1.00 KB", 1025: "1.00 KB",
             12_390: "12.1 KB", 12_416: "12.1 KB", 102_400: "100 KB", 1_023_000: "999 KB", 1_023_900: "0.976 MB",
             2**20: "1.00 MB", 2_495_611: "2.38 MB", 93_008_691: "88.7 MB", 1_406_601_789: "1.31 GB",
             5 * 2**40: "5.00 TB", 264.5: "264 B", 0.5: "0.5 B", 1e-13: "0 B", -2048: "-2.00 KB"}
    assert {v: byte_text(v) for v in cases} == cases
    import numpy as np

    assert byte_text(np.int64(528)) == "528 B" and byte_text(np.float64(12_390.0)) == "12.1 KB"
    for nothing in (None, float("nan"), float("inf"), -float("inf"), True, "528", [1]):
        assert byte_text(nothing) == "", nothing


def test_a_bytes_column_sorts_by_the_count_not_the_text(tmp_path):
    """The run list's bytes are text (``528 B``); DataTable's own sort would order them as
    text (``12.1 KB`` < ``2.38 MB`` < ``528 B``): the list sorts in its callback
    (``sort_action="custom"``), by the numbers, before they become text."""
    import pandas as pd

    from simulations.dashboard import make_app
    from simulations.dashboard_data import sort_rows

    df = pd.DataFrame({"run_id": ["kb", "b", "mb", "none", "gb"],
                       "total_bytes_up": [12_390.0, 528.0, 2_495_611.0, None, 1.4e9],
                       "label": ["b", "A", "c", "", None]})
    assert sort_rows(df, [{"column_id": "total_bytes_up", "direction": "asc"}])["run_id"].tolist() == [
        "b", "kb", "mb", "gb", "none"]  # an empty cell last, either way
    assert sort_rows(df, [{"column_id": "total_bytes_up", "direction": "desc"}])["run_id"].tolist() == [
        "gb", "mb", "kb", "b", "none"]
    assert sort_rows(df, [{"column_id": "label", "direction": "asc"}])["run_id"].tolist() == [
        "b", "kb", "mb", "none", "gb"]  # text by text, "" and None last in the rows' order
    assert sort_rows(df, None) is df and sort_rows(df, [{"column_id": "nope"}]) is df
    root = tmp_path / "runs"
    for run_id, up in (("r-kb", 12_390), ("r-b", 528), ("r-mb", 2_495_611)):
        write_run(root, run_id, "bbt-fed", 0, [_round(0, 0.5), _round(1, 0.6, up, up)])
    app = make_app(root)
    inputs = {"experiment.value": ["demo · iid · 8 shots"], "status-filter.value": ["finished"]}
    for direction, order in (("asc", ["r-b", "r-kb", "r-mb"]), ("desc", ["r-mb", "r-kb", "r-b"])):
        code, reply = dash_callback(app, "..runs.data", {
            **inputs, "runs.sort_by": [{"column_id": "total_bytes_up", "direction": direction}]})
        assert code == 200
        rows = reply["response"]["runs"]["data"]
        assert [r["run_id"] for r in rows] == order
        assert {r["run_id"]: r["total_bytes_up"] for r in rows} == {"r-b": "528 B", "r-kb": "12.1 KB",
                                                                     "r-mb": "2.38 MB"}
        # the tooltips of the notes follow the rows
        assert [t.get("run_id", {}).get("value") for t in reply["response"]["runs"]["tooltip_data"]] == order
    columns = {c["id"]: c for c in reply["response"]["runs"]["columns"]}
    assert columns["total_bytes_up"]["name"] == "bytes up" and "type" not in columns["total_bytes_up"]
    assert columns["final_accuracy"]["type"] == "numeric"
    # the comparison table and a run's rounds show bytes the same way
    code, reply = dash_callback(app, "..acc-bytes.figure", {**CHART_INPUTS, **inputs})
    rows = {r["method"]: r for r in reply["response"]["compare"]["data"]}
    # mean 836,176 B = 816.6 KB, sample std 1,437,125 B = 1.371 MB over the runs' 528 B, 12,390 B, 2,495,611 B
    assert rows["bbt-fed"]["bytes up (total)"] == "817 KB ± 1.37 MB"
    assert rows["bbt-fed"]["bytes up / client-round"] == "408 KB ± 702 KB"  # 2 clients a round: half of it
    code, reply = dash_callback(app, "..detail-title", {"runs.active_cell": {"row": 0, "column": 0, "row_id": "r-b"}})
    rounds = reply["response"]["detail-rounds"]["data"]
    assert [(r["bytes_up"], r["bytes_down"]) for r in rounds] == [("0 B", "0 B"), ("528 B", "528 B")]


def _every_column(tmp_path) -> dict[str, list[str]]:
    """Every column id each of the page's tables can show, by table: the run list's, the
    comparison's (every column simulations.tables can give, as named here), a run's rounds
    (a method metric too), its config, the config diff's, the per-client table's."""
    from simulations.dashboard import CONFIG_TABLE_COLUMNS
    from simulations.dashboard_data import COMPARE_BYTES, RUN_COLUMNS
    from simulations.dashboard_explore import SPREAD_COLUMNS
    from simulations.tables import COLUMNS

    root = tmp_path / "runs"
    write_run(root, "r", "fedbpt", 0, [_round(0, 0.5), _round(1, 0.6, dropped=[{"client": "3", "reason": "x"}],
                                                                method_metrics={"sigma_prime": 0.4},
                                                                train_loss=0.3, round_time_s=2.0)])
    compare = [COMPARE_BYTES[c][1] if c in COMPARE_BYTES else name for c, name in COLUMNS.items()]
    return {
        "runs": list(RUN_COLUMNS),
        "compare": ["method", "dataset", "partition", "runs", *compare, *comparison(root).columns],
        "rounds": list(run_detail(root, "r")[0].columns),
        "config": [c["id"] for c in CONFIG_TABLE_COLUMNS],
        "config-diff": ["key", "20261122-123011-fedprompt-sst2-s0", "r"],
        "clients": list(SPREAD_COLUMNS),
    }


def test_every_column_of_every_table_says_what_it_is(tmp_path):
    """``P acc``, ``NP acc`` were explained nowhere: every column any table can show has a
    help text (one definition per column, its header's tooltip), with its unit where it has
    one; a new column without one fails here."""
    from simulations.dashboard_data import COLUMN_HELP, column_help

    tables = _every_column(tmp_path)
    assert "m:sigma_prime" in tables["rounds"] and "bytes up (total)" in tables["compare"]
    missing = {t: [c for c in cols if not column_help(c, t)] for t, cols in tables.items()}
    assert not any(missing.values()), missing
    # one definition, reused: the run list's final_accuracy is the comparison's "final acc"
    assert column_help("final acc", "compare").startswith(COLUMN_HELP["final_accuracy"])
    assert column_help("bytes up (total)", "compare").startswith(COLUMN_HELP["total_bytes_up"])
    assert column_help("P acc", "compare").startswith(COLUMN_HELP["p_accuracy"])
    assert "Here: the mean ± std" in column_help("final acc", "compare")  # a mean over the row's runs
    assert "Here:" not in column_help("runs", "compare") and "Here:" not in column_help("final_accuracy", "runs")
    # what the issue asks them to say
    assert "participating clients" in COLUMN_HELP["p_accuracy"] and "post-tuning" in COLUMN_HELP["p_accuracy"]
    assert "held-out" in COLUMN_HELP["np_accuracy"] and "server's test split" in COLUMN_HELP["final_accuracy"]
    for column in ("total_bytes_up", "total_bytes_down", "bytes_up", "bytes_down"):
        assert "measured serialized" in COLUMN_HELP[column] and "KB = 1,024 B" in COLUMN_HELP[column]
    assert column_help("m:sigma_prime", "rounds").startswith("sigma_prime: ")
    assert column_help("model_queries", "rounds") != column_help("model queries", "compare")  # a round's, a run's
    assert column_help("nope", "runs") is None and column_help("nope", "compare") is None


def test_every_table_on_the_page_carries_its_header_help(tmp_path):
    """The help reaches the page: each table's ``tooltip_header`` names every column it shows,
    and a line under the run list and the comparison table says to hover a header."""
    from simulations.dashboard import HEADER_HELP, make_app

    root = tmp_path / "runs"
    write_run(root, "a", "fedbpt", 0, [_round(0, 0.5), _round(1, 0.6, method_metrics={"sigma_prime": 0.4})])
    write_run(root, "b", "fedbpt", 1, [_round(0, 0.5), _round(1, 0.7)], holdout="3")
    app = make_app(root)
    inputs = {"experiment.value": ["demo · iid · 8 shots"], "status-filter.value": ["finished"]}
    replies = [dash_callback(app, "..runs.data", inputs)[1]["response"]["runs"],
               dash_callback(app, "..acc-bytes.figure", {**CHART_INPUTS, **inputs})[1]["response"]["compare"],
               dash_callback(app, "..detail-title", {"runs.active_cell": {"row": 0, "column": 0, "row_id": "a"}}
                             )[1]["response"]["detail-rounds"],
               dash_callback(app, "..config-diff.data", {"runs.selected_row_ids": ["a", "b"]}
                             )[1]["response"]["config-diff"]]
    for table in replies:
        ids = [c["id"] for c in table["columns"]]
        assert ids and set(table["tooltip_header"]) == set(ids), (ids, table["tooltip_header"])
        assert all(isinstance(v, str) and len(v) > 20 for v in table["tooltip_header"].values())
    assert "holdout" in replies[0]["tooltip_header"] and "m:sigma_prime" in replies[2]["tooltip_header"]
    def find(component, wanted: str):
        if getattr(component, "id", None) == wanted:
            return component
        children = getattr(component, "children", None)
        for child in children if isinstance(children, list) else [children] if children is not None else []:
            if (hit := find(child, wanted)) is not None:
                return hit
        return None

    for table_id, columns in (("detail-config", ["key", "value", "others"]),
                              ("client-table", ["round", "clients", "min", "median", "max", "worst_client"])):
        assert set(find(app.layout, table_id).tooltip_header) == set(columns), table_id
    assert find(app.layout, "runs").sort_action == "custom"
    helps = [c for card in ("card-runs", "card-compare") for c in find(app.layout, card).children
             if getattr(c, "className", None) == "table-help"]
    assert len(helps) == 2 and all(h.children == HEADER_HELP for h in helps)


def test_no_dashboard_module_uses_another_modules_private_names():
    """dashboard_explore drew with ``page._rgba``, ``page._card``, ``page._filter_ids``: they
    are public now (``rgba``, ``card``, ``filter_ids``), and no dashboard module reaches into
    another's ``_private`` names (an attribute of the page module, or an import)."""
    import ast

    from ..conftest import REPO

    for name in ("dashboard.py", "dashboard_data.py", "dashboard_explore.py"):
        tree = ast.parse((REPO / "simulations" / name).read_text())
        private = [f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and isinstance(n.value, ast.Name) and n.value.id == "page" and n.attr.startswith("_")]
        private += [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith(
            ("simulations", "fedtext")) for a in n.names if a.name.startswith("_")]
        assert not private, (name, private)
    from simulations import dashboard

    assert all(callable(getattr(dashboard, n)) for n in ("rgba", "card", "filter_ids"))


def test_a_run_on_random_weights_shows_no_accuracy_anywhere(tmp_path, capsys):
    """weights=random measures bytes, memory and time; its accuracy is a random model's: what
    shows results (the compare tables, simulations.status, the dashboard's store) shows it as
    unknown, with a note, while its bytes stay; the records and load_run keep what was written."""
    from fedtext.records.reader import RANDOM_WEIGHTS_NOTE, load_run, without_accuracy
    from simulations import status
    from simulations.tables import run_rows

    root = tmp_path / "runs"
    rounds = [_round(0, 0.5), _round(1, 0.9, 1000, 1000, {"0": 0.8}), _round(2, 0.95, 1000, 1000)]
    write_run(root, "r-random", "fedprompt", 0, rounds, weights="random", model="roberta-large")
    write_run(root, "r-pretrained", "fedprompt", 0, rounds, weights="pretrained")
    run = load_run(root / "r-random", root)
    assert run["random_weights"] and not load_run(root / "r-pretrained", root)["random_weights"]
    assert run["summary"]["final_accuracy"] == 0.95  # the record as written (resume reads it so)
    shown = without_accuracy(run)
    assert shown["summary"]["final_accuracy"] is None and shown["summary"]["total_bytes_up"] == 2000
    assert all(r["global_accuracy"] is None and r["client_accuracy"] == {} for r in shown["rounds"])
    assert run["rounds"][1]["global_accuracy"] == 0.9  # without_accuracy copies, never edits the run
    table = run_rows([run, load_run(root / "r-pretrained", root)]).set_index("run_id")
    assert math.isnan(table.loc["r-random", "final_accuracy"]) or table.loc["r-random", "final_accuracy"] is None
    assert table.loc["r-pretrained", "final_accuracy"] == 0.95
    assert table.loc["r-random", "mb_up"] == table.loc["r-pretrained", "mb_up"] > 0  # costs stay
    df = runs_table(RunStore(root)).set_index("run_id")
    assert df.loc["r-pretrained", "final_accuracy"] == 0.95 and df.loc["r-random", "total_bytes_up"] == 2000
    assert df.loc["r-random", "final_accuracy"] is None or math.isnan(df.loc["r-random", "final_accuracy"])
    assert RANDOM_WEIGHTS_NOTE in df.loc["r-random", "note"] and RANDOM_WEIGHTS_NOTE not in df.loc["r-pretrained", "note"]
    series = round_series(RunStore(root)).set_index("run_id")  # what the charts draw
    assert series.loc["r-random", "global_accuracy"].isna().all()
    assert series.loc["r-pretrained", "global_accuracy"].tolist() == [0.5, 0.9, 0.95]
    status.main([str(root), "--last", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert any("r-random" in line and "acc - (random weights)" in line for line in lines)
    assert any("r-pretrained" in line and "acc 0.950" in line for line in lines)


def test_the_round_line_of_a_random_weight_run_prints_no_accuracy():
    from fedtext.records.reader import progress_line

    r = {**_round(1, 0.9, 1000, 1000, {"0": 0.8}), "client_accuracy_mean": 0.8, "global_loss": 0.4,
         "round_time_s": 1.0}
    line = progress_line(r, 2, random_weights=True)
    assert "acc - (random weights)" in line and "0.900" not in line and "clients mean" not in line
    assert "up 1.0 KB" in line and "loss 0.400" in line  # its costs and loss stay
    assert "acc 0.900" in progress_line(r, 2) and "clients mean 0.800" in progress_line(r, 2)


# ------------------------------------------------------------------- issue 59: the privacy spent
def _dp_round(i, acc, eps, mode="central"):
    return _round(i, acc, privacy={"mode": mode, "epsilon": eps, "delta": 1e-5, "noise_multiplier": 1.1})


def test_the_compare_table_and_the_run_list_show_the_privacy_spent(tmp_path):
    """A DP run's ε was shown nowhere but the round line: the compare table has ``ε (δ)``,
    the mean ± std of its runs' ε at their δ, ``∞`` for a run without noise, ``-`` for a
    row without DP; a table without DP has no such column (committed tables unchanged). The
    run list has ε (a number to sort by, ``inf`` without noise) and δ."""
    from simulations.dashboard_data import epsilon_text
    from simulations.tables import compare_table, load_runs, one_run_per_seed

    plain, mixed = tmp_path / "plain", tmp_path / "mixed"
    write_run(plain, "p0", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)])
    assert "ε (δ)" not in compare_table(one_run_per_seed(load_runs(plain))).columns
    write_run(mixed, "a-p0", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)])
    for seed, eps in ((0, 2.0), (1, 3.0)):
        write_run(mixed, f"b-dp{seed}", "fedprompt", seed, [_round(0, 0.5), _dp_round(1, 0.6, eps / 2),
                                                             _dp_round(2, 0.6, eps)], **{"run-name": "dp"})
    write_run(mixed, "c-nonoise", "fedprompt", 0, [_round(0, 0.5), _dp_round(1, 0.6, None, "local")],
              **{"run-name": "nonoise"})
    table = compare_table(one_run_per_seed(load_runs(mixed))).set_index("method")
    assert table["ε (δ)"].to_dict() == {"fedprompt": "-", "dp": "2.50 ± 0.71 (δ 1e-05)", "nonoise": "∞ (δ 1e-05)"}
    runs = runs_table(mixed).set_index("run_id")
    assert runs.loc["b-dp1", "epsilon"] == 3.0 and runs.loc["b-dp1", "dp_delta"] == 1e-5
    assert runs.loc["c-nonoise", "epsilon"] == math.inf and math.isnan(runs.loc["a-p0", "epsilon"])
    assert [epsilon_text(runs.loc[i, "epsilon"]) for i in ("b-dp0", "c-nonoise", "a-p0")] == ["2.00", "∞", ""]
    assert runs_table(plain)["epsilon"].isna().all()  # the run list leaves out a column without values


def test_the_privacy_spent_is_an_x_axis_of_dp_runs_only(tmp_path):
    """Issue 69: accuracy against ε. A DP run's rounds give x = 0 at round 0 (nothing released) and
    each round's cumulative ε after; a run without DP and a DP round without noise (no bound) give
    no point, so the chart leaves them out rather than drawing them at ε = 0."""
    write_run(tmp_path, "dp", "fedprompt", 0, [_round(0, 0.5), _dp_round(1, 0.6, 1.25), _dp_round(2, 0.7, 2.5)],
              **{"run-name": "dp"})
    write_run(tmp_path, "plain", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)])
    write_run(tmp_path, "nonoise", "fedprompt", 1, [_round(0, 0.5), _dp_round(1, 0.6, None, "local")],
              **{"run-name": "nonoise"})
    series = round_series(tmp_path).set_index("run_id")
    assert series.loc["dp", "epsilon"].tolist() == [0.0, 1.25, 2.5]
    assert series.loc["plain", "epsilon"].isna().all()
    assert series.loc["nonoise", "epsilon"].tolist()[0] == 0.0 and math.isnan(series.loc["nonoise", "epsilon"].tolist()[1])
    (line,) = chart_lines(round_series(tmp_path, ["dp", "plain"]), CHARTS["accuracy"], "epsilon", "runs", log_x=False)
    assert list(line.x) == [0.0, 1.25, 2.5] and list(line.y) == [0.5, 0.6, 0.7]


def test_a_summary_written_before_it_had_the_privacy_reads_it_from_the_rounds(tmp_path):
    """A DP run finished before summary.json had ``epsilon`` (main at 4e97d5a): the tables
    read its ε from the last round's privacy entry instead of showing no DP."""
    from simulations.tables import compare_table, load_runs, one_run_per_seed

    d = write_run(tmp_path, "old", "fedprompt", 0, [_round(0, 0.5), _dp_round(1, 0.6, 1.5)])
    summary = json.loads((d / "summary.json").read_text())
    (d / "summary.json").write_text(json.dumps({k: v for k, v in summary.items()
                                                 if k not in ("dp", "epsilon", "dp_delta")}))
    assert compare_table(one_run_per_seed(load_runs(tmp_path)))["ε (δ)"].tolist() == ["1.50 (δ 1e-05)"]
    assert runs_table(tmp_path)["epsilon"].tolist() == [1.5]


def test_the_run_list_page_shows_epsilon_sorted_by_its_number_and_the_comparison_its_column(tmp_path):
    """On the page: the run list's ε is text (``∞`` for a run without noise) sorted by the
    number, with δ beside it; no ε column where no listed run has DP; the comparison
    table's ``ε (δ)`` comes along with its help."""
    from simulations.dashboard import make_app
    from simulations.dashboard_data import column_help

    root = tmp_path / "runs"
    for run_id, eps in (("r-big", 12.5), ("r-none", None), ("r-small", 3.25)):
        write_run(root, run_id, "fedprompt", 0, [_round(0, 0.5), _dp_round(1, 0.6, eps)], **{"run-name": run_id})
    write_run(root, "r-plain", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)], **{"run-name": "plain"})
    app = make_app(root)
    inputs = {"experiment.value": ["demo · iid · 8 shots"], "status-filter.value": ["finished"]}
    code, reply = dash_callback(app, "..runs.data", {**inputs, "runs.sort_by": [{"column_id": "epsilon",
                                                                                 "direction": "asc"}]})
    assert code == 200
    rows = reply["response"]["runs"]["data"]
    assert [(r["run_id"], r["epsilon"]) for r in rows] == [("r-small", "3.25"), ("r-big", "12.50"), ("r-none", "∞"),
                                                           ("r-plain", "")]
    columns = {c["id"]: c for c in reply["response"]["runs"]["columns"]}
    assert columns["epsilon"]["name"] == "ε" and "type" not in columns["epsilon"] and columns["dp_delta"]["name"] == "δ"
    code, reply = dash_callback(app, "..acc-bytes.figure", {**CHART_INPUTS, **inputs})
    rows = {r["method"]: r for r in reply["response"]["compare"]["data"]}
    assert rows["r-small"]["ε (δ)"] == "3.25 (δ 1e-05)" and rows["plain"]["ε (δ)"] == "-"
    assert column_help("ε (δ)", "compare").startswith("ε: the privacy the run spent")
    only_plain = tmp_path / "plain"
    write_run(only_plain, "p", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)])
    code, reply = dash_callback(make_app(only_plain), "..runs.data", inputs)
    assert not {"epsilon", "dp_delta"} & {c["id"] for c in reply["response"]["runs"]["columns"]}


# ------------------------------------------------------------------- issue 67: one comparison, two backbones
def test_the_same_method_and_seed_on_two_backbones_is_two_rows_never_one_mean_or_a_rerun(tmp_path):
    """Runs of one variant and seed on all-MiniLM-L6-v2 and all-mpnet-base-v2 are two rows
    (with a ``backbone`` column) in the dashboard's comparison and the compare runner's table,
    both counted: neither the newer replaces the older as a rerun of its seed, nor are the two
    averaged. One backbone: no such column, the table as before."""
    from simulations.tables import compare_table, load_runs, one_run_per_seed

    root = tmp_path / "runs"
    write_run(root, "small", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.6)], model="all-MiniLM-L6-v2")
    write_run(root, "base", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.9, 4000, 2000)],
              model="sentence-transformers/all-mpnet-base-v2")
    write_run(root, "base1", "fedprompt", 1, [_round(0, 0.5), _round(1, 0.8, 4000, 2000)],
              model="all-mpnet-base-v2")
    table = comparison(root).set_index("backbone")
    assert table.loc["all-MiniLM-L6-v2", "final acc"] == "0.600" and table.loc["all-MiniLM-L6-v2", "runs"] == 1
    assert table.loc["all-mpnet-base-v2", "final acc"] == "0.850 ± 0.071"  # 0.9 and 0.8, owner dropped
    assert table.loc["all-mpnet-base-v2", "runs"] == 2
    assert table.loc["all-mpnet-base-v2", "bytes up / client-round"] == "1.95 KB ± 0 B"  # its runs: 4,000 B / 2 clients
    assert list(comparison(root).columns[:2]) == ["method", "backbone"]
    assert len(compare_table(one_run_per_seed(load_runs(root)))) == 2
    assert "backbone" not in comparison(root, ["base", "base1"]).columns
