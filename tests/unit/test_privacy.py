"""Issue 59: client-level differential privacy (``dp=central|local``, fedtext/trust/privacy.py).

Hand-computed values on mock uploads: the noise's standard deviation against clip × multiplier
(/ m, central), clipping before averaging, the fixed denominator m (the clients sampled), the
uniform weights, adaptive clipping's step (Andrew et al. 2021) against Flower's opposite one,
the accountant against published values, and what each method may take.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedtext.server import checkpoint

from fedtext.trust import privacy
from fedtext.common.config import ConfigError
from fedtext.common.registry import METHODS, make_config
from fedtext.server.validation import Upload


def _strategy(backbone, **fields):
    """fedprompt's server (prompt 2 x 32 on the demo task) at the start of round 1, with m = 3 sampled."""
    from fedtext.common.tasks import TASKS
    from strategies.fedprompt import FedPrompt

    cfg = make_config("fedprompt", prompt_length=2, max_length=32, **fields)
    strat = FedPrompt(cfg, TASKS["demo"])
    strat.global_arrays = [np.zeros_like(a) for a in strat.initial_arrays()]
    strat.rounds.begin(1)
    strat.sampled_this_round = 3
    return strat


def _upload(pid: int, n: int, update: np.ndarray) -> Upload:
    return Upload(None, str(pid), n, {"prompt": update.astype(np.float32)}, {})


def _unit(shape: tuple[int, ...], index: int, norm: float) -> np.ndarray:
    x = np.zeros(int(np.prod(shape)))
    x[index] = norm
    return x.reshape(shape)


# ---------------------------------------------------------------- central DP by hand
def test_clipping_comes_before_the_mean_and_the_denominator_is_the_clients_sampled(backbone) -> None:
    """Updates of norm 10 (along e0) and 0.5 (along e1), C = 1, no noise, m = 3 sampled (one
    sent nothing): (clip(Δ_a) + clip(Δ_b)) / 3 = (e0 + 0.5 e1) / 3. Clipping the mean instead
    gives (5 e0 + 0.25 e1) / |...| ; dividing by the 2 that arrived gives (e0 + 0.5 e1) / 2."""
    strat = _strategy(backbone, dp="central", dp_clip=1.0, dp_noise=0.0)
    shape = strat.global_arrays[0].shape
    uploads = [_upload(0, 4, _unit(shape, 0, 10.0)), _upload(1, 4, _unit(shape, 1, 0.5))]
    released = strat.release(1, uploads)
    (merged,), release = released.uploads, released.privacy
    got = merged.arrays["prompt"].ravel()
    assert got[0] == pytest.approx(1 / 3) and got[1] == pytest.approx(0.5 / 3)
    assert np.count_nonzero(got) == 2 and merged.num_examples == 1
    assert release.clipped == 1 and release.clip == 1.0 and release.noise_std == 0.0


def test_every_client_weighs_the_same_whatever_it_claims(backbone) -> None:
    """Example counts 1 and 1,000: still (Δ_a + Δ_b) / m (an example-weighted mean would let one
    client's claim change the sensitivity C/m)."""
    strat = _strategy(backbone, dp="central", dp_clip=10.0, dp_noise=0.0)
    strat.sampled_this_round = 2
    shape = strat.global_arrays[0].shape
    released = strat.release(1, [_upload(0, 1, _unit(shape, 0, 1.0)), _upload(1, 1000, _unit(shape, 0, 3.0))])
    (merged,) = released.uploads
    assert merged.arrays["prompt"].ravel()[0] == pytest.approx(2.0)


@pytest.mark.parametrize("z, clip, m", [(1.0, 0.5, 4), (2.0, 0.1, 1), (0.7, 3.0, 10)])
def test_the_central_noise_std_is_z_times_clip_over_m(z: float, clip: float, m: int) -> None:
    """DP-FedAvg's σ = z C / m (Flower's compute_stdv), measured on 200,000 coordinates of a zero
    update: within 1 % (the standard error of a std over n draws is σ/√(2n) ≈ 0.16 %)."""
    cfg = make_config("fedprompt", dp="central", dp_clip=clip, dp_noise=z)
    release = privacy.CentralDP(cfg).release([[np.zeros(200_000)]], m, server_round=1)
    assert release.noise_std == pytest.approx(z * clip / m)
    assert float(np.std(release.update[0])) == pytest.approx(z * clip / m, rel=0.01)
    assert abs(float(np.mean(release.update[0]))) < 4 * z * clip / m / math.sqrt(200_000)


def test_the_local_noise_std_is_z_times_clip_and_the_update_is_clipped_first() -> None:
    """dp=local: clip_C(Δ) + N(0, (z C)²): a zero update gives noise of std z C; z = 0 gives the
    clipped update exactly (norm 30 -> C = 2)."""
    cfg = make_config("fedprompt", dp="local", dp_clip=2.0, dp_noise=0.5)
    noise = privacy.local_update(cfg, [np.zeros(200_000)], server_round=1, partition_id=3)[0]
    assert float(np.std(noise)) == pytest.approx(1.0, rel=0.01)
    quiet = make_config("fedprompt", dp="local", dp_clip=2.0, dp_noise=0.0)
    clipped = privacy.local_update(quiet, [np.array([30.0, 0.0]), np.array([0.0])], server_round=1, partition_id=3)
    assert np.allclose(clipped[0], [2.0, 0.0]) and np.allclose(clipped[1], [0.0])


def test_the_noise_is_seeded_by_run_round_and_client() -> None:
    """The same (seed, round, client) draws the same noise (a run repeats, a resumed round too);
    another round, client or seed draws other noise."""
    cfg = make_config("fedprompt", dp="local", dp_noise=1.0)
    draw = lambda c, r, p: privacy.local_update(c, [np.zeros(8)], r, p)[0]
    assert np.array_equal(draw(cfg, 2, 1), draw(cfg, 2, 1))
    other = make_config("fedprompt", dp="local", dp_noise=1.0, seed=1)
    assert not np.array_equal(draw(cfg, 2, 1), draw(cfg, 3, 1))
    assert not np.array_equal(draw(cfg, 2, 1), draw(cfg, 2, 0))
    assert not np.array_equal(draw(cfg, 2, 1), draw(other, 2, 1))


def test_fedkseed_bounds_its_gradient_sums_themselves(backbone) -> None:
    """FedKSeed's update is G (what the server adds to A), not G − A."""
    from fedtext.methods.fedkseed.model import FedKSeedModel

    cfg = make_config("fedkseed", dp="central")
    model = FedKSeedModel.__new__(FedKSeedModel)
    a, g = [np.full(4, 5.0, np.float32)], [np.array([3.0, 0, 0, 4.0], np.float32)]
    assert np.array_equal(model.update(a, g)[0], g[0])
    assert model.apply_update(a, [np.ones(4)])[0].dtype == np.float32
    assert cfg.dp == "central"


# ---------------------------------------------------------------- adaptive clipping
def test_adaptive_clipping_moves_c_toward_the_quantile_as_andrew_et_al() -> None:
    """Norms 0.5, 2, 3 at C = 1: one of 3 unclipped, b̄ = 1/3 < γ = 0.5, so C grows:
    C' = exp(−0.2 (1/3 − 0.5)) = 1.03390 (σ_b = 0 with z = 0: the count is exact)."""
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_clip=1.0, dp_noise=0.0)
    dp = privacy.CentralDP(cfg)
    release = dp.release([[np.array([0.5])], [np.array([2.0])], [np.array([-3.0])]], 3, server_round=1)
    assert release.clip == 1.0 and release.clipped == 2
    assert dp.clip == pytest.approx(math.exp(-0.2 * (1 / 3 - 0.5))) == pytest.approx(1.033895, abs=1e-6)
    assert dp.state() == {"clip": dp.clip}
    # all under C: b̄ = 1 > γ, C shrinks by exp(−0.2 · 0.5)
    dp2 = privacy.CentralDP(cfg)
    dp2.release([[np.array([0.1])], [np.array([0.2])]], 2, server_round=1)
    assert dp2.clip == pytest.approx(math.exp(-0.1))


def test_flowers_adaptive_wrapper_steps_the_other_way() -> None:
    """Measured on Flower 1.42's DifferentialPrivacyServerSideAdaptiveClipping (the departure
    written in fedtext/trust/privacy.py): with every update clipped it *shrinks* C, where Andrew et
    al.'s rule (and fedtext) grows it."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.strategy import DifferentialPrivacyServerSideAdaptiveClipping, FedAvg

    wrapper = DifferentialPrivacyServerSideAdaptiveClipping(FedAvg(), noise_multiplier=0.0, num_sampled_clients=2,
                                                            initial_clipping_norm=1.0)
    wrapper.current_round_params = [np.zeros(1)]
    results = [(None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.array([v])]), 1, {})) for v in (5.0, 9.0)]
    wrapper.aggregate_fit(1, results, [])
    assert wrapper.clipping_norm < 1.0  # Flower: shrinks
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_clip=1.0, dp_noise=0.0)
    dp = privacy.CentralDP(cfg)
    dp.release([[np.array([5.0])], [np.array([9.0])]], 2, server_round=1)
    assert dp.clip > 1.0  # the paper: grows toward the median norm


def test_adaptive_noise_splits_the_budget_as_flower_computes() -> None:
    """z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2): z = 1, σ_b = 2 -> (1 − 1/16)^(−1/2) = 1.032796."""
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_noise=1.0, dp_count_noise=2.0)
    z_delta, sigma_b = privacy.CentralDP(cfg).noise_params(3)
    assert sigma_b == 2.0 and z_delta == pytest.approx((1 - 1 / 16) ** -0.5)


# ---------------------------------------------------------------- the accountant
def _classic(accountant, delta: float) -> float:
    """The RDP-to-(ε, δ) conversion of Mironov 2017, Prop. 3 (TF Privacy's and the moments
    accountant's): min over orders of RDP(α) + log(1/δ) / (α − 1)."""
    orders, rdp = np.asarray(accountant._orders), np.asarray(accountant._rdp)
    return float(np.min(rdp + np.log(1 / delta) / (orders - 1)))


@pytest.mark.parametrize("q, z, steps, delta, published", [
    (150 / 60_000, 1.3, 6_000, 1e-5, 0.941870567),  # TF Privacy compute_dp_sgd_privacy_test 'Test0': n 60k, batch 150, 15 epochs
    (100 / 100_000, 1.0, 30_000, 1e-7, 1.70928734),  # 'Test1': n 100k, batch 100, 30 epochs
    (0.01, 4.0, 10_000, 1e-5, 1.26),  # Abadi et al. 2016 §3.1, moments accountant: "ε ≈ 1.26"
])
def test_the_accountant_matches_published_values(q, z, steps, delta, published) -> None:
    """The RDP curve fedtext composes (Poisson-sampled Gaussian, q, z, steps) converted the classic
    way gives the published ε; the reported ε (the accountant's tighter conversion) is below it."""
    accountant = privacy.rdp_accountant(q, z, steps)
    assert _classic(accountant, delta) == pytest.approx(published, abs=5e-3 if published == 1.26 else 1e-6)
    assert 0.5 * published < privacy.epsilon(q, z, steps, delta) < published


def test_the_gaussian_mechanism_alone_composes_linearly() -> None:
    """q = 1: RDP(α) of T Gaussian mechanisms is T α / (2 z²) (Mironov 2017, Prop. 7)."""
    accountant = privacy.rdp_accountant(1.0, 2.0, 5)
    orders = np.asarray(accountant._orders)
    assert np.allclose(accountant._rdp, 5 * orders / 8)


def test_epsilon_grows_with_rounds_and_rate_and_falls_with_noise() -> None:
    e = lambda q, z, t: privacy.epsilon(q, z, t, 1e-5)
    assert e(0.3, 1.0, 0) == 0.0 and e(0.3, 0.0, 4) == math.inf
    assert e(0.3, 1.0, 4) > e(0.3, 1.0, 3) > 0
    assert e(0.5, 1.0, 4) > e(0.3, 1.0, 4)
    assert e(0.3, 2.0, 4) < e(0.3, 1.0, 4)


def test_the_sampling_rate_is_the_clients_a_round_over_the_participants() -> None:
    assert privacy.sampling_rate(make_config("fedprompt", clients_per_round=3), 10) == 0.3
    assert privacy.sampling_rate(make_config("fedprompt", clients_per_round=0), 10) == 1.0
    local = make_config("fedprompt", dp="local", clients_per_round=3)
    assert privacy.spent(local, 4, 10, 2) == pytest.approx(privacy.epsilon(1.0, 1.0, 2, 1e-5))  # no amplification


def test_the_round_record_carries_epsilon_and_the_release(backbone) -> None:
    """note_privacy after one central release with 3 of 10 participants sampled."""
    strat = _strategy(backbone, dp="central", dp_clip=0.5, dp_noise=2.0, clients_per_round=3)
    strat.sampler.partitions = lambda: list(range(10))
    shape = strat.global_arrays[0].shape
    release = strat.release(1, [_upload(0, 4, _unit(shape, 0, 1.0))]).privacy
    strat.note_privacy(release)
    entry = strat.record.privacy
    assert entry["epsilon"] == pytest.approx(privacy.epsilon(0.3, 2.0, 1, 1e-5))
    assert entry["noise_std"] == pytest.approx(2.0 * 0.5 / 3) and entry["clipped"] == 1
    assert entry["clip"] == 0.5 and entry["noise_multiplier"] == 2.0
    assert entry["sampling_rate"] == 0.3 and entry["mode"] == "central" and entry["delta"] == 1e-5
    _strategy_without = _strategy(backbone)
    _strategy_without.note_privacy(None)
    assert _strategy_without.record.privacy is None


def test_a_resumed_run_keeps_its_spent_rounds_and_its_clip(tmp_path, backbone, monkeypatch) -> None:
    """The accountant's counts and adaptive clipping's C go into the checkpoint and come back."""
    from fedtext.records import RunRecorder

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    strat = _strategy(backbone, dp="central", dp_clipping="adaptive", dp_noise=0.0, output_dir=str(tmp_path))
    strat.recorder = RunRecorder(tmp_path, strat.cfg.to_run_config())
    shape = strat.global_arrays[0].shape
    strat.release(1, [_upload(0, 4, _unit(shape, 0, 5.0))])
    strat.dp_sampled = {"0": 1, "4": 1}
    strat.save_checkpoint(1)
    ckpt = checkpoint.load(strat.recorder.dir, limits=type(strat).checkpoint_limits(strat.cfg, strat.model))
    fresh = _strategy(backbone, dp="central", dp_clipping="adaptive", dp_noise=0.0)
    fresh.restore(ckpt)
    assert fresh.dp_releases == 1 and fresh.dp_sampled == {"0": 1, "4": 1}
    assert fresh.central_dp.clip == strat.central_dp.clip != 1.0


# ---------------------------------------------------------------- who may take what
SUMS = ("fedprompt", "fedptuning-v2", "fedavg", "fedlora", "fedadapter", "bbt-fed")


@pytest.mark.parametrize("method", SUMS)
def test_the_averaging_methods_take_every_mechanism(method: str) -> None:
    for fields in (dict(dp="central"), dict(dp="local"), dict(secagg=True, clients_per_round=3)):
        make_config(method, **fields)


@pytest.mark.parametrize("method, fields, words", [
    ("fedbpt", dict(secagg=True), "fedbpt: secagg=true needs a server that only sums uploads"),
    ("fedbpt", dict(dp="central"), "CMA-ES ranks each client's z by its loss"),
    ("feddls", dict(dp="local"), "discrete token ids"),
    ("feddrs", dict(dp="central"), "distils from each client's model"),
    ("feddf", dict(secagg=True), "distils from each client's model"),
    ("fes", dict(dp="central"), "pseudo-label counts"),
    ("fedcls", dict(dp="local"), "pseudo-label counts"),
    ("feddpg", dict(secagg=True), "uniformly"),
    ("fedkseed", dict(dp="local"), "grad-bound"),
])
def test_an_unsupported_mechanism_is_refused_in_one_line_saying_why(method, fields, words) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        make_config(method, **fields)
    assert "\n" not in str(info.value)


def test_every_method_declares_its_support_itself_and_says_why_not() -> None:
    """A method that takes fewer than all three mechanisms says why (the refusal quotes it)."""
    privacy_keys = {"dp-central", "dp-local", "secagg"}
    for name, mc in METHODS.items():
        assert mc.privacy <= privacy_keys, name
        if set(mc.privacy) != privacy_keys:
            assert mc.privacy_reason, name
    assert METHODS["fedkseed"].privacy == {"dp-central", "secagg"}
    assert METHODS["feddpg"].privacy == {"dp-central", "dp-local"}


@pytest.mark.parametrize("fields, words", [
    (dict(method="bbt-fed", **{"bbt-fed.average": "z-sigma-C"}, dp="central"), "bbt-fed's server step is a mean of z, sigma"),
    (dict(method="feddpg", **{"feddpg.unlearn-round": 1, "num-server-rounds": 2}, dp="central"), "unlearning round"),
])
def test_a_method_fits_only_in_its_averaging_setting(fields, words) -> None:
    from fedtext.common.config import RunConfig

    with pytest.raises(ConfigError, match=words):
        RunConfig.from_run_config(fields, METHODS)


@pytest.mark.parametrize("fields, words", [
    (dict(dp="central", aggregator="median"), "sensitivity is not C/m"),
    (dict(dp="central", update_clip=1.0), "update-clip=1.0"),
    (dict(secagg=True, aggregator="krum"), "only the sum of the uploads"),
    (dict(secagg=True, dp="central"), "use dp=local with secagg"),
    (dict(secagg=True, clients_per_round=1), "at least 2 clients per round"),
    (dict(secagg=True, clients_per_round=2), "secagg-shares=3 and secagg-threshold=2 need as many clients"),
    (dict(secagg=True, secagg_shares=2), "secagg-shares must be >= 3"),
    (dict(secagg=True, secagg_threshold=3), "secagg-threshold must be <= 2"),
    (dict(secagg=True, secagg_shares=1, secagg_threshold=3, clients_per_round=2), "need as many clients"),
    (dict(secagg=True, clients_per_round=2000), "exceeds SecAgg\\+'s modulus 2\\^32"),
    (dict(secagg_shares=4), "read by secagg=true only"),
    (dict(dp_noise=2.0), "dp-noise=2.0 is read by dp=central, dp=local only; dp=none"),
    (dict(dp="local", dp_clipping="adaptive"), "dp-clipping=adaptive is read by dp=central only"),
    (dict(dp="central", dp_target_quantile=0.3), "read by dp=central, dp-clipping=adaptive only"),
    (dict(dp="central", dp_clipping="adaptive", dp_noise=1.0, clients_per_round=10), "dp-count-noise > 0.5"),
    (dict(dp="central", dp_clip=0.0), "dp-clip must be > 0"),
    (dict(dp="central", dp_delta=1.0), "dp-delta must be in"),
    (dict(dp="laplace"), "unknown dp 'laplace'"),
])
def test_what_cannot_compose_is_refused_in_one_line(fields, words) -> None:
    with pytest.raises(ConfigError, match=words):
        make_config("fedprompt", **fields)


def test_two_clients_a_round_take_secagg_with_every_client_holding_shares() -> None:
    """Flower's SecAgg+ reads num_shares=1 as the fraction 1.0 (every client of the round)."""
    assert make_config("fedprompt", secagg=True, secagg_shares=1, clients_per_round=2).secagg_shares == 1


@pytest.mark.parametrize("dp", ["none", "central"])
def test_a_round_is_aggregated_once(tmp_path, dp: str) -> None:
    """aggregate_fit calls the method's aggregate once a round, DP or not (4e97d5a called it twice:
    a stateful server step, FedBPT's CMA-ES or a server optimizer's moments, stepped twice)."""
    from tests.inprocess import TINY, TINY_BERT, run, smoke

    calls: list[int] = []

    def hook(server) -> None:
        inner = server.strategy.aggregate
        server.strategy.aggregate = lambda t, uploads: calls.append(t) or inner(t, uploads)

    run({"method": "fedprompt", **TINY, **TINY_BERT, **smoke("fedprompt"), "num-server-rounds": 2, "dp": dp},
        tmp_path, clients=2, server_hook=hook)
    assert calls == [1, 2]


# ---------------------------------------------------------------- wrong versions told apart (issue 69)
def _stream(seed: int, stream: int, server_round: int, partition_id: int = -1) -> np.random.Generator:
    """The generator of one noise draw built by hand: SeedSequence([seed, stream, round, partition + 1])."""
    return np.random.default_rng(np.random.SeedSequence([seed, stream, server_round, partition_id + 1]))


def test_each_noise_draws_from_its_own_stream_and_the_count_noise_std_is_sigma_b() -> None:
    """Adaptive clipping at C = 1, z = 1, σ_b = 2, m = 3, seed 7, round 4; norms 0.5, 2, 3 along
    e0, e1, e2: clipped 0.5 e0, e1, −e2, one unclipped. The update's noise is the central stream's
    N(0, (z_Δ C / m)²) with z_Δ = (1 − 1/16)^(−1/2); the count's is the count stream's own draw
    N(0, σ_b²) with σ_b = 2 (not 2 / m), so C' = exp(−0.2 ((1 + g) / 3 − 0.5)). The count drawn
    from the update's stream, or the update's from the count's, gives other numbers."""
    assert len({privacy.CENTRAL_STREAM, privacy.COUNT_STREAM, privacy.LOCAL_STREAM}) == 3
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_clip=1.0, dp_noise=1.0,
                      dp_count_noise=2.0, seed=7)
    dp = privacy.CentralDP(cfg)
    release = dp.release([[_unit((4,), 0, 0.5)], [_unit((4,), 1, 2.0)], [_unit((4,), 2, -3.0)]], 3, server_round=4)
    z_delta = (1 - 1 / 16) ** -0.5
    std = z_delta * 1.0 / 3
    assert release.noise_std == pytest.approx(std) and release.clipped == 2
    want = np.array([0.5, 1.0, -1.0, 0.0]) / 3 + _stream(7, privacy.CENTRAL_STREAM, 4).normal(0.0, std, (4,))
    np.testing.assert_allclose(release.update[0], want, rtol=0, atol=1e-12)
    g = _stream(7, privacy.COUNT_STREAM, 4).normal(0.0, 2.0)
    assert g != pytest.approx(_stream(7, privacy.CENTRAL_STREAM, 4).normal(0.0, 2.0))  # two streams, two draws
    assert dp.clip == release.next_clip == pytest.approx(math.exp(-0.2 * ((1 + g) / 3 - 0.5)), rel=1e-12)
    # σ_b = 2 against σ_b / m = 2 / 3: the clip each would give differs by more than the tolerance
    assert math.exp(-0.2 * ((1 + g / 3) / 3 - 0.5)) != pytest.approx(dp.clip, rel=1e-6)


def test_the_default_count_noise_is_m_over_20() -> None:
    """dp-count-noise=0: σ_b = m / 20 (Flower's default): m = 40 -> σ_b = 2, z_Δ = (1 − 1/16)^(−1/2)."""
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_noise=1.0)
    z_delta, sigma_b = privacy.CentralDP(cfg).noise_params(40)
    assert sigma_b == 2.0 and z_delta == pytest.approx((1 - 1 / 16) ** -0.5)


def test_local_noise_draws_from_the_local_stream_of_the_client() -> None:
    """dp=local, C = 1, z = 0.5, seed 3, round 2, partition 5: clip_C([3, 4], [0]) = [0.6, 0.8], [0],
    plus the local stream's draws for partition 5, array by array (not the central stream's)."""
    cfg = make_config("fedprompt", dp="local", dp_clip=1.0, dp_noise=0.5, seed=3)
    got = privacy.local_update(cfg, [np.array([3.0, 4.0]), np.array([0.0])], server_round=2, partition_id=5)
    rng = _stream(3, privacy.LOCAL_STREAM, 2, 5)
    want = [np.array([0.6, 0.8]) + rng.normal(0.0, 0.5, (2,)), rng.normal(0.0, 0.5, (1,))]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)
    central = _stream(3, privacy.CENTRAL_STREAM, 2, 5).normal(0.0, 0.5, (2,))
    assert not np.allclose(got[0] - [0.6, 0.8], central)


def test_the_unclipped_fraction_is_over_the_clients_sampled_not_those_that_arrived() -> None:
    """m = 4 sampled, 2 arrived (norms 0.5 and 2 at C = 1, σ_b = 0 with z = 0): b̄ = 1/4, so
    C' = exp(−0.2 (1/4 − 1/2)) = exp(0.05) = 1.051271; over the 2 that arrived b̄ = 1/2 = γ and C
    would stay 1."""
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_clip=1.0, dp_noise=0.0)
    dp = privacy.CentralDP(cfg)
    release = dp.release([[np.array([0.5])], [np.array([2.0])]], 4, server_round=1)
    assert release.update[0][0] == pytest.approx((0.5 + 1.0) / 4)
    assert dp.clip == pytest.approx(math.exp(0.05)) == pytest.approx(1.051271, abs=1e-6)


def test_the_strategy_steps_the_clip_over_the_clients_it_sampled(backbone) -> None:
    """The same through the server: 4 sampled, 2 uploads (norms 0.5 and 2): C' = exp(0.05)."""
    strat = _strategy(backbone, dp="central", dp_clipping="adaptive", dp_clip=1.0, dp_noise=0.0)
    strat.sampled_this_round = 4
    shape = strat.global_arrays[0].shape
    strat.release(1, [_upload(0, 4, _unit(shape, 0, 0.5)), _upload(1, 4, _unit(shape, 1, 2.0))])
    assert strat.central_dp.clip == pytest.approx(math.exp(0.05))


def test_an_update_of_norm_exactly_c_is_unclipped() -> None:
    """b_k = 1[‖Δ_k‖ ≤ C]: [3, 4] at C = 5 is kept as it is and counts as unclipped (C' = 5 exp(−0.1)
    with one update, m = 1, σ_b = 0); one ulp below 5 it is clipped."""
    out, unclipped = privacy.clip([np.array([3.0, 4.0])], 5.0)
    assert unclipped and np.array_equal(out[0], [3.0, 4.0])
    assert not privacy.clip([np.array([3.0, 4.0])], float(np.nextafter(5.0, 0.0)))[1]
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_clip=5.0, dp_noise=0.0)
    dp = privacy.CentralDP(cfg)
    assert dp.release([[np.array([3.0, 4.0])]], 1, server_round=1).clipped == 0
    assert dp.clip == pytest.approx(5 * math.exp(-0.1))


def test_more_updates_than_clients_sampled_is_refused() -> None:
    """m below the updates would shrink the sensitivity's denominator: refused (m = 2 with 2 is fine)."""
    cfg = make_config("fedprompt", dp="central", dp_clip=10.0, dp_noise=0.0)
    with pytest.raises(ValueError, match="m=1 sampled clients, but 2 updates"):
        privacy.CentralDP(cfg).release([[np.array([1.0])], [np.array([1.0])]], 1, server_round=1)
    assert privacy.CentralDP(cfg).release([[np.array([1.0])], [np.array([3.0])]], 2, server_round=1).update[0][0] == 2.0


def test_the_sampling_rate_is_at_most_1_and_1_without_participants() -> None:
    """clients-per-round above the participants (a short fleet) samples everyone: q = 1, not 2;
    no participant known yet: q = 1 (no division by 0)."""
    assert privacy.sampling_rate(make_config("fedprompt", clients_per_round=20), 10) == 1.0
    assert privacy.sampling_rate(make_config("fedprompt", clients_per_round=3), 0) == 1.0


# ---------------------------------------------------------------- issue 69: floats that left floating point
@pytest.mark.parametrize("fields, words", [
    (dict(dp="local", dp_noise=1e308), "dp-noise must be 0 or in [1e-100, 1e+100] (the privacy accountant squares it "
                                       "and its inverse in float64), got 1e+308"),
    (dict(dp="central", dp_noise=1e-200), "dp-noise must be 0 or in [1e-100, 1e+100]"),
    (dict(dp="local", dp_noise=1e30, dp_clip=1e10), "dp-noise x dp-clip = 1e+40 is the noise std, above 3.4e+37 "
                                                    "(float32's largest / 10): every noised value would be inf"),
    (dict(dp="central", dp_clipping="adaptive", dp_noise=0.0, dp_clip_lr=800.0),
     "dp-clip-lr=800 with dp-clip=1: one step of adaptive clipping, C exp(dp-clip-lr), would overflow float64"),
    (dict(dp="central", dp_clipping="adaptive", dp_noise=0.0, dp_clip=1e300, dp_clip_lr=100.0), "dp-clip-lr=100"),
])
def test_dp_floats_beyond_floating_point_are_one_line_at_config_time(fields, words) -> None:
    """Issue 69: ``dp=local dp-noise=1e308`` passed the config and raised OverflowError in round 1
    (the accountant squares z); a noise std past float32 noised every value to inf; adaptive
    clipping's exp(dp-clip-lr) overflowed. Each is one line now."""
    with pytest.raises(ConfigError) as err:
        make_config("fedprompt", **fields)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_dp_noise_bounds_are_ones_the_accountant_computes_at() -> None:
    """The bounds' reason: at z = 1e±100 (and 3 or 10^6 rounds) the RDP accountant returns a number;
    at 1e308 it raised OverflowError, which the config now refuses. The bounds themselves are accepted."""
    from fedtext.common.config import DP_NOISE_RANGE, NOISE_STD_MAX

    low, high = DP_NOISE_RANGE
    for steps in (3, 10**6):
        assert privacy.epsilon(1.0, high, steps, 1e-5) == 0.0
        assert 1e199 < privacy.epsilon(0.3, low, steps, 1e-5) < math.inf
    with pytest.raises(OverflowError):
        privacy.epsilon(1.0, 1e308, 3, 1e-5)
    assert make_config("fedprompt", dp="local", dp_noise=low).dp_noise == low
    assert make_config("fedprompt", dp="local", dp_noise=NOISE_STD_MAX).dp_noise == NOISE_STD_MAX  # C = 1
    assert make_config("fedprompt", dp="central", dp_noise=0.0, dp_clip=1e300).dp_clip == 1e300  # 0 x C: no noise
    noise = privacy.gaussian([np.zeros(10**5, np.float32)], NOISE_STD_MAX, np.random.default_rng(0))[0]
    assert noise.dtype == np.float32 and np.isfinite(noise).all()


def test_adaptive_clipping_whose_count_noise_takes_c_out_of_float64_is_one_line() -> None:
    """Past the config's noiseless bound: C = 1, dp-clip-lr = 700 (accepted: e^700 is finite) with
    sigma_b = 10^6 on a count of 3: exp(-700 (b - gamma)) overflowed (OverflowError) or sent C to 0
    for good. It is one line naming the keys, and C is left as it was."""
    cfg = make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_clip=1.0, dp_noise=1.0,
                      dp_count_noise=1e6, dp_clip_lr=700.0)
    for server_round in (1, 2):  # a draw of either sign: overflow, and underflow to 0
        dp = privacy.CentralDP(cfg)
        with pytest.raises(ConfigError) as err:
            dp.release([[np.array([0.5])], [np.array([2.0])], [np.array([-3.0])]], 3, server_round=server_round)
        assert str(err.value).startswith("adaptive clipping's C = 1 x exp(") and "\n" not in str(err.value)
        assert str(err.value).endswith("(dp-clip-lr=700, count noise sigma_b=1e+06): lower dp-clip-lr or "
                                       "dp-count-noise")
        assert dp.clip == 1.0
