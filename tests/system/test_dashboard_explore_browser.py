"""The dashboard's exploration views (simulations/dashboard_explore.py) in headless Chromium
(Debian ``chromium`` + ``chromium-driver``, as tests/system/test_dashboard_browser.py): pick
a field, a run and a config key in the page and find the traces the data functions give,
on a hand-made experiment (values by hand) and on the committed records; screenshots of
each view at 1280 px go to the test's tmp dir (and ``$DASH_SHOTS_DIR``: docs/screenshots)."""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path

import pytest

from simulations import dashboard as page
from simulations import dashboard_explore as de
from simulations.dashboard_data import RunStore, chart_lines, runs_table

from ..conftest import REPO
from .browser import CHROMEDRIVER, CHROMIUM, chips, dashboard_in_chromium, options, pick, unpick
from ..unit.test_dashboard import _round, write_experiment, write_run

RECORDS = ("config.json", "rounds.jsonl", "summary.json", "experiment.json")
SHOTS = {"card-metric": "dashboard-any-metric.png", "card-clients": "dashboard-per-client.png",
         "card-sweep": "dashboard-sweep.png"}


@pytest.fixture
def results(tmp_path) -> Path:
    """The committed records (record files only) plus experiment ``explore``: fedbpt 2 seeds
    (σ per round, client accuracies in seed 0), fedprompt 2 seeds (client accuracies in
    seed 1), a config key ``lr`` that varies; its runs started last (shown first)."""
    out = tmp_path / "results"
    shutil.copytree(REPO / "simulations" / "results", out, ignore=lambda d, names: [
        n for n in names if not ((Path(d) / n).is_dir() or n in RECORDS)])
    runs = write_experiment(out, "explore")
    write_run(runs, "2027-explore-fbpt-s0", "fedbpt", 0, [
        _round(0, 0.5, method_metrics={}),
        _round(1, 0.6, 1000, 1000, {"0": 0.5, "1": 0.9, "2": 0.7}, method_metrics={"sigma": 0.9}),
        _round(2, 0.7, 1000, 1000, {"0": 0.6, "1": 0.4, "2": 0.8, "10": 0.4}, method_metrics={"sigma": 0.7}),
    ], lr=0.1)
    write_run(runs, "2027-explore-fbpt-s1", "fedbpt", 1, [
        _round(0, 0.5, method_metrics={}), _round(1, 0.64, 1000, 1000, method_metrics={"sigma": 0.8}),
        _round(2, 0.8, 1000, 1000, method_metrics={"sigma": 0.5}),
    ], lr=0.1)
    write_run(runs, "2027-explore-fp-s0", "fedprompt", 0, [_round(0, 0.5), _round(1, 0.55), _round(2, 0.6)], lr=0.01)
    write_run(runs, "2027-explore-fp-s1", "fedprompt", 1, [
        _round(0, 0.5), _round(1, 0.6, clients={"0": 0.5, "1": 0.7}), _round(2, 0.66, clients={"0": 0.6, "1": 0.72}),
    ], lr=0.1)
    return out


@pytest.mark.slow
@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER) and not os.environ.get("CI"),
                    reason="Debian chromium + chromium-driver not installed (.ci/run installs them)")
def test_exploration_views_in_headless_chromium(results, tmp_path):
    """Any metric: pick ``method_metrics.sigma`` -> fedbpt's mean line and ± std band
    (fedprompt records no σ), then against cumulative bytes. Per client: pick a run -> the
    band, the median, a line per client and the worst client by hand. Sweep: pick ``lr``
    -> per method the mean ± std per value. Then the same views on the committed records
    (FedBPT on SST-2: σ and its clients; FedDPG's sweep over the number of prompts), the
    traces compared with the data functions', and a screenshot of each card."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    shots: list[Path] = []

    def traces(d, graph: str) -> list[dict]:
        return d.execute_script(
            "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
            "return g && g.data ? g.data.map(t => ({name: t.name, meta: t.meta, x: t.x, y: t.y,"
            " err: t.error_y ? t.error_y.array : null})) : [];", f"#{graph}") or []

    def layout_of(d, graph: str) -> dict:
        return d.execute_script("const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
                                "return g && g.layout ? {x: g.layout.xaxis.type, title: g.layout.title.text} : {};",
                                f"#{graph}") or {}

    def named(d, graph: str, meta: str) -> dict[str, dict]:
        return {t["name"]: t for t in traces(d, graph) if t["meta"] == meta}

    def choose(d, dropdown: str, text: str) -> None:
        """A single-select dropdown: type to search, click the option whose text is ``text``."""
        box = d.find_element(By.CSS_SELECTOR, f"#{dropdown} input")
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
        box.send_keys(text)
        WebDriverWait(d, 20).until(lambda d: any(o.text == text for o in options(d, dropdown)))
        next(o for o in options(d, dropdown) if o.text == text).click()
        WebDriverWait(d, 20).until(lambda d: chosen(d, dropdown) == text)

    def chosen(d, dropdown: str) -> str:
        labels = d.find_elements(By.CSS_SELECTOR, f"#{dropdown} .Select-value-label")
        return labels[0].text.strip() if labels else ""

    def shoot(d, card: str) -> None:
        element = d.find_element(By.ID, card)
        d.execute_script("arguments[0].scrollIntoView({block: 'start'}); window.scrollBy(0, -56)", element)
        time.sleep(0.6)  # the last relayout
        path = tmp_path / SHOTS[card]
        element.screenshot(str(path))
        assert path.stat().st_size > 10_000
        shots.append(path)

    with dashboard_in_chromium(results, tmp_path, 1, "1280,1000") as driver:
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: chips(d) == ["explore"])  # its runs started last

        # ---- any metric: the default field is global accuracy; pick FedBPT's σ
        wait.until(lambda d: chosen(d, "metric-field") == "global_accuracy")
        choose(driver, "metric-field", "method_metrics.sigma")
        wait.until(lambda d: sorted((t["meta"], t["name"]) for t in traces(d, "metric-graph"))
                   == [("band", "fedbpt (n=2) band"), ("line", "fedbpt (n=2)")])
        line = named(driver, "metric-graph", "line")["fedbpt (n=2)"]
        assert line["x"] == [1, 2] and line["y"] == pytest.approx([0.85, 0.6])  # round 0: null, no point
        assert layout_of(driver, "metric-graph")["title"].startswith("method_metrics.sigma vs round")
        choose(driver, "metric-x", "Cumulative bytes, up + down")
        wait.until(lambda d: layout_of(d, "metric-graph").get("x") == "log"
                   and named(d, "metric-graph", "line").get("fedbpt (n=2)", {}).get("x") == [2000, 4000])

        # ---- per client: the newest run with client accuracies first, then pick FedBPT's seed 0
        wait.until(lambda d: chosen(d, "client-run") == "fedprompt s1 · 2027-explore-fp-s1")
        choose(driver, "client-run", "fedbpt s0 · 2027-explore-fbpt-s0")
        wait.until(lambda d: "worst client 1 (0.400 in round 2)" in named(d, "client-graph", "worst"))
        band = named(driver, "client-graph", "band")["min–max over clients"]
        assert band["x"] == [1, 2, 2, 1] and band["y"] == [0.9, 0.8, 0.4, 0.5]
        assert named(driver, "client-graph", "median")["median client"]["y"] == pytest.approx([0.7, 0.5])
        assert len([t for t in traces(driver, "client-graph") if t["meta"] == "client"]) == 4
        rows = [r.text.split() for r in driver.find_elements(By.CSS_SELECTOR, "#client-table tr")]
        assert ["1", "3", "0.5", "0.7", "0.9", "0"] in rows and ["2", "4", "0.4", "0.5", "0.8", "1"] in rows
        # a header explains its column on hover (dashboard_data.COLUMN_HELP), as in every table
        from selenium.webdriver.common.action_chains import ActionChains

        from simulations.dashboard_data import COLUMN_HELP

        header = driver.find_element(By.CSS_SELECTOR, '#client-table th[data-dash-column="worst_client"]')
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", header)
        ActionChains(driver).move_to_element(header).perform()
        wait.until(lambda d: any(COLUMN_HELP["worst_client"] in t.text for t in d.find_elements(
            By.CSS_SELECTOR, ".dash-table-tooltip") if t.is_displayed()))
        ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()  # closed again

        # ---- sweep: the first key that varies is the method; pick lr
        wait.until(lambda d: chosen(d, "sweep-key") == "method" and chosen(d, "sweep-y") == "final_accuracy")
        choose(driver, "sweep-key", "lr")
        wait.until(lambda d: set(named(d, "sweep-graph", "mean")) == {"fedbpt mean ± std (up to n=2)",
                                                                     "fedprompt mean ± std"})
        means = named(driver, "sweep-graph", "mean")
        fedbpt = means["fedbpt mean ± std (up to n=2)"]
        assert fedbpt["x"] == [0.1] and fedbpt["y"] == pytest.approx([0.75])
        assert fedbpt["err"] == pytest.approx([0.1 / math.sqrt(2)])  # sample std of 0.7 and 0.8
        assert means["fedprompt mean ± std"]["x"] == [0.01, 0.1]
        assert means["fedprompt mean ± std"]["y"] == pytest.approx([0.6, 0.66])
        assert layout_of(driver, "sweep-graph")["x"] == "linear"
        assert sum(len(t["x"]) for t in traces(driver, "sweep-graph") if t["meta"] == "run") == 4
        assert "4 runs, 2 values of lr (linear axis)" in driver.find_element(By.ID, "sweep-note").text

        # ---- the committed records: FedBPT on SST-2 (σ against the round, one run's clients)
        store = RunStore(results)
        table = runs_table(store)
        pick(driver, "fedbpt_sst2")
        unpick(driver, "explore")
        ids = table[table["experiment"] == "fedbpt_sst2"]["run_id"].tolist()
        want = {line.name: line for line in chart_lines(de.metric_series(store, ids, "method_metrics.sigma"),
                                                        de.metric_chart("method_metrics.sigma"), "round", "mean")}
        assert list(want) == ["fedbpt (n=3)"]
        choose(driver, "metric-x", "Round")
        wait.until(lambda d: chosen(d, "metric-field") == "method_metrics.sigma"  # kept: fedbpt records it
                   and set(named(d, "metric-graph", "line")) == set(want)
                   and layout_of(d, "metric-graph").get("x") == "linear")
        got = named(driver, "metric-graph", "line")["fedbpt (n=3)"]
        assert got["x"] == want["fedbpt (n=3)"].x and got["y"] == pytest.approx(want["fedbpt (n=3)"].y)
        shoot(driver, "card-metric")
        fedbpt_s0 = next(r for r in sorted(ids) if r.endswith("-fedbpt-sst2-s0"))
        run = store.loaded([fedbpt_s0])[0]
        worst = next(t["name"] for t in de.client_figure(run, page)["data"] if t["meta"] == "worst")
        choose(driver, "client-run", f"fedbpt s0 · {fedbpt_s0}")
        wait.until(lambda d: worst in named(d, "client-graph", "worst"))
        n_clients = de.client_accuracies(run)["client"].nunique()
        assert len([t for t in traces(driver, "client-graph") if t["meta"] == "client"]) == n_clients
        shoot(driver, "card-clients")
        # FedDPG's sweep over the number of prompts (5 runs, 3 values; and of the hidden size at 10 prompts)
        pick(driver, "feddpg_sweep_ag_news")
        unpick(driver, "fedbpt_sst2")
        sweep_ids = table[table["experiment"] == "feddpg_sweep_ag_news"]["run_id"].tolist()
        points, axis = de.sweep_points(store.loaded(sweep_ids), "feddpg.prompts", "final_accuracy")
        summary = de.sweep_summary(points)
        # one series per feddpg.hidden: the three runs at 10 prompts differ in it (5, 10, 20),
        # so they are three series, not one mean ± std over what is no seed spread
        want = {f"{series} mean ± std": part for series, part in summary.groupby("series")}
        assert len(want) == 3
        choose(driver, "sweep-key", "feddpg.prompts")
        wait.until(lambda d: set(named(d, "sweep-graph", "mean")) == set(want))
        for name, trace in named(driver, "sweep-graph", "mean").items():
            assert trace["x"] == want[name]["x"].tolist() and trace["y"] == pytest.approx(want[name]["mean"].tolist())
        assert layout_of(driver, "sweep-graph")["x"] == axis
        shoot(driver, "card-sweep")
        if os.environ.get("DASH_SHOTS_DIR"):  # a copy for a person to look at (docs/screenshots)
            out = Path(os.environ["DASH_SHOTS_DIR"])
            out.mkdir(parents=True, exist_ok=True)
            for path in shots:
                shutil.copy(path, out / path.name)
