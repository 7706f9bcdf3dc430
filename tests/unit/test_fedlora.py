"""FedLoRA (LoRA through PEFT, FedAvg of each factor; ``freeze-a`` = FFA-LoRA) on the offline
MiniLM: round 0 is the frozen model, a LoRA layer computes ``x W^T + b + (alpha/r) x A^T B^T``,
only the factors (and the head) travel with the byte count of the arithmetic, the frozen
backbone and other clients never see a client's weights, A stays put under ``freeze-a``, bad
keys are one line, and the server's mean is the per-factor weighted mean."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status

from clients.fedlora import FedLoRAClient
from fedtext.common import comm
from fedtext.backbone import get_backbone
from fedtext.common.config import ConfigError, RunConfig
from fedtext.learning.data import client_data
from fedtext.methods.fedlora.model import LoRAModel
from fedtext.common.registry import METHODS, make_config
from fedtext.common.tasks import TASKS
from strategies.fedlora import FedLoRA

from .injected_checks import tiny_mlm_backbone, train_beside_another_client

SMALL = dict(max_length=64, shots_per_class=4, client_test_size=4, eval_size=16)
D, LAYERS = 384, 6  # all-MiniLM-L6-v2
HEADER = comm.NPY_HEADER_BYTES


def lora(alpha: float | None = None, **fields) -> RunConfig:
    """A fedlora config; ``alpha`` is ``fedlora.alpha`` (``make_config``'s ``alpha`` is the
    shared Dirichlet key)."""
    cfg = make_config("fedlora", **{**SMALL, **fields})
    if alpha is None:
        return cfg
    return RunConfig.from_run_config({**cfg.to_run_config(), "fedlora.alpha": alpha}, METHODS)


def nbytes(specs) -> int:
    return sum(4 * int(np.prod(s.shape)) + HEADER for s in specs)


@pytest.fixture(scope="module")
def linear_backbone():
    return get_backbone("all-MiniLM-L6-v2", "linear", "demo", 64)


def texts(demo, n: int = 5):
    return list(demo.test["text"][:n])


def test_round_zero_is_the_frozen_model_exactly(backbone, linear_backbone, demo):
    """B = 0: every wrapped layer adds exactly 0, so logits (similarity) and hidden states
    (linear: its head is the model's own) are the frozen backbone's bit for bit."""
    model = LoRAModel(lora(head="similarity", rank=4, alpha=32.0), backbone)
    batch = backbone.encode(texts(demo), [0] * 5)
    with model.load(model.initial_arrays()).fixed_weights() as net:
        assert torch.equal(net.score(None, batch), backbone.score(None, batch))
    model = LoRAModel(lora(head="linear"), linear_backbone)
    batch = linear_backbone.encode(texts(demo), [0] * 5)
    with model.load(model.initial_arrays()).fixed_weights() as net, torch.no_grad():
        assert torch.equal(net.hidden_states(None, batch)[0], linear_backbone.hidden_states(None, batch)[0])


def test_a_lora_layer_computes_w_x_plus_alpha_over_r_b_a_x_by_hand(backbone):
    """Arrays with B != 0 loaded: layer 2's value projection equals
    x W^T + b + (alpha / r) x A^T B^T, computed in numpy (alpha / r = 4 here: a dropped
    scaling, a transposed factor or a missing base term fails)."""
    cfg = lora(head="similarity", rank=4, alpha=16.0)
    model = LoRAModel(cfg, backbone)
    assert cfg.method_config.alpha == 16.0 and model.scaling() == 4.0
    rng = np.random.default_rng(7)
    arrays = [rng.normal(0, 0.1, size=s.shape).astype(np.float32) for s in model.global_specs()]
    named = dict(zip([s.name for s in model.global_specs()], arrays, strict=True))
    net = model.load(arrays)
    layer = net.encoder.encoder.layer[2].attention.self.value
    a = named["encoder.layer.2.attention.self.value.lora_A.default.weight"]  # [r, d_in]
    b = named["encoder.layer.2.attention.self.value.lora_B.default.weight"]  # [d_out, r]
    frozen = backbone.encoder.encoder.layer[2].attention.self.value
    w, bias = frozen.weight.detach().numpy(), frozen.bias.detach().numpy()
    x = rng.normal(size=(3, D)).astype(np.float32)
    expected = x @ w.T + bias + (16.0 / 4) * (x @ a.T @ b.T)
    with torch.no_grad():
        got = layer(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_only_the_factors_and_the_head_travel_with_the_arithmetics_bytes(backbone, linear_backbone):
    """2 x r x (d_in + d_out) floats per wrapped layer, 2 tensors of 128 B header each:
    MiniLM, r = 8, query + value, 6 layers: 4 x 8 x 768 x 12 + 128 x 24 = 297,984 B; the
    2-class linear head adds 4 x (2 x 384 + 2) + 2 x 128 = 3,336 B."""
    model = LoRAModel(lora(head="similarity"), backbone)
    specs = model.upload_specs()
    assert len(specs) == 2 * LAYERS * 2
    assert all(".lora_A.default." in s.name or ".lora_B.default." in s.name for s in specs)
    assert {s.name.split(".attention.self.")[1].split(".")[0] for s in specs} == {"query", "value"}
    assert all(s.dtype == "float32" for s in specs)
    assert nbytes(specs) == 4 * 8 * (D + D) * LAYERS * 2 + HEADER * 2 * LAYERS * 2 == 297_984
    assert model.trainable_parameters() == 73_728
    headed = LoRAModel(lora(head="linear"), linear_backbone).upload_specs()
    assert [s.name for s in headed[-2:]] == ["head.weight", "head.bias"]
    assert nbytes(headed) == 297_984 + 3_336
    # three targets at r = 2: the arithmetic, not a constant
    three = LoRAModel(lora(head="similarity", rank=2, target_modules="query,key,value"), backbone).upload_specs()
    assert nbytes(three) == 4 * 2 * (D + D) * LAYERS * 3 + HEADER * 2 * LAYERS * 3


def test_training_leaves_the_frozen_backbone_and_other_clients_alone(backbone, demo):
    """A client trains (B moves from 0): the process's frozen backbone keeps its weights and
    its plain linear layers; a second client of the same process, built from the same
    download, still holds the download; the two copies share no LoRA tensor."""
    cfg = lora(head="similarity", rank=2, local_steps=2, batch_size=4, lr=1e-2)
    one, moved = train_beside_another_client(FedLoRAClient, cfg, backbone)
    assert any(".lora_B." in nm for nm in moved)  # training did something
    assert type(backbone.encoder.encoder.layer[0].attention.self.query) is torch.nn.Linear  # no LoRA injected
    # the frozen weights are shared, not copied: LoRA's base layer is the backbone's own weight
    assert one.model.network.encoder.encoder.layer[0].attention.self.query.base_layer.weight is \
        backbone.encoder.encoder.layer[0].attention.self.query.weight


def test_freeze_a_keeps_a_at_its_seeded_value_and_sends_only_b(backbone):
    """FFA-LoRA: A is no global array, is the same on every node with the run seed (and
    another with another seed), and does not move while B trains; only B's bytes travel:
    4 x 8 x 384 x 12 + 128 x 12 = 148,992 B."""
    cfg = lora(head="similarity", rank=8, freeze_a=True, local_steps=2, batch_size=4, lr=1e-2)
    specs = LoRAModel(cfg, backbone).upload_specs()
    assert all(".lora_B." in s.name for s in specs) and len(specs) == LAYERS * 2
    assert nbytes(specs) == 4 * 8 * D * LAYERS * 2 + HEADER * LAYERS * 2 == 148_992

    def a_of(model: LoRAModel) -> dict[str, np.ndarray]:
        return {n: p.detach().numpy().copy() for n, p in model.network.named_parameters() if ".lora_A." in n}

    server = LoRAModel(cfg, backbone)
    client = FedLoRAClient(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone)
    seeded = a_of(server)
    assert len(seeded) == LAYERS * 2
    trained, _, _ = client.train(server.initial_arrays(), {"server_round": 1})
    assert any(np.any(b != 0) for b in trained)  # B trained
    for name, a in a_of(client.model).items():
        np.testing.assert_array_equal(a, seeded[name])
    # U(-1/sqrt(d_in), 1/sqrt(d_in)) and seeded by the run seed
    a0 = next(iter(seeded.values()))
    assert np.abs(a0).max() <= 1 / np.sqrt(D) and np.abs(a0).max() > 0.9 / np.sqrt(D)
    other = a_of(LoRAModel(lora(head="similarity", rank=8, freeze_a=True, seed=1), backbone))
    assert not np.array_equal(next(iter(other.values())), a0)


def test_a_travels_and_trains_without_freeze_a(backbone):
    cfg = lora(head="similarity", rank=2, local_steps=2, batch_size=4, lr=1e-2)
    client = FedLoRAClient(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone)
    start = client.model.initial_arrays()
    trained, _, _ = client.train(start, {"server_round": 1})
    names = [s.name for s in client.model.upload_specs()]
    assert any(".lora_A." in nm and not np.array_equal(x, y) for nm, x, y in zip(names, trained, start, strict=True))


@pytest.mark.parametrize("key, value, message", [
    ("fedlora.rank", 0, "fedlora.rank must be >= 1, got 0"),
    ("fedlora.alpha", 0, "fedlora.alpha must be > 0, got 0.0"),
    ("fedlora.alpha", -8, "fedlora.alpha must be > 0, got -8.0"),
    ("fedlora.dropout", 1.0, "fedlora.dropout must be in [0, 1), got 1.0"),
    ("fedlora.target-modules", "query,,value", "fedlora.target-modules='query,,value' wants comma-separated "
                                               "module names (query,value), got ''"),
    ("fedlora.target-modules", "query,query", "fedlora.target-modules='query,query' names a module twice"),
])
def test_bad_keys_are_one_line(key, value, message):
    with pytest.raises(ConfigError) as err:
        RunConfig.from_run_config({"method": "fedlora", key: value}, METHODS)
    assert str(err.value) == message


def test_an_unknown_target_module_is_one_line_naming_the_encoders(backbone):
    with pytest.raises(ConfigError) as err:
        LoRAModel(lora(head="similarity", target_modules="query,q_proj"), backbone)
    assert str(err.value) == ("fedlora.target-modules names 'q_proj', which is no linear layer of all-MiniLM-L6-v2's "
                              "transformer layers; they have: dense, key, query, value (or a role: query, key, value, "
                              "attention-output, intermediate, output)")


def fit_res(arrays, n, pid):
    return (SimpleNamespace(cid=str(pid)),
            FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5}))


def test_the_server_averages_each_factor_weighted_by_examples(backbone):
    """Two mock uploads (1 and 3 examples): every A and every B is (1 x_1 + 3 x_2) / 4, by
    hand; the new global arrays are those means (not a product of them), and a non-finite
    upload is dropped by the shared validation, as for every method."""
    strat = FedLoRA(lora(head="similarity", rank=2), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    rng = np.random.default_rng(3)
    specs = strat.model.upload_specs()
    u1 = [rng.normal(size=s.shape).astype(np.float32) for s in specs]
    u2 = [rng.normal(size=s.shape).astype(np.float32) for s in specs]
    bad = [x.copy() for x in u2]
    bad[5][0, 0] = np.nan
    params, _ = strat.aggregate_fit(1, [fit_res(u1, 1, 0), fit_res(u2, 3, 1), fit_res(bad, 2, 2)], [])
    new = comm.decode(params)
    assert len(new) == len(specs)
    for x1, x2, mean in zip(u1, u2, new, strict=True):
        np.testing.assert_allclose(mean, (1 * x1 + 3 * x2) / 4, rtol=1e-6, atol=1e-7)
    assert [d["client"] for d in strat.record.dropped] == ["2"] and "non-finite" in strat.record.dropped[0]["reason"]
    # the mean of the factors is not the mean of the products (why freeze-a exists)
    a1, b1, a2, b2 = u1[0], u1[1], u2[0], u2[1]
    assert not np.allclose(new[1] @ new[0], (1 * b1 @ a1 + 3 * b2 @ a2) / 4)


def test_lora_on_an_mlm_checkpoints_base_model(tmp_path):
    """head=mlm: LoRA goes into the MLM model's base model (its MLM head keeps its weights and
    takes none), round 0 gives the frozen MLM logits exactly, and loaded B != 0 changes them.
    A tiny random BERT-MLM saved locally (the offline MiniLM has no MLM head), as
    tests/unit/test_backbone.py does."""
    bb = tiny_mlm_backbone(tmp_path)
    cfg = make_config("fedlora", model=str(tmp_path), head="mlm", task="ag_news", max_length=32, rank=2)
    model = LoRAModel(cfg, bb)
    specs = model.upload_specs()
    assert len(specs) == 2 * 2 * 2 and all(s.name.startswith("bert.encoder.layer.") for s in specs)
    assert nbytes(specs) == 4 * 2 * (32 + 32) * 2 * 2 + HEADER * 8
    batch = bb.encode(["stocks fell sharply", "the team won the cup again"], [2, 1])
    with model.load(model.initial_arrays()).fixed_weights() as net:
        assert torch.equal(net.score(None, batch), bb.score(None, batch))
    rng = np.random.default_rng(0)
    moved = [rng.normal(size=s.shape).astype(np.float32) for s in specs]
    with model.load(moved).fixed_weights() as net:
        changed = (net.hidden_states(None, batch)[0] - bb.hidden_states(None, batch)[0]).abs().max()
    assert changed > 0.1
    assert type(bb.mlm.bert.encoder.layer[0].attention.self.query) is torch.nn.Linear


def test_lora_dropout_is_off_when_the_server_or_an_untrained_client_evaluates(backbone, demo):
    """PEFT's LoRA dropout modules are new torch modules (train mode when made): the model's
    copy puts them in the encoder's eval mode, so two evaluations of the same arrays agree
    (before the fix: two server evaluations with dropout=0.5 differed)."""
    model = LoRAModel(lora(head="similarity", rank=4, dropout=0.5), backbone)
    arrays = [a if "lora_A" in s.name else np.full_like(a, 0.05)
              for s, a in zip(model.global_specs(), model.initial_arrays(), strict=True)]
    drops = [m for n, m in model.network.encoder.named_modules() if n.endswith("lora_dropout.default")]
    assert drops and not any(m.training for m in drops)
    batches = backbone.batches(texts(demo, 16), [0] * 16)
    assert model.evaluate(arrays, batches) == model.evaluate(arrays, batches)
