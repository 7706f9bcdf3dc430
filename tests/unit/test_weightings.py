"""Averages and similarities on inputs where the wrong choice shows (issue 44, part 3).

A weighting or normalisation mistake (an average weighted by examples instead of uniform,
a similarity without its normalisation, padding counted in a mean, the wrong axis) is
invisible on inputs where the two choices agree: equal example counts, unit vectors, rows
without padding. Every average and similarity the methods compute, where it is computed,
and the unit test whose inputs make the wrong choice differ from the right one by a
visible margin (hand-computed expected values). Each line: what, where, the test.

* FedAvg, weighted by examples: ``fedtext/server/strategy.py`` ``weighted_mean``; test_strategy,
  weights 1 / 3 (and 3, 5, 7).
* Every strategy that averages by examples, through its own ``aggregate_fit`` (fedprompt,
  bbt-fed, fedptuning-v2, fedavg, fedlora, fedadapter, fedkseed's accumulator) and the
  server optimizers' step from that mean: **here**, two honest uploads of 1 and 3 examples
  (a strategy test with one honest upload cannot see its weighting; a uniform mean
  overriding fedptuning-v2's or fedkseed's aggregate passed the earlier tests).
* bbt-fed ``z-sigma-C``: z, σ and C by examples: ``strategies/bbt_fed.py`` (the base
  aggregate); **here** (test_fedbpt's clients had equal counts).
* FeS: FedAvg weighted by labelled examples: ``strategies/fes.py``; **here** (test_fes
  aggregated one trained upload).
* FeS: a client's weight is its gold + pseudo labels: ``clients/fes.py``; test_fes (a
  client with pseudo labels only), **here** gold + pseudo.
* FedDPG: the uniform mean of G (eq. (1)): ``strategies/feddpg.py``; test_feddpg, counts
  10 / 30 and 1, 1, 10.
* FedDLS: the uniform mean in embedding space (eq. (5)): ``strategies/feddls.py``;
  **here** (test_feddls's clients had equal counts, 8 and 8).
* FedBPT: the mean of the best μ with equal weights 1/μ (eq. (5)):
  ``fedtext/methods/fedbpt/cmaes.py`` ``server_step``; test_fedbpt, the best 2 of 4 give
  (0.5, 0.5), pycma's log weights (0.30, 0.70), all four (1.25, 1.5).
* FedBPT: σ′ summed over the best μ clients and their I iterations (eqs. (4), (12)):
  ``cmaes.py`` ``corrected_sigma``; test_fedbpt, unequal λ_k and an odd |S_t|.
* FedDRS: the student's start and ω^emb, the example-weighted mean: ``strategies/feddrs.py``;
  test_feddrs, counts 10 / 30.
* FedDRS: KL(teacher ‖ student) averaged over samples (eq. (8)):
  ``fedtext/methods/feddrs/distill.py`` ``kl_to_student``; test_feddrs, 2 rows x 2 classes
  (a mean over all cells would halve it).
* FedDRS: the sum over teachers of eq. (8): ``distill.py`` ``distill_steps``; **here**
  (test_feddrs distilled from one teacher).
* FedDRS: γ_k ∝ the client's label counts: ``fedtext/methods/feddrs/samplers.py``
  ``pseudo_labels``; test_feddrs, counts (0, 3, 0, 1) give label 1 three times in four.
* FedDF: the softmax of the teachers' mean logits (eq. (2)): ``strategies/feddf.py``;
  test_feddrs, against the mean of the softmaxes.
* FedDPG: ē over the attended tokens (eq. (2)): ``fedtext/methods/feddpg/model.py``
  ``mean_embedding``; test_feddpg, padded rows on hand values.
* FedDPGu: eq. (5) weighted by sets or by examples: ``fedtext/methods/feddpg/unlearning.py``;
  test_feddpg, unequal retained and relabelled sets.
* Mean pooling over attended tokens: ``fedtext/backbone/heads.py`` ``mean_pool``; test_backbone (the
  linear head on two texts of unequal length), **here** on hand values.
* The similarity head, scale · cosine: ``fedtext/backbone/heads.py`` ``SimilarityHead``;
  test_backbone (a plain forward, |h| ≠ 1), **here** on hand values.
* FeS: the cosine k-NN sets V(x) (§3.2): ``fedtext/methods/fes/filter.py`` ``knn_sets``;
  test_fes, x/2 is x's nearest by cosine although another has the larger dot product.
* FedDLS: nearest tokens by cosine (eq. (7)): ``clients/feddls.py`` ``nearest_tokens``;
  test_feddls (with unit rows the test makes itself), **here** with the client's own
  unit-norm vocabulary.
* The mean cross-entropy per prompt, over the batch axis: ``fedtext/backbone/scoring.py``
  ``losses``; test_backbone, two prompts on two rows.
* The clients' accuracy, weighted by test examples: ``fedtext/server/strategy.py``
  ``weighted_accuracy``; test_flower_quiet, counts 2 / 6.
* FeS AUG-E, the mean measured latencies (eq. (1)): ``fedtext/methods/fes/pacing.py``;
  test_fes.

Where only **here** is named, no unit test had inputs that tell the right choice from the
wrong one (checked by making the wrong choice in a copy of the code: a uniform mean in the FeS
server and in bbt-fed ``z-sigma-C``, FedDLS's example-weighted eq. (5), a mean over FedDRS's
teachers and an unnormalised FedDLS candidate vocabulary all passed the earlier tests).
Mean pooling and the similarity head were caught only through real encoder outputs; they
get hand values here too.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import RecordDict
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.node.node import client_class
from fedtext.learning.data import client_data
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS

SMALL = dict(prompt_length=2, max_length=64, shots_per_class=4, client_test_size=4, eval_size=20)


def fit_res(pid, arrays, n, **metrics):
    return (SimpleNamespace(cid=f"node{pid}"),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}))


# ------------------------------------------------------------------ averages on the server
def test_fes_aggregation_is_weighted_by_each_clients_labelled_examples():
    """FeS aggregates the trained uploads by FedAvg weighted by labelled examples (gold +
    pseudo, as the authors'): +1 on 10 examples and +5 on 30 give +4, a uniform mean +3;
    a labelling-only report (no upload, 0 examples) weighs nothing."""
    from strategies.fes import FewShotStrategy

    strat = FewShotStrategy(make_config("fes", gold_labels=8, **SMALL), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    g = strat.global_arrays
    results = [fit_res(0, [a + 1 for a in g], 10, trained=1, num_labels=10),
               fit_res(1, [a + 5 for a in g], 30, trained=1, num_labels=30),
               fit_res(2, [], 0, trained=0, num_labels=6, num_pseudo=6)]
    params, _ = strat.aggregate_fit(1, results, [])
    for got, base in zip(comm.decode(params), g, strict=True):
        np.testing.assert_allclose(got, base + 4.0, rtol=1e-5, atol=1e-5)  # (10 * 1 + 30 * 5) / 40


def test_a_fes_client_counts_its_gold_and_pseudo_labels_as_its_examples(backbone, monkeypatch):
    """The FedAvg weight a FeS client reports is its labelled examples: 4 gold + 3 pseudo = 7
    (not its gold labels alone, nor its whole pool)."""
    from flwr.app import ConfigRecord

    cfg = make_config("fes", gold_labels=8, labelled_clients=2, unlabeled_size=16, **SMALL)
    state = RecordDict({"fes": ConfigRecord({"ids": [0, 1, 2], "labels": [0, 1, 0]})})
    client = client_class("fes")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone, state)
    net = SimpleNamespace(trainable_arrays=lambda: [np.zeros(1, np.float32)])
    monkeypatch.setattr(client.model, "load", lambda arrays: net)
    monkeypatch.setattr(client, "local_epochs", lambda net, batch, seed: (0.5, 1, 0.0))
    _, n, _ = client.train(None, {"server_round": 2, "train": 1, "label": 0})
    assert len(client.gold) == 4 and len(client.unlabeled) == 16
    assert n == 4 + 3


def test_bbt_fed_z_sigma_C_average_is_weighted_by_examples():
    """FedBPT Fig. 2's contrast averages z, σ and C as FedAvg does: by examples (1 and 3)."""
    from strategies.bbt_fed import BBTFed

    cfg = make_config("bbt-fed", average="z-sigma-C", intrinsic_dim=3, popsize=4, **SMALL)
    strat = BBTFed(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    a = [np.array([0.0, 0.0, 4.0], np.float32), np.array([1.0], np.float32), np.eye(3, dtype=np.float32)]
    b = [np.array([4.0, 8.0, 0.0], np.float32), np.array([3.0], np.float32), 5 * np.eye(3, dtype=np.float32)]
    params, _ = strat.aggregate_fit(1, [fit_res(0, a, 1), fit_res(1, b, 3)], [])
    z, sigma, C = comm.decode(params)
    np.testing.assert_allclose(z, [3.0, 6.0, 1.0])  # uniform: (2, 4, 2)
    np.testing.assert_allclose(sigma, [2.5])  # uniform: 2
    np.testing.assert_allclose(C, 4 * np.eye(3))  # uniform: 3 I


def test_feddls_eq5_is_the_uniform_mean_whatever_the_clients_example_counts(backbone, feddls_server, feddls_upload):
    """Eq. (5) of FedDLS: p = (1/M) Σ_i p_i. With 2 and 30 examples the example-weighted
    mean would sit 14/16 of the way to client 1's token; the uniform one halfway."""
    from fedtext.methods.feddls.codecs import SENTINEL

    strat = feddls_server(compression="full", **{**SMALL, "prompt_length": 2})
    vocab, prev = strat.vocab, strat.global_arrays[0]
    nat = backbone.natural_token_ids()
    a, b = int(nat[100]), int(nat[200])
    uploads = [feddls_upload(0, [a, SENTINEL], 2), feddls_upload(1, [b, SENTINEL], 30)]
    params, _ = strat.aggregate_fit(1, uploads, [])
    got = comm.decode(params)[0]
    uniform = np.stack([(vocab[a] + vocab[b]) / 2, prev[1]])
    weighted = np.stack([(2 * vocab[a] + 30 * vocab[b]) / 32, prev[1]])
    np.testing.assert_allclose(got, uniform.astype(np.float16).astype(np.float32), rtol=1e-6, atol=1e-6)
    assert not np.allclose(got, weighted, rtol=1e-3, atol=1e-4)  # the inputs tell the two apart


# ------------------------------------------------------------------ FedDRS
def test_feddrs_eq8_sums_the_kl_of_every_teacher():
    """Eq. (8): Σ_k KL(σ(f(θ_k; ω_k)) ‖ σ(f(θ_k; ω_S))). Two teachers p1 = (3/4, 1/4) and
    p2 = (1/4, 3/4) against σ(w) = (1/2, 1/2): each KL is 3/4 ln(3/2) - 1/4 ln 2 by symmetry,
    so the loss is twice that (a mean over teachers would be once)."""
    from fedtext.backbone.devices import CPU_FP32
    from fedtext.methods.feddrs.distill import Teaching, distill_steps

    kl = 0.75 * np.log(1.5) - 0.25 * np.log(2)
    teachers = [Teaching(None, torch.tensor([[0.75, 0.25]])), Teaching(None, torch.tensor([[0.25, 0.75]]))]
    w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    before, after = distill_steps(w, [w], teachers, lambda net, _: net[None], steps=1, lr=1e-3, precision=CPU_FP32)
    assert before == pytest.approx(2 * kl, rel=1e-6)
    assert after == pytest.approx(2 * kl, rel=1e-2)  # the two gradients cancel: w barely moves


# ------------------------------------------------------------------ pooling and similarities
def test_mean_pool_averages_the_attended_positions_only():
    from fedtext.backbone.heads import mean_pool

    hidden = torch.tensor([[[1.0, 2.0], [3.0, 6.0], [100.0, 100.0], [100.0, -100.0]],
                           [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [6.0, 2.0]]])
    att = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    # row 0: ((1, 2) + (3, 6)) / 2 = (2, 4); with its padding (51.0, 2.0); over the axis of D: wrong shape
    torch.testing.assert_close(mean_pool(hidden, att), torch.tensor([[2.0, 4.0], [3.0, 2.0]]))


def test_the_similarity_head_is_a_scaled_cosine_on_hand_values():
    """scale · cos(mean_pool(H), u_c): the pooled (3, 4) has norm 5, so the logits are
    20 · (0.6, 0.8) = (12, 16); without the normalisation they would be (60, 80), and with
    the padded position counted the pooled vector would be (1, 28/3)."""
    from fedtext.backbone.heads import SIMILARITY_SCALE, SimilarityHead

    host = SimpleNamespace(label_vectors=torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    hidden = torch.tensor([[[3.0, 4.0], [3.0, 4.0], [-3.0, 20.0]]])
    att = torch.tensor([[1, 1, 0]])
    head = SimilarityHead.__new__(SimilarityHead)
    got = head.pooled_logits(host, hidden, att)
    torch.testing.assert_close(got, SIMILARITY_SCALE * torch.tensor([[0.6, 0.8]]))
    assert SIMILARITY_SCALE == 20.0


def test_the_label_vectors_are_unit_norm(backbone):
    """u_c of the similarity head: each label description's pooled encoding scaled to norm 1
    (the encoder's pooled outputs are far from unit norm, so a missing normalisation shows)."""
    u = backbone.label_vectors
    torch.testing.assert_close(u.norm(dim=-1), torch.ones(len(u)), rtol=1e-5, atol=1e-5)


def test_the_feddls_client_ranks_candidates_by_cosine_not_dot_product(backbone, monkeypatch):
    """Eq. (7): the K nearest tokens by cosine distance. The client's own candidate function
    (what it hands to the local search) on a vector where the K largest dot products with
    e(V) are other tokens than the K largest cosines."""

    class Stop(Exception):
        pass

    def spy(p, loss, candidates, vocab, steps, rng):
        raise Stop(candidates)

    monkeypatch.setattr("clients.feddls.local_search", spy)
    cfg = make_config("feddls", compression="full", candidates=5, **SMALL)
    client = client_class("feddls")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone)
    with pytest.raises(Stop) as stop:
        client.train([], {"server_round": 1})
    candidates = stop.value.args[0]
    ids = backbone.natural_token_ids()
    e = client.vocab[ids].astype(np.float64)
    norms = np.linalg.norm(e, axis=1)
    vec = e[int(np.argmin(norms))] + 0.01  # a short embedding: long ones win the dot products
    cos = e @ vec / (norms * np.linalg.norm(vec))
    by_cos = [int(ids[i]) for i in np.argsort(-cos, kind="stable") if not np.array_equal(client.vocab[ids[i]], vec)][:5]
    by_dot = [int(ids[i]) for i in np.argsort(-(e @ vec), kind="stable")][:5]
    assert set(by_cos) != set(by_dot)  # the inputs tell the two apart
    assert candidates(vec.astype(np.float32)).tolist() == by_cos


# every strategy that averages by examples, through its own aggregate_fit: two honest uploads
BY_EXAMPLES = {  # method -> run-config fields (small models; fedavg's family on the random tiny BERT)
    "fedprompt": dict(prompt_length=2),
    "bbt-fed": dict(intrinsic_dim=4, prompt_length=2),
    "fedptuning-v2": dict(prompt_length=2),
    "fedavg": dict(model="tiny-bert", weights="random", head="linear"),
    "fedlora": dict(model="tiny-bert", weights="random"),
    "fedadapter": dict(model="tiny-bert", weights="random"),
    "fedkseed": dict(seeds=4),
}


@pytest.mark.parametrize("method", list(BY_EXAMPLES))
def test_two_honest_uploads_are_weighted_by_their_examples(method):
    """Uploads x + 0.01 on 1 example and x + 0.05 on 3 give x + 0.04 (a uniform mean: x + 0.03);
    FedKSeed adds the weighted mean of its two G, 0.04, to A. The tests that aggregate one
    honest upload (its mean is itself) cannot see a weighting changed in a strategy."""
    from fedtext.server_app import strategy_class

    cfg = make_config(method, max_length=32, **BY_EXAMPLES[method])
    strat = strategy_class(method)(cfg, TASKS["demo"])
    strat.global_arrays = g = strat.initial_arrays()
    strat.rounds.begin(1)
    up = g if method != "fedkseed" else [np.zeros_like(a) for a in g]
    results = [fit_res(0, [a + np.asarray(0.01, a.dtype) for a in up], 1),
               fit_res(1, [a + np.asarray(0.05, a.dtype) for a in up], 3)]
    params, _ = strat.aggregate_fit(1, results, [])
    assert strat.record.num_clients == 2, strat.record.dropped
    for got, base in zip(comm.decode(params), g, strict=True):
        np.testing.assert_allclose(got, base + 0.04, rtol=0, atol=2e-6)


@pytest.mark.parametrize("opt", [dict(server_optimizer="fedavg", server_lr=0.5),
                                 dict(server_optimizer="fedavgm", server_momentum=0.9),
                                 dict(server_optimizer="fedadagrad", server_tau=1.0)])
def test_the_server_optimizers_step_from_the_example_weighted_mean(opt):
    """Δ = the example-weighted mean − x = 0.04 (uniform: 0.03): fedavg at η = 0.5 moves x by
    0.02; fedavgm's first step is η Δ = 0.04; fedadagrad's is η Δ / (|Δ| + τ) = 0.1 · 0.04 / 1.04."""
    from strategies.fedprompt import FedPrompt

    cfg = make_config("fedprompt", prompt_length=2, max_length=32, **opt)
    strat = FedPrompt(cfg, TASKS["demo"])
    strat.global_arrays = g = strat.initial_arrays()
    strat.rounds.begin(1)
    params, _ = strat.aggregate_fit(1, [fit_res(0, [g[0] + np.float32(0.01)], 1),
                                        fit_res(1, [g[0] + np.float32(0.05)], 3)], [])
    step = {"fedavg": 0.5 * 0.04, "fedavgm": 0.04, "fedadagrad": 0.1 * 0.04 / (0.04 + 1.0)}[opt["server_optimizer"]]
    np.testing.assert_allclose(comm.decode(params)[0], g[0] + step, rtol=0, atol=2e-6)
