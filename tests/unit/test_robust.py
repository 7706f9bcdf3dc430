"""Issue 58: robust aggregation (``aggregator``, ``update-clip``) and the simulated attacks.

The aggregators are Flower's own math: each is driven here beside Flower's strategy of the
same name (``FedMedian``, ``FedTrimmedAvg``, ``Krum``) on the same fit replies, and checked on
hand-computed values where one wrong index or weighting would show. The headline case is the
issue's: one client sending a 1,000x update moves the global model by no more than an honest
client's share under ``update-clip`` and not at all past the honest range under the median.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status
from flwr.server.strategy import FedMedian, FedTrimmedAvg, Krum

from fedtext.client import attacks

from fedtext.common import comm, config

from fedtext.trust import robust
from fedtext.common.config import ConfigError
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from strategies.feddpg import FedDPG
from strategies.fedprompt import FedPrompt


def fit_res(arrays, n, pid):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5}))


def strategy(backbone, **keys):
    cfg = make_config("fedprompt", prompt_length=2, max_length=64, **keys)
    strat = FedPrompt(cfg, TASKS["demo"])
    strat.global_arrays = [np.zeros_like(a) for a in strat.initial_arrays()]
    strat.rounds.begin(1)
    return strat


def uploads(shape, values):
    """One prompt per value: every coordinate that value, except coordinate [0, 0] = value * 10
    (so that per-coordinate statistics differ from the whole-vector ones)."""
    out = []
    for v in values:
        a = np.full(shape, v, np.float32)
        a[0, 0] = v * 10
        out.append(a)
    return out


def aggregated(strat, prompts, counts):
    params, metrics = strat.aggregate_fit(1, [fit_res([p], n, k) for k, (p, n) in enumerate(zip(prompts, counts))], [])
    return comm.decode(params)[0], metrics


# ------------------------------------------------------------- one definition
def test_the_configs_choices_are_the_registries_keys():
    assert tuple(robust.AGGREGATORS) == tuple(config.AGGREGATORS)
    assert tuple(attacks.ATTACKS) == tuple(config.ATTACKS)


# ------------------------------------------------------------- equal to Flower's strategies
@pytest.mark.parametrize(("keys", "flower"), [
    ({"aggregator": "median"}, FedMedian()),
    ({"aggregator": "trimmed-mean", "trim_beta": 0.2}, FedTrimmedAvg(beta=0.2)),
    ({"aggregator": "krum", "krum_malicious": 1}, Krum(num_malicious_clients=1, num_clients_to_keep=0)),
    ({"aggregator": "krum", "krum_malicious": 1, "krum_keep": 3},
     Krum(num_malicious_clients=1, num_clients_to_keep=3)),
])
def test_each_aggregator_equals_flowers_strategy_on_the_same_replies(backbone, keys, flower):
    strat = strategy(backbone, **keys)
    rng = np.random.default_rng(5)
    shape = strat.global_arrays[0].shape
    prompts = [rng.normal(size=shape).astype(np.float32) for _ in range(5)] + [np.full(shape, 50, np.float32)]
    counts = [3, 1, 4, 1, 5, 9]
    results = [fit_res([p], n, k) for k, (p, n) in enumerate(zip(prompts, counts))]
    ours, _ = strat.aggregate_fit(1, results, [])
    theirs, _ = flower.aggregate_fit(1, results, [])
    got, want = comm.decode(ours)[0], comm.decode(theirs)[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6)


def test_median_and_trimmed_mean_per_coordinate_by_hand(backbone):
    med = strategy(backbone, aggregator="median")
    shape = med.global_arrays[0].shape
    # 9.0 (90 at [0, 0]) stays inside upload-bound's 100 x max(1, |x_t|) around x_t = 0
    got, _ = aggregated(med, uploads(shape, [1.0, 2.0, 9.0]), [1, 1, 50])  # counts ignored
    assert got[0, 0] == 20.0 and got[0, 1] == 2.0
    trim = strategy(backbone, aggregator="trimmed-mean", trim_beta=0.2)
    # 5 uploads, beta 0.2: one cut at each end, the mean of the middle three
    got, _ = aggregated(trim, uploads(shape, [-9.0, 1.0, 2.0, 6.0, 9.5]), [1] * 5)
    assert got[0, 1] == pytest.approx(3.0) and got[0, 0] == pytest.approx(30.0)
    # beta 0.19: int(0.95) = 0 cut, the plain mean of all five
    none_cut = strategy(backbone, aggregator="trimmed-mean", trim_beta=0.19)
    got, _ = aggregated(none_cut, uploads(shape, [-9.0, 1.0, 2.0, 6.0, 9.5]), [1] * 5)
    assert got[0, 1] == pytest.approx(9.5 / 5)


def test_krum_picks_the_upload_closest_to_its_neighbours_and_multi_krum_weights_the_kept(backbone):
    strat = strategy(backbone, aggregator="krum", krum_malicious=1)
    shape = strat.global_arrays[0].shape
    # four honest around 1 (0.9, 1.0, 1.05, 1.3), one far: n - f - 2 = 2 nearest; 1.0's are nearest
    prompts = uploads(shape, [0.9, 1.0, 1.05, 1.3, 40.0])
    got, _ = aggregated(strat, prompts, [1, 1, 1, 1, 100])
    np.testing.assert_array_equal(got, prompts[1])
    # Krum keeps an upload itself, read in place from its reply (comm.view): the global model is the server's copy
    assert strat.global_arrays[0].flags.writeable
    keep = strategy(backbone, aggregator="krum", krum_malicious=1, krum_keep=2)
    got, _ = aggregated(keep, prompts, [1, 3, 1, 1, 100])  # the two best: 1.0 (3 examples) and 1.05 (1)
    np.testing.assert_allclose(got, (3 * prompts[1] + prompts[2]) / 4, rtol=1e-6)


@pytest.mark.parametrize("keep", [3, 4, 5])
def test_multi_krum_keeping_more_than_the_round_uploaded_averages_every_upload(backbone, keep):
    """A short round (3 uploads) under krum-keep >= 3: the example-weighted mean of all three,
    (p0 + 2 p1 + p2) / 4. Flower slices the best scores from index n - keep: uncapped, keep 4 would
    keep the best one only (start -1) and keep 5 the best two (start -2)."""
    strat = strategy(backbone, aggregator="krum", krum_malicious=0, krum_keep=keep)
    prompts = uploads(strat.global_arrays[0].shape, [1.0, 1.1, 5.0])
    got, _ = aggregated(strat, prompts, [1, 2, 1])
    np.testing.assert_allclose(got, (prompts[0] + 2 * prompts[1] + prompts[2]) / 4, rtol=1e-6)


def test_feddpg_keeps_its_uniform_weights_under_multi_krum(backbone):
    cfg = make_config("feddpg", max_length=64, aggregator="krum", krum_keep=2)
    strat = FedDPG(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    base = strat.global_arrays
    a, b = [x + 0.1 for x in base], [x + 0.3 for x in base]
    params, _ = strat.aggregate_fit(1, [fit_res(a, 1, 0), fit_res(b, 9, 1)], [])
    for got, x, y in zip(comm.decode(params), a, b, strict=True):
        np.testing.assert_allclose(got, (x + y) / 2, rtol=1e-5, atol=1e-7)  # eq. (1): 1:1, not 1:9


# ------------------------------------------------------------- the 1,000x update
def test_a_1000x_update_moves_the_clipped_mean_by_no_more_than_an_honest_share(backbone):
    strat = strategy(backbone, update_clip=1.0)
    shape = strat.global_arrays[0].shape
    honest = [np.full(shape, 0.01, np.float32), np.full(shape, 0.02, np.float32)]
    attack = np.full(shape, 0.03 * 1000, np.float32)
    got, metrics = aggregated(strat, [*honest, attack], [1, 1, 1])
    norms = [float(np.linalg.norm(u.astype(np.float64))) for u in (*honest, attack)]
    assert metrics["clipped"] == 1 and metrics["clip_bound"] == pytest.approx(norms[1])  # the median norm
    # the attacker's clipped update is the median's length along its own direction: 0.02 per coordinate
    np.testing.assert_allclose(got, np.full(shape, (0.01 + 0.02 + 0.02) / 3), rtol=1e-5)
    # without the bound the same round moves every coordinate by ~10
    plain, _ = aggregated(strategy(backbone), [*honest, attack], [1, 1, 1])
    assert float(plain.min()) > 9.9


def test_the_clip_is_against_the_global_arrays_sent_not_zero(backbone):
    strat = strategy(backbone, update_clip=2.0)
    strat.global_arrays = [np.full_like(strat.global_arrays[0], 5.0)]
    shape = strat.global_arrays[0].shape
    ups = [np.full(shape, 5.1, np.float32), np.full(shape, 5.2, np.float32), np.full(shape, 9.0, np.float32)]
    got, metrics = aggregated(strat, ups, [1, 1, 1])
    # updates 0.1, 0.2, 4.0 per coordinate; bound 2 x median = 0.4 per coordinate's worth
    assert metrics["clipped"] == 1
    np.testing.assert_allclose(got, np.full(shape, 5.0 + (0.1 + 0.2 + 0.4) / 3), rtol=1e-5)


def test_a_1000x_update_under_the_median_stays_within_the_honest_range(backbone):
    strat = strategy(backbone, aggregator="median")
    shape = strat.global_arrays[0].shape
    ups = [np.full(shape, 0.01, np.float32), np.full(shape, 0.02, np.float32), np.full(shape, 30.0, np.float32)]
    got, _ = aggregated(strat, ups, [1, 1, 400])  # the weight lie on top: the median ignores counts
    np.testing.assert_array_equal(got, ups[1])


def test_one_upload_is_never_clipped(backbone):
    strat = strategy(backbone, update_clip=1.0)
    up = np.full(strat.global_arrays[0].shape, 3.0, np.float32)
    got, metrics = aggregated(strat, [up], [1])
    np.testing.assert_array_equal(got, up)
    assert metrics["clipped"] == 0


def test_the_robust_result_feeds_the_server_optimizer(backbone):
    strat = strategy(backbone, aggregator="median", server_optimizer="fedavg", server_lr=0.5)
    shape = strat.global_arrays[0].shape
    got, _ = aggregated(strat, uploads(shape, [1.0, 2.0, 9.0]), [1, 1, 1])
    assert got[0, 1] == pytest.approx(1.0)  # x_t + 0.5 (median - x_t) with x_t = 0
    assert got[0, 0] == pytest.approx(10.0)


# ------------------------------------------------------------- config
@pytest.mark.parametrize(("method", "keys", "words"), [
    ("fedbpt", {"aggregator": "median"}, "fedbpt: aggregator=median needs a server that averages arrays"),
    ("feddls", {"update_clip": 1.0}, "feddls: update-clip=1.0 needs a server that averages arrays"),
    ("fedkseed", {"attack": "scale"}, "fedkseed: attack=scale needs a server that averages arrays"),
    ("fedprompt", {"aggregator": "medain"}, "unknown aggregator 'medain'"),
    ("fedprompt", {"aggregator": "trimmed-mean", "trim_beta": 0.5}, "trim-beta must be < 0.5"),
    ("fedprompt", {"aggregator": "median", "trim_beta": 0.3}, "trim-beta=0.3 is read by aggregator=trimmed-mean only"),
    ("fedprompt", {"aggregator": "median", "krum_keep": 2}, "krum-keep=2 is read by aggregator=krum only"),
    ("fedprompt", {"aggregator": "krum", "krum_keep": 3, "clients_per_round": 2}, "krum-keep=3 exceeds"),
    ("fedprompt", {"update_clip": -1.0}, "update-clip must be >= 0"),
    ("fedprompt", {"attack": "sign-flip", "attack_scale": 5.0}, "attack-scale=5.0 is read by attack=scale only"),
    ("fedprompt", {"attack": "scale", "attack_partitions": "0,x"}, "attack-partitions must be comma-separated"),
    ("fedprompt", {"attack": "scale", "attack_scale": 0.0}, "attack-scale must be > 0"),
])
def test_bad_robustness_keys_are_one_line_at_config_time(method, keys, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")) as err:
        make_config(method, **keys)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------- the attacks
def test_each_attack_by_hand_and_only_on_its_partitions():
    cfg = make_config("fedprompt", attack="scale", attack_scale=10.0, attack_partitions="1,3")
    sent = [np.array([1.0, 2.0], np.float32)]
    honest = attacks.Reply([np.array([1.5, 1.0], np.float32)], 16)
    assert attacks.for_client(cfg, 0) is None and attacks.for_client(cfg, 2) is None
    scaled = attacks.for_client(cfg, 3)(sent, honest, 480)
    np.testing.assert_array_equal(scaled.arrays[0], [6.0, -8.0])  # x_t + 10 (x_k - x_t)
    assert scaled.arrays[0].dtype == np.float32 and scaled.num_examples == 16
    flip = attacks.for_client(make_config("fedprompt", attack="sign-flip", attack_partitions="1"), 1)
    np.testing.assert_array_equal(flip(sent, honest, 480).arrays[0], [0.5, 3.0])  # x_t - (x_k - x_t)
    lie = attacks.for_client(make_config("fedprompt", attack="weight-lie", attack_partitions="1"), "1")
    lied = lie(sent, honest, 480)
    assert lied.num_examples == 480 and lied.arrays is honest.arrays
    assert attacks.for_client(make_config("fedprompt"), 0) is None  # attack=none: nobody


# ------------------------------------------------------------- issue 69: inputs that ran as if they worked
class _Node(SimpleNamespace):
    """A connected SuperNode answering its node config (``partition-id`` ``pid`` of ``parts``)."""

    __hash__ = object.__hash__

    def get_properties(self, ins, timeout, group_id):
        return SimpleNamespace(properties={"partition_id": self.pid, "num_partitions": self.parts})


def _manager(parts):
    from flwr.server import SimpleClientManager

    manager = SimpleClientManager()
    for pid in range(parts):
        manager.register(_Node(cid=f"n{pid}", pid=pid, parts=parts))
    return manager


@pytest.mark.parametrize(("keys", "words"), [
    ({"krum_malicious": 5, "clients_per_round": 3},
     "aggregator=krum with krum-malicious=5 needs at least 13 clients a round (Krum's n >= 2f + 3, Blanchard et al. "
     "2017), got clients-per-round=3: lower krum-malicious or sample more clients"),
    ({"krum_malicious": 1, "clients_per_round": 4}, "needs at least 5 clients a round (Krum's"),
    ({"krum_malicious": 1, "krum_keep": 2, "clients_per_round": 4}, "needs at least 5 clients a round (multi-Krum's"),
    ({"clients_per_round": 2}, "krum-malicious=0 needs at least 3 clients a round"),
])
def test_krum_with_too_few_clients_a_round_for_its_guarantee_is_one_line_at_config_time(keys, words):
    """Issue 69: krum-malicious=5 with 3 clients a round ran as if robust (Flower scores by at least
    one neighbour); Blanchard et al. 2017 need n >= 2f + 3. The bound itself is accepted."""
    with pytest.raises(ConfigError) as err:
        make_config("fedprompt", aggregator="krum", **keys)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert make_config("fedprompt", aggregator="krum", krum_malicious=5, clients_per_round=13).krum_malicious == 5
    assert make_config("fedprompt", aggregator="krum", krum_malicious=1, krum_keep=2, clients_per_round=5).krum_keep == 2


def test_krum_over_every_participant_is_checked_when_the_server_first_draws(backbone):
    """clients-per-round=0 (every participant): n is known only at the first draw; 3 participants
    with f = 1 are refused there in one line, 5 are drawn."""
    strat = strategy(backbone, aggregator="krum", krum_malicious=1)
    with pytest.raises(ConfigError, match=r"^aggregator=krum with krum-malicious=1 needs at least 5 clients a round "
                                          r"\(Krum's n >= 2f \+ 3, Blanchard et al\. 2017\), got clients-per-round=0 "
                                          r"with 3 participant clients"):
        strat.sample_clients(1, _manager(3))
    ok = strategy(backbone, aggregator="krum", krum_malicious=1)
    assert len(ok.sample_clients(1, _manager(5))) == 5


def test_attack_partitions_outside_the_federation_are_refused_before_training(backbone):
    """Issue 69: attack-partitions=99 with 3 partitions ran with no attack at all. The server
    refuses it once the nodes report num-partitions (before any client trains); partition
    num-partitions - 1 attacks; attack=none reads no attack-partitions."""
    cfg = make_config("fedprompt", attack="scale", attack_partitions="1,99")
    with pytest.raises(ConfigError) as err:
        cfg.check_num_partitions(3)
    assert str(err.value) == ("attack-partitions='1,99' names partition 99, outside 0..2 (num-partitions=3; a "
                              "simulation's num-supernodes): no client holds it, so attack=scale would not happen")
    with pytest.raises(ConfigError, match="names partition 3, outside 0..2"):  # the top of the range
        make_config("fedprompt", attack="sign-flip", attack_partitions="3").check_num_partitions(3)
    make_config("fedprompt", attack="sign-flip", attack_partitions="2").check_num_partitions(3)
    make_config("fedprompt", attack_partitions="99").check_num_partitions(3)  # attack=none: nobody attacks anyway
    strat = strategy(backbone, attack="scale", attack_partitions="99")
    with pytest.raises(ConfigError, match="^attack-partitions='99' names partition 99, outside 0..2"):
        strat.sample_clients(1, _manager(3))


def test_flames_bound_counts_every_update_it_clips() -> None:
    """Three updates of norms 1, 2 and 3 (along e0 from x_t = 0), factor 0.5: bound = 0.5 x the median
    2 = 1, so the updates of norm 2 and 3 are scaled to norm 1 and counted (2, not 1), the first kept."""
    reference = [np.zeros(3, np.float32)]
    arrays = [[np.array([n, 0.0, 0.0], np.float32)] for n in (1.0, 2.0, 3.0)]
    out, clipped, bound = robust.clip_updates(arrays, reference, 0.5)
    assert (clipped, bound) == (2, 1.0)
    assert [float(u[0][0]) for u in out] == [1.0, 1.0, 1.0] and out[0] is arrays[0]


def test_norms_and_scaled_updates_are_computed_in_float64() -> None:
    """A float32 update of 1e20 (x_t = 0): its square overflows float32 (max ~3.4e38), so the norm
    must be taken in float64 (1e20, not inf). And x_t + 1 · (x_k - x_t) must give x_k back: with
    x_t = -1 and x_k = 3e-8 in float32, float32's difference 1.00000003 rounds to 1 and the sum to 0;
    float64's keeps x_k."""
    x_t = [np.zeros(2, np.float32)]
    norm = float(robust.update_norms([[np.array([1e20, 0.0], np.float32)]], x_t)[0])
    assert np.isfinite(norm) and norm == pytest.approx(float(np.float32(1e20)), rel=1e-12)
    (d,) = robust.along([np.array([-1.0], np.float32)], [np.array([3e-8], np.float32)], 1.0)
    assert d.dtype == np.float32 and d[0] == np.float32(3e-8)


def test_a_robust_aggregate_takes_the_global_arrays_dtypes_and_the_mean_stays_flowers() -> None:
    """``robust.combine`` casts a robust aggregator's arrays to the dtypes of ``like`` (the global
    arrays; the uploads' own where ``like`` is empty) and leaves the mean as Flower returns it.
    The dtypes show which ran: the median of the int64 uploads 1, 2, 4, 5 is 3.0 in float64, cast to
    the int64 global 3; the median of float64 uploads 1, 2, 4 under float16 global arrays comes back
    float16, their mean (Flower's, in the uploads' own dtype) float64 7/3; one int32 upload with no
    ``like`` comes back int32 (the first upload's dtypes: there is no second)."""
    median, mean = make_config("fedprompt", aggregator="median"), make_config("fedprompt")
    ints = [[np.array([v], np.int64)] for v in (1, 2, 4, 5)]
    (got,) = robust.combine(ints, [1] * 4, median, [np.zeros(1, np.int64)])
    assert got.dtype == np.int64 and got[0] == 3
    wide = [[np.array([v], np.float64)] for v in (1.0, 2.0, 4.0)]
    (got,) = robust.combine(wide, [1] * 3, median, [np.zeros(1, np.float16)])
    assert got.dtype == np.float16 and got[0] == 2.0
    (got,) = robust.combine(wide, [1] * 3, mean, [np.zeros(1, np.float16)])
    assert got.dtype == np.float64 and got[0] == pytest.approx(7 / 3, rel=1e-15)
    (got,) = robust.combine([[np.array([7], np.int32)]], [1], median, [])
    assert got.dtype == np.int32 and got[0] == 7


def test_the_strategy_casts_a_robust_aggregate_to_its_global_arrays_not_to_the_uploads(backbone) -> None:
    """``FedTextStrategy.combine`` hands ``robust.combine`` the global arrays as ``like``: with float64
    global arrays (a server optimizer's arithmetic may leave them so) and float32 uploads, the median
    comes back float64, the global arrays' dtype."""
    strat = strategy(backbone, aggregator="median")
    strat.global_arrays = [a.astype(np.float64) for a in strat.global_arrays]
    shape = strat.global_arrays[0].shape
    ups = [SimpleNamespace(array_list=lambda p=p: [p]) for p in uploads(shape, [1.0, 2.0, 9.0])]
    (got,), _ = strat.combine(ups, [1, 1, 1])
    assert got.dtype == np.float64 and got[0, 1] == 2.0
