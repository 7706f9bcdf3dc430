"""Backbone: batched multi-prompt scoring, shapes, query counting, projections, heads."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from fedtext.backbone import Backbone, losses
from fedtext.common.config import ConfigError
from fedtext.backbone.prompts import SplitPrompt, bbt_space, project, projection
from fedtext.common.tasks import TASKS


def _prompts(backbone, p: int, t: int = 4, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(0, backbone.embedding_std(), size=(p, t, backbone.dim)).astype(np.float32)


def test_score_of_p_prompts_equals_p_separate_forwards(backbone, demo):
    batch = backbone.encode(list(demo.test["text"][:6]), list(demo.test["label"][:6]))
    prompts = _prompts(backbone, 5)
    together = backbone.score(prompts, batch)
    separate = torch.stack([backbone.score(prompts[i : i + 1], batch)[0] for i in range(5)])
    assert together.shape == (5, 6, 2)
    torch.testing.assert_close(together, separate, atol=1e-4, rtol=1e-4)
    # and different prompts really give different logits (the prompt is used)
    assert not torch.allclose(together[0], together[1])


def test_score_matches_a_plain_forward_with_the_prompt_spliced_in(backbone, demo):
    """Independent check of injection: build inputs_embeds by hand for one row."""
    batch = backbone.encode([demo.test["text"][0]], [0])
    prompt = _prompts(backbone, 1)[0]
    ids = batch.input_ids[0]
    emb = backbone.embeddings(ids)
    x = torch.cat([emb[:1], torch.as_tensor(prompt), emb[1:]])[None]
    with torch.inference_mode():
        h = backbone.encoder(inputs_embeds=x).last_hidden_state[0].mean(0)
        expected = 20.0 * torch.nn.functional.normalize(h, dim=0) @ backbone.label_vectors.T
    torch.testing.assert_close(backbone.score(prompt[None], batch)[0, 0], expected, atol=1e-4, rtol=1e-4)


def test_query_counter_counts_sequences(backbone, demo):
    batch = backbone.encode(list(demo.test["text"][:7]), [0] * 7)
    before = backbone.queries
    backbone.score(_prompts(backbone, 3), batch)
    assert backbone.queries - before == 21
    backbone.evaluate(_prompts(backbone, 1)[0], [batch, batch])
    assert backbone.queries - before == 35


def test_chunking_keeps_results(backbone, demo, monkeypatch):
    import fedtext.backbone.scoring as bb

    batch = backbone.encode(list(demo.test["text"][:4]), [0, 1, 0, 1])
    prompts = _prompts(backbone, 6)
    full = backbone.score(prompts, batch)
    monkeypatch.setattr(bb, "MAX_TOKENS_PER_CHUNK", 1)  # one prompt per encoder call
    torch.testing.assert_close(backbone.score(prompts, batch), full, atol=1e-5, rtol=1e-5)


def test_losses_is_cross_entropy_per_prompt():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 2.0]], [[0.0, 0.0], [0.0, 0.0]]])
    labels = torch.tensor([0, 1])
    expected0 = -np.log(np.exp(2) / (np.exp(2) + 1))
    np.testing.assert_allclose(losses(logits, labels).numpy(), [expected0, np.log(2)], rtol=1e-6)


def test_projection_is_identical_for_the_same_seed(backbone):
    a1 = projection(7, 40, 5, 0.05)
    a2 = projection.__wrapped__(7, 40, 5, 0.05)  # rebuilt, not the cached object
    np.testing.assert_array_equal(a1, a2)
    assert not np.allclose(a1, projection.__wrapped__(8, 40, 5, 0.05))
    assert abs(a2.std() - 0.05 / np.sqrt(5)) < 0.01
    p0, a = bbt_space(backbone, 4, 10, seed=3)
    assert p0.shape == (4, backbone.dim) and a.shape == (4 * backbone.dim, 10)
    z = np.arange(10, dtype=np.float32)
    summed = project(p0, a, z, "input-embedding")
    np.testing.assert_allclose(summed, p0 + (a @ z).reshape(4, -1), rtol=1e-5, atol=1e-6)
    assert project(p0, a, np.stack([z, z]), "input-embedding").shape == (2, 4, backbone.dim)
    split = project(p0, a, np.stack([z, 2 * z]).astype(np.float64))  # default: BBT's injection, p0 and A z apart
    assert isinstance(split, SplitPrompt) and split.embeds.shape == split.offsets.shape == (2, 4, backbone.dim)
    assert split.offsets.dtype == split.embeds.dtype == np.float32  # z is taken as float32 (what the encoder gets)
    np.testing.assert_array_equal(split.embeds[1], p0)
    np.testing.assert_allclose(split.offsets[1], 2 * (a @ z).reshape(4, -1), rtol=1e-5, atol=1e-6)
    # post-tuning a split prompt adds to its offsets and keeps its input embeddings
    again = project(SplitPrompt(p0, split.offsets[0]), a, z)
    np.testing.assert_array_equal(again.embeds, p0)
    np.testing.assert_allclose(again.offsets, 2 * split.offsets[0], rtol=1e-5, atol=1e-6)


def test_projection_scale_is_bbts():
    """BBT (bbt.py): std = alpha * std_hat / (sqrt(d) * sigma), alpha = 1: A's entries shrink with
    the CMA-ES's initial step size sigma0 (a dropped sigma0 or sqrt would pass the other tests)."""
    a1 = projection.__wrapped__(1, 4000, 25, 0.5, 1.0)
    a2 = projection.__wrapped__(1, 4000, 25, 0.5, 0.25)
    np.testing.assert_allclose(a2, 4 * a1, rtol=1e-6)
    assert abs(a1.std() - 0.5 / 5) < 0.002


def test_embedding_std_is_the_population_std_of_every_entry(backbone):
    w = backbone.embeddings.weight.detach().double().numpy()
    assert backbone.embedding_std() == pytest.approx(float(np.std(w.reshape(-1))), rel=1e-6)  # not ddof=1
    assert backbone.embedding_std() != pytest.approx(float(np.std(w[:, 0])), rel=1e-3)  # every entry, not a column


def test_split_prompt_offsets_enter_after_the_embedding_layer(backbone, demo):
    """BBT's injection: the encoder's first layer sees the embedding layer's output for
    [CLS] p0 text [SEP] plus the offsets at exactly the T prompt positions, nothing else moved
    (an offset added before the LayerNorm, or at the wrong positions, fails)."""
    batch = backbone.encode(list(demo.test["text"][:2]), [0, 1])
    p0 = backbone.initial_prompt(3, 0)
    off = np.random.default_rng(0).standard_normal((3, backbone.dim)).astype(np.float32)
    seen = []
    layer0 = backbone.encoder.encoder.layer[0]
    handle = layer0.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach().clone()))
    try:
        backbone.score(SplitPrompt(p0[None], np.zeros_like(off)[None]), batch)
        backbone.score(SplitPrompt(p0[None], off[None]), batch)
        backbone.score(p0[None], batch)
    finally:
        handle.remove()
    plain, shifted, inputs = seen
    torch.testing.assert_close(plain, inputs)  # zero offsets: the plain prompt
    delta = (shifted - plain).numpy()
    np.testing.assert_allclose(delta[:, 1:4], np.broadcast_to(off, (2, 3, backbone.dim)), atol=1e-5)
    assert np.abs(delta[:, [0]]).max() == 0 and np.abs(delta[:, 4:]).max() == 0


def test_read_only_prompts_score_without_a_warning_and_stay_unchanged(backbone, demo):
    """Arrays Flower hands a client are read-only: scoring them must not wrap them as
    non-writable tensors (torch's UserWarning) nor write into them."""
    batch = backbone.encode(list(demo.test["text"][:2]), [0, 1])
    p0 = backbone.initial_prompt(3, 0)[None].astype(np.float32)
    off = np.full_like(p0, 0.01)
    for a in (p0, off):
        a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = backbone.score(p0, batch)
        split = backbone.score(SplitPrompt(p0, off), batch)
    assert tuple(plain.shape[:2]) == (1, 2) and split.shape == plain.shape
    assert not p0.flags.writeable and np.all(off == np.float32(0.01))


def test_tied_head_reads_mask_position(demo):
    bb = Backbone("all-MiniLM-L6-v2", "tied", TASKS["sst2"], 32)
    batch = bb.encode(list(demo.test["text"][:3]), [0, 1, 0])
    assert (batch.input_ids[torch.arange(3), batch.mask_pos] == bb.tokenizer.mask_token_id).all()
    assert bb.score(_prompts(bb, 2), batch).shape == (2, 3, 2)


def test_the_head_registry_holds_every_run_config_head():
    from fedtext.common.config import HEADS as HEAD_NAMES
    from fedtext.backbone.heads import HEADS

    assert tuple(HEADS) == HEAD_NAMES and all(head.name == name for name, head in HEADS.items())
    with pytest.raises(ConfigError, match="head must be one of similarity, tied, mlm, linear, cls, got 'pooled'"):
        Backbone("all-MiniLM-L6-v2", "pooled", TASKS["demo"], 32)


def test_truncation_keeps_the_mask_token():
    bb = Backbone("all-MiniLM-L6-v2", "tied", TASKS["sst2"], 8)
    batch = bb.encode(["word " * 200], [1])
    assert batch.input_ids.shape[1] <= 8 + 8  # text capped at 8 tokens, template on top
    assert bb.tokenizer.mask_token_id in batch.input_ids[0].tolist()


def test_mlm_head_without_mlm_weights_is_a_clear_error():
    with pytest.raises(ConfigError, match="head=mlm needs a checkpoint with a masked-LM head"):
        Backbone("all-MiniLM-L6-v2", "mlm", TASKS["sst2"], 32)


def test_unloadable_model_offline_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as err:
        Backbone("no-such-org/no-such-model-fedtext", "similarity", TASKS["sst2"], 32)
    assert "cannot load model 'no-such-org/no-such-model-fedtext'" in str(err.value)
    assert "\n" not in str(err.value)


def test_bench_script_prints_both_rates():
    from simulations.bench_score import bench

    plain, scored = bench(p=2, b=4, t=2, repeats=1)
    assert plain > 0 and scored > 0


def test_trainable_modes_frozen_partial_full():
    bb = Backbone("all-MiniLM-L6-v2", "similarity", TASKS["demo"], 32)
    assert bb.trainable_parameters() == []
    total = sum(1 for _ in bb.encoder.parameters())
    bb.set_trainable(lambda name: "layer.5." in name or name.endswith(".bias"))
    names = [n for n, p in bb.encoder.named_parameters() if p.requires_grad]
    assert names and all("layer.5." in n or n.endswith(".bias") for n in names)
    assert any(n.startswith("encoder.layer.0.") and n.endswith(".bias") for n in names)
    bb.set_trainable("all")
    assert len(bb.trainable_parameters()) == total
    with pytest.raises(ValueError, match="trainable must be"):
        bb.set_trainable("some")


def test_mlm_head_on_a_local_mlm_checkpoint(tmp_path):
    """A tiny random BERT-MLM saved locally: loads by path, scores through its MLM head."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from fedtext.backbone import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    BertForMaskedLM(cfg).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    bb = Backbone(str(tmp_path), "mlm", TASKS["ag_news"], 32)  # template puts [MASK] first
    batch = bb.encode(["stocks fell sharply", "the team won the cup again"], [2, 1])
    prompts = np.random.default_rng(0).normal(size=(3, 2, 32)).astype(np.float32)
    logits = bb.score(prompts, batch)
    assert logits.shape == (3, 2, 4)
    # hand-computed: full MLM logits at [MASK], restricted to the verbalizer tokens
    ids = batch.input_ids[1]
    emb = bb.embeddings(ids)
    x = torch.cat([emb[:1], torch.as_tensor(prompts[2]), emb[1:]])[None]
    with torch.inference_mode():
        full = bb.mlm(inputs_embeds=x).logits[0, int(batch.mask_pos[1]) + 2]
    torch.testing.assert_close(logits[2, 1], full[bb.head_impl.verbalizer_ids], atol=1e-4, rtol=1e-4)


# ------------------------------------------------- per-input prompts, trainable copies
def test_per_input_prompts_equal_one_prompt_per_row(backbone, demo):
    """``[P, B, T, D]``: row b gets its own prompt, as if scored alone with it."""
    batch = backbone.encode(list(demo.test["text"][:3]), [0, 1, 0])
    per_row = _prompts(backbone, 3)  # one [T, D] prompt per input
    together = backbone.score(per_row[None], batch)[0]  # [B, C]
    for b in range(3):
        alone = backbone.score(per_row[b : b + 1], batch.take([b]))[0, 0]
        torch.testing.assert_close(together[b], alone, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="prompts must be"):
        backbone.score(_prompts(backbone, 2)[None], batch)  # 2 prompts for 3 inputs
    # evaluate() takes a per-batch prompt function too (FedDPG's generator)
    loss, acc = backbone.evaluate(lambda bt: per_row[: len(bt)], [batch])
    expected = torch.nn.functional.cross_entropy(together, batch.labels).item()
    assert loss == pytest.approx(expected, rel=1e-5) and 0 <= acc <= 1


def test_no_prompt_forward_equals_score(backbone, demo):
    batch = backbone.encode(list(demo.test["text"][:4]), [0, 1, 0, 1])
    with torch.no_grad():
        torch.testing.assert_close(backbone.forward(None, batch), backbone.score(None, batch)[0])


def test_trainable_copy_shares_frozen_weights_and_owns_trained_ones(backbone):
    base = dict(backbone.named_parameters())
    before = {n: p.detach().clone() for n, p in base.items()}
    copy = backbone.trainable_copy(lambda name: "layer.5." in name)
    own = dict(copy.named_parameters())
    for name, p in own.items():
        if "layer.5." in name:
            assert p is not base[name] and p.requires_grad and torch.equal(p, base[name])
        else:
            assert p is base[name] and not p.requires_grad  # one copy of the frozen weights per process
    with torch.no_grad():
        for _, p in copy.named_trainable():
            p.add_(1.0)
    for name, p in base.items():
        assert torch.equal(p, before[name]), name  # the process backbone never changes
    assert not backbone.trainable_parameters() and copy.counter is backbone.counter


def test_label_vectors_follow_the_encoder_that_made_them(backbone, demo):
    copy = backbone.trainable_copy("all")
    arrays = copy.trainable_arrays()
    torch.testing.assert_close(copy.label_vectors.detach(), backbone.label_vectors)
    assert copy.label_vectors.requires_grad  # a training encoder: recomputed, with gradients
    copy.load_trainable([a * 1.05 if a.ndim == 2 else a for a in arrays])  # another encoder
    with torch.no_grad():
        moved = copy.label_vectors
    assert not torch.allclose(moved, backbone.label_vectors, atol=1e-3)
    frozen = backbone.trainable_copy("none")  # nothing trains: encoded once, cached
    assert frozen.label_vectors is frozen.label_vectors


def test_linear_head_is_a_trainable_layer_on_mean_pooled_features(demo):
    from fedtext.backbone import get_backbone

    bb = get_backbone("all-MiniLM-L6-v2", "linear", "demo", 48).trainable_copy("all")
    names = [n for n, _ in bb.named_trainable()]
    assert names[-2:] == ["head.weight", "head.bias"]
    arrays = bb.trainable_arrays()
    rng = np.random.default_rng(0)
    arrays[-2] = rng.normal(size=arrays[-2].shape).astype(np.float32)
    arrays[-1] = np.array([0.5, -0.5], np.float32)
    bb.load_trainable(arrays)
    batch = bb.encode(list(demo.test["text"][:2]), [0, 1])
    with torch.no_grad():
        hidden = bb.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        w = batch.attention_mask.unsqueeze(-1).float()
        pooled = (hidden * w).sum(1) / w.sum(1)
        expected = pooled @ torch.as_tensor(arrays[-2]).T + torch.as_tensor(arrays[-1])
    torch.testing.assert_close(bb.score(None, batch)[0], expected, atol=1e-4, rtol=1e-4)


def test_cls_head_is_the_checkpoints_sequence_classification_head(demo):
    """``cls`` = what ``AutoModelForSequenceClassification`` builds on a BERT encoder:
    the pretrained pooler on [CLS] and a linear layer; the input has no template."""
    from transformers import AutoModelForSequenceClassification

    from fedtext.backbone import get_backbone, resolve_model_path

    bb = get_backbone("all-MiniLM-L6-v2", "cls", "demo", 48).trainable_copy("all")
    names = [n for n, _ in bb.named_trainable()]
    assert names[-4:] == ["pooler.dense.weight", "pooler.dense.bias", "head.weight", "head.bias"]
    arrays = bb.trainable_arrays()
    rng = np.random.default_rng(1)
    arrays[-2] = rng.normal(size=arrays[-2].shape).astype(np.float32)
    arrays[-1] = np.array([0.25, -0.25], np.float32)
    bb.load_trainable(arrays)
    texts = list(demo.test["text"][:3])
    batch = bb.encode(texts, [0, 1, 0])
    assert batch.mask_pos is None and int(batch.input_ids[0, 0]) == bb.cls_id
    hf = AutoModelForSequenceClassification.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"), num_labels=2)
    hf.eval()
    with torch.no_grad():
        hf.classifier.weight.copy_(torch.as_tensor(arrays[-2]))
        hf.classifier.bias.copy_(torch.as_tensor(arrays[-1]))
        expected = hf(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        pooled = torch.tanh(bb.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
                            .last_hidden_state[:, 0] @ torch.as_tensor(arrays[-4]).T + torch.as_tensor(arrays[-3]))
    torch.testing.assert_close(bb.score(None, batch)[0], expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(expected, pooled @ torch.as_tensor(arrays[-2]).T + torch.as_tensor(arrays[-1]),
                               atol=1e-4, rtol=1e-4)


def test_chunks_are_the_rows_in_order_each_trimmed(backbone):
    texts = ["a", "a much longer text than the others here", "b c", "d", "e f g"]
    enc = backbone.encode(texts, [0, 1, 0, 1, 0])
    parts = list(enc.chunks(2))
    assert [len(p) for p in parts] == [2, 2, 1]
    assert torch.equal(torch.cat([p.labels for p in parts]), enc.labels)
    # the first chunk holds the longest text: full width; the last ("e f g") is trimmed to its own length
    assert parts[0].input_ids.shape[1] == enc.input_ids.shape[1]
    assert parts[2].input_ids.shape[1] == int(enc.attention_mask[4].sum()) < enc.input_ids.shape[1]
    for i, p in enumerate(parts):
        width = p.input_ids.shape[1]
        assert torch.equal(p.input_ids, enc.input_ids[2 * i: 2 * i + len(p), :width])


def test_label_vectors_are_encoded_by_the_plain_encoder_after_a_fedptuning_v2_forward():
    """Issue 34's bug: on a fresh backbone the first label-vector call came from inside
    fedptuning-v2's prefix hooks and cached label descriptions with the prefix in them
    (cosine 0.32-0.43 to the plain vectors on AG News). The cache must equal the
    descriptions encoded with no hook at all: mean-pooled, unit-norm encoder states."""
    from fedtext.backbone.heads import mean_pool
    from fedtext.methods.fedptuning_v2.model import DeepPromptModel
    from fedtext.common.registry import make_config

    fresh = Backbone("all-MiniLM-L6-v2", "similarity", TASKS["ag_news"], 64)  # not the shared, primed one
    cfg = make_config("fedptuning-v2", task="ag_news", prompt_length=4, max_length=64)
    model = DeepPromptModel(cfg, fresh)
    batch = fresh.encode(["Stocks fell sharply on Wall Street today.", "The striker scored twice."], [2, 1])
    model.evaluate(model.initial_arrays(), [batch])  # first label_vectors call: inside the hooks
    desc = fresh.encode(list(TASKS["ag_news"].descriptions), [0] * 4)
    with torch.no_grad():
        hidden = fresh.encoder(input_ids=desc.input_ids, attention_mask=desc.attention_mask).last_hidden_state
    plain = torch.nn.functional.normalize(mean_pool(hidden, desc.attention_mask), dim=-1)
    torch.testing.assert_close(fresh.label_vectors, plain, atol=1e-5, rtol=1e-5)


def test_fedptuning_v2_prefix_forward_builds_its_ids_on_the_backbones_device(backbone, monkeypatch):
    """On a GPU the initial prefixes come from one encoder forward whose ids must be on the
    encoder's device (a CPU tensor into a CUDA encoder fails). CPU-only check of that
    plumbing: the backbone claims the ``meta`` device and the encoder only records where
    its inputs are, then stops the forward."""
    from fedtext.methods.fedptuning_v2.model import DeepPromptModel
    from fedtext.common.registry import make_config

    class Stop(Exception):
        pass

    seen: list[tuple[str, str]] = []

    def forward(input_ids, attention_mask):
        seen.append((input_ids.device.type, attention_mask.device.type))
        raise Stop

    model = DeepPromptModel(make_config("fedptuning-v2", task="demo", prompt_length=4, max_length=64), backbone)
    monkeypatch.setattr(backbone, "device", torch.device("meta"))
    monkeypatch.setattr(backbone.encoder, "forward", forward)
    with pytest.raises(Stop):
        model.initial_arrays()
    assert seen == [("meta", "meta")]


def test_suspended_hooks_hides_every_hook_and_puts_them_back(backbone):
    from fedtext.backbone import suspended_hooks

    layer = backbone.encoder.encoder.layer[3]
    # hooks already there stay (transformers installs its own output-capturing hooks on the
    # layers the first time hidden states are asked for, and keeps them)
    before = (dict(layer._forward_hooks), dict(layer._forward_pre_hooks))
    calls: list[str] = []
    handles = [layer.register_forward_hook(lambda *_: calls.append("post")),
               layer.register_forward_pre_hook(lambda *_: calls.append("pre"))]
    batch = backbone.encode(["a fine movie"], [0])
    try:
        with suspended_hooks(backbone.encoder), torch.no_grad():
            backbone.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        assert calls == []
        with torch.no_grad():
            backbone.encoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        assert calls == ["pre", "post"]  # back, in order
    finally:
        for h in handles:
            h.remove()
    assert (dict(layer._forward_hooks), dict(layer._forward_pre_hooks)) == before  # the handles still remove them


def test_token_embeddings_are_the_input_embedding_rows_on_the_cpu(backbone):
    """What FedDPG's G reads: e(ids) ``[B, L, D]``, the rows of the input embedding matrix,
    handed back on the CPU wherever the backbone lives."""
    ids = torch.tensor([[101, 2023, 102], [101, 102, 0]])
    got = backbone.token_embeddings(ids)
    assert got.device.type == "cpu" and got.shape == (2, 3, backbone.dim)
    torch.testing.assert_close(got, torch.as_tensor(backbone.vocab_embeddings()[ids.numpy()]))
