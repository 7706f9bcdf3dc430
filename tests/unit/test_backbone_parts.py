"""The backbone package's parts: a thin :class:`Backbone` facade, the injection registry,
and random-weight backbones of a named architecture (``weights=random``, ``tiny-bert``)."""

from __future__ import annotations

import ast
import contextlib
import inspect

import numpy as np
import pytest
import torch

import fedtext.backbone.facade as facade
from fedtext.backbone import INJECTIONS, SHAPES, Backbone, Injection, check_model, get_backbone
from fedtext.common.config import HEADS as HEAD_NAMES
from fedtext.common.config import PROMPT_INJECTIONS, ConfigError, RunConfig
from fedtext.backbone.heads import HEADS
from fedtext.common.registry import METHODS
from fedtext.common.tasks import TASKS

MAX_FACADE_METHODS = 30  # 27 today (the monolith had 31 and 486 lines)
MAX_METHOD_STATEMENTS = 3  # a method of the facade delegates; __init__ composes the parts


def _facade_class() -> ast.ClassDef:
    tree = ast.parse(inspect.getsource(facade))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Backbone")


def _statements(function: ast.FunctionDef) -> list[ast.stmt]:
    """The function's statements without its docstring."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body


def test_the_backbone_stays_a_thin_facade():
    """Backbone composes its parts: few methods, each a delegation (no branch, no loop), and
    no head or injection is known to it by name, so that a new method's head or injection is
    a registry entry (fedtext.backbone.heads.HEADS, fedtext.backbone.injections.INJECTIONS), not an
    edit of the class."""
    cls = _facade_class()
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
    assert len(methods) <= MAX_FACADE_METHODS, f"Backbone has {len(methods)} methods: put the logic in a part"
    fat = {m.name: len(_statements(m)) for m in methods
           if m.name != "__init__" and len(_statements(m)) > MAX_METHOD_STATEMENTS}
    assert not fat, f"Backbone methods with logic of their own (statements): {fat}"
    branches = [(type(n).__name__, n.lineno) for n in ast.walk(cls)
                if isinstance(n, (ast.If, ast.For, ast.While, ast.Try, ast.Match))]
    assert not branches, f"control flow inside Backbone: {branches}"
    names = {*HEAD_NAMES, *PROMPT_INJECTIONS, *HEADS, *INJECTIONS}
    docstrings = {id(f.body[0].value) for f in [cls, *methods]
                  if f.body and isinstance(f.body[0], ast.Expr) and isinstance(f.body[0].value, ast.Constant)}
    named = sorted({n.value for n in ast.walk(cls)
                    if isinstance(n, ast.Constant) and id(n) not in docstrings and n.value in names})
    assert not named, f"Backbone dispatches on head or injection names: {named}"
    classes = {c.__name__ for c in [*HEADS.values(), *INJECTIONS.values()]}
    used = sorted({n.id for n in ast.walk(cls) if isinstance(n, ast.Name) and n.id in classes})
    assert not used, f"Backbone names head or injection classes: {used}"


@pytest.fixture(scope="module")
def tiny() -> Backbone:
    return Backbone("tiny-bert", "similarity", TASKS["demo"], 32, weights="random")


def test_tiny_bert_builds_offline_with_its_shape(tiny):
    assert tiny.dim == 32 and tiny.encoder.config.num_hidden_layers == 2
    assert tiny.encoder.config.num_attention_heads == 2 and tiny.encoder.config.intermediate_size == 64
    assert tiny.tokenizer.vocab_size == SHAPES["tiny-bert"].config["vocab_size"] == 30522
    assert tiny.weights == "random"
    batch = tiny.encode(["a fine film", "dull"], [1, 0])
    assert tiny.score(tiny.initial_prompt(4, 0)[None], batch).shape == (1, 2, 2)
    mlm = Backbone("tiny-bert", "mlm", TASKS["sst2"], 32, weights="random")  # the masked-LM class, built
    assert mlm.mlm is not None and mlm.score(mlm.initial_prompt(2, 0)[None], mlm.encode(["ok"], [0])).shape == (1, 1, 2)


@pytest.mark.parametrize(("shape", "weights", "layers", "dim"), [
    ("roberta-large", 355_359_744, 24, 1024),  # Liu et al. 2019: 355 M
    ("roberta-base", 124_645_632, 12, 768),  # 125 M
    ("bert-base", 109_482_240, 12, 768),  # bert-base-uncased: 110 M
])
def test_the_papers_shapes_have_their_published_sizes(shape: str, weights: int, layers: int, dim: int) -> None:
    """Built on the meta device (shapes, no memory): the weight counts the papers' backbones have."""
    from transformers import AutoModel

    with torch.device("meta"):
        encoder = AutoModel.from_config(SHAPES[shape].hf_config())
    assert sum(p.numel() for p in encoder.parameters()) == weights
    assert (encoder.config.num_hidden_layers, encoder.config.hidden_size) == (layers, dim)


def test_a_shape_named_after_a_checkpoint_loads_the_checkpoint_with_pretrained_weights(monkeypatch) -> None:
    """``roberta-large`` is a shape with ``weights=random`` (offline) and the hub's checkpoint with
    ``pretrained`` (the paper profiles ask for it): offline, that fails in one line as any hub id;
    a shape that names no checkpoint refuses pretrained weights."""
    from fedtext.backbone.shapes import shape_of

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert shape_of("roberta-large", "random") is SHAPES["roberta-large"]
    assert shape_of("roberta-large", "pretrained") is None and shape_of("all-MiniLM-L6-v2", "random") is None
    check_model("roberta-large", "random")  # no hub needed
    with pytest.raises(ConfigError, match=r"^cannot load model 'roberta-large' offline"):
        check_model("roberta-large")
    with pytest.raises(ConfigError, match=r"^model 'bert-base' is an architecture without weights"):
        check_model("bert-base")


def test_a_stand_in_tokenizer_draws_prompt_tokens_from_its_own_ids() -> None:
    """tiny-roberta's embedding has RoBERTa's 50,265 rows, its WordPiece tokenizer 30,522 ids:
    the natural tokens BBT's prompt starts from are ids both know."""
    bb = Backbone("tiny-roberta", "similarity", TASKS["demo"], 32, weights="random")
    assert bb.embeddings.weight.shape[0] == 50265 and len(bb.tokenizer) == 30522
    natural = bb.natural_token_ids()
    assert 0 < natural.max() < 30522 and len(natural) > 20000
    assert bb.encode(["a fine film"], [1]).input_ids.max() < 30522


def test_random_weights_are_bit_identical_and_leave_torchs_generator_alone(tiny):
    torch.manual_seed(7)
    before = torch.random.get_rng_state()
    again = Backbone("tiny-bert", "similarity", TASKS["demo"], 32, weights="random")
    assert torch.equal(torch.random.get_rng_state(), before)
    ours, theirs = tiny.named_parameters(), again.named_parameters()
    assert [n for n, _ in ours] == [n for n, _ in theirs]
    assert all(torch.equal(p, q) for (_, p), (_, q) in zip(ours, theirs, strict=True))
    assert float(tiny.embeddings.weight.std()) > 0.01  # initialised, not zeros
    # the seed comes from the model's name alone, not from Python's per-process hash(): every process
    # of a run draws the same weights (the same in a fresh interpreter: tests/integration/test_random_weights.py)
    from fedtext.backbone.loading import random_seed

    assert random_seed("tiny-bert") == 1414573873398022913


def test_random_weights_of_a_pretrained_model_keep_its_architecture(backbone):
    """weights=random with the default MiniLM: its configuration, none of its weights."""
    rand = Backbone("all-MiniLM-L6-v2", "similarity", TASKS["demo"], 64, weights="random")
    assert rand.encoder.config.to_dict()["hidden_size"] == backbone.dim == rand.dim
    assert [n for n, _ in rand.named_parameters()] == [n for n, _ in backbone.named_parameters()]
    assert not torch.equal(rand.embeddings.weight, backbone.embeddings.weight)


def test_an_architecture_without_weights_needs_weights_random():
    for build in (lambda: Backbone("tiny-bert", "similarity", TASKS["demo"], 32),
                  lambda: check_model("tiny-bert")):
        with pytest.raises(ConfigError) as err:
            build()
        assert str(err.value) == "model 'tiny-bert' is an architecture without weights: add weights='random'"
    check_model("tiny-bert", "random")  # no hub, no files
    with pytest.raises(ConfigError, match="unknown weights 'trained'; choose one of: pretrained, random"):
        RunConfig.from_run_config({"weights": "trained"}, METHODS)
    assert RunConfig.from_run_config({"model": "tiny-bert", "weights": "random"}, METHODS).weights == "random"


def test_the_process_cache_keys_on_weights(monkeypatch):
    seen = []
    monkeypatch.setattr(facade, "_get_backbone", lambda *args: seen.append(args) or args)
    cfg = RunConfig.from_run_config({"model": "tiny-bert", "weights": "random"}, METHODS)
    facade.backbone_for(cfg, TASKS["demo"])
    get_backbone("tiny-bert", "similarity", "demo", 32)
    assert seen[0][0] == "tiny-bert" and "random" in seen[0] and "pretrained" in seen[1]


def test_a_new_injection_is_a_registry_entry(tiny, monkeypatch):
    """An injection the backbone has never heard of: values added to the last layer's output
    at the prompt positions, registered by name; hidden_states takes it by that name."""

    class LastLayer(Injection):
        name = "last-layer"

        @contextlib.contextmanager
        def added(self, values, rows):
            p, t, d = values.shape
            flat = values[:, None].expand(p, rows, t, d).reshape(p * rows, t, d)

            def add(_module, _inputs, out):
                hidden = out[0] if isinstance(out, tuple) else out
                hidden = torch.cat([hidden[:, :1], hidden[:, 1: 1 + t] + flat, hidden[:, 1 + t:]], dim=1)
                return (hidden, *out[1:]) if isinstance(out, tuple) else hidden

            handle = self.encoder.encoder.layer[-1].register_forward_hook(add)
            try:
                yield
            finally:
                handle.remove()

    monkeypatch.setitem(INJECTIONS, LastLayer.name, LastLayer)
    batch = tiny.encode(["a fine film", "so dull"], [1, 0])
    prompts = torch.as_tensor(np.stack([tiny.initial_prompt(3, s) for s in range(2)]))
    values = torch.full((2, 3, tiny.dim), 0.5)
    with torch.no_grad():
        plain, _, _ = tiny.hidden_states(prompts, batch)
        moved, _, t = tiny.hidden_states(prompts, batch, {"last-layer": values})
    delta = moved - plain
    assert t == 3 and torch.allclose(delta[:, 1:4], torch.full_like(delta[:, 1:4], 0.5))
    assert delta[:, :1].abs().max() == 0 and delta[:, 4:].abs().max() == 0
    with pytest.raises(ValueError, match="injection must be one of"):
        tiny.injection("nowhere")
