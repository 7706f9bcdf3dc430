"""What both dashboard browser tests share (tests/system/test_dashboard_browser.py and
test_dashboard_explore_browser.py): the dashboard server in a subprocess and headless
Debian Chromium driving it, stopped by PID at the end; the experiment picker's moves."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from simulations.deployment import free_port

from ..conftest import REPO

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
WAIT_S = 20  # an experiment pick or unpick re-renders every chart: seconds on 2 shared cores


@contextmanager
def dashboard_in_chromium(runs: Path, tmp_path: Path, refresh_s: float, window: str,
                          prefs: dict[str, Any] | None = None) -> Iterator[Any]:
    """``python -m simulations.dashboard --runs runs`` on a free port and a headless Chromium
    of ``window`` (``"1280,900"``) on its page; yields the selenium driver. Both are stopped
    at the end (the server by its PID: the one process this starts), the server's log in
    ``tmp_path/server.log`` (shown when it dies before listening)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    port = free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "simulations.dashboard", "--runs", str(runs), "--port", str(port),
         "--refresh", str(refresh_s)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", f"--user-data-dir={tmp_path / 'chrome'}", f"--window-size={window}"):
        opts.add_argument(flag)
    if prefs:
        opts.add_experimental_option("prefs", prefs)
    driver = None
    try:
        for _ in range(150):  # wait for the server to listen
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            time.sleep(0.2)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
        driver.get(f"http://127.0.0.1:{port}")
        yield driver
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=10)
        log.close()


def options(d: Any, dropdown: str = "experiment") -> list:
    """The open dropdown's options (Dash's virtualized select)."""
    from selenium.webdriver.common.by import By

    return d.find_elements(By.CSS_SELECTOR, f"#{dropdown} .VirtualizedSelectOption")


def chips(d: Any) -> list[str]:
    """The experiments picked (the multi-select's chips), in order."""
    from selenium.webdriver.common.by import By

    return [c.text.strip() for c in d.find_elements(By.CSS_SELECTOR, "#experiment .Select-value-label")]


def pick(d: Any, name: str) -> None:
    """The experiment picker: type to search, click the exact option once the search has
    filtered (every option left contains the name; "fedbpt_sst2" also leaves
    "fedbpt_sst2_bf16"). Escape afterwards would clear every chip: not pressed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d.find_element(By.CSS_SELECTOR, "#experiment input").send_keys(name)
    WebDriverWait(d, WAIT_S).until(lambda d: name in (texts := [o.text for o in options(d)])
                                   and all(name in t for t in texts))
    next(o for o in options(d) if o.text == name).click()
    WebDriverWait(d, WAIT_S).until(lambda d: name in chips(d))


def unpick(d: Any, name: str) -> None:
    """Remove the experiment ``name``'s chip."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chip = next(c for c in d.find_elements(By.CSS_SELECTOR, "#experiment .Select-value")
                if c.find_element(By.CSS_SELECTOR, ".Select-value-label").text.strip() == name)
    chip.find_element(By.CSS_SELECTOR, ".Select-value-icon").click()
    WebDriverWait(d, WAIT_S).until(lambda d: name not in chips(d))
