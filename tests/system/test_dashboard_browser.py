"""The dashboard in headless Chromium (Debian ``chromium`` + ``chromium-driver``, which
.ci/run installs): the server in a subprocess, the page driven by selenium on the
committed records plus a fixture (docs/comparing.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from simulations.dashboard_data import RunStore, round_series, runs_table
from simulations.dashboard_explore import GRAPHS as EXPLORE_GRAPHS

from ..conftest import REPO
from .browser import CHROMEDRIVER, CHROMIUM, chips, dashboard_in_chromium, pick, unpick
from ..unit.test_dashboard import _round, write_experiment, write_run



RECORDS = ("config.json", "rounds.jsonl", "summary.json", "experiment.json")


@pytest.fixture
def experiments(tmp_path) -> Path:
    """The committed records (simulations/results; record files only) plus two compare-runner
    experiments (2 methods x 2 seeds each), a running run and a broken one: at least 22
    experiments."""
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
# x-axes' tick labels, whether it is hidden and draws a legend, its y-axes' drawn ranges;
# where the charts start; how wide the tables (their content and their visible box) and the page are.
LAYOUT_JS = """
const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
const graphs = [...document.querySelectorAll('.dash-graph')].map(g => {
  const plot = g.querySelector('.js-plotly-plot');
  const full = plot && plot._fullLayout ? plot._fullLayout : {};
  return {
    id: g.id, box: box(g), hidden: g.offsetParent === null, legend: !!g.querySelector('.legend'),
    modebar: g.querySelector('.modebar') ? box(g.querySelector('.modebar')) : null,
    titles: [...g.querySelectorAll('.gtitle, .annotation-text')].map(t => ({text: t.textContent, box: box(t)})),
    xticks: [...g.querySelectorAll('.xaxislayer-above text')].map(t => t.textContent),
    yranges: Object.keys(full).filter(k => /^yaxis[0-9]*$/.test(k)).sort().map(k => full[k].range),
  };
});
const tables = {};
for (const id of ['runs', 'config-diff', 'compare', 'detail-rounds', 'detail-config']) {
  const t = document.getElementById(id);
  const scroller = t && [...t.querySelectorAll('*')].find(e => getComputedStyle(e).overflowX === 'auto');
  tables[id] = t ? {box: box(t), scroller: scroller ? box(scroller) : null,
                    content: scroller ? scroller.scrollWidth : null,
                    visible: scroller ? scroller.clientWidth : null} : null;
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
    method, the log axis labelled 1k 2k 5k ... only and the grid without the top chart's
    duplicate, open a run's drill-down, download the table, follow a running run live; the
    layout with the 22 experiments of the committed records and the fixture at 1280 x 900:
    the charts start in the first screen, the picker never pushes them down, no chart title
    lies under its toolbar, round axes tick whole numbers, one legend (the top chart's), the
    memory axis from 0, the run list and the comparison table as wide as their card (no
    content cut off or scrolled sideways), two ticked runs' config diff lists exactly the
    keys that differ, and a run's config table lists them first; a one-round experiment's
    points carry error bars. Screenshots: the test's tmp dir (and ``$DASH_SHOTS_DIR`` when set)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    all_experiments = sorted(runs_table(RunStore(experiments))["experiment"].unique())
    assert len(all_experiments) >= 22
    shots = []

    def traces(d, graph: str) -> list[dict]:
        return d.execute_script(
            "const g = document.querySelector(arguments[0] + ' .js-plotly-plot');"
            "return g && g.data ? g.data.map(t => ({name: t.name, meta: t.meta, x: t.x, y: t.y, xaxis: t.xaxis || 'x',"
            " error_y: t.error_y || null})) : [];",
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

    def shoot(d, name: str) -> Path:
        path = tmp_path / name
        d.save_screenshot(str(path))
        assert path.stat().st_size > 10_000
        shots.append(path)
        return path

    with dashboard_in_chromium(experiments, tmp_path, 0.5, "1280,900", prefs={"download.default_directory": str(tmp_path / "dl")}) as driver:
        wait = WebDriverWait(driver, 60)
        # the latest experiment (exp-b, whose running run started last) is picked at first
        wait.until(lambda d: "2027-exp-b-bbt-s2" in d.find_element(By.ID, "runs").text)
        assert "2026-exp-a-fp-s0" not in driver.find_element(By.ID, "runs").text
        assert "malformed" in driver.find_element(By.ID, "runs").text  # always listed
        assert chips(driver) == ["exp-b"]
        facts = driver.execute_script(LAYOUT_JS)
        # 22 experiments to choose from, and the charts start in the first screen
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
        wait.until(lambda d: x_type(d, "memory-x") == "log" and any(
            t["meta"] == "line" and t["name"] == "fedprompt (n=2)" and t["x"] == [24832, 49664]
            for t in traces(d, "memory-x")))
        assert sorted(t["meta"] for t in traces(driver, "memory-x")) == ["band", "band", "line", "line"]
        assert x_type(driver, "acc-bytes") == "log"  # the prominent accuracy-vs-bytes chart
        time.sleep(0.5)  # the last relayout
        shoot(driver, "dashboard-bytes.png")
        graphs = {g["id"]: g for g in driver.execute_script(LAYOUT_JS)["graphs"]}
        # the grid's accuracy chart would repeat the top one: left out, the rest shown
        assert graphs["acc-x"]["hidden"] and not any(g["hidden"] for k, g in graphs.items() if k != "acc-x")
        # bytes from 1,056 (bbt-fed's round 1) to 49,664 (fedprompt's round 2), padded by 5 % of
        # the 1.67 decades: 871 to 60,200, fewer than 3 decades: labels at 1, 2, 5 times a decade only
        for gid in ("acc-bytes", "memory-x"):
            assert graphs[gid]["xticks"] == ["1k", "2k", "5k", "10k", "20k", "50k"], graphs[gid]["xticks"]
        # memory (~901 MB) from 0, not from 900
        assert graphs["memory-x"]["yranges"][0][0] == 0, graphs["memory-x"]["yranges"]
        for g in graphs.values():  # half-page charts, the longest titles
            if not g["hidden"]:
                assert g["titles"] and all(g["box"][0] <= t["box"][0] and t["box"][2] <= g["box"][2]
                                           and not _overlap(t["box"], g["modebar"]) for t in g["titles"]), g
        # individual runs: one line per run
        tick(driver, "mode", "individual runs")
        wait.until(lambda d: len([t for t in traces(d, "memory-x") if t["meta"] == "line"]) == 4)
        # drill-down: click a run's cell -> its rounds (with the dropped client and reason) and config
        cell = next(c for c in driver.find_elements(By.CSS_SELECTOR, "#runs td") if c.text == "2026-exp-a-bbt-s0")
        click(driver, cell)
        wait.until(lambda d: "NaN in z" in d.find_element(By.ID, "detail-rounds").text)
        assert '"status": "finished"' in driver.find_element(By.ID, "detail-summary").text
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#detail-config td[data-dash-column="key"]'))
        # its config, the keys that differ from the other 3 listed runs' first (method, seed),
        # then the rest in the config's order (nothing ticked: compared with the listed runs)
        keys = [c.text for c in driver.find_elements(By.CSS_SELECTOR, '#detail-config td[data-dash-column="key"]')]
        assert keys == ["method", "seed", "dataset", "partition", "num-server-rounds", "shots-per-class"], keys
        assert "2 keys differ from the 3 other listed run(s)" in driver.find_element(By.ID, "detail-config-note").text
        # small multiples: both experiments side by side
        pick(driver, "exp-b")
        wait.until(lambda d: {t["xaxis"] for t in traces(d, "memory-x")} == {"x", "x2"})
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
        # (run ids read from the records, which a rerun replaces)
        sst2_runs = sorted(p.name for p in (experiments / "fedbpt_sst2" / "runs").iterdir())
        fedbpt_s0 = next(r for r in sst2_runs if r.endswith("-fedbpt-sst2-s0"))
        bbt_fed_s1 = next(r for r in sst2_runs if r.endswith("-bbt-fed-sst2-s1"))  # same vintage as fedbpt_s0
        for name in ("fedbpt_sst2", "sst2_baselines"):
            pick(driver, name)
        for name in ("exp-a", "exp-b"):
            unpick(driver, name)
        tick(driver, "mode", "mean ± std")
        tick(driver, "x-axis", "Round")
        wait.until(lambda d: {t["xaxis"] for t in traces(d, "acc-x")} == {"x", "x2"}
                   and any(t["name"] == "fedbpt (n=3)" for t in traces(d, "acc-x"))
                   and fedbpt_s0 in d.find_element(By.ID, "runs").text)
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.5)  # the last relayout
        facts = driver.execute_script(LAYOUT_JS)
        shoot(driver, "dashboard-main.png")
        # the picker holds two chips in the sidebar: the charts did not move
        assert facts["charts_top"] == pytest.approx(first_top, abs=1)
        # no chart's title or experiment name lies under its toolbar
        # (the exploration views' charts: tests/system/test_dashboard_explore_browser.py)
        graphs = {g["id"]: g for g in facts["graphs"] if g["id"] not in EXPLORE_GRAPHS}
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
        # one legend: the top chart's; every other chart draws none
        assert [g["id"] for g in graphs.values() if g["legend"]] == ["acc-bytes"]
        assert graphs["memory-x"]["yranges"][0][0] == 0 and graphs["memory-x"]["yranges"][1][0] == 0
        # the grid: no legends, memory from 0 (screenshot)
        driver.execute_script("document.getElementById('queries-x').scrollIntoView({block: 'start'});"
                              "window.scrollBy(0, -60)")
        time.sleep(0.3)
        shoot(driver, "dashboard-grid.png")
        # the page never scrolls sideways; the run list (18 runs, 2 experiments) and the
        # comparison table fit their card at 1,280 px: no column cut off or scrolled out of sight
        assert facts["page"] <= facts["vw"], (facts["page"], facts["vw"])
        for table in ("runs", "compare"):
            t = facts["tables"][table]
            assert t["box"][2] <= facts["vw"] and t["scroller"][2] <= facts["vw"], (table, t)
            assert t["content"] <= t["visible"], (table, t)
        # ---- bytes in units (bbt-fed's 20 KB read "0" MB), sorted by the count, headers explained
        def cells(d, column: str) -> list[str]:
            return [c.text for c in d.find_elements(By.CSS_SELECTOR, f'#runs td[data-dash-column="{column}"]')]

        def count(text: str) -> float:  # "12.1 KB" -> 12,390.4 (KB = 1,024 B)
            number, unit = text.split()
            return float(number.replace(",", "")) * 1024 ** ["B", "KB", "MB", "GB", "TB"].index(unit)

        ups = cells(driver, "total_bytes_up")  # 18 runs and the broken one (listed whatever is picked)
        assert len(ups) == 19 and all(re.fullmatch(r"\d[\d.,]* (B|KB|MB|GB)", u) for u in ups), ups
        assert any(u.endswith(" KB") for u in ups) and any(u.endswith(" MB") for u in ups), ups
        bbt_row = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#runs tr") if bbt_fed_s1 in r.text)
        assert re.search(r"\b\d+(\.\d+)? KB\b", bbt_row.text), bbt_row.text  # 20.6 KB, not 0
        header = driver.find_element(By.CSS_SELECTOR, '#runs th[data-dash-column="total_bytes_up"]')
        # DataTable's sort arrow cycles ascending, descending, unsorted: the callback sorts by the count
        for direction in ("asc", "desc", None, "asc"):
            click(driver, header.find_element(By.CSS_SELECTOR, ".column-header--sort"))
            if direction:  # (unsorted: the records' order)
                want = [count(u) for u in sorted(ups, key=count, reverse=direction == "desc")]
                wait.until(lambda d, w=want: [count(u) for u in cells(d, "total_bytes_up")] == w)
            header = driver.find_element(By.CSS_SELECTOR, '#runs th[data-dash-column="total_bytes_up"]')
        from selenium.webdriver.common.action_chains import ActionChains

        from simulations.dashboard_data import COLUMN_HELP

        def hover_help(d, table: str, column: str, help_key: str) -> None:  # the header's tooltip opens
            ActionChains(d).move_to_element(d.find_element(
                By.CSS_SELECTOR, f'#{table} th[data-dash-column="{column}"]')).perform()
            wait.until(lambda d: any(COLUMN_HELP[help_key][:40] in t.text for t in d.find_elements(
                By.CSS_SELECTOR, ".dash-table-tooltip") if t.is_displayed()))

        for table, column, help_key in (("compare", "final acc", "final_accuracy"),
                                        ("runs", "total_bytes_up", "total_bytes_up")):
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", driver.find_element(
                By.CSS_SELECTOR, f'#{table} th[data-dash-column="{column}"]'))
            hover_help(driver, table, column, help_key)
        assert [h.text for h in driver.find_elements(By.CSS_SELECTOR, ".table-help")] == [
            "? Hover a column header for what the column holds and its unit."] * 2
        driver.execute_script("document.getElementById('card-runs').scrollIntoView({block: 'start'});"
                              "window.scrollBy(0, -60)")
        time.sleep(0.3)
        hover_help(driver, "runs", "p_accuracy", "p_accuracy")
        shoot(driver, "dashboard-runs.png")  # the run list, bytes in units, P acc's help open
        facts = driver.execute_script(LAYOUT_JS)
        t = facts["tables"]["runs"]
        assert t["content"] <= t["visible"] and facts["page"] <= facts["vw"], t
        # ---- config diff: tick two runs of different methods
        picked = [fedbpt_s0, bbt_fed_s1]
        for run_id in picked:
            row = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#runs tr") if run_id in r.text)
            click(driver, row.find_element(By.CSS_SELECTOR, "input[type=checkbox]"))
        cfgs = [json.loads((experiments / "fedbpt_sst2" / "runs" / r / "config.json").read_text())["config"]
                for r in picked]
        keys = list(dict.fromkeys([*cfgs[0], *cfgs[1]]))
        differing = [k for k in keys if k not in cfgs[0] or k not in cfgs[1] or cfgs[0][k] != cfgs[1][k]]
        assert {"method", "seed", "fedbpt.popsize", "bbt-fed.popsize"} <= set(differing)
        assert "dataset" not in differing and len(differing) < len(keys) / 2

        def diff_keys(d) -> list[str]:
            return [c.text for c in d.find_elements(By.CSS_SELECTOR, '#config-diff td[data-dash-column="key"]')]

        wait.until(lambda d: diff_keys(d) == differing)
        header = driver.find_element(By.ID, "config-diff").text
        assert all(r in header for r in picked) and "fedbpt" in header and "bbt-fed" in header
        row = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#config-diff tr") if r.text.startswith("seed"))
        assert row.text.split() == ["seed", "0", "1"]  # one column per run, in the order ticked
        assert f"{len(differing)} keys differ between the 2 ticked runs" in driver.find_element(
            By.ID, "config-diff-note").text
        facts = driver.execute_script(LAYOUT_JS)
        assert facts["tables"]["config-diff"]["box"][2] <= facts["vw"] and facts["page"] <= facts["vw"]
        driver.execute_script("document.getElementById('card-diff').scrollIntoView({block: 'center'})")
        time.sleep(0.3)
        shoot(driver, "dashboard-config-diff.png")
        # ---- a ticked run's config: the keys that differ from the other ticked run first
        cell = next(c for c in driver.find_elements(By.CSS_SELECTOR, '#runs td[data-dash-column="run_id"]')
                    if c.text == fedbpt_s0)
        click(driver, cell)

        def config_rows(d) -> list[list[str]]:
            return [[c.text for c in r.find_elements(By.CSS_SELECTOR, "td")]
                    for r in d.find_elements(By.CSS_SELECTOR, "#detail-config tr")
                    if r.find_elements(By.TAG_NAME, "td")]

        rest = [k for k in cfgs[0] if k not in differing]
        wait.until(lambda d: [r[0] for r in config_rows(d)] == differing + rest)
        rows = {r[0]: r for r in config_rows(driver)}
        assert rows["seed"][1:] == ["0", "1"] and rows["method"][1:] == ["fedbpt", "bbt-fed"]
        assert rows["bbt-fed.popsize"][1] == "(not set)" and rows["dataset"][2] == ""  # the same in both
        assert (f"{len(differing)} keys differ from the 1 other ticked run(s)"
                in driver.find_element(By.ID, "detail-config-note").text)
        facts = driver.execute_script(LAYOUT_JS)
        t = facts["tables"]["detail-config"]
        assert t["content"] <= t["visible"] and facts["page"] <= facts["vw"], t
        driver.execute_script("document.getElementById('detail-config-note').scrollIntoView({block: 'start'});"
                              "window.scrollBy(0, -150)")  # the rounds' end, the note, the table
        # inside the table (460 px high): the last differing keys above the first shared ones
        driver.execute_script(
            "const t = document.getElementById('detail-config');"
            "const box = [...t.querySelectorAll('*')].find(e => getComputedStyle(e).overflowY === 'auto');"
            "const last = [...t.querySelectorAll('td[data-dash-column=\"key\"]')]"
            "  .find(c => c.textContent === arguments[0]);"
            "box.scrollTop = last.getBoundingClientRect().top - box.getBoundingClientRect().top - 250;", differing[-1])
        time.sleep(0.3)
        shoot(driver, "dashboard-run-config.png")
        # ---- a one-round experiment (5 samplers x 3 seeds): on the bytes axis each variant is one
        # point, its ± std over seeds an error bar
        for run_id in picked:  # untick: the charts draw every run again
            row = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#runs tr") if run_id in r.text)
            click(driver, row.find_element(By.CSS_SELECTOR, "input[type=checkbox]"))
        pick(driver, "feddrs_samplers_ag_news")
        for name in ("fedbpt_sst2", "sst2_baselines"):
            unpick(driver, name)
        wait.until(lambda d: len([t for t in traces(d, "acc-bytes") if t["meta"] == "line"]) == 5)
        lines = [t for t in traces(driver, "acc-bytes") if t["meta"] == "line"]
        assert all(len(t["x"]) == 1 and t["name"].endswith("(n=3)") and t["error_y"] for t in lines), lines
        series = round_series(RunStore(experiments))
        for t in lines:  # the bar's half-length: the sample std of the 3 seeds' round-1 accuracy
            label = t["name"].removesuffix(" (n=3)")
            accs = series[(series["experiment"] == "feddrs_samplers_ag_news") & (series["label"] == label)
                          & (series["round"] == 1)]["global_accuracy"]
            assert t["error_y"]["array"][0] == pytest.approx(accs.std(ddof=1), rel=1e-6)
            assert t["error_y"]["arrayminus"][0] == pytest.approx(accs.std(ddof=1), rel=1e-6)
        assert not [t for t in traces(driver, "acc-bytes") if t["meta"] == "band"]  # no empty one-point band
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.5)
        shoot(driver, "dashboard-one-round.png")
        if os.environ.get("DASH_SHOTS_DIR"):  # a copy for a person to look at
            out = Path(os.environ["DASH_SHOTS_DIR"])
            out.mkdir(parents=True, exist_ok=True)
            for path in shots:
                shutil.copy(path, out / path.name)
