"""The isolation check both injected-module methods (fedlora, fedadapter) share: a client
trains its own copy, the process's frozen backbone and a second client of the same process
keep their weights, and the two copies share no trained tensor."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedtext.learning.data import client_data
from fedtext.common.tasks import TASKS


def train_beside_another_client(client_class: type, cfg: Any, backbone: Any) -> tuple[Any, set[str]]:
    """Client 0 trains one round from the initial arrays while client 1 holds them; returns
    client 0 and the names of the upload arrays that moved. Asserts that the frozen backbone's
    weights are unchanged, client 1 still holds the download and no trained tensor is shared."""
    before = {n: p.detach().clone() for n, p in backbone.named_parameters()}
    one = client_class(cfg, TASKS["demo"], client_data(cfg, 0, 2), backbone)
    two = client_class(cfg, TASKS["demo"], client_data(cfg, 1, 2), backbone)
    start = one.model.initial_arrays()
    two.model.load(start)
    trained, n, loss = one.train(start, {"server_round": 1})
    assert n == len(one.train_batch) and np.isfinite(loss)
    names = [s.name for s in one.model.upload_specs()]
    moved = {nm for nm, x, y in zip(names, trained, start, strict=True) if not np.array_equal(x, y)}
    for name, p in backbone.named_parameters():
        assert torch.equal(p, before[name]), name
    for x, y in zip(two.model.network.trainable_arrays(), start, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not {id(p) for _, p in one.model.network.named_trainable()} & \
        {id(p) for _, p in two.model.network.named_trainable()}
    return one, moved


def tiny_mlm_backbone(folder: Any) -> Any:
    """A tiny random BERT-MLM (hidden 32, 2 layers) saved in ``folder`` with MiniLM's tokenizer,
    loaded as an ``mlm``-head backbone for AG News (the offline MiniLM has no MLM head)."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    from fedtext.backbone import Backbone, resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"))
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)
    torch.manual_seed(0)
    BertForMaskedLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return Backbone(str(folder), "mlm", TASKS["ag_news"], 32)
