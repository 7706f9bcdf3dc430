"""Compare runner: a rerun skips finished runs, a table counts each finished seed once and
says which planned runs it lacks, the default output folder. No Flower: ``run_one`` is
replaced by a writer of the records a run leaves (:class:`fedtext.records.RunRecorder`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedtext.records import FINISHED, RunRecorder
from simulations import compare

from ..conftest import REPO

EXPERIMENT = """methods = ["fedprompt", "bbt-fed"]
seeds = [0, 1]
num-supernodes = 2
[run-config]
num-server-rounds = 1
fedprompt.local-steps = 2
"""
SKIPPED = "skipped, finished as"  # compare.main's line for a skipped run


def write_experiment(folder: Path, text: str = EXPERIMENT, stem: str = "exp") -> Path:
    path = folder / f"{stem}.toml"
    path.write_text(text)
    return path


def record_run(overrides: dict[str, Any], accuracy: float, status: str | None = FINISHED) -> Path:
    """The records a run of ``overrides`` leaves in its ``output-dir``: ``config.json``
    as :func:`fedtext.server_app.build` fills it, rounds 0-1, and a summary with ``status``
    (None: none, as a run still going or killed by SIGKILL leaves it)."""
    config = {**compare.resolved(overrides), "resolved-task": "sst2", "trainable-parameters": 100}
    rec = RunRecorder(overrides["output-dir"], config)
    for r in (0, 1):
        rec.log_round({"round": r, "global_accuracy": accuracy if r else 0.5, "bytes_up": 100 * r,
                       "bytes_down": 100 * r, "num_clients": 2 * r, "wall_time_s": float(r)})
    rec.finish(status or FINISHED)
    if status is None:
        (rec.dir / "summary.json").unlink()
    return rec.dir


def fake_run_one(started: list[tuple[str, int]]):
    """A ``compare.run_one`` that records a finished run (accuracy 0.6 + seed / 10) instead of running it."""

    def run_one(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
                gpus_per_client: float = 0.0) -> int:
        started.append((overrides.get("run-name") or overrides["method"], overrides["seed"]))
        record_run(overrides, 0.6 + overrides["seed"] / 10)
        return 0

    return run_one


def refuse_run(*args: Any, **kwargs: Any) -> int:
    raise AssertionError("the compare runner started a run")


def table_body(out: Path) -> str:
    """table.md without its first line (the header comment holds today's date)."""
    return (out / "table.md").read_text().split("\n", 1)[1]


def planned(exp: Path, out: Path, label: str, seed: int) -> dict[str, Any]:
    """The overrides the compare runner gives the run (``label``, ``seed``) of ``exp``."""
    runs = compare.plan(compare.load_experiment(exp), None)
    ov = next(o for o in runs if (o.get("run-name") or o["method"]) == label and o["seed"] == seed)
    return {**ov, "output-dir": str((out / "runs").resolve())}


def test_rerun_of_a_finished_experiment_starts_no_run_and_keeps_its_table(tmp_path, monkeypatch, capsys):
    exp, out, started = write_experiment(tmp_path), tmp_path / "out", []
    monkeypatch.setattr(compare, "run_one", fake_run_one(started))
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert sorted(started) == [("bbt-fed", 0), ("bbt-fed", 1), ("fedprompt", 0), ("fedprompt", 1)]
    first = table_body(out)
    assert "| fedprompt | demo | iid | 2 | 0.650 ± 0.071 |" in first and "Fewer" not in first
    capsys.readouterr()
    monkeypatch.setattr(compare, "run_one", refuse_run)
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert capsys.readouterr().out.count(SKIPPED) == 4
    assert table_body(out) == first


def test_a_changed_experiment_reruns_what_it_changes_and_the_newest_seed_counts(tmp_path, monkeypatch, capsys):
    exp, out, started = write_experiment(tmp_path), tmp_path / "out", []
    monkeypatch.setattr(compare, "run_one", fake_run_one(started))
    assert compare.main([str(exp), "--out", str(out)]) == 0
    write_experiment(tmp_path, EXPERIMENT.replace("fedprompt.local-steps = 2", "fedprompt.local-steps = 3"))
    started.clear()
    capsys.readouterr()
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert sorted(started) == [("fedprompt", 0), ("fedprompt", 1)]  # bbt-fed takes no fedprompt key
    assert capsys.readouterr().out.count(SKIPPED) == 2
    assert "| fedprompt | demo | iid | 2 |" in table_body(out)  # 4 finished runs, 2 seeds


def test_a_seed_finished_twice_counts_once_the_newest(tmp_path):
    exp, out = write_experiment(tmp_path), tmp_path / "out"
    record_run(planned(exp, out, "fedprompt", 0), 0.6)
    record_run(planned(exp, out, "fedprompt", 0), 0.9)  # the same run again, later
    record_run(planned(exp, out, "fedprompt", 1), 0.7)
    assert compare.main([str(exp), "--out", str(out), "--table-only", "--methods", "fedprompt"]) == 0
    assert "| fedprompt | demo | iid | 2 | 0.800 ± 0.141 |" in table_body(out)


def test_unfinished_and_failed_runs_are_left_out_and_rerun(tmp_path, monkeypatch):
    exp, out, started = write_experiment(tmp_path), tmp_path / "out", []
    record_run(planned(exp, out, "fedprompt", 0), 0.6)
    record_run(planned(exp, out, "fedprompt", 1), 0.9, status="failed")
    record_run(planned(exp, out, "fedprompt", 1), 0.95, status=None)  # no summary.json
    assert compare.main([str(exp), "--out", str(out), "--table-only", "--methods", "fedprompt"]) == 0
    assert "| fedprompt | demo | iid | 1 | 0.600 |" in table_body(out)
    monkeypatch.setattr(compare, "run_one", fake_run_one(started))
    assert compare.main([str(exp), "--out", str(out), "--methods", "fedprompt"]) == 0
    assert started == [("fedprompt", 1)]


def test_a_variant_with_fewer_seeds_than_asked_is_noted_under_the_table(tmp_path):
    exp, out = write_experiment(tmp_path), tmp_path / "out"
    for seed in (0, 1):
        record_run(planned(exp, out, "fedprompt", seed), 0.6)
    record_run(planned(exp, out, "bbt-fed", 0), 0.6)
    assert compare.main([str(exp), "--out", str(out), "--table-only"]) == 0
    assert table_body(out).endswith(
        "\nFewer finished runs than the experiment asks for: bbt-fed has 1 of 2 (missing seed 1).\n")
    record_run(planned(exp, out, "bbt-fed", 1), 0.6)
    assert compare.main([str(exp), "--out", str(out), "--table-only"]) == 0
    assert "Fewer" not in table_body(out)


def test_default_output_folder(tmp_path, monkeypatch):
    stem = "outside-the-checkout"
    exp = write_experiment(tmp_path, stem=stem)
    assert compare.default_out(exp) == tmp_path / "results" / stem
    record_run(planned(exp, compare.default_out(exp), "fedprompt", 0), 0.6)
    assert compare.main([str(exp), "--table-only", "--seeds", "0", "--methods", "fedprompt"]) == 0
    assert (tmp_path / "results" / stem / "table.md").is_file()
    assert not (REPO / "simulations" / "results" / stem).exists()
    # inside the checkout: its simulations/results, whatever the current directory
    monkeypatch.chdir(tmp_path)
    inside = REPO / "simulations" / "experiments" / "sst2_baselines.toml"
    assert compare.default_out(inside) == REPO / "simulations" / "results" / "sst2_baselines"


def test_no_finished_run_is_a_one_line_error(tmp_path, capsys):
    exp = write_experiment(tmp_path)
    assert compare.main([str(exp), "--out", str(tmp_path / "out"), "--table-only"]) == 1
    assert capsys.readouterr().err.strip().count("\n") == 0


@pytest.mark.parametrize("key, value", [("output-dir", "/elsewhere"), ("stale-after-s", 9.0)])
def test_where_records_go_does_not_make_another_run(key, value, tmp_path):
    exp = write_experiment(tmp_path)
    plan = compare.resolved(planned(exp, tmp_path, "fedprompt", 0))
    assert compare.same_run(plan, {**plan, key: value})
    assert not compare.same_run(plan, {**plan, "seed": 1})
    assert not compare.same_run(plan, {**plan, "fedprompt.local-steps": 5})
    assert compare.same_run(plan, {k: v for k, v in plan.items() if k != "fedprompt.lr"})  # recorded before the key


def test_the_note_names_missing_holdouts():
    rows = pd.DataFrame({"variant": ["feddls"], "seed": [0], "holdout": ["books"]})
    runs = [{"method": "feddls", "seed": 0, "holdout": h} for h in ("books", "dvd")]
    assert compare.missing_note(rows, runs) == (
        "Fewer finished runs than the experiment asks for: feddls has 1 of 2 (missing seed 0 holdout dvd).\n")


PROFILED = EXPERIMENT + """[method.bbt-fed]
bbt-fed.popsize = 6
[profile.paper]
description = "the paper's setting"
requires = ["hub"]
num-supernodes = 7
seeds = [3]
[profile.paper.run-config]
num-server-rounds = 5
shots-per-class = 8
[profile.paper.method.bbt-fed]
bbt-fed.local-steps = 9
"""


def test_a_profile_overrides_keys_label_tables_clients_and_seeds_but_not_methods(tmp_path):
    exp = compare.load_experiment(write_experiment(tmp_path, PROFILED))
    assert compare.with_profile(exp, None) is exp  # no --profile: the experiment as written
    paper = compare.with_profile(exp, "paper")
    assert paper["methods"] == ["fedprompt", "bbt-fed"] and paper["num-supernodes"] == 7 and paper["seeds"] == [3]
    assert paper["requires"] == ["hub"] and "profile" not in paper
    runs = {o["method"]: o for o in compare.plan(paper, None)}
    # the profile's keys replace the experiment's one by one; the others stay
    assert runs["fedprompt"] == {"num-server-rounds": 5, "fedprompt.local-steps": 2, "shots-per-class": 8,
                                 "method": "fedprompt", "seed": 3}
    assert runs["bbt-fed"] == {"num-server-rounds": 5, "shots-per-class": 8, "bbt-fed.popsize": 6,
                               "bbt-fed.local-steps": 9, "method": "bbt-fed", "seed": 3}
    # the experiment itself is unchanged
    assert [o["num-server-rounds"] for o in compare.plan(exp, None)] == [1] * 4


@pytest.mark.parametrize("text, message", [
    (EXPERIMENT + '[profile.paper]\nmethods = ["fedavg"]\n', r"\[profile.paper\] has unknown keys \['methods'\]"),
    (EXPERIMENT + '[profile.paper]\nrequires = ["tpu"]\n', r"requires = \['tpu'\]: each one of gpu, hub"),
])
def test_a_malformed_profile_is_one_line_before_anything_runs(tmp_path, text, message):
    with pytest.raises(compare.ConfigError, match=message):
        compare.load_experiment(write_experiment(tmp_path, text))


def test_an_unknown_profile_names_the_profiles_there_are(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compare, "run_one", refuse_run)
    assert compare.main([str(write_experiment(tmp_path, PROFILED)), "--profile", "papr"]) == 2
    assert "the experiment has no [profile.papr] (profiles: paper)" in capsys.readouterr().err


def test_a_profile_that_needs_a_gpu_or_an_unreachable_model_stops_in_one_line(tmp_path, monkeypatch, capsys):
    """Offline, on this CPU: ``requires = ["gpu"]`` and a hub model each fail before any run
    starts, and no output folder is made."""
    import torch

    monkeypatch.setattr(compare, "run_one", refuse_run)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    gpu = PROFILED.replace('requires = ["hub"]', 'requires = ["gpu", "hub"]')
    assert compare.main([str(write_experiment(tmp_path, gpu)), "--profile", "paper"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedtext: configuration error: this profile needs a CUDA GPU") and "\n" not in err
    hub = PROFILED.replace("shots-per-class = 8", 'shots-per-class = 8\nmodel = "roberta-large"')
    assert compare.main([str(write_experiment(tmp_path, hub)), "--profile", "paper"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("fedtext: configuration error: cannot load model 'roberta-large' offline (HF_HUB_OFFLINE=1; set "
                   "HF_HUB_OFFLINE=0 where a hub is reachable): OSError; or give model= a local checkpoint directory")
    assert not (tmp_path / "results").exists()


def test_a_profile_runs_where_its_model_loads_into_its_own_folder(tmp_path, monkeypatch, capsys):
    """A profile whose backbone is a local folder passes the checks and runs; its records and
    table go to ``<stem>-paper`` (the experiment's own results stay apart), named so in
    ``experiment.json`` and the table's header."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from fedtext.backbone import resolve_model_path

    ckpt = tmp_path / "tiny-mlm"
    tok = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    BertForMaskedLM(BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32)).save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    started: list[tuple[str, int]] = []
    monkeypatch.setattr(compare, "run_one", fake_run_one(started))
    text = PROFILED.replace("shots-per-class = 8", f'shots-per-class = 8\nmodel = "{ckpt}"\nhead = "mlm"\n'
                                                  'device = "cpu"')
    exp = write_experiment(tmp_path, text)
    assert compare.main([str(exp), "--profile", "paper"]) == 0
    assert started == [("fedprompt", 3), ("bbt-fed", 3)]
    out = tmp_path / "results" / "exp-paper"
    assert compare.load_experiment(exp) and json_of(out / "experiment.json")["name"] == "exp-paper"
    assert json_of(out / "experiment.json")["profile"] == "paper"
    assert "--profile paper | 7 clients" in (out / "table.md").read_text().splitlines()[0]
    assert not (tmp_path / "results" / "exp").exists()


def json_of(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.read_text())


@pytest.mark.parametrize("path", sorted((REPO / "simulations" / "experiments").glob("*.toml")), ids=lambda p: p.stem)
def test_every_paper_experiment_has_a_paper_profile_that_plans(path, tmp_path, monkeypatch):
    """Each paper experiment's ``[profile.paper]`` (the paper's backbone on a GPU, its clients,
    shots, rounds and budgets where the paper gives them) validates as run-configs, needs a
    GPU and a hub, and changes what the runs compute; the demo has none. (The files name
    their data as ``../shared/data/<name>``, checked to be folders: empty ones stand in, so
    the test does not depend on where the checkout lies.)"""
    (tmp_path / "checkout").mkdir()
    for name in ("sst2", "ag_news", "amazon"):
        (tmp_path / "shared" / "data" / name).mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "checkout")
    exp = compare.load_experiment(path)
    if path.stem == "demo_baselines":
        assert "profile" not in exp
        return
    if path.stem in ("deployment", "memory", "ray_overhead", "scale"):  # studies of this machine's rounds, memory,
        # Ray overhead and federation sizes, not a paper's result
        assert "paper" not in exp.get("profile", {})
        return
    paper = compare.with_profile(exp, "paper")
    assert sorted(paper["requires"]) == ["gpu", "hub"] and exp["profile"]["paper"]["description"]
    runs = compare.plan(paper, None)
    assert {(ov.get("model"), ov.get("device")) for ov in runs} <= {("roberta-large", "cuda"), ("roberta-base", "cuda")}
    assert len(runs) >= len(exp["methods"])
