"""FedKSeed (Qin et al. 2024): the zeroth-order step, the per-seed sums, the server's
accumulator, the replay from w_0, the seeds, the drops, the bytes and the queries, on
hand-computed values.

The toy loss is ``L(w) = 1/2 ||w - t||^2`` over two small tensors: its central difference
is exact, so ``g = (L+ - L-) / (2 eps) = z . (w - t)`` to float precision.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import RecordDict
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.node.node import make_client
from fedtext.common.config import ConfigError
from fedtext.methods.fedkseed.model import (FedKSeedModel, accumulate, add_direction, candidate_seeds,
                                            directions, projected_gradient, replay, round_outliers, seed_sums,
                                            upload_scale, zo_step)
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from strategies.fedkseed import FedKSeedStrategy

SHAPES = [(3, 2), (4,)]


def toy(seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(1000 + seed)
    w = [torch.randn(s, generator=gen) for s in SHAPES]
    t = [torch.randn(s, generator=gen) for s in SHAPES]
    return w, t


def half_sq(w: list[torch.Tensor], t: list[torch.Tensor]) -> float:
    return float(sum(0.5 * ((a - b) ** 2).sum() for a, b in zip(w, t, strict=True)))


def flat(ts: list[torch.Tensor]) -> np.ndarray:
    return np.concatenate([x.detach().double().numpy().ravel() for x in ts])


# ----------------------------------------------------------------- the local step
def test_projected_gradient_is_the_central_difference_over_two_eps():
    assert projected_gradient(3.0, 1.0, 0.5) == 2.0  # (3 - 1) / (2 * 0.5)
    assert projected_gradient(1.0, 3.0, 0.25) == -4.0


def test_directions_are_one_generator_per_seed_drawn_per_tensor_in_order():
    params = [torch.zeros(s) for s in SHAPES]
    gen = torch.Generator().manual_seed(77)
    by_hand = [torch.randn((3, 2), generator=gen), torch.randn((4,), generator=gen)]
    z = directions(params, 77)
    assert all(torch.equal(a, b) for a, b in zip(z, by_hand, strict=True))
    assert not torch.equal(directions(params, 78)[0], z[0])


def test_directions_are_drawn_in_float32_then_take_each_weights_dtype_and_device():
    # float64 weights get the float32 draw widened (the same numbers as on a float32 node),
    # and z lives where its weight lives ("meta" stands in for a GPU: no data, only a device)
    gen = torch.Generator().manual_seed(9)
    drawn32 = torch.randn((3, 2), generator=gen, dtype=torch.float32)
    z = directions([torch.zeros((3, 2), dtype=torch.float64)], 9)
    assert z[0].dtype == torch.float64
    assert torch.equal(z[0], drawn32.double())
    on_meta = directions([torch.zeros((3, 2), device="meta"), torch.zeros((4,), device="meta", dtype=torch.float16)], 9)
    assert [(t.device.type, t.dtype) for t in on_meta] == [("meta", torch.float32), ("meta", torch.float16)]


def test_directions_do_not_follow_torchs_default_dtype():
    # z is drawn in float32 whatever torch's default dtype on a node (a host process may set float64):
    # a float64 draw is the float32 one before rounding, so float64 weights would get other low bits
    by_hand = directions([torch.zeros((3, 2))], 11)[0].double()
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        z = directions([torch.zeros((3, 2), dtype=torch.float64)], 11)[0]
    finally:
        torch.set_default_dtype(before)
    assert z.dtype == torch.float64
    assert torch.equal(z, by_hand)


def test_replay_draws_every_non_zero_entry_one_included():
    w0, _ = toy()
    seeds = candidate_seeds(4, 3)
    w = [x.clone() for x in w0]
    assert replay(w, w0, np.array([1.0, 0.0, -2.0], np.float32), seeds, 0.5) == 2
    by_hand = flat(w0) - 0.5 * (flat(directions(w0, seeds[0])) - 2.0 * flat(directions(w0, seeds[2])))
    np.testing.assert_allclose(flat(w), by_hand, atol=1e-6)


def test_add_direction_moves_each_weight_by_scale_z_and_refuses_a_length_mismatch():
    w = [torch.tensor([1.0, -2.0]), torch.tensor([0.5])]
    add_direction(w, [torch.tensor([2.0, 4.0]), torch.tensor([-1.0])], -0.25)
    assert [x.tolist() for x in w] == [[0.5, -3.0], [0.75]]  # w - 0.25 z
    with pytest.raises(ValueError):  # a z for another model (one tensor more) is never half-applied silently
        add_direction(w, [torch.ones(2), torch.ones(1), torch.ones(3)], 1.0)


def test_a_zeroth_order_step_estimates_the_directional_derivative_and_descends_along_z():
    w, t = toy()
    w_before = flat(w)
    eps, lr, seed = 1e-2, 0.05, 5
    z = flat(directions(w, seed))
    g, mean_loss = zo_step(w, seed, eps, lr, lambda: half_sq(w, t))
    by_hand_g = float(z @ (w_before - flat(t)))  # the exact directional derivative of the quadratic
    assert g == pytest.approx(by_hand_g, rel=1e-4)
    # w <- w - lr g z: a flipped sign (w + lr g z) or a dropped lr would land elsewhere
    np.testing.assert_allclose(flat(w), w_before - lr * g * z, atol=1e-5)
    # the mean of L+ and L- is L(w) + eps^2 ||z||^2 / 2 for the quadratic
    assert mean_loss == pytest.approx(0.5 * ((w_before - flat(t)) ** 2).sum() + 0.5 * eps**2 * (z @ z), rel=1e-4)
    assert half_sq(w, t) < 0.5 * ((w_before - flat(t)) ** 2).sum()  # a small step along -g z descends


# ------------------------------------------------------------- uploads and server
def test_seed_sums_add_each_steps_g_at_its_seed_index():
    got = seed_sums([0, 2, 0, 3], [1.5, -2.0, 0.25, 4.0], 5)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [1.75, 0.0, -2.0, 4.0, 0.0])


def test_seed_sums_of_no_step_are_zero_at_every_seed():
    # an empty list of indices is still an integer index array (np.asarray([]) alone is float64,
    # which numpy refuses as an index): no step, no gradient anywhere
    got = seed_sums([], [], 3)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0])


def test_the_server_adds_the_example_weighted_mean_of_the_sums_to_the_accumulator():
    a = np.array([1.0, 0.0, 0.0], np.float32)
    g1, g2 = np.array([2.0, 0.0, -1.0], np.float32), np.array([-1.0, 3.0, 0.0], np.float32)
    # n = 1 and 3: mean = 0.25 g1 + 0.75 g2 = [-0.25, 2.25, -0.25]
    got = accumulate(a, [g1, g2], [1, 3])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [0.75, 2.25, -0.25], rtol=0, atol=1e-7)


def test_the_servers_mean_is_summed_in_float64_and_rounded_to_float32_once():
    # n = 1 and 2, G = 1 and 2: A = 0 + (1 * 1 + 2 * 2) / 3 = 5/3, rounded once to float32
    # (1.66666663); summing (1/3) * 1 + (2/3) * 2 in float32 would give the next float up, 1.66666675
    got = accumulate(np.zeros(1, np.float32), [np.array([1.0], np.float32), np.array([2.0], np.float32)], [1, 2])
    assert got[0] == np.float32(5 / 3)
    assert got[0] != np.float32(1 / 3) * np.float32(1.0) + np.float32(2 / 3) * np.float32(2.0)


def test_accumulate_refuses_uploads_and_weights_of_different_lengths():
    with pytest.raises(ValueError):  # a weight per upload: one missing must not drop an upload silently
        accumulate(np.zeros(2, np.float32), [np.ones(2, np.float32), np.ones(2, np.float32)], [1])


def test_replaying_the_sums_from_w0_gives_the_weights_the_client_reached():
    """A client at w = w_0 - lr sum A z takes steps; replaying A + G from w_0 gives its weights."""
    w0, t = toy()
    seeds = candidate_seeds(3, 4)
    lr, eps = 0.02, 1e-3
    a = np.array([0.5, 0.0, -1.0, 0.0], np.float32)
    w = [x.clone() for x in w0]
    assert replay(w, w0, a, seeds, lr) == 2  # only A[0] and A[2] are non-zero: two z drawn, zeros skipped
    by_hand = flat(w0) - lr * (0.5 * flat(directions(w0, seeds[0])) - 1.0 * flat(directions(w0, seeds[2])))
    np.testing.assert_allclose(flat(w), by_hand, atol=1e-6)
    picks = [1, 2, 1, 0, 3]
    grads = [zo_step(w, seeds[k], eps, lr, lambda: half_sq(w, t))[0] for k in picks]
    g = seed_sums(picks, grads, 4)
    rebuilt = [torch.zeros(s) for s in SHAPES]
    assert replay(rebuilt, w0, accumulate(a, [g], [1]), seeds, lr) == 4  # every seed in use drawn once
    np.testing.assert_allclose(flat(rebuilt), flat(w), atol=1e-5)


def test_replay_refuses_a_w0_of_another_length():
    w0, _ = toy()
    params = [x.clone() for x in w0]
    with pytest.raises(ValueError):  # a w_0 with a tensor more (another model): never a partial copy taken as w
        replay(params, [*w0, torch.zeros(2)], np.zeros(2, np.float32), candidate_seeds(0, 2), 0.1)


# ----------------------------------------------------------------------- seeds
def test_candidate_seeds_come_from_the_run_seed_alone():
    assert candidate_seeds(0, 8) == candidate_seeds(0, 8)
    assert len(set(candidate_seeds(0, 8))) == 8
    assert set(candidate_seeds(0, 8)).isdisjoint(candidate_seeds(1, 8))
    assert candidate_seeds(0, 8)[:4] == candidate_seeds(0, 4)  # K only cuts the list
    assert all(0 <= s < 2**63 for s in candidate_seeds(0, 8))


def test_candidate_seeds_are_the_seed_sequences_64_bit_words_halved():
    # SeedSequence([0, 0xF5EED]).generate_state(4, uint64) = 11746942231144638609, 14896082843053967727,
    # 3268819758365510191, 13465634423634635993; each >> 1 (below 2**63 for torch's manual_seed)
    assert candidate_seeds(0, 4) == [5873471115572319304, 7448041421526983863, 1634409879182755095,
                                     6732817211817317996]


@pytest.fixture(scope="module")
def kseed(tmp_path_factory):
    """A 4-seed FedKSeed run on the demo task: its strategy at round 1."""
    cfg = make_config("fedkseed", seeds=4, local_steps=3, batch_size=4, max_length=64, seed=0,
                      output_dir=str(tmp_path_factory.mktemp("kseed")))
    strat = FedKSeedStrategy(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    return strat


def test_server_and_client_models_replay_a_to_identical_weights(kseed):
    a = np.array([0.0, 2.0, 0.0, -1.0], np.float32)
    other = FedKSeedModel(kseed.cfg, kseed.backbone)  # what a client builds
    server_net, client_net = kseed.model.load([a]), other.load([a])
    assert other.seeds == kseed.model.seeds
    for (name, p), (_, q) in zip(server_net.named_trainable(), client_net.named_trainable(), strict=True):
        assert torch.equal(p, q), name
    # and one tensor by hand: w_0 - lr (2 z_1 - z_3), z drawn over every weight in order
    lr = kseed.cfg.method_config.lr
    w0 = dict(kseed.backbone.named_parameters())
    names = [n for n, _ in server_net.named_trainable()]
    i = names.index("encoder.layer.5.output.LayerNorm.bias")  # the 102nd of 103 tensors: z_k drawn in order
    params = [p for _, p in server_net.named_trainable()]
    z1, z3 = directions(params, kseed.model.seeds[1])[i], directions(params, kseed.model.seeds[3])[i]
    expected = w0[names[i]].detach() - lr * (2.0 * z1 - z3)
    torch.testing.assert_close(params[i], expected, atol=1e-6, rtol=0)


def test_clients_of_one_process_replay_a_once_and_hold_its_weights_bit_for_bit(kseed, monkeypatch):
    """The second client (and a client after local training) copies the process's last replay of
    the same A; another A, or another run seed, replays again. The copies equal a fresh replay."""
    from fedtext.methods.fedkseed import model as kseed_model

    kseed_model.REPLAYED.clear()
    calls = []
    real = kseed_model.replay
    monkeypatch.setattr(kseed_model, "replay", lambda *a, **k: calls.append(1) or real(*a, **k))
    a = np.array([0.5, 0.0, -1.0, 3.0], np.float32)
    first, second = FedKSeedModel(kseed.cfg, kseed.backbone), FedKSeedModel(kseed.cfg, kseed.backbone)
    first.load([a])
    second.load([a])
    assert len(calls) == 1
    with torch.no_grad():  # a client trains in place, then loads the round's A again
        for _, p in second.network.named_trainable():
            p.add_(1.0)
    second.forget()
    net = second.load([a])
    assert len(calls) == 1
    kseed_model.REPLAYED.clear()
    fresh = FedKSeedModel(kseed.cfg, kseed.backbone).load([a])
    assert len(calls) == 2
    for (name, p), (_, q), (_, r) in zip(net.named_trainable(), fresh.named_trainable(),
                                         first.network.named_trainable(), strict=True):
        assert torch.equal(p, q) and torch.equal(r, q), name
    with torch.no_grad():  # the client that replayed trains in place: the process's copy stays the replay's
        for _, p in fresh.named_trainable():
            p.add_(1.0)
    third = FedKSeedModel(kseed.cfg, kseed.backbone).load([a])
    assert len(calls) == 2
    for (name, p), (_, r) in zip(third.named_trainable(), first.network.named_trainable(), strict=True):
        assert torch.equal(p, r), name
    FedKSeedModel(kseed.cfg, kseed.backbone).load([a * 2])  # another A
    FedKSeedModel(make_config("fedkseed", seeds=4, max_length=64, seed=1), kseed.backbone).load([a])  # other seeds
    FedKSeedModel(make_config("fedkseed", seeds=4, max_length=64, lr=2e-4), kseed.backbone).load([a])  # another lr
    assert len(calls) == 5 and len(kseed_model.REPLAYED) == 1


def test_another_run_seed_gives_other_seeds_and_other_weights(kseed):
    cfg = make_config("fedkseed", seeds=4, max_length=64, seed=1)
    other = FedKSeedModel(cfg, kseed.backbone)
    assert set(other.seeds).isdisjoint(kseed.model.seeds)


# ------------------------------------------------------------------------ drops
def fit_res(g, pid, n=4):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode([g]), n, {"partition_id": pid, "train_loss": 0.5}))


def test_bad_uploads_are_dropped_with_their_reason_and_the_rest_aggregated(kseed):
    kseed.global_arrays = kseed.initial_arrays()
    kseed.rounds.begin(1)
    limit = 3 * kseed.cfg.method_config.grad_bound  # local-steps x grad-bound
    honest = np.array([1.0, -2.0, 0.0, limit], np.float32)  # the bound itself is allowed
    nan = np.array([0.0, np.nan, 0.0, 0.0], np.float32)
    huge = np.array([0.0, 0.0, -1.01 * limit, 0.0], np.float32)
    long = np.zeros(5, np.float32)  # a seed index K: out of range
    arrays, metrics = kseed.aggregate_fit(1, [fit_res(honest, 0), fit_res(nan, 1), fit_res(huge, 2),
                                              fit_res(long, 3)], [])
    got = {d["client"]: d["reason"] for d in kseed.record.dropped}
    assert got["1"] == "G: 1 non-finite values"
    assert got["2"] == (f"G: |scalar gradient sum| {1.01 * limit:.3g} exceeds fedkseed.local-steps x "
                        f"fedkseed.grad-bound = {limit:.3g}")
    assert got["3"] == "G: shape (5,), expected (4,)"
    np.testing.assert_array_equal(comm.decode(arrays)[0], honest)  # A_0 = 0 plus the one valid G
    assert metrics == {"seeds_used": 3}


# ---------------------------------------------- the round's scale (issue 58 item 2)
def test_an_uploads_scale_is_the_median_of_its_drawn_seeds_and_the_round_the_lower_median():
    assert upload_scale(np.array([0.0, 2.0, 0.0, -4.0], np.float32)) == 3.0  # median of |2|, |-4|: undrawn 0s left out
    assert upload_scale(np.array([1.0, 0.0, -1.0, 3.0], np.float32)) == 1.0
    assert upload_scale(np.zeros(4, np.float32)) is None  # no seed drawn
    # the median in float64: float32's midpoint of 1 and 1 + 2^-23 rounds to 1 (ties to even)
    assert upload_scale(np.array([1.0, 1.0 + 2**-23], np.float32)) == 1.0 + 2**-24
    a = np.array([0.0, 2.0, 0.0, -4.0], np.float32)  # scale 3
    b = np.array([1.0, 0.0, -1.0, 3.0], np.float32)  # scale 1
    every = np.full(4, -30_000.0, np.float32)  # a large value on every seed: scale 30,000
    # scales sorted [1, 3, 30000]: the lower median is 3, the limit 100 x 3 = 300
    assert round_outliers([a, b, every], 100.0) == [
        None, None,
        "G: |scalar gradient sum| 3e+04 exceeds fedkseed.round-factor x the round's median upload scale "
        "= 100 x 3 = 300"]
    # a largest |G[k]| at the limit is kept: 300 = 100 x 3 (scales [1, 3, 150], lower median 3)
    assert round_outliers([a, b, np.array([300.0, 0.0, 0.0, 0.0], np.float32)], 100.0) == [None] * 3
    # two uploads: the lower median is the smaller scale (the mean of 3 and 30,000 would pass it)
    assert round_outliers([a, every], 100.0)[1].endswith("= 100 x 3 = 300")
    # no round to compare with, or the check off
    assert round_outliers([every], 100.0) == [None]
    assert round_outliers([every, np.zeros(4, np.float32)], 100.0) == [None, None]
    assert round_outliers([a, b, every], 0.0) == [None] * 3


def honest_uploads(rng: np.random.Generator, sigmas: tuple[float, ...], k: int = 64, steps: int = 32):
    """Honest G as the defaults make them: ``steps`` seed indices uniform in [0, k), each step's
    g ~ N(0, sigma^2), summed per seed. sigma 6-11 gives per-upload scales of 4-7 and a largest
    |G[k]| of 20-35, as measured on MiniLM-L6 (the probe's honest clients: 10.9-35.7)."""
    return [seed_sums(rng.integers(0, k, steps), rng.normal(0.0, s, steps), k) for s in sigmas]


@pytest.fixture(scope="module")
def kseed64(tmp_path_factory):
    """FedKSeed at its defaults (K = 64, 32 local steps: the static bound 32 x 1000 = 32,000)."""
    cfg = make_config("fedkseed", max_length=64, seed=0, output_dir=str(tmp_path_factory.mktemp("kseed64")))
    assert cfg.method_config.round_factor == 100.0
    return FedKSeedStrategy(cfg, TASKS["demo"])


def run_round(strat, uploads, weights=(40, 40, 40)):
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    arrays, _ = strat.aggregate_fit(1, [fit_res(g, pid, n) for pid, (g, n) in enumerate(zip(uploads, weights))], [])
    return comm.decode(arrays)[0], {d["client"]: d["reason"] for d in strat.record.dropped}


def test_the_probes_30000_on_one_seed_is_dropped_and_the_honest_mean_kept(kseed64):
    """Issue 58's probe: G = 30,000 on one seed passed the static bound (32,000) and was
    averaged into A; now the round's scale drops it, and A is the honest uploads' mean alone."""
    h1, h2 = honest_uploads(np.random.default_rng(0), (8.0, 6.0))
    probe = np.zeros(64, np.float32)
    probe[5] = 30_000.0
    a, dropped = run_round(kseed64, [h1, h2, probe])
    reference = max(upload_scale(h1), upload_scale(h2))  # scales sorted [h, h', 30000]: the middle one
    assert dropped == {"2": ("G: |scalar gradient sum| 3e+04 exceeds fedkseed.round-factor x the round's median "
                             f"upload scale = 100 x {reference:.3g} = {100 * reference:.3g}")}
    np.testing.assert_array_equal(a, accumulate(np.zeros(64, np.float32), [h1, h2], [40, 40]))


def test_a_client_scaling_every_seed_is_dropped_where_a_pooled_median_would_follow_it(kseed64):
    """1 of 3 uploads with the probe's 30,000 (about 1,000x the honest range, under the static
    bound of 32,000) on every seed: it holds most of the round's non-zero entries (a median
    pooled over them is its value), but only one of three scales."""
    h1, h2 = honest_uploads(np.random.default_rng(1), (8.0, 11.0))
    every = np.full(64, 30_000.0, np.float32)
    pooled = np.abs(np.concatenate([h1, h2, every]))
    assert np.median(pooled[pooled != 0]) == every[0]  # what a pooled statistic would take as honest
    a, dropped = run_round(kseed64, [h1, every, h2])
    assert list(dropped) == ["1"] and "exceeds fedkseed.round-factor" in dropped["1"]
    np.testing.assert_array_equal(a, accumulate(np.zeros(64, np.float32), [h1, h2], [40, 40]))


def test_an_honest_round_is_aggregated_whole(kseed64):
    """No false positive on honest values: three clients whose step sizes differ 2x are all kept
    and A is their mean, exactly; and over 2,000 such rounds (step sizes 6-11, the measured
    range, one client up to 3x another) the largest |G[k]| stays below a fifth of the limit."""
    rng = np.random.default_rng(2)
    uploads = honest_uploads(rng, (6.0, 11.0, 8.0))
    a, dropped = run_round(kseed64, uploads, weights=(40, 24, 40))
    assert dropped == {}
    np.testing.assert_array_equal(a, accumulate(np.zeros(64, np.float32), uploads, [40, 24, 40]))
    worst = 0.0
    for _ in range(2000):
        gs = honest_uploads(rng, tuple(rng.uniform(4.0, 12.0, 3)))
        assert round_outliers(gs, 100.0) == [None] * 3
        scales = sorted(upload_scale(g) for g in gs)
        worst = max(worst, max(float(np.abs(g).max()) for g in gs) / scales[1])
    assert worst < 20.0  # a fifth of round-factor 100


@pytest.mark.parametrize("key, value, message", [
    ("seeds", 0, "fedkseed.seeds must be >= 1, got 0"),
    ("round_factor", -1.0, "fedkseed.round-factor must be >= 0, got -1.0"),
    ("seeds", 65_537, "fedkseed.seeds must be <= 65536, got 65537"),
    ("eps", 0.0, "fedkseed.eps must be > 0, got 0.0"),
    ("grad_bound", -1.0, "fedkseed.grad-bound must be > 0, got -1.0"),
])
def test_bad_keys_are_one_line(key, value, message):
    with pytest.raises(ConfigError, match=f"^{message.replace('.', '[.]')}$"):
        make_config("fedkseed", **{key: value})


# ------------------------------------------------------------ bytes and queries
def test_bytes_per_client_round_at_the_defaults_are_4k_plus_a_header_each_way():
    from fedtext.methods.fedkseed.config import FedKSeedConfig

    k = FedKSeedConfig().seeds
    assert k == 64
    zeros = np.zeros(k, np.float32)
    assert comm.payload_bytes(comm.encode([zeros])) == 4 * 64 + 128 == 384
    # per-step pairs (int32 index + float32 g, two arrays) at the default 32 steps: 8 * 32 + 256 = 512 B
    assert 8 * FedKSeedConfig().local_steps + 2 * comm.NPY_HEADER_BYTES > 384


def test_a_clients_fit_queries_two_forwards_per_step_and_replays_to_its_own_weights(tmp_path):
    run_config = {"method": "fedkseed", "fedkseed.seeds": 4, "fedkseed.local-steps": 3, "fedkseed.batch-size": 4,
                  "shots-per-class": 4, "max-length": 64, "output-dir": str(tmp_path)}
    client = make_client(run_config, {"partition-id": 0, "num-partitions": 2}, RecordDict()).numpy_client.build()
    a0 = [np.zeros(4, np.float32)]
    arrays, n, metrics = client.fit(a0, {"server_round": 1})
    assert metrics["queries"] == 2 * 4 * 3  # 2 forwards x batch x steps; no backward, no other forward
    assert n == len(client.train_batch)
    g = arrays[0]
    assert g.dtype == np.float32 and g.shape == (4,) and np.count_nonzero(g) >= 1
    trained = [p.detach().clone() for _, p in client.model.network.named_trainable()]
    fresh = FedKSeedModel(client.cfg, client.backbone)
    rebuilt = fresh.load([g])  # w_0 - lr sum_k G[k] z_k: what the server's A becomes for one client
    for (name, p), q in zip(rebuilt.named_trainable(), trained, strict=True):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=name)
