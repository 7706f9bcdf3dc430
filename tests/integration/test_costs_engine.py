"""The cost study's engine (simulations/studies/costs.py, ``engine = "cost"``) through the one runner:
each row measured in a fresh process, its round's run record moved into ``<out>/runs`` only with its
row beside it (so that a rerun skips it), and a measurement the kernel kills still a row of the
table. The experiment is simulations/experiments/costs.toml itself, at ``tiny-roberta`` on the demo
task (a profile added to a copy), so its settings are the ones the papers' shapes run with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from simulations import compare
from simulations.studies import costs

DEMO = '\n[profile.demo]\n[profile.demo.run-config]\nmodel = "tiny-roberta"\ndataset = "demo"\n'


def experiment(tmp_path: Path) -> Path:
    """The cost experiment with a ``demo`` profile: tiny-roberta on the demo task, no data folder read."""
    path = tmp_path / "costs.toml"
    path.write_text(costs.EXPERIMENT.read_text() + DEMO)
    return path


def test_a_row_is_measured_in_a_fresh_process_and_its_finished_run_skipped_on_rerun(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    argv = [str(experiment(tmp_path)), "--profile", "demo", "--methods", "fedprompt", "--out", str(out)]
    assert compare.main(argv) == 0
    (run,) = sorted((out / "runs").iterdir())
    cost = json.loads((run / costs.COST_FILE).read_text())
    assert (run / "summary.json").is_file() and not (run / "checkpoint.npz").exists()
    assert not list(out.glob(".cost-*"))  # the temporary folder is gone
    assert cost["machine"]["cores"] and cost["measured_epoch"] > 0
    (row,) = json.loads((out / "tiny-roberta.json").read_text())["rows"]
    assert row == cost["row"] and (row["method"], row["backprop_weights"], row["bytes_up"]) == ("fedprompt", 1600, 6528)
    assert "| `fedprompt` | 1.6 K | 1.6 K / 1.6 K | 6.38 KB / 6.38 KB |" in (out / "table.md").read_text()
    (launch,) = [json.loads(line) for line in (out / compare.LAUNCHES).read_text().splitlines()]
    assert (launch["engine"], launch["exit"], launch["run"]) == ("cost", 0, run.name)
    capsys.readouterr()
    assert compare.main(argv) == 0
    assert f"skipped, finished as {run.name}" in capsys.readouterr().out


@pytest.mark.parametrize(("child", "error", "rc"), [
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9 (out of memory?)", -9),
    ("raise ValueError('no such shape')", "ValueError: no such shape", 1),
])
def test_a_killed_or_failed_measurement_is_an_error_row_and_is_tried_again(tmp_path, monkeypatch, child, error,
                                                                            rc) -> None:
    """FedDF at RoBERTa-large ran out of 24 GiB: the kernel's SIGKILL (exit -9) left its row as an error."""
    monkeypatch.setattr(costs, "CHILD", [sys.executable, "-c", child])
    out = tmp_path / "out"
    argv = [str(experiment(tmp_path)), "--profile", "demo", "--methods", "feddf", "--out", str(out)]
    assert compare.main(argv) == 1
    assert list((out / "runs").iterdir()) == [] and not list(out.glob(".cost-*"))
    (row,) = json.loads((out / "tiny-roberta.json").read_text())["rows"]
    assert row == {"model": "tiny-roberta", "method": "feddf", "error": error}
    assert f"| `feddf` | failed: {error} | | | | | | |" in (out / "table.md").read_text()
    assert compare.main(argv) == 1  # not finished: measured again
    launches = [json.loads(line) for line in (out / compare.LAUNCHES).read_text().splitlines()]
    assert [(x["exit"], x["run"]) for x in launches] == [(rc, None), (rc, None)]
