"""The cost tables at the papers' scale, a study (simulations/studies/costs.py and
simulations/experiments/costs.toml): what a row counts, the settings the experiment file gives
each run, the record the finished runs make, and the papers' figures set beside it. The rows here
are measured on ``tiny-roberta`` (RoBERTa's architecture at width 32): the same code measures
RoBERTa-large. The engine's fresh process is tests/integration/test_costs_engine.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from fedtext.backbone.shapes import SHAPES
from fedtext.common.registry import METHODS
from fedtext.methods.fes.model import planned_frozen
from simulations import compare
from simulations.studies import costs
from simulations.studies.costs import CLAIMS, STEP_KEYS, Backprop, measure, paper_rows

from .test_compare import record_run


@pytest.fixture
def data_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The experiment's ``../shared/data/<name>`` folders, empty, beside a checkout folder that is the
    working directory: planning checks that they are folders, wherever the real checkout lies."""
    (tmp_path / "checkout").mkdir()
    for name in ("sst2", "ag_news"):
        (tmp_path / "shared" / "data" / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "checkout")


def planned(method: str, profile: str | None = None) -> dict[str, Any]:
    """The run-config overrides the runner gives ``method``'s row under ``profile``."""
    exp = compare.with_profile(compare.load_experiment(costs.EXPERIMENT), profile)
    (ov,) = compare.plan({**exp, "methods": [method]}, None)
    return ov


def fes_plan(keys: dict[str, Any], layers: int) -> tuple[int, int]:
    """FeS's frozen and bias-only layers of ``keys`` on an encoder of ``layers`` (fedtext.methods.fes.model)."""
    frozen = planned_frozen(keys["fes.frozen-layers"], layers)
    return frozen, layers - frozen if keys["fes.bias-layers"] == -1 else keys["fes.bias-layers"]


def test_backprop_counts_the_weights_a_backward_reaches_once_each() -> None:
    torch.manual_seed(0)
    trained, frozen = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)  # 3*2 + 2 = 8 weights; 2 + 1 frozen
    frozen.requires_grad_(False)
    x = torch.randn(4, 3)
    original = torch.autograd.backward
    with Backprop().active() as bp:
        for _ in range(2):  # two steps: the same leaves, counted once
            frozen(trained(x)).sum().backward()
        torch.autograd.backward(trained(x).sum())  # the functional form too
    assert (bp.weights, bp.calls) == (8, 3)
    assert torch.autograd.backward is original  # restored
    with torch.no_grad(), Backprop().active() as none:
        frozen(trained(x))
    assert (none.weights, none.calls) == (0, 0)


def test_a_row_runs_one_unit_of_local_work_at_the_papers_settings(data_folders: None) -> None:
    keys = planned("fedprompt")
    assert keys["fedprompt.local-steps"] == 1 and keys["prompt-length"] == 50  # FedDLS Table 1's T
    assert (keys["model"], keys["weights"], keys["num-server-rounds"]) == ("roberta-large", "random", 1)
    fes = planned("fes")
    # FeS's AG News plan on 24 layers: 2/3 frozen, the rest bias-only; length 256 (§4.1)
    assert (*fes_plan(fes, SHAPES["roberta-large"].config["num_hidden_layers"]), fes["max-length"]) == (16, 8, 256)
    assert fes["fes.max-local-steps"] == 1 and fes["dataset"].endswith("ag_news")
    base = planned("fes", "roberta-base")
    assert base["model"] == "roberta-base"
    assert fes_plan(base, SHAPES["roberta-base"].config["num_hidden_layers"]) == (8, 4)
    assert planned("bbt-fed")["bbt-fed.intrinsic-dim"] == 500
    assert planned("fedbpt")["fedbpt.intrinsic-dim"] == 500
    feddls = planned("feddls")
    assert feddls["feddls.steps"] == 1 and feddls["num-server-rounds"] == 2  # round 2 downloads the residual
    for method in METHODS:  # every method's local work is cut to one unit: each config has one of the step keys
        config = METHODS[method]
        steps = [config.key(f) for f in STEP_KEYS if f in config.__dataclass_fields__]
        assert steps and all(planned(method)[key] == 1 for key in steps), method
    minilm = planned("fedavg", "minilm")  # a checkpoint keeps its own weights
    assert (minilm["model"], minilm["weights"]) == ("all-MiniLM-L6-v2", "pretrained")


def test_the_experiment_lists_every_registered_method_with_the_fewest_clients_its_round_takes() -> None:
    """Adding a method adds a cost row (docs/add-a-method.md); as the command before the runner did,
    whose default --methods was every registered method."""
    exp = compare.load_experiment(costs.EXPERIMENT)
    assert exp["methods"] == list(METHODS) and (exp["study"], exp["engine"]) == ("costs", "cost")
    assert set(exp["method"]) <= set(METHODS)  # the papers' settings, by method: no variant
    clients = {label: s["num-supernodes"] for label, s in compare.label_settings(exp).items()}
    assert clients == {m: max(1, METHODS[m].min_clients_per_round) for m in METHODS}
    assert clients["fedbpt"] == 2


def test_each_growth_backbone_is_a_profile_whose_record_is_committed() -> None:
    assert costs.backbones() == {"roberta-large": None, "roberta-base": "roberta-base",
                                 "all-MiniLM-L6-v2": "minilm", "tiny-roberta": "tiny"}
    for model in costs.GROWTH_MODELS:
        assert costs.has_record(model) and costs.load(model)["model"] == model
    assert costs.folder("roberta-large") == costs.OUT and costs.GROWTH_FIGURE.is_file()
    assert costs.command("roberta-base").endswith("costs.toml --profile roberta-base")


def test_growth_runs_each_backbones_profile_then_draws_the_figure(monkeypatch, capsys) -> None:
    """``python -m simulations.studies.costs --growth``: the runner once per growth backbone, by its
    profile, then the figure and its table from the three records (here the committed ones; the
    drawing itself is matplotlib's, seconds, left out)."""
    calls: list[list[str]] = []
    drawn: list[tuple[list[str], Path]] = []
    monkeypatch.setattr(compare, "main", lambda argv: calls.append(argv) or 0)
    monkeypatch.setattr(costs, "growth_figure", lambda found, path: drawn.append(([r["model"] for r in found], path)))
    assert costs.main(["--growth", "--methods", "fedprompt", "fes"]) == 0
    assert [argv[1:] for argv in calls] == [["--profile", "minilm", "--methods", "fedprompt", "fes"],
                                            ["--profile", "roberta-base", "--methods", "fedprompt", "fes"],
                                            ["--methods", "fedprompt", "fes"]]
    assert all(Path(argv[0]).resolve() == costs.EXPERIMENT for argv in calls)
    assert drawn == [(list(costs.GROWTH_MODELS), costs.GROWTH_FIGURE)]
    assert costs.GROWTH_FIGURE == costs.REPO / "simulations" / "results" / "costs" / "growth.png"
    assert "| `fedprompt` | 0.2 s, 745 MB | 1.4 s, 1.38 GB | 4.6 s, 2.66 GB | 1.08 / 0.47 |" in capsys.readouterr().out


@pytest.mark.parametrize(("method", "backprop"), [("fedprompt", 50 * 32), ("bbt-fed", 0)])
def test_a_row_measures_bytes_values_and_back_propagation(method: str, backprop: int, tmp_path: Path,
                                                          data_folders: None) -> None:
    """fedprompt's T = 50 prompt of width 32 is what it trains and sends (float32 + a 128 B
    NPY header); bbt-fed's z (d = 500) travels and nothing is back-propagated."""
    keys = {**planned(method), "model": "tiny-roberta", "dataset": "demo", "output-dir": "elsewhere"}
    row, record = measure(keys, tmp_path / "round")
    sent = 50 * 32 if method == "fedprompt" else 500
    assert row["backprop_weights"] == backprop
    assert row["values_up"] == row["values_down"] == sent
    assert row["bytes_up"] == row["bytes_down"] == 4 * sent + 128
    assert row["weights_total"] == 1_643_168 and row["queries"] > 0 and row["fit_s"] > 0
    assert row["round_peak_mb"] >= row["round_start_mb"] > 100 and row["server_s"] >= 0
    assert (row["model"], row["method"], row["clients"]) == ("tiny-roberta", method, 1)
    assert "output-dir" not in row["keys"] and row["keys"]["prompt-length"] == 50
    assert record.parent == tmp_path / "round" and (record / "config.json").is_file()


# ---------------------------------------------------------------- the record the runs make
MACHINE = {"cpu": "AMD EPYC", "cores": 2, "torch_threads": 2, "torch": "2.13.0+cpu", "date": "2026-11-27",
           "commit": "7388719"}


def cost_run(out: Path, method: str, epoch: float, model: str = "tiny-roberta", ov: dict[str, Any] | None = None,
             **where: Any) -> dict[str, Any]:
    """A finished cost run of ``method`` under ``<out>/runs`` (of the run-config ``ov``) as the engine
    leaves it: the round's records and its :data:`costs.COST_FILE`; its row."""
    ov = ov or {"method": method, "model": model, "weights": "random", "num-server-rounds": 1,
                "output-dir": str(out / "runs")}
    row = {"model": model, "method": method, "keys": {"weights": "random"}, "weights_total": 1_643_168,
           "backprop_weights": 1600, "values_up": 1600, "values_down": 1600, "bytes_up": 6528.0,
           "bytes_down": 6528.0, "fit_s": epoch / 1000, "round_peak_mb": 734.1, "queries": 8, "server_s": 0.68}
    machine = {**MACHINE, **where, "load_before": 1.0, "load_after": 1.5}
    (record_run(ov, 0.5) / costs.COST_FILE).write_text(
        json.dumps({"row": row, "machine": machine, "measured_epoch": epoch}))
    return row


def failed(out: Path, method: str, epoch: float, error: str, model: str = "tiny-roberta") -> None:
    """A failed measurement as the engine records it (:data:`costs.FAILURES`)."""
    with (out / costs.FAILURES).open("a") as fh:
        fh.write(json.dumps({"row": {"model": model, "method": method, "error": error},
                             "machine": {**MACHINE, "load_before": 2.0, "load_after": 2.0},
                             "measured_epoch": epoch, "exit": -9}) + "\n")


def test_finish_writes_each_backbones_record_in_the_registrys_order_with_failed_rows(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fes = cost_run(out, "fes", 100.0)
    cost_run(out, "fedprompt", 200.0)
    failed(out, "feddf", 300.0, "killed by signal 9 (out of memory?)")
    cost_run(out, "fedavg", 400.0, commit="abcdef0")  # measured with other code: listed under again
    cost_run(out, "fedavg", 50.0, model="roberta-base")
    (path, base) = sorted(costs.finish(out), key=lambda p: p.name != "tiny-roberta.json")
    record = json.loads(path.read_text())
    assert [r["method"] for r in record["rows"]] == ["fedprompt", "fedavg", "feddf", "fes"]  # METHODS order
    assert record["rows"][2] == {"model": "tiny-roberta", "method": "feddf",
                                 "error": "killed by signal 9 (out of memory?)"}
    assert record["rows"][3] == fes and record["model"] == "tiny-roberta"
    assert record["machine"] == {**MACHINE, "load_before": 1.0, "load_after": 2.0, "again": [
        {"methods": ["fedavg"], **MACHINE, "commit": "abcdef0", "load_before": 1.0, "load_after": 1.5,
         "from_runs": True}]}
    assert [r["method"] for r in json.loads(base.read_text())["rows"]] == ["fedavg"]
    text = costs.table(out)
    assert "| `feddf` | failed: killed by signal 9 (out of memory?) | | | | | | |" in text
    assert "| `fedprompt` | 1.6 K | 1.6 K / 1.6 K | 6.38 KB / 6.38 KB | 0.2 | 734 MB | 8 | 0.68 |" in text
    assert text.index("roberta-base (") < text.index("tiny-roberta (")
    before = path.read_text()
    costs.finish(out)  # the same runs, the same record
    assert path.read_text() == before
    failed(out, "fedprompt", 500.0, "ValueError: bad shape")  # the newest measurement is the row
    costs.finish(out)
    assert json.loads(path.read_text())["rows"][0]["error"] == "ValueError: bad shape"


def test_rows_measured_again_replace_theirs_and_the_rest_stay(tmp_path: Path) -> None:
    """A committed record without its runs (or a folder of which some methods ran again): its other
    rows and its machine stay, the new rows are listed under ``again``."""
    out = tmp_path / "out"
    out.mkdir()
    old = {"model": "tiny-roberta", "machine": {**MACHINE, "load_before": 0.5, "load_after": 0.7, "again": [
        {"methods": ["fes"], **MACHINE, "date": "2026-11-28"}]},
           "rows": [{"model": "tiny-roberta", "method": m, "error": "old"} for m in ("fedprompt", "feddf", "fes")]}
    (out / "tiny-roberta.json").write_text(json.dumps(old))
    row = cost_run(out, "feddf", 100.0, date="2026-11-30")
    costs.finish(out)
    record = json.loads((out / "tiny-roberta.json").read_text())
    assert record["rows"] == [old["rows"][0], row, old["rows"][2]]
    assert record["machine"] == {**old["machine"], "again": [*old["machine"]["again"], {
        "methods": ["feddf"], **MACHINE, "date": "2026-11-30", "load_before": 1.0, "load_after": 1.5,
        "from_runs": True}]}
    before = (out / "tiny-roberta.json").read_text()
    costs.finish(out)
    assert (out / "tiny-roberta.json").read_text() == before
    assert costs.finish(tmp_path / "empty") == []  # no measurement: no record written


def test_the_runner_hands_each_row_to_the_cost_engine_and_skips_finished_ones(tmp_path: Path, monkeypatch,
                                                                               capsys, data_folders: None) -> None:
    """The study through the one runner: the engine it names, the study's table from the record
    finish writes, and a rerun that starts nothing (the runs are finished)."""
    started: list[tuple[str, int]] = []

    def engine(overrides: dict[str, Any], num_supernodes: int, *args: Any) -> int:
        started.append((overrides["method"], num_supernodes))
        cost_run(Path(overrides["output-dir"]).parent, overrides["method"], 100.0 + len(started), "roberta-large",
                 overrides)
        return 0

    monkeypatch.setattr(costs, "measure_in_subprocess", engine)
    out = tmp_path / "out"
    argv = [str(costs.EXPERIMENT), "--out", str(out), "--methods", "fedprompt", "fedbpt"]
    assert compare.main(argv) == 0
    assert started == [("fedprompt", 1), ("fedbpt", 2)]
    table = (out / "table.md").read_text()
    assert table.startswith("roberta-large (1.64 M weights, random)") and "| `fedbpt` |" in table
    capsys.readouterr()
    assert compare.main(argv) == 0 and len(started) == 2
    assert capsys.readouterr().out.count("skipped, finished as") == 2


def test_the_papers_figures_stand_beside_the_rows_with_the_ratio() -> None:
    rows = [{"method": "feddls", "bytes_up": 228, "bytes_down": 1328, "backprop_weights": 0},
            {"method": "bbt-fed", "bytes_up": 2128}]
    text = paper_rows("feddls", {"roberta-large": {"rows": rows}, "roberta-base": {"rows": []}})
    lines = {line.split(" | ")[1]: line for line in text.splitlines()[2:]}
    assert "| 2.28 |" in lines["upload per round (`feddls`)"]  # 228 B against 0.8 K bits = 100 B
    assert "| 1.33 |" in lines["download per round (`feddls`)"]  # 1,328 B against 8 K bits = 1,000 B
    assert "| 2.13 |" in lines["BBT (Fed) upload per round (`bbt-fed`)"]  # 2,128 B against 1,000 B
    assert "| none | same |" in lines["back-propagation (G: no) (`feddls`)"]
    assert "not measured" in lines["Prompt Tuning (Fed) upload per round (`fedprompt`)"]
    memory = paper_rows("fes", {"roberta-large": {"rows": [{"method": "fes", "round_peak_mb": 2.3 * 1024 * 2}]}})
    assert "| 4.60 GB | 2.00 |" in memory
    # FedDPG states its own generator at RoBERTa-base: its row is read from that backbone's record
    params = paper_rows("feddpg", {"roberta-large": {"rows": [{"method": "feddpg", "values_up": 1}]},
                                   "roberta-base": {"rows": [{"method": "feddpg", "values_up": 92_500}]}})
    assert "| 185K | 92.5 K | 0.50 |" in params
    # a ratio claim: FedFSL's upload per FeS byte against the paper's 1,841.7x; FeS's round traffic at 5 clients
    fes = paper_rows("fes", {"roberta-large": {"rows": [
        {"method": "fedfsl", "bytes_up": 3683.4, "bytes_down": 6.84e9 - 3683.4, "round_peak_mb": 1.0},
        {"method": "fes", "bytes_up": 1.0, "bytes_down": 1.0}]}})
    assert "| 3,683.4× (`fedfsl` / `fes`) | 2.00 |" in fes
    assert "| 68.4 GB | 31.9 GB | 0.50 |" in fes  # (up + down) x 5 = 34.2e9 B = 31.9 GiB, half of 68.4e9
    failed_rows = paper_rows("feddrs", {"roberta-large": {"rows": [{"method": "feddrs", "bytes_up": 5},
                                                                 {"method": "fedavg", "error": "killed"}]}})
    assert failed_rows.count("not measured") == 2  # a failed row is no figure
    assert {c.page for c in CLAIMS} == {"feddls", "fes", "fedbpt", "feddpg", "feddrs"}
    assert all(c.method in METHODS and (not c.versus or c.versus in METHODS) for c in CLAIMS)
