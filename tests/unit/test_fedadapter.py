"""FedAdapter (Houlsby bottleneck adapters, FedAvg) on the offline MiniLM: round 0 is the frozen
model, an adapter computes ``h + W_up sigma(W_down h + b_down) + b_up`` and sits before the
residual add and LayerNorm, only adapters, LayerNorms (and the head) travel with the byte count
of the arithmetic, the frozen backbone and other clients never see a client's weights, bad keys
are one line, and the server's mean is the weighted mean of every array."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.common import Code, FitRes, Status

from clients.fedadapter import FedAdapterClient
from fedtext.common import comm
from fedtext.backbone import get_backbone
from fedtext.common.config import ConfigError, RunConfig
from fedtext.methods.fedadapter.model import INIT_STD, AdapterModel
from fedtext.common.registry import METHODS, make_config
from fedtext.common.tasks import TASKS
from strategies.fedadapter import FedAdapter

from .injected_checks import tiny_mlm_backbone, train_beside_another_client

SMALL = dict(max_length=64, shots_per_class=4, client_test_size=4, eval_size=16)
D, LAYERS = 384, 6  # all-MiniLM-L6-v2
HEADER = comm.NPY_HEADER_BYTES


def adapter(**fields) -> RunConfig:
    return make_config("fedadapter", **{**SMALL, **fields})


def nbytes(specs) -> int:
    return sum(4 * int(np.prod(s.shape)) + HEADER for s in specs)


def test_round_zero_is_the_frozen_model_exactly(backbone, demo):
    """W_up = 0, b_up = 0: each adapter returns h exactly, so the logits are the frozen
    backbone's bit for bit; W_down is seeded N(0, 0.01^2) truncated at 2 std, not zero."""
    model = AdapterModel(adapter(head="similarity", bottleneck=8), backbone)
    batch = backbone.encode(list(demo.test["text"][:5]), [0] * 5)
    arrays = model.initial_arrays()
    with model.load(arrays).fixed_weights() as net:
        assert torch.equal(net.score(None, batch), backbone.score(None, batch))
    named = dict(zip([s.name for s in model.global_specs()], arrays, strict=True))
    down = named["encoder.layer.0.attention.output.adapter.down.weight"]
    assert down.shape == (8, D) and 0 < np.abs(down).max() <= 2 * INIT_STD and 0.5 * INIT_STD < down.std() < INIT_STD
    assert not named["encoder.layer.0.attention.output.adapter.up.weight"].any()
    again = AdapterModel(adapter(head="similarity", bottleneck=8), backbone).initial_arrays()
    other = AdapterModel(adapter(head="similarity", bottleneck=8, seed=1), backbone).initial_arrays()
    assert all(np.array_equal(x, y) for x, y in zip(arrays, again, strict=True))  # seeded: the same everywhere
    assert not np.array_equal(arrays[2], other[2])


def test_an_adapter_and_its_block_compute_houlsbys_formula_by_hand(backbone):
    """Arrays with W_up != 0 loaded: layer 1's feed-forward output block equals
    LayerNorm(h + W_up gelu(W_down h + b_down) + b_up + residual) with h = dense(x) (dropout
    off), computed in numpy; the adapter alone is h + W_up sigma(W_down h + b_down) + b_up
    (relu here: the activation key is honoured)."""
    model = AdapterModel(adapter(head="similarity", bottleneck=5), backbone)
    rng = np.random.default_rng(11)
    specs = model.global_specs()
    arrays = [rng.normal(0, 0.2, size=s.shape).astype(np.float32) for s in specs]
    named = dict(zip([s.name for s in specs], arrays, strict=True))
    net = model.load(arrays)
    block = net.encoder.encoder.layer[1].output
    frozen = backbone.encoder.encoder.layer[1].output
    p = "encoder.layer.1.output."
    wd, bd, wu, bu = (named[p + f"adapter.{n}"] for n in ("down.weight", "down.bias", "up.weight", "up.bias"))
    gamma, beta = named[p + "LayerNorm.weight"], named[p + "LayerNorm.bias"]  # trained LayerNorm: from the arrays
    x = rng.normal(size=(3, frozen.dense.in_features)).astype(np.float32)
    residual = rng.normal(size=(3, D)).astype(np.float32)
    h = x @ frozen.dense.weight.detach().numpy().T + frozen.dense.bias.detach().numpy()
    gelu = torch.nn.functional.gelu(torch.as_tensor(h @ wd.T + bd)).numpy()
    z = h + gelu @ wu.T + bu + residual
    z = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + frozen.LayerNorm.eps)
    expected = z * gamma + beta
    block.eval()
    with torch.no_grad():
        got = block(torch.as_tensor(x), torch.as_tensor(residual)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    relu = AdapterModel(adapter(head="similarity", bottleneck=5, activation="relu"), backbone)
    relu.load(arrays)
    alone = relu.network.encoder.encoder.layer[1].output.adapter
    with torch.no_grad():
        got = alone(torch.as_tensor(h.astype(np.float32))).numpy()
    np.testing.assert_allclose(got, h + np.maximum(h @ wd.T + bd, 0) @ wu.T + bu, rtol=1e-4, atol=1e-4)


def test_only_adapters_layernorms_and_the_head_travel_with_the_arithmetics_bytes(backbone):
    """Per layer 2 adapters of 2md + m + d floats in 4 tensors, and 2 LayerNorms of 2d floats
    in 2 tensors each: MiniLM, m = 64: 12 x (4 x 49,600 + 512) + 24 x (1,536 + 128) =
    2,426,880 B; without the LayerNorms 2,386,944 B; the 2-class head adds 3,336 B."""
    specs = AdapterModel(adapter(head="similarity"), backbone).upload_specs()
    assert len(specs) == LAYERS * 2 * (4 + 2)
    assert all(".adapter." in s.name or ".output.LayerNorm." in s.name for s in specs)
    assert nbytes(specs) == 2 * LAYERS * (4 * (2 * 64 * D + 64 + D) + 4 * HEADER) + 4 * LAYERS * (4 * D + HEADER)
    assert nbytes(specs) == 2_426_880
    bare = AdapterModel(adapter(head="similarity", train_layernorm=False), backbone)
    assert all(".adapter." in s.name for s in bare.upload_specs()) and nbytes(bare.upload_specs()) == 2_386_944
    assert bare.trainable_parameters() == 12 * 49_600
    headed = AdapterModel(adapter(head="linear"), get_backbone("all-MiniLM-L6-v2", "linear", "demo", 64))
    assert [s.name for s in headed.upload_specs()[-2:]] == ["head.weight", "head.bias"]
    assert nbytes(headed.upload_specs()) == 2_426_880 + 3_336


def test_training_leaves_the_frozen_backbone_and_other_clients_alone(backbone):
    """A client trains adapters and LayerNorms: the frozen backbone keeps every weight (its
    LayerNorms too: the copy's are its own) and its plain output blocks; a second client from
    the same download still holds it; the dense weights are shared, not copied."""
    cfg = adapter(head="similarity", bottleneck=4, local_steps=2, batch_size=4, lr=1e-2)
    one, moved = train_beside_another_client(FedAdapterClient, cfg, backbone)
    assert any(".adapter.up." in nm for nm in moved) and any(".LayerNorm." in nm for nm in moved)
    assert not hasattr(backbone.encoder.encoder.layer[0].output, "adapter")
    assert one.model.network.encoder.encoder.layer[0].output.dense.weight is \
        backbone.encoder.encoder.layer[0].output.dense.weight


@pytest.mark.parametrize("key, value, message", [
    ("fedadapter.bottleneck", 0, "fedadapter.bottleneck must be >= 1, got 0"),
    ("fedadapter.activation", "swish", "unknown fedadapter.activation 'swish'; choose one of: gelu, relu, tanh, silu"),
    ("fedadapter.lr", 0, "fedadapter.lr must be > 0, got 0.0"),
])
def test_bad_keys_are_one_line(key, value, message):
    with pytest.raises(ConfigError) as err:
        RunConfig.from_run_config({"method": "fedadapter", key: value}, METHODS)
    assert str(err.value) == message


def test_the_server_takes_the_weighted_mean_of_every_array(backbone):
    strat = FedAdapter(adapter(head="similarity", bottleneck=2), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    rng = np.random.default_rng(5)
    specs = strat.model.upload_specs()
    u1, u2 = ([rng.normal(size=s.shape).astype(np.float32) for s in specs] for _ in range(2))
    results = [(SimpleNamespace(cid=str(pid)), FitRes(Status(Code.OK, ""), comm.encode(u), n,
                                                      {"partition_id": pid, "train_loss": 0.5}))
               for pid, u, n in ((0, u1, 3), (1, u2, 1))]
    params, _ = strat.aggregate_fit(1, results, [])
    for x1, x2, mean in zip(u1, u2, comm.decode(params), strict=True):
        np.testing.assert_allclose(mean, (3 * x1 + 1 * x2) / 4, rtol=1e-6, atol=1e-7)


def test_adapters_in_an_mlm_checkpoints_base_model(tmp_path):
    """head=mlm: the adapters and LayerNorms are the base model's (named ``bert.encoder...``),
    the MLM head takes none, and round 0 gives the frozen MLM logits exactly. A tiny random
    BERT-MLM saved locally (the offline MiniLM has no MLM head), as tests/unit/test_backbone.py."""
    bb = tiny_mlm_backbone(tmp_path)
    model = AdapterModel(make_config("fedadapter", model=str(tmp_path), head="mlm", task="ag_news", max_length=32,
                                     bottleneck=4), bb)
    specs = model.upload_specs()
    assert len(specs) == 2 * 2 * (4 + 2) and all(s.name.startswith("bert.encoder.layer.") for s in specs)
    assert nbytes(specs) == 2 * 2 * (4 * (2 * 4 * 32 + 4 + 32) + 4 * HEADER) + 4 * 2 * (4 * 32 + HEADER)
    batch = bb.encode(["stocks fell sharply", "the team won the cup again"], [2, 1])
    with model.load(model.initial_arrays()).fixed_weights() as net:
        assert torch.equal(net.score(None, batch), bb.score(None, batch))
