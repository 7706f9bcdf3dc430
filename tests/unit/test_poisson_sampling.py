"""``client-sampling=poisson`` and ``dp-accountant`` (issue 69, clause 1): each participant joins a
round on its own with probability q, central DP divides by the expected cohort qN and releases its
noise every round, and ε is that of the mechanism that ran, by RDP or by PLD."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

from fedtext.trust import privacy
from fedtext.common.config import DP_ACCOUNTANTS, ConfigError
from fedtext.common.registry import make_config
from fedtext.server.sampling import TRAIN_SALT, ClientSampler
from fedtext.server.validation import Upload


def _sampler(**fields) -> ClientSampler:
    return ClientSampler(make_config("fedprompt", **fields), lambda sizes: None)


def _prompt_strategy(backbone, **fields):
    """fedprompt's server (prompt 2 x 32 on the demo task) at the start of round 1."""
    from fedtext.common.tasks import TASKS
    from strategies.fedprompt import FedPrompt

    strat = FedPrompt(make_config("fedprompt", prompt_length=2, max_length=32, **fields), TASKS["demo"])
    strat.global_arrays = [np.zeros_like(a) for a in strat.initial_arrays()]
    strat.rounds.begin(1)
    return strat


def _unit(shape: tuple[int, ...], index: int, norm: float) -> np.ndarray:
    x = np.zeros(int(np.prod(shape)))
    x[index] = norm
    return x.reshape(shape)


# ---------------------------------------------------------------- the draw
def test_each_client_joins_on_its_own_uniform_draw_below_q() -> None:
    """Client i joins round t when the i-th uniform of default_rng([seed, t, TRAIN_SALT]) is below q:
    seed 3, round 1, q = 0.3 over 10 clients, written out; the cohort's size varies with the round
    (a fixed-size draw would give 3 every time)."""
    sampler = _sampler(seed=3, clients_per_round=3, client_sampling="poisson")
    pool = [f"c{i}" for i in range(10)]
    u = np.random.default_rng([3, 1, TRAIN_SALT]).random(10)
    assert sampler.poisson_draw(pool, 0.3, 1) == [c for c, x in zip(pool, u, strict=True) if x < 0.3]
    assert sampler.poisson_draw(pool, 0.0, 1) == [] and sampler.poisson_draw(pool, 1.0, 1) == pool
    sizes = {len(sampler.poisson_draw(pool, 0.3, t)) for t in range(1, 30)}
    assert len(sizes) > 2 and 0 < np.mean([len(sampler.poisson_draw(pool, 0.3, t)) for t in range(1, 400)]) / 3 \
        == pytest.approx(1.0, abs=0.1)


def test_q_is_clients_per_round_over_the_most_participants_known_and_the_record_uses_the_same(backbone) -> None:
    """q = 3 / 12 when 12 partitions are known, even with 4 connected (the absent ones are drawn at the
    same q and send nothing); with client-ids=lazy the partitions known are only those heard of, so the
    connected participants count: 3,000 connected, 124 heard of after a round, q = 120 / 3,000 (the record
    had 120 / 124). The round record's sampling rate and ε use the sampler's population."""
    from types import SimpleNamespace

    sampler = _sampler(clients_per_round=3, client_sampling="poisson")
    assert sampler.poisson_rate() == 1.0  # before any draw
    sampler.partitions = lambda: list(range(12))
    pool = [SimpleNamespace(cid=str(i)) for i in range(4)]
    sampler.clients = lambda manager, participants_only: pool
    manager = SimpleNamespace(wait_for=lambda n, timeout: True, all=lambda: {})
    sampler.sample_train(1, manager, True, None)
    assert sampler.population == 12 and sampler.poisson_rate() == 0.25
    lazy = _sampler(clients_per_round=120, client_sampling="poisson", client_ids="lazy")
    lazy.partitions = lambda: list(range(124))
    lazy.clients = lambda manager, participants_only: [SimpleNamespace(cid=str(i)) for i in range(3000)]
    lazy.sample_train(2, manager, False, None)
    assert lazy.population == 3000 and lazy.poisson_rate() == 0.04
    strat = _prompt_strategy(backbone, dp="central", clients_per_round=120, client_sampling="poisson",
                             client_ids="lazy")
    strat.sampler, strat.sampled_this_round = lazy, 0
    strat.release(1, [])
    strat.note_privacy(None)
    assert strat.record.privacy["sampling_rate"] == 0.04
    assert strat.record.privacy["epsilon"] == pytest.approx(privacy.epsilon(0.04, 1.0, 1, 1e-5))


# ---------------------------------------------------------------- the fixed denominator
def test_the_private_mean_divides_by_the_expected_cohort_not_the_one_drawn(backbone) -> None:
    """Poisson, qN = clients-per-round = 2, five uploads arrived (unit vectors e0..e4, norm 0.5, C = 1,
    z = 0): Δ̃ = Σ Δ_k / 2, each coordinate 0.25. Dividing by the 5 drawn would give 0.1; the fixed
    sampler's denominator max(sampled, arrived) is 5 as well."""
    strat = _prompt_strategy(backbone, dp="central", dp_noise=0.0, clients_per_round=2, client_sampling="poisson")
    strat.sampled_this_round = 5
    shape = strat.global_arrays[0].shape
    uploads = [Upload(None, str(i), 4, {"prompt": _unit(shape, i, 0.5).astype(np.float32)}, {}) for i in range(5)]
    released = strat.release(1, uploads)
    (merged,), release = released.uploads, released.privacy
    got = merged.arrays["prompt"].ravel()
    assert got[:5] == pytest.approx([0.25] * 5) and np.count_nonzero(got) == 5 and release.clipped == 0
    assert (merged.proxy, merged.partition_id, merged.num_examples, merged.metrics) == (None, "dp-mean", 1, {})


def test_a_round_that_drew_nobody_releases_the_noise_alone(backbone) -> None:
    """No upload: Δ̃ = N(0, (z C / qN)²) from the central stream of the round, z = 2, C = 0.5, qN = 4:
    std 0.25, the exact draw of noise_rng(cfg, CENTRAL_STREAM, 7); the release counts for ε."""
    strat = _prompt_strategy(backbone, dp="central", dp_noise=2.0, dp_clip=0.5, clients_per_round=4,
                             client_sampling="poisson")
    strat.sampled_this_round = 0
    assert strat.poisson_release()
    released = strat.release(7, [])
    (merged,), release = released.uploads, released.privacy
    sent = strat.global_arrays[0]
    want = privacy.noise_rng(strat.cfg, privacy.CENTRAL_STREAM, 7).normal(0.0, 0.25, sent.shape)
    assert merged.arrays["prompt"] == pytest.approx(want.astype(np.float32))
    assert release.noise_std == pytest.approx(0.25) and release.clipped == 0 and strat.dp_releases == 1
    assert not _prompt_strategy(backbone, dp="central", clients_per_round=4).poisson_release()  # fixed: nothing
    assert not _prompt_strategy(backbone, clients_per_round=4, client_sampling="poisson").poisson_release()


def test_a_poisson_run_releases_every_round_and_accounts_the_sampling_that_ran(tmp_path) -> None:
    """Seed 16, 2 clients, q = 1/2, three rounds: the draws (written out above the assertion) are both
    clients, nobody, client 1. Round 2 trains nobody and still moves the global prompt by exactly its
    noise (z C / qN = 1); every round's ε is the Poisson RDP ε of q = 0.5, z = 1 after t releases."""
    from tests.inprocess import TINY, TINY_BERT, run, smoke

    draws = [[x < 0.5 for x in np.random.default_rng([16, t, TRAIN_SALT]).random(2)] for t in (1, 2, 3)]
    assert draws == [[True, True], [False, False], [False, True]]
    seen: dict[int, list[np.ndarray]] = {}

    def hook(server) -> None:
        strategy, inner = server.strategy, server.strategy.configure_fit

        def configure_fit(server_round, parameters, client_manager):
            seen[server_round] = [np.array(a) for a in strategy.global_arrays]
            return inner(server_round, parameters, client_manager)
        strategy.configure_fit = configure_fit
        seen["cfg"] = strategy.cfg

    _, rounds = run({"method": "fedprompt", **TINY, **TINY_BERT, **smoke("fedprompt"), "num-server-rounds": 3,
                     "seed": 16, "dp": "central", "client-sampling": "poisson", "clients-per-round": 1}, tmp_path, 2, server_hook=hook)
    assert [r["trained"] for r in rounds[1:]] == [["0", "1"], [], ["1"]]
    moved = seen[3][0].astype(np.float64) - seen[2][0].astype(np.float64)
    noise = privacy.noise_rng(seen["cfg"], privacy.CENTRAL_STREAM, 2).normal(0.0, 1.0, moved.shape)
    assert moved == pytest.approx(noise, abs=1e-5)
    for t, record in enumerate(rounds[1:], start=1):
        entry = record["privacy"]
        assert entry["epsilon"] == pytest.approx(privacy.epsilon(0.5, 1.0, t, 1e-5))
        assert (entry["accounting"], entry["accountant"], entry["sampling_rate"], entry["noise_std"]) == \
            ("poisson", "rdp", 0.5, 1.0)


# ---------------------------------------------------------------- the accountants
@pytest.mark.parametrize(("z", "rdp", "pld"), [(1.0, 5.46, 4.76), (0.5, 17.17, 15.33), (2.0, 1.84, 1.61)])
def test_both_accountants_give_dp_accountings_figures(z: float, rdp: float, pld: float) -> None:
    """q = 0.3, 4 rounds, δ = 1e-5 (issue 69, computed with dp-accounting's own accountants): PLD is
    the tighter bound of the same mechanism."""
    assert privacy.epsilon(0.3, z, 4, 1e-5, "rdp") == pytest.approx(rdp, abs=0.005)
    assert privacy.epsilon(0.3, z, 4, 1e-5, "pld") == pytest.approx(pld, abs=0.005)


def test_the_cross_device_working_point_is_under_two_by_both() -> None:
    """TFF's DP tutorial's point: q = 120 / 3,000, z = 1.2, 50 rounds, δ = 1e-5 (RDP 1.76, PLD 1.46)."""
    assert privacy.epsilon(0.04, 1.2, 50, 1e-5, "rdp") == pytest.approx(1.755, abs=0.005)
    assert privacy.epsilon(0.04, 1.2, 50, 1e-5, "pld") == pytest.approx(1.456, abs=0.005)


def test_the_accountants_warn_nobody(caplog) -> None:
    """RDP's fractional orders that do not converge at q = 0.3 are left out by dp-accounting with an absl
    warning per order: none reaches the log or Python's warnings."""
    caplog.set_level(logging.DEBUG)
    root = logging.getLogger().level  # only absl's logger is quietened, not everyone's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for accountant in DP_ACCOUNTANTS:
            privacy.epsilon(0.3, 0.7, 4, 1e-5, accountant)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert logging.getLogger().level == root and logging.getLogger("absl").level == logging.ERROR


def test_the_record_says_what_its_epsilon_is_the_epsilon_of() -> None:
    assert tuple(privacy.ACCOUNTANTS) == DP_ACCOUNTANTS
    assert privacy.accounting(make_config("fedprompt", dp="central", clients_per_round=2,
                                          client_sampling="poisson")) == "poisson"
    assert privacy.accounting(make_config("fedprompt", dp="central")) == "poisson-approximation"
    assert privacy.accounting(make_config("fedprompt", dp="local")) == "no-amplification"
    pld = make_config("fedprompt", dp="central", clients_per_round=3, dp_accountant="pld")
    assert privacy.spent(pld, 4, 10, 0) == pytest.approx(privacy.epsilon(0.3, 1.0, 4, 1e-5, "pld"))
    local = make_config("fedprompt", dp="local", clients_per_round=3, dp_accountant="pld")  # q = 1, 2 rounds
    assert privacy.spent(local, 4, 10, 2) == pytest.approx(privacy.epsilon(1.0, 1.0, 2, 1e-5, "pld"))
    assert privacy.spent(local, 4, 10, 2) < privacy.epsilon(1.0, 1.0, 2, 1e-5, "rdp")


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize(("method", "fields", "words"), [
    ("fedprompt", dict(client_sampling="poisson"), "set clients-per-round > 0"),
    ("fedprompt", dict(client_sampling="poisson", clients_per_round=3, secagg=True), "secagg"),
    ("fedbpt", dict(client_sampling="poisson", clients_per_round=3), "at least 2 clients every round"),
    ("fes", dict(client_sampling="poisson", clients_per_round=3), "draws its own clients"),
    ("fedprompt", dict(client_sampling="poisson", clients_per_round=9, aggregator="krum", krum_malicious=1),
     "may draw fewer"),
    ("fedprompt", dict(client_sampling="bernoulli"), "client-sampling"),
    ("fedprompt", dict(dp="central", dp_accountant="moments"), "dp-accountant"),
    ("fedprompt", dict(dp_accountant="pld"), "dp-accountant=pld is read by"),
    ("fedprompt", dict(dp="local", dp_accountant="pld", dp_noise=0.3), "dp-accountant=pld takes dp-noise >= 0.5"),
])
def test_what_poisson_sampling_cannot_take_is_refused_in_one_line(method: str, fields, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        make_config(method, **fields)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- hand values the mutation run asked for
def test_one_release_of_the_plain_gaussian_has_its_own_epsilon() -> None:
    """A single step counts (0 steps: 0): z = 1, q = 1, δ = 1e-5, one release: RDP 4.7285, PLD 4.3772
    (dp-accounting, 2026-11-29)."""
    assert privacy.epsilon(1.0, 1.0, 1, 1e-5) == pytest.approx(4.7285, abs=1e-4)
    assert privacy.epsilon(1.0, 1.0, 1, 1e-5, "pld") == pytest.approx(4.3772, abs=1e-4)


def test_a_float32_update_is_clipped_in_float64() -> None:
    """An update of norm 1e20 in float32: its squares overflow float32, so clipping there would
    scale it by C / inf = 0; in float64 it comes back at norm C = 1, along its direction."""
    (out,), unclipped = privacy.clip([np.array([1e20, 0.0], np.float32)], 1.0)
    assert not unclipped and out.dtype == np.float64 and out.tolist() == pytest.approx([1.0, 0.0])


def test_adaptive_clippings_default_count_noise_is_m_over_20_of_the_m_released_over() -> None:
    """dp-count-noise = 0: σ_b = m / 20 of the m the release divides by; z = 1, m = 40: σ_b = 2 and the
    update's noise multiplier z_Δ = (1 - (2 σ_b)^-2)^-1/2 = (15/16)^-1/2; std = z_Δ C / m."""
    dp = privacy.CentralDP(make_config("fedprompt", dp="central", dp_clipping="adaptive", dp_clip=2.0))
    release = dp.release([[np.zeros(3)]], 40, 1)
    assert release.noise_std == pytest.approx((15 / 16) ** -0.5 * 2.0 / 40)


def test_local_dp_accounts_the_most_rounds_one_client_trained_in(backbone) -> None:
    """Local DP: no amplification, composed over the most rounds any client was asked (3 for "0");
    before any client was asked, nothing is spent."""
    strat = _prompt_strategy(backbone, dp="local", clients_per_round=2)
    strat.sampler.partitions = lambda: list(range(4))
    strat.note_privacy(None)
    assert strat.record.privacy["epsilon"] == 0.0 and strat.record.privacy["accounting"] == "no-amplification"
    strat.dp_sampled = {"0": 3, "1": 1}
    strat.note_privacy(None)
    assert strat.record.privacy["epsilon"] == pytest.approx(privacy.epsilon(1.0, 1.0, 3, 1e-5))


def test_no_noise_records_no_bound_rather_than_infinity(backbone) -> None:
    """dp-noise = 0 (clipping alone): ε is unbounded, recorded as null (JSON has no infinity)."""
    strat = _prompt_strategy(backbone, dp="central", dp_noise=0.0, clients_per_round=2)
    strat.sampler.partitions = lambda: list(range(4))
    strat.dp_releases = 1
    strat.note_privacy(None)
    assert strat.record.privacy["epsilon"] is None and strat.record.privacy["noise_multiplier"] == 0.0
