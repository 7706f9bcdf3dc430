"""FedDPG (dynamic prompt generator, FedDPGu unlearning) and Fed P-tuning v2, without Flower.

Two rounds of both methods, bytes and FedDPGu's unlearning included: ``tests/unit/test_methods_rounds.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import RecordDict
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.backbone import Backbone, EncodedBatch
from fedtext.node.node import client_class
from fedtext.learning.data import client_data
from fedtext.methods.feddpg.model import FedDPGModel, make_generator, mean_embedding
from fedtext.methods.feddpg.unlearning import forget_split, relabel, unlearn, unlearning_loss
from fedtext.methods.fedptuning_v2.model import DeepPromptModel, attention_projections, deep_prompts
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from strategies.feddpg import FedDPG

SMALL = dict(max_length=64, shots_per_class=8, client_test_size=8, eval_size=20)


def dpg(**kw):
    return make_config("feddpg", **{**SMALL, **kw})


def fit_res(arrays, n, pid, **metrics):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}))


# ------------------------------------------------------------------ G itself
@pytest.mark.parametrize("prompts,hidden", [(1, 5), (5, 10), (10, 20)])
def test_generator_makes_P_prompt_vectors_of_the_embedding_size(backbone, prompts, hidden):
    model = FedDPGModel(dpg(prompts=prompts, hidden=hidden), backbone)
    arrays = model.initial_arrays()
    # two layers: D -> h -> |P|·D (eq. 2), with biases
    assert [a.shape for a in arrays] == [(hidden, 384), (hidden,), (prompts * 384, hidden), (prompts * 384,)]
    assert model.trainable_parameters() == 384 * hidden + hidden + hidden * prompts * 384 + prompts * 384
    batch = backbone.encode(["a fine movie", "the market fell sharply today", "ok"], [0, 1, 0])
    model.load(arrays)
    with torch.no_grad():
        p = model.prompts(batch)
    assert tuple(p.shape) == (3, prompts, 384)
    logits = model.logits(batch)
    assert tuple(logits.shape) == (3, 2)


def test_the_prompt_depends_on_its_input_and_only_on_its_own_tokens(backbone):
    model = FedDPGModel(dpg(prompts=4, hidden=10), backbone)
    model.load(model.initial_arrays())
    a = backbone.encode(["a fine movie", "the market fell sharply today"], [0, 1])
    with torch.no_grad():
        pa = model.prompts(a)
        alone = model.prompts(backbone.encode(["a fine movie"], [0]))
    assert not torch.allclose(pa[0], pa[1], atol=1e-4)  # two texts, two prompts
    # padding (the longer neighbour in the batch) does not change a text's prompt: ē is over its own n tokens
    torch.testing.assert_close(pa[0], alone[0], rtol=1e-5, atol=1e-6)


def test_mean_embedding_is_the_mean_word_embedding_over_the_text_tokens(backbone):
    from fedtext.methods.feddpg.model import mean_embedding

    batch = backbone.encode(["good", "a much longer sentence here"], [0, 1])
    e = backbone.vocab_embeddings()
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].numpy()  # [CLS] good [SEP]
    np.testing.assert_allclose(mean_embedding(backbone, batch)[0].detach().numpy(), e[ids].mean(0), rtol=1e-5, atol=1e-7)


def test_initial_G_is_seeded_and_the_default_torch_init(backbone):
    a, b = FedDPGModel(dpg(seed=3), backbone), FedDPGModel(dpg(seed=3), backbone)
    for x, y in zip(a.initial_arrays(), b.initial_arrays(), strict=True):
        np.testing.assert_array_equal(x, y)
    c = FedDPGModel(dpg(seed=4), backbone).initial_arrays()
    assert not np.array_equal(a.initial_arrays()[0], c[0])
    w0 = a.initial_arrays()[0]
    assert np.abs(w0).max() <= 1 / np.sqrt(384) + 1e-7  # kaiming-uniform bound of Linear(384, h)
    assert make_generator(384, 20, 10)[2].weight.shape == (3840, 20)


def test_input_configurations_of_fig_2(backbone):
    batch = backbone.encode(["a fine movie", "the market fell"], [0, 1])
    outs = {}
    for mode in ("prompt-text", "text", "prompt"):
        model = FedDPGModel(dpg(input=mode, prompts=3, hidden=5), backbone)
        model.load(model.initial_arrays())
        with torch.no_grad():
            outs[mode] = model.logits(batch)
    with torch.no_grad():
        torch.testing.assert_close(outs["text"], backbone.forward(None, batch))  # x only: G bypassed
    assert not torch.allclose(outs["prompt-text"], outs["text"])
    assert not torch.allclose(outs["prompt"], outs["prompt-text"])


def test_a_local_step_changes_G_and_nothing_in_the_encoder(backbone):
    cfg = dpg(local_steps=2, batch_size=4, prompts=2, hidden=5)
    client = client_class("feddpg")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone=backbone)
    before = {n: p.detach().clone() for n, p in backbone.named_parameters()}
    init = client.model.initial_arrays()
    out, n, loss = client.train(init, {"server_round": 1})
    assert n == len(client.train_batch) and np.isfinite(loss)
    assert all(not np.array_equal(a, b) for a, b in zip(init, out, strict=True))  # every tensor of G moved
    for name, p in backbone.named_parameters():
        assert torch.equal(p, before[name]), name  # the frozen PLM is untouched
        assert p.grad is None, name  # and never got a gradient


# -------------------------------------------------------------- aggregation
def test_server_takes_the_uniform_mean_of_G_eq_1(backbone):
    cfg = dpg(prompts=1, hidden=2)
    strat = FedDPG(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    a = [np.full(s.shape, 1.0, np.float32) for s in strat.model.global_specs()]
    b = [np.full(s.shape, 4.0, np.float32) for s in strat.model.global_specs()]
    params, _ = strat.aggregate_fit(1, [fit_res(a, 10, 0), fit_res(b, 30, 1)], [])
    # uniform (eq. 1): (1 + 4) / 2 = 2.5, not the example-weighted (10·1 + 30·4) / 40 = 3.25
    for x in comm.decode(params):
        np.testing.assert_allclose(x, 2.5)


def test_unlearning_round_samples_only_the_client_and_replaces_G_with_its_upload(backbone):
    cfg = dpg(prompts=1, hidden=2, unlearn_round=3, unlearn_client=1)
    strat = FedDPG(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    proxies = {str(i): SimpleNamespace(cid=f"node{i}") for i in range(3)}
    for pid, proxy in proxies.items():
        strat.sampler.learn(proxy, int(pid))
    manager = SimpleNamespace(all=lambda: {p.cid: p for p in proxies.values()}, wait_for=lambda *a, **k: True,
                              num_available=lambda: 3)
    assert strat.sample_clients(3, manager) == [proxies["1"]]
    assert strat.fit_config(3)["unlearn"] == 1 and strat.fit_config(2)["unlearn"] == 0
    assert len(strat.sample_clients(2, manager)) == 3  # an ordinary round: everyone (clients-per-round=0)
    strat.rounds.begin(3)
    g_u = [np.full(s.shape, 7.0, np.float32) for s in strat.model.global_specs()]
    _, res = fit_res(g_u, 6, 1, forget_accuracy_before=1.0, forget_accuracy_after=0.0)
    params, _ = strat.aggregate_fit(3, [(proxies["1"], res)], [])  # the reply of the node that was sampled
    for x, y in zip(comm.decode(params), g_u, strict=True):
        np.testing.assert_array_equal(x, y)  # G_global^{t+1} <- G_c^u exactly, no averaging
    assert strat.record.method_metrics["forget_accuracy_after"] == 0.0
    assert strat.record.method_metrics["unlearned_client"] == 1.0


def test_the_unlearning_round_forgets_the_server_optimizers_moments(backbone):
    """fedavgm's momentum holds training that saw the forgotten examples: the replacement round
    clears it, so round 4 steps from G_c^u with a fresh momentum (before: the old one kept)."""
    cfg = dpg(prompts=1, hidden=2, unlearn_round=2, unlearn_client=1, server_optimizer="fedavgm", server_momentum=0.9)
    strat = FedDPG(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    proxies = {str(i): SimpleNamespace(cid=f"node{i}") for i in range(2)}
    for pid, proxy in proxies.items():
        strat.sampler.learn(proxy, int(pid))
    specs = strat.model.global_specs()
    strat.rounds.begin(1)
    ups = [fit_res([np.full(s.shape, v, np.float32) for s in specs], 5, pid)[1] for pid, v in ((0, 1.0), (1, 3.0))]
    params, _ = strat.aggregate_fit(1, [(proxies[str(i)], r) for i, r in enumerate(ups)], [])
    strat.global_arrays = comm.decode(params)
    assert strat.server_opt.m is not None  # round 1 built a momentum
    strat.rounds.begin(2)
    _, res = fit_res([np.full(s.shape, 7.0, np.float32) for s in specs], 6, 1, forget_accuracy_before=1.0,
                     forget_accuracy_after=0.0)
    strat.aggregate_fit(2, [(proxies["1"], res)], [])
    assert strat.server_opt.m is None and strat.server_opt.v is None


# ----------------------------------------------------------------- FedDPGu
@pytest.mark.parametrize("classes", [2, 4])
def test_relabels_always_differ_from_the_true_label_and_cover_the_others(classes):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(classes), 500)
    new = relabel(labels, classes, rng)
    assert (new != labels).all() and new.min() >= 0 and new.max() < classes
    for c in range(classes):  # every other class is drawn, about uniformly
        others = np.bincount(new[labels == c], minlength=classes)
        assert others[c] == 0 and (np.delete(others, c) > 500 / (classes - 1) * 0.7).all()


def test_unlearning_loss_weighs_sets_or_examples_as_eq5_says():
    """Two retained examples with CE ln 2 and ln 4, one relabelled with CE ln 8 (uniform-ish
    logits built so that the true-class probability is 1/2, 1/4, 1/8)."""
    def logits_with_p(p: float) -> list[float]:  # 8 classes: class 0 gets p, the others share 1 - p
        rest = (1 - p) / 7
        return [np.log(p)] + [np.log(rest)] * 7

    keep = torch.tensor([logits_with_p(0.5), logits_with_p(0.25)])
    forget = torch.tensor([logits_with_p(0.125)])
    zeros = torch.zeros(2, dtype=torch.long)
    l2, l4, l8 = np.log(2), np.log(4), np.log(8)
    # sets: mean over the retained + λ · mean over the relabelled
    got = unlearning_loss(keep, zeros, forget, zeros[:1], lam=0.5, weighting="sets")
    assert float(got) == pytest.approx((l2 + l4) / 2 + 0.5 * l8, rel=1e-5)
    # examples: (Σ retained + λ Σ relabelled) / (n_r + λ n_u); λ = 1 is one CE over all three
    got = unlearning_loss(keep, zeros, forget, zeros[:1], lam=0.5, weighting="examples")
    assert float(got) == pytest.approx((l2 + l4 + 0.5 * l8) / 2.5, rel=1e-5)
    pooled = torch.nn.functional.cross_entropy(torch.cat([keep, forget]), torch.zeros(3, dtype=torch.long))
    assert float(unlearning_loss(keep, zeros, forget, zeros[:1], 1.0, "examples")) == pytest.approx(float(pooled))
    # nothing retained: only the relabelled term
    assert float(unlearning_loss(None, zeros[:0], forget, zeros[:1], 2.0, "sets")) == pytest.approx(2 * l8, rel=1e-5)
    assert float(unlearning_loss(None, zeros[:0], forget, zeros[:1], 2.0, "examples")) == pytest.approx(l8, rel=1e-5)


def test_an_unlearn_round_after_the_last_round_is_refused_at_config_time():
    """Issue 58: feddpg.unlearn-round=99 with num-server-rounds=1 finished with no unlearning
    and no word; now one line at config time (the last round itself is fine)."""
    from fedtext.common.config import ConfigError, RunConfig
    from fedtext.common.registry import METHODS

    with pytest.raises(ConfigError) as err:
        RunConfig.from_run_config({"method": "feddpg", "feddpg.unlearn-round": 99, "num-server-rounds": 1}, METHODS)
    assert str(err.value) == ("feddpg.unlearn-round=99 is after the last round (num-server-rounds=1): the run would "
                              "never unlearn; raise num-server-rounds or lower feddpg.unlearn-round")
    assert dpg(unlearn_round=3, num_server_rounds=3).method_config.unlearn_round == 3


def test_unlearn_loss_is_validated():
    from fedtext.common.config import ConfigError

    with pytest.raises(ConfigError, match="unlearn-loss"):
        dpg(unlearn_loss="mean")


def test_forget_split_is_a_seeded_fraction():
    f = forget_split(40, 0.2, seed=0, partition_id=3)
    assert len(f) == 8 and len(set(f)) == 8 and f.max() < 40
    np.testing.assert_array_equal(f, forget_split(40, 0.2, seed=0, partition_id=3))
    assert not np.array_equal(f, forget_split(40, 0.2, seed=0, partition_id=4))
    assert len(forget_split(3, 0.2, 0, 0)) == 1  # at least one example


def test_unlearning_client_forgets_and_never_trains_on_the_forgotten_again(backbone):
    cfg = dpg(prompts=2, hidden=5, local_steps=4, batch_size=8, unlearn_steps=12, lr=5e-3, shots_per_class=10)
    state = RecordDict()
    client = client_class("feddpg")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone=backbone, state=state)
    arrays = client.model.initial_arrays()
    for r in (1, 2, 3):  # learn first, so that there is something to forget
        arrays, _, _ = client.train(arrays, {"server_round": r})
    new, n, loss = client.train(arrays, {"server_round": 4, "unlearn": 1})
    m = client.fit_metrics
    n_forget = len(forget_split(len(client.train_batch), 0.2, cfg.seed, 0))
    assert m["forget_examples"] == n_forget and n == len(client.train_batch) - n_forget
    assert m["forget_accuracy_after"] < m["forget_accuracy_before"]  # trained towards wrong labels
    # the next client object of this node (Flower builds one per message) remembers what was forgotten
    again = client_class("feddpg")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone=backbone, state=state)
    assert len(again.forgotten()) == n_forget
    _, n_after, _ = again.train(new, {"server_round": 5})
    assert n_after == len(client.train_batch) - n_forget


def test_unlearn_target_stops_at_the_first_step_that_forgot_enough(backbone):
    """The target run equals the fixed-length run of the steps it took, and one step fewer
    had not yet forgotten T points (the check is made before each step)."""
    cfg = dpg(prompts=2, hidden=5, local_steps=4, batch_size=8, unlearn_steps=12, lr=5e-3, shots_per_class=10)
    client = client_class("feddpg")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone=backbone, state=RecordDict())
    arrays = client.model.initial_arrays()
    for r in (1, 2, 3):
        arrays, _, _ = client.train(arrays, {"server_round": r})
    batch = client.train_batch
    forget = forget_split(len(batch), 0.2, cfg.seed, 0)

    def run(**kw):
        model = FedDPGModel(dpg(prompts=2, hidden=5, lr=5e-3, shots_per_class=10, **kw), backbone)
        return unlearn(model, arrays, batch, forget, cfg.seed)

    full, m_full = run(unlearn_steps=12)
    assert m_full["unlearn_steps_taken"] == 12
    drop = 100 * (m_full["forget_accuracy_before"] - m_full["forget_accuracy_after"])
    assert drop > 0  # 12 steps do forget something, so a target of 1 point is reached on the way
    g, m = run(unlearn_steps=12, unlearn_target=1.0)
    k = int(m["unlearn_steps_taken"])
    assert 1 <= k <= 12 and 100 * (m["forget_accuracy_before"] - m["forget_accuracy_after"]) >= 1.0
    same, _ = run(unlearn_steps=k)
    for a, b in zip(g, same, strict=True):
        np.testing.assert_array_equal(a, b)
    if k > 1:
        _, fewer = run(unlearn_steps=k - 1)
        assert 100 * (fewer["forget_accuracy_before"] - fewer["forget_accuracy_after"]) < 1.0


def test_sgd_unlearning_step_is_lr_times_the_gradient_of_eq5(backbone):
    """``unlearn-optimizer=sgd``: one step moves G by exactly −lr·∇(eq. 5) (computed here by hand
    from the same relabels), where AdamW's first step moves every weight by about lr."""
    cfg = dpg(prompts=2, hidden=5, unlearn_steps=1, unlearn_lr=0.5, unlearn_optimizer="sgd", shots_per_class=4)
    model = FedDPGModel(cfg, backbone)
    arrays = model.initial_arrays()
    batch = backbone.encode(["a fine movie", "bad", "great acting", "dull plot", "loved it"], [1, 0, 1, 0, 1])
    forget = np.array([1, 3])
    new, m = unlearn(model, arrays, batch, forget, seed=7)
    assert m["unlearn_steps_taken"] == 1
    relabels = torch.as_tensor(relabel(batch.labels.numpy()[forget], 2, np.random.default_rng([7, 0x0F6E7])))
    gen = model.load(arrays, trainable=True)
    keep = batch.take(np.array([0, 2, 4]))
    forget_b = batch.take(forget)
    loss = unlearning_loss(model.logits(keep), keep.labels, model.logits(forget_b), relabels, 1.0, "sets")
    grads = torch.autograd.grad(loss, list(gen.parameters()))
    for a, b, g in zip(arrays, new, grads, strict=True):
        np.testing.assert_allclose(b, a - 0.5 * g.numpy(), atol=1e-6)
    moved = [np.abs(b - a) for a, b in zip(arrays, new, strict=True)]
    assert max(float(d.max()) for d in moved) > 0
    adam, _ = unlearn(FedDPGModel(dpg(prompts=2, hidden=5, unlearn_steps=1, unlearn_lr=1e-3, shots_per_class=4),
                                  backbone), arrays, batch, forget, seed=7)
    step = np.concatenate([np.abs(b - a).ravel() for a, b in zip(arrays, adam, strict=True)])
    assert np.median(step[step > 0]) == pytest.approx(1e-3, rel=0.05)  # AdamW: ~lr per weight, whatever the gradient


def test_unlearn_optimizer_is_validated():
    from fedtext.common.config import ConfigError

    with pytest.raises(ConfigError, match="unlearn-optimizer"):
        dpg(unlearn_optimizer="adam")


# ------------------------------------------------------------ P-tuning v2
def test_deep_prompts_are_the_keys_and_values_every_layer_attends_to(backbone):
    cfg = make_config("fedptuning-v2", prompt_length=3, **SMALL)
    model = DeepPromptModel(cfg, backbone)
    keys, values = (torch.as_tensor(a) for a in model.initial_arrays())
    assert tuple(keys.shape) == (6, 3, 384) and model.trainable_parameters() == 2 * 6 * 3 * 384
    keys = keys + 0.5  # something the encoder could never compute itself
    seen: list[torch.Tensor] = []
    probes = [m.register_forward_hook(lambda _m, _i, out: seen.append(out.detach())) for m, _ in
              attention_projections(backbone)]
    batch = backbone.encode(["a fine movie", "bad"], [0, 1])
    try:
        with deep_prompts(backbone, keys, values), torch.no_grad():
            backbone.forward(torch.zeros(3, 384), batch, pool_prompt=False)
    finally:
        for p in probes:
            p.remove()
    # our probe hooks ran before the prefix hooks were added; the attention received the hooked output
    with deep_prompts(backbone, keys, values):
        key_mod = attention_projections(backbone)[2][0]
        out = key_mod(torch.randn(2, 7, 384))
    torch.testing.assert_close(out[:, 1:4], keys[2].expand(2, 3, 384))
    assert len(seen) == 6
    # hooks are gone after the block: the shared frozen backbone is itself again
    assert all(not m._forward_hooks for pair in attention_projections(backbone) for m in pair)


def test_prefix_changes_the_text_states_and_is_left_out_of_pooling(backbone):
    cfg = make_config("fedptuning-v2", prompt_length=3, **SMALL)
    model = DeepPromptModel(cfg, backbone)
    k, v = (torch.as_tensor(a) for a in model.initial_arrays())
    batch = backbone.encode(["a fine movie", "bad"], [0, 1])
    with torch.no_grad():
        base = model.logits(k, v, batch)
        moved = model.logits(k, v + 1.0, batch)
        pooled_with = backbone.forward(torch.zeros(3, 384), batch, pool_prompt=True)
        pooled_without = backbone.forward(torch.zeros(3, 384), batch, pool_prompt=False)
    assert not torch.allclose(base, moved)  # values reach the text tokens at every layer
    assert not torch.allclose(pooled_with, pooled_without)


def test_fedptuning_v2_training_moves_only_the_prefixes(backbone):
    cfg = make_config("fedptuning-v2", prompt_length=2, local_steps=2, batch_size=4, **SMALL)
    client = client_class("fedptuning-v2")(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone=backbone)
    before = [p.detach().clone() for _, p in backbone.named_parameters()]
    init = client.model.initial_arrays()
    out, _, loss = client.train(init, {"server_round": 1})
    assert np.isfinite(loss) and all(not np.array_equal(a, b) for a, b in zip(init, out, strict=True))
    assert all(torch.equal(p, b) for (_, p), b in zip(backbone.named_parameters(), before, strict=True))


def test_unlearning_table_compares_the_rounds_around_the_unlearning_round(tmp_path):
    import json

    from simulations.papers.feddpg.unlearning import unlearning_rows

    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    cfg = {"method": "feddpg", "seed": 0, "feddpg.unlearn-round": 3, "feddpg.unlearn-client": 1}
    (run / "config.json").write_text(json.dumps({"run_id": "r1", "config": cfg}))
    rounds = [
        {"round": 2, "global_accuracy": 0.80, "client_accuracy": {"0": 0.90, "1": 0.85, "2": 0.70}},
        {"round": 3, "global_accuracy": 0.79, "client_accuracy": {"0": 0.89, "1": 0.60, "2": 0.72},
         "method_metrics": {"forget_accuracy_before": 0.9, "forget_accuracy_after": 0.5, "forget_examples": 10,
                            "retained_accuracy_before": 0.8, "retained_accuracy_after": 0.8}},
    ]
    (run / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    (row,) = unlearning_rows(tmp_path / "runs")
    assert row["forget acc before"] == pytest.approx(90) and row["forget acc after"] == pytest.approx(50)
    assert row["global acc after"] == pytest.approx(79) and row["own test acc after"] == pytest.approx(60)
    assert row["other clients"] == 2 and row["worst other change"] == pytest.approx(-1)  # client 0: 90 -> 89
    assert row["meets criteria"]  # forget -40, global -1, worst other -1
    assert row["steps taken"] == 16  # not recorded: every step of the default unlearn-steps
    rounds[1]["client_accuracy"]["2"] = 0.67  # client 2 loses 3 points
    rounds[1]["method_metrics"]["unlearn_steps_taken"] = 5
    (run / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    (row,) = unlearning_rows(tmp_path / "runs")
    assert not row["meets criteria"] and row["steps taken"] == 5
    rounds[0]["client_accuracy"]["2"], rounds[1]["client_accuracy"]["2"] = 0.89, 0.87  # exactly 2 points
    (run / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    (row,) = unlearning_rows(tmp_path / "runs")
    assert 100 * (0.87 - 0.89) < -2 and row["worst other change"] == pytest.approx(-2)  # float arithmetic
    assert row["meets criteria"]  # losing 2 of 100 texts is "no more than 2 points"


# ------------------------------------------- the math, on hand-checkable values
def test_every_layers_keys_and_values_at_positions_1_to_T_are_that_layers_prefix(backbone: Backbone) -> None:
    """P-tuning v2: at *every* layer l, both the key and the value projection's outputs at
    positions 1..T are the prefixes K_l and V_l; [CLS] (position 0) and the text
    (positions T+1..) keep the projections of their hidden states."""
    cfg = make_config("fedptuning-v2", prompt_length=3, **SMALL)
    model = DeepPromptModel(cfg, backbone)
    layers, t, d = model.layers, 3, backbone.dim
    assert layers == 6
    # hand values: K_l = l + 1 and V_l = -(l + 1) in every entry (no projection outputs these)
    keys = torch.stack([torch.full((t, d), float(l + 1)) for l in range(layers)])
    values = -keys
    batch = backbone.encode(["a fine movie", "the market fell sharply today", "bad"], [0, 1, 0])  # 3 rows
    seen: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}

    def probe(layer: int, kind: str) -> Callable[[torch.nn.Module, tuple, torch.Tensor], None]:
        def hook(_mod: torch.nn.Module, inp: tuple, out: torch.Tensor) -> None:
            if out.shape[0] == len(batch):  # the batch's forward, not a label description's
                seen[(layer, kind)] = (inp[0].detach(), out.detach())
        return hook

    with deep_prompts(backbone, keys, values), torch.no_grad():
        # registered after the prefix hooks, so they see the outputs the attention receives
        probes = [m.register_forward_hook(probe(l, kind)) for l, pair in enumerate(attention_projections(backbone))
                  for kind, m in zip(("key", "value"), pair, strict=True)]
        try:
            model.logits(keys, values, batch)
        finally:
            for p in probes:
                p.remove()
        projections = attention_projections(backbone)
        assert sorted(seen) == sorted((l, k) for l in range(layers) for k in ("key", "value"))
        for (layer, kind), (inp, out) in seen.items():
            prefix = (keys if kind == "key" else values)[layer]  # = ±(layer + 1) everywhere
            torch.testing.assert_close(out[:, 1:1 + t], prefix.expand(len(batch), t, d), rtol=0, atol=0)
            mod = projections[layer][0 if kind == "key" else 1]
            plain = torch.nn.functional.linear(inp, mod.weight, mod.bias)  # W h + b, no hook
            torch.testing.assert_close(out[:, :1], plain[:, :1])
            torch.testing.assert_close(out[:, 1 + t:], plain[:, 1 + t:])


def test_generator_is_a_two_layer_relu_mlp_on_hand_values() -> None:
    """G of eq. (2): W2·ReLU(W1·ē + b1) + b2, here with D = 2, h = 2, |P| = 1."""
    g = make_generator(2, 2, 1)
    with torch.no_grad():
        g[0].weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
        g[0].bias.zero_()
        g[2].weight.copy_(torch.tensor([[1.0, 1.0], [2.0, 3.0]]))
        g[2].bias.fill_(0.5)
        # ē = [1, 2]: W1 ē = [1, -2] -> ReLU [1, 0] -> W2 [1, 0] + 0.5 = [1.5, 2.5] (no ReLU: [-0.5, -3.5])
        out = g(torch.tensor([[1.0, 2.0]]))
    assert out.tolist() == [[1.5, 2.5]]


def test_mean_embedding_on_hand_values_counts_only_attended_tokens() -> None:
    """ē = (1/n) Σ_i e_i over the n attended tokens of each row, padding excluded."""
    table = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0], [10.0, 10.0]])  # ids 0..3, id 0 = padding
    stub = SimpleNamespace(token_embeddings=torch.nn.Embedding.from_pretrained(table))
    batch = EncodedBatch(torch.tensor([[1, 2, 0], [3, 0, 0], [1, 3, 2]]),
                         torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]), torch.zeros(3, dtype=torch.long))
    # row 0: ([1, 2] + [3, 4]) / 2 = [2, 3]; row 1: [10, 10] / 1; row 2: ([1,2] + [10,10] + [3,4]) / 3 = [14/3, 16/3]
    # (over the padded width 3 row 0 would be [4/3, 2])
    got = mean_embedding(stub, batch)
    torch.testing.assert_close(got, torch.tensor([[2.0, 3.0], [10.0, 10.0], [14 / 3, 16 / 3]]))


def test_padded_mean_embedding_counts_the_padding_up_to_N_on_hand_values() -> None:
    """``feddpg.mean-embedding = padded`` (the authors' code: every text padded to 128 positions,
    ``inputs_embeds.mean(dim=1)``): ē = (Σ_i e_i + (N - n) e([PAD])) / N, whatever the batch
    width; a text of more than N tokens counts its n tokens (N = 4 here)."""
    table = torch.tensor([[0.5, -1.0], [1.0, 2.0], [3.0, 4.0], [10.0, 10.0]])  # id 0 = [PAD], a trained vector
    stub = SimpleNamespace(token_embeddings=torch.nn.Embedding.from_pretrained(table), pad_id=0)
    batch = EncodedBatch(torch.tensor([[1, 2, 0, 0, 0], [3, 0, 0, 0, 0], [1, 3, 2, 1, 3]]),
                         torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]),
                         torch.zeros(3, dtype=torch.long))
    got = mean_embedding(stub, batch, pad_to=4)
    # row 0: ([1, 2] + [3, 4] + 2 [0.5, -1]) / 4 = [1.25, 1]; row 1: ([10, 10] + 3 [0.5, -1]) / 4 = [2.875, 1.75];
    # row 2: 5 tokens > N: ([1,2] + [10,10] + [3,4] + [1,2] + [10,10]) / 5 = [5, 5.6]
    torch.testing.assert_close(got, torch.tensor([[1.25, 1.0], [2.875, 1.75], [5.0, 5.6]]))
    # the batch width does not matter: row 1 alone, unpadded
    alone = EncodedBatch(torch.tensor([[3]]), torch.tensor([[1]]), torch.zeros(1, dtype=torch.long))
    torch.testing.assert_close(mean_embedding(stub, alone, pad_to=4), got[1:2])


def test_mean_embedding_option_picks_G_s_input_and_is_validated(backbone):
    from fedtext.common.config import ConfigError
    from fedtext.methods.feddpg.config import PADDED_LENGTH

    assert PADDED_LENGTH == 128  # data/glue.py: padding='max_length', max_length=128
    batch = backbone.encode(["a fine movie", "the market fell sharply today"], [0, 1])
    got = {}
    for mode, pad_to in (("tokens", 0), ("padded", 128)):
        model = FedDPGModel(dpg(prompts=2, hidden=5, mean_embedding=mode), backbone)
        gen = model.load(model.initial_arrays())
        with torch.no_grad():
            want = gen(mean_embedding(backbone, batch, pad_to)).reshape(2, 2, 384)
            got[mode] = model.prompts(batch)
        torch.testing.assert_close(got[mode], want)
    assert not torch.allclose(got["tokens"], got["padded"], atol=1e-4)  # [PAD] is a trained vector in MiniLM
    assert dpg().method_config.mean_embedding == "tokens"  # eq. (2)'s 1/n Σ by default
    with pytest.raises(ConfigError, match="mean-embedding"):
        dpg(mean_embedding="batch")


def _encoder_calls(backbone, batch, run) -> list[dict]:
    """The keyword arguments of every encoder call on ``batch``'s rows that ``run()`` makes
    (under no_grad): what the encoder was fed (inputs_embeds, attention_mask)."""
    captured: list[dict] = []

    def grab(_mod: torch.nn.Module, _args: tuple, kwargs: dict) -> None:
        if kwargs.get("inputs_embeds") is not None and len(kwargs["inputs_embeds"]) == len(batch):
            captured.append(kwargs)

    hook = backbone.encoder.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            run()
    finally:
        hook.remove()
    return captured


def test_prompt_is_b2_when_W2_is_zero_and_sits_right_after_cls(backbone: Backbone) -> None:
    """With W2 = 0, G(ē) = b2 for every input, reshaped row-major to [|P|, D] (eq. 2), and
    z = [CLS] P x_1..x_n (eq. 3, P after [CLS]): the encoder's input positions 1..|P| are P."""
    model = FedDPGModel(dpg(prompts=2, hidden=3), backbone)
    w1, b1, w2, _ = model.initial_arrays()
    # hand values: b2[j] = j / 1000, so P[p, d] = (384·p + d) / 1000, e.g. P[1, 0] = 0.384, P[0, 383] = 0.383
    b2 = np.arange(2 * 384, dtype=np.float32) / 1000
    model.load([w1, b1, np.zeros_like(w2), b2])
    batch = backbone.encode(["a fine movie", "the market fell sharply today", "ok"], [0, 1, 0])
    expected = torch.as_tensor(b2).reshape(2, 384)
    assert float(expected[1, 0]) == pytest.approx(0.384) and float(expected[0, 383]) == pytest.approx(0.383)
    with torch.no_grad():
        prompts = model.prompts(batch)
    captured = _encoder_calls(backbone, batch, lambda: model.logits(batch))
    for i in range(len(batch)):  # the same prompt whatever the text
        torch.testing.assert_close(prompts[i], expected, rtol=0, atol=0)
    (kw,) = captured
    x, att = kw["inputs_embeds"], kw["attention_mask"]
    with torch.no_grad():
        tok = backbone.embeddings(batch.input_ids)
    assert tuple(x.shape) == (3, 1 + 2 + batch.input_ids.shape[1] - 1, 384)
    torch.testing.assert_close(x[:, 0], tok[:, 0])  # [CLS]
    torch.testing.assert_close(x[:, 1:3], expected.expand(3, 2, 384))  # P at positions 1..|P|
    torch.testing.assert_close(x[:, 3:], tok[:, 1:])  # then the text and [SEP]
    assert (att[:, :3] == 1).all()  # [CLS] and the prompt are attended
    torch.testing.assert_close(att[:, 3:], batch.attention_mask[:, 1:])  # the text's padding stays masked


def test_server_mean_of_G_is_uniform_over_three_clients_eq_1() -> None:
    """Eq. (1): (1/C) Σ_c G_c, whatever each client's example count."""
    strat = FedDPG(dpg(prompts=1, hidden=2), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    specs = strat.model.global_specs()
    ups = [[np.full(s.shape, v * (i + 1), np.float32) for i, s in enumerate(specs)] for v in (1.0, 2.0, 6.0)]
    params, _ = strat.aggregate_fit(1, [fit_res(a, n, pid) for pid, (a, n) in enumerate(zip(ups, (1, 1, 10)))], [])
    # tensor i: (1 + 2 + 6)(i + 1) / 3 = 3(i + 1); example-weighted would be (1 + 2 + 60)(i + 1) / 12 = 5.25(i + 1)
    for i, x in enumerate(comm.decode(params)):
        np.testing.assert_allclose(x, 3.0 * (i + 1), rtol=1e-6)


def test_unlearning_loss_on_hand_values_with_unequal_sets() -> None:
    """Eq. (5) with three retained and two relabelled examples (2 classes), so that a sum and a
    mean differ in both terms, and each term's sign and λ are visible."""
    l3 = float(np.log(3.0))
    l7 = float(np.log(7.0))
    # retained: CE ln 2 (p = 1/2), ln 4 (p = 1/4), ln 8 (p = 1/8): mean 2 ln 2, sum 6 ln 2
    keep = torch.tensor([[0.0, 0.0], [l3, 0.0], [l7, 0.0]])
    keep_labels = torch.tensor([0, 1, 1])
    # relabelled: CE ln 4 (p = 1/4), ln 8 (p = 1/8): mean 2.5 ln 2, sum 5 ln 2
    forget = torch.tensor([[l3, 0.0], [0.0, l7]])
    relabels = torch.tensor([1, 0])
    ln2 = float(np.log(2.0))
    # sets, λ = 0.5: 2 ln 2 + 0.5 · 2.5 ln 2 = 3.25 ln 2
    got = unlearning_loss(keep, keep_labels, forget, relabels, lam=0.5, weighting="sets")
    assert float(got) == pytest.approx(3.25 * ln2, rel=1e-6)
    # examples, λ = 0.5: (6 ln 2 + 0.5 · 5 ln 2) / (3 + 0.5 · 2) = 8.5 / 4 ln 2 = 2.125 ln 2
    got = unlearning_loss(keep, keep_labels, forget, relabels, lam=0.5, weighting="examples")
    assert float(got) == pytest.approx(2.125 * ln2, rel=1e-6)
    # λ = 0: the retained term alone, 2 ln 2 in both weightings
    for weighting in ("sets", "examples"):
        assert float(unlearning_loss(keep, keep_labels, forget, relabels, 0.0, weighting)) == pytest.approx(
            2 * ln2, rel=1e-6)
    # λ = 2, sets: 2 ln 2 + 2 · 2.5 ln 2 = 7 ln 2 (a subtracted term would give -3 ln 2)
    assert float(unlearning_loss(keep, keep_labels, forget, relabels, 2.0, "sets")) == pytest.approx(7 * ln2, rel=1e-6)


def test_initial_prefixes_are_each_layers_key_and_value_of_the_p0_tokens(backbone: Backbone) -> None:
    """P-tuning v2's start (module doc): K_l and V_l ``[T, D]`` are layer l's key and value
    projections ``W_k^l h^l + b_k^l`` / ``W_v^l h^l + b_v^l`` at positions 1..T of
    ``[CLS] t_1..t_T [SEP]``, where t_1..t_T are the T distinct tokens of the other
    methods' p0 (:meth:`Backbone.initial_prompt`, seeded by the run seed), and h^l is
    the input of layer l (``hidden_states[l]``). Float32, the same on every call."""
    t = 4
    cfg = make_config("fedptuning-v2", prompt_length=t, seed=3, **SMALL)
    model = DeepPromptModel(cfg, backbone)
    keys, values = model.initial_arrays()
    assert keys.dtype == values.dtype == np.float32 and keys.shape == values.shape == (6, t, backbone.dim)
    # the p0 tokens, read back from p0's rows of e(V)
    vocab, p0 = backbone.vocab_embeddings(), backbone.initial_prompt(t, 3)
    ids = [int(np.flatnonzero((vocab == row).all(1))[0]) for row in p0]
    assert len(set(ids)) == t  # drawn without replacement
    seq = torch.tensor([[backbone.cls_id, *ids, backbone.sep_id]])
    with torch.no_grad():
        out = backbone.encoder(input_ids=seq, attention_mask=torch.ones_like(seq), output_hidden_states=True)
    hidden = out.hidden_states  # hidden[l]: the input of layer l
    for layer, (k_mod, v_mod) in enumerate(attention_projections(backbone)):
        h = hidden[layer][0, 1:-1]  # the T tokens
        np.testing.assert_allclose(keys[layer], torch.nn.functional.linear(h, k_mod.weight, k_mod.bias).numpy(),
                                   rtol=0, atol=1e-5)
        np.testing.assert_allclose(values[layer], torch.nn.functional.linear(h, v_mod.weight, v_mod.bias).numpy(),
                                   rtol=0, atol=1e-5)
    again = model.initial_arrays()
    assert all(np.array_equal(a, b) for a, b in zip((keys, values), again, strict=True))  # seeded, not random


def test_logits_put_T_positions_after_cls_and_mean_pool_only_cls_and_text(backbone: Backbone) -> None:
    """Fed P-tuning v2's logits (module doc): the encoder sees ``[CLS] x_1..x_T text`` with
    T placeholder positions (B x (T + L) inputs), and the similarity head pools the mean
    of the last hidden states over [CLS] and the attended text only (``pool_prompt=False``):
    logits = 20 · cos(mean_{i ∉ 1..T} h_i, label vectors)."""
    from fedtext.backbone.heads import SIMILARITY_SCALE

    t = 3
    cfg = make_config("fedptuning-v2", prompt_length=t, **SMALL)
    model = DeepPromptModel(cfg, backbone)
    assert backbone.head == "similarity"
    keys, values = (torch.as_tensor(a) for a in model.initial_arrays())
    batch = backbone.encode(["a fine movie", "the market fell sharply today"], [0, 1])  # padded: unequal lengths
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    u = backbone.label_vectors  # u_c first (cached): their own encoder pass is not the batch's

    def probe(_mod: torch.nn.Module, _args: tuple, kwargs: dict, out) -> None:
        if kwargs.get("inputs_embeds") is not None and len(kwargs["inputs_embeds"]) == len(batch):
            seen.append((kwargs["inputs_embeds"], kwargs["attention_mask"], out.last_hidden_state))

    handle = backbone.encoder.register_forward_hook(probe, with_kwargs=True)
    try:
        with torch.no_grad():
            logits = model.logits(keys, values, batch)
    finally:
        handle.remove()
    (embeds, att, hidden), = seen
    b, l = batch.input_ids.shape
    assert embeds.shape[:2] == att.shape == (b, t + l)
    # [CLS] x_1..x_T text: the T placeholders are attended, the text keeps its padding mask
    assert att[:, :1 + t].eq(1).all() and torch.equal(att[:, 1 + t:], batch.attention_mask[:, 1:])
    pool = att.clone().float()
    pool[:, 1:1 + t] = 0  # the placeholders are keys and values, not outputs
    mean = (hidden * pool[..., None]).sum(1) / pool.sum(1, keepdim=True)
    expected = SIMILARITY_SCALE * torch.nn.functional.normalize(mean, dim=-1) @ u.T
    torch.testing.assert_close(logits, expected)


def test_relabel_adds_the_drawn_shift_modulo_C_on_hand_values() -> None:
    """§3.3's relabelling, ŷ = (y + s) mod C with s drawn uniformly from 1..C-1 by the
    generator, on C = 4 classes (with C = 2 every s is 1 and y + s ≡ y - s; with C ≥ 3
    the direction decides which wrong class a seeded client picks)."""
    labels = np.array([0, 1, 2, 3, 0, 3])
    shifts = np.random.default_rng(0).integers(1, 4, size=6)  # the same draws relabel makes
    assert shifts.tolist() == [3, 2, 2, 1, 1, 1]
    # (0+3, 1+2, 2+2, 3+1, 0+1, 3+1) mod 4; y - s would give [1, 3, 0, 2, 3, 2]
    got = relabel(labels, 4, np.random.default_rng(0))
    assert got.tolist() == [3, 3, 0, 0, 1, 0]


def test_unlearning_loss_defaults_to_the_sets_weighting() -> None:
    """Eq. (5) without ``weighting``: mean_r CE + λ·mean_u CE (``sets``), not the
    per-example (Σ_r CE + λ·Σ_u CE) / (n_r + λ·n_u)."""
    l3, l7, ln2 = float(np.log(3.0)), float(np.log(7.0)), float(np.log(2.0))
    keep = torch.tensor([[0.0, 0.0], [l3, 0.0], [l7, 0.0]])  # CE ln 2, ln 4, ln 8 against [0, 1, 1]
    forget = torch.tensor([[l3, 0.0], [0.0, l7]])  # CE ln 4, ln 8 against [1, 0]
    got = unlearning_loss(keep, torch.tensor([0, 1, 1]), forget, torch.tensor([1, 0]), 0.5)
    # sets: 2 ln 2 + 0.5 · 2.5 ln 2 = 3.25 ln 2 (examples would be 2.125 ln 2)
    assert float(got) == pytest.approx(3.25 * ln2, rel=1e-6)


@pytest.mark.parametrize("lam", [0.5, 0.25, 1.0])
def test_examples_weighting_with_nothing_retained_is_the_relabelled_mean(lam: float) -> None:
    """``examples`` weighting of eq. (5) with no retained set: λ·Σ_u CE / (λ·n_u) = mean_u CE
    for every λ > 0, also when the total weight λ·n_u is below 1 (here n_u = 1: weights
    0.5, 0.25 and 1). One relabelled example with CE ln 4 (p = 1/4 on class 1)."""
    forget = torch.tensor([[float(np.log(3.0)), 0.0]])
    got = unlearning_loss(None, torch.zeros(0, dtype=torch.long), forget, torch.tensor([1]), lam, "examples")
    assert float(got) == pytest.approx(np.log(4.0), rel=1e-6)


def test_examples_weighting_with_zero_total_weight_is_zero_not_nan() -> None:
    """``examples`` weighting with λ = 0 and nothing retained (``forget-fraction`` = 1,
    ``unlearn-lambda`` = 0 are valid): every weight is 0, so the loss is the empty sum 0
    (and its gradient 0), not 0/0."""
    forget = torch.tensor([[float(np.log(3.0)), 0.0], [0.0, 1.0]], requires_grad=True)
    got = unlearning_loss(None, torch.zeros(0, dtype=torch.long), forget, torch.tensor([1, 0]), 0.0, "examples")
    assert float(got.detach()) == 0.0
    (grad,) = torch.autograd.grad(got, [forget])
    assert torch.equal(grad, torch.zeros_like(forget))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_mean_embedding_keeps_the_embedding_dtype(dtype: torch.dtype) -> None:
    """ē = (1/n) Σ_i e_i (eq. 2's input) is computed and returned in the embeddings' own
    precision (the mask is cast to it), e.g. for a half-precision table."""
    table = torch.tensor([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0], [10.0, 10.0]], dtype=dtype)
    stub = SimpleNamespace(token_embeddings=torch.nn.Embedding.from_pretrained(table))
    batch = EncodedBatch(torch.tensor([[1, 2, 0], [3, 0, 0]]), torch.tensor([[1, 1, 0], [1, 0, 0]]),
                         torch.zeros(2, dtype=torch.long))
    got = mean_embedding(stub, batch)
    # row 0: ([1, 2] + [3, 4]) / 2 = [2, 3]; row 1: [10, 10] / 1 (exact in every float type)
    assert got.dtype == dtype
    assert got.tolist() == [[2.0, 3.0], [10.0, 10.0]]


def test_prompt_input_feeds_cls_P_sep_to_the_encoder(backbone: Backbone) -> None:
    """§4.2.2's ``prompt`` input: the encoder sees z = [CLS] P [SEP] (eq. 3 without x), P =
    reshape(G(ē)) (eq. 2), so the text reaches the PLM only through ē. With W2 = 0, P = b2
    reshaped to [|P|, D] for every text; with G's initial W2, two texts get two prompts and
    hence two logit rows."""
    model = FedDPGModel(dpg(prompts=2, hidden=3, input="prompt"), backbone)
    w1, b1, w2, _ = model.initial_arrays()
    b2 = np.arange(2 * 384, dtype=np.float32) / 1000  # P[p, d] = (384·p + d) / 1000
    model.load([w1, b1, np.zeros_like(w2), b2])
    batch = backbone.encode(["a fine movie", "the market fell sharply today", "ok"], [0, 1, 0])
    (kw,) = _encoder_calls(backbone, batch, lambda: model.logits(batch))
    x, att = kw["inputs_embeds"], kw["attention_mask"]
    with torch.no_grad():
        cls_sep = backbone.embeddings(torch.tensor([backbone.cls_id, backbone.sep_id]))
    assert tuple(x.shape) == (3, 1 + 2 + 1, 384)  # [CLS] P_1 P_2 [SEP], whatever the text length
    torch.testing.assert_close(x[:, 1:3], torch.as_tensor(b2).reshape(2, 384).expand(3, 2, 384), rtol=0, atol=0)
    torch.testing.assert_close(x[:, 0], cls_sep[0].expand(3, 384))
    torch.testing.assert_close(x[:, 3], cls_sep[1].expand(3, 384))
    assert (att == 1).all()
    model.load([w1, b1, w2, b2])  # G's own W2: P depends on ē, so the texts' logits differ
    with torch.no_grad():
        logits = model.logits(batch)
    assert not torch.allclose(logits[0], logits[1], atol=1e-5)


def test_the_config_accepts_exactly_the_unlearning_optimizers_there_are() -> None:
    """``feddpg.unlearn-optimizer`` is validated against the config's names (the config
    imports no torch); each must have its torch class and none may be unreachable."""
    from fedtext.methods.feddpg.config import UNLEARN_OPTIMIZER_NAMES
    from fedtext.methods.feddpg.unlearning import UNLEARN_OPTIMIZERS

    assert tuple(UNLEARN_OPTIMIZERS) == UNLEARN_OPTIMIZER_NAMES
