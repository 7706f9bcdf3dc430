"""FedDLS: token-id codec, candidate sets (eq. 7), local search (Alg. 3), download codecs
(eqs. 8-11, App. E), server validation, bytes, client/server agreement, P/NP records."""

from __future__ import annotations

import dataclasses

import math
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import RecordDict
from flwr.common import Code, FitRes, Status

from clients.feddls import local_search, nearest_tokens
from fedtext.common import comm
from fedtext.node.node import client_class
from fedtext.learning.data import client_data
from fedtext.methods.feddls.codecs import (
    SENTINEL,
    FullCodec,
    LassoCodec,
    PCACodec,
    QuantCodec,
    check_upload,
    encode_upload,
    rebuild_prompt,
)
from fedtext.records import participant_accuracy
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from strategies.feddls import FedDLS

# ------------------------------------------------------------------ upload codec
TOY = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [2.0, 0.1]], np.float32)


def test_upload_codec_round_trip_with_sentinel():
    up = encode_upload(np.array([-1, 4, 0, -1]))
    assert up.dtype == np.uint16 and up.tolist() == [SENTINEL, 4, 0, SENTINEL]
    p_prev = np.full((4, 2), 7.0, np.float32)
    p = rebuild_prompt(up, p_prev, TOY)
    np.testing.assert_array_equal(p, np.array([[7, 7], [2.0, 0.1], [1, 0], [7, 7]], np.float32))
    with pytest.raises(ValueError, match="does not fit"):
        encode_upload(np.array([SENTINEL]))


def test_upload_range_checks():
    allowed = np.array([0, 1, 2, 4])
    assert check_upload(np.array([SENTINEL, 4, 0], np.uint16), allowed) is None
    assert "outside the candidate vocabulary (e.g. 3)" in check_upload(np.array([3, 1], np.uint16), allowed)
    assert "e.g. 40000" in check_upload(np.array([40000], np.uint16), allowed)


# ------------------------------------------------------------- eq. (7) and Alg. 3
def test_candidates_are_the_k_nearest_by_cosine_hand_computed():
    unit = TOY / np.linalg.norm(TOY, axis=1, keepdims=True)
    ids = np.arange(len(TOY))
    # vec (1, 0.2): cosines 0.981 (id 0), 0.196 (1), 0.832 (2), -0.981 (3), 0.9988 (4)
    assert nearest_tokens(np.array([1.0, 0.2]), unit, ids, TOY, 3).tolist() == [4, 0, 2]
    # the token already at t (id 0 itself) is not a candidate: keeping it is free
    assert nearest_tokens(TOY[0], unit, ids, TOY, 2).tolist() == [4, 2]
    # only the allowed ids are searched
    assert nearest_tokens(np.array([1.0, 0.2]), unit[[1, 2, 3]], ids[[1, 2, 3]], TOY, 2).tolist() == [2, 1]


def test_local_search_never_increases_the_loss_and_reports_changes():
    target = np.array([[2.0, 0.1], [0.0, 1.0], [-1.0, 0.0]], np.float32)  # reachable: ids 4, 1, 3

    def loss_of(prompts):
        return ((prompts - target) ** 2).sum(axis=(1, 2))

    unit = TOY / np.linalg.norm(TOY, axis=1, keepdims=True)
    ids = np.arange(len(TOY))
    start = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]], np.float32)
    res = local_search(start, loss_of, lambda v: nearest_tokens(v, unit, ids, TOY, 2), TOY, 30,
                       np.random.default_rng(0))
    assert all(b <= a for a, b in zip(res.losses, res.losses[1:], strict=False))
    assert res.losses[-1] < res.losses[0]
    changed = res.token_ids >= 0
    np.testing.assert_array_equal(res.prompt[changed], TOY[res.token_ids[changed]])
    np.testing.assert_array_equal(res.prompt[~changed], start[~changed])
    assert res.losses[-1] == pytest.approx(float(loss_of(res.prompt[None])[0]))


def test_client_local_search_on_the_backbone_is_non_increasing(backbone):
    cfg = make_config("feddls", prompt_length=4, max_length=64, shots_per_class=4, steps=4)
    client = client_class("feddls")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone)
    p = backbone.initial_prompt(4, 0)
    unit = client.vocab[backbone.natural_token_ids()]
    unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
    q0 = backbone.queries
    res = local_search(p, client.prompt_losses, lambda v: nearest_tokens(v, unit, backbone.natural_token_ids(),
                                                                   client.vocab, 3), client.vocab, 4,
                       np.random.default_rng(1))
    assert all(b <= a + 1e-7 for a, b in zip(res.losses, res.losses[1:], strict=False))
    n = len(client.train_batch)
    assert backbone.queries - q0 == n * (1 + 4 * 3)  # current loss once, then K=3 per step


def test_candidates_depend_on_the_direction_of_p_t_only_eq_7_hand_computed() -> None:
    """Eq. (7) ranks by cosine distance, which ignores ||p^t||: C(s · vec) = C(vec) for every s > 0,
    down to float32's smallest subnormal (where ||vec|| underflows to 0 and the 1e-12 guard divides).
    vec ∝ (5, 1): cosines 0.9988 (id 4), 0.981 (0), 0.832 (2), 0.196 (1), -0.981 (3)."""
    unit = TOY / np.linalg.norm(TOY, axis=1, keepdims=True)
    ids = np.arange(len(TOY))
    tiny = np.float32(2.0**-149)  # (5, 1) · tiny is exact: 5 and 1 subnormal steps
    for vec in (np.array([5.0, 1.0], np.float32), np.array([0.05, 0.01], np.float32),
                np.array([5.0, 1.0], np.float32) * tiny):
        assert nearest_tokens(vec, unit, ids, TOY, 3).tolist() == [4, 0, 2]


def test_candidates_are_the_k_nearest_of_a_wide_vocabulary_for_every_k_eq_7() -> None:
    """Eq. (7) on 600 unit embeddings at angles rank_i · π / 600 (rank a seeded permutation of the
    ids): the cosine to the rank-0 token falls with the rank, so with that token at t, C(p^t) is the
    ids of ranks 1..K, nearest first, for every K (wide enough that selecting the K + 1 nearest is a
    real partial sort, not a full one)."""
    n = 600
    rank = np.random.default_rng(1).permutation(n)
    theta = rank * (np.pi / n)
    vocab = np.stack([np.cos(theta), np.sin(theta)], axis=1).astype(np.float32)
    unit = vocab / np.linalg.norm(vocab, axis=1, keepdims=True)
    by_rank = np.argsort(rank)  # by_rank[r]: the id of rank r; by_rank[0] sits at (1, 0)
    for k in range(1, n - 1):
        got = nearest_tokens(vocab[by_rank[0]], unit, np.arange(n), vocab, k)
        assert got.tolist() == by_rank[1:k + 1].tolist(), k


def test_candidates_break_ties_by_id_at_the_cut_and_skip_every_copy_of_p_t() -> None:
    """C(p^t) of eq. (7), nearest first and ties by id wherever they fall: with p^t = (1, 0),
    ids 1, 2 and 4 all at cosine 0.6 and K = 2 the candidates are [1, 2] (a partial sort of
    the K + 1 nearest picked among the tied ones arbitrarily); and a vocabulary holding two
    copies of p^t still gives K candidates (skipping both)."""
    vocab = np.array([[1, 0], [0.6, 0.8], [0.6, -0.8], [-1, 0], [0.6, 0.8], [0, 1]], np.float32)
    unit = vocab / np.linalg.norm(vocab, axis=1, keepdims=True)
    ids = np.arange(len(vocab))
    for order in (ids, ids[::-1], np.random.default_rng(3).permutation(len(vocab))):
        assert nearest_tokens(vocab[0], unit[order], ids[order], vocab, 2).tolist() == [1, 2]
    twice = np.array([[1, 0], [1, 0], [0.9, 0.1], [0, 1]], np.float32)
    got = nearest_tokens(twice[0], twice / np.linalg.norm(twice, axis=1, keepdims=True), np.arange(4), twice, 2)
    assert got.tolist() == [2, 3]


def test_candidates_index_the_vocabulary_even_when_none_is_left() -> None:
    """C(p^t) of eq. (7) is an int64 id array: where the only allowed id is the token already at t,
    it is empty and still indexes e(V) (``[0, D]``)."""
    unit = TOY / np.linalg.norm(TOY, axis=1, keepdims=True)
    cands = nearest_tokens(TOY[2], unit[[2]], np.array([2]), TOY, 3)
    assert cands.dtype == np.int64 and TOY[cands].shape == (0, 2)


def test_local_search_moves_to_the_lowest_loss_candidate_and_keeps_ties_eq_6() -> None:
    """Eq. (6): p^t becomes the candidate of C(p^t) with the lowest loss (not the nearest one), and
    only if that loss is strictly lower than the current loss: a tie keeps p^t."""
    vocab = np.array([[0.0], [1.0], [2.0], [3.0]], np.float32)
    table = {0.0: 4.0, 1.0: 2.0, 2.0: 2.0, 3.0: 5.0}  # loss of the one-token prompt [[v]]
    cands = {3.0: [0, 1], 1.0: [2], 0.0: [1]}  # C(p^t), nearest first

    def loss_of(prompts: np.ndarray) -> np.ndarray:
        return np.array([table[float(q[0, 0])] for q in prompts])

    res = local_search(np.array([[3.0]], np.float32), loss_of, lambda v: np.array(cands[float(v[0])]), vocab, 2,
                       np.random.default_rng(0))  # T = 1: every step searches t = 0
    # step 1: C = (0, 1) at losses (4, 2) -> id 1 (2 < 5); step 2: C = (2,) at loss 2, not < 2 -> keep id 1
    assert res.token_ids.tolist() == [1] and res.prompt.tolist() == [[1.0]] and res.losses == [5.0, 2.0, 2.0]


def test_local_search_works_on_a_float32_copy_and_marks_kept_positions_minus_one() -> None:
    """Alg. 3 searches a float32 copy: the caller's p' (kept in the node's state for eq. 11) is not
    written, every prompt ``loss_of`` sees and p_i are float32, and a position that kept p'^t
    reports -1 (the upload's sentinel) while a changed one reports its id."""
    target = np.array([[2.0, 0.1], [0.0, 1.0]], np.float32)  # TOY[4], TOY[1]
    seen: list[np.dtype] = []

    def loss_of(prompts: np.ndarray) -> np.ndarray:
        seen.append(prompts.dtype)
        return ((prompts - target) ** 2).sum(axis=(1, 2))

    cands = {tuple(TOY[i].tolist()): c for i, c in {0: [4, 2], 1: [2, 0], 4: [0, 2]}.items()}
    visits = iter([0, 1, 0, 1])
    rng = SimpleNamespace(integers=lambda n: next(visits))  # t = 0, 1, 0, 1
    start = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)  # TOY[0], TOY[1]
    res = local_search(start, loss_of, lambda v: np.array(cands[tuple(v.tolist())]), TOY, 4, rng)
    # loss 1 + 0.01; t=0: id 4 -> 0 (id 2: 1.81); t=1: ids 2, 0 cost 1, 2 -> keep; t=0: ids 0, 2
    # cost 1.01, 1.81 -> keep; t=1: keep
    assert res.losses == pytest.approx([1.01, 0.0, 0.0, 0.0, 0.0])
    assert res.token_ids.tolist() == [4, -1]
    assert res.prompt.dtype == np.float32 and set(seen) == {np.dtype(np.float32)}
    np.testing.assert_array_equal(res.prompt, target)
    np.testing.assert_array_equal(start, np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))


# --------------------------------------------------------------- download codecs
@pytest.fixture(scope="module")
def vocab(backbone):
    return backbone.vocab_embeddings()


def _aggregate_like(vocab, rng, t=6, clients=4):
    """A realistic p, p'_{-1}: p'_{-1} natural tokens, p the mean of clients' token swaps."""
    prev = vocab[rng.choice(np.arange(2000, 20000), size=t)]
    ps = []
    for _ in range(clients):
        p = prev.copy()
        rows = rng.choice(t, size=t // 2, replace=False)
        p[rows] = vocab[rng.choice(np.arange(2000, 20000), size=len(rows))]
        ps.append(p)
    return np.mean(ps, axis=0), prev


def test_lasso_alpha_maps_to_sklearn_and_recovers_a_sparse_residual(vocab):
    a, b, c = 2345, 7654, 12000
    r = 0.5 * vocab[a] + 0.25 * vocab[b] - 0.5 * vocab[c]
    codec = LassoCodec(vocab, phi=3, alpha=0.2, screen=100)
    ids, x = codec.compress(r)
    assert sorted(ids.tolist()) == sorted([a, b, c])
    got = dict(zip(ids.tolist(), x.tolist(), strict=True))
    assert got[a] == pytest.approx(0.5, abs=1e-4) and got[b] == pytest.approx(0.25, abs=1e-4)
    assert got[c] == pytest.approx(-0.5, abs=1e-4)


def test_lasso_selection_is_eq_8_soft_thresholding_on_orthogonal_embeddings_hand_computed() -> None:
    """Eqs. (8)-(10) where eq. (8) has a closed form: for mutually orthogonal e(v), the minimiser of
    ``||e(V)^T x - R||^2 + alpha ||x||_1`` is x*_v = sign(z_v) max(|z_v| - alpha / 2, 0) / ||e(v)||^2 with
    z_v = <e(v), R> (no intercept); eq. (9) keeps the top Phi by |x*| (zeros by |z|), eq. (10) refits
    them by least squares. Every screen here is wider than the vocabulary: one selection, at Phi."""
    # alpha's scale: z = (0.6, 1.0), ||e||^2 = (1, 4), alpha / 2 = 0.5 -> x* = (0.1, 0.125): id 1,
    # refit 2 · 0.5 / 4 = 0.25 (at alpha / 2 = 1/3 instead, x* = (0.27, 0.17) would keep id 0)
    codec = LassoCodec(np.array([[1.0, 0.0], [0.0, 2.0]], np.float32), phi=1, alpha=1.0, screen=100)
    ids, x = codec.compress(np.array([0.6, 0.5], np.float32))
    assert ids.tolist() == [1] and x.tolist() == pytest.approx([0.25])
    # no intercept: R = e(0) + e(1) / 2 with e(0) constant; z = (4, 2), ||e||^2 = 4, alpha / 2 = 0.1 ->
    # x* = (0.975, 0.475): id 0, refit 1 (an intercept would absorb e(0) and keep id 1)
    codec = LassoCodec(np.array([[1, 1, 1, 1], [1, 1, -1, -1]], np.float32), phi=1, alpha=0.2, screen=100)
    ids, x = codec.compress(np.array([1.5, 1.5, 0.5, 0.5], np.float32))
    assert ids.tolist() == [0] and x.tolist() == pytest.approx([1.0])
    # ties: e(V) = I, R = (1, 0.08, 0.05), alpha / 2 = 0.1 -> x* = (0.9, 0, 0); Phi = 2 keeps id 0, then
    # of the zeros the larger |<e, R - e(V)^T x*>| = |<e, (0.1, 0.08, 0.05)>|: id 1 (0.08 > 0.05); refit (1, 0.08)
    codec = LassoCodec(np.eye(3, dtype=np.float32), phi=2, alpha=0.2, screen=100)
    ids, x = codec.compress(np.array([1.0, 0.08, 0.05], np.float32))
    assert ids.tolist() == [0, 1] and x.tolist() == pytest.approx([1.0, 0.08])
    # Phi = |V|: nothing to select, every token in vocabulary order, refit = R itself
    codec = LassoCodec(np.eye(3, dtype=np.float32), phi=3, alpha=0.2, screen=100)
    ids, x = codec.compress(np.array([0.05, 0.1, 1.0], np.float32))
    assert ids.tolist() == [0, 1, 2] and x.tolist() == pytest.approx([0.05, 0.1, 1.0])


def test_lasso_ties_go_to_the_token_the_lasso_residual_needs_not_the_one_most_like_R_hand_computed() -> None:
    """Eq. (9) where LASSO leaves fewer than L non-zero weights: the zeros are ranked by their
    correlation with what eq. (8) left unexplained, R - e(V)^T x* (the path's next entrant),
    not with R itself (which favours a token parallel to the part already fitted).

    e(V) = e0 (1.1, 0.1, -0.6), e1 (0.5, -0.3, -1.6), e2 (0.1, -0.4, -0.2), e3 (0.3, -0.5, 0.7);
    R = e0/2 - e2/2 = (0.5, 0.25, -0.2). <e, R> = (0.695, 0.495, -0.01, -0.115); alpha / 2 = 0.1,
    ||e0||^2 = 1.58, so x* = ((0.695 - 0.1) / 1.58, 0, 0, 0) = (0.37658, 0, 0, 0) (the zeros'
    |<e, R - 0.37658 e0>| = 0.0623, 0.0816, 0.0623 < 0.1: KKT holds). Phi = 2 keeps e0, then e2
    (0.0816), and the refit is exact: (0.5, -0.5). Ranked by |<e, R>| instead, e1 (0.495) would
    come second and the refit leave 29.5% of R (fedtext before 2026-11-25)."""
    vocab = np.array([[1.1, 0.1, -0.6], [0.5, -0.3, -1.6], [0.1, -0.4, -0.2], [0.3, -0.5, 0.7]], np.float32)
    r = np.array([0.5, 0.25, -0.2], np.float32)
    ids, x = LassoCodec(vocab, phi=2, alpha=0.2, screen=100).compress(r)
    assert ids.tolist() == [0, 2]
    assert x.tolist() == pytest.approx([0.5, -0.5], abs=1e-6)
    assert np.linalg.norm(vocab[ids].T.astype(np.float64) @ x - r) < 1e-6


def test_lasso_error_falls_with_phi_and_keeps_exactly_phi(vocab):
    p, prev = _aggregate_like(vocab, np.random.default_rng(0))
    errors = []
    for phi in (1, 3, 5, 10):
        codec = LassoCodec(vocab, phi=phi, alpha=0.2, screen=100)
        ids, w = codec.encode(p, prev)
        assert ids.shape == w.shape == (len(p), phi) and ids.dtype == np.uint16 and w.dtype == np.float16
        assert all(len(set(row)) == phi for row in ids.tolist())  # Phi distinct tokens per position
        errors.append(float(np.linalg.norm(codec.decode([ids, w], prev) - p)))
    assert errors == sorted(errors, reverse=True) and errors[-1] < 0.5 * errors[0], errors


def test_lasso_unchanged_positions_cost_nothing_in_error(vocab):
    prev = vocab[[3000, 4000]]
    codec = LassoCodec(vocab, phi=5, alpha=0.2, screen=100)
    update = codec.encode(prev.copy(), prev)
    np.testing.assert_array_equal(codec.decode(update, prev), prev)


def test_lasso_decode_is_eq_11_on_hand_values_and_rejects_the_first_id_past_the_vocabulary() -> None:
    """Eq. (11): p'^t = p'^t_{-1} + e(V)_I^T x from the float16 weights; the largest valid id is
    |V| - 1, and |V| itself is refused with a reason (not an IndexError)."""
    codec = LassoCodec(TOY, phi=2, alpha=0.2, screen=5)
    prev = np.array([[1.0, 1.0], [0.0, 0.0]], np.float32)
    ids = np.array([[4, 3], [0, 1]], np.uint16)  # id 4 = |V| - 1: the last row of TOY
    weights = np.array([[0.5, 1.0], [2.0, -1.0]], np.float16)
    # row 0: (1, 1) + 0.5 (2, 0.1) + 1 (-1, 0) = (1, 1.05); row 1: 2 (1, 0) - (0, 1) = (2, -1)
    np.testing.assert_allclose(codec.decode([ids, weights], prev), [[1.0, 1.05], [2.0, -1.0]], rtol=1e-6)
    with pytest.raises(ValueError, match="token id 5 outside the vocabulary of 5"):
        codec.decode([np.array([[5, 0], [0, 1]], np.uint16), weights], prev)


def test_absolute_codecs_hand_computed(vocab):
    # quant, b=3: k=3 levels per side; beta = max|p| = 1; codes round(x * 3)
    q = QuantCodec(3)
    p = np.array([[1.0, -0.5, 0.2, 0.0]], np.float32)
    packed, beta = q.encode(p, p)
    assert packed.dtype == np.uint8 and packed.shape == (math.ceil(4 * 3 / 8),) and beta.tolist() == [1.0]
    np.testing.assert_allclose(q.decode([packed, beta], p), [[1.0, -2 / 3, 1 / 3, 0.0]], atol=1e-6)
    # pca with n = D reconstructs exactly (up to float16 coefficients); n small loses detail
    x = vocab[[100, 5000, 9000]]
    full = PCACodec(vocab, vocab.shape[1])
    np.testing.assert_allclose(full.decode(full.encode(x, x), x), x, atol=2e-3)
    small = PCACodec(vocab, 10)
    assert np.linalg.norm(small.decode(small.encode(x, x), x) - x) > 10 * np.linalg.norm(
        full.decode(full.encode(x, x), x) - x)
    f = FullCodec()
    np.testing.assert_array_equal(f.decode(f.encode(x, x), x), x.astype(np.float16).astype(np.float32))


def test_quant_codes_on_hand_values_float32_arithmetic_and_clip_to_the_float16_scale() -> None:
    """App. E eq. 17: code = round(clip(w / beta, -1, 1) · k) + k with k = 3 (b = 3), beta the
    row's max |w| as float16 (eq. 18); the division and the product are float32 (the
    prompt's dtype), and the clip matters where the float16 beta rounds below max |w|."""
    q = QuantCodec(3)
    tiny = 2.0**-24  # float16's smallest subnormal: 1.25 · 2^-24 rounds down to it
    third = np.float32(1 / 3)  # /2 · 3 = 0.50000001 exactly, 0.5 in float32
    p = np.array([[2.0, -2.0, 1.0, 0.5],  # w / beta · k = 3, -3, 1.5, 0.75
                  [2.0, third, 0.0, 0.0],  # 3, 0.5 (float32: rint -> 0, ties to even)
                  [-1.25 * tiny, 0.0, 0.0, 0.0],  # w / beta = -1.25: clipped to -1
                  [1.25 * tiny, 0.0, 0.0, 0.0]], np.float32)  # 1.25: clipped to 1
    packed, beta = q.encode(p, p)
    assert beta.dtype == np.float16 and beta.tolist() == [2.0, 2.0, tiny, tiny]
    codes = np.unpackbits(packed)[: p.size * 3].reshape(4, 4, 3) @ np.array([4, 2, 1])  # MSB first
    assert codes.tolist() == [[6, 0, 5, 4], [6, 3, 3, 3], [0, 3, 3, 3], [6, 3, 3, 3]]
    np.testing.assert_array_equal(q.decode([packed, beta], p),
                                  np.array([[2, -2, 4 / 3, 2 / 3], [2, 0, 0, 0], [-tiny, 0, 0, 0], [tiny, 0, 0, 0]],
                                           np.float32))


def test_pca_centres_on_the_vocabulary_mean_and_keeps_the_top_component_hand_computed() -> None:
    """App. E eqs. 13-16 with the mean: mu = mean of e(V) per dimension, E_c = the top-n
    principal directions of e(V) - mu, p' = mu + ((p - mu) E_c[:n]^T) E_c[:n]."""
    # e(V) - mu = (-2, 0), (2, 0), (0, 1), (0, -1) with mu = (2, 5): covariance diag(8, 2),
    # so the top component is ±(1, 0) and the second ±(0, 1)
    toy = np.array([[0.0, 5.0], [4.0, 5.0], [2.0, 6.0], [2.0, 4.0]], np.float32)
    codec = PCACodec(toy, 1)
    np.testing.assert_array_equal(codec.mu, [2.0, 5.0])
    np.testing.assert_allclose(np.abs(codec.components), [[1.0, 0.0]], atol=1e-6)
    np.testing.assert_allclose(np.abs(PCACodec(toy, 2).components), [[1.0, 0.0], [0.0, 1.0]], atol=1e-6)
    # n = 1 keeps dimension 0 and resets dimension 1 to its mean, 5 (sign-free)
    p = np.array([[3.0, 7.0], [0.0, 5.0], [-1.0, 2.0]], np.float32)
    coefficients = codec.encode(p, p)[0]
    np.testing.assert_allclose(np.abs(coefficients), [[1.0], [2.0], [3.0]], atol=1e-3)
    np.testing.assert_allclose(codec.decode([coefficients], p), [[3.0, 5.0], [0.0, 5.0], [-1.0, 5.0]], atol=1e-3)


@pytest.mark.parametrize(
    "compression, extra, per_update",
    [
        ("lasso", {"phi": 5}, lambda t, d: 4 * 5 * t + 2 * comm.NPY_HEADER_BYTES),
        ("lasso", {"phi": 3}, lambda t, d: 4 * 3 * t + 2 * comm.NPY_HEADER_BYTES),
        ("full", {}, lambda t, d: 2 * t * d + comm.NPY_HEADER_BYTES),
        ("pca", {"pca_components": 10}, lambda t, d: 2 * 10 * t + comm.NPY_HEADER_BYTES),
        ("quant", {"quant_bits": 3}, lambda t, d: math.ceil(t * d * 3 / 8) + 2 * t + 2 * comm.NPY_HEADER_BYTES),
    ],
)
def test_server_and_client_rebuild_bit_identical_prompts_and_bytes(backbone, compression, extra, per_update):
    """Two rounds of the real strategy and client objects, without Flower's transport."""
    t, d = 5, backbone.dim
    cfg = make_config("feddls", prompt_length=t, max_length=64, shots_per_class=4, steps=3,
                      candidates=3, compression=compression, **extra)
    strat = FedDLS(cfg, TASKS["demo"])
    strat.initialize_parameters(SimpleNamespace(wait_for=lambda *a, **k: True, num_available=lambda: 2))
    states = {pid: RecordDict() for pid in (0, 1)}
    proxies = {pid: SimpleNamespace(cid=f"node{pid}") for pid in (0, 1)}
    for rnd in (1, 2):
        results = []
        for pid in (0, 1):
            payload, extra_cfg = strat.download(rnd, proxies[pid], "fit")
            payload = comm.encode(payload)
            expected = 0 if rnd == 1 else per_update(t, d)  # round 1: p'_0 comes from the seed
            assert comm.payload_bytes(payload) == expected
            client = client_class("feddls")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone, state=states[pid])
            arrays, n, metrics = client.fit(comm.decode(payload), {"server_round": rnd, **extra_cfg})
            assert comm.payload_bytes(comm.encode(arrays)) == 2 * t + comm.NPY_HEADER_BYTES  # uint16 per position
            _, stored = client.stored()
            np.testing.assert_array_equal(stored, strat.global_arrays[0])  # bit-identical p'
            results.append((proxies[pid], FitRes(Status(Code.OK, ""), comm.encode(arrays), n, metrics)))
        strat.rounds.begin(rnd)
        strat.aggregate_fit(rnd, results, [])
        assert strat.record.num_clients == 2 and strat.record.dropped == []
    # a non-participant that never trained rebuilds the same p' from what it is sent
    arrays, extra_cfg = strat.download(3, SimpleNamespace(cid="never-trained"), "evaluate")
    payload = comm.encode(arrays)
    newcomer = client_class("feddls")(cfg, TASKS["demo"], client_data(cfg, 1, 2), backbone, state=RecordDict())
    np.testing.assert_array_equal(newcomer.global_arrays(comm.decode(payload), extra_cfg)[0], strat.global_arrays[0])
    updates_sent = 2 if compression == "lasso" else 1  # residuals accumulate; absolute codecs send the latest
    assert comm.payload_bytes(payload) == updates_sent * per_update(t, d)


def test_server_averages_rebuilt_prompts_and_drops_bad_ids(backbone, caplog, feddls_server, feddls_upload):
    strat = feddls_server(prompt_length=3, max_length=64, compression="full")
    vocab, prev = strat.vocab, strat.global_arrays[0]
    nat = backbone.natural_token_ids()
    a, b = int(nat[100]), int(nat[200])
    special = int(backbone.tokenizer.cls_token_id)
    good = [feddls_upload(0, [a, SENTINEL, SENTINEL]), feddls_upload(1, [b, b, SENTINEL])]
    bad = [feddls_upload(2, [len(vocab) + 5, SENTINEL, SENTINEL]), feddls_upload(3, [special, SENTINEL, SENTINEL]),
           (SimpleNamespace(cid="node4"), FitRes(Status(Code.OK, ""), comm.encode([np.zeros(3, np.int32)]), 8, {}))]
    params, metrics = strat.aggregate_fit(1, good + bad, [])
    assert [d["reason"].split(":")[0] for d in strat.record.dropped] == [
        "1 token ids outside the candidate vocabulary (e.g. 30527)",
        "1 token ids outside the candidate vocabulary (e.g. 101)",
        "ids",
    ]
    expected = np.stack([(vocab[a] + vocab[b]) / 2, (prev[1] + vocab[b]) / 2, prev[2]])  # eq. (5), uniform
    np.testing.assert_allclose(comm.decode(params)[0], expected.astype(np.float16).astype(np.float32))
    assert metrics["positions_changed"] == 1.5
    # ||p' - p|| / ||p - p'_{-1}||: the float16 download's error relative to the round's residual
    rel = np.linalg.norm(comm.decode(params)[0] - expected) / np.linalg.norm(expected - prev)
    assert metrics["compression_rel_error"] == pytest.approx(rel, rel=1e-4) and 0 < rel < 1e-3


def test_server_round_metrics_count_changed_positions_and_the_update_on_hand_values(backbone, feddls_server,
                                                                                   feddls_upload) -> None:
    """The round's method metrics: positions_changed = mean over clients of the positions not
    sent as the sentinel (T = 4: 1 and 2 changed -> 1.5; counting the sentinels would give
    2.5); update_bytes = what the download of this round's update weighs; a round where no
    client changed anything has a zero residual and a relative error of 0, not 0/0."""
    strat = feddls_server(prompt_length=4, max_length=64, compression="full")
    nat = backbone.natural_token_ids()
    a, b, s = int(nat[100]), int(nat[200]), SENTINEL
    params, metrics = strat.aggregate_fit(1, [feddls_upload(0, [a, s, s, s]), feddls_upload(1, [b, b, s, s])], [])
    assert metrics["positions_changed"] == 1.5
    assert metrics["update_bytes"] == comm.expected_bytes(strat.updates[-1]) > 0
    strat.rounds.begin(2)
    params, metrics = strat.aggregate_fit(2, [feddls_upload(0, [s, s, s, s]), feddls_upload(1, [s, s, s, s])], [])
    assert metrics["positions_changed"] == 0.0 and metrics["compression_rel_error"] == 0.0


def test_server_records_the_version_each_client_reports_and_keeps_it_when_none_is_reported(feddls_upload) -> None:
    """§4.3's incremental download: after aggregation the server holds, per client, the p' version
    its upload reports (``dls_version``); an upload without one keeps the version the server knew
    (0, p'_0, for a client it has never heard from)."""
    cfg = make_config("feddls", prompt_length=3, max_length=64, compression="full")
    strat = FedDLS(cfg, TASKS["demo"])
    strat.global_arrays = [strat.initial_arrays()[0]]
    for rnd in (1, 2, 3):
        strat.rounds.begin(rnd)
        ups = [feddls_upload(pid, [SENTINEL] * 3) for pid in (0, 1, 2)] if rnd == 3 else [
            feddls_upload(pid, [SENTINEL] * 3) for pid in (0, 1)]
        for _, res in ups:
            res.metrics["dls_version"] = rnd - 1  # the p' each client searched from
        if rnd == 3:  # node1 (known at version 1) and node2 (never seen) report nothing
            del ups[1][1].metrics["dls_version"], ups[2][1].metrics["dls_version"]
        strat.aggregate_fit(rnd, ups, [])
        assert strat.record.dropped == []
    assert strat.synced == {"node0": 2, "node1": 1, "node2": 0}


# ------------------------------------------------------------------ P/NP records
def test_participant_and_non_participant_accuracy_hand_computed():
    rounds = [
        {"round": 1, "client_accuracy": {"0": 0.5, "1": 0.7, "2": 0.9}},
        {"round": 2, "client_accuracy": {"0": 0.6, "1": 0.8, "2": 0.4},
         "client_post_accuracy": {"0": 0.7, "1": 0.9, "2": 0.5}, "participants": ["0", "1"]},
        {"round": 3},  # a round without client evaluation does not hide the last one
    ]
    out = participant_accuracy(rounds)
    assert out["p_accuracy"] == pytest.approx(0.8) and out["np_accuracy"] == pytest.approx(0.5)
    assert out["p_accuracy_global"] == pytest.approx(0.7) and out["np_accuracy_global"] == pytest.approx(0.4)
    only_p = participant_accuracy(rounds[:1])
    assert only_p["p_accuracy"] == pytest.approx(0.7) and only_p["np_accuracy"] is None


def test_post_tuning_is_seeded_and_stays_near_the_global_prompt(backbone):
    cfg = make_config("feddls", prompt_length=4, max_length=64, shots_per_class=4, post_tune_steps=2,
                      post_tune_popsize=4, post_tune_dim=10)
    client = client_class("feddls")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone)
    p = backbone.initial_prompt(4, 0)
    q0 = backbone.queries
    a, b = client.post_tune(p), client.post_tune(p)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    assert backbone.queries - q0 == 2 * 2 * 4 * len(client.train_batch)  # 2 runs x 2 iters x popsize 4
    # BBT's injection (prompt-injection=embedding-output): p' stays the input, A z is the offset
    np.testing.assert_array_equal(a.embeds, p)
    assert 0 < np.linalg.norm(a.offsets) < 0.5 * np.linalg.norm(p)
    summed = client_class("feddls")(dataclasses.replace(cfg, prompt_injection="input-embedding"), TASKS["demo"],
                                    client_data(cfg, 0, 2), backbone).post_tune(p)
    assert isinstance(summed, np.ndarray) and 0 < np.linalg.norm(summed - p) < 0.5 * np.linalg.norm(p)


# ------------------------------------------------------------------- P/NP sweeps
def test_compare_plan_variants_and_rotating_holdouts(tmp_path):
    from fedtext.common.config import ConfigError
    from simulations.compare import plan

    exp = {"methods": ["feddls-phi3", "bbt-fed"], "seeds": [0, 1, 2], "holdouts": ["books", "dvd"],
           "rotate-holdouts": True, "run-config": {"feddls": {"steps": 3}, "bbt-fed.popsize": 4},
           "method": {"feddls-phi3": {"method": "feddls", "feddls": {"phi": 3}}}}
    runs = plan(exp, None)
    assert [(r["method"], r.get("run-name"), r["seed"], r["holdout"]) for r in runs] == [
        ("feddls", "feddls-phi3", 0, "books"), ("bbt-fed", None, 0, "books"),
        ("feddls", "feddls-phi3", 1, "dvd"), ("bbt-fed", None, 1, "dvd"),
        ("feddls", "feddls-phi3", 2, "books"), ("bbt-fed", None, 2, "books"),
    ]
    # a method's keys reach its own runs only (TOML's nested tables are flattened to dotted keys)
    assert runs[0]["feddls.phi"] == 3 and runs[0]["feddls.steps"] == 3 and "bbt-fed.popsize" not in runs[0]
    assert runs[1]["bbt-fed.popsize"] == 4 and not any(k.startswith("feddls.") for k in runs[1])
    assert len(plan({**exp, "rotate-holdouts": False}, [0])) == 4  # every holdout per seed
    with pytest.raises(ConfigError, match="unknown method 'feddls-x' .* a variant label needs \\[method.feddls-x\\]"):
        plan({"methods": ["feddls-x"]}, None)


def test_holdout_names_are_checked_before_training(tmp_path):
    from fedtext.common.config import ConfigError
    from fedtext.server_app import build

    for domain in ("books", "dvd"):
        (tmp_path / domain).mkdir()
        for split in ("train", "test"):
            (tmp_path / domain / f"{split}.tsv").write_text("text\tlabel\ngood\t1\nbad\t0\n")
    base = {"dataset": str(tmp_path), "task": "amazon", "output_dir": str(tmp_path / "runs")}
    with pytest.raises(ConfigError, match="holdout 'toys' is neither a partition id nor a domain .*books, dvd"):
        build(make_config("feddls", partition="domain", holdout="toys", **base))
    with pytest.raises(ConfigError, match="holdout by domain name \\('dvd'\\) needs partition=domain"):
        build(make_config("feddls", partition="iid", holdout="dvd", **base))
    assert not (tmp_path / "runs").exists()  # nothing started


def test_lasso_solver_is_configured_as_written_eq_8(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LASSO of eq. (8) runs as sklearn's Lasso with alpha / (2 D) (sklearn divides the
    squared error by 2 n_samples, n_samples = D here), no intercept (eq. 8 has none) and a
    2,000-sweep cap (twice sklearn's default: where the solver has not converged, the
    selection depends on where it stopped, so the cap is part of the method as run). Once
    per stage: screen, then Φ."""
    import sklearn.linear_model

    made: list[dict] = []

    class Spy(sklearn.linear_model.Lasso):
        def __init__(self, **kwargs) -> None:
            made.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(sklearn.linear_model, "Lasso", Spy)
    vocab = np.random.default_rng(0).standard_normal((12, 5)).astype(np.float32)
    LassoCodec(vocab, phi=2, alpha=0.3, screen=6).compress(np.ones(5, np.float32))
    assert made == [{"alpha": 0.3 / (2 * 5), "fit_intercept": False, "max_iter": 2000}] * 2
