"""Issue 70, clause 3: a study is an experiment file plus a table module (:mod:`simulations.studies`),
run by the one runner (:mod:`simulations.compare`) with the engine its file names.

No Flower and, but for one in-process run of a tiny model, no run: the engines are replaced by
stand-ins that leave a finished run's records (test_compare.py's ``record_run``).
"""

from __future__ import annotations

import importlib
import json
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fedtext.common.config import ConfigError
from simulations import compare, tables

from ..conftest import REPO
from .test_compare import record_run, refuse_run

EXPERIMENTS = sorted((REPO / "simulations" / "experiments").glob("*.toml"))
STUDIES = sorted(p.stem for p in (REPO / "simulations" / "studies").glob("[!_]*.py"))
SMALL = """methods = ["fedprompt"]
seeds = [0, 1]
num-supernodes = 2
engine = "inprocess"
{study}
[run-config]
num-server-rounds = 1
"""


def write(folder: Path, text: str) -> Path:
    path = folder / "exp.toml"
    path.write_text(text)
    return path


def recorder(started: list[Any]):
    """An engine that records a finished run of what it was handed (and what else it was told)."""

    def engine(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
               gpus_per_client: float = 0.0) -> int:
        started.append((overrides["seed"], num_supernodes, Path(overrides["output-dir"]).name))
        record_run(overrides, 0.6)
        return 0

    return engine


# ---------------------------------------------------------------- the studies there are
@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if "study" in tomllib.loads(p.read_text())],
                         ids=lambda p: p.stem)
def test_a_study_experiment_and_its_module_name_each_other(path: Path) -> None:
    exp = compare.load_experiment(path)
    module = importlib.import_module(f"simulations.studies.{exp['study']}")
    assert module.EXPERIMENT == path and callable(module.table)
    assert module.OUT == compare.default_out(path)


def test_every_study_module_is_some_experiments_study() -> None:
    named = {tomllib.loads(p.read_text()).get("study") for p in EXPERIMENTS}
    assert set(STUDIES) <= named, set(STUDIES) - named
    assert set(STUDIES) == {"costs", "deployment", "memory", "parity", "privacy", "privacy_cross_device",
                            "ray_overhead", "robust", "scale"}


@pytest.mark.parametrize(("line", "words"), [
    ('engine = "ray"', "engine = 'ray': one of deployment, flower, inprocess"),
    ('study = "nope"', "study = 'nope': no simulations/studies/nope.py (studies: costs, deployment, memory, parity, "
                       "privacy, privacy_cross_device, ray_overhead, robust, scale)"),
])
def test_an_unknown_engine_or_study_is_one_line_before_anything_runs(tmp_path, line, words) -> None:
    with pytest.raises(ConfigError, match=words.replace("(", "\\(").replace(")", "\\)")):
        compare.load_experiment(write(tmp_path, f'methods = ["fedprompt"]\n{line}\n'))


# ---------------------------------------------------------------- the one runner
def test_the_engine_the_file_names_runs_each_planned_run_once(tmp_path, monkeypatch, capsys) -> None:
    started: list[Any] = []
    monkeypatch.setattr(compare, "run_one", refuse_run)  # the Flower engine is never asked
    monkeypatch.setattr(compare, "run_in_process", recorder(started))
    exp, out = write(tmp_path, SMALL.format(study="")), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert started == [(0, 2, "runs"), (1, 2, "runs")]
    started.clear()
    assert compare.main([str(exp), "--out", str(out)]) == 0  # a rerun starts nothing: both finished
    assert started == [] and capsys.readouterr().out.count("skipped, finished as") == 2


def test_a_study_writes_its_own_table_and_finishes_only_after_runs(tmp_path, monkeypatch) -> None:
    calls: list[str] = []
    study = SimpleNamespace(table=lambda out: f"STUDY TABLE of {out.name}\n", finish=lambda out: calls.append(out.name))
    monkeypatch.setattr(compare, "load_study", lambda exp: study if exp.get("study") == "robust" else None)
    monkeypatch.setattr(compare, "run_in_process", recorder([]))
    exp, out = write(tmp_path, SMALL.format(study='study = "robust"')), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert (out / "table.md").read_text() == "STUDY TABLE of out\n" and calls == ["out"]
    assert not (out / "table.csv").exists()  # the comparison table is not written for a study
    monkeypatch.setattr(compare, "run_in_process", refuse_run)
    assert compare.main([str(exp), "--out", str(out), "--table-only"]) == 0
    assert calls == ["out"]  # --table-only computes nothing from the runs


LABELLED = """methods = ["small", "large"]
seeds = [0]
num-supernodes = 2
engine = "inprocess"
[run-config]
num-server-rounds = 1
[method.small]
method = "fedprompt"
[method.large]
method = "fedprompt"
num-supernodes = 7
engine = "flower"
"""


def test_a_label_may_set_its_own_engine_and_clients_which_never_reach_the_run(tmp_path, monkeypatch) -> None:
    """The deployment bench runs one run-config under several engines, the scale study one per federation
    size: ``[method.<label>]``'s ``engine`` and ``num-supernodes`` are the runner's, not run-config keys."""
    by_flower: list[Any] = []
    by_process: list[Any] = []
    monkeypatch.setattr(compare, "run_one", recorder(by_flower))
    monkeypatch.setattr(compare, "run_in_process", recorder(by_process))
    exp, out = write(tmp_path, LABELLED), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert by_process == [(0, 2, "runs")] and by_flower == [(0, 7, "runs")]
    runs = tables.finished_runs(out / "runs")
    assert set(runs) == {("small", 0), ("large", 0)}
    for run in runs.values():  # neither key is in the recorded run-config
        assert "engine" not in run["config"]["config"] and "num-supernodes" not in run["config"]["config"]


def test_each_started_run_leaves_a_launch_line_with_its_wall_time_and_run(tmp_path, monkeypatch) -> None:
    """The scale study's time from launch to round 0 needs the launch, which no run record holds."""
    monkeypatch.setattr(compare, "run_one", recorder([]))

    def fails(*args: Any) -> int:
        return 3

    monkeypatch.setattr(compare, "run_in_process", fails)
    exp, out = write(tmp_path, LABELLED), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out)]) == 1
    small, large = (json.loads(line) for line in (out / compare.LAUNCHES).read_text().splitlines())
    assert (small["label"], small["engine"], small["num-supernodes"], small["exit"], small["run"]) == (
        "small", "inprocess", 2, 3, None)
    (run_id,) = [Path(r["dir"]).name for r in tables.finished_runs(out / "runs").values()]
    assert (large["label"], large["engine"], large["num-supernodes"], large["exit"], large["run"]) == (
        "large", "flower", 7, 0, run_id)
    assert large["launched_epoch"] >= small["launched_epoch"] + small["wall_s"] - 0.01 and large["wall_s"] >= 0
    from fedtext.records.probes import git_state

    assert small["commit"] == large["commit"] == ((git_state()["git_commit"] or "")[:7] or None)  # the code launched
    monkeypatch.setattr(compare, "run_one", refuse_run)
    assert compare.main([str(exp), "--out", str(out), "--methods", "large"]) == 0  # skipped: no line
    assert len((out / compare.LAUNCHES).read_text().splitlines()) == 2


def test_a_run_launched_with_another_number_of_clients_is_run_again(tmp_path, monkeypatch, capsys) -> None:
    """The federation's size is the runner's, not a run-config key: the partition changes with it, so a
    finished run launched with 7 clients is not the run a label of 9 asks for (launches.jsonl says which),
    and a failed 9-client launch leaves no line naming the older 7-client run as its own."""
    started: list[Any] = []
    monkeypatch.setattr(compare, "run_one", recorder(started))
    monkeypatch.setattr(compare, "run_in_process", recorder([]))
    exp, out = write(tmp_path, LABELLED), tmp_path / "out"
    argv = [str(exp), "--out", str(out), "--methods", "large"]

    def skipped_as() -> str:
        text = capsys.readouterr().out
        assert "skipped, finished as" in text, text
        return text.split("skipped, finished as ", 1)[1].split()[0]

    assert compare.main(argv) == 0 and started == [(0, 7, "runs")]
    (seven,) = [p.name for p in (out / "runs").iterdir()]
    capsys.readouterr()
    assert compare.main(argv) == 0 and len(started) == 1 and skipped_as() == seven
    exp.write_text(LABELLED.replace("num-supernodes = 7", "num-supernodes = 9"))
    monkeypatch.setattr(compare, "run_one", lambda *args: 1)  # the 9-client launch fails, leaving no run
    assert compare.main(argv) == 1
    assert json.loads((out / compare.LAUNCHES).read_text().splitlines()[-1])["run"] is None
    monkeypatch.setattr(compare, "run_one", recorder(started))
    assert compare.main(argv) == 0 and started[1:] == [(0, 9, "runs")]  # not the 7-client run again
    (nine,) = [p.name for p in (out / "runs").iterdir() if p.name != seven]
    capsys.readouterr()
    assert compare.main(argv) == 0 and len(started) == 2 and skipped_as() == nine
    exp.write_text(LABELLED)  # back to 7: the 7-client run is the one
    assert compare.main(argv) == 0 and len(started) == 2 and skipped_as() == seven


def test_a_run_without_a_launch_line_is_sized_by_its_records_provenance() -> None:
    """Runs recorded before launches.jsonl existed (or elsewhere): the simulated SuperNodes, or the nodes the
    grid had at the start, from the record; neither: any size."""
    def run(provenance: dict[str, Any] | None) -> dict[str, Any]:
        return {"dir": "/x/r1", "config": {"provenance": provenance} if provenance is not None else {}}

    assert compare.size_of(run({"num_supernodes": 9, "nodes_at_start": 9}), {"r1": 7}) == 7  # the launch line first
    assert compare.size_of(run({"num_supernodes": 9, "nodes_at_start": 3}), {}) == 9
    assert compare.size_of(run({"num_supernodes": None, "nodes_at_start": 3000}), {}) == 3000  # in process
    assert compare.size_of(run({}), {}) is None and compare.size_of(run(None), {}) is None


def test_a_study_may_bring_its_own_engine(tmp_path, monkeypatch) -> None:
    started: list[Any] = []
    study = SimpleNamespace(ENGINES={"cost": recorder(started)}, table=lambda out: "T\n")
    monkeypatch.setattr(compare, "load_study", lambda exp: study if exp.get("study") == "robust" else None)
    text = SMALL.format(study='study = "robust"').replace('engine = "inprocess"', 'engine = "cost"')
    exp, out = write(tmp_path, text), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out)]) == 0 and len(started) == 2
    with pytest.raises(ConfigError, match="engine = 'cost': one of deployment, flower, inprocess$"):  # not without the study
        compare.load_experiment(write(tmp_path, text.replace('study = "robust"', "")))
    with pytest.raises(ConfigError, match=r"\[method.large\] engine = 'ray': one of"):
        compare.load_experiment(write(tmp_path, LABELLED.replace('"flower"', '"ray"')))


def test_experiment_json_keeps_the_files_methods_when_a_few_labels_run(tmp_path, monkeypatch) -> None:
    """docs/privacy.md runs a sweep two labels at a time in processes side by side: each writes the
    experiment's folder marker, which must still list the file's labels and seeds."""
    monkeypatch.setattr(compare, "run_in_process", recorder([]))
    text = SMALL.format(study="").replace('methods = ["fedprompt"]', 'methods = ["fedprompt", "fedavg"]')
    exp, out = write(tmp_path, text), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out), "--methods", "fedavg", "--seeds", "3"]) == 0
    marker = json.loads((out / "experiment.json").read_text())
    assert marker["methods"] == ["fedprompt", "fedavg"] and marker["seeds"] == [0, 1, 3]


def test_in_process_runs_take_no_ray_options(tmp_path, capsys) -> None:
    exp = write(tmp_path, SMALL.format(study=""))
    assert compare.main([str(exp), "--out", str(tmp_path / "o"), "--ray-address", "auto"]) == 2
    assert "runs in this process, without Ray" in capsys.readouterr().err


def test_a_failed_in_process_run_is_counted_and_its_traceback_kept(tmp_path, monkeypatch, capsys) -> None:
    import simulations.inprocess

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("round 1 exploded")

    monkeypatch.setattr(simulations.inprocess, "run", boom)
    exp, out = write(tmp_path, SMALL.format(study="")), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out), "--seeds", "0"]) == 1
    assert "failed: RuntimeError: round 1 exploded" in capsys.readouterr().out
    assert "round 1 exploded" in (out / "fedprompt-s0.log").read_text()


def test_one_real_in_process_run_through_the_runner(tmp_path, capsys) -> None:
    """The in-process engine end to end on the demo task (fedprompt, 1 round of 2 clients, 2 local
    steps): a finished run under ``<out>/runs``, counted by the table, skipped when run again."""
    text = SMALL.format(study="").replace("seeds = [0, 1]", "seeds = [0]") + (
        "shots-per-class = 2\nclient-test-size = 0\neval-size = 8\nmax-length = 32\nfedprompt.local-steps = 2\n")
    exp, out = write(tmp_path, text), tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out)]) == 0
    (run,) = tables.finished_runs(out / "runs").values()
    assert run["summary"]["status"] == "finished" and run["config"]["config"]["num-server-rounds"] == 1
    assert "| fedprompt | demo | iid | 1 |" in (out / "table.md").read_text()
    capsys.readouterr()
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert "skipped, finished as" in capsys.readouterr().out


# ---------------------------------------------------------------- finished runs, read once
def test_a_study_reads_the_newest_finished_run_of_each_seed(tmp_path) -> None:
    """The compare table's rule (one_run_per_seed) for the studies too: a failed run is left out, a
    seed finished twice counts its newest."""
    runs_dir = tmp_path / "runs"
    ov = {"method": "fedprompt", "run-name": "mean-none", "num-server-rounds": 1, "output-dir": str(runs_dir)}
    record_run({**ov, "seed": 0}, 0.5)
    newer = record_run({**ov, "seed": 0}, 0.7)
    record_run({**ov, "seed": 1}, 0.9, status="failed")
    found = tables.finished_runs(runs_dir)
    assert list(found) == [("mean-none", 0)] and Path(found[("mean-none", 0)]["dir"]) == newer
