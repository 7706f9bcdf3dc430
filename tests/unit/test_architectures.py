"""Every method on every encoder family by architecture, never by name
(fedtext/backbone/architectures.py): on a random 2-layer BERT, RoBERTa and MPNet (the
``tiny-*`` shapes) each method trains exactly the weights it claims, counted here from the
configuration's sizes and from module names written out per family in this file (not read
from the architecture table under test); an encoder of a family fedtext does not know stops
every method that reaches inside it in one line; the position limit counts RoBERTa's and
MPNet's padding offset."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
import torch

from fedtext.backbone import Backbone, backbone_for, resolve_model_path
from fedtext.backbone.architectures import ARCHITECTURES, LINEAR_ROLES, architecture_of, max_tokens
from fedtext.common.config import ConfigError
from fedtext.common.registry import METHODS, make_config
from fedtext.common.tasks import TASKS

SHAPES = ("tiny-bert", "tiny-roberta", "tiny-mpnet")
D, L, F = 32, 2, 64  # the tiny shapes' width, depth and feed-forward size
# per family, written out by hand: a layer's query and value projections and the LayerNorm after
# its attention block (the other LayerNorm is output.LayerNorm in all three)
QUERY_VALUE = {"bert": ("attention.self.query", "attention.self.value"),
               "roberta": ("attention.self.query", "attention.self.value"),
               "mpnet": ("attention.attn.q", "attention.attn.v")}
ATTENTION_NORM = {"bert": "attention.output.LayerNorm", "roberta": "attention.output.LayerNorm",
                  "mpnet": "attention.LayerNorm"}
FAMILY = {"tiny-bert": "bert", "tiny-roberta": "roberta", "tiny-mpnet": "mpnet"}


def config(method: str, shape: str, **fields: Any):
    return make_config(method, **{"model": shape, "weights": "random", "max_length": 16, "prompt_length": 4, **fields})


def model_of(method: str, shape: str, **fields: Any):
    cfg = config(method, shape, **fields)
    return METHODS[method].model_class()(cfg, backbone_for(cfg, TASKS[cfg.task if cfg.task != "auto" else "demo"]))


def trained(model) -> dict[str, int]:
    """Name -> size of every weight the model's own network trains."""
    return {n: p.numel() for n, p in model.network.named_trainable()}


def layer_bias_count(family: str) -> int:
    """A layer's biases: q, k, v, attention output (4 D), FFN in (F) and out (D), two LayerNorms (2 D)."""
    return 7 * D + F


def encoder_weights(family: str) -> int:
    """Every weight of the tiny encoder, from its sizes: embeddings (words, positions, token types
    for BERT, LayerNorm), L layers of 4 (D^2 + D) attention + 2 LayerNorms + FFN, the pooler,
    MPNet's relative-position bias table (32 buckets x H = 2 heads)."""
    vocab, positions, types = {"bert": (30522, 512, 2), "roberta": (50265, 514, 1), "mpnet": (30527, 514, 0)}[family]
    embeddings = (vocab + positions + types) * D + 2 * D
    layer = 4 * (D * D + D) + 2 * 2 * D + (D * F + F) + (F * D + D)
    shared = 32 * 2 if family == "mpnet" else 0
    return embeddings + L * layer + (D * D + D) + shared


@pytest.mark.parametrize("shape", SHAPES)
def test_the_architecture_is_found_and_names_every_part(shape):
    cfg = config("fedavg", shape)
    encoder = backbone_for(cfg, TASKS["demo"]).encoder
    arch = architecture_of(encoder, shape)
    assert arch.name == FAMILY[shape] and arch.depth == L
    for layer in arch.layer_modules(encoder):
        for role in LINEAR_ROLES:
            assert isinstance(layer.get_submodule(arch.linear[role]), torch.nn.Linear), role
    names = {n for n, _ in encoder.named_parameters()}
    assert arch.layernorm_names() == {f"encoder.layer.{i}.{norm}.{w}" for i in range(L)
                                      for norm in (ATTENTION_NORM[FAMILY[shape]], "output.LayerNorm")
                                      for w in ("weight", "bias")} and arch.layernorm_names() <= names
    assert sum(p.numel() for p in encoder.parameters()) == encoder_weights(FAMILY[shape])


@pytest.mark.parametrize("shape", SHAPES)
def test_fedlora_wraps_query_and_value_of_every_layer(shape):
    model = model_of("fedlora", shape, head="similarity", rank=2)
    q, v = QUERY_VALUE[FAMILY[shape]]
    assert model.targets == [f"encoder.layer.{i}.{p}" for i in range(L) for p in (q, v)]
    # A [r, D] and B [D, r] per wrapped layer
    assert trained(model) == {f"encoder.layer.{i}.{p}.lora_{ab}.default.weight": 2 * D
                              for i in range(L) for p in (q, v) for ab in "AB"}
    # a role and a module's own name mean the same layers
    last = {p.rsplit(".", 1)[-1] for p in (q, v)}
    assert model_of("fedlora", shape, head="similarity", target_modules=",".join(sorted(last))).targets \
        == model.targets
    # every wrapped layer is in the forward: a non-zero B there alone changes the encoder's output
    net = model.network
    batch = net.encode(["a LoRA factor must be in the path"], [0])
    with torch.no_grad():
        before = net.hidden_states(None, batch)[0]
        for name, p in net.named_trainable():
            if ".lora_B." in name:
                p.fill_(0.5)
                assert not torch.equal(before, net.hidden_states(None, batch)[0]), name
                p.zero_()
    allfour = model_of("fedlora", shape, head="similarity", rank=2,
                       target_modules="query,key,value,attention-output,intermediate,output")
    assert sum(trained(allfour).values()) == L * 2 * (4 * (D + D) + (D + F) + (F + D))


@pytest.mark.parametrize("shape", SHAPES)
def test_fedadapter_puts_two_adapters_in_every_layer_and_trains_both_layernorms(shape):
    m = 4
    model = model_of("fedadapter", shape, head="similarity", bottleneck=m)
    got = trained(model)
    adapters = {n for n in got if ".adapter." in n}
    assert len(adapters) == 2 * L * 4 and sum(got[n] for n in adapters) == 2 * L * (2 * m * D + m + D)
    # every LayerNorm inside the layers trains, and nothing else does
    layer_norms = {f"{n}.{w}" for n, mod in model.network.encoder.named_modules()
                   if isinstance(mod, torch.nn.LayerNorm) and n.startswith("encoder.layer.") for w in ("weight", "bias")}
    assert len(layer_norms) == 2 * L * 2 and set(got) == adapters | layer_norms
    # the adapter sits after the block's dropout and before its residual add and LayerNorm, in every site:
    # with the dropout dropping everything (p = 1, train mode) the block gives LayerNorm(adapter(0) + h)
    arch = architecture_of(model.network.encoder, shape)
    for layer in arch.layer_modules(model.network.encoder):
        for site in arch.adapter_sites:
            block = layer.get_submodule(site.block)
            with torch.no_grad():  # a bias that varies across features (LayerNorm takes out a constant one)
                block.adapter.up.bias.copy_(torch.linspace(-1.0, 1.0, D))
                block.adapter.down.bias.fill_(0.2)
            dropout = block.get_submodule(site.dropout).dropout
            p_was, dropout.p = dropout.p, 1.0
            block.train()
            h = torch.randn(1, 3, D)
            with torch.no_grad():
                if "input_tensor" in inspect.signature(block.forward).parameters:  # BERT's blocks: (x, residual)
                    got = block(torch.randn(1, 3, block.dense.in_features), h)
                else:  # MPNet's attention: the residual is its own input
                    got = block(h)[0]
                norm = block.get_submodule(site.layernorm)
                expected = norm(block.adapter(torch.zeros(1, 3, D)) + h)
            block.eval()
            dropout.p = p_was
            torch.testing.assert_close(got.reshape(expected.shape), expected)
            with torch.no_grad():
                block.adapter.up.bias.zero_()
                block.adapter.down.bias.zero_()
    # the adapter computes in the forward: a non-zero W_up changes the encoder's output
    net = model.network
    batch = net.encode(["an adapter must be in the path"], [0])
    before = net.hidden_states(None, batch)[0]
    with torch.no_grad():
        for n, p in net.named_trainable():
            if n.endswith(".adapter.up.weight"):
                p.normal_(0, 1.0)
    assert not torch.equal(before, net.hidden_states(None, batch)[0])
    assert not model.backbone.named_trainable()  # the process's frozen backbone took none of it


@pytest.mark.parametrize("shape", SHAPES)
def test_fedptuning_v2_prefixes_reach_every_layers_keys_and_values(shape):
    from fedtext.methods.fedptuning_v2.model import attention_projections, deep_prompts

    model = model_of("fedptuning-v2", shape, head="similarity")
    assert [s.shape for s in model.global_specs()] == [(L, 4, D), (L, 4, D)]
    backbone = model.backbone
    q, v = QUERY_VALUE[FAMILY[shape]]
    names = {id(m): n for n, m in backbone.encoder.named_modules()}
    k_name = q[: q.rfind(".") + 1] + ("key" if FAMILY[shape] != "mpnet" else "k")
    assert [(names[id(k)], names[id(vv)]) for k, vv in attention_projections(backbone)] == \
        [(f"encoder.layer.{i}.{k_name}", f"encoder.layer.{i}.{v}") for i in range(L)]
    keys, values = (torch.as_tensor(a) for a in model.initial_arrays())
    batch = backbone.encode(["prefixes at every layer"], [0])
    placeholder = keys.new_zeros(4, D)
    with torch.no_grad(), deep_prompts(backbone, keys, values):
        base = backbone.forward(placeholder, batch, pool_prompt=False)
    # each layer's prefix keys and values are read, each where it belongs: changing one alone changes the
    # logits (unread: bit-identical), and the value at the key's place (or the reverse) gives other logits
    for layer in range(L):
        for which in ("key", "value"):
            k2, v2 = keys.clone(), values.clone()
            (k2 if which == "key" else v2)[layer] += 1.0
            with torch.no_grad(), deep_prompts(backbone, k2, v2):
                assert not torch.equal(base, backbone.forward(placeholder, batch, pool_prompt=False)), (layer, which)
    with torch.no_grad(), deep_prompts(backbone, values, keys):
        assert not torch.equal(base, backbone.forward(placeholder, batch, pool_prompt=False))
    with torch.no_grad():  # the captured initial prefixes are the projections' own outputs for T natural tokens
        seq = torch.tensor([[backbone.cls_id, *range(1000, 1004), backbone.sep_id]])
        k_mod, v_mod = attention_projections(backbone)[L - 1]
        got = {}
        hooks = [m.register_forward_hook(lambda _m, _i, out, n=n: got.__setitem__(n, out[0, 1:-1].clone()))
                 for n, m in (("k", k_mod), ("v", v_mod))]
        backbone.encoder(input_ids=seq, attention_mask=torch.ones_like(seq))
        for h in hooks:
            h.remove()
        assert not torch.equal(got["k"], got["v"])  # keys and values differ: a swapped capture would show


@pytest.mark.parametrize("shape", SHAPES)
def test_fes_plans_by_depth_share_and_bias_only_methods_take_every_bias(shape):
    family = FAMILY[shape]
    # the default plan on 2 layers: round(2/3 x 2) = 1 frozen, the other bias-only
    got = trained(model_of("fes", shape))
    assert set(got) == {n for n, _ in model_of("fes", shape).backbone.named_parameters()
                        if n.startswith("encoder.layer.1.") and n.endswith(".bias")}
    assert sum(got.values()) == layer_bias_count(family)
    # fedfsl-bias: every layer's biases and the embeddings' LayerNorm bias (never MPNet's position-bias table,
    # a weight shared by the layers)
    bias = trained(model_of("fedfsl-bias", shape))
    assert sum(bias.values()) == L * layer_bias_count(family) + D
    assert all(n.endswith(".bias") for n in bias)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("method, head", [("fedavg", "linear"), ("fedkseed", "linear"), ("feddrs", "linear"),
                                          ("fedfsl", "similarity")])
def test_whole_model_methods_train_every_encoder_weight(shape, method, head):
    model = model_of(method, shape, head=head)
    linear = 2 * D + 2 if head == "linear" else 0  # the demo task's 2 classes
    assert sum(trained(model).values()) == encoder_weights(FAMILY[shape]) + linear


def test_the_layer_plan_scales_with_depth():
    from fedtext.methods.fes.model import planned_frozen

    assert [planned_frozen(-1, n) for n in (2, 6, 12, 24)] == [1, 4, 8, 16]
    assert planned_frozen(3, 12) == 3


@pytest.mark.parametrize("shape, tokens", [("tiny-bert", 512), ("tiny-roberta", 513), ("tiny-mpnet", 512)])
def test_position_limits_count_the_padding_offset(shape, tokens):
    # BERT's ids start at 0; RoBERTa's after its pad id (0 in the stand-in shape: 514 - 1);
    # MPNet's embedding hard-codes padding index 1 whatever the config says: 514 - 2
    encoder = backbone_for(config("fedavg", shape), TASKS["demo"]).encoder
    assert max_tokens(encoder) == tokens


@pytest.mark.parametrize("shape", ["tiny-bert", "tiny-mpnet"])
@pytest.mark.parametrize("method, key, inserted", [("fedprompt", "prompt-length", 4), ("fedptuning-v2", "prompt-length", 4),
                                                   ("feddpg", "feddpg.prompts", 3), ("fedavg", "", 0)])
def test_a_sequence_beyond_the_positions_is_one_line(shape, method, key, inserted):
    """[CLS], what the method inserts after it (a prompt, P-tuning v2's placeholders, FedDPG's
    generated vectors, nothing), the text and [SEP] within the 512 tokens both encoders hold."""
    from fedtext.server_app import check_prompt_fits

    extra = {"prompts": 3} if method == "feddpg" else {}
    fits = 512 - 2 - inserted
    backbone = backbone_for(config(method, shape, **extra), TASKS["demo"])
    check_prompt_fits(config(method, shape, max_length=fits, **extra), backbone)
    what = rf"{key}={inserted} \+ " if inserted else ""
    lower = "one of them" if inserted else "max-length"
    with pytest.raises(ConfigError, match=rf"^{what}max-length={fits + 1} \+ 2 special and template tokens exceeds "
                                          rf"the 512 positions of {shape}; lower {lower}$"):
        check_prompt_fits(config(method, shape, max_length=fits + 1, **extra), backbone)


def test_an_unknown_family_stops_every_method_that_reaches_inside_in_one_line(tmp_path):
    """A random 2-layer DistilBERT (module names of its own: transformer.layer.N.attention.q_lin)."""
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    tok = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    torch.manual_seed(0)
    DistilBertModel(DistilBertConfig(vocab_size=tok.vocab_size, dim=D, n_layers=2, n_heads=2, hidden_dim=F)
                    ).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    backbone = Backbone(str(tmp_path), "similarity", TASKS["demo"], 16)
    for method, needs in (("fedptuning-v2", "fedptuning-v2"), ("fedadapter", "fedadapter"),
                          ("fedlora", "fedlora.target-modules"), ("fes", "fes's layer plan")):
        cfg = make_config(method, model=str(tmp_path), head="similarity")
        with pytest.raises(ConfigError) as err:
            METHODS[method].model_class()(cfg, backbone)
        assert str(err.value) == (f"{needs} needs the layout of a bert, roberta, mpnet, xlm-roberta, camembert, "
                                  f"electra encoder; {tmp_path} is 'distilbert'")
    # methods that read only the input embeddings and the output run on it, and so do the few-shot
    # methods whose plan treats every layer alike (every weight, or every bias)
    model = METHODS["fedprompt"].model_class()(make_config("fedprompt", model=str(tmp_path)), backbone)
    assert np.asarray(model.initial_arrays()[0]).shape == (8, D)
    for method in ("fedfsl", "fedfsl-bias"):
        model = METHODS[method].model_class()(make_config(method, model=str(tmp_path), head="similarity"), backbone)
        assert model.trainable_parameters() > 0


def test_every_family_in_the_table_is_laid_out_as_transformers_builds_it():
    """The table's entries against transformers' own classes (random tiny configs): a renamed
    module in a transformers upgrade fails here, not in a run."""
    from transformers import AutoConfig, AutoModel

    for family in ARCHITECTURES:
        cfg = AutoConfig.for_model(family, vocab_size=100, hidden_size=D, num_hidden_layers=L, num_attention_heads=2,
                                   intermediate_size=F)
        assert architecture_of(AutoModel.from_config(cfg), family).depth == L


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_runs_a_round_on_mpnet(method, tmp_path):
    """One in-process round (2 clients, tests/inprocess.py) of every method on the random 2-layer
    MPNet: no client dropped, every client-round's upload the size of the method's arrays."""
    from ..inprocess import one_round

    rounds = one_round(method, tmp_path, model="tiny-mpnet", weights="random")
    assert rounds[1]["dropped"] == [] and rounds[1]["num_clients"] >= 1
    assert rounds[1]["bytes_up_per_client"] > 0 and rounds[1]["client_failures"] == 0


@pytest.mark.parametrize("shape, maps", [("tiny-bert", 1), ("tiny-roberta", 1), ("tiny-mpnet", 2)])
def test_the_scoring_memory_bound_counts_mpnets_position_bias(shape, maps):
    """MPNet holds its relative-position bias [B, H, L, L] beside each layer's attention scores."""
    from fedtext.backbone.scoring import ACTIVATION_FACTOR, activation_bytes_per_token

    cfg = backbone_for(config("fedavg", shape), TASKS["demo"]).encoder.config
    assert activation_bytes_per_token(cfg, 40) == ACTIVATION_FACTOR * 4 * (D + F + maps * 2 * 40)
