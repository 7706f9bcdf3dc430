"""Dashboard: records -> tables/series on fixture runs, and the page in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulations.dashboard_data import comparison, round_series, runs_table

from .conftest import REPO


def _round(i, acc, up=528, down=528, clients=None):
    return {"round": i, "global_accuracy": acc, "bytes_up": up * (i > 0), "bytes_down": down * (i > 0),
            "model_queries": 100 * i, "client_accuracy": clients or {}, "client_peak_rss_mb": 900.0 + i,
            "wall_time_s": 10.0 * i, "num_clients": 2, "bytes_up_per_client": up / 2,
            "bytes_down_per_client": down / 2}


def write_run(root: Path, run_id: str, method: str, seed: int, rounds: list[dict], finished: bool = True,
              tail: str = "", **options) -> Path:
    d = root / run_id
    d.mkdir(parents=True)
    cfg = {"method": method, "seed": seed, "dataset": "demo", "partition": "iid", "num-server-rounds": 2, **options}
    (d / "config.json").write_text(json.dumps({"run_id": run_id, "config": cfg}))
    (d / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds) + tail)
    if finished:
        from fedtext.records import summarize

        (d / "summary.json").write_text(json.dumps({**summarize(rounds), "status": "finished", "run_id": run_id}))
    return d


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


def test_round_series_accumulates_bytes_and_queries(runs):
    s = round_series(runs, ["r1-fedprompt", "r3-bbt-fed"])
    r1 = s[s.run_id == "r1-fedprompt"]
    assert r1["cum_bytes_up"].tolist() == [0, 1000, 2000] and r1["cum_model_queries"].tolist() == [0, 100, 300]
    assert r1["client_acc_min"].iloc[1] == 0.5 and r1["client_acc_max"].iloc[1] == 0.7
    assert r1["client_acc_mean"].iloc[1] == pytest.approx(0.6)
    assert set(s.label) == {"fedprompt s0", "bbt-fed s1"}
    assert len(s[s.run_id == "r3-bbt-fed"]) == 2  # the cut line is skipped
    assert round_series(runs, []).empty


def test_comparison_groups_methods(runs):
    table = comparison(runs).set_index("method")
    assert table.loc["bbt-fed", "runs"] == 2 and table.loc["fedprompt", "runs"] == 1
    assert table.loc["fedprompt", "final acc"] == "0.700"


# -------------------------------------------------------------- real browser
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER) and not os.environ.get("CI"),
                    reason="Debian chromium + chromium-driver not installed (.ci/run installs them)")
def test_dashboard_in_headless_chromium_lists_runs_draws_charts_and_updates_live(runs, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "simulations.dashboard", "--runs", str(runs), "--port", str(port), "--refresh", "0.5"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={tmp_path / 'chrome'}", "--window-size=1400,2400"):
        opts.add_argument(flag)
    opts.add_experimental_option("prefs", {"download.default_directory": str(tmp_path / "dl")})
    driver = None
    try:
        for _ in range(100):  # wait for the server to listen
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, server.stdout.read()
            time.sleep(0.2)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        driver.get(f"http://127.0.0.1:{port}")
        wait = WebDriverWait(driver, 60)
        wait.until(lambda d: all(r in d.find_element(By.ID, "runs").text
                                 for r in ("r1-fedprompt", "r2-bbt-fed", "r3-bbt-fed", "r4-broken")))
        assert "malformed" in driver.find_element(By.ID, "runs").text
        # the accuracy chart has one line per run (3 runs with rounds)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#acc-round g.trace.scatter")) == 3)
        driver.save_screenshot(str(tmp_path / "dashboard.png"))
        assert (tmp_path / "dashboard.png").stat().st_size > 10_000
        # the comparison table downloads as markdown and CSV
        wait.until(lambda d: "fedprompt" in d.find_element(By.ID, "compare").text)
        for button, name in (("md-btn", "comparison.md"), ("csv-btn", "comparison.csv")):
            driver.find_element(By.ID, button).click()
            wait.until(lambda d, n=name: (tmp_path / "dl" / n).exists() and (tmp_path / "dl" / n).stat().st_size)
        assert "| fedprompt | demo | iid | 1 |" in (tmp_path / "dl" / "comparison.md").read_text()
        assert (tmp_path / "dl" / "comparison.csv").read_text().startswith("method,dataset,partition,runs")
        # live: the running run finishes its round 2 and the page follows without a reload
        rounds = runs / "r3-bbt-fed" / "rounds.jsonl"
        lines = rounds.read_text().splitlines()[:-1] + [json.dumps(_round(2, 0.6))]
        rounds.write_text("\n".join(lines) + "\n")

        def row_of_r3(d):
            rows = [r.text for r in d.find_elements(By.CSS_SELECTOR, "#runs tr") if "r3-bbt-fed" in r.text]
            return rows[0] if rows else ""

        wait.until(lambda d: " running 2 " in f" {row_of_r3(d)} " and "malformed line" not in row_of_r3(d))
        driver.save_screenshot(str(tmp_path / "dashboard-live.png"))
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=10)
