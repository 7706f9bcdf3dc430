"""FeS and its baselines (fedcls, fedfsl, fedfsl-bias), without Flower: AUG-E (eq. (1))
and the pacer (Alg. 1), the filter's eq. (2), co-planning, pseudo-label choice and growth
(on hand-written softmax outputs, no model) and client state. The math tests use hand
values small enough to check on paper; each is there because a one-line wrong version of
the code (a "mutant") passed the earlier tests.

Two rounds of the four methods on three clients: ``tests/unit/test_methods_rounds.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from flwr.app import RecordDict
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.node.node import client_class
from fedtext.common.config import ConfigError
from fedtext.learning.data import client_data
from fedtext.methods.fes.filter import VOTES, keep_count, knn_sets, representational_filter, votek_filter
from fedtext.methods.fes.labels import (
    PSEUDO_PICK_SALT,
    gold_count,
    pick_class_quota,
    pick_top_k,
    pseudo_target,
    split_pool,
)
from fedtext.backbone.architectures import ARCHITECTURES
from fedtext.methods.fes.model import layer_capacity, plan_predicate
from fedtext.methods.fes.pacing import Pace, Pacer, aug_e, parse_paces
from fedtext.methods.fes.plan import search_depth
from fedtext.common.registry import METHODS, make_config
from fedtext.common.tasks import TASKS
from strategies.fes import FewShotStrategy

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


def test_aug_e_by_hand_with_every_term_distinct():
    # <f, n, k> = <4, 2, 5>, l_i = 0.3, l_t = 0.1, Δacc = 0.06, eta = 3, theta = 2:
    # C_infer = l_i n / f = 0.3 * 2 / 4 = 0.15; C_train = l_t k = 0.1 * 5 = 0.5
    # AUG-E = eta Δacc / (C_infer + theta C_train) = 0.18 / (0.15 + 1.0) = 0.156521...
    assert aug_e(0.06, Pace(4, 2, 5), 0.3, 0.1, eta=3.0, theta=2.0) == pytest.approx(0.18 / 1.15)
    # theta = 0: the training cost is ignored, 0.18 / 0.15 = 1.2
    assert aug_e(0.06, Pace(4, 2, 5), 0.3, 0.1, eta=3.0, theta=0.0) == pytest.approx(1.2)
    # no latency measured yet (cost 0): 0, not a division by zero
    assert aug_e(0.06, Pace(4, 2, 5), 0.0, 0.0) == 0.0


def test_pacer_applies_eta_theta_and_the_mean_measured_latencies():
    p = Pacer([Pace(2, 4, 5)], trial_rounds=1, top=1, eta=2.0, theta=0.5)
    p.latency(0.4, 0.1)
    p.latency(0.6, 0.3)
    p.latency(0.0, None)  # a client that measured nothing adds nothing
    assert p.l_infer == [0.4, 0.6] and p.l_train == [0.1, 0.3]
    # l_i = mean(0.4, 0.6) = 0.5, l_t = mean(0.1, 0.3) = 0.2: C_infer = 0.5 * 4 / 2 = 1,
    # C_train = 0.2 * 5 = 1, cost = 1 + 0.5 * 1 = 1.5; the window is max(r, f) = 2 rounds
    p.start(0.5)
    assert p.observe(0.55) == {}
    # Δacc = 0.8 - 0.5 = 0.3: AUG-E = 2 * 0.3 / 1.5 = 0.4 (eta, theta = 1: 0.15; sums of the
    # latencies instead of means: 2 * 0.3 / 3 = 0.2)
    assert p.observe(0.8)["aug_e"] == pytest.approx(0.4)


def test_pacer_window_lasts_r_rounds_or_f_if_longer():
    a, b = Pace(1, 1, 1), Pace(3, 1, 1)
    p = Pacer([a, b], trial_rounds=2, top=2)
    p.latency(1.0, 1.0)  # cost of a and b: 1 * 1 / f + 1 * 1 = 2 and 4/3
    p.start(0.5)
    assert p.observe(0.6) == {}  # r = 2 > f = 1: a's window is 2 rounds
    assert p.observe(0.7)["aug_e"] == pytest.approx(0.2 / 2) and p.pace() == b
    assert p.observe(0.7) == {} and p.observe(0.7) == {}  # f = 3 > r = 2: b's window is 3 rounds
    events = p.observe(0.9)  # b: 0.2 / (4/3) = 0.15 > a's 0.1
    assert events["aug_e"] == pytest.approx(0.15) and events["chosen"] == 1.0 and p.pace() == b


def test_pacer_switches_only_when_aug_e_is_strictly_below_s():
    # Alg. 1 line 7: "if E < s". Binary-exact numbers: cost = 0.5 * 2 / 1 + 0.125 * 8 = 2.
    p = Pacer([Pace(1, 2, 8)], trial_rounds=1, top=1, threshold=0.125)
    p.latency(0.5, 0.125)
    p.start(0.5)
    assert p.observe(0.5)["chosen"] == 1.0 and not p.searching
    events = p.observe(0.75)  # AUG-E = 0.25 / 2 = 0.125 = s: keep the pace
    assert events == {"aug_e": 0.125} and not p.searching
    events = p.observe(0.9375)  # AUG-E = 0.1875 / 2 = 0.09375 < s: re-try the candidates
    assert events["switch"] == 1.0 and p.searching


def test_pacer_without_start_or_latencies_counts_from_the_first_round_at_zero_cost():
    p = Pacer([Pace(1, 1, 1), Pace(1, 2, 1)], trial_rounds=1, top=2)
    # no start(): the first window starts from the first observed accuracy; no latency
    # measured: C = 0 and AUG-E = 0 (not a division by zero, not NaN)
    assert p.observe(0.6) == {"aug_e": 0.0, "trial_done": 1.0}
    events = p.observe(0.7)  # Δacc = 0.1 but cost 0: AUG-E 0 again, a tie: the first pace
    assert events["aug_e"] == 0.0 and events["chosen"] == 1.0 and p.pace() == Pace(1, 1, 1)
    p.latency(0.5, 0.5)  # cost of <1, 1, 1> = 0.5 + 0.5 = 1
    assert p.observe(0.8)["aug_e"] == pytest.approx(0.1)
    assert p.trials == [{"pace": "1-1-1", "aug_e": 0.0, "searching": True},
                        {"pace": "1-2-1", "aug_e": 0.0, "searching": True},
                        {"pace": "1-1-1", "aug_e": pytest.approx(0.1), "searching": False}]
    # only one of the two latencies measured: the other term is 0, not NaN
    only_train = Pacer([Pace(2, 1, 4)], trial_rounds=1, top=1)
    only_train.latency(None, 0.25)  # C = 0 + 0.25 * 4 = 1
    only_train.start(0.5)
    assert only_train.observe(0.5) == {} and only_train.observe(0.75)["aug_e"] == pytest.approx(0.25)
    only_infer = Pacer([Pace(2, 1, 4)], trial_rounds=1, top=1)
    only_infer.latency(0.5, None)  # C = 0.5 * 1 / 2 + 0 = 0.25
    only_infer.start(0.5)
    assert only_infer.observe(0.5) == {} and only_infer.observe(0.75)["aug_e"] == pytest.approx(1.0)


def test_fes_strategy_hands_every_pacing_key_to_the_pacer():
    strat = FewShotStrategy(cfg_of("fes", paces="2-3-5,1-1-1", trial_rounds=3, candidates=1, threshold=0.25, eta=2.0,
                                   theta=0.5), TASKS["demo"])
    p = strat.pacer
    assert (p.initial, p.trial_rounds, p.top, p.threshold, p.eta, p.theta) == (
        [Pace(2, 3, 5), Pace(1, 1, 1)], 3, 1, 0.25, 2.0, 0.5)


def test_pace_target_grows_linearly_every_f_rounds():
    """The authors' schedule (pet/modeling.py): label when gen = round - 1 (the rounds the
    global model has trained) is > 0 and a multiple of f, keeping |U| k/100 gen/f."""
    pace = Pace(2, 4, 10)
    assert [pace.labels_round(i) for i in range(1, 8)] == [False, False, True, False, True, False, True]
    assert [pace.target(50, i) for i in (3, 5, 7)] == [5, 10, 15]  # |U| k/100 (r-1)/f
    # floor, not round or ceil: 25 * 10/100 * 1 = 2.5 -> 2; * 3 = 7.5 -> 7
    assert [Pace(1, 1, 10).target(25, i) for i in (2, 4)] == [2, 7]
    assert Pace(3, 1, 10).target(25, 4) == 2  # (r-1) / f = 1
    assert Pace(1, 1, 60).target(50, 3) == 50  # never more than |U|
    assert parse_paces("1-2-10, 2-4-2.5") == [Pace(1, 2, 10), Pace(2, 4, 2.5)]
    assert parse_paces("1-1-0.5") == [Pace(1, 1, 0.5)]  # any k > 0, also below 1 %
    with pytest.raises(ConfigError, match="fes.paces: '1-2' is not f-n-k"):
        cfg_of(paces="1-2")
    for bad in ("0-2-5", "1-0-5", "1-2-0", "1-2-5-7", "1-x-5"):
        with pytest.raises(ConfigError, match=f"'{bad}' is not f-n-k"):
            parse_paces(bad)


def test_labelling_follows_the_authors_schedule_never_with_an_untrained_model():
    """Issue 44 (tools/reference/fes.py runs the authors' train_fedpet): they label in
    generation gen > 0 with gen % f == 0, with the aggregate after gen rounds of training,
    keeping |U| k/100 gen/f. Round r (1-based) is their gen r - 1: f = 1 labels from round 2
    on (fedfsl's static pace too), f = 2 in rounds 3, 5, ..., never round 1 (the old
    schedule labelled in rounds f, 2f, ..., with f = 1 first with the untrained model)."""
    assert [r for r in range(1, 11) if Pace(1, 2, 10).labels_round(r)] == list(range(2, 11))
    assert [r for r in range(1, 11) if Pace(2, 2, 10).labels_round(r)] == [3, 5, 7, 9]
    assert [r for r in range(1, 11) if Pace(3, 2, 10).labels_round(r)] == [4, 7, 10]
    assert not any(Pace(f, 1, 10).labels_round(r) for f in (1, 2, 5) for r in (-1, 0, 1))
    # the authors' curriculum target in those rounds: 40 * 10/100 * gen/f
    assert [Pace(2, 1, 10).target(40, r) for r in (3, 5, 7)] == [4, 8, 12]
    assert [Pace(1, 1, 10).target(40, r) for r in (0, 1, 2)] == [0, 0, 4]  # rounds 0 and 1: none


class _Proxy:
    """A connected client that reports its partition id (hashable, as Flower's proxies)."""

    def __init__(self, cid: str, pid: int) -> None:
        self.cid, self.pid = cid, pid

    def get_properties(self, ins, timeout, group_id):
        return SimpleNamespace(properties={"partition_id": self.pid, "domain": ""})


def _manager(n):
    from flwr.server import SimpleClientManager

    manager = SimpleClientManager()
    for pid in range(n):
        manager.register(_Proxy(cid=f"node-{pid}", pid=pid))
    return manager


@pytest.mark.parametrize(("method", "kw", "labellers"), [
    ("fes", dict(paces="2-3-10"), [0, 0, 3, 0, 3, 0]),
    ("fes", dict(paces="1-2-10"), [0, 2, 2, 2, 2, 2]),
    ("fedfsl", dict(static_clients=2), [0, 2, 2, 2, 2, 2]),
    ("fes", dict(pacing="static", static_clients=4), [0, 4, 4, 4, 4, 4]),
    ("fedcls", {}, [0, 0, 0, 0, 0, 0]),
])
def test_the_server_draws_labelling_clients_in_the_authors_rounds_only(method, kw, labellers):
    """G_label follows Pace.labels_round: nobody labels in round 1 (fed with the model
    after 0 rounds); a labelling client is sent ``label=1`` and the pace (or count)."""
    strat = FewShotStrategy(cfg_of(method, gold_labels=8, **kw), TASKS["demo"])
    manager, got = _manager(6), []
    for r in range(1, 7):
        strat.rounds.begin(r)
        picked = strat.sample_clients(r, manager)
        got.append(sum(label for _, label in strat.roles.values()))
        assert strat.record.method_metrics["label_clients"] == got[-1]
        for proxy in picked:
            _, extra = strat.download(r, proxy, "fit")
            assert extra["label"] == strat.roles[proxy.cid][1]
            assert ("pace" in extra or "label_count" in extra) == bool(extra["label"])
    assert got == labellers


def test_pacer_round_1_is_in_no_window_so_every_trial_holds_a_labelling_round():
    """No pace labels in round 1, so the first trial window starts after it: a pace with
    f = 2 is tried over rounds 2-3 (round 3 labels) and AUG-E counts the gain from round 1's
    accuracy (0.6), not round 0's (0.5). The old Pacer counted round 1 into the window,
    which then held no labelling round."""
    a, b = Pace(2, 1, 10), Pace(1, 1, 10)
    p = Pacer([a, b], trial_rounds=1, top=1)
    p.latency(1.0, 0.1)
    p.start(0.5)
    assert p.observe(0.6, 1) == {} and p.window_start_acc == 0.6 and p.pace() == a
    assert p.observe(0.65, 2) == {}
    events = p.observe(0.7, 3)  # Δacc 0.1 over rounds 2-3 / (1.0 * 1/2 + 0.1 * 10)
    assert events == {"aug_e": pytest.approx(0.1 / 1.5), "trial_done": 1.0} and p.pace() == b
    assert any(a.labels_round(r) for r in (2, 3))
    events = p.observe(0.8, 4)  # b: one round (4, a labelling round of f = 1): 0.1 / (1 + 1)
    assert events["aug_e"] == pytest.approx(0.05) and events["chosen"] == 1.0 and p.pace() == a


def test_the_strategy_tells_the_pacer_which_round_it_evaluated(monkeypatch):
    """Round 1 (no labels) only moves the first window's start; the first trial (1-2-10,
    one round) closes after round 2 (the old loop closed it after round 1)."""
    from fedtext.server.strategy import FedTextStrategy

    strat = FewShotStrategy(cfg_of("fes", paces="1-2-10,1-3-10"), TASKS["demo"])
    accs = iter([0.5, 0.6, 0.7])
    monkeypatch.setattr(FedTextStrategy, "evaluate", lambda self, r, params: (0.0, {"accuracy": next(accs)}))
    for r in (0, 1):
        strat.rounds.begin(r)
        strat.evaluate(r, None)
    assert strat.pacer.trials == [] and strat.pacer.window_start_acc == 0.6
    strat.rounds.begin(2)
    strat.evaluate(2, None)
    assert [t["pace"] for t in strat.pacer.trials] == ["1-2-10"] and strat.pacer.pace() == Pace(1, 3, 10)
    assert strat.record.method_metrics["trial_done"] == 1.0


def test_a_bad_pace_in_a_fit_message_names_fes_paces_in_the_error():
    """The client parses the server's ``pace`` with ``parse_paces``'s default key: the one
    line a user reads names the run-config key ``fes.paces`` and shows a valid example
    (mutants: another default key, another example text)."""
    for bad in ("0-2-5", "1-2"):
        with pytest.raises(ConfigError) as err:
            parse_paces(bad)
        assert str(err.value) == (f"fes.paces: '{bad}' is not f-n-k with integers f, n >= 1 and k > 0 "
                                  "(e.g. 1-2-10)")


# ------------------------------------------------------------- filtering (eq. 2)
# V(0)={1,2} V(1)={0,2} V(2)={0,1} V(3)={0,1} V(4)={5,3} V(5)={4,3}
# E(u) = {x : u in V(x)}: E(0)={1,2,3} E(1)={0,2,3} E(2)={0,1} E(3)={4,5} E(4)={5} E(5)={4}
V6 = np.array([[1, 2], [0, 2], [0, 1], [0, 1], [5, 3], [4, 3]])


def test_filter_follows_eq2_by_hand_on_a_six_text_graph():
    """Eq. (2): score(u) = sum_{x in E(u)} rho^-|V(x) ∩ L|, greedy, scores updated after each pick.

    Step 1 (L = {}): every |V(x) ∩ L| = 0, score = |E(u)| = [3, 3, 2, 2, 1, 1] -> 0 (ties: lowest id).
    Then c(x) = |V(x) ∩ {0}| = [0, 1, 1, 1, 0, 0].
    Step 2: score(1) = rho^-c(0) + rho^-c(2) + rho^-c(3) = 1 + 2/rho; score(2) = rho^-c(0) + rho^-c(1)
    = 1 + 1/rho; score(3) = rho^-c(4) + rho^-c(5) = 2; score(4) = score(5) = 1.
      rho = 10:     1.2, 1.1, 2   -> 3 (diversity wins: 1's voters already see 0)
      rho = 1.0001: 2.9998, 1.9999, 2 -> 1 (barely any discount: representativeness wins)
      rho = 1.5:    2.333, 1.667, 2 -> 1
    Step 3, rho = 10, L = {0, 3}: c = [0, 1, 1, 1, 1, 1]: score(1) = 1 + 0.1 + 0.1 = 1.2,
      score(2) = 1 + 0.1 = 1.1, score(4) = c(5) -> 0.1, score(5) = 0.1 -> 1.
    Step 3, rho = 1.0001 or 1.5, L = {0, 1}: c = [1, 1, 2, 2, 0, 0]: score(2) = 2/rho (1.9998; 1.333),
      score(3) = 1 + 1 = 2, score(4) = score(5) = 1 -> 3.
    Mutants: rho^+c picks 1 at step 2 (rho = 10) and 2 at step 3 (rho = 1.0001); no update of
    c picks [0, 1, 2]; +2 per update (in effect rho^2) picks 3 at step 2 for rho = 1.5
    (1 + 2/2.25 = 1.89 < 2), then 1 (1 + 2/2.25 vs 1 + 1/2.25).
    """
    assert representational_filter(V6, 3, rho=10.0) == [0, 3, 1]
    assert representational_filter(V6, 3, rho=1.0001) == [0, 1, 3]
    assert representational_filter(V6, 3, rho=1.5) == [0, 1, 3]
    # step 4 (rho = 10, L = {0, 3, 1}): c = [1, 1, 2, 2, 1, 1]: score(2) = 0.1 + 0.1 = 0.2,
    # score(4) = score(5) = 0.1 -> 2, then 4 (0.1 vs 0.1: lowest id), then 5
    assert representational_filter(V6, 6, rho=10.0) == [0, 3, 1, 2, 4, 5]
    assert representational_filter(V6, 10, rho=10.0) == [0, 3, 1, 2, 4, 5]  # never more than N


def test_filter_scores_and_greedy_choice_on_a_hand_made_knn_graph():
    # V(0)={1,2} V(1)={0,2} V(2)={0,1} V(3)={4,2} V(4)={3,2}; E(2)={0,1,3,4} is the largest.
    v = np.array([[1, 2], [0, 2], [0, 1], [4, 2], [3, 2]])
    # step 1: scores |E(u)| = [2, 2, 4, 1, 1] -> 2; |V(x) ∩ L| becomes [1, 1, 0, 1, 1]
    # step 2: score(0) = rho^-1 + rho^0 = 1.1 = score(1); score(3) = score(4) = 0.1 -> 0
    # step 3: |V(x) ∩ L| = [1, 2, 1, 1, 1]: score(1) = 0.1 + 0.1 = 0.2 > score(3) = 0.1 -> 1
    assert representational_filter(v, 3, rho=10.0) == [2, 0, 1]


def exact_scores(neighbours: np.ndarray, chosen: list[int], rho: float) -> dict:
    """Eq. (2) word for word, in exact rational arithmetic: for every u not in L = ``chosen``,
    the sum of rho^-|V(x) ∩ L| over the x whose V(x) holds u."""
    from fractions import Fraction

    r, sets, sel = Fraction(rho), [set(int(u) for u in vs) for vs in neighbours], set(chosen)
    return {u: sum((r ** -len(sets[x] & sel) for x in range(len(sets)) if u in sets[x]), Fraction(0))
            for u in range(len(sets)) if u not in sel}


def brute_force_filter(neighbours: np.ndarray, keep: int, rho: float) -> list[int]:
    """The greedy rule of §3.2 on :func:`exact_scores`: the largest score, ties to the lowest id."""
    chosen: list[int] = []
    for _ in range(min(keep, len(neighbours))):
        scores = exact_scores(neighbours, chosen, rho)
        best = max(scores.values())
        chosen.append(min(u for u, sc in scores.items() if sc == best))
    return chosen


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("rho", [2.0, 4.0])
def test_filter_matches_a_brute_force_eq2_on_random_4nn_graphs(seed, rho):
    # rho a power of 2: every rho^-c and every sum of them is exact in float64, so exact
    # ties are float ties and the lowest-id rule must hold too
    v = knn_sets(np.random.default_rng(seed).normal(size=(24, 6)), 4)
    assert representational_filter(v, 12, rho) == brute_force_filter(v, 12, rho)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("rho", [1.5, 10.0])
def test_filter_picks_an_exact_eq2_maximum_at_every_step(seed, rho):
    # rho^-c inexact in float (10^-1, 1.5^-1): an exact tie such as 1 + 0.1 + 0.1 + 0.1 vs
    # the same terms in another order may round apart, so the code may take either of the
    # tied texts; each of its picks must still score the exact maximum of eq. (2)
    v = knn_sets(np.random.default_rng(seed).normal(size=(24, 6)), 4)
    picks = representational_filter(v, 12, rho)
    for i, u in enumerate(picks):
        scores = exact_scores(v, picks[:i], rho)
        assert scores[u] == max(scores.values()), (i, u)


def test_votek_filter_is_the_authors_fast_votek_by_hand_on_the_six_text_graph():
    """fes.vote=votek (fed/selective_annotating.py ``fast_votek``) on V6, rho = 10.

    Their ``votes`` list: by vote count |E(u)|, then by first vote (voter 0 votes 2 then 1,
    its V from the least similar; voter 1 then votes 0; voter 4 votes 3, 5; voter 5 votes 4):
    1 (3), 0 (3), 2 (2), 3 (2), 5 (1), 4 (1).
    Step 1: scores = counts, 0 and 1 tie at 3: 1 comes first in the list (eq. (2): 0).
    Step 2: voter 1 is chosen and no longer votes; c = |V(x) ∩ {1}| = 1 for x = 0, 2, 3:
      score(0) = rho^-c(2) + rho^-c(3) = 0.2, score(2) = rho^-c(0) = 0.1, score(3) = 2,
      score(4) = score(5) = 1 -> 3.
    Step 3: voter 3 is chosen too: score(0) = 0.1 (x = 2), score(2) = 0.1 (x = 0), score(4) =
      0.1 (x = 5, c(5) = 1), score(5) = 0.1: a four-way tie, 0 first in the list.
    Step 4: 2's voters 0 and 1 are both chosen: 2 can no longer be chosen; 4 and 5 tie at
      0.1 -> 5 (listed before 4). Step 5: 4's only voter 5 is chosen: nothing is left, the
      selection stops at 4 texts (their loop would pick a chosen text again)."""
    assert votek_filter(V6, 6, rho=10.0) == [1, 3, 0, 5]
    assert votek_filter(V6, 2, rho=10.0) == [1, 3] and votek_filter(V6, 0, rho=10.0) == []
    assert representational_filter(V6, 4, rho=10.0) == [0, 3, 1, 2]  # eq. (2), the default
    assert VOTES == {"eq2": representational_filter, "votek": votek_filter}


def votek_by_the_rule(neighbours: np.ndarray, keep: int, rho: float) -> list[int]:
    """The vote-k rule restated in plain Python: their ``votes`` list order (vote count, then
    first vote, each voter listing its V(x) from the least similar); per step, every unchosen
    text with an unchosen voter scores the float sum, voter by voter in id order, of
    ``rho ** -|V(x) ∩ L|`` over its unchosen voters x; the first text of the list among the
    largest scores is chosen."""
    voters: dict[int, list[int]] = {}  # in the order texts got their first vote
    for x, vs in enumerate(neighbours):
        for u in reversed(vs.tolist()):
            voters.setdefault(u, []).append(x)
    listed = sorted(voters, key=lambda u: -len(voters[u]))  # stable: first vote breaks ties
    chosen: list[int] = []
    while len(chosen) < min(keep, len(neighbours)):
        seen = {x: sum(u in chosen for u in neighbours[x].tolist()) for x in range(len(neighbours))}
        scores = {}
        for u in listed:
            if u not in chosen and any(x not in chosen for x in voters[u]):
                scores[u] = 0.0
                for x in sorted(voters[u]):
                    if x not in chosen:
                        scores[u] += rho ** -seen[x]
        if not scores:
            break
        chosen.append(max(scores, key=scores.get))  # the first of the largest, in list order
    return chosen


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize(("n", "k", "rho"), [(24, 4, 10.0), (40, 6, 10.0), (24, 3, 1.5), (30, 12, 10.0)])
def test_votek_filter_matches_the_rule_restated_on_random_graphs(seed, n, k, rho):
    """Same picks, ties and last-bit sum differences included (rho = 10: 1 + 0.1 + 0.1 is
    not 0.1 + 0.1 + 1 in floats), and the same early stop (k = 3 of 24: keep 24)."""
    v = knn_sets(np.random.default_rng([seed, n]).normal(size=(n, 6)), k)
    for keep in (1, n // 4, n):
        assert votek_filter(v, keep, rho) == votek_by_the_rule(v, keep, rho)


def test_votek_filter_with_everyone_voting_for_everyone_stops_after_n_minus_1():
    """Three texts, each voting for the other two (k = N - 1), keep 3. Ranks by first vote
    (x0 lists 2 then 1 least similar first): 2, 1, 0. Round 1: all score 2, text 2 (rank
    0). Round 2: texts 0 and 1 score 10^-1 each (their one unchosen voter has seen one
    chosen text): text 1 (rank 1). Round 3: text 0's only voters are chosen, so the loop
    stops with 2 ids; text 0 has seen N - 1 = 2 chosen texts, so the powers must reach
    rho^-(N-1) (a table one shorter fails with an IndexError)."""
    assert votek_filter(np.array([[1, 2], [0, 2], [0, 1]]), 3, 10.0) == [2, 1]


def test_knn_sets_are_the_most_cosine_similar_other_texts():
    e = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    np.testing.assert_array_equal(knn_sets(e, 1), [[1], [0], [3], [2]])
    # cosine, not dot product: x2 = x0 / 2 is x0's nearest (cos 1) although x1 has the larger
    # dot product (10 vs 0.5); x1 is as close to x0 as to x2 (cos 10/sqrt(101) both): lowest id
    # first. k is capped at N - 1 (a text is never its own neighbour).
    e = np.array([[1.0, 0.0], [10.0, 1.0], [0.5, 0.0]])
    np.testing.assert_array_equal(knn_sets(e, 5), [[2, 1], [0, 2], [0, 1]])
    # 24 texts in 3 directions (1, i mod 3): a text's 7 same-direction others tie at cos 1;
    # its 4 neighbours are the lowest of their ids (a stable sort; numpy's default sort
    # reorders such ties once a row has more than 16 entries)
    v = knn_sets(np.stack([np.ones(24), np.arange(24) % 3], axis=1), 4)
    assert v.tolist() == [[j for j in range(24) if j % 3 == i % 3 and j != i][:4] for i in range(24)]


def test_knn_sets_centre_subtracts_the_mean_embedding_first():
    # All four share the offset (10, 0). Uncentred, x0 = (10, 1) is nearest x1 = (10, -1)
    # (angles 0.0997 and -0.0997 rad; x2 = (10, 4) is at 0.381); centred (mean (10, 0))
    # they are (0, 1), (0, -1), (0, 4), (0, -4): x0 and x2 point the same way (cos 1).
    e = np.array([[10.0, 1.0], [10.0, -1.0], [10.0, 4.0], [10.0, -4.0]])
    np.testing.assert_array_equal(knn_sets(e, 1), [[1], [0], [0], [1]])
    np.testing.assert_array_equal(knn_sets(e, 1, centre=True), [[2], [3], [0], [1]])


def test_knn_sets_compare_the_proxys_float32_embeddings_in_float64():
    """The proxy (MiniLM) hands float32 embeddings; the cosines of §3.2 are taken in float64.

    x0 = (1, 0), x1 = (1, 2e-4), x2 = (1, 5e-5): angles 0, 2e-4, 5e-5 rad, so in float64
    x0's nearest is x2 (5e-5 apart), x1's is x2 (1.5e-4) and x2's is x0 (5e-5).
    In float32 (spacing 1.2e-7 near 1) every squared norm 1 + 4e-8 or 1 + 2.5e-9 and every
    dot product 1 + 1e-8 rounds to exactly 1: all cosines tie at 1 and the lowest id wins,
    [[1], [0], [0]] (mutants: ``np.asarray(embeddings)`` without ``dtype=np.float64``).
    """
    e = np.array([[1.0, 0.0], [1.0, 2e-4], [1.0, 5e-5]], dtype=np.float32)
    np.testing.assert_array_equal(knn_sets(e, 1), [[2], [2], [0]])
    np.testing.assert_array_equal(knn_sets(e, 2), [[2, 1], [2, 0], [0, 1]])


def probe(acc: dict[int, float], calls: list[int], limit: int = 12):
    """``accuracy_of`` over a table; raises instead of looping forever (a broken bisection)."""
    def accuracy_of(frozen: int) -> float:
        calls.append(frozen)
        if len(calls) > limit:
            raise RuntimeError(f"search_depth did not stop: probed {calls}")
        return acc[frozen]
    return accuracy_of


def test_search_depth_finds_the_deepest_freeze_within_tolerance_by_binary_search():
    acc = {0: 0.90, 1: 0.90, 2: 0.89, 3: 0.88, 4: 0.80, 5: 0.70, 6: 0.50}
    calls: list[int] = []
    # target 0.90 - 0.02 = 0.88: frozen 3 meets it exactly (>=), 4 does not
    assert search_depth(probe(acc, calls), 0, 6, tolerance=0.02) == 3
    assert len(calls) <= 1 + 3  # the reference plus ceil(log2(7)) probes
    # probes: 0 (reference), mid = (0 + 6 + 1) // 2 = 3 ok, (3 + 6 + 1) // 2 = 5 no, (3 + 4 + 1) // 2 = 4 no
    assert calls == [0, 3, 5, 4]


def test_search_depth_edges_every_depth_fine_none_fine_and_a_range_not_from_zero():
    flat = {f: 0.9 for f in range(7)}
    assert search_depth(probe(flat, []), 0, 6, tolerance=0.0) == 6  # every depth meets the target
    steep = {0: 0.9, **{f: 0.5 for f in range(1, 7)}}
    assert search_depth(probe(steep, []), 0, 6, tolerance=0.01) == 0  # none below the reference does
    # low = 2: the reference is frozen 2 (target 0.9 - 0.1 = 0.8); mid 4 fails, then mid 3 meets it
    calls: list[int] = []
    assert search_depth(probe({2: 0.9, 3: 0.85, 4: 0.5, 5: 0.4}, calls), 2, 5, tolerance=0.1) == 3
    assert calls == [2, 4, 3]
    assert search_depth(probe({4: 0.7}, []), 4, 4, tolerance=0.0) == 4  # one plan: no search


# ------------------------------------------------------------------ co-planning
BERT = ARCHITECTURES["bert"]


def test_layer_capacity_is_terraced_frozen_bias_full():
    cap = lambda n: layer_capacity(n, 6, 3, 2, BERT)  # noqa: E731
    assert cap("embeddings.word_embeddings.weight") == "frozen"
    assert cap("encoder.layer.2.output.dense.weight") == "frozen"
    assert cap("encoder.layer.3.attention.self.query.bias") == "bias"
    assert cap("encoder.layer.4.output.dense.weight") == "bias"
    assert cap("encoder.layer.5.output.dense.weight") == "full"
    assert cap("pooler.dense.weight") == "frozen" and cap("head.weight") == "full"
    assert layer_capacity("pooler.dense.weight", 6, 0, 0, BERT) == "full"  # the plain full plan: every weight
    # the pooler trains only when nothing is frozen *and* nothing is bias-only
    assert layer_capacity("pooler.dense.weight", 6, 0, 2, BERT) == "frozen"
    assert layer_capacity("pooler.dense.weight", 6, 3, 0, BERT) == "frozen"
    # embeddings follow layer 0: frozen once one layer is, bias-only or full with layer 0
    assert layer_capacity("embeddings.word_embeddings.weight", 6, 1, 2, BERT) == "frozen"
    assert layer_capacity("embeddings.LayerNorm.bias", 6, 0, 2, BERT) == "bias"
    assert layer_capacity("embeddings.word_embeddings.weight", 6, 0, 0, BERT) == "full"
    assert layer_capacity("head.weight", 6, 6, 0, BERT) == "full"  # a fresh head always trains
    wants = plan_predicate(6, 3, 2, BERT)
    assert wants("encoder.layer.3.output.dense.bias") and not wants("encoder.layer.3.output.dense.weight")
    assert not wants("encoder.layer.0.output.dense.bias")  # a frozen layer's biases stay frozen too
    assert wants("encoder.layer.5.output.dense.weight") and wants("encoder.layer.5.output.dense.bias")
    assert wants("head.weight") and not wants("pooler.dense.bias")


def test_the_default_plan_is_the_papers_share_of_any_depth():
    """-1 freezes round(2/3 L): FeS's AG News plan (16 of RoBERTa-large's 24) at any depth."""
    from fedtext.methods.fes.model import planned_frozen

    assert [planned_frozen(-1, n) for n in (1, 2, 3, 5, 6, 12, 24)] == [1, 1, 2, 3, 4, 8, 16]
    assert [planned_frozen(k, 12) for k in (0, 3, 12)] == [0, 3, 12]  # a count is taken as is


def test_co_planning_trains_and_uploads_exactly_the_planned_tensors(backbone):
    cfg = cfg_of("fes")
    model = METHODS["fes"].model_class()(cfg, backbone)
    names = [s.name for s in model.upload_specs()]
    assert names == [n for n, _ in model.network.named_trainable()]
    # the default (the paper's AG News plan on 6 layers): 0-3 frozen, the biases of 4-5, no full layer
    want = [n for n, _ in backbone.named_parameters() if n.endswith(".bias") and (".layer.4." in n or ".layer.5." in n)]
    assert names == want
    biases = 2 * (4 * 384 + 1536 + 384 + 2 * 384)  # layers 4 and 5: q k v o, ffn in/out, LayerNorm biases
    assert model.trainable_parameters() == biases == 8_448
    full_top = METHODS["fes"].model_class()(cfg_of("fes", frozen_layers=3, bias_layers=2), backbone)
    layer = 4 * 384 * 384 + 2 * 384 * 1536 + 9 * 384 + 1536  # q k v o, ffn in/out, their biases, 2 LayerNorms
    assert full_top.trainable_parameters() == layer + biases == 1_782_912
    assert [s.name for s in full_top.upload_specs()] == [
        n for n, _ in backbone.named_parameters()
        if ".layer.5." in n or (n.endswith(".bias") and (".layer.3." in n or ".layer.4." in n))]
    frozen = dict(backbone.named_parameters())["encoder.layer.0.output.dense.weight"]
    assert not frozen.requires_grad  # the process backbone stays frozen
    bias_only = cfg_of("fedfsl-bias")
    m = METHODS["fedfsl-bias"].model_class()(bias_only, backbone)
    assert all(s.name.endswith(".bias") for s in m.upload_specs())
    with pytest.raises(ConfigError, match="fes.frozen-layers=5 \\+ fes.bias-layers=2 exceeds the 6 layers"):
        METHODS["fes"].model_class()(cfg_of("fes", frozen_layers=5, bias_layers=2), backbone)
    # the default plan is the paper's share of the depth: -1 freezes round(2/3 x 6) = 4
    with pytest.raises(ConfigError, match="fes.frozen-layers=-1 \\(4\\) \\+ fes.bias-layers=3 exceeds the 6 layers"):
        METHODS["fes"].model_class()(cfg_of("fes", bias_layers=3), backbone)


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
    # on a gold client the oracle labels its gold texts and its unlabelled ones: 32 + 100
    gold, unl = split_pool(oracle, 0, 0, 400)
    assert len(gold) == 132 and len(unl) == 0


@pytest.mark.parametrize("total, clients, want", [(64, 2, [32, 32, 0]), (65, 2, [33, 32, 0]),
                                                   (10, 3, [4, 3, 3, 0]), (3, 5, [1, 1, 1, 0, 0, 0])])
def test_gold_count_splits_the_labels_as_evenly_as_possible(total, clients, want):
    mc = cfg_of("fes", gold_labels=total, labelled_clients=clients).method_config
    assert [gold_count(mc, i) for i in range(len(want))] == want and sum(want) == total


def test_split_pool_unlabeled_size_zero_takes_the_rest_and_the_draw_is_per_seed_and_client():
    mc = cfg_of("fes", gold_labels=64, labelled_clients=2, unlabeled_size=0).method_config
    gold, unl = split_pool(mc, 0, 0, 100)
    assert len(gold) == 32 and len(unl) == 68 and sorted([*gold, *unl]) == list(range(100))
    assert split_pool(mc, 0, 0, 20)[0].tolist() == list(range(20))  # fewer texts than gold labels
    a, b, c = split_pool(mc, 0, 0, 100)[0], split_pool(mc, 0, 1, 100)[0], split_pool(mc, 1, 0, 100)[0]
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    np.testing.assert_array_equal(a, split_pool(mc, 0, 0, 100)[0])


def test_split_pool_is_one_permutation_seeded_by_seed_partition_and_its_salt():
    """The placement is ``default_rng([seed, partition, 0xFE5]).permutation(pool)``: gold
    rows first, then ``unlabeled-size`` unlabelled ones. A fixed function of the run
    config, so every process, and every earlier run's record, names the same gold texts
    (mutant: another salt)."""
    mc = cfg_of("fes", gold_labels=6, labelled_clients=2, unlabeled_size=4).method_config
    for seed, pid in ((0, 0), (7, 1)):
        order = np.random.default_rng([seed, pid, 0xFE5]).permutation(12)
        gold, unl = split_pool(mc, seed, pid, 12)  # 6 // 2 = 3 gold texts, then 4 unlabelled
        assert gold.tolist() == sorted(order[:3].tolist()) and unl.tolist() == sorted(order[3:7].tolist())


# ------------------------------------------------ pseudo labels and client state
def fes_client(pid: int, state: RecordDict, **kw):
    cfg = cfg_of("fes", gold_labels=8, unlabeled_size=40, keep_ratio=0.5, neighbours=4, max_local_steps=2, **kw)
    return client_class("fes")(cfg, TASKS["demo"], client_data(cfg, pid, 3), state=state)


def test_pseudo_labels_follow_the_pace_and_survive_a_round_the_client_sat_out():
    state = RecordDict()
    client = fes_client(2, state)  # no gold labels (clients 0 and 1 hold them)
    arrays = client.model.initial_arrays()
    out, n, _ = client.train(arrays, {"server_round": 3, "train": 0, "label": 1, "pace": "1-2-10"})
    assert out == [] and n == 0  # labelling only: nothing to upload
    m = client.fit_metrics
    first = set(state["fes"]["ids"])
    assert m["labelled_candidates"] == 20  # keep-ratio 0.5 of 40
    assert m["num_pseudo"] == m["pseudo_labels"] == 4  # floor(20 * 10/100 * (3-1)/1)
    assert len(state["fes"]["kept"]) == 20
    # round 4: not sampled (no message). Round 5: a fresh client object, same node state.
    later = fes_client(2, state)
    texts, labels, n_pseudo = later.labelled_set()
    assert n_pseudo == 4 and len(texts) == 4
    out, n, _ = later.train(arrays, {"server_round": 5, "train": 1, "label": 0})
    assert n == 4 and later.fit_metrics["trained"] == 1 and len(out) == len(later.model.upload_specs())
    # labelled again in round 6: the curriculum keeps floor(20 * 0.1 * 5) = 10, re-labelling the 4
    later.train(arrays, {"server_round": 6, "train": 0, "label": 1, "pace": "1-2-10"})
    assert later.fit_metrics["num_pseudo"] == 10
    assert first < set(state["fes"]["ids"])  # same global model: the 4 most confident stay among the 10


def test_static_pacing_keeps_a_fixed_count_and_fedcls_never_labels():
    cfg = cfg_of("fedfsl", gold_labels=8, unlabeled_size=40, max_local_steps=1)
    client = client_class("fedfsl")(cfg, TASKS["demo"], client_data(cfg, 2, 3), state=RecordDict())
    arrays = client.model.initial_arrays()
    client.train(arrays, {"server_round": 3, "train": 0, "label": 1, "label_count": 16})
    assert client.fit_metrics["num_pseudo"] == 16 and client.fit_metrics["labelled_candidates"] == 40


# Hand-written softmax outputs of 5 unlabelled texts over 3 classes:
#   text:      0     1     2     3     4
#   max:     0.50  0.80  0.70  0.40  0.90
#   argmax:    0     1     2     1     0      (argmin: 2, 2, 1, 2, 2)
P1 = np.array([[0.50, 0.30, 0.20], [0.15, 0.80, 0.05], [0.20, 0.10, 0.70], [0.35, 0.40, 0.25], [0.90, 0.06, 0.04]])
# a later global model: text 4 now says class 2 (0.95), text 0 class 1 (0.85), the rest unsure
P2 = np.array([[0.10, 0.85, 0.05], [0.40, 0.35, 0.25], [0.30, 0.36, 0.34], [0.34, 0.33, 0.33], [0.02, 0.03, 0.95]])


def stub_client(probs: np.ndarray, gold: int = 0, method: str = "fes", **kw):
    """A few-shot client without backbone or model: ``predict`` returns the hand-written
    softmax rows ``probs[ids]`` (set ``client.predict`` again for a later round)."""
    from clients.fes import FewShotClient

    cfg = cfg_of(method, **{**({"filter": False} if method == "fes" else {}), **kw})
    client = object.__new__(FewShotClient)
    client.cfg, client.mcfg, client.partition_id, client.state = cfg, cfg.method_config, 5, RecordDict()
    client.unlabeled = pd.DataFrame({"text": [f"u{i}" for i in range(len(probs))], "label": [0, 1, 2, 1, 2]})
    client.gold = pd.DataFrame({"text": [f"g{i}" for i in range(gold)], "label": [0] * gold})
    client.predict = lambda net, ids: (probs[ids], 1)
    return client


def test_pseudo_labels_are_the_top_k_most_confident_argmax_relabelled_every_time():
    client = stub_client(P1)
    m = client.pseudo_label(None, {"server_round": 1, "label_count": 3})
    # the 3 largest maxima: text 4 (0.90), 1 (0.80), 2 (0.70), labelled by their argmax 0, 1, 2
    assert client.stored()["ids"] == [4, 1, 2] and client.stored()["labels"] == [0, 1, 2]
    assert m["pseudo_labels"] == 3 and m["labelled_candidates"] == 5
    assert m["pseudo_label_accuracy"] == pytest.approx(2 / 3)  # true labels of 4, 1, 2: 2, 1, 2
    # a later round re-labels from scratch with the new model: 2 labels, nothing kept from round 1
    client.predict = lambda net, ids: (P2[ids], 1)
    client.pseudo_label(None, {"server_round": 2, "label_count": 2})
    assert client.stored()["ids"] == [4, 0] and client.stored()["labels"] == [2, 1]
    texts, labels, n_pseudo = client.labelled_set()
    assert (texts, labels, n_pseudo) == (["u4", "u0"], [2, 1], 2)


def test_fit_message_without_round_is_round_0_and_without_a_count_labels_nothing():
    """Defaults of a fit message (the train seed also reads a missing ``server_round`` as 0):
    no ``server_round``: round 0, so the pace's target is 0 (round 2 would keep
    floor(5 * 0.5 * 1) = 2; rounds 0 and 1 have trained no round); neither ``pace`` nor
    ``label_count``: 0 pseudo labels (mutants: default round 2 or None, default count 1 or
    None)."""
    client = stub_client(P1)
    m = client.pseudo_label(None, {"pace": "1-1-50"})
    assert client.stored()["ids"] == [] and m["pseudo_labels"] == 0
    m = client.pseudo_label(None, {"server_round": 2})
    assert client.stored()["ids"] == [] and m["pseudo_labels"] == 0
    client.pseudo_label(None, {"server_round": 2, "pace": "1-1-50"})  # the same pace labels in round 2
    assert client.stored()["ids"] == [4, 1]
    client.pseudo_label(None, {"server_round": 1, "pace": "1-1-50"})  # round 1: the untrained model keeps none
    assert client.stored()["ids"] == []
    # the round also seeds the class-quota draw: no ``server_round`` draws as round 0, not 1
    # (P1, 3 labels: quotas 1, 1, 0; round 0 draws texts 4 and 3, round 1 texts 4 and 1)
    client = stub_client(P1, pseudo_pick="class-quota")
    drawn = {}
    for key, config in (("none", {}), (0, {"server_round": 0}), (1, {"server_round": 1})):
        client.pseudo_label(None, {**config, "label_count": 3})
        drawn[key] = client.stored()["ids"]
    assert drawn == {"none": [4, 3], 0: [4, 3], 1: [4, 1]}


class FakeNet:
    """A global model whose logits are ``log(P1)`` rows, looked up by the text id in
    ``input_ids[:, 0]`` (softmax over the classes gives P1 back); notes each forward's rows."""

    def __init__(self):
        self.forwards: list[list[int]] = []

    def fixed_weights(self):
        from contextlib import nullcontext

        return nullcontext()

    def forward(self, prompt, batch):
        import torch

        rows = batch.input_ids[:, 0].tolist()
        self.forwards.append(rows)
        return torch.log(torch.as_tensor(P1[rows]))


def predict_client(infer_batch: int = 2):
    """A stub client with the real ``predict`` and a backbone that encodes text ``u{i}`` as the one token ``i``."""
    import torch

    from fedtext.backbone import EncodedBatch

    def encode(texts, labels):
        ids = torch.as_tensor([[int(t[1:])] for t in texts], dtype=torch.long).reshape(len(texts), 1)
        return EncodedBatch(ids, torch.ones_like(ids), torch.as_tensor(labels, dtype=torch.long))

    client = stub_client(P1, infer_batch=infer_batch)
    del client.predict  # the class's own
    client.task = SimpleNamespace(num_classes=3)
    client.backbone = SimpleNamespace(encode=encode)
    return client


def test_predict_is_the_softmax_over_classes_in_infer_batch_forwards():
    """``predict``: softmax over the classes of each row (not over the texts of a batch),
    ``infer-batch`` texts per forward, and the number of forwards (the batches l_i divides by).
    Texts 4, 1, 3 with infer-batch 2: forwards [4, 1] and [3], rows P1[4], P1[1], P1[3].
    One text is one forward; no text is no forward and an empty [0, C] result.
    Mutants: softmax over dim -2 (each column of [4, 1] would sum to 1, [3] would be all 1s),
    the empty case taken at one text, or returning no [0, 3] array or 1 batch for no text."""
    client, net = predict_client(infer_batch=2), FakeNet()
    probs, batches = client.predict(net, np.array([4, 1, 3]))
    np.testing.assert_allclose(probs, P1[[4, 1, 3]], rtol=1e-12)
    assert batches == 2 and net.forwards == [[4, 1], [3]]
    probs, batches = client.predict(net, np.array([2]))
    np.testing.assert_allclose(probs, P1[[2]], rtol=1e-12)
    assert batches == 1 and net.forwards[-1] == [2]
    probs, batches = client.predict(net, np.arange(0))
    assert probs.shape == (0, 3) and batches == 0 and len(net.forwards) == 3


def test_pseudo_labelling_an_empty_pool_runs_no_forward_and_reports_zeros():
    """A client with no unlabelled text (its pool all gold) told to label: no candidate, no
    forward, no pseudo label; no accuracy (nothing to score: the metric is declared in
    [0, 1], so it is left out rather than sent as -1) and 0 s per batch, not a
    division by zero (mutants: ``infer_s / batches`` at 0 batches, 1.0 s, 1 batch)."""
    client = predict_client()
    client.unlabeled = client.unlabeled.iloc[:0]
    m = client.pseudo_label(FakeNet(), {"server_round": 3, "label_count": 4})
    assert m == {"pseudo_labels": 0, "labelled_candidates": 0,
                 "infer_batches": 0, "infer_s_per_batch": 0.0, "filter_s": 0.0}
    assert client.stored() == {"ids": [], "labels": []}


def test_pseudo_labelling_reports_seconds_per_inference_batch(monkeypatch):
    # l_i of eq. (1) comes from here: a fake clock that reads 10 s before the forward passes
    # and 13 s after, over 2 batches: 1.5 s per batch
    import clients.fes as client_module

    clock = iter([10.0, 13.0])
    monkeypatch.setattr(client_module, "time", SimpleNamespace(time=lambda: next(clock)))
    client = stub_client(P1)
    client.predict = lambda net, ids: (P1[ids], 2)
    m = client.pseudo_label(None, {"server_round": 1, "label_count": 2})
    assert (m["infer_batches"], m["infer_s_per_batch"], m["filter_s"]) == (2, 1.5, 0.0)


def test_pseudo_label_count_follows_the_pace_string_and_static_count():
    client = stub_client(P1)
    client.pseudo_label(None, {"server_round": 3, "pace": "1-1-30"})  # floor(5 * 30/100 * (3-1)/1) = 3
    assert client.stored()["ids"] == [4, 1, 2]
    client.pseudo_label(None, {"server_round": 3, "pace": "2-1-30"})  # floor(5 * 0.3 * 2/2) = 1
    assert client.stored()["ids"] == [4]
    client.pseudo_label(None, {"server_round": 3, "label_count": 9})  # never more than the candidates
    assert client.stored()["ids"] == [4, 1, 2, 0, 3]


def test_gold_in_target_counts_gold_labels_toward_the_pseudo_label_count():
    # on top (default): 3 pseudo labels besides 2 gold ones
    client = stub_client(P1, gold=2)
    client.pseudo_label(None, {"server_round": 1, "label_count": 3})
    assert client.stored()["ids"] == [4, 1, 2] and client.labelled_set()[1:] == ([0, 0, 0, 1, 2], 3)
    # the authors' count: 3 - 2 gold = 1 new; 2 - 3 gold: none (not "all but one")
    client = stub_client(P1, gold=2, gold_in_target=True)
    client.pseudo_label(None, {"server_round": 1, "label_count": 3})
    assert client.stored()["ids"] == [4]
    client = stub_client(P1, gold=3, gold_in_target=True)
    m = client.pseudo_label(None, {"server_round": 1, "label_count": 2})
    assert client.stored()["ids"] == [] and client.labelled_set()[2] == 0
    assert m["pseudo_labels"] == 0 and "pseudo_label_accuracy" not in m  # nothing to score
    assert [pseudo_target(t, 2, True) for t in (0, 2, 5)] == [0, 0, 3] and pseudo_target(5, 2, False) == 5


def test_class_quota_pick_by_hand_quotas_and_labels():
    # 10 rows predicted [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]; target 5 of N = 10: quotas
    # floor(5 * 5/10) = 2, floor(3 * 5/10) = 1, floor(2 * 5/10) = 1: 4 in all (floors, as the authors')
    probs = np.array([[0.9, 0.05, 0.05]] * 5 + [[0.1, 0.8, 0.1]] * 3 + [[0.2, 0.2, 0.6]] * 2)
    rows, labels = pick_class_quota(probs, 5, np.random.default_rng(0))
    assert labels.tolist() == [0, 0, 1, 2]  # class by class
    assert len(set(rows)) == 4 and all(probs[r].argmax() == lab for r, lab in zip(rows, labels, strict=True))
    assert sorted(pick_class_quota(probs, 10, np.random.default_rng(0))[0]) == list(range(10))  # all of them
    assert sorted(pick_class_quota(probs, 99, np.random.default_rng(0))[0]) == list(range(10))  # at most N
    # a class whose quota floors to 0 between two that get some: predicted [0, 0, 0, 1, 2, 2, 2, 2],
    # target 4 of 8: floor(3 * 4/8) = 1, floor(1 * 4/8) = 0, floor(4 * 4/8) = 2
    skip = np.array([[0.8, 0.1, 0.1]] * 3 + [[0.1, 0.8, 0.1]] + [[0.1, 0.1, 0.8]] * 4)
    assert pick_class_quota(skip, 4, np.random.default_rng(0))[1].tolist() == [0, 2, 2]
    rows, labels = pick_class_quota(np.array([[0.3, 0.7]]), 1, np.random.default_rng(0))  # N = 1
    assert rows.tolist() == [0] and labels.tolist() == [1]
    # nothing to pick: empty integer arrays (they index the client's text ids)
    for p, t in ((probs, 0), (np.zeros((0, 3)), 5)):
        rows, labels = pick_class_quota(p, t, np.random.default_rng(0))
        assert rows.size == labels.size == 0 and rows.dtype.kind == labels.dtype.kind == "i"
    rows, _ = pick_class_quota(probs, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(rows, pick_class_quota(probs, 5, np.random.default_rng(0))[0])  # seeded


def test_class_quota_rounds_in_floats_as_the_authors():
    """pet/ipet.py: ``multiplier = num_new_examples / len(train_data)``, quota ``int(n_c *
    multiplier)``. 22 * (30/44) = 14.999999999999998 -> 14 (the exact floor of 22 * 30 / 44
    is 15); 49 * (1/49) = 0.9999999999999999 -> 0: a lone class of 49 texts gets no label
    at target 1 (exact: 1). Which rows are drawn then is theirs given their RandomState
    (tools/reference/fes.py)."""
    two = np.array([[0.9, 0.1]] * 22 + [[0.2, 0.8]] * 22)
    rows, labels = pick_class_quota(two, 30, np.random.default_rng(0))
    assert np.bincount(labels, minlength=2).tolist() == [14, 14] and len(set(rows.tolist())) == 28
    one = np.array([[0.7, 0.3]] * 49)
    rows, labels = pick_class_quota(one, 1, np.random.default_rng(0))
    assert rows.size == labels.size == 0
    # 49 * (2/49) = 1.9999999999999998, 49 * (3/49) = 3.0
    assert [len(pick_class_quota(one, t, np.random.default_rng(0))[0]) for t in (2, 3, 49)] == [1, 3, 49]


def test_class_quota_draws_with_probability_proportional_to_the_softmax_maximum():
    # two texts of class 0 with maxima 0.6 and 0.9, quota floor(2 * 1/2) = 1: text 1 is drawn
    # with probability 0.9 / (0.6 + 0.9) = 0.6 (uniform: 0.5; least confident first: 0.4)
    probs = np.array([[0.6, 0.4], [0.9, 0.1]])
    draws = [int(pick_class_quota(probs, 1, np.random.default_rng(s))[0][0]) for s in range(4000)]
    assert np.mean(draws) == pytest.approx(0.6, abs=0.03)  # 4 standard errors (0.0077)
    # top-k takes text 1 every time
    assert pick_top_k(probs, 1, np.random.default_rng(0))[0].tolist() == [1]


def test_top_k_breaks_confidence_ties_by_the_lowest_text():
    # 20 texts, the even ones at 0.9 and the odd at 0.6: the top 3 are 0, 2, 4 (a stable
    # sort; numpy's default sort gives 0, 2, 6 here)
    probs = np.array([[0.9, 0.1] if i % 2 == 0 else [0.4, 0.6] for i in range(20)])
    rows, labels = pick_top_k(probs, 3, np.random.default_rng(0))
    assert rows.tolist() == [0, 2, 4] and labels.tolist() == [0, 0, 0]


def test_client_class_quota_uses_a_seeded_rng_per_client_and_round():
    client = stub_client(P1, pseudo_pick="class-quota")  # run seed 0, partition 5
    draws = set()
    for server_round in range(1, 9):
        client.pseudo_label(None, {"server_round": server_round, "label_count": 4})
        # P1's predictions [0, 1, 2, 1, 0]: quotas floor(2 * 4/5) = 1, floor(2 * 4/5) = 1, floor(1 * 4/5) = 0;
        # class 0 draws text 4 with probability 0.9 / 1.4, class 1 text 1 with 0.8 / 1.2
        rng = np.random.default_rng([0, 5, server_round, PSEUDO_PICK_SALT])
        want, labels = pick_class_quota(P1, 4, rng)
        assert client.stored() == {"ids": want.tolist(), "labels": labels.tolist()} and labels.tolist() == [0, 1]
        assert client.stored()["ids"][0] in (0, 4) and client.stored()["ids"][1] in (1, 3)
        draws.add(tuple(want.tolist()))
    assert len(draws) > 1  # a new draw every round


def test_pseudo_pick_and_centre_proxy_are_validated_options():
    for method in ("fes", "fedfsl", "fedfsl-bias"):
        mc = cfg_of(method).method_config
        assert (mc.pseudo_pick, mc.gold_in_target) == ("top-k", False)
    assert cfg_of("fes").method_config.centre_proxy is False
    with pytest.raises(ConfigError, match="unknown fes.pseudo-pick 'best'; choose one of: top-k, class-quota"):
        cfg_of("fes", pseudo_pick="best")
    with pytest.raises(ConfigError, match="unknown fedfsl.pseudo-pick 'ipet'"):
        cfg_of("fedfsl", pseudo_pick="ipet")


def test_filter_keeps_int_of_n_times_keep_ratio_and_none_below_one_text():
    """The authors' ``select_num = int(len(unlabeled_data) * vote_k)``: 5 texts at 0.3 keep
    int(1.5) = 1 (the old max(1, round(.)) kept 2); at 0.1, int(0.5) = 0: no candidate, and
    a client told to label keeps no pseudo label and runs no forward (the old count kept 1)."""
    assert [keep_count(5, 0.3), keep_count(5, 0.1), keep_count(40, 0.25), keep_count(0, 0.5)] == [1, 0, 10, 0]
    assert keep_count(10, 0.7) == 7 and keep_count(100, 0.29) == 28  # float: 100 * 0.29 = 28.999999999999996
    emb = np.array([[10.0, 1.0], [10.0, -1.0], [10.0, 4.0], [10.0, -4.0], [10.0, 0.0]])
    client = stub_client(P1, filter=True, keep_ratio=0.3, neighbours=2)
    client.proxy_embeddings = lambda texts: emb
    assert len(client.candidates()[0]) == 1
    client = stub_client(P1, filter=True, keep_ratio=0.1, neighbours=2)
    client.proxy_embeddings = lambda texts: emb
    asked = []
    client.predict = lambda net, ids: asked.append(len(ids)) or (P1[ids], 0)  # the real one: no forward for none
    m = client.pseudo_label(None, {"server_round": 2, "label_count": 3})
    assert client.stored()["ids"] == [] and client.stored()["kept"] == [] and m["labelled_candidates"] == 0
    assert asked == [0] and m["pseudo_labels"] == 0


def test_filter_candidates_follow_fes_vote():
    """``fes.vote``: eq. (2) by default, the authors' vote-k with ``votek`` (their choice of 2
    of these 5 texts differs from eq. (2)'s)."""
    emb = np.random.default_rng(3).normal(size=(5, 4))
    picks = {}
    for vote in ("eq2", "votek"):
        client = stub_client(P1, filter=True, keep_ratio=0.4, neighbours=2, vote=vote)
        client.proxy_embeddings = lambda texts: emb
        picks[vote] = client.candidates()[0].tolist()
        assert picks[vote] == sorted(VOTES[vote](knn_sets(emb, 2), 2, 10.0))
    assert cfg_of("fes").method_config.vote == "eq2"


def test_filter_candidates_use_centre_proxy(monkeypatch):
    import clients.fes as client_module

    seen = []
    real = client_module.knn_sets
    monkeypatch.setattr(client_module, "knn_sets", lambda e, k, centre=False: seen.append(centre) or real(e, k, centre))
    emb = np.array([[10.0, 1.0], [10.0, -1.0], [10.0, 4.0], [10.0, -4.0], [10.0, 0.0]])
    for centre in (False, True):
        client = stub_client(P1, filter=True, keep_ratio=0.4, neighbours=1, centre_proxy=centre)
        client.proxy_embeddings = lambda texts: emb
        ids, _ = client.candidates()
        v = real(emb, 1, centre)
        assert ids.tolist() == sorted(representational_filter(v, 2, 10.0))
    assert seen == [False, True]


# ------------------------------------------------------------------- strategy
def fit_res(pid, arrays, n, **metrics):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}))


def test_labelling_only_results_are_reports_not_uploads_and_grow_the_labelled_set():
    strat = FewShotStrategy(cfg_of("fes", gold_labels=8), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    trained = [a + 1 for a in strat.global_arrays]
    results = [fit_res(0, trained, 10, trained=1, num_labels=10, train_s_per_batch=0.2, fit_time_s=3.0),
               fit_res(5, [], 0, trained=0, num_labels=6, num_pseudo=6, infer_s_per_batch=0.05,
                       pseudo_label_accuracy=0.5, fit_time_s=1.0)]
    strat.rounds.down_bytes = {"0": 1_000_000, "5": 2_500_000}  # what configure_fit sent each
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
    from simulations.papers.fes.table import time_to

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
        FewShotStrategy(cfg_of("fes", eval_every=2), TASKS["demo"])


def test_plan_search_script_probes_plans_and_picks_a_frozen_depth(capsys):
    from simulations.papers.fes.plan import main

    assert main(["--dataset", "demo", "--gold", "8", "--epochs", "1", "--eval-size", "20", "--max-length", "32",
                 "--tolerance", "1.0", "--eval-on", "heldout"]) == 0
    out = capsys.readouterr().out
    assert out.count("| bias-only") <= 4  # f = 0, then a binary search over 1..5
    # a tolerance of 1.0 accepts any accuracy: the search ends at the deepest freeze that
    # still trains something (no full layer by default: the biases of the top layer)
    assert "chosen: fes.frozen-layers=5 fes.bias-layers=1" in out


def test_plan_search_can_test_on_train_texts_outside_its_gold_set_instead_of_the_reported_test_texts():
    from fedtext.learning.data import load_splits, server_test
    from simulations.papers.fes.plan import EVAL_SETS, heldout_rows

    rows = heldout_rows(50, np.array([3, 7, 9]), 10, seed=0)
    assert len(rows) == 10 and not set(rows.tolist()) & {3, 7, 9} and rows.tolist() == sorted(set(rows.tolist()))
    assert rows.max() < 50 and heldout_rows(5, np.array([0, 1]), 10, seed=0).tolist() == [2, 3, 4]
    cfg = cfg_of("fes", eval_size=20)
    train = load_splits("demo").train
    gold = np.arange(8)
    held = EVAL_SETS["heldout"](cfg, train, gold, 0)
    want = train.iloc[heldout_rows(len(train), gold, 20, 0)]
    assert held["text"].tolist() == want["text"].tolist() and len(held) == 20
    # the default: the very texts a run with the same seed and eval-size reports on
    assert EVAL_SETS["test"](cfg, train, gold, 0)["text"].tolist() == server_test(cfg)["text"].tolist()


def test_fedcls_is_vanilla_fine_tuning_one_rate_for_every_weight_unless_head_lr():
    """FedCLS as the paper's §4.1 / the authors' code: the checkpoint's [CLS] head, every
    weight (pooler included) trained at the same rate; ``head-lr`` gives the head its own."""
    cfg = cfg_of("fedcls", gold_labels=8, unlabeled_size=20)
    assert cfg.resolved_head == "cls"
    client = client_class("fedcls")(cfg, TASKS["demo"], client_data(cfg, 0, 3), state=RecordDict())
    net = client.model.load(client.model.initial_arrays())
    names = [n for n, _ in net.named_trainable()]
    assert names[-4:] == ["pooler.dense.weight", "pooler.dense.bias", "head.weight", "head.bias"]
    assert len(names) == len(list(net.named_parameters()))  # full fine-tuning
    groups = client.optimizer(net).param_groups
    assert [g["lr"] for g in groups] == [5e-5] and sum(len(g["params"]) for g in groups) == len(names)
    fast = cfg_of("fedcls", gold_labels=8, unlabeled_size=20, head="linear", head_lr=5e-3)
    client = client_class("fedcls")(fast, TASKS["demo"], client_data(fast, 0, 3), state=RecordDict())
    groups = client.optimizer(client.model.load(client.model.initial_arrays())).param_groups
    assert sorted((g["lr"], len(g["params"])) for g in groups) == [(5e-5, len(names) - 2), (5e-3, 2)]


def test_the_config_accepts_exactly_the_votes_there_are() -> None:
    """``fes.vote`` is validated against the config's names; each has its function."""
    from fedtext.methods.fes.config import VOTE_NAMES

    assert tuple(VOTES) == VOTE_NAMES == ("eq2", "votek")
    with pytest.raises(ConfigError, match="unknown fes.vote 'fast'; choose one of: eq2, votek"):
        cfg_of("fes", vote="fast")


def test_the_config_accepts_exactly_the_pseudo_picks_there_are() -> None:
    """``fes.pseudo-pick`` is validated against the config's names (the config imports no
    model code); each must have its function and no function may be unreachable."""
    from fedtext.methods.fes.config import PSEUDO_PICK_NAMES
    from fedtext.methods.fes.labels import PSEUDO_PICKS

    assert tuple(PSEUDO_PICKS) == PSEUDO_PICK_NAMES
