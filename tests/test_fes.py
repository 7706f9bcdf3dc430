"""FeS and its baselines (fedcls, fedfsl, fedfsl-bias), without Flower: AUG-E and the
pacer, the filter's eq. (2), co-planning, pseudo-label growth and client state.

The Flower smoke runs of the four methods are in ``tests/test_integration.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import RecordDict
from flwr.common import Code, FitRes, Status

from fedtext import comm
from fedtext.config import ConfigError
from fedtext.data import client_data
from fedtext.methods.fes import (Pace, Pacer, aug_e, gold_count, knn_sets, layer_capacity, parse_paces,
                                 plan_predicate, representational_filter, search_depth, split_pool)
from fedtext.registry import METHODS, make_config
from fedtext.tasks import TASKS
from strategies import FeS

SMALL = dict(max_length=32, client_test_size=0, eval_size=20, shots_per_class=4)


def cfg_of(method: str = "fes", **kw):
    return make_config(method, **{**SMALL, **kw})


# ------------------------------------------------------------------ AUG-E (eq. 1)
def test_aug_e_is_gain_over_inference_plus_theta_training_cost():
    # C_infer = l_i n / f = 0.5 * 4 / 2 = 1.0; C_train = l_t k = 0.2 * 10 = 2.0
    assert aug_e(0.1, Pace(2, 4, 10), 0.5, 0.2) == pytest.approx(0.1 / 3.0)
    assert aug_e(0.1, Pace(2, 4, 10), 0.5, 0.2, eta=2.0, theta=0.5) == pytest.approx(2 * 0.1 / 2.0)
    assert aug_e(-0.05, Pace(1, 1, 1), 1.0, 1.0) == pytest.approx(-0.025)


def test_pacer_tries_each_pace_keeps_the_best_and_top_t_then_switches_when_aug_e_falls():
    a, b, c = Pace(1, 2, 10), Pace(1, 4, 5), Pace(2, 4, 10)
    p = Pacer([a, b, c], trial_rounds=1, top=2, threshold=0.0)
    p.latency(0.5, 0.1)  # l_i, l_t: C(a) = 0.5*2 + 0.1*10 = 2, C(b) = 2 + 0.5 = 2.5, C(c) = 1 + 1 = 2
    p.start(0.50)
    assert p.pace() == a
    assert p.observe(0.60) == {"aug_e": pytest.approx(0.10 / 2), "trial_done": 1.0}  # a: 0.05
    assert p.pace() == b
    assert p.observe(0.61)["aug_e"] == pytest.approx(0.01 / 2.5)  # b: 0.004
    assert p.observe(0.65) == {}  # c labels every f = 2 rounds: its window is 2 rounds
    events = p.observe(0.71)  # c: 0.10 / 2 = 0.05 ties a; a was listed first
    assert events["chosen"] == 1.0 and p.pace() == a and p.candidates == [a, c]
    assert not p.searching
    assert "switch" not in p.observe(0.75)  # running, AUG-E 0.02 >= s = 0
    events = p.observe(0.70)  # accuracy fell: AUG-E < 0 -> re-try the candidates (Alg. 1 line 8)
    assert events["switch"] == 1.0 and p.searching and p.pace() == a
    p.observe(0.70)  # a: 0
    assert p.observe(0.72) == {}
    events = p.observe(0.74)  # c: 0.04 / 2 = 0.02
    assert events["chosen"] == 1.0 and p.pace() == c and p.candidates == [c, a]
    assert [t["pace"] for t in p.trials] == ["1-2-10", "1-4-5", "2-4-10", "1-2-10", "1-2-10", "1-2-10", "2-4-10"]


def test_pace_target_grows_linearly_every_f_rounds():
    pace = Pace(2, 4, 10)
    assert [pace.labels_round(i) for i in range(1, 7)] == [False, True, False, True, False, True]
    assert [pace.target(50, i) for i in (2, 4, 6)] == [5, 10, 15]  # |U| k/100 i/f
    assert Pace(1, 1, 60).target(50, 2) == 50  # never more than |U|
    assert parse_paces("1-2-10, 2-4-2.5") == [Pace(1, 2, 10), Pace(2, 4, 2.5)]
    with pytest.raises(ConfigError, match="fes.paces: '1-2' is not f-n-k"):
        cfg_of(paces="1-2")


# ------------------------------------------------------------- filtering (eq. 2)
def test_filter_scores_and_greedy_choice_on_a_hand_made_knn_graph():
    # V(0)={1,2} V(1)={0,2} V(2)={0,1} V(3)={4,2} V(4)={3,2}; E(2)={0,1,3,4} is the largest.
    v = np.array([[1, 2], [0, 2], [0, 1], [4, 2], [3, 2]])
    # step 1: scores |E(u)| = [2, 2, 4, 1, 1] -> 2; |V(x) ∩ L| becomes [1, 1, 0, 1, 1]
    # step 2: score(0) = rho^-1 + rho^0 = 1.1 = score(1); score(3) = score(4) = 0.1 -> 0
    # step 3: |V(x) ∩ L| = [1, 2, 1, 1, 1]: score(1) = 0.1 + 0.1 = 0.2 > score(3) = 0.1 -> 1
    assert representational_filter(v, 3, rho=10.0) == [2, 0, 1]
    # a small rho barely discounts: after 2 and 0, score(1) = 2 * 2^-1 ... still the top
    assert representational_filter(v, 5, rho=10.0)[:3] == [2, 0, 1]


def test_knn_sets_are_the_most_cosine_similar_other_texts():
    e = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    np.testing.assert_array_equal(knn_sets(e, 1), [[1], [0], [3], [2]])


def test_search_depth_finds_the_deepest_freeze_within_tolerance_by_binary_search():
    acc = {0: 0.90, 1: 0.90, 2: 0.89, 3: 0.88, 4: 0.80, 5: 0.70, 6: 0.50}
    calls = []

    def accuracy_of(frozen: int) -> float:
        calls.append(frozen)
        return acc[frozen]

    assert search_depth(accuracy_of, 0, 6, tolerance=0.02) == 3
    assert len(calls) <= 1 + 3  # the reference plus ceil(log2(7)) probes


# ------------------------------------------------------------------ co-planning
def test_layer_capacity_is_terraced_frozen_bias_full():
    cap = lambda n: layer_capacity(n, 6, 3, 2)  # noqa: E731
    assert cap("embeddings.word_embeddings.weight") == "frozen"
    assert cap("encoder.layer.2.output.dense.weight") == "frozen"
    assert cap("encoder.layer.3.attention.self.query.bias") == "bias"
    assert cap("encoder.layer.4.output.dense.weight") == "bias"
    assert cap("encoder.layer.5.output.dense.weight") == "full"
    assert cap("pooler.dense.weight") == "frozen" and cap("head.weight") == "full"
    assert layer_capacity("pooler.dense.weight", 6, 0, 0) == "full"  # the plain full plan: every weight
    wants = plan_predicate(6, 3, 2)
    assert wants("encoder.layer.3.output.dense.bias") and not wants("encoder.layer.3.output.dense.weight")


def test_co_planning_trains_and_uploads_exactly_the_planned_tensors(backbone):
    cfg = cfg_of("fes")
    model = METHODS["fes"].config.model_class(cfg, backbone)
    names = [s.name for s in model.upload_specs()]
    assert names == [n for n, _ in model.network.named_trainable()]
    # the default (the paper's AG News plan on 6 layers): 0-3 frozen, the biases of 4-5, no full layer
    want = [n for n, _ in backbone.named_parameters() if n.endswith(".bias") and (".layer.4." in n or ".layer.5." in n)]
    assert names == want
    biases = 2 * (4 * 384 + 1536 + 384 + 2 * 384)  # layers 4 and 5: q k v o, ffn in/out, LayerNorm biases
    assert model.trainable_parameters() == biases == 8_448
    full_top = METHODS["fes"].config.model_class(cfg_of("fes", frozen_layers=3, bias_layers=2), backbone)
    layer = 4 * 384 * 384 + 2 * 384 * 1536 + 9 * 384 + 1536  # q k v o, ffn in/out, their biases, 2 LayerNorms
    assert full_top.trainable_parameters() == layer + biases == 1_782_912
    assert [s.name for s in full_top.upload_specs()] == [
        n for n, _ in backbone.named_parameters()
        if ".layer.5." in n or (n.endswith(".bias") and (".layer.3." in n or ".layer.4." in n))]
    frozen = dict(backbone.named_parameters())["encoder.layer.0.output.dense.weight"]
    assert not frozen.requires_grad  # the process backbone stays frozen
    bias_only = cfg_of("fedfsl-bias")
    m = METHODS["fedfsl-bias"].config.model_class(bias_only, backbone)
    assert all(s.name.endswith(".bias") for s in m.upload_specs())
    with pytest.raises(ConfigError, match="fes.frozen-layers=5 \\+ fes.bias-layers=2 exceeds the 6 layers"):
        METHODS["fes"].config.model_class(cfg_of("fes", frozen_layers=5), backbone)


# -------------------------------------------------------------- label placement
def test_gold_labels_sit_on_the_first_clients_and_oracle_labels_every_pool_text():
    mc = cfg_of("fes", gold_labels=65, labelled_clients=2).method_config
    assert [gold_count(mc, i) for i in range(4)] == [33, 32, 0, 0]
    gold, unl = split_pool(mc, 0, 0, 400)
    assert len(gold) == 33 and len(unl) == 256 and not set(gold) & set(unl)
    gold, unl = split_pool(mc, 0, 3, 400)
    assert len(gold) == 0 and len(unl) == 256
    oracle = cfg_of("fedcls", oracle=True, unlabeled_size=100).method_config
    gold, unl = split_pool(oracle, 0, 3, 400)
    assert len(gold) == 100 and len(unl) == 0


# ------------------------------------------------ pseudo labels and client state
def fes_client(pid: int, state: RecordDict, **kw):
    cfg = cfg_of("fes", gold_labels=8, unlabeled_size=40, keep_ratio=0.5, neighbours=4, max_local_steps=2, **kw)
    return METHODS["fes"].client(cfg, TASKS["demo"], client_data(cfg, pid, 3), state=state)


def test_pseudo_labels_follow_the_pace_and_survive_a_round_the_client_sat_out():
    state = RecordDict()
    client = fes_client(2, state)  # no gold labels (clients 0 and 1 hold them)
    arrays = client.model.initial_arrays()
    out, n, _ = client.train(arrays, {"server_round": 2, "train": 0, "label": 1, "pace": "1-2-10"})
    assert out == [] and n == 0  # labelling only: nothing to upload
    m = client.fit_metrics
    first = set(state["fes"]["ids"])
    assert m["labelled_candidates"] == 20  # keep-ratio 0.5 of 40
    assert m["num_pseudo"] == m["pseudo_labels"] == 4  # floor(20 * 10/100 * 2/1)
    assert len(state["fes"]["kept"]) == 20
    # round 3: not sampled (no message). Round 4: a fresh client object, same node state.
    later = fes_client(2, state)
    texts, labels, n_pseudo = later.labelled_set()
    assert n_pseudo == 4 and len(texts) == 4
    out, n, _ = later.train(arrays, {"server_round": 4, "train": 1, "label": 0})
    assert n == 4 and later.fit_metrics["trained"] == 1 and len(out) == len(later.model.upload_specs())
    # labelled again in round 5: the curriculum keeps floor(20 * 0.1 * 5) = 10, re-labelling the 4
    later.train(arrays, {"server_round": 5, "train": 0, "label": 1, "pace": "1-2-10"})
    assert later.fit_metrics["num_pseudo"] == 10
    assert first < set(state["fes"]["ids"])  # same global model: the 4 most confident stay among the 10


def test_static_pacing_keeps_a_fixed_count_and_fedcls_never_labels():
    cfg = cfg_of("fedfsl", gold_labels=8, unlabeled_size=40, max_local_steps=1)
    client = METHODS["fedfsl"].client(cfg, TASKS["demo"], client_data(cfg, 2, 3), state=RecordDict())
    arrays = client.model.initial_arrays()
    client.train(arrays, {"server_round": 3, "train": 0, "label": 1, "label_count": 16})
    assert client.fit_metrics["num_pseudo"] == 16 and client.fit_metrics["labelled_candidates"] == 40


# ------------------------------------------------------------------- strategy
def fit_res(pid, arrays, n, **metrics):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}))


def test_labelling_only_results_are_reports_not_uploads_and_grow_the_labelled_set():
    strat = FeS(cfg_of("fes", gold_labels=8), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.begin_round(1)
    trained = [a + 1 for a in strat.global_arrays]
    results = [fit_res(0, trained, 10, trained=1, num_labels=10, train_s_per_batch=0.2, fit_time_s=3.0),
               fit_res(5, [], 0, trained=0, num_labels=6, num_pseudo=6, infer_s_per_batch=0.05,
                       pseudo_label_accuracy=0.5, fit_time_s=1.0)]
    strat._down_bytes = {"0": 1_000_000, "5": 2_500_000}  # what configure_fit sent each
    params, _ = strat.aggregate_fit(1, results, [])
    assert strat.record.num_clients == 1 and strat.record.dropped == []
    for got, want in zip(comm.decode(params), trained, strict=True):
        np.testing.assert_array_equal(got, want)
    assert strat.labelled == {"0", "5"}
    assert strat.pacer.l_infer == [0.05] and strat.pacer.l_train == [0.2]
    assert strat.record.method_metrics["pseudo_label_accuracy"] == 0.5
    up = comm.payload_bytes(results[0][1].parameters)
    assert strat.record.bytes_up_per_client == up
    # simulated device time at 1 MB/s: compute + (down + up) / 1e6, the round as long as its slowest client
    assert strat.record.sim_s == pytest.approx([3.0 + (1_000_000 + up) / 1e6, 1.0 + 2.5])
    assert strat.record.to_json(0.0)["sim_time_s"] == pytest.approx(3.0 + 1.0 + up / 1e6, abs=1e-3)


def test_time_to_accuracy_sums_simulated_round_times_until_the_target_is_first_reached():
    from simulations.fes_table import time_to

    rounds = [{"round": 0, "global_accuracy": 0.5, "sim_time_s": None},
              {"round": 2, "global_accuracy": 0.7, "sim_time_s": 12.5},
              {"round": 1, "global_accuracy": 0.6, "sim_time_s": 10.0}]
    assert time_to(rounds, 0.65) == 22.5 and time_to(rounds, 0.6) == 10.0
    assert time_to(rounds, 0.5) == 0.0 and time_to(rounds, 0.8) is None
    # re-timed at 0.1 MB/s from the slowest compute and the mean bytes of each round
    for r, fit in zip(rounds[1:], (2.0, 1.0)):
        r.update(client_fit_s_max=fit, bytes_down_per_client=100_000, bytes_up_per_client=50_000)
    assert time_to(rounds, 0.65, bandwidth_mbps=0.1) == pytest.approx((2.0 + 1.5) + (1.0 + 1.5))


def test_fes_needs_the_server_accuracy_after_every_round():
    with pytest.raises(ConfigError, match="needs eval-every=1"):
        FeS(cfg_of("fes", eval_every=2), TASKS["demo"])


def test_plan_search_script_probes_plans_and_picks_a_frozen_depth(capsys):
    from simulations.fes_plan import main

    assert main(["--dataset", "demo", "--gold", "8", "--epochs", "1", "--eval-size", "20", "--max-length", "32",
                 "--tolerance", "1.0"]) == 0
    out = capsys.readouterr().out
    assert out.count("| bias-only") <= 4  # f = 0, then a binary search over 1..5
    # a tolerance of 1.0 accepts any accuracy: the search ends at the deepest freeze that
    # still trains something (no full layer by default: the biases of the top layer)
    assert "chosen: fes.frozen-layers=5 fes.bias-layers=1" in out


def test_fedcls_is_vanilla_fine_tuning_one_rate_for_every_weight_unless_head_lr():
    """FedCLS as the paper's §4.1 / the authors' code: the checkpoint's [CLS] head, every
    weight (pooler included) trained at the same rate; ``head-lr`` gives the head its own."""
    cfg = cfg_of("fedcls", gold_labels=8, unlabeled_size=20)
    assert cfg.resolved_head == "cls"
    client = METHODS["fedcls"].client(cfg, TASKS["demo"], client_data(cfg, 0, 3), state=RecordDict())
    net = client.model.load(client.model.initial_arrays())
    names = [n for n, _ in net.named_trainable()]
    assert names[-4:] == ["pooler.dense.weight", "pooler.dense.bias", "head.weight", "head.bias"]
    assert len(names) == len(list(net.named_parameters()))  # full fine-tuning
    groups = client.optimizer(net).param_groups
    assert [g["lr"] for g in groups] == [5e-5] and sum(len(g["params"]) for g in groups) == len(names)
    fast = cfg_of("fedcls", gold_labels=8, unlabeled_size=20, head="linear", head_lr=5e-3)
    client = METHODS["fedcls"].client(fast, TASKS["demo"], client_data(fast, 0, 3), state=RecordDict())
    groups = client.optimizer(client.model.load(client.model.initial_arrays())).param_groups
    assert sorted((g["lr"], len(g["params"])) for g in groups) == [(5e-5, len(names) - 2), (5e-3, 2)]
