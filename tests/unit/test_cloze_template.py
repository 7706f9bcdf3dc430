"""What perturbs a method's input never reaches a cloze head's template (issue 58, item 7e).

Under the ``mlm`` (cloze) head the encoder reads ``[CLS] p_1..p_T prefix text suffix [SEP]``
with the task's template around the text and the class read at its ``[MASK]``
(``fedtext/backbone/heads.py`` ``ClozeHead``). Under the similarity head there is no template, so a
perturbation that strays onto the template's positions passes every similarity-head test.
Where a method perturbs something an encoder call reads:

* FedBPT's random-token perturbation of the shots (``fedtext/methods/fedbpt/perturb.py``):
  only text tokens, never the prefix, the suffix or their ``[MASK]``: **here**, on a template
  with ``[MASK]`` after the text (SST-2's) and one with ``[MASK]`` before it (AG News');
* BBT's and FedBPT's offsets ``A z`` under ``prompt-injection=embedding-output``
  (``fedtext/backbone/injections.py``): added at the prompt positions 1..T only: **here**;
* the prompt itself (``p0 + A z``, ``fedtext/backbone/prompts.py``; FedDLS's token search and
  FedKSeed's weights do not move the template's tokens): the prompt's input embeddings fill
  positions 1..T and the template's tokens follow unchanged: **here** through the same call.

FedKSeed perturbs the weights, not the input, so no position is its own.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedtext.backbone import Backbone
from fedtext.methods.fedbpt.perturb import perturb
from fedtext.common.tasks import TASKS

TEXTS = ["the film is a long slow walk through nothing at all", "a bright funny and warm story",
         "stocks fell sharply after the report on rates", "the team won the final in extra time"] * 8


@pytest.fixture(scope="module", params=["sst2", "ag_news"])
def cloze(request) -> Backbone:
    """A random-weight tiny BERT with the cloze head on a template with [MASK] after the text
    (SST-2: "{text} It was {mask}.") or before it (AG News: "{mask} news: {text}")."""
    return Backbone("tiny-bert", "mlm", TASKS[request.param], 32, weights="random")


def template_positions(bb: Backbone, batch) -> torch.Tensor:
    """``[B, L]``: True at the template's prefix and suffix tokens of each row (after [CLS],
    before [SEP])."""
    head, att = bb.head_impl, batch.attention_mask
    pos = torch.arange(att.shape[1])
    end = att.sum(1, keepdim=True) - 1  # [SEP]
    prefix = (pos >= 1) & (pos < 1 + len(head.prefix_ids))
    suffix = (pos >= end - len(head.suffix_ids)) & (pos < end)
    return prefix | suffix


def test_the_template_has_its_mask_where_the_fixture_says(cloze):
    batch = cloze.encode(TEXTS[:2], [0, 1])
    marked = template_positions(cloze, batch)
    mask_id = cloze.tokenizer.mask_token_id
    for row in range(2):
        assert batch.input_ids[row, batch.mask_pos[row]] == mask_id and marked[row, batch.mask_pos[row]]
    assert len(cloze.head_impl.prefix_ids) + len(cloze.head_impl.suffix_ids) >= 3


def test_fedbpt_perturbation_never_touches_the_template_or_its_mask(cloze):
    """keep-rate 0.2: about 80 % of the text tokens replaced, none of the template's (prefix,
    suffix, [MASK]), nor [CLS], [SEP] or padding; mask_pos unchanged."""
    batch = cloze.encode(TEXTS, [0] * len(TEXTS))
    out = perturb(cloze, batch, 0.2, np.random.default_rng(0))
    att = batch.attention_mask.bool()
    template = template_positions(cloze, batch)
    text = att & ~template
    text[:, 0] = False
    text[torch.arange(len(TEXTS)), att.sum(1) - 1] = False
    assert torch.equal(out.input_ids[~text], batch.input_ids[~text])  # the template, [MASK], [CLS], [SEP], pads
    assert torch.equal(out.mask_pos, batch.mask_pos)
    replaced = (out.input_ids != batch.input_ids)[text].float().mean().item()
    assert 0.7 < replaced < 0.85  # the text itself was perturbed (a natural token may redraw itself)


def test_embedding_output_offsets_reach_the_prompt_positions_only(cloze):
    """``A z`` under ``embedding-output`` is added at positions 1..T of the embedding layer's
    output: the template's tokens and its [MASK] (positions T + mask_pos) get exactly what
    they get without the offsets; the prompt's input embeddings fill 1..T."""
    batch = cloze.encode(TEXTS[:4], [0, 1, 0, 1])
    t, d = 3, cloze.dim
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randn(1, t, d, generator=gen)
    offsets = torch.randn(1, t, d, generator=gen)
    seen = []

    def grab(_module, args, kwargs):
        seen.append((args[0] if args else kwargs["hidden_states"]).detach().clone())

    handle = cloze.net.encoder.encoder.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            cloze.hidden_states(prompt, batch)
            cloze.hidden_states(prompt, batch, injected={"embedding-output": offsets})
    finally:
        handle.remove()
    plain, injected = seen
    diff = injected - plain  # [B, T + L, D]
    torch.testing.assert_close(diff[:, 1 : 1 + t], offsets.expand(4, t, d), atol=1e-5, rtol=0)
    assert torch.equal(diff[:, :1], torch.zeros_like(diff[:, :1]))
    assert torch.equal(diff[:, 1 + t :], torch.zeros_like(diff[:, 1 + t :]))  # template, [MASK], text, [SEP]
    # the prompt's input embeddings fill 1..T and the template's tokens follow unchanged:
    # [MASK]'s own word embedding sits at T + mask_pos
    inputs = []
    emb = cloze.net.encoder.embeddings
    handle = emb.register_forward_pre_hook(lambda _m, args, kwargs: inputs.append(kwargs["inputs_embeds"]),
                                           with_kwargs=True)
    try:
        with torch.no_grad():
            cloze.hidden_states(prompt, batch)
    finally:
        handle.remove()
    (x,) = inputs
    rows = torch.arange(4)
    torch.testing.assert_close(x[:, 1 : 1 + t], prompt.expand(4, t, d), atol=0, rtol=0)
    with torch.no_grad():
        words = emb.word_embeddings(batch.input_ids)
    torch.testing.assert_close(x[:, 1 + t :], words[:, 1:], atol=0, rtol=0)  # template and text, in order
    mask_row = emb.word_embeddings.weight[cloze.tokenizer.mask_token_id].detach()
    torch.testing.assert_close(x[rows, t + batch.mask_pos], mask_row.expand(4, d), atol=0, rtol=0)
