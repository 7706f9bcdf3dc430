"""The plot command, ``python -m simulations.plot``, in a subprocess: PNGs of the requested
size, small multiples per experiment, whole-number round ticks; no records is exit 2."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO
from ..unit.test_dashboard import _round, write_experiment, write_run


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
