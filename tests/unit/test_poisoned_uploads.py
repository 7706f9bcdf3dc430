"""Issue 35 item 3 and 5: what one faulty client can no longer do to a run, and honest status.

Each poisoned upload the issue found (a finite 1e30 prompt, ``num_examples=10^12``, a
non-positive-definite C, a FedBPT sigma of 1e30, ``queries="lots"``, an evaluate reply
without accuracy) is sent beside honest ones on mock client proxies: the round aggregates
the honest uploads exactly as if the faulty one were absent, and the drop is recorded
with its reason. Then the run-level cases: rounds that go on and finish with a faulty
client in every round, a run whose results were never valid ends ``failed`` with their
common reason, a node lost mid-run is a drop (not a configuration error), and partition
feasibility is checked on the server before a client trains.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from flwr.common import Code, EvaluateRes, FitRes, Status

from fedtext.common import comm
from fedtext.common.config import ConfigError
from fedtext.records import RunRecorder
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from strategies.bbt_fed import BBTFed
from strategies.fedprompt import FedPrompt
from strategies.fes import FewShotStrategy

D = 6  # intrinsic dim of the subspace methods here
STEPS = 2  # FedBPT local steps (D and STEPS size the conftest's fedbpt fixture)


def fit_res(arrays, n, pid, **metrics):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}))


def eval_res(pid, n, loss=0.5, **metrics):
    return (SimpleNamespace(cid=str(pid)),
            EvaluateRes(Status(Code.OK, ""), loss, n, {"partition_id": pid, **metrics}))


def reasons(strat):
    return {d["client"]: d["reason"] for d in strat.record.dropped}


@pytest.fixture()
def fedprompt(backbone, tmp_path):
    cfg = make_config("fedprompt", prompt_length=2, max_length=64, output_dir=str(tmp_path), num_server_rounds=3)
    strat = FedPrompt(cfg, TASKS["demo"], recorder=RunRecorder(tmp_path, cfg.to_run_config()))
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    return strat


def honest_prompts(strat):
    base = strat.global_arrays[0]
    return base + 0.1, base - 0.3


# ------------------------------------------------------------- magnitude bound
def test_a_finite_1e30_prompt_is_dropped_and_the_honest_mean_kept(fedprompt):
    a, b = honest_prompts(fedprompt)
    poison = np.full_like(a, 1e30)
    params, _ = fedprompt.aggregate_fit(1, [fit_res([a], 2, 0), fit_res([poison], 2, 1), fit_res([b], 6, 2)], [])
    np.testing.assert_allclose(comm.decode(params)[0], (2 * a + 6 * b) / 8, rtol=1e-6)  # as if client 1 were absent
    assert "upload-bound" in reasons(fedprompt)["1"] and "1e+30" in reasons(fedprompt)["1"]
    assert fedprompt.record.num_clients == 2


def test_the_bound_is_relative_to_the_global_array_and_inclusive(fedprompt):
    ref = fedprompt.global_arrays[0]
    scale = max(1.0, float(np.abs(ref).max()))
    at = np.zeros_like(ref)
    at[0, 0] = np.float32(100.0 * scale)  # exactly upload-bound x scale: kept
    over = at.copy()
    over[0, 0] = np.float32(100.0 * scale * 1.01)
    named = fedprompt.global_named()
    assert fedprompt.model.check_scale({"prompt": at}, named, 100.0) is None
    assert "exceeds upload-bound 100" in fedprompt.model.check_scale({"prompt": over}, named, 100.0)
    assert "exceeds" in fedprompt.model.check_scale({"prompt": -over}, named, 100.0)  # |x|, not x
    assert fedprompt.model.check_scale({"prompt": over}, named, 0.0) is None  # 0 = no bound
    # max(1, .): a global array of tiny values still allows |x| <= bound
    small = {"prompt": np.full_like(ref, 1e-3)}
    assert fedprompt.model.check_scale({"prompt": np.full_like(ref, 99.0)}, small, 100.0) is None
    assert fedprompt.model.check_scale({"prompt": np.full_like(ref, 101.0)}, small, 100.0) is not None
    # a large global array scales the bound up: weights of |w| ~ 20 allow 2000
    large = {"prompt": np.full_like(ref, 20.0)}
    assert fedprompt.model.check_scale({"prompt": np.full_like(ref, 1999.0)}, large, 100.0) is None
    assert fedprompt.model.check_scale({"prompt": np.full_like(ref, 2001.0)}, large, 100.0) is not None


def test_the_bound_keeps_its_value_and_drops_the_next_float32_past_it(fedprompt):
    """At a global scale of 1 the limit is upload-bound itself: 100.0 is kept, the next
    float32 above it (100.00001) dropped (the test above steps 1 % past)."""
    small = {"prompt": np.zeros_like(fedprompt.global_arrays[0])}
    at = np.zeros_like(small["prompt"])
    at[1, 2] = -100.0
    past = at.copy()
    past[1, 2] = -np.nextafter(np.float32(100.0), np.float32(200.0))
    assert fedprompt.model.check_scale({"prompt": at}, small, 100.0) is None
    assert fedprompt.model.check_scale({"prompt": past}, small, 100.0) == \
        "prompt: |value| 100 exceeds upload-bound 100 x 1 (its global scale)"


def test_upload_bound_is_a_validated_run_config_key(backbone):
    assert make_config("fedprompt", upload_bound=0).upload_bound == 0
    with pytest.raises(ConfigError, match="upload-bound"):
        make_config("fedprompt", upload_bound=-1)


# ------------------------------------------------------------- num_examples
def test_num_examples_beyond_the_train_split_is_dropped(fedprompt):
    a, b = honest_prompts(fedprompt)
    results = [fit_res([a], 4, 0), fit_res([b], 10**12, 1)]
    params, _ = fedprompt.aggregate_fit(1, results, [])
    np.testing.assert_allclose(comm.decode(params)[0], a, rtol=1e-6)  # the global model is not client 1's
    assert "num_examples=1000000000000 outside 1..960" in reasons(fedprompt)["1"]  # demo: 960 train rows


def test_num_examples_is_bounded_by_the_labelled_rows_the_server_assigned(fedprompt):
    """Issue 58's weight lie: a client claiming more than the labelled rows the server assigned
    it (its partition less its test split, cut to shots-per-class) is dropped, however far below
    its partition's rows the claim is; exactly the assigned count is kept."""
    from fedtext.learning.data import client_data, partition_train

    fedprompt.sampler.learn(SimpleNamespace(cid="0"), 0, None, 4)
    assigned = len(client_data(fedprompt.cfg, 0, 4).train)
    rows = len(partition_train(fedprompt.cfg, 0, 4))
    assert 0 < assigned < rows  # the old bound (the partition) let every claim in between pass
    a, b = honest_prompts(fedprompt)
    fedprompt.aggregate_fit(1, [fit_res([a], assigned, 0), fit_res([b], 3, 1)], [])
    assert fedprompt.record.num_clients == 2  # exactly what it was assigned: kept
    for claim in (assigned + 1, rows):
        fedprompt.rounds.begin(2)
        fedprompt.aggregate_fit(2, [fit_res([a], claim, 0), fit_res([b], 3, 1)], [])
        assert reasons(fedprompt)["0"] == (f"num_examples={claim} outside 1..{assigned} (the labelled training rows "
                                           "the server assigned it: shots-per-class=8 of partition 0)")
        assert fedprompt.record.num_clients == 1


def test_num_examples_at_the_whole_train_split_is_kept_and_one_more_dropped(fedprompt):
    """A client whose partition the server does not know is bounded by the whole train
    split (demo: 960 rows): 960 kept, 961 dropped; 1 kept, 0 dropped."""
    a, b = honest_prompts(fedprompt)
    fedprompt.aggregate_fit(1, [fit_res([a], 960, 0), fit_res([b], 1, 1)], [])
    assert fedprompt.record.num_clients == 2 and fedprompt.record.dropped == []
    fedprompt.rounds.begin(2)
    fedprompt.aggregate_fit(2, [fit_res([a], 961, 0), fit_res([b], 0, 1), fit_res([b], 3, 2)], [])
    unknown = "(the whole train split: the client's partition is unknown)"
    assert reasons(fedprompt) == {"0": f"num_examples=961 outside 1..960 {unknown}",
                                  "1": f"num_examples=0 outside 1..960 {unknown}"}


def test_an_evaluate_reply_at_its_bounds_is_kept_and_one_step_past_dropped(fedprompt):
    """``0 <= num_examples <= client-test-size`` (32) and accuracy in [0, 1], each at the bound
    and one step past it (the reply test above goes far outside only)."""
    over = float(np.nextafter(1.0, 2.0))
    fedprompt.aggregate_evaluate(1, [eval_res(0, 32, accuracy=1.0), eval_res(1, 0, accuracy=0.0),
                                     eval_res(2, 33, accuracy=0.5), eval_res(3, -1, accuracy=0.5),
                                     eval_res(4, 8, accuracy=over), eval_res(5, 8, accuracy=0.5, post_accuracy=over)],
                                 [])
    assert set(fedprompt.record.client_accuracy) == {"0"}  # 0 test examples: not dropped, weighs nothing
    assert reasons(fedprompt) == {
        "2": "evaluate reply: num_examples=33 outside 0..32 (client-test-size)",
        "3": "evaluate reply: num_examples=-1 outside 0..32 (client-test-size)",
        "4": f"evaluate reply: accuracy={over!r} outside [0, 1]",
        "5": f"evaluate reply: post_accuracy={over!r} outside [0, 1]"}


# ------------------------------------------------------------- covariance, sigma
def test_a_covariance_that_is_not_positive_definite_is_dropped(backbone):
    cfg = make_config("bbt-fed", average="z-sigma-C", intrinsic_dim=D, prompt_length=2, max_length=64)
    strat = BBTFed(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    z, sigma = np.full(D, 0.5, np.float32), np.array([1.0], np.float32)
    pd_c = np.eye(D, dtype=np.float32) * 2
    indefinite = np.eye(D, dtype=np.float32)
    indefinite[0, 0] = -1.0
    asym = np.eye(D, dtype=np.float32)
    asym[0, 1] = 0.5
    results = [fit_res([z, sigma, pd_c], 2, 0), fit_res([z, sigma, indefinite], 2, 1), fit_res([z, sigma, asym], 2, 2)]
    params, _ = strat.aggregate_fit(1, results, [])
    np.testing.assert_allclose(comm.decode(params)[2], pd_c)
    assert reasons(strat) == {"1": "C is not positive definite", "2": "C is not symmetric"}
    semidefinite = np.eye(D, dtype=np.float32)
    semidefinite[0, 0] = 0.0
    assert strat.model.check_upload({"z": z, "sigma": sigma, "C": semidefinite}) == "C is not positive definite"


def packed(z, sigmas, loss):
    return [np.concatenate([z, sigmas, [loss]]).astype(np.float32)]


def test_fedbpt_sigma_out_of_range_and_negative_fitness_are_dropped(fedbpt):
    z = np.zeros(D)
    honest = [fit_res(packed(z + k, [0.8, 0.7], 0.3 + k), 4, k) for k in range(2)]
    poisoned = [fit_res(packed(z, [1e30, 0.5], 0.1), 4, 7), fit_res(packed(z, [0.5, 0.5], -1.0), 4, 8),
                fit_res(packed(z + 1e6, [0.5, 0.5], 0.1), 4, 9)]
    fedbpt.aggregate_fit(1, honest + poisoned, [])
    got = reasons(fedbpt)
    assert "sigma" in got["7"] and "upload-bound" in got["7"]
    assert got["8"] == "fitness must be >= 0, got -1"
    assert got["9"].startswith("z:")
    assert fedbpt.record.num_clients == 2
    # the range is (0, bound * max(1, sigma_t)]: sigma_t = 1 (sigma0) -> 100 kept, 101 not
    named = fedbpt.global_named()
    up = {"z|sigmas|loss": packed(z, [100.0, 1.0], 0.2)[0]}
    assert fedbpt.model.check_scale(up, named, 100.0) is None
    up = {"z|sigmas|loss": packed(z, [1.0, 101.0], 0.2)[0]}
    assert fedbpt.model.check_scale(up, named, 100.0).startswith("sigma:")
    assert fedbpt.model.check_upload({"z|sigmas|loss": packed(z, [1.0, 1.0], 0.0)[0]}) is None  # 0 is a fitness


# ------------------------------------------------------------- typed metrics
@pytest.mark.parametrize("bad", [{"queries": "lots"}, {"queries": -3}, {"queries": 2.5}, {"fit_time_s": float("nan")},
                                 {"peak_rss_mb": True}, {"peak_gpu_mb": "big"}, {"train_loss": "low"}])
def test_a_fit_reply_with_mistyped_telemetry_is_dropped_and_not_counted(fedprompt, bad):
    a, b = honest_prompts(fedprompt)
    results = [fit_res([a], 2, 0, queries=5, fit_time_s=1.0), fit_res([b], 2, 1, **bad)]
    params, _ = fedprompt.aggregate_fit(1, results, [])
    np.testing.assert_allclose(comm.decode(params)[0], a, rtol=1e-6)
    key = next(iter(bad))
    assert reasons(fedprompt)["1"].startswith(f"metric {key}=")
    assert fedprompt.record.fit_queries == 5 and fedprompt.record.fit_s == [1.0]


def test_an_evaluate_reply_without_accuracy_is_dropped_with_a_reason(fedprompt):
    results = [eval_res(0, 8, accuracy=0.75), eval_res(1, 8), eval_res(2, 8, accuracy=1.5),
               eval_res(3, 8, accuracy=0.5, queries="lots"), eval_res(4, 10**9, accuracy=0.5),
               eval_res(5, 8, loss=float("inf"), accuracy=0.5), eval_res(6, 8, accuracy=0.25)]
    fedprompt.aggregate_evaluate(1, results, [])
    assert fedprompt.record.client_accuracy == {"0": 0.75, "6": 0.25}
    got = reasons(fedprompt)
    assert got["1"] == "evaluate reply: no accuracy"
    assert got["2"] == "evaluate reply: accuracy=1.5 outside [0, 1]"
    assert got["3"].startswith("evaluate reply: metric queries=")
    assert got["4"] == "evaluate reply: num_examples=1000000000 outside 0..32 (client-test-size)"
    assert got["5"] == "evaluate reply: loss=inf is not finite"


def test_gpu_memory_is_the_largest_any_client_on_a_gpu_reported_and_none_on_cpus(fedprompt):
    """``client_peak_gpu_mb``: max over the fit and evaluate replies that carry ``peak_gpu_mb``
    (clients on a GPU); a round of CPU clients records None, not 0."""
    a, b = honest_prompts(fedprompt)
    fedprompt.aggregate_fit(1, [fit_res([a], 2, 0, peak_gpu_mb=300.0, peak_rss_mb=900.0),
                                fit_res([b], 2, 1, peak_rss_mb=800.0)], [])
    fedprompt.aggregate_evaluate(1, [eval_res(0, 8, accuracy=0.5, peak_gpu_mb=350.0),
                                     eval_res(2, 8, accuracy=0.5, peak_gpu_mb=120.0)], [])
    out = fedprompt.record.to_json(run_start=0.0)
    assert out["client_peak_gpu_mb"] == 350.0 and out["client_peak_rss_mb"] == 900.0
    fedprompt.rounds.begin(2)
    fedprompt.aggregate_fit(2, [fit_res([a], 2, 0, peak_rss_mb=900.0)], [])
    assert fedprompt.record.to_json(run_start=0.0)["client_peak_gpu_mb"] is None


# ------------------------------------------------------------- whole runs
def run_rounds(strat, rounds, uploads_of_round):
    """Flower's loop on mock proxies: fit, aggregate, evaluate (clients), write the round."""
    for r in range(1, rounds + 1):
        strat.rounds.begin(r)
        strat.aggregate_fit(r, uploads_of_round(r), [])
        strat.aggregate_evaluate(r, [eval_res(0, 8, accuracy=0.5)], [])
    return json.loads((strat.recorder.dir / "summary.json").read_text())


def test_a_run_with_a_poisoner_in_every_round_finishes_on_the_honest_clients(fedprompt):
    a, b = honest_prompts(fedprompt)
    poisons = {1: fit_res([np.full_like(a, 1e30)], 2, 9), 2: fit_res([a], 10**12, 9),
               3: fit_res([a], 2, 9, queries="lots")}
    means = []

    def uploads(r):
        return [fit_res([a], 2, 0), poisons[r], fit_res([b], 2, 1)]

    summary = run_rounds(fedprompt, 3, lambda r: (means.append(None), uploads(r))[1])
    assert summary["status"] == "finished" and summary["error"] is None
    np.testing.assert_allclose(fedprompt.global_arrays[0], (a + b) / 2, rtol=1e-6)
    lines = [json.loads(x) for x in (fedprompt.recorder.dir / "rounds.jsonl").read_text().splitlines()]
    assert [[d["client"] for d in ln["dropped"]] for ln in lines] == [["9"]] * 3
    assert [ln["num_clients"] for ln in lines] == [2, 2, 2]


def test_a_run_whose_results_were_never_valid_ends_failed_with_the_common_reason(fedprompt):
    bad = np.full_like(fedprompt.global_arrays[0], np.nan)
    summary = run_rounds(fedprompt, 3, lambda r: [fit_res([bad], 2, 0), fit_res([bad], 2, 1), fit_res([bad], 0, 2)])
    assert summary["status"] == "failed"
    assert summary["error"] == ("no valid client result in 3 rounds; 6 of 9 client results dropped like this one: "
                                "prompt: 768 non-finite values")  # 2 x 384 prompt values


def test_a_run_whose_clients_all_failed_ends_failed_with_their_error(fedprompt):
    def failing(r):
        fedprompt.validate([], [RuntimeError("ValueError: lr=nan cannot train")])
        return []

    summary = run_rounds(fedprompt, 3, failing)
    assert summary["status"] == "failed"
    assert "client failed: ValueError: lr=nan cannot train" in summary["error"]


def test_one_valid_round_is_enough_for_finished(fedprompt):
    a, _ = honest_prompts(fedprompt)
    bad = np.full_like(a, np.nan)
    summary = run_rounds(fedprompt, 3, lambda r: [fit_res([a if r == 2 else bad], 2, 0)])
    assert summary["status"] == "finished"


# ------------------------------------------------------------- lost nodes
def test_a_node_lost_mid_run_is_a_recorded_drop_not_a_configuration_error(backbone, monkeypatch):
    from flwr.server import SimpleClientManager

    import fedtext.server.sampling

    monkeypatch.setattr(fedtext.server.sampling, "CONNECT_TIMEOUT_S", 0.1)  # sample_train waits this long for lost nodes
    manager = SimpleClientManager()
    for cid in ("a", "b", "c"):
        manager.register(SimpleNamespace(cid=cid))
    strat = FedPrompt(make_config("fedprompt", clients_per_round=3, max_length=64), TASKS["demo"])
    strat.rounds.begin(1)
    assert len(strat.sample_clients(1, manager)) == 3
    manager.unregister(manager.all()["b"])
    strat.rounds.begin(2)
    assert [p.cid for p in strat.sample_clients(2, manager)] == ["a", "c"]
    assert strat.record.dropped == [{"client": "missing", "reason": "node lost: 2 of 3 participants connected (2 nodes)"}]
    for cid in ("a", "c"):
        manager.unregister(manager.all()[cid])
    strat.rounds.begin(3)
    assert strat.sample_clients(3, manager) == []  # nobody left: the round trains nobody
    # the first round of a process (a resumed one too) still says what to configure
    fresh = FedPrompt(make_config("fedprompt", clients_per_round=3, max_length=64), TASKS["demo"])
    fresh.resumed_round = 4
    manager.register(SimpleNamespace(cid="a"))
    fresh.rounds.begin(5)
    with pytest.raises(ConfigError, match="clients-per-round=3 exceeds the 1 participant clients"):
        fresh.sample_clients(5, manager)


class _EmptyGrid:
    """A Flower grid whose SuperLink knows no SuperNode (what ``flwr run`` against a
    SuperLink without ``flower-supernode`` gives the ServerApp)."""

    run = SimpleNamespace(run_id=1)
    stopped = False

    def get_node_ids(self):
        from flwr.supercore.run import RunNotRunningException

        if self.stopped:  # ends Flower's node-polling thread after the test
            raise RunNotRunningException()
        return []


NO_NODE = ("no SuperNode connected in 0.2 s (the server's wait before round 1): start SuperNodes against this "
           "SuperLink (flower-supernode), or set num-supernodes")


@pytest.mark.parametrize("method, clients_per_round", [("fedprompt", 0), ("fedprompt", 2), ("fes", 0)])
def test_no_supernode_is_one_line_that_names_the_wait(backbone, tmp_path, monkeypatch, method, clients_per_round):
    """Issue 45 item 6: a SuperLink without SuperNodes failed after the wait with "holdout=''
    leaves no participant client to train" (FeS trained nobody, every round). Through
    Flower's own grid driver (``start_grid``, which polls the grid for nodes) on a grid
    without nodes, the run fails with one line that names the wait, in the record too."""
    from flwr.server import ServerConfig, SimpleClientManager
    from flwr.server.compat import start_grid

    import fedtext.server.sampling
    from fedtext.server_app import RecordingServer

    monkeypatch.setattr(fedtext.server.sampling, "CONNECT_TIMEOUT_S", 0.2)
    cfg = make_config(method, max_length=64, prompt_length=2, clients_per_round=clients_per_round,
                      output_dir=str(tmp_path))
    recorder = RunRecorder(tmp_path, cfg.to_run_config())
    strategy_cls = FewShotStrategy if method == "fes" else FedPrompt
    server = RecordingServer(recorder=recorder, client_manager=SimpleClientManager(),
                             strategy=strategy_cls(cfg, TASKS["demo"], recorder=recorder))
    grid = _EmptyGrid()
    try:
        with pytest.raises(ConfigError) as err:
            start_grid(grid=grid, server=server, config=ServerConfig(num_rounds=2))
    finally:
        grid.stopped = True
    assert str(err.value) == NO_NODE
    summary = json.loads((recorder.dir / "summary.json").read_text())
    assert (summary["status"], summary["error"]) == ("failed", NO_NODE)


# ------------------------------------------------------------- partition feasibility
class _Node(SimpleNamespace):
    __hash__ = object.__hash__  # FeS puts proxies in sets

    def get_properties(self, ins, timeout, group_id):
        return SimpleNamespace(properties={"partition_id": self.pid, "num_partitions": self.parts})


def _nodes(n, parts=None):
    from flwr.server import SimpleClientManager

    manager = SimpleClientManager()
    for pid in range(n):
        manager.register(_Node(cid=f"n{pid}", pid=pid, parts=n if parts is None else parts))
    return manager


@pytest.fixture()
def ten_rows(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    rows = pd.DataFrame({"text": [f"text number {i}" for i in range(10)], "label": [i % 2 for i in range(10)]})
    rows.to_csv(folder / "train.csv", index=False)
    rows.to_csv(folder / "test.csv", index=False)
    return str(folder)


def test_clients_left_without_rows_are_a_configuration_error_before_round_one(backbone, ten_rows):
    strat = FedPrompt(make_config("fedprompt", dataset=ten_rows, task="demo", max_length=64), TASKS["demo"])
    with pytest.raises(ConfigError, match=r"partition=iid leaves 6 of 16 clients without training rows "
                                          r"\(first: partition 10; 10 train rows\)"):
        strat.sample_clients(1, _nodes(16))
    ok = FedPrompt(make_config("fedprompt", dataset=ten_rows, task="demo", max_length=64), TASKS["demo"])
    assert len(ok.sample_clients(1, _nodes(5))) == 5
    assert ok.sampler.max_examples(SimpleNamespace(cid="n0")) == 2  # 10 rows / 5 clients


def test_an_impossible_dirichlet_split_is_a_configuration_error_before_round_one(backbone, ten_rows):
    strat = FedPrompt(make_config("fedprompt", dataset=ten_rows, task="demo", partition="dirichlet", alpha=0.001, max_length=64),
                      TASKS["demo"])
    with pytest.raises(ConfigError, match="could not split 10 rows into 4 clients"):
        strat.sample_clients(1, _nodes(4))


def test_lazy_client_ids_check_an_impossible_dirichlet_split_on_the_server_too(backbone, ten_rows):
    """Issue 45 item 6: with ``client-ids=lazy`` nobody was asked, so the check above never
    ran and every client failed its partition after the whole first round. The server now
    asks one node (one message, once) for ``num-partitions``; the draw stays over node ids."""
    asked = []

    def nodes(n):
        manager = _nodes(n)
        for node in manager.all().values():
            node.get_properties = lambda ins, timeout, group_id, node=node: (
                asked.append(node.cid), _Node.get_properties(node, ins, timeout, group_id))[1]
        return manager

    cfg = make_config("fedprompt", dataset=ten_rows, task="demo", partition="dirichlet", alpha=0.001, max_length=64,
                      client_ids="lazy")
    with pytest.raises(ConfigError, match=r"^partition=dirichlet alpha=0.001 seed=0: flwr-datasets could not split "
                                          r"10 rows into 4 clients"):
        FedPrompt(cfg, TASKS["demo"]).sample_clients(1, nodes(4))
    assert asked == ["n0"]
    asked.clear()
    ok = FedPrompt(make_config("fedprompt", dataset=ten_rows, task="demo", max_length=64, client_ids="lazy"),
                   TASKS["demo"])
    manager = nodes(5)
    assert [p.cid for p in ok.sample_clients(1, manager)] == ["n0", "n1", "n2", "n3", "n4"]
    assert [p.cid for p in ok.sample_clients(2, manager)] == ["n0", "n1", "n2", "n3", "n4"]
    assert asked == ["n0"] and ok.sampler.client_info == {}  # once per run, and no node's identity is cached
    assert ok.sampler._partition_rows == {(pid, 5): 2 for pid in range(5)}  # checked: 10 rows / 5 clients


def test_nodes_that_disagree_on_the_number_of_partitions_are_refused(backbone):
    strat = FedPrompt(make_config("fedprompt", max_length=64), TASKS["demo"])
    manager = _nodes(2)
    manager.register(_Node(cid="odd", pid=2, parts=3))  # a partition no other node holds (pid 0 would be refused)
    with pytest.raises(ConfigError, match=r"disagree on num-partitions: \[2, 3\]"):
        strat.sample_clients(1, manager)


def test_fes_gold_labels_beyond_the_clients_texts_is_one_line(backbone):
    cfg = make_config("fes", gold_labels=100000, max_length=64)
    with pytest.raises(ConfigError, match=r"fes.gold-labels=100000 puts 50000 gold labels on client 0, which has "
                                          r"208 texts to label"):
        FewShotStrategy(cfg, TASKS["demo"]).sample_clients(1, _nodes(4))  # 960 rows / 4 = 240, less 32 test rows
    fits = make_config("fes", gold_labels=416, max_length=64)  # 208 on each of the 2 labelled clients: fits
    assert FewShotStrategy(fits, TASKS["demo"]).sample_clients(1, _nodes(4))
    too_many = make_config("fes", gold_labels=417, max_length=64)
    with pytest.raises(ConfigError, match="puts 209 gold labels on client 0"):
        FewShotStrategy(too_many, TASKS["demo"]).sample_clients(1, _nodes(4))
    oracle = make_config("fes", gold_labels=100000, oracle=True, max_length=64)
    assert FewShotStrategy(oracle, TASKS["demo"]).sample_clients(1, _nodes(4)) is not None


def test_the_claim_limit_is_the_assigned_rows_except_where_the_labelled_set_grows_on_the_client() -> None:
    """``UploadValidator.claim_limit``: a fedprompt reply may claim the rows the server assigned it
    (the sampler's bound and words as they are); a FeS-family reply (``claims_assigned_rows = False``:
    its pseudo labels grow the labelled set on the client) its partition's rows, so named."""
    from fedtext.server.validation import UploadValidator

    sampler = SimpleNamespace(assigned_examples=lambda p: (16, "the assigned rows"), max_examples=lambda p: 480)
    proxy = SimpleNamespace(cid="n0")
    limits = {m: UploadValidator(make_config(m), None, sampler, lambda *a: None).claim_limit(proxy)
              for m in ("fedprompt", "fes", "fedfsl")}
    assert limits == {"fedprompt": (16, "the assigned rows"), "fes": (480, "the client's partition rows"),
                      "fedfsl": (480, "the client's partition rows")}
