"""Compare runner: a rerun skips finished runs, a table counts each finished seed once and
says which planned runs it lacks, the default output folder. No Flower: ``run_one`` is
replaced by a writer of the records a run leaves (:class:`fedtext.records.RunRecorder`)."""

from __future__ import annotations

import json
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


def record_run(overrides: dict[str, Any], accuracy: float, status: str | None = FINISHED, clients: int | None = 2) -> Path:
    """The records a run of ``overrides`` leaves in its ``output-dir``: ``config.json``
    as :func:`fedtext.server_app.build` fills it (``clients`` SuperNodes in its provenance, the
    experiments' 2), rounds 0-1, and a summary with ``status`` (None: none, as a run still
    going or killed by SIGKILL leaves it)."""
    config = {**compare.resolved(overrides), "resolved-task": "sst2", "trainable-parameters": 100}
    rec = RunRecorder(overrides["output-dir"], config, launch={"num_supernodes": clients})
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


EXTENDED = PROFILED + """[profile.paper-long]
extends = "paper"
requires = ["gpu", "hub"]
[profile.paper-long.run-config]
num-server-rounds = 9
[profile.paper-long.method.bbt-fed]
bbt-fed.popsize = 4
[profile.paper-longer]
extends = "paper-long"
seeds = [5]
"""


def test_a_profile_that_extends_another_starts_from_its_setting_and_overrides_key_by_key(tmp_path):
    """``extends`` applies the named profile first (and the one it extends before it): the extending
    profile's keys win, the others are the parent's, ``requires`` adds up without repeats."""
    exp = compare.load_experiment(write_experiment(tmp_path, EXTENDED))
    longer = compare.with_profile(exp, "paper-longer")
    assert longer["num-supernodes"] == 7 and longer["seeds"] == [5] and longer["requires"] == ["hub", "gpu"]
    runs = {o["method"]: o for o in compare.plan(longer, None)}
    assert runs["fedprompt"] == {"num-server-rounds": 9, "fedprompt.local-steps": 2, "shots-per-class": 8,
                                 "method": "fedprompt", "seed": 5}
    assert runs["bbt-fed"] == {"num-server-rounds": 9, "shots-per-class": 8, "bbt-fed.popsize": 4,
                               "bbt-fed.local-steps": 9, "method": "bbt-fed", "seed": 5}
    # the parent alone is what it was, and the chain names the furthest first
    assert compare.with_profile(exp, "paper")["run-config"]["num-server-rounds"] == 5
    assert compare.profile_chain(exp["profile"], "paper-longer") == ["paper", "paper-long", "paper-longer"]


@pytest.mark.parametrize("text, message", [
    (PROFILED + '[profile.long]\nextends = "papr"\n',
     r"\[profile.long\] extends = 'papr': not a profile of this file \(profiles: long, paper\)"),
    (EXPERIMENT + '[profile.a]\nextends = "b"\n[profile.b]\nextends = "a"\n',
     r"\[profile.a\] extends in a circle: a -> b -> a"),
    (EXPERIMENT + '[profile.a]\nextends = "a"\n', r"\[profile.a\] extends in a circle: a -> a"),
])
def test_a_profile_extending_nothing_or_itself_is_one_line_when_the_file_loads(tmp_path, text, message):
    with pytest.raises(compare.ConfigError, match=message):
        compare.load_experiment(write_experiment(tmp_path, text))


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


# ---------------------------------------------------------------- resuming a run that stopped part-way
# fedprompt on the random 2-layer encoder (tests/inprocess.py), Poisson cohorts (q = 2 / 4) and central DP with
# adaptive clipping: what a resumed round needs back from the checkpoint (C, the accountant's count, the draws)
RESUMED = """methods = ["fedprompt"]
seeds = [0]
num-supernodes = 4
engine = "inprocess"
[run-config]
model = "tiny-bert"
weights = "random"
num-server-rounds = 3
clients-per-round = 2
client-sampling = "poisson"
shots-per-class = 4
client-test-size = 0
eval-size = 16
prompt-length = 4
max-length = 32
dp = "central"
dp-clipping = "adaptive"
dp-noise = 0.5
dp-count-noise = 1.0
fedprompt.local-steps = 1
"""
COMPARED = ("round", "global_accuracy", "global_loss", "bytes_up", "bytes_down", "num_clients", "trained", "privacy")


def test_a_run_stopped_part_way_is_resumed_from_its_checkpoint_and_equals_an_uninterrupted_one(
        tmp_path, monkeypatch, capsys):
    from fedtext.records import load_run
    from fedtext.server import checkpoint
    import simulations.inprocess as inprocess

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    exp, out = write_experiment(tmp_path, RESUMED), tmp_path / "out"
    whole = inprocess.run

    def stopped_in_round_2(run_config, tmp, clients=2, **kwargs):
        def hook(server):
            configure_fit = server.strategy.configure_fit

            def stop(server_round, **kwargs):
                if server_round == 2:
                    raise RuntimeError("stopped by the test")
                return configure_fit(server_round=server_round, **kwargs)

            server.strategy.configure_fit = stop
        return whole(run_config, tmp, clients, server_hook=hook)

    monkeypatch.setattr(inprocess, "run", stopped_in_round_2)
    assert compare.main([str(exp), "--out", str(out)]) == 1
    [folder] = (out / "runs").iterdir()
    stopped = load_run(folder)
    assert stopped["summary"]["status"] == "failed" and "stopped by the test" in stopped["summary"]["error"]
    capsys.readouterr()
    monkeypatch.setattr(inprocess, "run", whole)
    assert compare.main([str(exp), "--out", str(out)]) == 0
    assert f"resuming {folder.name} after round 1 (failed)" in capsys.readouterr().out
    assert [p.name for p in (out / "runs").iterdir()] == [folder.name]  # the same folder, no new run
    resumed = load_run(folder)
    assert resumed["summary"]["status"] == FINISHED and resumed["config"]["resumed"][0]["from_round"] == 1
    walls = [r["wall_time_s"] for r in resumed["rounds"]]
    assert walls == sorted(walls)  # the clock goes on across the resume
    launch = [json.loads(line) for line in (out / compare.LAUNCHES).read_text().splitlines()][-1]
    assert launch["resumed"] == launch["run"] == folder.name
    # the uninterrupted run of the same experiment: the same rounds, DP and Poisson cohorts included
    assert compare.main([str(exp), "--out", str(tmp_path / "whole")]) == 0
    [other] = (tmp_path / "whole" / "runs").iterdir()
    uninterrupted = load_run(other)["rounds"]
    assert len(resumed["rounds"]) == len(uninterrupted) == 4
    # the state a resume must bring back is in play: ε grows every round, adaptive clipping moves C
    epsilons = [r["privacy"]["epsilon"] for r in uninterrupted[1:]]
    assert epsilons == sorted(epsilons) and len(set(epsilons)) == 3
    assert len({r["privacy"]["clip"] for r in uninterrupted[1:]}) == 3
    for a, b in zip(resumed["rounds"], uninterrupted, strict=True):
        assert {k: a.get(k) for k in COMPARED} == {k: b.get(k) for k in COMPARED}, a["round"]


def test_a_stopped_run_whose_checkpoint_the_server_would_refuse_is_redone_saying_why(tmp_path, monkeypatch, capsys):
    exp, out, started = write_experiment(tmp_path), tmp_path / "out", []
    older = record_run(planned(exp, out, "fedprompt", 0), 0.6, status="failed")
    (older / "checkpoint.npz").write_bytes(b"not a checkpoint")
    older.rename(older.with_name("20200101-000000-" + older.name.split("-", 2)[2]))  # started earlier
    folder = record_run(planned(exp, out, "fedprompt", 0), 0.6, status="failed")
    (folder / "checkpoint.npz").write_bytes(b"not a checkpoint")
    seen: list[dict[str, Any]] = []
    fake = fake_run_one(started)
    monkeypatch.setattr(compare, "run_one", lambda ov, *a: seen.append(ov) or fake(ov, *a))
    assert compare.main([str(exp), "--out", str(out), "--methods", "fedprompt", "--seeds", "0"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "fedprompt seed=0" in x)
    # each stopped run's reason, the newest first; then a fresh run
    newer, older_name = f"{folder.name}: resume='{folder.name}': ", "; 20200101-000000-"
    assert ": not resumed (" + newer in line and older_name in line and line.endswith("redone from the start")
    assert line.index(newer) < line.index(older_name)
    assert started == [("fedprompt", 0)] and "resume" not in seen[0]


@pytest.mark.parametrize("status", [None, FINISHED])
def test_a_running_or_finished_run_is_never_resumed(status, tmp_path, monkeypatch, capsys):
    """A run whose heartbeat is fresh may still be written by its process; a finished one is skipped."""
    exp, out, started = write_experiment(tmp_path), tmp_path / "out", []
    folder = record_run(planned(exp, out, "fedprompt", 0), 0.6, status=status)
    (folder / "checkpoint.npz").write_bytes(b"not a checkpoint")
    monkeypatch.setattr(compare, "run_one", fake_run_one(started))
    assert compare.main([str(exp), "--out", str(out), "--methods", "fedprompt", "--seeds", "0"]) == 0
    assert "resum" not in capsys.readouterr().out
    assert started == ([] if status == FINISHED else [("fedprompt", 0)])


THREE_ROUNDS = EXPERIMENT.replace("num-server-rounds = 1", "num-server-rounds = 3")  # rounds left after round 1


def stopped_run(exp: Path, out: Path, status: str | None = "failed", done: int = 1, clients: int | None = 2,
                started: str | None = None) -> Path:
    """:func:`record_run`'s records of fedprompt seed 0 stopped after round ``done`` with a checkpoint
    signed by this user's key (the test's ``KEY_ENV``) and bound to the run, as the strategy saves it;
    ``started``: another start stamp for its folder name (``20200101-000000``: an older run)."""
    import numpy as np

    from fedtext.server import checkpoint

    folder = record_run(planned(exp, out, "fedprompt", 0), 0.6, status=status, clients=clients)
    if started:
        folder = folder.rename(folder.with_name(f"{started}-{folder.name.split('-', 2)[2]}"))
        meta = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**meta, "run_id": folder.name}))
    stored = json.loads((folder / "config.json").read_text())["config"]
    checkpoint.save(folder, done, [np.zeros(4, np.float32)], {},
                    binding=checkpoint.Binding(folder.name, "fedprompt", checkpoint.config_hash(stored)))
    return folder


@pytest.fixture()
def own_key(tmp_path, monkeypatch):
    from fedtext.server import checkpoint

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))


def watching(monkeypatch, rc: int = 0) -> list[dict[str, Any]]:
    """The overrides each launch gets; a launch records a finished run (rc 0) or nothing (rc != 0)."""
    seen: list[dict[str, Any]] = []

    def run_one(ov, *args):
        seen.append(ov)
        if rc == 0:
            record_run(ov, 0.7)
        return rc

    monkeypatch.setattr(compare, "run_one", run_one)
    return seen


ONE = ["--methods", "fedprompt", "--seeds", "0"]


def test_a_stopped_run_with_a_good_checkpoint_is_launched_with_resume_and_its_launch_line_says_so(
        tmp_path, monkeypatch, capsys, own_key):
    exp, out = write_experiment(tmp_path, THREE_ROUNDS), tmp_path / "out"
    folder = stopped_run(exp, out, done=1)
    seen = watching(monkeypatch)
    assert compare.main([str(exp), "--out", str(out), *ONE]) == 0
    assert f"resuming {folder.name} after round 1 (failed)" in capsys.readouterr().out
    assert [ov.get("resume") for ov in seen] == [folder.name]
    line = json.loads((out / compare.LAUNCHES).read_text().splitlines()[-1])
    assert (line["resumed"], line["resumed_after"]) == (folder.name, 1)


def test_a_resume_its_server_refused_is_not_tried_again_at_the_same_round(tmp_path, monkeypatch, capsys, own_key):
    exp, out = write_experiment(tmp_path, THREE_ROUNDS), tmp_path / "out"
    folder = stopped_run(exp, out, done=1)
    seen = watching(monkeypatch, rc=1)  # the server refused it (a check the runner cannot make): no new record
    assert compare.main([str(exp), "--out", str(out), *ONE]) == 1
    assert compare.failed_resumes(out) == {folder.name: 1}
    capsys.readouterr()
    seen = watching(monkeypatch)
    assert compare.main([str(exp), "--out", str(out), *ONE]) == 0
    assert (f"not resumed ({folder.name}: its resume after round 1 failed before, refused by the run's server "
            "(see launches.jsonl)): redone from the start") in capsys.readouterr().out
    assert "resume" not in seen[0]


def test_a_resume_that_failed_in_a_round_or_got_further_is_tried_again(tmp_path, own_key):
    """Only a resume the server refused before reopening the run is not tried again: one that failed in a
    round (an OOM, a lost node) reopened it (its ``resumed`` entry), and a later checkpoint is another try."""
    exp, out = write_experiment(tmp_path, THREE_ROUNDS), tmp_path / "out"
    folder = stopped_run(exp, out, done=2)
    ov = planned(exp, out, "fedprompt", 0)
    plan = compare.resolved(ov)
    runs = [load_run_of(folder)]
    assert compare.resumable_run(ov, plan, runs, 2, {}, {folder.name: 1})[:2] == (folder.name, 2)  # got further
    assert compare.resumable_run(ov, plan, runs, 2, {}, {folder.name: 2})[0] is None  # refused at round 2
    meta = json.loads((folder / "config.json").read_text())
    meta["resumed"] = [{"from_round": 2}]  # the server reopened it, then the round failed
    (folder / "config.json").write_text(json.dumps(meta))
    assert compare.resumable_run(ov, plan, [load_run_of(folder)], 2, {}, {folder.name: 2})[:2] == (folder.name, 2)


def test_the_last_launch_of_a_resumed_run_says_whether_its_resume_failed(tmp_path):
    lines = [{"resumed": "r1", "resumed_after": 3, "exit": 1}, {"resumed": "r1", "resumed_after": 3, "exit": 0},
             {"resumed": "r2", "resumed_after": 5, "exit": 0}, {"resumed": "r2", "resumed_after": 5, "exit": 2},
             {"resumed": None, "exit": 1, "run": None}]
    (tmp_path / compare.LAUNCHES).write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert compare.failed_resumes(tmp_path) == {"r2": 5}
    assert compare.failed_resumes(tmp_path / "none") == {}


def test_the_furthest_stopped_run_is_resumed_the_newest_of_equals(tmp_path, own_key):
    exp, out = write_experiment(tmp_path, THREE_ROUNDS), tmp_path / "out"
    further = stopped_run(exp, out, done=2, started="20200101-000000")  # older
    newer = stopped_run(exp, out, done=1)
    ov = planned(exp, out, "fedprompt", 0)
    runs = [load_run_of(f) for f in (further, newer)]
    assert compare.resumable_run(ov, compare.resolved(ov), runs, 2, {})[:2] == (further.name, 2)
    same = stopped_run(exp, out, done=1)  # two at round 1, and the further one gone: the newest
    runs = [load_run_of(f) for f in (newer, same)]
    assert compare.resumable_run(ov, compare.resolved(ov), runs, 2, {})[:2] == (max(newer.name, same.name), 1)


@pytest.mark.parametrize("why", ["other size", "unknown size", "locked", "study", "study's own engine"])
def test_a_stopped_run_is_not_resumed_from_another_federation_size_a_live_writer_or_by_a_timing_study(
        why, tmp_path, monkeypatch, capsys, own_key):
    """A partition depends on the federation's size (not in the run-config): a run of another size, or of
    one its record does not say, is not resumed; a stale run whose folder a live process still locks (a
    suspended process) is that process's; a study without RESUMES, or with an engine of its own, measures a
    launch."""
    import time
    from types import SimpleNamespace

    from fedtext.records import HEARTBEAT_FILE

    exp, out = write_experiment(tmp_path, THREE_ROUNDS), tmp_path / "out"
    writer = None
    if why == "locked":  # open, as its live process holds it, and silent past stale-after-s
        ov = planned(exp, out, "fedprompt", 0)
        writer = RunRecorder(ov["output-dir"], {**compare.resolved(ov), "resolved-task": "sst2"},
                             launch={"num_supernodes": 2})
        stored = json.loads((writer.dir / "config.json").read_text())["config"]
        from fedtext.server import checkpoint
        import numpy as np
        checkpoint.save(writer.dir, 1, [np.zeros(4, np.float32)], {},
                        binding=checkpoint.Binding(writer.dir.name, "fedprompt", checkpoint.config_hash(stored)))
        writer._closed.set()  # its heartbeat thread stops: the run reads stale, as a suspended writer's does
        (writer.dir / HEARTBEAT_FILE).write_text(f"{time.time() - 3600:.3f}\n")
        assert compare.run_status(load_run_of(writer.dir))[0] == "stale"
    else:
        stopped_run(exp, out, clients={"other size": 3, "unknown size": None}.get(why, 2))
    seen = watching(monkeypatch)
    runs = [planned(exp, out, "fedprompt", 0)]
    own = lambda ov, *a: seen.append(ov) or 0  # noqa: E731 - a study's engine of its own
    study = {"study": SimpleNamespace(), "study's own engine": SimpleNamespace(RESUMES=True, ENGINES={"flower": own})}
    try:
        assert compare.run_planned(runs, out, 2, "flower", study=study.get(why)) == 0
    finally:
        if writer is not None:
            writer.finish("failed", error="test")
    text = capsys.readouterr().out
    assert "resuming" not in text and "resume" not in seen[0]
    reason = {"other size": "launched with 3 clients, not 2", "unknown size": "launched with an unknown number of "
              "clients, not 2", "locked": "still open in a live process"}.get(why)
    assert (reason in text) if reason else ("resum" not in text)
    if why == "study":  # the same run where the study says it resumes
        seen.clear()
        stopped_run(exp, tmp_path / "again")
        assert compare.run_planned([planned(exp, tmp_path / "again", "fedprompt", 0)], tmp_path / "again", 2,
                                   "flower", study=SimpleNamespace(RESUMES=True)) == 0
        assert "resume" in seen[0]


def load_run_of(folder: Path) -> dict[str, Any]:
    from fedtext.records import load_run

    return load_run(folder)


def test_an_in_process_run_that_fails_before_its_round_loop_is_recorded_failed_at_once(tmp_path, monkeypatch):
    """The round loop records its own failures; one between the record's opening and the loop (here the
    server's construction) left the run "running" until its heartbeat went stale."""
    import fedtext.server_app

    def broken(self, *args, **kwargs):
        raise RuntimeError("broken before the loop")

    monkeypatch.setattr(fedtext.server_app.RecordingServer, "__init__", broken)
    out = tmp_path / "runs"
    ov = {"method": "fedprompt", "model": "tiny-bert", "weights": "random", "num-server-rounds": 1,
          "shots-per-class": 4, "client-test-size": 0, "eval-size": 16, "prompt-length": 4, "max-length": 32,
          "seed": 0, "output-dir": str(out)}
    assert compare.run_in_process(ov, 2, tmp_path / "failed.log") == 1
    [folder] = out.iterdir()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "failed" and "broken before the loop" in summary["error"]
    provenance = json.loads((folder / "config.json").read_text())["provenance"]
    assert provenance["num_supernodes"] == 2  # the in-process federation's size, which a resume checks


@pytest.mark.parametrize("engine", ["inprocess", "own process"])
def test_sigterm_to_the_runner_records_its_open_run_and_stops_it(engine, tmp_path, monkeypatch):
    """_stop_on_signal (installed by ``python -m simulations.compare``): an in-process run it stops is
    recorded ``failed: terminated by SIGTERM`` (checkpoint kept) and the process exits at once; with no run
    open here (a run in a process of its own), SystemExit unwinds the runner through run_logged, which stops
    that process (tests/integration/test_reliability_runs.py). Every stop signal is ignored from then on."""
    import signal

    class Exited(Exception):
        pass

    def exit_now(code):
        raise Exited(code)

    import fedtext.records.signals

    monkeypatch.setattr(compare.os, "_exit", exit_now)
    rec = RunRecorder(tmp_path, {"method": "fedprompt", "seed": 0}) if engine == "inprocess" else None
    # this test's run alone: not the open runs other tests of this process left
    for module in (compare, fedtext.records.signals):
        monkeypatch.setattr(module, "open_recorders", lambda: [rec] if rec else [])
    before = {sig: signal.getsignal(sig) for sig in compare.STOP_SIGNALS}
    try:
        with pytest.raises(Exited if rec else SystemExit) as info:
            compare._stop_on_signal(signal.SIGTERM, None)
        assert {signal.getsignal(sig) for sig in compare.STOP_SIGNALS} == {signal.SIG_IGN}
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    code = info.value.args[0] if rec else info.value.code
    assert code == 128 + signal.SIGTERM
    if rec is not None:
        summary = json.loads((rec.dir / "summary.json").read_text())
        assert (summary["status"], summary["error"]) == ("failed", "terminated by SIGTERM")
