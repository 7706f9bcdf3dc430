"""Dashboard and plot command: records -> experiments, seed aggregates, lines, figures;
the page in headless Chromium; a refresh stays under a second with 50 runs of 50 rounds."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulations.dashboard_data import (
    ABSENT, CHARTS, RunStore, aggregate, chart_lines, color_of, comparison, config_diff, experiment_of,
    integer_dtick, round_series, run_detail, runs_table,
)

from ..conftest import REPO
from .test_records import MALFORMED


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
    assert df.loc["r1-fedprompt", "mb_up"] == pytest.approx(2000 / 2**20)
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
    df = runs_table(results).set_index("run_id")
    assert df.loc["a1", "experiment"] == "exp-a" and df.loc["a1", "label"] == "fp-long"
    assert df.loc["a2", "label"] == "bbt-fed" and df.loc["a2", "options"] == "popsize=4"
    assert df.loc["l1", "experiment"] == "old_exp"
    assert df.loc["h1", "experiment"] == "sst2 · dirichlet α=0.5 · 16 shots"
    # the runs folder itself as the dashboard's root still finds its experiment
    assert experiment_of(a / "a1", {}) == "exp-a"
    assert set(df.index[df["experiment"] == "exp-a"]) == {"a1", "a2"}


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
    d = write_run(root, "r", "bbt-fed", 0, [_round(0, 0.5), _round(1, 0.6)], finished=False, tail='{"round": 2')
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
    assert df.loc["garbled", "mb_up"] == 0
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
    assert json.loads(text)["config"]["config"]["method"] == "fedbpt"


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
    assert code == 200 and reason in json.loads(reply["response"]["detail-config"]["children"])["note"]
    # the compare runner's tables read the same records: the broken run is never counted
    from simulations.tables import compare_table, load_runs, one_run_per_seed

    assert set(compare_table(one_run_per_seed(load_runs(root)))["runs"]) == {1}


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_plot_command_writes_pngs_of_the_requested_size(tmp_path):
    results = tmp_path / "results"
    for name in ("exp-a", "exp-b"):
        runs_dir = write_experiment(results, name)
        for seed in (0, 1):
            write_run(runs_dir, f"{name}-bbt-{seed}", "bbt-fed", seed, [_round(0, 0.5), _round(1, 0.6 + seed / 10)])
            write_run(runs_dir, f"{name}-fp-{seed}", "fedprompt", seed, [_round(0, 0.5), _round(1, 0.7)])
    out = tmp_path / "figs"
    rc = subprocess.run([sys.executable, "-m", "simulations.plot", str(results), "--out", str(out), "--x", "round",
                         "bytes", "--size", "5", "3", "--dpi", "80"], cwd=REPO, capture_output=True, text=True)
    assert rc.returncode == 0, rc.stderr
    for name in ("accuracy-vs-round", "accuracy-vs-bytes"):
        png = out / f"{name}.png"
        assert png.stat().st_size > 5_000 and _png_size(png) == (400, 240)
        svg = (out / f"{name}.svg").read_text()
        assert "exp-a" in svg and "exp-b" in svg  # small multiples: one subplot per experiment
    # rounds 0 and 1: ticks at 0 and 1 only (matplotlib's own would add 0.2, 0.4, ...), in each subplot;
    # matplotlib writes each text of an SVG as a comment, the x ticks before the axis title
    texts = re.findall(r"<!-- (.*?) -->", (out / "accuracy-vs-round.svg").read_text())
    x_ticks, ticks = [], []
    for text in texts:
        if text == "Round":
            x_ticks.append(ticks)
        ticks = ticks + [text] if re.fullmatch(r"[-−\d.]+", text) else []
    assert x_ticks == [["0", "1"], ["0", "1"]]
    empty = tmp_path / "empty"
    empty.mkdir()
    rc = subprocess.run([sys.executable, "-m", "simulations.plot", str(empty)], cwd=REPO, capture_output=True,
                        text=True)
    assert rc.returncode == 2 and "no readable run records" in rc.stderr


def test_refresh_stays_under_a_second_with_50_runs_of_50_rounds(tmp_path):
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
    times = []
    for i, mode in enumerate(["mean", "runs", "mean"]):
        with open(runs_dir / f"run{i:02d}" / "rounds.jsonl", "a") as fh:  # a round arrives
            fh.write(json.dumps(_round(51, 0.9)) + "\n")
        t0 = time.perf_counter()
        assert store.version()
        figs, table = render(store, *args, mode, "bytes", True, "bytes")
        json.dumps(figs)  # what Dash sends
        times.append(time.perf_counter() - t0)
        assert len(table) == 5
    print(f"refresh after a new round, 50 runs x 50 rounds: {', '.join(f'{t:.3f}' for t in times)} s")
    assert max(times) <= 1.0, times
    assert len([t for t in figs[1]["data"] if t["meta"] == "line"]) == 5  # one mean line per method


# -------------------------------------------------------------- real browser
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RECORDS = ("config.json", "rounds.jsonl", "summary.json", "experiment.json")


@pytest.fixture
def experiments(tmp_path) -> Path:
    """The committed records (simulations/results: 19 experiments, 179 runs; record files
    only) plus two compare-runner experiments (2 methods x 2 seeds each), a running run and
    a broken one: 21 experiments."""
    results = tmp_path / "results"
    committed = REPO / "simulations" / "results"
    shutil.copytree(committed, results, ignore=lambda d, names: [
        n for n in names if not ((Path(d) / n).is_dir() or n in RECORDS)])
    for name, base in (("exp-a", 0.5), ("exp-b", 0.6)):
        runs_dir = write_experiment(results, name)
        for seed in (0, 1):
            write_run(runs_dir, f"2026-{name}-fp-s{seed}", "fedprompt", seed,
                      [_round(0, base), _round(1, base + 0.1 + seed / 20, 12416, 12416), _round(2, base + 0.2, 12416,
                                                                                               12416)])
            write_run(runs_dir, f"2026-{name}-bbt-s{seed}", "bbt-fed", seed,
                      [_round(0, base), _round(1, base + 0.05, dropped=[{"client": "3", "reason": "NaN in z"}]),
                       _round(2, base + 0.1 + seed / 20)])
    write_run(results / "exp-b" / "runs", "2027-exp-b-bbt-s2", "bbt-fed", 2, [_round(0, 0.6), _round(1, 0.62)],
              finished=False, tail='{"round": 2, "global_acc')
    bad = results / "exp-a" / "runs" / "2025-broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    return results


# The page's layout, measured in the browser: every plotly graph's id, the boxes (left, top,
# right, bottom; CSS px) of its title and experiment names and of its toolbar (modebar), its
# x-axes' tick labels; where the charts start; how wide the tables and the page are.
LAYOUT_JS = """
const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
const graphs = [...document.querySelectorAll('.dash-graph')].map(g => ({
  id: g.id, box: box(g),
  modebar: g.querySelector('.modebar') ? box(g.querySelector('.modebar')) : null,
  titles: [...g.querySelectorAll('.gtitle, .annotation-text')].map(t => ({text: t.textContent, box: box(t)})),
  xticks: [...g.querySelectorAll('.xaxislayer-above text')].map(t => t.textContent),
}));
const tables = {};
for (const id of ['runs', 'config-diff', 'compare', 'detail-rounds']) {
  const t = document.getElementById(id);
  const scroller = t && [...t.querySelectorAll('*')].find(e => getComputedStyle(e).overflowX === 'auto');
  tables[id] = t ? {box: box(t), scroller: scroller ? box(scroller) : null,
                    content: scroller ? scroller.scrollWidth : null} : null;
}
return {graphs, tables, vw: document.documentElement.clientWidth, vh: window.innerHeight,
        page: document.documentElement.scrollWidth,
        charts_top: document.getElementById('acc-bytes').getBoundingClientRect().top};
"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.slow
@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER) and not os.environ.get("CI"),
                    reason="Debian chromium + chromium-driver not installed (.ci/run installs them)")
def test_dashboard_in_headless_chromium(experiments, tmp_path):
    """Pick an experiment, switch the x-axis to cumulative bytes, see one line plus band per
    method, open a run's drill-down, download the table, follow a running run live; the
    layout with the 21 experiments of the committed records and the fixture at 1400 x 900:
    the charts start in the first screen, the picker never pushes them down, no chart title
    lies under its toolbar, round axes tick whole numbers, the tables fit the page (scrolling
    sideways inside), two ticked runs' config diff lists exactly the keys that differ.
    Screenshots: the test's tmp dir (and ``$DASH_SHOTS_DIR`` when set)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    all_experiments = sorted(runs_table(RunStore(experiments))["experiment"].unique())
    assert len(all_experiments) >= 20
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "simulations.dashboard", "--runs", str(experiments), "--port", str(port),
         "--refresh", "0.5"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1400,900"):
        opts.add_argument(flag)
    opts.add_experimental_option("prefs", {"download.default_directory": str(tmp_path / "dl")})
    driver = None
    shots = []

    def traces(d, graph: str) -> list[dict]:
        return d.execute_script(
            "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
            "return g && g.data ? g.data.map(t => ({name: t.name, meta: t.meta, x: t.x, xaxis: t.xaxis || 'x'})) : [];",
            f"#{graph}") or []

    def x_type(d, graph: str) -> str:
        return d.execute_script(
            "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
            "return g && g.layout && g.layout.xaxis ? g.layout.xaxis.type : null;", f"#{graph}")

    def click(d, element) -> None:  # in the middle of the screen: never under the sticky top bar
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
        element.click()

    def tick(d, group: str, text: str) -> None:  # a checklist / radio option, by its label
        click(d, next(label for label in d.find_elements(By.CSS_SELECTOR, f"#{group} label") if label.text == text))

    def pick(d, name: str) -> None:  # the experiment picker: type to search, take the one option left
        box = d.find_element(By.CSS_SELECTOR, "#experiment input")
        box.send_keys(name)
        WebDriverWait(d, 10).until(lambda d: [o.text for o in d.find_elements(
            By.CSS_SELECTOR, "#experiment .VirtualizedSelectOption")] == [name])
        box.send_keys(Keys.ENTER)
        WebDriverWait(d, 10).until(lambda d: name in chips(d))  # (Escape now would clear them all)

    def chips(d) -> list[str]:
        return [c.text.strip() for c in d.find_elements(By.CSS_SELECTOR, "#experiment .Select-value-label")]

    def unpick(d, name: str) -> None:
        chip = next(c for c in d.find_elements(By.CSS_SELECTOR, "#experiment .Select-value")
                    if c.find_element(By.CSS_SELECTOR, ".Select-value-label").text.strip() == name)
        chip.find_element(By.CSS_SELECTOR, ".Select-value-icon").click()
        WebDriverWait(d, 10).until(lambda d: name not in chips(d))

    def shoot(d, name: str) -> Path:
        path = tmp_path / name
        d.save_screenshot(str(path))
        assert path.stat().st_size > 10_000
        shots.append(path)
        return path

    try:
        for _ in range(100):  # wait for the server to listen
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            time.sleep(0.2)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        driver.get(f"http://127.0.0.1:{port}")
        wait = WebDriverWait(driver, 60)
        # the latest experiment (exp-b, whose running run started last) is picked at first
        wait.until(lambda d: "2027-exp-b-bbt-s2" in d.find_element(By.ID, "runs").text)
        assert "2026-exp-a-fp-s0" not in driver.find_element(By.ID, "runs").text
        assert "malformed" in driver.find_element(By.ID, "runs").text  # always listed
        assert chips(driver) == ["exp-b"]
        facts = driver.execute_script(LAYOUT_JS)
        # 21 experiments to choose from, and the charts start in the first screen
        assert facts["charts_top"] < facts["vh"] / 3, facts["charts_top"]
        first_top = facts["charts_top"]
        # pick exp-a instead
        pick(driver, "exp-a")
        unpick(driver, "exp-b")
        wait.until(lambda d: "2026-exp-a-fp-s0" in d.find_element(By.ID, "runs").text
                   and "2027-exp-b-bbt-s2" not in d.find_element(By.ID, "runs").text)
        # accuracy vs round: one mean line and one ± std band per method (2 seeds each)
        wait.until(lambda d: sorted((t["meta"], t["name"]) for t in traces(d, "acc-x")) == [
            ("band", "bbt-fed (n=2) band"), ("band", "fedprompt (n=2) band"),
            ("line", "bbt-fed (n=2)"), ("line", "fedprompt (n=2)")])
        # rounds 0-2: the ticks are 0, 1, 2 (Plotly's own were 0, 0.5, 1, 1.5, 2)
        wait.until(lambda d: next(g for g in d.execute_script(LAYOUT_JS)["graphs"]
                                  if g["id"] == "acc-x")["xticks"] == ["0", "1", "2"])
        # switch the x-axis to cumulative bytes (log by default): still one line + band per method
        tick(driver, "x-axis", "Cumulative bytes, up + down")
        wait.until(lambda d: x_type(d, "acc-x") == "log" and any(
            t["meta"] == "line" and t["name"] == "fedprompt (n=2)" and t["x"] == [24832, 49664]
            for t in traces(d, "acc-x")))
        assert sorted(t["meta"] for t in traces(driver, "acc-x")) == ["band", "band", "line", "line"]
        assert x_type(driver, "acc-bytes") == "log"  # the prominent accuracy-vs-bytes chart
        shoot(driver, "dashboard-bytes.png")
        for g in driver.execute_script(LAYOUT_JS)["graphs"]:  # half-page charts, the longest titles
            assert g["titles"] and all(g["box"][0] <= t["box"][0] and t["box"][2] <= g["box"][2]
                                       and not _overlap(t["box"], g["modebar"]) for t in g["titles"]), g
        # individual runs: one line per run
        tick(driver, "mode", "individual runs")
        wait.until(lambda d: len([t for t in traces(d, "acc-x") if t["meta"] == "line"]) == 4)
        # drill-down: click a run's cell -> its rounds (with the dropped client and reason) and config
        cell = next(c for c in driver.find_elements(By.CSS_SELECTOR, "#runs td") if c.text == "2026-exp-a-bbt-s0")
        click(driver, cell)
        wait.until(lambda d: "NaN in z" in d.find_element(By.ID, "detail-rounds").text)
        assert '"method": "bbt-fed"' in driver.find_element(By.ID, "detail-config").text
        # small multiples: both experiments side by side
        pick(driver, "exp-b")
        wait.until(lambda d: {t["xaxis"] for t in traces(d, "acc-x")} == {"x", "x2"})
        # the comparison table downloads as markdown and CSV
        wait.until(lambda d: "fedprompt" in d.find_element(By.ID, "compare").text)
        for button, name in (("md-btn", "comparison.md"), ("csv-btn", "comparison.csv")):
            click(driver, driver.find_element(By.ID, button))
            wait.until(lambda d, n=name: (tmp_path / "dl" / n).exists() and (tmp_path / "dl" / n).stat().st_size)
        assert "| fedprompt | demo | iid | 4 |" in (tmp_path / "dl" / "comparison.md").read_text()
        assert (tmp_path / "dl" / "comparison.csv").read_text().startswith("method,dataset,partition,runs")
        # live: the running run finishes its round 2 and the page follows without a reload
        rounds = experiments / "exp-b" / "runs" / "2027-exp-b-bbt-s2" / "rounds.jsonl"
        lines = rounds.read_text().splitlines()[:-1] + [json.dumps(_round(2, 0.66))]
        rounds.write_text("\n".join(lines) + "\n")

        def row_of(d, run_id):
            rows = [r.text for r in d.find_elements(By.CSS_SELECTOR, "#runs tr") if run_id in r.text]
            return rows[0] if rows else ""

        wait.until(lambda d: " running 2 " in f" {row_of(d, '2027-exp-b-bbt-s2')} "
                   and "malformed line" not in row_of(d, "2027-exp-b-bbt-s2"))
        shoot(driver, "dashboard-live.png")

        # ---- the committed records: two experiments side by side, mean ± std against the round
        for name in ("fedbpt_sst2", "sst2_baselines"):
            pick(driver, name)
        for name in ("exp-a", "exp-b"):
            unpick(driver, name)
        tick(driver, "mode", "mean ± std")
        tick(driver, "x-axis", "Round")
        wait.until(lambda d: {t["xaxis"] for t in traces(d, "acc-x")} == {"x", "x2"}
                   and any(t["name"] == "fedbpt (n=3)" for t in traces(d, "acc-x"))
                   and "20261122-120932-fedbpt-sst2-s0" in d.find_element(By.ID, "runs").text)
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.5)  # the last relayout
        facts = driver.execute_script(LAYOUT_JS)
        shoot(driver, "dashboard-main.png")
        # the picker holds two chips in the sidebar: the charts did not move
        assert facts["charts_top"] == pytest.approx(first_top, abs=1)
        # no chart's title or experiment name lies under its toolbar
        graphs = {g["id"]: g for g in facts["graphs"]}
        assert set(graphs) == {"acc-bytes", "acc-x", "client-x", "loss-x", "queries-x", "memory-x", "wall-x"}
        for g in graphs.values():
            bar = g["modebar"]
            assert bar and bar[2] - bar[0] > 50 and bar[3] - bar[1] > 10, g  # a toolbar that takes room
            assert any(t["text"].startswith(("Global", "Mean", "Client", "Cumulative", "Wall")) for t in g["titles"])
            assert {t["text"] for t in g["titles"]} >= {"fedbpt_sst2", "sst2_baselines"}
            clash = [t["text"] for t in g["titles"] if _overlap(t["box"], bar)]
            assert not clash, (g["id"], clash, bar)
            cut = [t["text"] for t in g["titles"] if t["box"][0] < g["box"][0] or t["box"][2] > g["box"][2]]
            assert not cut, (g["id"], cut, g["box"])  # no title runs past its chart's edge
            if g["id"] != "acc-bytes":  # against the round: whole numbers only
                ticks = g["xticks"]
                assert len(ticks) >= 4 and all(re.fullmatch(r"\d+", t) for t in ticks), (g["id"], ticks)
        # the page never scrolls sideways; a wide table scrolls inside its card
        assert facts["page"] <= facts["vw"], (facts["page"], facts["vw"])
        runs_box = facts["tables"]["runs"]
        assert runs_box["box"][2] <= facts["vw"] and runs_box["scroller"][2] <= facts["vw"]
        assert runs_box["content"] > runs_box["scroller"][2] - runs_box["scroller"][0]  # wider: it scrolls
        # ---- config diff: tick two runs of different methods
        picked = ["20261122-120932-fedbpt-sst2-s0", "20261122-125205-fedprompt-sst2-s1"]
        for run_id in picked:
            row = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#runs tr") if run_id in r.text)
            click(driver, row.find_element(By.CSS_SELECTOR, "input[type=checkbox]"))
        cfgs = [json.loads((experiments / "fedbpt_sst2" / "runs" / r / "config.json").read_text())["config"]
                for r in picked]
        keys = list(dict.fromkeys([*cfgs[0], *cfgs[1]]))
        differing = [k for k in keys if k not in cfgs[0] or k not in cfgs[1] or cfgs[0][k] != cfgs[1][k]]
        assert {"method", "seed", "fedbpt.popsize", "fedprompt.lr"} <= set(differing)
        assert "dataset" not in differing and len(differing) < len(keys) / 2

        def diff_keys(d) -> list[str]:
            return [c.text for c in d.find_elements(By.CSS_SELECTOR, '#config-diff td[data-dash-column="key"]')]

        wait.until(lambda d: diff_keys(d) == differing)
        header = driver.find_element(By.ID, "config-diff").text
        assert all(r in header for r in picked) and "fedbpt" in header and "fedprompt" in header
        row = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#config-diff tr") if r.text.startswith("seed"))
        assert row.text.split() == ["seed", "0", "1"]  # one column per run, in the order ticked
        assert f"{len(differing)} keys differ between the 2 ticked runs" in driver.find_element(
            By.ID, "config-diff-note").text
        facts = driver.execute_script(LAYOUT_JS)
        assert facts["tables"]["config-diff"]["box"][2] <= facts["vw"] and facts["page"] <= facts["vw"]
        driver.execute_script("document.getElementById('card-diff').scrollIntoView({block: 'center'})")
        time.sleep(0.3)
        shoot(driver, "dashboard-config-diff.png")
        if os.environ.get("DASH_SHOTS_DIR"):  # a copy for a person to look at
            out = Path(os.environ["DASH_SHOTS_DIR"])
            out.mkdir(parents=True, exist_ok=True)
            for path in shots:
                shutil.copy(path, out / path.name)
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()  # the one process this test started
        server.wait(timeout=10)
        log.close()
