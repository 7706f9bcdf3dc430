"""FedBPT: sigma' (eq. 4/12/13), the server CMA-ES step (Alg. 2), client, validation, bytes."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.learning.blackbox import WhitenedCMA
from fedtext.node.node import client_class
from fedtext.common.config import ConfigError
from fedtext.learning.data import client_data
from fedtext.methods.fedbpt.cmaes import (
    CMAConstants,
    CMAState,
    ReferenceServerES,
    corrected_sigma,
    reference_local_sigma,
    reference_sigma_prime,
    server_step,
)
from fedtext.methods.fedbpt.model import UPLOAD
from fedtext.methods.fedbpt.perturb import perturb
from fedtext.common.registry import make_config
from fedtext.server.validation import Upload
from fedtext.common.tasks import TASKS
from strategies.bbt_fed import BBTFed
from strategies.fedbpt import FedBPT


# --------------------------------------------------------------------------- sigma'
def test_sigma_prime_eq4_hand_computed():
    sigmas = [np.array([1.0, 1.0]), np.array([0.5, 0.5]), np.array([2.0, 2.0]), np.array([1.0, 0.0])]
    losses = [0.3, 0.1, 0.4, 0.2]  # best half: clients 1 and 3
    # eq. (4): 2 sqrt((0.25 + 0.25 + 1 + 0) / (|S|=4 * lambda=4)) = 2 sqrt(1.5/16)
    assert corrected_sigma(sigmas, losses, [4, 4, 4, 4]) == pytest.approx(2 * np.sqrt(1.5 / 16))
    assert corrected_sigma(sigmas, losses, [4, 4, 4, 4]) == pytest.approx(0.6123724357)


def test_sigma_prime_unequal_populations_and_odd_clients():
    sigmas = [np.array([1.0, 1.0]), np.array([0.5, 0.5]), np.array([2.0, 2.0]), np.array([1.0, 0.0])]
    losses = [0.3, 0.1, 0.4, 0.2]
    # eq. (12) per client: sigma'^2 = (0.5/(4/2) + 1/(8/2)) / mu=2 = (0.25 + 0.25)/2
    assert corrected_sigma(sigmas, losses, [4, 4, 4, 8]) == pytest.approx(0.5)
    # |S| = 3 -> mu = 1 (the best client only): sqrt(0.5 / (1 * 4/2))
    assert corrected_sigma(sigmas[:3], losses[:3], [4, 4, 4]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="lambda_k >= 2"):
        corrected_sigma(sigmas, losses, [4, 1, 4, 4])
    with pytest.raises(ValueError, match="one sigma list"):
        corrected_sigma(sigmas, losses[:3], [4, 4, 4, 4])


# ------------------------------------------------------------------ server step
def test_constants_for_n2_mu2_by_hand():
    k = CMAConstants.for_population(2, 2)
    assert k.c_sigma == pytest.approx(4 / 9)
    assert k.d_sigma == pytest.approx(13 / 9)
    assert k.c_c == pytest.approx(5 / 8)
    assert k.c_1 == pytest.approx(2 / 12.89)
    assert k.c_mu == pytest.approx(1 / 18)
    assert k.chi_n == pytest.approx(np.sqrt(2) * (1 - 1 / 8 + 1 / 84))


def test_server_step_equals_hand_written_algorithm2():
    """n=2, four clients, sigma'=0.5 from C=I, zero paths: every line of Alg. 2 by hand."""
    z = np.array([[1.0, 0.0], [0.0, 1.0], [3.0, 3.0], [-1.0, 2.0]])
    losses = [0.2, 0.1, 0.9, 0.5]
    state = CMAState.initial(2, sigma0=1.0)
    new = server_step(state, z, losses, sigma_prime=0.5)
    # line 1-2: best mu=2 are clients 1 (0.1) and 0 (0.2); z' = mean = (0.5, 0.5)
    np.testing.assert_allclose(new.mean, [0.5, 0.5])
    # y_i = (z_i - 0)/0.5 -> (0,2), (2,0); <y> = (1,1)
    c_s, d_s, c_c, c_1, c_mu = 4 / 9, 13 / 9, 5 / 8, 2 / 12.89, 1 / 18
    chi = np.sqrt(2) * (1 - 1 / 8 + 1 / 84)
    # line 3 (eq. 6): p_sigma = sqrt(c_s (2 - c_s) * 2) * C^-1/2 <y>, C = I
    p_sigma = np.sqrt(c_s * (2 - c_s) * 2) * np.array([1.0, 1.0])
    np.testing.assert_allclose(new.p_sigma, p_sigma)
    # h_sigma: |p_sigma| / sqrt(1 - (1-c_s)^2) = 1.8856/0.8315 = 2.268 < (1.4 + 2/3) * chi = 2.592 -> 1
    assert np.linalg.norm(p_sigma) / np.sqrt(1 - (1 - c_s) ** 2) < (1.4 + 2 / 3) * chi
    p_c = np.sqrt(c_c * (2 - c_c) * 2) * np.array([1.0, 1.0])
    np.testing.assert_allclose(new.p_c, p_c)
    # line 6: C' = (1 - c1 - cmu) I + c1 p_c p_c^T + cmu/2 ((0,2)(0,2)^T + (2,0)(2,0)^T)
    rank_mu = (np.outer([0, 2], [0, 2]) + np.outer([2, 0], [2, 0])) / 2
    C = (1 - c_1 - c_mu) * np.eye(2) + c_1 * np.outer(p_c, p_c) + c_mu * rank_mu
    np.testing.assert_allclose(new.C, C)
    # line 5: sigma = sigma' exp(c_s/d_s (|p_sigma|/chi - 1))
    assert new.sigma == pytest.approx(0.5 * np.exp(c_s / d_s * (np.linalg.norm(p_sigma) / chi - 1)))
    assert new.generation == 1


def test_server_step_uses_c_inverse_sqrt_and_paths():
    """Second step from a non-trivial state: C^{-1/2} and path decay enter eq. (6)."""
    C = np.array([[4.0, 0.0], [0.0, 1.0]])
    state = CMAState(np.zeros(2), 1.0, C, np.array([0.3, -0.1]), np.array([0.2, 0.2]), generation=1)
    new = server_step(state, np.array([[2.0, 0.0], [2.0, 0.0]]), [0.0, 1.0], sigma_prime=1.0)
    # mu = 1: <y> = (2, 0); C^-1/2 <y> = (1, 0)
    c_s = (1 + 2) / (2 + 1 + 5)
    expected = (1 - c_s) * np.array([0.3, -0.1]) + np.sqrt(c_s * (2 - c_s) * 1) * np.array([1.0, 0.0])
    np.testing.assert_allclose(new.p_sigma, expected)
    np.testing.assert_allclose(new.mean, [2.0, 0.0])


# --------------------------------------------------------------------- strategy
D, STEPS = 6, 3  # the conftest's fedbpt fixture: intrinsic dimension, local steps


def fit_res(vec, pid, n=4):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode([np.asarray(vec, np.float32)]), n, {"partition_id": pid}))


def upload(z, sigmas, loss):
    return np.concatenate([z, sigmas, [loss]])


def test_strategy_round_matches_cmaes_functions(fedbpt):
    rng = np.random.default_rng(0)
    zs = rng.normal(size=(4, D))
    sig = [np.full(STEPS, 0.8), np.full(STEPS, 0.6), np.full(STEPS, 1.0), np.full(STEPS, 0.7)]
    losses = [0.4, 0.2, 0.9, 0.3]
    res = [fit_res(upload(zs[k], sig[k], losses[k]), k) for k in range(4)]
    params, metrics = fedbpt.aggregate_fit(1, res, [])
    zs32 = zs.astype(np.float32).astype(np.float64)
    sp = corrected_sigma([s.astype(np.float32) for s in sig], losses, [4] * 4)
    expected = server_step(CMAState.initial(D, 1.0), zs32, losses, sp)
    assert metrics["sigma_prime"] == pytest.approx(sp, rel=1e-6)
    z, sigma, C = comm.decode(params)
    np.testing.assert_allclose(z, expected.mean, rtol=1e-5)
    np.testing.assert_allclose(z, (zs32[1] + zs32[3]) / 2, rtol=1e-5)  # eq. (5): best half
    assert sigma[0] == pytest.approx(expected.sigma, rel=1e-5)
    np.testing.assert_allclose(C, expected.C, rtol=1e-5)


def test_bad_uploads_dropped_round_completes(fedbpt):
    good = upload(np.ones(D), np.full(STEPS, 0.5), 0.3)
    nan = good.copy()
    nan[2] = np.nan
    neg = upload(np.ones(D), np.array([0.5, -0.1, 0.5]), 0.3)
    res = [fit_res(good, 0), fit_res(good * 2 + 0, 1), fit_res(nan, 2), fit_res(good[:-1], 3), fit_res(neg, 4)]
    params, _ = fedbpt.aggregate_fit(1, res, [])
    assert params is not None and fedbpt.record.num_clients == 2
    reasons = {d["client"]: d["reason"] for d in fedbpt.record.dropped}
    assert "non-finite" in reasons["2"] and "shape" in reasons["3"] and "step sizes must be > 0" in reasons["4"]


def test_download_modes_and_bytes(fedbpt, backbone):
    full = comm.payload_bytes(comm.encode(fedbpt.global_state()))
    assert full == 4 * (D + 1 + D * D) + 3 * comm.NPY_HEADER_BYTES
    compact = FedBPT(make_config("fedbpt", intrinsic_dim=D, local_steps=STEPS, download="compact", max_length=64),
                     TASKS["demo"])
    assert comm.payload_bytes(comm.encode(compact.global_state())) == 4 * (D + 1) + 2 * comm.NPY_HEADER_BYTES
    up = comm.encode([upload(np.ones(D), np.ones(STEPS), 0.1).astype(np.float32)])
    assert comm.payload_bytes(up) == 4 * (D + STEPS + 1) + comm.NPY_HEADER_BYTES


# ----------------------------------------------------------------------- client
@pytest.mark.parametrize("download", ["full", "compact"])
def test_client_returns_finite_correctly_shaped_upload(download, backbone):
    cfg = make_config("fedbpt", intrinsic_dim=20, local_steps=2, popsize=4, prompt_length=4,
                      max_length=48, shots_per_class=4, client_test_size=8, download=download)
    strat = FedBPT(cfg, TASKS["demo"])
    client = client_class("fedbpt")(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    (up,), n, metrics = client.fit(strat.initial_arrays(), {"server_round": 1})
    assert up.shape == (20 + 2 + 1,) and up.dtype == np.float32 and np.isfinite(up).all()
    assert up[20] == pytest.approx(cfg.method_config.sigma0)  # sigma_{t,1} = the downloaded sigma_t
    assert (up[20:22] > 0).all() and n == 8
    assert up[-1] == pytest.approx(metrics["train_loss"])
    unpacked = strat.model.unpack_upload({"z|sigmas|loss": up})  # the server reads what the client packed
    np.testing.assert_array_equal(unpacked.z, up[:20].astype(np.float64))
    assert unpacked.loss == pytest.approx(metrics["train_loss"]) and len(unpacked.sigmas) == 2


def _recording_client(cfg, calls):
    """A FedBPT client whose fitness is cheap (|z|^2) and records (candidates, batch ids)."""
    client = client_class("fedbpt")(cfg, TASKS["demo"], client_data(cfg, 0, 2))

    def fitness(candidates, batch=None):
        calls.append((np.array(candidates), None if batch is None else batch.input_ids.clone()))
        return np.sum(np.square(candidates), axis=1)

    client.fitness = fitness
    return client


def test_client_search_starts_from_a_non_identity_C(backbone):
    """Alg. 1 line 2: the first local population is drawn from N(z_t, sigma_t^2 C_t), so
    the sample covariance of its candidates over sigma_t^2 approaches C_t."""
    d, lam, sigma = 3, 20_000, 0.5
    cfg = make_config("fedbpt", intrinsic_dim=d, local_steps=1, popsize=lam, prompt_length=2, max_length=48,
                      shots_per_class=2, client_test_size=4)
    C = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]], np.float32)
    z = np.array([1.0, -2.0, 0.5], np.float32)
    calls = []
    _recording_client(cfg, calls).train([z, np.array([sigma], np.float32), C], {"server_round": 1})
    first = calls[0][0]
    assert first.shape == (lam, d)
    np.testing.assert_allclose(first.mean(0), z, atol=0.02)
    np.testing.assert_allclose(np.cov(first.T) / sigma**2, C, atol=0.05)  # not the identity
    assert abs(np.cov(first.T)[0, 1] / sigma**2 - 0.6) < 0.05


def test_input_masks_change_at_every_local_iteration(backbone):
    """Alg. 1 lines 12-16: new masks M and random tokens X_hat at every local iteration."""
    cfg = make_config("fedbpt", intrinsic_dim=4, local_steps=4, popsize=4, keep_rate=0.5, prompt_length=2,
                      max_length=48, shots_per_class=4, client_test_size=4)
    calls = []
    client = _recording_client(cfg, calls)
    client.train(client.model.initial_arrays(), {"server_round": 1})
    perturbed = [ids for _, ids in calls[:4]]  # the 4 iterations; the 5th call is the final, unperturbed loss
    assert len(calls) == 5 and calls[4][1] is None
    original = client.train_batch.input_ids
    for i, ids in enumerate(perturbed):
        assert not torch.equal(ids, original), i
        for other in perturbed[i + 1:]:
            assert not torch.equal(ids, other)


def test_printed_sigma_update_is_alg2_line5_without_damping():
    """sigma <- sigma' exp(|p_sigma|/E|N| - 1) (printed) vs sigma' exp((c_s/d_s)(...)) (damped)."""
    state = CMAState.initial(2, 1.0)
    sols, losses, sp = np.array([[1.0, 0.0], [0.0, 3.0]]), [0.1, 0.2], 0.8
    damped = server_step(state, sols, losses, sp, "damped")
    printed = server_step(state, sols, losses, sp, "printed")
    k = CMAConstants.for_population(2, 1)
    norm = np.linalg.norm(damped.p_sigma)
    assert printed.sigma == pytest.approx(sp * np.exp(norm / k.chi_n - 1), rel=1e-12)
    assert damped.sigma == pytest.approx(sp * np.exp(k.c_sigma / k.d_sigma * (norm / k.chi_n - 1)), rel=1e-12)
    np.testing.assert_array_equal(printed.mean, damped.mean)  # only sigma differs
    np.testing.assert_array_equal(printed.C, damped.C)
    with pytest.raises(ValueError, match="sigma_update"):
        server_step(state, sols, losses, sp, "loud")


def test_strategy_passes_the_sigma_update_option(backbone):
    strat = FedBPT(make_config("fedbpt", intrinsic_dim=D, local_steps=STEPS, popsize=4, sigma_update="printed",
                               max_length=64), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    res = [fit_res(upload(np.full(D, k), np.full(STEPS, 0.5), 0.1 * k), k) for k in range(2)]
    _, metrics = strat.aggregate_fit(1, res, [])
    expected = server_step(CMAState.initial(D, 1.0), np.stack([np.zeros(D), np.ones(D)]), [0.0, 0.1],
                           metrics["sigma_prime"], "printed")
    assert metrics["sigma"] == pytest.approx(expected.sigma, rel=1e-9)


def test_perturbation_keeps_about_rp_of_text_tokens(backbone, demo):
    texts = list(demo.train["text"][:64])
    batch = backbone.encode(texts, [0] * 64)
    rng = np.random.default_rng(0)
    out = perturb(backbone, batch, 0.8, rng)
    att = batch.attention_mask.bool()
    text = att.clone()
    text[:, 0] = False
    text[torch.arange(64), att.sum(1) - 1] = False  # [SEP]
    kept = (out.input_ids == batch.input_ids)[text].float().mean().item()
    assert 0.76 < kept < 0.84
    assert torch.equal(out.input_ids[~text], batch.input_ids[~text])  # CLS, SEP, padding untouched
    assert perturb(backbone, batch, 1.0, rng) is batch


# ------------------------------------------------------------ bbt-fed Figure 2
def test_bbt_fed_average_z_sigma_C(backbone):
    cfg = make_config("bbt-fed", average="z-sigma-C", intrinsic_dim=20, local_steps=2, popsize=4,
                      prompt_length=4, max_length=48, shots_per_class=4, client_test_size=8)
    strat = BBTFed(cfg, TASKS["demo"])
    init = strat.initial_arrays()
    assert [a.shape for a in init] == [(20,), (1,), (20, 20)]
    client = client_class("bbt-fed")(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    up, n, _ = client.fit(init, {"server_round": 1})
    assert comm.check_arrays(up, strat.model.upload_specs()) is None
    assert [s.name for s in strat.model.upload_specs()] == ["z", "sigma", "C"]
    assert np.allclose(up[2], up[2].T, atol=1e-5) and np.linalg.eigvalsh(up[2]).min() > 0
    strat.global_arrays = init
    strat.rounds.begin(1)
    other = [up[0] * 0, up[1] * 3, np.eye(20, dtype=np.float32)]
    params, _ = strat.aggregate_fit(1, [fit_res_arrays(up, 0, n), fit_res_arrays(other, 1, n)], [])
    for got, a, b in zip(comm.decode(params), up, other, strict=True):
        np.testing.assert_allclose(got, (a + b) / 2, rtol=1e-5, atol=1e-6)


def fit_res_arrays(arrays, pid, n):
    return (SimpleNamespace(cid=str(pid)), FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid}))


def test_state_arrays_expose_the_global_cma_state(fedbpt):
    state = fedbpt.state_arrays()
    assert set(state) == {"mean", "sigma", "C", "p_sigma", "p_c", "generation"}
    np.testing.assert_array_equal(state["C"], np.eye(D))
    assert BBTFed(make_config("bbt-fed", max_length=64), TASKS["demo"]).state_arrays() == {}


# ------------------------------------------------ the authors' reference step (issue 15)
def test_reference_sigma_prime_hand_computed():
    """global_es.py: sqrt(sum over ALL m clients of sum_j sigma^2 / m / mu_l), mu_l = lambda // 2."""
    sigmas = [np.array([1.0, 1.0]), np.array([0.5, 0.5]), np.array([2.0, 2.0]), np.array([1.0, 0.0])]
    # sum of squares: 2 + 0.5 + 8 + 1 = 11.5; m = 4; lambda = 5 -> mu_l = 2 (pycma's RecombinationWeights(5).mu)
    assert reference_sigma_prime(sigmas, 5) == pytest.approx(np.sqrt(11.5 / 4 / 2))
    assert reference_sigma_prime(sigmas, 4) == pytest.approx(np.sqrt(11.5 / 8))  # lambda = 4 -> mu_l = 2 too
    from cma.recombination_weights import RecombinationWeights
    assert RecombinationWeights(5).mu == 2 and RecombinationWeights(20).mu == 10  # mu_l as the code reads it
    # eq. (4) of the paper on the same round keeps the factor 2 and the best half only
    assert corrected_sigma(sigmas, [0.3, 0.1, 0.4, 0.2], [4] * 4) == pytest.approx(2 * np.sqrt(1.5 / 16))
    with pytest.raises(ValueError, match="lambda >= 2"):
        reference_sigma_prime(sigmas, 1)


def _code_as_written(sigma_after, sigma_old, local_sigma_current):
    """global_es.py's lines after tell, transcribed statement by statement."""
    sigma = sigma_after / sigma_old * local_sigma_current
    local_sigma_current = sigma
    if sigma < 0.5:
        sigma = 0.5
    if sigma > local_sigma_current:
        sigma = local_sigma_current
    return sigma


@pytest.mark.parametrize("after, prime, prev", [(0.3, 0.6, 0.8), (0.9, 0.6, 0.8), (0.6, 0.6, 0.7), (1.2, 0.4, 1.0)])
def test_reference_local_sigma_and_its_clamp(after, prime, prev):
    ratio = after / prime * prev  # 0.4, 1.2, 0.7, 3.0
    assert reference_local_sigma(after, prime, prev, "as-run") == pytest.approx(ratio)
    assert reference_local_sigma(after, prime, prev, "as-run") == pytest.approx(_code_as_written(after, prime, prev))
    assert reference_local_sigma(after, prime, prev, "as-logged") == pytest.approx(min(max(ratio, 0.5), prev))


def test_reference_clamp_cases_by_hand():
    assert reference_local_sigma(0.3, 0.6, 0.8, "as-logged") == 0.5  # 0.4 raised to the floor
    assert reference_local_sigma(0.9, 0.6, 0.8, "as-logged") == 0.8  # 1.2 capped at the previous 0.8
    assert reference_local_sigma(0.3, 0.6, 0.8, "as-run") == pytest.approx(0.4)  # the code's order undoes the floor
    with pytest.raises(ValueError, match="clamp"):
        reference_local_sigma(1, 1, 1, "tight")


def _mock_reference_round(m=4, d=3, clamp="as-run"):
    es = ReferenceServerES(d, sigma0=1.0, m=m, seed=7, clamp=clamp)
    # small deviations from z_t = 0: pycma keeps them as they are (no Mahalanobis shortening)
    z = np.array([[0.01, 0.0, 0.0], [0.0, 0.02, 0.0], [0.0, 0.0, 0.03], [0.01, 0.01, 0.01]])
    return es, z, [0.3, 0.1, 0.4, 0.2]


def test_reference_server_step_by_hand():
    """One reference step on a mock round: all 4 clients recombined with pycma's weights
    for CMA_mu = m = 4, i.e. the positive half of RecombinationWeights(8):
    w_i ∝ ln(4.5) - ln(i) = 1.504, 0.811, 0.405, 0.118 -> / 2.838."""
    es, z, fit = _mock_reference_round()
    raw = np.log(4.5) - np.log([1, 2, 3, 4])
    w = raw / raw.sum()
    np.testing.assert_allclose(w, [0.52993, 0.28571, 0.14286, 0.04150], atol=1e-5)
    np.testing.assert_allclose(es.weights(), w, rtol=1e-12)
    sigmas = [np.full(2, 0.8), np.full(2, 0.6), np.full(2, 1.0), np.full(2, 0.7)]
    sp = reference_sigma_prime(sigmas, 5)
    assert sp == pytest.approx(np.sqrt((2 * 0.64 + 2 * 0.36 + 2 * 1.0 + 2 * 0.49) / 4 / 2))  # 0.7280
    after = es.tell(z, fit, sp)
    # ranked by fitness: clients 1 (0.1), 3 (0.2), 0 (0.3), 2 (0.4)
    np.testing.assert_allclose(es.mean, w[0] * z[1] + w[1] * z[3] + w[2] * z[0] + w[3] * z[2], rtol=1e-9)
    np.testing.assert_allclose(es.mean, [0.0042857, 0.0134558, 0.0041021], rtol=1e-4)
    assert es.sigma_local == pytest.approx(after / sp * 1.0)  # sigma_0 = 1 before the first step
    assert after < sp  # the clients moved << sigma': pycma's path length shrinks sigma
    assert np.allclose(es.C, es.C.T) and not np.allclose(es.C, np.eye(3))  # rank-mu update from the uploads


def test_reference_server_step_keeps_state_with_one_upload():
    es, z, fit = _mock_reference_round()
    assert es.tell(z[:1], fit[:1], 0.5) is None  # one upload is no population
    np.testing.assert_array_equal(es.mean, np.zeros(3))
    assert es.sigma_local == 1.0
    assert es.tell(z[:3], fit[:3], 0.5) is not None  # 3 of m = 4: a step over those 3


def test_reference_server_step_as_logged_clamp():
    es, z, fit = _mock_reference_round(clamp="as-logged")
    after = es.tell(z, fit, 0.7)
    assert es.sigma_local == pytest.approx(min(max(after / 0.7, 0.5), 1.0))


def test_strategy_reference_round(backbone):
    """The strategy sends (pycma mean, sigma_local, pycma C) after one reference step."""
    cfg = make_config("fedbpt", intrinsic_dim=3, local_steps=2, popsize=5, prompt_length=2, max_length=64,
                      server_step="reference")
    strat = FedBPT(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    np.testing.assert_array_equal(strat.global_arrays[0], np.zeros(3))
    strat.rounds.begin(1)
    _, z, fit = _mock_reference_round()
    sig = [np.full(2, 0.8), np.full(2, 0.6), np.full(2, 1.0), np.full(2, 0.7)]
    res = [fit_res(upload(z[k], sig[k], fit[k]), k) for k in range(4)]
    params, metrics = strat.aggregate_fit(1, res, [])
    got_z, got_sigma, got_C = comm.decode(params)
    raw = np.log(4.5) - np.log([1, 2, 3, 4])
    w = raw / raw.sum()
    z32 = z.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(got_z, w[0] * z32[1] + w[1] * z32[3] + w[2] * z32[0] + w[3] * z32[2], rtol=1e-5)
    assert metrics["sigma_prime"] == pytest.approx(np.sqrt(2 * (0.64 + 0.36 + 1.0 + 0.49) / 4 / 2), rel=1e-6)
    assert got_sigma[0] == pytest.approx(metrics["sigma_after"] / metrics["sigma_prime"], rel=1e-6)
    assert metrics["sigma"] == pytest.approx(got_sigma[0], rel=1e-6)
    np.testing.assert_allclose(got_C, strat.server.es.C, rtol=1e-6)
    assert strat.record.method_metrics["z_norm"] == pytest.approx(np.linalg.norm(got_z), rel=1e-5)
    assert set(strat.state_arrays()) >= {"mean", "sigma", "C"}


def test_reference_clients_use_pycma_default_weights(backbone, monkeypatch):
    import clients.fedbpt as client_module

    seen = []
    real = client_module.WhitenedCMA

    def spy(*args, **kwargs):
        seen.append(kwargs["equal_weights"])
        return real(*args, **kwargs)

    monkeypatch.setattr(client_module, "WhitenedCMA", spy)
    for step in ("paper", "reference"):
        cfg = make_config("fedbpt", intrinsic_dim=4, local_steps=1, popsize=4, prompt_length=2, max_length=48,
                          shots_per_class=2, client_test_size=4, server_step=step)
        calls = []
        client = _recording_client(cfg, calls)
        client.train(client.model.initial_arrays(), {"server_round": 1})
    assert seen == [True, False]


def test_ratio_fitness_is_loss_over_perturbed_loss(backbone):
    """fitness=ratio: each candidate's loss on the shots / on the perturbed shots, two
    forwards per iteration; the uploaded F is the ratio, train_loss the plain loss."""
    cfg = make_config("fedbpt", intrinsic_dim=4, local_steps=3, popsize=4, keep_rate=0.5, prompt_length=2,
                      max_length=48, shots_per_class=4, client_test_size=4, fitness="ratio")
    client = client_class("fedbpt")(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    calls = []
    told = []

    def fitness(candidates, batch=None):
        calls.append(batch is None)
        base = 1.0 + np.sum(np.square(candidates), axis=1)
        return base if batch is None else 4.0 * base  # perturbed loss = 4x the loss

    client.fitness = fitness
    real_tell = WhitenedCMA.tell

    def tell(self, f):
        told.append(np.asarray(f))
        real_tell(self, f)

    WhitenedCMA.tell = tell
    try:
        (up,), _, metrics = client.train(client.model.initial_arrays(), {"server_round": 1})
    finally:
        WhitenedCMA.tell = real_tell
    # per iteration: perturbed, then plain (2 forwards); then the final plain loss and the final ratio
    assert calls == [False, True] * 3 + [True, False, True]
    for f in told:
        np.testing.assert_allclose(f, 0.25)  # loss / (4 loss)
    assert up[-1] == pytest.approx(0.25)
    assert metrics == pytest.approx(1.0 + np.sum(np.square(up[:4].astype(np.float64))), rel=1e-5)


@pytest.mark.parametrize("overrides, message", [
    ({"fitness": "ratio", "keep_rate": 1.0}, "needs perturbed inputs"),
    ({"server_step": "reference", "sigma_update": "printed"}, "applies to fedbpt.server-step='paper' only"),
    ({"reference_clamp": "as-logged"}, "applies to fedbpt.server-step='reference' only"),
    ({"server_step": "nvflare"}, "choose one of: paper, reference"),
    ({"fitness": "loss"}, "choose one of: perturbed, ratio"),
])
def test_reference_options_are_validated(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_config("fedbpt", **overrides)


# ------------------------------------------------ boundaries and the reference step's wiring
def test_sigma_primes_accept_a_local_population_of_two():
    """lambda = 2 is the smallest population (mu_l = 1); lambda = 1 is refused."""
    s = [np.array([0.6, 0.8])]  # sum of squares 0.36 + 0.64 = 1
    # eq. (12), one client: mu = max(1, 1 // 2) = 1, mu_l = 2 / 2 = 1 -> sqrt(1 / 1 / 1) = 1
    assert corrected_sigma(s, [0.1], [2]) == pytest.approx(1.0)
    # two clients, both lambda = 2: mu = 1, the best is client 1 (0.1): sqrt(0.25 / 1 / 1) = 0.5
    assert corrected_sigma([np.array([2.0]), np.array([0.5])], [0.3, 0.1], [2, 2]) == pytest.approx(0.5)
    # reference: sqrt(1 / m=1 / mu_l = 2 // 2 = 1) = 1
    assert reference_sigma_prime(s, 2) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="lambda_k >= 2"):
        corrected_sigma(s, [0.1], [1])
    with pytest.raises(ValueError, match="lambda >= 2"):
        reference_sigma_prime(s, 1)


def test_sigma_prime_breaks_loss_ties_by_client_order():
    """Tied losses across the mu cut: the best half keeps the earlier clients (a stable
    sort), also past 16 clients where numpy's default (quick/SIMD) sort reorders ties."""
    n = 40  # mu = 20
    losses = [0.75] * 10 + [0.5] * 20 + [0.25] * 10  # the cut falls inside the 0.5 group (clients 10..29)
    sigmas = [np.array([5.0])] * 10 + [np.array([1.0])] * 10 + [np.array([3.0])] * 10 + [np.array([1.0])] * 10
    # best 20, stable: clients 30..39 (0.25) then 10..19 (first ten at 0.5), every sigma^2 = 1, lambda = 2 -> mu_l = 1:
    # sqrt(20 * 1 / 1 / 20) = 1. Any of clients 20..29 in the set (sigma^2 = 9) would give > 1.
    assert corrected_sigma(sigmas, losses, [2] * n) == pytest.approx(1.0)


def _ref_step(clamp="as-run"):
    from strategies.fedbpt import ReferenceStep

    mcfg = make_config("fedbpt", intrinsic_dim=3, local_steps=2, popsize=5, server_step="reference",
                       reference_clamp=clamp).method_config
    return ReferenceStep(mcfg, seed=7)


def _ups(z, sigmas, losses):
    from fedtext.methods.fedbpt.model import FedBPTUpload

    return [FedBPTUpload(np.asarray(a, np.float64), np.asarray(s, np.float64), float(f))
            for a, s, f in zip(z, sigmas, losses, strict=True)]


def test_reference_step_passes_the_configured_clamp():
    """fedbpt.reference-clamp reaches the pycma server: on a round whose ratio
    sigma_after / sigma' > 1, as-logged caps sigma_local at the previous (sigma_0 = 1)."""
    z = np.array([[1.0, 1.0, 0.9], [1.1, 1.0, 1.0], [1.0, 0.9, 1.0], [1.0, 1.0, 1.1]])  # all moved the same way
    sig = [np.full(2, 0.8), np.full(2, 0.6), np.full(2, 1.0), np.full(2, 0.7)]
    fit = [0.3, 0.1, 0.4, 0.2]
    run, logged = _ref_step("as-run"), _ref_step("as-logged")
    m_run, m_logged = run.step(_ups(z, sig, fit)), logged.step(_ups(z, sig, fit))
    assert run.es.clamp == "as-run" and logged.es.clamp == "as-logged"
    # sigma' = sqrt(2 (0.64 + 0.36 + 1 + 0.49) / 4 / 2) = sqrt(0.6225) = 0.78899
    assert m_logged["sigma_prime"] == pytest.approx(np.sqrt(0.6225))
    assert m_run["sigma_after"] == pytest.approx(m_logged["sigma_after"])  # same pycma step, only the clamp differs
    ratio = m_run["sigma_after"] / m_run["sigma_prime"]
    assert ratio > 1  # (1.19 / 0.789 = 1.51 here) so the clamps part
    assert m_run["sigma"] == pytest.approx(ratio * 1.0)  # as-run: never clamped
    assert m_logged["sigma"] == 1.0  # as-logged: min(max(1.51, 0.5), previous 1.0) = 1.0
    assert logged.distribution()[1] == 1.0


def test_reference_step_with_two_clients_takes_a_step():
    """Two uploads at the first round: pycma's population is m = 2, and they are told;
    weights: positive half of RecombinationWeights(4), w_i ∝ ln(2.5) - ln(i) = 0.916, 0.223 -> 0.804, 0.196."""
    step = _ref_step()
    z = [[0.01, 0.0, 0.0], [0.0, 0.02, 0.0]]
    metrics = step.step(_ups(z, [np.full(2, 0.8), np.full(2, 0.6)], [0.3, 0.1]))
    assert step.es.m == 2
    assert "sigma_after" in metrics and "server_step_skipped" not in metrics
    w = np.log(2.5) - np.log([1, 2])
    w /= w.sum()
    np.testing.assert_allclose(w, [0.80416, 0.19584], atol=1e-5)
    # ranked: client 1 (0.1), then client 0 (0.3)
    np.testing.assert_allclose(step.es.mean, w[0] * np.array(z[1]) + w[1] * np.array(z[0]), rtol=1e-9)


def test_reference_step_with_one_upload_is_skipped():
    """One valid upload is no population: no step; metrics say so and keep sigma_local."""
    step = _ref_step()
    metrics = step.step(_ups([[0.01, 0.0, 0.0]], [[0.8, 0.6]], [0.3]))
    # sigma' = sqrt((0.64 + 0.36) / k=1 / mu_l = 5 // 2 = 2) = sqrt(0.5)
    assert metrics == pytest.approx({"sigma_prime": np.sqrt(0.5), "sigma": 1.0, "server_step_skipped": 1})
    assert metrics["server_step_skipped"] == 1 and isinstance(metrics["server_step_skipped"], int)
    np.testing.assert_array_equal(step.es.mean, np.zeros(3))


def test_reference_step_short_round_recombines_the_valid_uploads():
    """A round with 3 of 4 uploads (one dropped) takes a step over those 3: sigma' divides by 3
    and pycma's weights are those of a population of 3, w_i ∝ ln(3.5) - ln(i) (before: the
    round was skipped, m having been fixed at 4 by round 1, while sigma' divided by 3)."""
    step = _ref_step()
    z = [[0.01, 0.0, 0.0], [0.0, 0.02, 0.0], [0.0, 0.0, 0.03], [0.01, 0.01, 0.01]]
    sig = [np.full(2, 0.8), np.full(2, 0.6), np.full(2, 1.0), np.full(2, 0.7)]
    step.step(_ups(z, sig, [0.3, 0.1, 0.4, 0.2]))
    assert step.es.m == 4
    old = step.es.mean.copy()
    z2 = [list(old + d) for d in ([0.002, 0.0, 0.0], [0.0, -0.003, 0.0], [0.0, 0.0, 0.001])]
    short = step.step(_ups(z2, sig[:3], [0.3, 0.1, 0.4]))
    # sigma' = sqrt(2 (0.64 + 0.36 + 1) / 3 / 2) = sqrt(2/3): the same 3 clients
    assert short["sigma_prime"] == pytest.approx(np.sqrt(2 / 3)) and "server_step_skipped" not in short
    w = np.log(3.5) - np.log([1, 2, 3])
    w /= w.sum()  # 0.6162, 0.2676, 0.1162
    ranked = np.array(z2)[[1, 0, 2]]  # losses 0.1, 0.3, 0.4
    np.testing.assert_allclose(step.es.mean, old + w @ (ranked - old), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(step.es.weights(3), w, rtol=1e-12)


def test_the_reference_server_is_built_for_the_configured_clients_whatever_round_1_dropped(backbone):
    """Issue 58 item 3: the reference server's pycma population was built from round 1's
    valid uploads, so 3 valid of 5 made an ES of m = 3. Now it is built for
    clients-per-round = 5: round 1 still recombines its 3 (pycma's weights for 3, the short
    round's rule), and rounds 2 and 3 with 5 uploads are, bit for bit, the steps of a server
    of population 5 that round 1 left in the same state (before this, a server built for 5
    whose first step was short failed in its next ask(): pycma's timer was not carried)."""
    from fedtext.methods.fedbpt.cmaes import carry_state

    cfg = make_config("fedbpt", intrinsic_dim=D, local_steps=STEPS, popsize=4, prompt_length=2, max_length=64,
                      server_step="reference", clients_per_round=5)
    strat = FedBPT(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    rng = np.random.default_rng(0)

    def round_(t: int, valid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Round t with 5 uploads, those past ``valid`` non-finite (dropped); the valid ones as
        the server reads them (float32 on the wire)."""
        strat.rounds.begin(t)
        vecs = np.stack([upload(strat.server.distribution()[0] + 0.1 * rng.standard_normal(D),
                                0.5 + rng.random(STEPS), rng.random()) for _ in range(5)]).astype(np.float32)
        vecs[valid:, 0] = np.nan
        strat.aggregate_fit(t, [fit_res(v, k) for k, v in enumerate(vecs)], [])
        assert strat.record.num_clients == valid
        seen = vecs[:valid].astype(np.float64)
        return seen[:, :D], seen[:, D:-1], seen[:, -1]

    _, sig, _ = round_(1, valid=3)
    es = strat.server.es
    assert es.m == 5 and es.es.popsize == 5  # before: 3
    np.testing.assert_array_equal(es.weights(), ReferenceServerES(D, 1.0, 5, seed=1).weights())
    assert strat.record.method_metrics["sigma_prime"] == reference_sigma_prime(list(sig), 4)  # over the 3
    twin = ReferenceServerES(D, cfg.method_config.sigma0, 5, strat.server.seed)
    twin.es.ask()  # as a server that stepped itself
    carry_state(es.es, twin.es)
    twin.sigma_local = es.sigma_local
    for t in (2, 3):
        z, sig, fit = round_(t, valid=5)
        twin.tell(z, list(fit), reference_sigma_prime(list(sig), 4))
        np.testing.assert_array_equal(es.mean, twin.mean)
        np.testing.assert_array_equal(es.C, twin.C)
        assert es.sigma_local == twin.sigma_local and es.es.countiter == twin.es.countiter == t


def test_with_clients_per_round_0_the_reference_population_is_the_clients_asked(backbone):
    """clients-per-round=0 (every client): the population is the round's sampled clients
    (FedBPT.sample_clients counts them), not its valid uploads."""
    cfg = make_config("fedbpt", intrinsic_dim=D, local_steps=STEPS, popsize=4, prompt_length=2, max_length=64,
                      server_step="reference")
    from flwr.server import SimpleClientManager

    class Proxy(SimpleNamespace):  # a connected client that reports its partition id
        def get_properties(self, ins, timeout, group_id):
            return SimpleNamespace(properties={"partition_id": int(self.cid), "domain": ""})

    manager = SimpleClientManager()
    for pid in range(4):
        manager.register(Proxy(cid=str(pid)))
    strat = FedBPT(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    assert len(strat.sample_clients(1, manager)) == 4
    vecs = [upload(0.01 * np.arange(D) * k, np.full(STEPS, 0.5), 0.1 * k) for k in range(3)]  # client 3 failed
    strat.aggregate_fit(1, [fit_res(v, k) for k, v in enumerate(vecs)], [])
    assert strat.record.num_clients == 3 and strat.server.es.m == 4


@pytest.mark.parametrize("d", [3, 40])  # d = 40: pycma re-decomposes C lazily, every few steps
def test_carried_state_is_pycmas_own_step(d):
    """carry_state is complete: a server built for 5 clients that is told 4 uploads every round
    (each step through a population-4 ES carrying its state) ends bitwise where a server built
    for 4 ends, over 12 rounds (mean, sigma, C, both paths); a missing piece of state (a path,
    the iteration count, C's decomposition or its lazy-update counters) moves it."""
    from fedtext.methods.fedbpt.cmaes import ReferenceServerES

    direct, carried = ReferenceServerES(d, 1.0, 4, seed=3), ReferenceServerES(d, 1.0, 5, seed=3)
    rng = np.random.default_rng(1)
    for _ in range(12):
        z = direct.mean + 0.3 * rng.standard_normal((4, d))
        f, sp = rng.random(4), 0.5 + rng.random()
        direct.tell(z, f, sp)
        carried.tell(z, f, sp)
    a, b = direct.es, carried.es
    np.testing.assert_array_equal(a.mean, b.mean)
    assert a.sigma == b.sigma and direct.sigma_local == carried.sigma_local
    np.testing.assert_array_equal(a.sm.C, b.sm.C)
    np.testing.assert_array_equal(a.pc, b.pc)
    np.testing.assert_array_equal(a.adapt_sigma.ps, b.adapt_sigma.ps)
    assert a.countiter == b.countiter == 12


@pytest.mark.parametrize("server_step", ["paper", "reference"])
def test_a_round_with_one_valid_upload_skips_the_server_step(fedbpt, server_step):
    """Both server steps: one valid upload (the others dropped) is no population; the state is
    kept and the round says so (before: the paper step recombined the single client with mu = 1)."""
    import dataclasses

    from strategies.fedbpt import SERVER_STEPS

    mcfg = dataclasses.replace(fedbpt.mcfg, server_step=server_step)
    fedbpt.server = SERVER_STEPS[server_step](mcfg, 7)
    before = [a.copy() for a in fedbpt.global_state()]
    z = np.full(D, 0.5)
    upload = Upload(proxy=None, partition_id="0", num_examples=4,
                    arrays={UPLOAD: fedbpt.model.pack_upload(z, [0.9] * STEPS, 0.3)}, metrics={})
    arrays, metrics = fedbpt.aggregate(1, [upload])
    assert metrics["server_step_skipped"] == 1.0
    assert metrics["z_norm"] == float(np.linalg.norm(before[0])) == 0.0  # |z|, not |sigma| = 1
    for a, b in zip(arrays, before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_fedbpt_needs_two_clients_per_round():
    """One client per round is a one-line config error (eq. (4)'s best half is empty; the
    authors' code refuses to start); so is clients-per-round=0 with one connected client."""
    with pytest.raises(ConfigError, match="fedbpt needs at least 2 clients per round, got clients-per-round=1"):
        make_config("fedbpt", clients_per_round=1)
    make_config("bbt-fed", clients_per_round=1)  # FedAvg of z takes one
    cfg = make_config("fedbpt", clients_per_round=0)
    cfg.check_num_clients(2)
    with pytest.raises(ConfigError, match="fedbpt needs at least 2 clients per round; 1 connected"):
        cfg.check_num_clients(1)


# ------------------------------------------- CMA-ES constants / server step vs. hand-written tutorial
def _tutorial_constants(n, mu):
    """Hansen (2016) Table 1 with equal weights (mu_eff = mu), written out independently."""
    mueff = float(mu)
    cs = (mueff + 2) / (n + mueff + 5)
    ds = 1 + 2 * max(0.0, ((mueff - 1) / (n + 1)) ** 0.5 - 1) + cs
    cc = (4 + mueff / n) / (n + 4 + 2 * mueff / n)
    c1 = 2 / ((n + 1.3) ** 2 + mueff)
    cmu = min(1 - c1, 2 * (mueff - 2 + 1 / mueff) / ((n + 2) ** 2 + mueff))
    chin = n**0.5 * (1 - 1 / (4 * n) + 1 / (21 * n * n))
    return cs, ds, cc, c1, cmu, chin


@pytest.mark.parametrize("n, mu, expected", [
    # n=2, mu=10: c_s = 12/17; d_s = 1 + 2 (sqrt(9/3) - 1) + 12/17 (max active, sqrt(3) in (1, 2));
    # c_c = (4 + 5)/(2 + 4 + 10) = 9/16; c_1 = 2/(3.3^2 + 10) = 2/20.89; c_mu = 2 (8.1)/(16 + 10) = 16.2/26
    # (< 1 - c_1); chi_n = sqrt(2) (1 - 1/8 + 1/84)
    (2, 10, (12 / 17, 1 + 2 * (3**0.5 - 1) + 12 / 17, 9 / 16, 2 / 20.89, 16.2 / 26, 2**0.5 * (1 - 1 / 8 + 1 / 84))),
    # n=2, mu=50: d_s = 1 + 2 (sqrt(49/3) - 1) + 52/57 (sqrt(49/3) = 4.04 > 2); c_1 = 2/(10.89 + 50);
    # 2 (48.02)/(16 + 50) = 1.455 > 1 - c_1 -> c_mu = 1 - c_1 (the min's first branch)
    (2, 50, (52 / 57, 1 + 2 * ((49 / 3) ** 0.5 - 1) + 52 / 57, 29 / 56, 2 / 60.89, 1 - 2 / 60.89,
             2**0.5 * (1 - 1 / 8 + 1 / 84))),
    # n=5, mu=12: c_s = 14/22; d_s = 1 + 2 (sqrt(11/6) - 1) + 14/22; c_c = 6.4/13.8; c_1 = 2/(6.3^2 + 12);
    # c_mu = 2 (10 + 1/12)/(49 + 12); chi_n = sqrt(5) (1 - 1/20 + 1/525) (n != 2: n**2 != n*2)
    (5, 12, (14 / 22, 1 + 2 * ((11 / 6) ** 0.5 - 1) + 14 / 22, 6.4 / 13.8, 2 / (6.3**2 + 12),
             2 * (10 + 1 / 12) / 61, 5**0.5 * (1 - 1 / 20 + 1 / 525))),
    # n=10, mu=3: sqrt(2/11) < 1 -> d_s = 1 + c_s = 1 + 5/18
    (10, 3, (5 / 18, 1 + 5 / 18, (4 + 0.3) / (14 + 0.6), 2 / (11.3**2 + 3), 2 * (1 + 1 / 3) / (144 + 3),
             10**0.5 * (1 - 1 / 40 + 1 / 2100))),
])
def test_cma_constants_field_by_field_against_tutorial(n, mu, expected):
    k = CMAConstants.for_population(n, mu)
    assert k.n == n and k.mu == mu
    got = (k.c_sigma, k.d_sigma, k.c_c, k.c_1, k.c_mu, k.chi_n)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    np.testing.assert_allclose(got, _tutorial_constants(n, mu), rtol=1e-12)
    # the hand values, rounded: c_s, d_s, c_c, c_1, c_mu, chi_n
    rounded = {(2, 10): (0.7058823529, 3.1699839681, 0.5625, 0.0957395883, 0.6230769231, 1.2542727428),
               (2, 50): (0.9122807018, 7.9951844704, 0.5178571429, 0.0328461159, 0.9671538841, 1.2542727428),
               (5, 12): (0.6363636364, 2.3443764379, 0.4637681159, 0.0386922035, 0.3306010929, 2.1285237557),
               (10, 3): (0.2777777778, 1.2777777778, 0.2945205479, 0.0153033897, 0.0181405896, 3.0847265652)}
    np.testing.assert_allclose(got, rounded[(n, mu)], atol=1e-9)


def test_inv_sqrt_of_eigenvalues_below_one():
    from fedtext.methods.fedbpt.cmaes import inv_sqrt
    # diag(0.25, 4)^{-1/2} = diag(1/0.5, 1/2) = diag(2, 0.5)
    np.testing.assert_allclose(inv_sqrt(np.diag([0.25, 4.0])), np.diag([2.0, 0.5]), atol=1e-12)
    # rotated: R diag(0.01, 9) R^T -> R diag(10, 1/3) R^T
    c, s = np.cos(0.3), np.sin(0.3)
    R = np.array([[c, -s], [s, c]])
    np.testing.assert_allclose(inv_sqrt(R @ np.diag([0.01, 9.0]) @ R.T), R @ np.diag([10.0, 1 / 3]) @ R.T,
                               atol=1e-10)


def _reference_server_step(state, solutions, losses, sigma_prime):
    """Hansen's tutorial update (equal weights, sigma' in place of sigma), written from the equations."""
    import scipy.linalg

    n = len(state.mean)
    mu = max(1, len(solutions) // 2)
    cs, ds, cc, c1, cmu, chin = _tutorial_constants(n, mu)
    best = sorted(range(len(losses)), key=lambda i: losses[i])[:mu]
    ys = [(np.asarray(solutions[i], float) - state.mean) / sigma_prime for i in best]
    yw = sum(ys) / mu
    mean = state.mean + sigma_prime * yw
    c_inv_half = np.real(scipy.linalg.fractional_matrix_power(state.C, -0.5))
    ps = (1 - cs) * state.p_sigma + np.sqrt(cs * (2 - cs) * mu) * c_inv_half @ yw
    g = state.generation + 1
    lhs = np.sqrt(ps @ ps) / np.sqrt(1 - (1 - cs) ** (2 * g))
    h = 1.0 if lhs < (1.4 + 2 / (n + 1)) * chin else 0.0
    pc = (1 - cc) * state.p_c + h * np.sqrt(cc * (2 - cc) * mu) * yw
    dh = (1 - h) * cc * (2 - cc)  # tutorial's delta(h_sigma)
    rank_mu = sum(np.outer(y, y) for y in ys) / mu
    C = (1 + c1 * dh - c1 - cmu) * state.C + c1 * np.outer(pc, pc) + cmu * rank_mu
    sigma = sigma_prime * np.exp(cs / ds * (np.sqrt(ps @ ps) / chin - 1))
    return CMAState(mean, sigma, C, ps, pc, g), h


def _assert_states_close(got, want):
    for f in ("mean", "C", "p_sigma", "p_c"):
        np.testing.assert_allclose(getattr(got, f), getattr(want, f), rtol=1e-9, atol=1e-12, err_msg=f)
    assert got.sigma == pytest.approx(want.sigma, rel=1e-9)
    assert got.generation == want.generation


@pytest.mark.parametrize("p_sigma_scale, h_expected", [(0.1, 1.0), (50.0, 0.0)])
def test_server_step_generations_against_tutorial_reference(p_sigma_scale, h_expected):
    rng = np.random.default_rng(7)
    n = 3
    A = rng.normal(size=(n, n))
    C0 = A @ A.T + 0.5 * np.eye(n)
    state = CMAState(np.array([0.7, -1.3, 2.1]), 0.4, C0, p_sigma_scale * np.array([1.0, -2.0, 0.5]),
                     np.array([0.3, -0.2, 0.9]), 0)
    ref = state
    for g in range(1, 5):
        sols = state.mean + 0.3 * rng.normal(size=(6, n))  # |S| = 6 -> mu = 3
        losses = list(rng.random(6))
        sp = 0.25 + 0.05 * g
        state = server_step(state, sols, losses, sp)
        ref, h = _reference_server_step(ref, sols, losses, sp)
        if g == 1:
            assert h == h_expected  # huge |p_sigma| stalls p_c (h=0), a small one does not
        _assert_states_close(state, ref)
        assert state.generation == g


def _threshold_state(g, rel):
    """A state whose new p_sigma = (1-c_s) p_sigma_old (the best mu average at z_t) with
    |p_sigma| / sqrt(1 - (1-c_s)^(2g)) = rel * (1.4 + 2/(n+1)) chi_n."""
    n, mu = 4, 2
    cs, _, _, _, _, chin = _tutorial_constants(n, mu)
    # n=4: 1.4 + 2/5 = 1.8; chi_n = 2 (1 - 1/16 + 1/336)
    target = rel * 1.8 * chin * np.sqrt(1 - (1 - cs) ** (2 * g))
    direction = np.array([1.0, 2.0, -2.0, 4.0]) / 5.0  # unit norm: (1 + 4 + 4 + 16) / 25
    mean = np.array([0.5, -1.0, 1.5, 2.0])
    d = np.array([0.1, 0.2, -0.1, 0.3])
    sols = np.array([mean + d, mean - d, mean + 5 * d, mean - 7 * d])  # best two average to the mean
    state = CMAState(mean, 0.3, np.diag([1.0, 2.0, 0.5, 1.5]), target / (1 - cs) * direction,
                     np.array([0.2, -0.1, 0.4, 0.3]), g - 1)
    return state, sols, [0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize("g, rel, h_expected", [
    (1, 1 + 1e-6, 0.0), (1, 1 - 1e-6, 1.0), (2, 1 + 1e-6, 0.0), (2, 1 - 1e-6, 1.0), (3, 1 - 1e-6, 1.0),
    (3, 1 + 1e-6, 0.0),
])
def test_server_step_h_sigma_at_the_threshold(g, rel, h_expected):
    state, sols, losses = _threshold_state(g, rel)
    new = server_step(state, sols, losses, 0.2)
    ref, h = _reference_server_step(state, sols, losses, 0.2)
    assert h == h_expected
    _assert_states_close(new, ref)
    # h_sigma is visible in C: with y_w = 0, p_c = (1-c_c) p_c_old either way, C's factor carries c_h
    _, _, cc, c1, cmu, _ = _tutorial_constants(4, 2)
    ys = (sols[:2] - state.mean) / 0.2
    pc = (1 - cc) * state.p_c
    C = (1 - c1 - cmu + (1 - h_expected) * c1 * cc * (2 - cc)) * state.C + c1 * np.outer(pc, pc) \
        + cmu * (ys.T @ ys) / 2
    np.testing.assert_allclose(new.C, C, rtol=1e-10)


def test_server_step_h_sigma_is_strict_at_exact_equality():
    """|p_sigma| / sqrt(1 - (1-c_s)^(2g)) == (1.4 + 2/(n+1)) chi_n exactly: the indicator is '<', so h = 0."""
    n, mu, g = 4, 2, 1
    k = CMAConstants.for_population(n, mu)
    a = np.sqrt(1 - (1 - k.c_sigma) ** (2 * g))
    thr = (1.4 + 2 / (n + 1)) * k.chi_n
    mean = np.array([0.5, -1.0, 1.5, 2.0])
    d = np.array([0.125, 0.25, -0.125, 0.375])  # dyadic: (mean + d) - mean == d exactly -> y_w == 0 exactly
    sols = np.array([mean + d, mean - d, mean + 4 * d, mean - 8 * d])
    # find a float t with |(1-c_s) t| / a == thr bit for bit (scan the floats around thr a / (1-c_s))
    t = thr * a / (1 - k.c_sigma)
    for _ in range(2000):
        if abs((1 - k.c_sigma) * t) / a == thr:
            break
        t = np.nextafter(t, np.inf if abs((1 - k.c_sigma) * t) / a < thr else -np.inf)
    else:
        pytest.fail("no float p_sigma on the threshold")
    state = CMAState(mean, 0.3, np.diag([1.0, 2.0, 0.5, 1.5]), np.array([t, 0.0, 0.0, 0.0]),
                     np.array([0.2, -0.1, 0.4, 0.3]), g - 1)
    new = server_step(state, sols, [0.1, 0.2, 0.3, 0.4], 0.25)
    assert np.linalg.norm(new.p_sigma) / a == thr  # on the threshold exactly
    ys = (sols[:2] - mean) / 0.25
    pc = (1 - k.c_c) * state.p_c
    # h = 0: C factor 1 - c_1 - c_mu + c_1 c_c (2 - c_c)
    C = (1 - k.c_1 - k.c_mu + k.c_1 * k.c_c * (2 - k.c_c)) * state.C + k.c_1 * np.outer(pc, pc) \
        + k.c_mu * (ys.T @ ys) / 2
    np.testing.assert_allclose(new.C, C, rtol=1e-12)


# ------------------------------------------- tie order, the reference defaults, the pycma server's state
def test_server_step_best_half_breaks_loss_ties_by_client_order() -> None:
    """Alg. 2 line 1 with tied losses across the mu cut: the best half is a stable sort's,
    i.e. the earlier clients; 40 uploads (mu = 20), past the 16 where numpy's default
    (quick/SIMD) argsort reorders ties. Equal weights: the new mean is the best half's mean."""
    losses = [0.75] * 10 + [0.5] * 20 + [0.25] * 10  # the cut falls inside the 0.5 group (clients 10..29)
    sols = np.array([[5.0, 5.0]] * 10 + [[1.0, 0.0]] * 10 + [[0.0, 1.0]] * 10 + [[1.0, 0.0]] * 10)
    new = server_step(CMAState.initial(2, 1.0), sols, losses, 0.5)
    # best 20, stable: clients 30..39 and 10..19, all at (1, 0): y = (1, 0) / 0.5 = (2, 0), z' = 0 + 0.5 (2, 0).
    # Any of clients 20..29 (at (0, 1)) in the set would move the second coordinate.
    np.testing.assert_array_equal(new.mean, [1.0, 0.0])


def test_reference_local_sigma_default_clamp_is_as_run() -> None:
    """``reference_local_sigma``'s default is the code as run (never clamped):
    0.2 / 1.0 · 1.0 = 0.2, where as-logged would raise it to the floor 0.5."""
    assert reference_local_sigma(0.2, 1.0, 1.0) == pytest.approx(0.2)
    assert reference_local_sigma(0.2, 1.0, 1.0, "as-logged") == 0.5


def test_reference_tell_leaves_sigma_local_on_pycma_and_silences_only_injection_warnings(monkeypatch) -> None:
    """After a reference step pycma's sigma is sigma_local (``global_es.sigma``, what the
    clients are sent); during it, pycma's InjectionWarning (the uploads are injected
    solutions by design) is silenced and any other warning still reaches the caller."""
    import warnings

    import cma

    es, z, fit = _mock_reference_round()
    real_tell = es.es.tell

    def warning_tell(*args, **kwargs):
        warnings.warn("orphanated injected solution", cma.evolution_strategy.InjectionWarning)
        warnings.warn("some other pycma warning", UserWarning)
        return real_tell(*args, **kwargs)

    monkeypatch.setattr(es.es, "tell", warning_tell)
    with pytest.warns(UserWarning) as record:
        after = es.tell(z, fit, 0.7)
    assert [str(w.message) for w in record] == ["some other pycma warning"]
    assert es.sigma_local == pytest.approx(after / 0.7 * 1.0)  # as-run, sigma_0 = 1
    assert es.es.sigma == es.sigma_local


# ------------------------------------------- pycma pinned to the authors' step-size rule
def test_classic_chi_n_is_cma_34s_expected_norm():
    """E|N(0, I_n)| as cma 3.4: exact for n <= 6 (sqrt(2) Γ((n+1)/2) / Γ(n/2)), above
    sqrt(n) (1 - 1/(4n) + 1/(26 n^2)) (cma 4.5: 1/(32 n^2), and exact up to 100)."""
    import math

    from fedtext.learning.blackbox import classic_chi_n

    for n in range(1, 7):
        assert classic_chi_n(n) == pytest.approx(math.sqrt(2) * math.gamma((n + 1) / 2) / math.gamma(n / 2), rel=1e-12)
    for n in (7, 10, 500):
        assert classic_chi_n(n) == pytest.approx(n**0.5 * (1 - 1 / (4 * n) + 1 / (26 * n * n)), rel=1e-15)
    assert classic_chi_n(10) != pytest.approx(10**0.5 * (1 - 1 / 40 + 1 / 3200), rel=1e-9)  # not cma 4.5's


@pytest.mark.parametrize("n, popsize", [(2, 40), (10, 5), (10, 10), (300, 6)])
def test_new_es_runs_csa_with_cma_34s_damping(n, popsize):
    """CSA whatever the dimension (cma >= 4 picks TPA from n = 300 on), d_sigma by cma 3.4's
    formula on pycma's own mu_eff, c_sigma and mirrors: (2, 40) has mu_eff = 11.3 > n + 2, so
    the middle term counts; (10, 5) mirrors one sample (lam_mirr = 1), so the first term is
    below 1; E|N(0, I_n)| in pycma's cache is cma 3.4's."""
    from fedtext.learning.blackbox import classic_chi_n, new_es

    es = new_es(np.zeros(n), 1.0, {"popsize": popsize, "seed": 1, "verbose": -9})
    assert type(es.adapt_sigma).__name__ == "CMAAdaptSigmaCSA"
    sp, a = es.sp, es.adapt_sigma
    mirror = min(1.0, (sp.lam_mirr / (0.159 * popsize) - 1) ** 2)
    expected = 0.5 + mirror / 2 + 2 * max(0.0, ((sp.weights.mueff - 1) / (n + 1)) ** 0.5 - 1) + a.cs
    assert a.damps == pytest.approx(expected, rel=1e-14)
    if (n, popsize) == (2, 40):
        assert 2 * (((sp.weights.mueff - 1) / 3) ** 0.5 - 1) > 0.1
    if (n, popsize) == (10, 5):
        assert sp.lam_mirr == 1 and mirror < 0.1
    import cma

    assert cma.utilities.math.MathHelperFunctions._chiN_dict[n] == classic_chi_n(n)


@pytest.mark.parametrize("key", ["AdaptSigma", "CSA_dampfac", "CSA_damp_mueff_exponent", "CSA_squared"])
def test_new_es_refuses_options_that_change_the_pinned_rule(key):
    from fedtext.learning.blackbox import new_es

    with pytest.raises(ValueError, match=f"new_es sets {key} itself"):
        new_es(np.zeros(3), 1.0, {key: 1})
