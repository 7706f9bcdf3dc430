"""The deployment study's and the memory study's own arithmetic (simulations/studies/deployment.py,
simulations/studies/memory.py): which rounds count, which keys a harness passes, which engine runs a
label and with which flags, which limit a label is not run at, what the tables say. Their runs are
experiments (docs/performance.md, docs/deployment.md), not tests: here the runner's engines are
stand-ins that leave records or cells, and nothing starts a process but git (the records' provenance)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from fedtext.common.registry import METHODS
from fedtext.node.warm_exec import WARM_START
from fedtext.records import RunRecorder
from simulations import compare
from simulations.deployment import write_nodes
from simulations.simulate import parse_pairs
from simulations.studies import deployment, memory

from ..conftest import REPO

TABLE1 = REPO / "simulations" / "experiments" / "feddpg_table1_ag_news.toml"


def _round(n: int, t: float, **kw) -> dict:
    return {"round": n, "round_time_s": t, "client_fit_s_max": 1.0, "startup_s": 0.5, "client_load_s": 0.1,
            "client_eval_s": 0.2, "server_eval_s": 0.3, "overhead_s": 0.4, "global_accuracy": 0.5,
            "num_clients": 2, "clients_evaluated": 2, **kw}


def _a_ray_and_a_service_run(tmp_path: Path, monkeypatch, service_commit: str) -> dict[str, dict[str, Any]]:
    """Two finished runs of fedprompt (a Ray part launched at aaaaaaa, a node-service part at ``service_commit``)
    as the study reads them: ``finished_runs`` and the runner's launch lines, which it returns to be changed."""
    rounds = [_round(n, t) for n, t in enumerate((1.0, 6.0, 3.0, 3.0))]
    runs = {name: {"dir": str(tmp_path / "runs" / name), "rounds": rounds,
                   "config": {"config": {"method": "fedprompt"}, "provenance": {"git_commit": None}}}
            for name in ("r-ray", "r-service")}
    monkeypatch.setattr(deployment, "finished_runs", lambda path: runs)
    lines = {"r-ray": {"engine": "flower", "wall_s": 20.0, "commit": "aaaaaaa", "label": "fedprompt-ray", "seed": 0},
             "r-service": {"engine": "deployment", "wall_s": 25.0, "commit": service_commit,
                           "label": "fedprompt-service", "seed": 0}}
    monkeypatch.setattr(compare, "read_launches", lambda out: lines)
    return lines


def harness(study: Any, profile: str | None) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(the experiment with ``profile``, its label settings) of a study's file."""
    exp = compare.with_profile(compare.load_experiment(study.EXPERIMENT), profile)
    return exp, compare.label_settings(exp)


# ---------------------------------------------------------------- the harnesses
@pytest.mark.parametrize("study", [deployment, memory], ids=["deployment", "memory"])
def test_the_t1_harness_is_feddpg_table_1s_run_config_and_clients(study) -> None:
    """The t1 profile repeats feddpg_table1_ag_news.toml's keys (a profile cannot name another file): they
    must stay that file's, and the demo harness is the defaults on 2 SuperNodes."""
    table1 = tomllib.loads(TABLE1.read_text())
    exp, settings = harness(study, "t1")
    assert exp["run-config"] == compare.flatten(table1["run-config"])
    assert {s["num-supernodes"] for s in settings.values()} == {table1["num-supernodes"]}
    demo, settings = harness(study, None)
    assert compare.flatten(demo.get("run-config", {})) == {} and {s["num-supernodes"] for s in settings.values()} == {2}
    # every profile is a harness or, in the deployment study, a variant of one (run again with more rounds)
    variants = getattr(study, "VARIANTS", {})
    assert set(study.HARNESSES.values()) - {None} | set(variants) == set(
        tomllib.loads(study.EXPERIMENT.read_text())["profile"])
    assert set(variants.values()) <= set(study.HARNESSES)


def test_the_steady_variant_is_the_demo_over_more_rounds_with_its_target_table_and_command(tmp_path, monkeypatch):
    """``--profile steady`` changes only the demo's rounds; its record takes the demo's x1.2, its own file and
    command, and reads as the demo over its rounds, in the runner's table and after the harnesses' in the docs."""
    demo, settings = harness(deployment, None)
    steady, steady_settings = harness(deployment, "steady")
    assert compare.flatten(steady["run-config"]) == {"num-server-rounds": 8} and steady_settings == settings
    t1, t1_settings = harness(deployment, "t1")
    t1_steady, t1_steady_settings = harness(deployment, "t1-steady")
    assert t1_steady["run-config"] == {**t1["run-config"], "num-server-rounds": 8} and t1_steady_settings == t1_settings
    assert deployment.target_of("steady") == 1.2 and deployment.target_of("t1") == 1.3
    assert deployment.target_of("t1-steady") == 1.3  # T1's, not the demo's
    assert deployment.target_of("other") == 1.2  # a profile that is neither: the demo's
    assert deployment.command("steady").endswith("deployment.toml --profile steady")
    for line in _a_ray_and_a_service_run(tmp_path, monkeypatch, "bbbbbbb").values():
        line.update(load_before=1.0, load_after=1.5)
    (tmp_path / "experiment.json").write_text(json.dumps({"file": str(deployment.EXPERIMENT), "profile": "steady"}))
    deployment.finish(tmp_path)
    rec = json.loads((tmp_path / "steady.json").read_text())
    assert rec["harness"] == "steady" and rec["target"] == 1.2 and rec["run_config"] == {"num-server-rounds": 8}
    assert not (tmp_path / "demo.json").exists()
    table = deployment.table(tmp_path)
    assert table.startswith("**demo over 8 rounds** (2 SuperNodes;") and "--profile steady`)" in table
    assert "| x1.00 ± 0.00 |" in table and "Within x1.2: fedprompt; over: none (±" in table
    monkeypatch.setattr(compare, "default_out", lambda exp, profile=None: tmp_path / (profile or "demo"))
    (tmp_path / "steady").mkdir()
    (tmp_path / "steady" / "steady.json").write_text(json.dumps(rec))
    assert deployment.render().startswith("**demo over 8 rounds**")


def test_a_harness_passes_shared_keys_and_the_methods_own_only(tmp_path, monkeypatch) -> None:
    # T1's ../shared/data/ag_news, as an empty stand-in: a user's clone (and CI's) has no ../shared
    (tmp_path / "checkout").mkdir()
    (tmp_path / "shared" / "data" / "ag_news").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "checkout")
    exp, settings = harness(deployment, "t1")
    runs = {ov["run-name"]: ov for ov in compare.plan(exp, None)}
    mine = runs["fedprompt-ray"]
    assert settings["fedprompt-ray"]["num-supernodes"] == 10 and mine["shots-per-class"] == 8
    assert mine["dataset"].endswith("shared/data/ag_news")
    assert mine["fedprompt.local-steps"] == 6 and not any(k.startswith("fedavg.") for k in mine)
    assert mine["eval-every"] == 2
    # FeS's curriculum pacing reads the server's accuracy every round: each of its labels, on both harnesses
    for profile in (None, "t1"):
        fes = [ov for ov in compare.plan(harness(deployment, profile)[0], None) if ov["method"] == "fes"]
        assert len(fes) == 5 and all(ov["eval-every"] == 1 for ov in fes)
    pairs = {"method": "fedprompt", "flag": True, "p": "a b"}
    assert compare.pairs_text(pairs) == "method=fedprompt flag=True p='a b'"
    assert parse_pairs(compare.pairs_text(pairs)) == {**pairs, "flag": "True"}  # RunConfig reads "True" as true


def test_each_deployment_label_runs_its_method_under_its_engine() -> None:
    _, settings = harness(deployment, None)
    by_engine: dict[str, set[str]] = {}
    for label, s in settings.items():
        by_engine.setdefault(s["engine"], set()).add(label.rsplit("-", 1)[1])
    assert by_engine == {"flower": {"ray"}, "deployment": {"service"}, "deployment-fork": {"fork"},
                         "deployment-spawn": {"spawn"}, "deployment-cold": {"cold"}, "deployment-plain": {"plain"}}
    assert set(deployment.PARTS) == set(by_engine) and set(deployment.OPTIONS) | {"deployment"} == set(
        deployment.PARTS) - {"flower"}


def test_the_deployment_engines_hand_the_launcher_its_flags(tmp_path, monkeypatch) -> None:
    """``engine = "deployment"`` is the launcher with the node service's defaults; the study's four add
    ``--warm-start fork`` (fork), ``--warm-start spawn`` (spawn), ``--warm-clientapps 0`` (cold) and
    ``--no-node-service`` (plain)."""
    commands: list[list[str]] = []
    monkeypatch.setattr(compare, "run_logged", lambda cmd, log: commands.append(cmd) or 0)
    ov = {"method": "fedprompt", "seed": 0, "run-name": "fedprompt-service", "output-dir": str(tmp_path / "runs")}
    engines = compare.engines_of(deployment)
    for name in ("deployment", "deployment-cold", "deployment-plain", "deployment-fork", "deployment-spawn"):
        assert engines[name](ov, 2, tmp_path / "fedprompt-service-s0.log", "", 0.0) == 0
    service, cold, plain, fork, spawn = commands
    assert service[1:3] == ["-m", "simulations.deployment"]
    flags = dict(zip(service[3::2], service[4::2], strict=False))
    assert flags["--num-supernodes"] == "2" and flags["--output-dir"] == ov["output-dir"]
    assert parse_pairs(flags["--run-config"]) == {"method": "fedprompt", "seed": 0, "run-name": "fedprompt-service"}
    assert flags["--logs"] == str(tmp_path / "fedprompt-service-s0-logs")
    assert cold == [*service, "--warm-clientapps", "0"] and plain == [*service, "--no-node-service"]
    assert fork == [*service, "--warm-start", "fork"] and spawn == [*service, "--warm-start", "spawn"]


@pytest.mark.parametrize("engine", ["deployment", "inprocess"])
def test_engines_without_ray_take_no_ray_options(tmp_path, capsys, engine) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text(f'methods = ["fedprompt"]\nengine = "{engine}"\n')
    assert compare.main([str(exp), "--out", str(tmp_path / "o"), "--gpus-per-client", "0.5"]) == 2
    assert f'engine = "{engine}" {compare.WITHOUT_RAY[engine]}, without Ray' in capsys.readouterr().err


# ---------------------------------------------------------------- the deployment study's record
def test_the_steady_rounds_are_2_onwards_and_round_1_stands_apart() -> None:
    out = deployment.summarise([_round(0, 1.0), _round(1, 30.0), _round(2, 10.0), _round(3, 12.0)])
    assert out["round_s"] == 11.0 and out["round1_s"] == 30.0 and out["steady_rounds"] == [2, 3]
    assert out["messages"] == 4.0 and out["accuracy"] == [0.5] * 4
    assert out["round_times_s"] == [10.0, 12.0]  # the steady rounds' own, not round 1's


def test_a_ratios_standard_error_pairs_the_engines_round_by_round_and_names_the_rows_it_leaves_undecided() -> None:
    """se = sd(p_k - r r_k) / sqrt(n) / m_r, by hand: Ray's steady rounds 2 and 4 s, the service's 3.5 and 4.5 s:
    r = 4/3, d = (0.8333, -0.8333), sd 1.1785, se = 1.1785 / sqrt(2) / 3 = 0.2778 (the other way round, Ray's over
    the service's, 0.1563: the mean divided by is Ray's). Rounds that move together (each service round 4/3 Ray's)
    leave no error, however much the rounds differ from each other. A row within two errors of the target is
    named as not decided; parts without each round's time, or with other steady rounds, have no error."""
    ray = deployment.summarise([_round(1, 9.0), _round(2, 2.0), _round(3, 4.0)])
    svc = deployment.summarise([_round(1, 9.0), _round(2, 3.5), _round(3, 4.5)])
    assert deployment.ratio_error(ray, svc) == pytest.approx(0.27778, abs=1e-4)
    assert deployment.ratio_error(svc, ray) == pytest.approx(0.15625, abs=1e-4)
    alike = deployment.summarise([_round(1, 9.0), _round(2, 8 / 3), _round(3, 16 / 3)])
    assert deployment.ratio_error(ray, alike) == pytest.approx(0.0, abs=1e-3)  # times kept to the millisecond
    assert deployment.ratio_error({k: v for k, v in ray.items() if k != "round_times_s"}, svc) is None
    assert deployment.ratio_error(ray, {**svc, "steady_rounds": [2, 4]}) is None
    one = deployment.summarise([_round(1, 9.0), _round(2, 2.0)])
    assert deployment.ratio_error(one, one) is None
    head = {"harness": "demo", "commit": "a", "machine": "x86_64, 2 cores", "date": "2026-12-03", "supernodes": 2,
            "target": 1.2}
    # above the target by under two errors (named), by far more than two (not), below it by three (not), and above
    # it by 1.5 errors (named: rounds 3.0 and 5.1 s, r = 1.35, d = (0.3, -0.3), se = 0.1)
    below = deployment.summarise([_round(1, 9.0), _round(2, 2.2), _round(3, 3.8)])  # x1.00 ± 0.067
    near = deployment.summarise([_round(1, 9.0), _round(2, 3.0), _round(3, 5.1)])
    assert deployment.ratio_error(ray, near) == pytest.approx(0.1, abs=1e-9)
    for service, cell, named in ((svc, "| x1.33 ± 0.28 (over) |", "fedprompt"),
                                 (alike, "| x1.33 ± 0.00 (over) |", "none"),
                                 (below, "| x1.00 ± 0.07 |", "none"),
                                 (near, "| x1.35 ± 0.10 (over) |", "fedprompt")):
        row = {"ray": {**ray, "load_before": 1.0}, "service": {**service, "load_before": 1.0}, "commit": "a"}
        row["ratio"] = round(row["service"]["round_s"] / row["ray"]["round_s"], 2)
        text = "\n".join(deployment.harness_table({**head, "methods": {"fedprompt": row}}))
        assert cell in text and f"not decided by these rounds: {named})" in text


ROUND_S = {"flower": 4.0, "deployment": 5.0, "deployment-cold": 8.0}  # each engine's steady round, by its flags


def leave_run(overrides: dict[str, Any], round_s: float) -> None:
    """The records a finished 3-round run of ``overrides`` leaves, each steady round ``round_s``."""
    rec = RunRecorder(overrides["output-dir"], {**compare.resolved(overrides), "resolved-task": "demo"})
    for n, t in enumerate((1.0, 2 * round_s, round_s, round_s)):
        rec.log_round(_round(n, t))
    rec.finish("finished")


def test_the_study_runs_its_labels_and_writes_the_harness_record(tmp_path, monkeypatch) -> None:
    """The runner runs each label by its engine (the Ray one, the launcher with or without flags);
    finish makes a method's row of its parts, wall times and loads from the launch lines, ratios to
    Ray's round; a rerun starts nothing, and a row not run again is kept."""
    started: list[tuple[str, tuple[str, ...]]] = []

    def flower(ov: dict[str, Any], *args: Any) -> int:
        started.append((ov["run-name"], ()))
        leave_run(ov, ROUND_S["flower"])
        return 0

    def launcher(ov: dict[str, Any], clients: int, log: Path, *args: Any, options: tuple[str, ...] = ()) -> int:
        started.append((ov["run-name"], options))
        logs = log.with_name(f"{log.stem}-logs")  # what simulations.deployment leaves there: how its nodes ran
        logs.mkdir()
        flags = dict(zip(options[::2], options[1::2], strict=False))
        write_nodes(logs, True, 0 if "--warm-clientapps" in flags else None, flags.get("--warm-start"))
        leave_run(ov, ROUND_S["deployment-cold" if options else "deployment"])
        return 0

    monkeypatch.setattr(compare, "run_one", flower)
    monkeypatch.setattr(compare, "run_deployment", launcher)
    monkeypatch.setattr(deployment, "process_costs", lambda: {"shim_process_s": 0.3, "client_process_s": 1.8})
    out = tmp_path / "out"
    out.mkdir()
    part = deployment.summarise([_round(n, 3.0) for n in range(4)])
    kept = {"ray": {**part, "round_s": 2.0, "load_before": 1.0}, "service": {**part, "load_before": 1.0}, "ratio": 1.5,
            "commit": "old"}
    (out / "demo.json").write_text(json.dumps({"methods": {"bbt-fed": kept}, "warm_start": "spawn"}))
    labels = ["fedprompt-ray", "fedprompt-service", "fedprompt-cold", "fes-service"]
    assert compare.main([str(deployment.EXPERIMENT), "--out", str(out), "--methods", *labels]) == 0
    assert started == [("fedprompt-ray", ()), ("fedprompt-service", ()),
                       ("fedprompt-cold", ("--warm-clientapps", "0")), ("fes-service", ())]
    rec = json.loads((out / "demo.json").read_text())
    assert rec["harness"] == "demo" and rec["supernodes"] == 2 and rec["target"] == deployment.TARGETS["demo"] == 1.2
    assert rec["process_costs"]["client_process_s"] == 1.8 and rec["run_config"] == {}
    assert list(rec["methods"]) == ["bbt-fed", "fedprompt"]  # fes has no Ray part: not a row yet
    # the kept row's service part was measured under the old header's warm start; the new one under the default
    assert rec["methods"]["bbt-fed"] == {**kept, "service": {**kept["service"], "warm_start": "spawn"}}
    row = rec["methods"]["fedprompt"]
    assert row["service"]["warm_start"] == WARM_START and "warm_start" not in row["ray"] | row["cold"]
    assert (row["ratio"], row["ratio_cold"]) == (1.25, 2.0) and "before" not in row
    assert row["ray"]["round_s"] == 4.0 and row["ray"]["round1_s"] == 8.0 and row["service"]["steady_rounds"] == [2, 3]
    launches = {line["label"]: line for line in map(json.loads, (out / compare.LAUNCHES).read_text().splitlines())}
    assert row["cold"]["wall_s"] == round(launches["fedprompt-cold"]["wall_s"], 1)
    assert row["cold"]["load_before"] == launches["fedprompt-cold"]["load_before"] is not None
    assert row["commit"] == row["ray"]["commit"] and len(row["commit"]) in (0, 7)
    table = (out / "table.md").read_text()
    made = "/".join(f"{m}ed" for m in sorted({"spawn", WARM_START}))  # the kept row's and the new one's
    assert f"deployment round (node service, 2 {made} warm ClientApp" in table
    assert "| fedprompt | 4.0 s | 5.0 s | x1.25 ± 0.00 (over) |" in table
    assert "8.0 s (x2.00; start-ups 0.5 s, overhead" in table
    started.clear()
    written = (out / "demo.json").read_text()

    def measured_again() -> dict[str, float]:
        raise AssertionError("a rerun that started nothing measured the process costs again")

    monkeypatch.setattr(deployment, "process_costs", measured_again)
    assert compare.main([str(deployment.EXPERIMENT), "--out", str(out), "--methods", *labels]) == 0
    assert started == [] and (out / "demo.json").read_text() == written  # its header is of the runs it holds
    # a deployment run's record names no commit (its code is the app bundle, named by hash): its launch line's, the
    # checkout's when it started (else, where git could not tell, the checkout's at finish)
    (config,) = [p for p in (out / "runs").glob("*/config.json") if "fedprompt-service" in p.parent.name]
    meta = json.loads(config.read_text())
    config.write_text(json.dumps({**meta, "provenance": {**meta["provenance"], "git_commit": None}}))
    parts = deployment.launched_parts(out, "abc1234")
    assert parts["fedprompt"]["service"]["commit"] == (launches["fedprompt-service"]["commit"] or "abc1234")
    assert parts["fedprompt"]["ray"]["commit"] == row["commit"]


def test_a_first_run_without_a_ray_and_service_pair_writes_no_record_and_the_table_says_so(tmp_path,
                                                                                            monkeypatch) -> None:
    monkeypatch.setattr(compare, "run_deployment", lambda ov, *args, options=(): leave_run(ov, 5.0) or 0)
    monkeypatch.setattr(deployment, "process_costs", lambda: {})
    out = tmp_path / "out"
    assert compare.main([str(deployment.EXPERIMENT), "--out", str(out), "--methods", "fedprompt-service"]) == 0
    assert not (out / "demo.json").exists()
    assert (out / "table.md").read_text().startswith("(no record yet: python -m simulations.compare")
    assert compare.main([str(deployment.EXPERIMENT), "--out", str(out), "--table-only"]) == 0


def test_the_table_shows_the_warm_processes_and_the_cold_column_when_measured(tmp_path) -> None:
    part = {"round_s": 4.0, "fit_max_s": 1.0, "startup_s": 0.5, "load_s": 0.0, "overhead_s": 0.4, "load_before": 1.0,
            "steady_rounds": [2, 3]}
    # extra = (service start-ups + overhead) - (Ray's): fedprompt 0.9 - (none + 0.2) = 0.7 s, over 0.5; bbt-fed
    # 0.9 - (0.1 + 0.5) = 0.3 s, within
    row = {"ray": {**part, "round_s": 3.2, "startup_s": None, "overhead_s": 0.2}, "service": part, "ratio": 1.25,
           "commit": "abc", "cold": {**part, "round_s": 8.0, "startup_s": 3.5}, "ratio_cold": 2.5}
    rec = {"harness": "demo", "supernodes": 2, "machine": "x86_64, 2 cores", "date": "2026-11-29", "commit": "abc",
           "target": 1.2, "warm_clientapps": 1, "methods": {"fedprompt": row, "bbt-fed": {
               **row, "ratio": 1.1, "ray": {**row["ray"], "startup_s": 0.1, "overhead_s": 0.5}}}}
    rec["methods"]["bbt-fed"].pop("cold"), rec["methods"]["bbt-fed"].pop("ratio_cold")
    (tmp_path / "demo.json").write_text(json.dumps(rec))
    table = deployment.table(tmp_path)
    assert "`python -m simulations.compare simulations/experiments/deployment.toml`)" in table
    # no "warm_start" anywhere: a record from before fork existed, its warm processes spawned
    assert "deployment round (node service, 1 spawned warm ClientApp)" in table
    assert ("| fedprompt | 3.2 s | 4.0 s | x1.25 (over) | 1.0 s | 0.5 s | 0.00 s | 0.4 s | 0.70 s | 8.0 s (x2.50; "
            "start-ups 3.5 s, overhead 0.4 s) |") in table
    assert "| bbt-fed | 3.2 s | 4.0 s | x1.10 | 1.0 s | 0.5 s | 0.00 s | 0.4 s | 0.30 s | - | - |" in table
    assert "Within x1.2: bbt-fed; over: fedprompt." in table
    assert ("(extra: the service's start-ups and overhead, 0.90 s on average over these methods whatever their "
            "compute, less the Ray round's own, 0.40 s): 0.50 s on average; within 0.5 s: bbt-fed; over: fedprompt.") \
        in table
    # a part that says how its processes were made wins over the header; mixed parts say so
    mixed = json.loads(json.dumps(rec))
    mixed["methods"]["fedprompt"]["service"]["warm_start"] = "fork"
    (tmp_path / "demo.json").write_text(json.dumps(mixed))
    assert "deployment round (node service, 1 forked/spawned warm ClientApp)" in deployment.table(tmp_path)
    mixed["methods"]["bbt-fed"]["service"]["warm_start"] = "fork"
    (tmp_path / "demo.json").write_text(json.dumps({**mixed, "warm_start": "spawn"}))
    assert "deployment round (node service, 1 forked warm ClientApp)" in deployment.table(tmp_path)
    del rec["warm_clientapps"]  # a record from before the warm processes: the table as it was
    for r in rec["methods"].values():
        r.pop("cold", None), r.pop("ratio_cold", None)
    (tmp_path / "t1.json").write_text(json.dumps({**rec, "harness": "t1"}))
    (tmp_path / "demo.json").unlink()
    old = deployment.table(tmp_path)
    assert "deployment round (node service) | ratio |" in old and "cold" not in old
    assert "deployment.toml --profile t1`)" in old


# ---------------------------------------------------------------- the memory study
def test_every_registered_method_is_a_label_at_each_limit_the_smaller_first() -> None:
    exp, settings = harness(memory, None)
    plain = {label: s["engine"] for label, s in settings.items() if not memory.option_of(exp["method"][label])}
    assert sorted(plain) == sorted(f"{m}-{mb}" for m in METHODS for mb in memory.LIMITS_MB)
    assert all(engine == f"cgroup-{label.rsplit('-', 1)[1]}" for label, engine in plain.items())
    order = exp["methods"]
    assert all(order.index(f"{m}-1024") < order.index(f"{m}-2048") for m in METHODS)
    assert memory.option_of(exp["method"]["fedavg-batch4-1024"]) == "fedavg.batch-size=4"
    assert memory.option_of(exp["method"]["fedavg-bf16-1024"]) == "precision=bf16"


def test_the_memory_table_words_each_outcome() -> None:
    assert memory._cell({"outcome": "completed", "cgroup_peak_mb": 500.4, "peak_rss_mb": 700.6}) == "yes, 500 / 701 MB"
    assert memory._cell({"outcome": "refused", "line": "x reached 950 MB", "guard_peak_mb": 950.2}) == \
        "stopped at 950 MB (one line)"
    assert memory._cell({"outcome": "refused", "line": "x would start with 1,200 MB"}) == "refused at once (one line)"
    assert memory._cell({"outcome": "oom-killed"}) == "oom-killed" and memory._cell(None) == "-"


OUTCOMES = {  # (method, limit) -> what the stand-in measures
    ("fedprompt", 1024): {"outcome": "completed", "cgroup_peak_mb": 500.0, "peak_rss_mb": 700.0},
    ("fedavg", 1024): {"outcome": "refused", "cgroup_peak_mb": 976.0, "line": "fedavg reached 942 MB",
                       "guard_peak_mb": 942.0},
    ("fedavg", 2048): {"outcome": "completed", "cgroup_peak_mb": 1058.0, "peak_rss_mb": 1324.0},
}


def test_a_client_completed_under_the_smaller_limit_is_not_run_again(tmp_path, monkeypatch) -> None:
    measured: list[tuple[str, int, int]] = []

    def run_limited(pairs: dict[str, Any], partitions: int, limit_mb: int, log_path: Path) -> dict[str, Any]:
        measured.append((pairs["method"], limit_mb, partitions))
        assert "run-name" not in pairs and "output-dir" not in pairs  # what the client allocates, no more
        plain = set(pairs) == {"method", "seed"}  # an option's client (a run-config key of its own) fits here
        found = OUTCOMES.get((pairs["method"], limit_mb) if plain else None,
                             {"outcome": "completed", "cgroup_peak_mb": 600.0, "peak_rss_mb": 800.0})
        return {"limit_mb": limit_mb, "wall_s": 1.0, **found}

    monkeypatch.setattr(memory, "run_limited", run_limited)
    out = tmp_path / "out"
    labels = ["fedprompt-1024", "fedprompt-2048", "fedavg-1024", "fedavg-2048", "fedavg-batch4-1024"]
    assert compare.main([str(memory.EXPERIMENT), "--out", str(out), "--methods", *labels]) == 0  # a refusal is an outcome
    assert measured == [("fedprompt", 1024, 2), ("fedavg", 1024, 2), ("fedavg", 2048, 2), ("fedavg", 1024, 2)]
    rec = json.loads((out / memory.RECORD).read_text())
    assert rec["limits_mb"] == [1024, 2048] and list(rec["rows"]) == ["demo"]
    fedprompt, fedavg = rec["rows"]["demo"]["fedprompt"], rec["rows"]["demo"]["fedavg"]
    assert fedprompt["2048"] == {**fedprompt["1024"], "limit_mb": 2048, "implied_by_mb": 1024}
    assert fedavg["1024"]["outcome"] == "refused" and fedavg["2048"]["outcome"] == "completed"
    (option,) = rec["options"]
    assert (option["harness"], option["method"], option["option"], option["limit_mb"]) == (
        "demo", "fedavg", "fedavg.batch-size=4", 1024)
    table = (out / "table.md").read_text()
    assert "| fedprompt | yes, 500 / 700 MB | yes, 500 / 700 MB |" in table
    assert "| fedavg | stopped at 942 MB (one line) | yes, 1058 / 1324 MB |" in table
    assert "| demo | fedavg | `fedavg.batch-size=4` | 1024 MB | yes, 600 / 800 MB |" in table
    monkeypatch.setitem(OUTCOMES, ("fedprompt", 1024), {"outcome": "failed (1)", "cgroup_peak_mb": 9.0})
    measured.clear()  # measured again (no run record to skip); a failure is no outcome: exit 1
    assert compare.main([str(memory.EXPERIMENT), "--out", str(out), "--methods", "fedprompt-1024"]) == 1
    assert measured == [("fedprompt", 1024, 2)]
    fedprompt = json.loads((out / memory.RECORD).read_text())["rows"]["demo"]["fedprompt"]
    assert fedprompt["1024"]["outcome"] == "failed (1)"
    assert "2048" not in fedprompt  # its 2 GB cell was implied by the 1 GB one, which no longer completes


def test_an_implied_cell_follows_its_source_and_goes_when_the_source_no_longer_completes() -> None:
    done = {"outcome": "completed", "cgroup_peak_mb": 500.0, "limit_mb": 1024}
    cells = {"1024": {**done, "cgroup_peak_mb": 510.0}, "2048": {**done, "limit_mb": 2048, "implied_by_mb": 1024}}
    memory.rederive(cells)
    assert cells["2048"] == {**done, "cgroup_peak_mb": 510.0, "limit_mb": 2048, "implied_by_mb": 1024}
    measured = {"outcome": "completed", "cgroup_peak_mb": 900.0, "limit_mb": 2048}  # measured, not implied: kept
    cells = {"1024": {"outcome": "oom-killed", "limit_mb": 1024}, "2048": measured}
    memory.rederive(cells)
    assert cells["2048"] == measured
    cells = {"1024": {"outcome": "oom-killed", "limit_mb": 1024}, "2048": {**done, "limit_mb": 2048,
                                                                           "implied_by_mb": 1024}}
    memory.rederive(cells)
    assert list(cells) == ["1024"]


def test_the_docs_table_takes_each_harness_from_its_own_folder_first(tmp_path) -> None:
    """The committed record holds both harnesses; a t1 record measured since, in --profile t1's folder,
    replaces t1's rows and options, the demo's stay."""
    cell = {"outcome": "completed", "cgroup_peak_mb": 500.0, "peak_rss_mb": 700.0, "limit_mb": 1024}
    head = {"machine": "x86_64, 2 cores", "date": "2026-11-27", "commit": "abc", "limits_mb": [1024]}
    both = {**head, "rows": {"demo": {"fedprompt": {"1024": cell}}, "t1": {"fedprompt": {"1024": cell}}},
            "options": [{"harness": "t1", "method": "fedavg", "option": "x=1", **cell}]}
    newer = {**head, "date": "2026-12-01", "rows": {"t1": {"fedprompt": {"1024": {"outcome": "oom-killed"}}}}}
    (tmp_path / "a.json").write_text(json.dumps(both))
    (tmp_path / "b.json").write_text(json.dumps(newer))
    text = memory.tables(memory.harness_records([tmp_path / "a.json", tmp_path / "b.json", tmp_path / "none.json"]))
    assert text.startswith("x86_64, 2 cores, 2026-11-27, commit abc; x86_64, 2 cores, 2026-12-01, commit abc: ")
    assert "| fedprompt | yes, 500 / 700 MB | oom-killed |" in text and "Options" not in text
    one = memory.tables(memory.harness_records([tmp_path / "a.json"]))
    assert one.startswith("x86_64, 2 cores, 2026-11-27, commit abc: completed? ") and "| t1 | fedavg | `x=1` |" in one


def test_a_cgroup_that_cannot_be_made_is_a_failed_cell_and_the_sweep_goes_on(tmp_path, monkeypatch) -> None:
    """Not root, or a parent that delegates no memory controller (a container): each label's cell says so,
    the sweep measures the next label and writes the record."""
    def no_cgroup(*args: Any) -> dict[str, Any]:
        raise PermissionError(13, "Permission denied", "/sys/fs/cgroup/fedtext-mem-1")

    monkeypatch.setattr(memory, "run_limited", no_cgroup)
    out = tmp_path / "out"
    assert compare.main([str(memory.EXPERIMENT), "--out", str(out), "--methods", "fedprompt-1024", "fedavg-1024"]) == 1
    cells = json.loads((out / memory.RECORD).read_text())["rows"]["demo"]
    assert cells["fedprompt"]["1024"]["outcome"] == cells["fedavg"]["1024"]["outcome"] == "failed (PermissionError)"


def test_a_cgroup_whose_limit_cannot_be_written_is_removed(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(memory, "CGROUP_V2", tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")  # v2 without the memory controller delegated
    real_write = Path.write_text

    def refuse_memory_max(self: Path, *args: Any, **kwargs: Any) -> int:
        if self.name == "memory.max":
            raise OSError(2, "No such file or directory", str(self))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refuse_memory_max)
    with pytest.raises(OSError):
        memory.Cgroup(1024)
    assert [p.name for p in tmp_path.iterdir()] == ["cgroup.controllers"]  # no empty cgroup left


def test_the_launcher_says_how_its_nodes_ran_and_a_run_without_it_was_spawned(tmp_path) -> None:
    """simulations.deployment's <logs>/nodes.json resolves the node service's defaults; the study reads
    how a part's warm processes were made from it, and "spawn" for a run launched before it existed."""
    from fedtext.node.service import WARM_CLIENTAPPS

    assert write_nodes(tmp_path, True, None, None) == {"node_service": True, "warm_clientapps": WARM_CLIENTAPPS,
                                                       "warm_start": WARM_START}
    assert deployment.made(tmp_path / "nodes.json") == WARM_START
    assert write_nodes(tmp_path, True, 3, "spawn")["warm_start"] == deployment.made(tmp_path / "nodes.json") == "spawn"
    assert write_nodes(tmp_path, True, 0, "fork") == {"node_service": True, "warm_clientapps": 0, "warm_start": None}
    assert write_nodes(tmp_path, False, 2, "fork") == {"node_service": False, "warm_clientapps": 0, "warm_start": None}
    assert deployment.made(tmp_path / "absent" / "nodes.json") == "spawn"
    assert deployment.header_start({"warm_clientapps": 2}) == "spawn" and deployment.header_start({}) is None
    assert deployment.header_start({"warm_clientapps": 2, "warm_start": "fork"}) == "fork"


def test_a_row_whose_runs_logs_are_gone_keeps_how_its_warm_processes_were_made(tmp_path, monkeypatch) -> None:
    """A record made again after another method's new sitting re-reads every finished run; a run whose launcher
    logs are gone (never committed) keeps its row's recorded warm start instead of reading as spawned, and a run
    whose logs say how (here, spawned) is read from them."""
    _a_ray_and_a_service_run(tmp_path, monkeypatch, "aaaaaaa")
    new = deployment.launched_parts(tmp_path, "ccccccc")["fedprompt"]
    assert "warm_start" not in new["service"]  # no logs here: the run itself says nothing
    same = {"service": {"wall_s": 25.0, "commit": "aaaaaaa", "warm_start": "fork"}}  # the row's record of this run
    assert deployment.keep_warm_start(new, same)["service"]["warm_start"] == "fork"
    for other in ({"service": {**same["service"], "wall_s": 30.0}}, {"service": {**same["service"], "commit": "b"}},
                  {}):  # another run of the label, or no row: read as made() reads a run without logs
        new = deployment.launched_parts(tmp_path, "ccccccc")["fedprompt"]
        assert deployment.keep_warm_start(new, other)["service"]["warm_start"] == "spawn"
    old_fork = {"fork": {"round_s": 4.0, "commit": "old"}}  # a part not read again: left as the row has it
    new = deployment.launched_parts(tmp_path, "ccccccc")["fedprompt"]
    assert deployment.row_of(old_fork, deployment.keep_warm_start(new, old_fork))["fork"] == old_fork["fork"]
    logs = tmp_path / f"{compare.log_stem('fedprompt-service', 0, None)}-logs"
    logs.mkdir()  # the launcher's logs there but no nodes.json (a run from before it): spawned, as made() says
    assert deployment.launched_parts(tmp_path, "ccccccc")["fedprompt"]["service"]["warm_start"] == "spawn"
    write_nodes(logs, True, 2, "fork")
    new = deployment.launched_parts(tmp_path, "ccccccc")["fedprompt"]
    assert new["service"]["warm_start"] == "fork"
    assert deployment.keep_warm_start(new, {"service": {**same["service"], "warm_start": "spawn"}}) == new


def test_each_harness_has_its_target_and_a_changed_target_alone_rewrites_only_the_target(tmp_path):
    """The demo within x1.2, T1 within x1.3 (issue 68); a record whose rows are unchanged takes a new target
    without a new header: its machine, date and process costs stay the runs' own."""
    from simulations.studies import HARNESSES

    assert set(deployment.TARGETS) == set(HARNESSES) and deployment.TARGETS == {"demo": 1.2, "t1": 1.3}
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "experiment.json").write_text(json.dumps({"file": str(deployment.EXPERIMENT), "profile": "t1"}))
    part = deployment.summarise([_round(n, 3.0) for n in range(4)])
    row = {"ray": {**part, "round_s": 2.0, "load_before": 1.0}, "service": {**part, "load_before": 1.0,
                                                                           "warm_start": "fork"},
           "ratio": 1.25, "commit": "old"}
    old = {"harness": "t1", "target": 1.2, "date": "2026-11-30", "process_costs": {"shim_process_s": 0.4, "client_process_s": 2.0},
           "warm_start": "fork", "methods": {"fedprompt": row}}
    (out / "t1.json").write_text(json.dumps(old))
    deployment.finish(out)
    assert json.loads((out / "t1.json").read_text()) == {**old, "target": 1.3}
    lines = "\n".join(deployment.harness_table({**json.loads((out / "t1.json").read_text()), "commit": "old",
                                                 "machine": "x86_64, 2 cores", "supernodes": 10}))
    assert "| x1.25 ± 0.00 |" in lines and "Within x1.3: fedprompt; over: none (±" in lines


def test_a_deployment_part_is_stamped_with_its_launch_lines_commit_not_the_checkouts_at_finish(tmp_path, monkeypatch):
    """A deployment run's record names no commit (its code is the FAB): the launch line's, written when it started,
    says which code ran; a line from before launch lines named one falls back to the checkout's at finish."""
    lines = _a_ray_and_a_service_run(tmp_path, monkeypatch, "bbbbbbb")
    parts = deployment.launched_parts(tmp_path, "ccccccc")["fedprompt"]
    assert (parts["ray"]["commit"], parts["service"]["commit"]) == ("aaaaaaa", "bbbbbbb")
    del lines["r-service"]["commit"]
    assert deployment.launched_parts(tmp_path, "ccccccc")["fedprompt"]["service"]["commit"] == "ccccccc"


def test_the_runner_writes_the_checkouts_commit_in_each_launch_line() -> None:
    line = compare.launch_line({"method": "fedprompt", "seed": 0}, "flower", 2, 1.0, 2.0, 0, "r", None, "abcdef1")
    assert line["commit"] == "abcdef1" and compare.launch_line({"method": "m", "seed": 0}, "flower", 2, 1.0, 2.0, 0,
                                                                 None)["commit"] is None


def test_a_rows_commits_are_each_named_once_however_often_the_row_is_made_again() -> None:
    """A part without a commit of its own (measured before parts named one) has its row's, a list: the row's
    list names each commit once, and making the row again from itself changes nothing (finish writes a record
    only when a row changed)."""
    part = {**deployment.summarise([_round(n, 3.0) for n in range(4)]), "load_before": 1.0}
    old = {"ray": {**part, "round_s": 2.0, "commit": "bbbbbbb"}, "fork": {**part, "round_s": 3.0},
           "commit": "aaaaaaa, bbbbbbb"}
    row = deployment.row_of(old, {"service": {**part, "round_s": 2.5, "commit": "ccccccc"}})
    assert row["commit"] == "aaaaaaa, bbbbbbb, ccccccc"
    again = deployment.row_of(row, {"service": row["service"]})
    assert again == row and again["ratio"] == 1.25 and again["ratio_fork"] == 1.5
    lines = deployment.harness_table({"harness": "demo", "commit": "ddddddd", "machine": "x86_64, 2 cores",
                                      "date": "2026-11-30", "supernodes": 2, "target": 1.2,
                                      "methods": {"m": row}})
    assert "commit aaaaaaa, bbbbbbb, ccccccc (each row's in the record)" in lines[0]


@pytest.mark.parametrize("folder, name", [("deployment-steady", "steady"),
                                          ("deployment-steady/before-seal-20261203", "steady"),
                                          ("deployment-steady/repeat-20261203", "steady"),
                                          ("deployment-steady/shared-tls-20261203", "steady"),
                                          ("deployment-t1-steady", "t1-steady"),
                                          ("deployment-t1-steady/before-seal-20261203", "t1-steady")])
def test_a_committed_steady_record_is_what_finish_makes_of_its_committed_runs(tmp_path, monkeypatch, folder, name):
    """The steady records' rows (each steady round's time among them) come from their runs as a fresh clone has
    them (no launcher logs): finish on a copy of the committed folder writes nothing. A change to what a row holds
    (summarise, row_of) fails here until the records are made again from their runs."""
    import shutil

    src = REPO / "simulations" / "results" / folder
    out = tmp_path / "out"
    out.mkdir()
    shutil.copytree(src / "runs", out / "runs")
    for file in ("launches.jsonl", "experiment.json", f"{name}.json"):
        shutil.copy(src / file, out / file)
    monkeypatch.setattr(deployment, "process_costs", lambda repeats=3: pytest.fail("a row changed: header re-measured"))
    before = (out / f"{name}.json").read_text()
    deployment.finish(out)
    assert (out / f"{name}.json").read_text() == before
    rows = json.loads(before)["methods"]
    assert set(deployment.launched_parts(out, "0000000")) == set(rows)  # each row made again from its runs
    assert all("round_times_s" in row["ray"] for row in rows.values())
