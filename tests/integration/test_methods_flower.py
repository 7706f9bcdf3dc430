"""Each method end to end through Flower's simulation engine (Ray); ``flwr run .`` is in
tests/system/test_flwr_run.py.

Sized for CI on 2 cores: tiny prompts, few shots, 2 rounds, 2 clients.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fedtext.comm import NPY_HEADER_BYTES
from fedtext.records import ROUND_FIELDS

from ..conftest import REPO, _env, _only_run

TINY = "num-server-rounds=2 shots-per-class=4 client-test-size=8 eval-size=40 prompt-length=4 max-length=48"
# MiniLM-L6 (22,713,216 encoder weights in 103 tensors) + linear head [2, 384] + [2]: float32, one NPY header each
MINILM_WEIGHTS, MINILM_TENSORS = 22_713_216, 103
FEDAVG_BYTES = 4 * (MINILM_WEIGHTS + 2 * 384 + 2) + (MINILM_TENSORS + 2) * NPY_HEADER_BYTES
FEDDRS_TINY = ("feddrs.local-steps=1 feddrs.batch-size=4 feddrs.sample-batch=2 feddrs.sample-length=4 "
               "feddrs.sample-steps=1 feddrs.distill-steps=1 feddrs.post-iterations=1")
PER_METHOD = {  # extra run-config, clients, bytes up and down per client-round
    # the whole model each way (the golden tests run the prompt methods through Flower)
    "fedavg": ("fedavg.local-steps=2 fedavg.batch-size=4", 2, FEDAVG_BYTES, None),
    # prefix keys and values [L=6, T=4, D=384] each
    "fedptuning-v2": ("fedptuning-v2.local-steps=2 fedptuning-v2.batch-size=4", 2, 2 * (4 * 6 * 4 * 384 + 128), None),
    # the whole model each way; feddrs uploads its label counts [C=2] on top
    "feddrs": (f"{FEDDRS_TINY} feddrs.sampling=mixed", 2, FEDAVG_BYTES + 4 * 2 + NPY_HEADER_BYTES, FEDAVG_BYTES),
    "feddf": ("feddf.local-steps=1 feddf.batch-size=4 feddf.distill-steps=1 feddf.post-iterations=1 "
              "feddf.aux-size=8 feddf.aux-batch=8", 2, FEDAVG_BYTES, None),
    # A [r=2, 384] and B [384, 2] at query and value of 6 layers + the linear head [2, 384], [2]
    "fedlora": ("fedlora.local-steps=2 fedlora.batch-size=4 fedlora.rank=2", 2,
                4 * 2 * (384 + 384) * 6 * 2 + 24 * NPY_HEADER_BYTES + 4 * (2 * 384 + 2) + 2 * NPY_HEADER_BYTES, None),
    # 12 adapters (m=4): 2md + m + d in 4 tensors; 24 LayerNorm tensors [384]; the linear head
    "fedadapter": ("fedadapter.local-steps=2 fedadapter.batch-size=4 fedadapter.bottleneck=4", 2,
                   12 * (4 * (2 * 4 * 384 + 4 + 384) + 4 * NPY_HEADER_BYTES) + 24 * (4 * 384 + NPY_HEADER_BYTES)
                   + 4 * (2 * 384 + 2) + 2 * NPY_HEADER_BYTES, None),
    # the accumulator A down, the per-seed sums G up: K = 4 float32 each way
    "fedkseed": ("fedkseed.seeds=4 fedkseed.local-steps=2 fedkseed.batch-size=4", 2, 4 * 4 + NPY_HEADER_BYTES, None),
}
# G with h=5, |P|=2: [5, 384] [5] [768, 5] [768], one NPY header each
FEDDPG_BYTES = 4 * (384 * 5 + 5 + 5 * 768 + 768) + 4 * NPY_HEADER_BYTES


def _simulate(clients: int, run_config: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path, list[dict]]:
    """2 rounds through ``simulations.simulate``; the finished process, its run folder and rounds."""
    cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", str(clients), "--run-config",
           f"{run_config} output-dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = _only_run(tmp_path)
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    return proc, run, rounds


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(PER_METHOD))
def test_two_rounds_two_clients_through_flower_simulation(method, tmp_path):
    extra, clients, up, down = PER_METHOD[method]
    down = down or up
    proc, run, rounds = _simulate(clients, f"method={method} {TINY} {extra}", tmp_path)
    for r in rounds:
        assert set(ROUND_FIELDS) <= set(r)
    for r in rounds[1:]:
        assert r["num_clients"] == clients and r["dropped"] == []
        assert r["bytes_up_per_client"] == up and r["bytes_down_per_client"] == down
        assert r["bytes_up"] == clients * up
        assert 0.0 <= r["global_accuracy"] <= 1.0
        assert set(r["client_accuracy"]) == {str(i) for i in range(clients)}
        assert r["model_queries"] > 0 and r["client_peak_rss_mb"] > 100
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["rounds_done"] == 2
    assert json.loads((run / "config.json").read_text())["config"]["method"] == method
    assert "fedtext round 2/2" in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["random", "target", "adversarial"])
def test_feddrs_distils_with_each_sampler_through_flower_simulation(sampling, tmp_path):
    """Each FedDRS sampling option alone (``mixed`` is in PER_METHOD): round 1 distils
    with I = 1 iteration, round 2 post-processes with I* = 1; the server's distillation
    seconds and peak memory are in the round records, apart from the clients'."""
    _, run, rounds = _simulate(2, f"method=feddrs {TINY} {FEDDRS_TINY} feddrs.sampling={sampling}", tmp_path)
    for r, post in ((rounds[1], 0), (rounds[2], 1)):
        m = r["method_metrics"]
        assert r["num_clients"] == 2 and r["dropped"] == []
        assert m["post_processing"] == post and m["distill_iterations"] == 1
        assert m["server_distill_s"] > 0 and m["server_peak_rss_mb"] > 100
    assert json.loads((run / "config.json").read_text())["config"]["feddrs.sampling"] == sampling


# FeS co-planned by default on MiniLM-L6: the biases of layers 4-5 (8 tensors of 4,224 numbers per layer)
FES_BYTES = 4 * 2 * 4224 + 16 * NPY_HEADER_BYTES
FEW_SHOT = {  # extra run-config, bytes each way per (training) client-round
    "fes": ("fes.paces=1-3-20 fes.neighbours=4", FES_BYTES),
    "fedfsl": ("fedfsl.static-labels=4 fedfsl.static-clients=2", 4 * MINILM_WEIGHTS + MINILM_TENSORS * NPY_HEADER_BYTES),
    # every bias: the embeddings' LayerNorm and 8 per layer, 4,224 numbers each
    "fedfsl-bias": ("fedfsl-bias.static-labels=4 fedfsl-bias.static-clients=2",
                    4 * (384 + 6 * 4224) + 49 * NPY_HEADER_BYTES),
    "fedcls": ("", FEDAVG_BYTES),
}


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(FEW_SHOT))
def test_few_shot_methods_run_two_rounds_on_three_clients_through_flower(method, tmp_path):
    """fes / fedfsl / fedfsl-bias / fedcls: gold labels on clients 0-1, client 2 unlabelled.
    Round 1 trains on the gold labels only; pseudo-labelling methods label in round 2 (the
    authors' schedule: with the model after round 1, never the untrained one; client 2
    answers with an empty report, not an upload); bytes are the planned tensors; every
    round has a simulated device time of at least its bytes at 1 MB/s."""
    extra, nbytes = FEW_SHOT[method]
    few = (f"{method}.gold-labels=8 {method}.unlabeled-size=24 {method}.max-local-steps=2 clients-per-round=2 "
           f"{extra}")
    _, run, rounds = _simulate(3, f"method={method} {TINY} {few}", tmp_path)
    for r in rounds[1:]:
        assert r["num_clients"] == 2 and r["dropped"] == []
        assert r["bytes_up_per_client"] == nbytes == r["bytes_down_per_client"]
        assert r["sim_time_s"] >= 2 * nbytes / 1e6
        assert 0.0 <= r["global_accuracy"] <= 1.0
    assert rounds[1]["method_metrics"]["label_clients"] == 0  # round 1: gold labels only
    m = rounds[2]["method_metrics"]
    if method == "fedcls":
        assert m["label_clients"] == 0 and m["pseudo_labels"] == 0
    else:
        assert m["label_clients"] >= 2 and m["pseudo_labels"] > 0 and 0 <= m["pseudo_label_accuracy"] <= 1
    if method == "fes":
        assert m["pace_k"] == 20 and "aug_e" in m and m["chosen"] == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["rounds_done"] == 2


@pytest.mark.slow
def test_feddpg_trains_then_unlearns_through_flower_simulation(tmp_path, monkeypatch):
    """feddpg, 3 clients, 2 rounds: round 1 trains G on everyone; in round 2 only client 1
    is asked, unlearns (FedDPGu) and its G becomes the global one; all 3 clients test
    the global G in both rounds (the "other clients" of Figure 4)."""
    extra = ("feddpg.hidden=5 feddpg.prompts=2 feddpg.local-steps=2 feddpg.batch-size=4 feddpg.unlearn-round=2 "
             "feddpg.unlearn-client=1 feddpg.unlearn-steps=2 clients-per-eval=0")
    _, run, rounds = _simulate(3, f"method=feddpg {TINY} {extra}", tmp_path)
    first, second = rounds[1], rounds[2]
    assert first["num_clients"] == 3 and first["bytes_up_per_client"] == FEDDPG_BYTES == first["bytes_down_per_client"]
    assert second["num_clients"] == 1 and second["bytes_up"] == FEDDPG_BYTES and second["dropped"] == []
    m = second["method_metrics"]
    assert m["unlearned_client"] == 1 and m["forget_examples"] >= 1
    assert {"forget_accuracy_before", "forget_accuracy_after", "retained_accuracy_after"} <= set(m)
    assert set(first["client_accuracy"]) == set(second["client_accuracy"]) == {"0", "1", "2"}
    config = json.loads((run / "config.json").read_text())["config"]
    assert config["trainable-parameters"] == 384 * 5 + 5 + 5 * 768 + 768
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    # FedDPGu on the finished run's global G, as a user would call it
    proc = subprocess.run([sys.executable, "-m", "simulations.papers.feddpg.unlearning", "forget", str(run), "--client", "2",
                           "--num-partitions", "3"], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert metrics["forget_examples"] >= 1 and 0 <= metrics["global_accuracy_after"] <= 1
    g_u = np.load(metrics["output"])
    assert sorted(g_u.files) == ["generator.0.bias", "generator.0.weight", "generator.2.bias", "generator.2.weight"]
    # the tradeoff table from the G the unlearning round replaced: one row per strength, both weightings of
    # eq. (5); the run's own strength (2 steps at lr 1e-3, λ = 1, sets) repeats its round 2 exactly (same
    # relabels), global and every other client's local accuracy included
    proc = subprocess.run([sys.executable, "-m", "simulations.papers.feddpg.unlearning", "tradeoff", str(run), "--client", "1",
                           "--num-partitions", "3", "--setting", "2,0.001,1", "--setting", "1,0.001,0.5,examples,20",
                           "--setting", "1,0.1,1,sets,0,sgd"],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines()
            if line.startswith(("| 1 ", "| 2 "))]
    assert [r[:6] for r in rows] == [["2", "0.001", "1", "sets", "0", "adamw"],
                                     ["1", "0.001", "0.5", "examples", "20", "adamw"],
                                     ["1", "0.1", "1", "sets", "0", "sgd"]]
    assert rows[0][6] == "2" and rows[1][6] in ("0", "1") and rows[2][6] == "1"  # steps taken
    pts = lambda x: f"{100 * x:.1f}"  # noqa: E731
    own = rows[0]
    assert own[8] == pts(m["forget_accuracy_after"]) and own[9] == pts(m["retained_accuracy_after"])
    assert own[10] == pts(first["global_accuracy"]) and own[11] == pts(second["global_accuracy"])
    change = min(second["client_accuracy"][c] - first["client_accuracy"][c] for c in ("0", "2"))
    assert own[14] == pts(change) and own[15] in ("yes", "no")
    # ... and so does unlearn_run itself, to the weights: G_c^u is the run's final global G. The demo task
    # has 2 classes (a relabel is the other one), so check the relabel seed too: the client's in round 2
    from fedtext import checkpoint
    from fedtext.client import client_seed
    from fedtext.methods.feddpg import unlearning as feddpg_unlearning
    from simulations.papers.feddpg import unlearning

    seeds, original = [], feddpg_unlearning.unlearn
    monkeypatch.setattr(feddpg_unlearning, "unlearn", lambda *a: seeds.append(a[-1]) or original(*a))
    again = unlearning.unlearn_run(run, 1, 3, start="before-unlearning", output=tmp_path / "again.npz")
    assert seeds == [client_seed(SimpleNamespace(seed=config["seed"]), 1, 2)]
    assert again["unlearn_loss"] == pytest.approx(m["unlearn_loss"], rel=1e-5)
    with np.load(tmp_path / "again.npz") as g:
        names = ["generator.0.weight", "generator.0.bias", "generator.2.weight", "generator.2.bias"]  # spec order
        for name, final in zip(names, checkpoint.load(run).global_arrays, strict=True):
            np.testing.assert_allclose(g[name], final, atol=1e-6)


@pytest.mark.slow
def test_compare_runner_writes_one_table(tmp_path):
    exp = tmp_path / "exp.toml"
    shared = {**dict(kv.split("=") for kv in TINY.split()), "num-server-rounds": "1"}
    exp.write_text(
        'methods = ["fedprompt", "bbt-fed"]\nseeds = [0]\nnum-supernodes = 2\n[run-config]\n'
        + "\n".join(f"{k} = {v}" for k, v in shared.items())
        + "\nfedprompt.local-steps = 2\nbbt-fed.local-steps = 2"
        + '\n[method.bbt-fed]\nbbt-fed.popsize = 4\nbbt-fed.intrinsic-dim = 20\n'
    )
    proc = subprocess.run([sys.executable, "-m", "simulations.compare", str(exp), "--out", str(tmp_path / "out")],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| fedprompt | demo | iid | 1 |" in table and "| bbt-fed | demo | iid | 1 |" in table
    csv = (tmp_path / "out" / "table.csv").read_text().splitlines()
    assert len(csv) == 3 and "KB up / client-round" in csv[0]


def test_compare_runner_rejects_a_bad_experiment(tmp_path):
    exp = tmp_path / "bad.toml"
    exp.write_text('methods = ["fedsgd"]\n')
    proc = subprocess.run([sys.executable, "-m", "simulations.compare", str(exp)], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown method 'fedsgd'" in proc.stderr


@pytest.mark.slow
def test_nan_and_wrong_shape_clients_are_dropped_through_flower(tmp_path):
    """fedbpt, 3 clients, 2 rounds: clients 0 (NaN) and 1 (wrong shape) are dropped
    with a logged reason in every round; the rounds complete on client 2 alone."""
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "integration" / "fault_injection.py"), str(tmp_path)],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    run = _only_run(tmp_path)
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [0, 1, 2]
    for r in rounds[1:]:
        assert r["num_clients"] == 1
        reasons = {d["client"]: d["reason"] for d in r["dropped"]}
        assert "non-finite" in reasons["0"] and "shape (20,), expected (23,)" in reasons["1"]
        assert r["global_accuracy"] is not None
    assert "dropped client 0" in out and "dropped client 1" in out
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
