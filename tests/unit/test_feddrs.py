"""FedDRS (text-free server distillation) and FedDF (distillation on auxiliary text), without Flower.

Two rounds of both (every FedDRS sampling option): ``tests/unit/test_methods_rounds.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.backbone import Backbone
from fedtext.node.node import client_class
from fedtext.common.config import ConfigError
from fedtext.learning.data import client_data, partition_train
from fedtext.backbone.devices import CPU_FP32, Precision
from fedtext.methods.feddrs.config import SAMPLERS, parse_sampling
from fedtext.methods.feddrs.distill import Teaching, distill_steps, kl_to_student
from fedtext.methods.feddrs.model import EmbeddingsNet
from fedtext.methods.feddrs.samplers import (
    adversarial_loss,
    adversarial_samples,
    pseudo_labels,
    random_embeddings,
    sequence_ends,
    target_loss,
    target_samples,
    word_embedding_name,
    wrap,
)
from fedtext.common.registry import make_config
from fedtext.trust.robust import weighted_mean
from fedtext.common.tasks import TASKS
from fedtext.server.validation import Upload
from strategies.feddf import FedDF
from strategies.feddrs import FedDRS

SMALL = dict(max_length=48, shots_per_class=4, client_test_size=8, eval_size=20)
TINY_DISTILL = dict(sample_batch=2, sample_length=4, sample_steps=1, distill_steps=1)


def drs(**kw):
    return make_config("feddrs", **{**SMALL, **kw})


def fit_res(arrays, n, pid):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5}))


@pytest.fixture(scope="module")
def nets():
    """A teacher and a student network of FedDRS's model whose heads differ (seeded)."""
    cfg = drs()
    model_cls = cfg.method_config.model_class()
    from fedtext.backbone import backbone_for

    bb = backbone_for(cfg, TASKS["demo"])
    teacher, student = model_cls(cfg, bb), model_cls(cfg, bb)
    arrays = teacher.initial_arrays()
    names = [s.name for s in teacher.global_specs()]
    rng = np.random.default_rng(7)
    t_arrays, s_arrays = list(arrays), list(arrays)
    w = names.index("head.weight")
    t_arrays[w] = rng.standard_normal(arrays[w].shape).astype(np.float32)
    s_arrays[w] = rng.standard_normal(arrays[w].shape).astype(np.float32)
    return teacher.load(t_arrays), student.load(s_arrays)


# ------------------------------------------------------------------- config
def test_sampling_option_names_a_set_of_the_three_samplers():
    assert parse_sampling("mixed") == SAMPLERS == ("random", "target", "adversarial")
    assert parse_sampling("adversarial+random") == ("random", "adversarial")
    assert parse_sampling("target") == ("target",)
    for bad in ("gan", "random+random", "random+", ""):
        with pytest.raises(ConfigError, match="feddrs.sampling"):
            parse_sampling(bad)
    with pytest.raises(ConfigError, match="unknown feddrs.sampling 'noise'"):
        drs(sampling="noise")
    with pytest.raises(ConfigError, match="feddrs.label-prior"):
        drs(label_prior="client-ish")
    with pytest.raises(ConfigError, match="head=tied does not fit method feddrs"):
        drs(head="tied")  # a pseudo-embedding has no [MASK] position


def test_feddf_rejects_a_missing_auxiliary_dataset(tmp_path):
    with pytest.raises(ConfigError, match="feddf.aux-dataset path .* does not exist"):
        make_config("feddf", aux_dataset=str(tmp_path / "nope"))


def test_budget_is_I_per_round_and_I_star_after_the_last_and_nothing_before_it_with_post_only():
    s = FedDRS(drs(num_server_rounds=3, iterations=2, post_iterations=5), TASKS["demo"])
    assert [s.budget(r) for r in (1, 2, 3)] == [(2, False), (2, False), (5, True)]
    s = FedDRS(drs(num_server_rounds=3, post_only=True), TASKS["demo"])
    assert [s.budget(r) for r in (1, 2, 3)] == [(0, False), (0, False), (3, True)]


# ------------------------------------------------------------------ samplers
def test_random_embeddings_are_seeded_mixes_of_vocabulary_rows(nets):
    _, student = nets
    a = random_embeddings(student, 3, 5, 0.5, np.random.default_rng(1))
    b = random_embeddings(student, 3, 5, 0.5, np.random.default_rng(1))
    assert a.shape == (3, 5, student.dim) and torch.equal(a, b)
    # without noise every position lies between two rows of e(V): within their value range
    emb = student.embeddings.weight.detach()
    clean = random_embeddings(student, 50, 8, 0.0, np.random.default_rng(2))
    assert (clean.min(-1).values >= emb.min() - 1e-6).all() and (clean.max(-1).values <= emb.max() + 1e-6).all()
    # the noise is scaled to the embeddings' per-dimension spread
    noise = random_embeddings(student, 50, 8, 1.0, np.random.default_rng(2)) - clean
    ratio = float(noise.std(dim=(0, 1)).mean() / emb.std(0).mean())
    assert 0.9 < ratio < 1.1


def test_random_embeddings_noise_has_each_dimensions_own_std(nets):
    """noise·σ⊙ε with σ the std of each embedding dimension: checked dimension by dimension
    (the check above averages over dimensions, which a single σ for every dimension, e.g.
    the matrix's overall std, passes too). 4000 draws per dimension: the sample std is
    within about 1.1 % (1 / sqrt(2 x 4000)) of the true one; the test allows 8 %."""
    _, student = nets
    emb = student.embeddings.weight.detach()
    sigma = emb.std(0)
    clean = random_embeddings(student, 200, 20, 0.0, np.random.default_rng(3))
    noise = (random_embeddings(student, 200, 20, 0.5, np.random.default_rng(3)) - clean) / 0.5
    ratio = noise.std(dim=(0, 1)) / sigma
    assert float((ratio - 1).abs().max()) < 0.08, float((ratio - 1).abs().max())
    assert float((noise.mean(dim=(0, 1)) / sigma).abs().max()) < 0.08  # zero-mean in every dimension
    # the dimensions' spreads differ (else a single σ would pass): the widest is over 1.5 x the narrowest
    assert float(sigma.max() / sigma.min()) > 1.5


def test_a_pseudo_sequence_is_cls_theta_sep(nets):
    _, student = nets
    ends = sequence_ends(student)
    theta = torch.randn(2, 3, student.dim)
    x = wrap(ends, theta)
    assert x.shape == (2, 5, student.dim)
    assert torch.equal(x[:, 1:4], theta)
    assert torch.equal(x[0, 0], student.embeddings.weight[student.cls_id].detach())
    assert torch.equal(x[1, -1], student.embeddings.weight[student.sep_id].detach())


def test_pseudo_labels_follow_the_clients_label_counts_or_are_uniform():
    rng = np.random.default_rng(0)
    drawn = pseudo_labels(np.array([0, 3, 0, 1], np.float32), 400, 4, rng).numpy()
    assert set(drawn) == {1, 3} and 0.65 < (drawn == 1).mean() < 0.85  # p = 3/4 for label 1
    uniform = pseudo_labels(None, 400, 4, rng).numpy()
    assert set(uniform) == {0, 1, 2, 3}


@pytest.mark.parametrize("counts", [[2**24, 1, 1], [3e38, 3e38]])
def test_pseudo_labels_take_large_float32_counts_in_float64(counts):
    """γ's distribution p = counts / Σ counts in float64: a float32 sum of [2**24, 1, 1] drops
    the ones (p would sum past rng.choice's tolerance) and of [3e38, 3e38] overflows to inf
    (p = 0); either crashed the server's round on counts check_upload accepts."""
    c = np.array(counts, np.float32)
    p = c.astype(np.float64) / c.astype(np.float64).sum()
    drawn = pseudo_labels(c, 64, len(counts), np.random.default_rng(5)).numpy()
    assert np.array_equal(drawn, np.random.default_rng(5).choice(len(counts), size=64, p=p))


def test_target_sampling_lowers_the_teachers_cross_entropy_to_gamma_eq_6(nets):
    teacher, student = EmbeddingsNet(nets[0]), nets[1]
    ends, rng = sequence_ends(student), np.random.default_rng(3)
    theta0 = random_embeddings(student, 4, 6, 0.5, rng)
    gamma = pseudo_labels(None, 4, 2, rng)
    theta = target_samples(teacher, ends, theta0, gamma, steps=3, beta=2.0)
    with torch.no_grad():
        before, after = target_loss(teacher, ends, theta0, gamma), target_loss(teacher, ends, theta, gamma)
    assert not torch.equal(theta, theta0) and float(after) < float(before)
    assert all(p.grad is None for p in nets[0].trainable_parameters())  # only theta got a gradient


def test_adversarial_sampling_grows_the_teacher_student_gap_eq_7(nets):
    teacher, student = (EmbeddingsNet(net) for net in nets)
    ends, rng = sequence_ends(nets[1]), np.random.default_rng(4)
    theta0 = random_embeddings(nets[1], 4, 6, 0.5, rng)
    gamma = pseudo_labels(None, 4, 2, rng)
    ce = torch.nn.functional.cross_entropy

    def gap(theta):  # CE of the student to gamma minus the teacher's: what eq. (7) pushes up
        x = wrap(ends, theta)
        return float(ce(student.embeds_logits(x), gamma) - ce(teacher.embeds_logits(x), gamma))

    theta = adversarial_samples(teacher, student, ends, theta0, gamma, lam=1.0, steps=3, beta=2.0)
    with torch.no_grad():
        assert gap(theta) > gap(theta0)
        lam = 0.1
        assert float(adversarial_loss(teacher, student, ends, theta, gamma, lam)) < float(
            adversarial_loss(teacher, student, ends, theta0, gamma, lam))


def test_a_distillation_step_lowers_the_kl_it_optimises_eq_8(nets):
    teacher, student = nets
    ends = sequence_ends(student)
    x = wrap(ends, random_embeddings(student, 6, 6, 0.5, np.random.default_rng(5)))
    with torch.no_grad():
        probs = torch.softmax(EmbeddingsNet(teacher).embeds_logits(x), -1)
    head = [p for n, p in student.named_trainable() if n.startswith("head.")]
    saved = [p.detach().clone() for p in head]
    before, after = distill_steps(student, head, [Teaching(x, probs)], lambda net, inp: EmbeddingsNet(net).embeds_logits(inp),
                                  steps=2, lr=1e-2, precision=student.precision)
    with torch.no_grad():
        direct = float(kl_to_student(EmbeddingsNet(student).embeds_logits(x), probs))
        for p, s in zip(head, saved, strict=True):
            p.copy_(s)  # the module-scoped student back as it was
    assert after < before and after == pytest.approx(direct, rel=1e-5)


def test_distill_steps_take_plain_adamw_steps_on_eq_8_and_report_the_first_and_last_loss() -> None:
    """Eq. (8) by AdamW without weight decay, hand-computed on a 2-class student whose logits
    are its one parameter w (w_0 = (1, 1), σ(w_0) = (1/2, 1/2)) and a teacher p = (3/4, 1/4).

    KL(p || σ(w_0)) = 3/4 ln(3/2) - 1/4 ln 2; ∇_w = σ(w_0) - p = (-1/4, 1/4), so Adam's first
    step moves each weight by lr against the gradient's sign (m̂ / √v̂ = ±1). With
    lr = ln(3) / 2, w_1 = (1 + ln 3 / 2, 1 - ln 3 / 2), σ(w_1) = (3/4, 1/4) = p and the KL is 0.
    Any decoupled weight decay would also shrink w_1 by lr · decay · w_0 toward 0 (a shift
    the softmax cannot see, hence checked on w itself)."""
    lr = float(np.log(3) / 2)
    kl_0 = 0.75 * np.log(1.5) - 0.25 * np.log(2)
    teacher = [Teaching(None, torch.tensor([[0.75, 0.25]]))]

    def logits(net: torch.Tensor, _: object) -> torch.Tensor:
        return net[None]

    w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    before, after = distill_steps(w, [w], teacher, logits, steps=1, lr=lr, precision=CPU_FP32)
    assert before == pytest.approx(kl_0, rel=1e-6) and after == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(w.detach().numpy(), [1 + lr, 1 - lr], rtol=1e-6)
    # two steps: "before" is still the loss at w_0 (not at w_1, where it is 0); "after" at w_2
    w = torch.nn.Parameter(torch.tensor([1.0, 1.0]))
    before, after = distill_steps(w, [w], teacher, logits, steps=2, lr=lr, precision=CPU_FP32)
    assert before == pytest.approx(kl_0, rel=1e-6)
    with torch.no_grad():
        assert after == pytest.approx(float(kl_to_student(w[None], teacher[0].probs)), rel=1e-6)
    assert after > 1e-3  # Adam's second step overshoots p: w_2 is not w_1


def test_distillation_back_propagates_one_teacher_at_a_time_and_takes_the_summed_losss_step() -> None:
    """Eq. (8)'s step on Σ_k KL(teacher_k || student), three teachers on a 3-class linear student
    (logits = W x): two AdamW steps equal those of one backward over the whole sum (the reference
    written here, what distill_steps did before), and each teacher's term is back-propagated before
    the next one's forward runs (one teacher's graph held at a time: the forward/backward order)."""
    gen = torch.Generator().manual_seed(0)
    teachings = [Teaching(torch.randn(4, 5, generator=gen), torch.softmax(torch.randn(4, 3, generator=gen), -1))
                 for _ in range(3)]
    w0 = torch.randn(3, 5, generator=gen)
    order: list[str] = []

    def logits(net: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        order.append("forward")
        out = x @ net.T
        if out.requires_grad:  # not in the final, no-grad loss
            out.register_hook(lambda g: order.append("backward"))
        return out

    w = torch.nn.Parameter(w0.clone())
    before, after = distill_steps(w, [w], teachings, logits, steps=2, lr=0.05, precision=CPU_FP32)
    ref = torch.nn.Parameter(w0.clone())
    opt = torch.optim.AdamW([ref], lr=0.05, weight_decay=0.0)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = sum(kl_to_student(t.inputs @ ref.T, t.probs) for t in teachings)
        losses.append(float(loss))
        loss.backward()
        opt.step()
    torch.testing.assert_close(w.detach(), ref.detach(), rtol=1e-6, atol=1e-7)
    assert before == pytest.approx(losses[0], rel=1e-6)
    with torch.no_grad():
        assert after == pytest.approx(float(sum(kl_to_student(t.inputs @ ref.T, t.probs) for t in teachings)), rel=1e-6)
    assert order[:6] == ["forward", "backward"] * 3


def test_kl_matches_its_definition_on_hand_values():
    p = torch.tensor([[0.5, 0.5], [0.9, 0.1]])
    logits = torch.log(torch.tensor([[0.25, 0.75], [0.5, 0.5]]))
    expected = (0.5 * np.log(0.5 / 0.25) + 0.5 * np.log(0.5 / 0.75) + 0.9 * np.log(0.9 / 0.5) + 0.1 * np.log(0.1 / 0.5)) / 2
    assert float(kl_to_student(logits, p)) == pytest.approx(expected, rel=1e-6)


# ---------------------------------------------------------------- the server
def _uploads(strategy, n_clients=2):
    """Client models: the initial arrays shifted per client, plus label counts."""
    base = strategy.model.initial_arrays()
    rng = np.random.default_rng(11)
    out = []
    for k in range(n_clients):
        arrays = [(a + 0.01 * rng.standard_normal(a.shape)).astype(np.float32) for a in base]
        counts = np.zeros(2, np.float32)
        counts[k % 2] = 4
        out.append((arrays, counts))
    return out


def test_a_round_averages_the_embedding_layer_exactly_and_distils_the_task_parameters():
    # a small step (one AdamW step at the default 1e-4 overshoots on these 2 x 6 samples)
    strat = FedDRS(drs(num_server_rounds=2, distill_lr=1e-5, **TINY_DISTILL), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    uploads = _uploads(strat)
    results = [fit_res([*a, c], n, pid) for pid, ((a, c), n) in enumerate(zip(uploads, (10, 30), strict=True))]
    params, metrics = strat.aggregate_fit(1, results, [])
    new = comm.decode(params)
    average = weighted_mean([a for a, _ in uploads], [10, 30])
    names = [s.name for s in strat.model.global_specs()]
    emb = names.index(word_embedding_name(strat.model.network))
    assert len(new) == len(names)  # label_counts never reach the global model
    np.testing.assert_array_equal(new[emb], average[emb])  # ω^emb: exactly the clients' average
    moved = [n for i, n in enumerate(names) if not np.array_equal(new[i], average[i])]
    assert "head.weight" in moved and any(".attention." in n for n in moved)  # ω^f was distilled
    m = strat.record.method_metrics
    assert m["distill_iterations"] == 1 and m["post_processing"] == 0
    assert m["server_distill_s"] > 0 and m["server_peak_rss_mb"] > 100
    # the distillation's (start, end) joins the round's busy intervals; its length is server_distill_s
    ((t0, t1),) = strat.record.intervals
    assert m["server_distill_s"] == pytest.approx(t1 - t0) and t1 > t0 > 1e9
    assert m["distill_kl_after"] < m["distill_kl_before"]


def test_post_only_rounds_are_plain_fedavg():
    strat = FedDRS(drs(num_server_rounds=2, post_only=True, **TINY_DISTILL), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    uploads = _uploads(strat)
    params, _ = strat.aggregate_fit(1, [fit_res([*a, c], 5, pid) for pid, (a, c) in enumerate(uploads)], [])
    for got, want in zip(comm.decode(params), weighted_mean([a for a, _ in uploads], [5, 5]), strict=True):
        np.testing.assert_array_equal(got, want)
    assert strat.record.method_metrics == {}


def test_bad_label_counts_drop_the_upload_with_a_reason():
    strat = FedDRS(drs(num_server_rounds=2, post_only=True), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    (a, c), (b, _) = _uploads(strat)
    strat.aggregate_fit(1, [fit_res([*a, c], 5, 0), fit_res([*b, np.array([-1, 2], np.float32)], 5, 1)], [])
    assert strat.record.num_clients == 1
    assert strat.record.dropped == [{"client": "1", "reason": "label_counts must be >= 0 with a positive sum, "
                                                               "got [-1.0, 2.0]"}]


def test_client_uploads_its_model_and_its_label_counts():
    cfg = drs(local_steps=1, batch_size=4)
    client = client_class("feddrs")(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    out, n, _ = client.train(client.model.initial_arrays(), {"server_round": 1})
    specs = client.model.upload_specs()
    assert [s.name for s in specs][-1] == "label_counts" and comm.check_arrays(out, specs) is None
    labels = client.train_batch.labels.numpy()
    np.testing.assert_array_equal(out[-1], [np.sum(labels == 0), np.sum(labels == 1)])
    assert n == len(labels)


def test_feddf_distils_toward_the_ensemble_of_mean_logits_eq_2(monkeypatch):
    cfg = make_config("feddf", **SMALL, aux_size=6, aux_batch=4, distill_steps=1, num_server_rounds=2)
    strat = FedDF(cfg, TASKS["demo"])
    assert [len(b) for b in strat.aux] == [4, 2]  # 6 auxiliary texts, batches of 4
    seen = {}

    def spy(student, params, teachings, logits, steps, lr, *, precision):
        seen.update(teachings=teachings, steps=steps, params=len(params), precision=precision)
        return 1.0, 0.5

    monkeypatch.setattr("strategies.feddf.distill_steps", spy)
    models = [a for a, _ in _uploads(strat)]
    student = strat.model.load(weighted_mean(models, [1, 1]))
    strat.distill(1, student, models, [], iterations=2, post=False)
    expected = []
    with torch.no_grad():
        for batch in strat.aux:
            mean_logits = sum(strat.teacher.load(m).forward(None, batch) for m in models) / 2
            expected.append(torch.softmax(mean_logits, -1))  # softmax of the mean logits, not mean softmax
    for t, e in zip(seen["teachings"], expected, strict=True):
        torch.testing.assert_close(t.probs, e, rtol=1e-5, atol=1e-6)
    assert seen["steps"] == 2 * cfg.method_config.distill_steps
    assert seen["precision"] is student.precision  # loss scaling follows the student's device and dtype
    assert seen["params"] == len(strat.model.global_specs())  # FedDF distils every weight


# ---------------------------------------------------------------- partition
@pytest.mark.parametrize("clients", [2, 4])
def test_alpha_to_zero_partition_puts_each_client_on_one_label_and_each_label_on_its_own_clients(clients):
    cfg = make_config("feddrs", partition="label")
    labels = [set(partition_train(cfg, i, clients)["label"]) for i in range(clients)]
    assert labels == [{i % 2} for i in range(clients)]  # client i: label i mod C only (demo: C = 2)
    if clients == 2:  # as many clients as labels: every label on exactly one client
        assert labels[0] | labels[1] == {0, 1} and labels[0] != labels[1]


# ------------------------------------------- the math, on hand-checkable values
class _FixedLogits:
    """A stand-in network whose ``embeds_logits`` returns fixed logits and records its input."""

    def __init__(self, probs: list[list[float]]) -> None:
        self.logits = torch.log(torch.tensor(probs))
        self.seen: list[torch.Tensor] = []

    def embeds_logits(self, embeds: torch.Tensor) -> torch.Tensor:
        self.seen.append(embeds)
        return self.logits


def test_adversarial_loss_is_teacher_ce_minus_lambda_student_ce_eq_7(nets: tuple[Backbone, Backbone]) -> None:
    """Eq. (7) at a fixed θ: ``CE(f(θ; ω_k), γ) − λ·CE(f(θ; ω_S), γ)``, the sign of λ included."""
    # stand-ins: γ = [0, 1]; the teacher gives γ the probabilities 1/2 and 1/4, the student 1/8 and 1/2
    teacher = _FixedLogits([[0.5, 0.5], [0.75, 0.25]])
    student = _FixedLogits([[0.125, 0.875], [0.5, 0.5]])
    gamma = torch.tensor([0, 1])
    ends, theta = torch.zeros(2, 3), torch.ones(2, 4, 3)
    # CE_t = (ln 2 + ln 4) / 2 = 1.5 ln 2, CE_s = (ln 8 + ln 2) / 2 = 2 ln 2;
    # λ = 0.25: 1.5 ln 2 − 0.25 · 2 ln 2 = ln 2 (a flipped sign would give 2 ln 2)
    got = adversarial_loss(teacher, student, ends, theta, gamma, lam=0.25)
    assert float(got) == pytest.approx(np.log(2), rel=1e-6)
    for net in (teacher, student):  # both see the same [CLS] θ [SEP] sequence
        (x,) = net.seen
        assert torch.equal(x, wrap(ends, theta))
    # the real networks: CE computed here from each one's logits, −log p(γ) averaged by hand
    real_teacher, real_student = (EmbeddingsNet(net) for net in nets)
    ends = sequence_ends(nets[1])
    theta = random_embeddings(nets[1], 3, 4, 0.5, np.random.default_rng(8))
    gamma = torch.tensor([0, 1, 1])
    with torch.no_grad():
        x = wrap(ends, theta)
        ce_t = -torch.log_softmax(real_teacher.embeds_logits(x), -1)[torch.arange(3), gamma].mean()
        ce_s = -torch.log_softmax(real_student.embeds_logits(x), -1)[torch.arange(3), gamma].mean()
        got = adversarial_loss(real_teacher, real_student, ends, theta, gamma, lam=0.4)
    assert abs(float(ce_s)) > 1e-3  # the student's term is there to be weighed
    assert float(got) == pytest.approx(float(ce_t - 0.4 * ce_s), rel=1e-5, abs=1e-6)


def test_with_the_similarity_head_the_embedding_layer_stays_the_clients_average() -> None:
    """ω^emb is never distilled (§4): with ``head=similarity`` the label descriptions are
    encoded through the word embeddings, so they *would* get a gradient if distilled
    (with ``linear`` they get none either way)."""
    strat = FedDRS(drs(head="similarity", num_server_rounds=2, distill_lr=1e-5, **TINY_DISTILL), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    uploads = _uploads(strat)
    results = [fit_res([*a, c], n, pid) for pid, ((a, c), n) in enumerate(zip(uploads, (10, 30), strict=True))]
    params, _ = strat.aggregate_fit(1, results, [])
    new = comm.decode(params)
    # ω^emb = (10·e_0 + 30·e_1) / 40, the FedAvg start, to the bit
    average = weighted_mean([a for a, _ in uploads], [10, 30])
    names = [s.name for s in strat.model.global_specs()]
    assert "head.weight" not in names  # the similarity head has no weights of its own
    emb = names.index(word_embedding_name(strat.model.network))
    np.testing.assert_array_equal(new[emb], average[emb])
    moved = [n for i, n in enumerate(names) if not np.array_equal(new[i], average[i])]
    assert any(".attention." in n for n in moved)  # the task parameters were distilled


def _spied_rounds(monkeypatch: pytest.MonkeyPatch, rounds: int, run: int, counts: list[list[float]],
                  **kw: object) -> tuple[FedDRS, list[dict], list[list[Teaching]]]:
    """Run server rounds 1..``run`` of a ``rounds``-round FedDRS with the samplers and
    the distillation replaced by spies: target sampling returns θ = 1 everywhere,
    adversarial θ = 2, and no student step is taken. Returns the strategy, every
    sampler call (``kind``, ``round``, ``gamma``, ``lam``) and every iteration's teachings."""
    strat = FedDRS(drs(num_server_rounds=rounds, **{**TINY_DISTILL, **kw}), TASKS["demo"])
    calls: list[dict] = []
    taught: list[list[Teaching]] = []
    current = {"round": 0}

    def target(teacher: Backbone, ends: torch.Tensor, theta0: torch.Tensor, gamma: torch.Tensor, steps: int,
               beta: float) -> torch.Tensor:
        calls.append(dict(kind="target", round=current["round"], gamma=gamma.clone(), lam=None))
        return torch.full_like(theta0, 1.0)

    def adversarial(teacher: Backbone, student: Backbone, ends: torch.Tensor, theta0: torch.Tensor,
                    gamma: torch.Tensor, lam: float, steps: int, beta: float) -> torch.Tensor:
        calls.append(dict(kind="adversarial", round=current["round"], gamma=gamma.clone(), lam=lam))
        return torch.full_like(theta0, 2.0)

    def distill(student: Backbone, params: list[torch.nn.Parameter], teachings: list[Teaching],
                logits: Callable[[Backbone, object], torch.Tensor], steps: int, lr: float, *,
                precision: Precision) -> tuple[float, float]:
        assert precision is student.precision
        taught.append(list(teachings))
        return 1.0, 0.5

    monkeypatch.setattr("strategies.feddrs.target_samples", target)
    monkeypatch.setattr("strategies.feddrs.adversarial_samples", adversarial)
    monkeypatch.setattr("strategies.feddrs.distill_steps", distill)
    base = strat.model.initial_arrays()
    names = [s.name for s in strat.model.upload_specs()]
    uploads = [Upload(None, str(pid), 5, dict(zip(names, [*base, np.asarray(c, np.float32)], strict=True)), {})
               for pid, c in enumerate(counts)]
    for r in range(1, run + 1):
        current["round"] = r
        strat.rounds.begin(r)
        strat.aggregate(r, uploads)
    return strat, calls, taught


def test_post_processing_uses_lambda_star_after_the_last_round_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alg. 1 line 8 and §4: the last round's post-processing samples with λ* (``post-lam``),
    every earlier round with λ (``lam``), and I* iterations instead of I."""
    _, calls, taught = _spied_rounds(monkeypatch, 2, 2, [[2, 2], [1, 3]], sampling="adversarial", lam=0.1,
                                     post_lam=0.7, iterations=1, post_iterations=2)
    lams = {r: [c["lam"] for c in calls if c["round"] == r] for r in (1, 2)}
    # round 1: I = 1 iteration x 2 teachers at λ = 0.1; round 2 (the last): I* = 2 iterations x 2 teachers at λ* = 0.7
    assert lams == {1: [0.1, 0.1], 2: [0.7] * 4}
    assert len(taught) == 1 + 2


def test_every_samplers_samples_reach_the_distillation(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sampling=mixed``: each teacher's data is ``sample-batch`` random, then target, then
    adversarial pseudo sequences (§4, D_p = {θ^rd, θ^tr, θ^ad}), with the teacher's softmax on all."""
    strat, calls, taught = _spied_rounds(monkeypatch, 2, 1, [[2, 2], [1, 3]], sampling="mixed", sample_batch=2,
                                         sample_length=4)
    assert [c["kind"] for c in calls] == ["target", "adversarial"] * 2  # per teacher, in SAMPLERS order
    (teachings,) = taught  # round 1: I = 1 iteration, one Teaching per teacher
    assert len(teachings) == 2
    student = strat.model.network  # nothing was distilled: still the average
    ends = sequence_ends(student)
    # the first teacher's random block is the first draw of the iteration's generator
    rd = random_embeddings(student, 2, 4, strat.mcfg.noise, np.random.default_rng([strat.cfg.seed, 1, 0, 0xD125]))
    for k, t in enumerate(teachings):
        x = t.inputs
        assert tuple(x.shape) == (3 * 2, 4 + 2, student.dim)  # 3 samplers x 2 sequences of [CLS] 4 [SEP]
        assert torch.equal(x[:, 0], ends[0].expand(6, -1)) and torch.equal(x[:, -1], ends[1].expand(6, -1))
        theta = x[:, 1:-1]
        if k == 0:
            assert torch.equal(theta[:2], rd)  # θ^rd as drawn
        assert not torch.isin(theta[:2], torch.tensor([1.0, 2.0])).all()
        assert (theta[2:4] == 1.0).all()  # θ^tr: the target sampler's output
        assert (theta[4:6] == 2.0).all()  # θ^ad: the adversarial sampler's output
        with torch.no_grad():
            probs = torch.softmax(EmbeddingsNet(strat.teacher.load(strat.model.initial_arrays())).embeds_logits(x), -1)
        torch.testing.assert_close(t.probs, probs)  # every client uploaded the initial model here


def test_pseudo_labels_gamma_follow_each_clients_uploaded_label_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """γ_k is drawn from client k's ``label_counts`` (§4, §5.2): a client holding only label 0
    gets γ = 0 everywhere, one holding only label 1 gets γ = 1 (``label-prior=uniform``: both)."""
    _, calls, _ = _spied_rounds(monkeypatch, 2, 1, [[4, 0], [0, 4]], sampling="target+adversarial", sample_batch=16)
    # calls: teacher 0's target and adversarial γ, then teacher 1's; p = (4/4, 0/4) and (0/4, 4/4)
    assert [c["kind"] for c in calls] == ["target", "adversarial"] * 2
    for c in calls[:2]:
        assert c["gamma"].tolist() == [0] * 16
    for c in calls[2:]:
        assert c["gamma"].tolist() == [1] * 16
    _, calls, _ = _spied_rounds(monkeypatch, 2, 1, [[4, 0], [0, 4]], sampling="target+adversarial", sample_batch=16,
                                label_prior="uniform")
    assert all(set(c["gamma"].tolist()) == {0, 1} for c in calls)  # 16 uniform draws: both labels (seeded)


def test_pseudo_embeddings_need_a_pooled_head_and_are_refused_before_any_query() -> None:
    """A pseudo embedding has no ``[MASK]`` position to read: a cloze head is refused when
    the network is made, before a forward pass counts a query."""
    bb = Backbone("all-MiniLM-L6-v2", "tied", TASKS["sst2"], 32)
    before = bb.queries
    with pytest.raises(ValueError, match=r"need a pooled head \(similarity, linear\), not head=tied"):
        EmbeddingsNet(bb)
    assert bb.queries == before


def test_a_teacher_loads_from_read_only_upload_views_without_a_warning(monkeypatch):
    """The server validates uploads as read-only views of their replies (comm.view) and loads each
    teacher straight from them: torch warns on a non-writable array (once a process, into the run's
    log), so the load hands torch a writable copy of such an array (Network.load_trainable).
    Checked at torch's door, since the warning itself fires once a process."""
    import torch

    from fedtext.backbone import backbone_for

    cfg = drs()
    model = cfg.method_config.model_class()(cfg, backbone_for(cfg, TASKS["demo"]))
    arrays = model.initial_arrays()
    views = comm.view(comm.encode(arrays))
    assert not views[0].flags.writeable
    handed, as_tensor = [], torch.as_tensor
    monkeypatch.setattr(torch, "as_tensor", lambda x, *a, **k: handed.append(np.asarray(x).flags.writeable)
                        or as_tensor(x, *a, **k))
    net = model.load(views)
    monkeypatch.undo()
    assert len(handed) == len(arrays) and all(handed)
    got = [p.detach().numpy() for _, p in net.named_trainable()]
    assert all(np.array_equal(g, a) for g, a in zip(got, arrays, strict=True))
