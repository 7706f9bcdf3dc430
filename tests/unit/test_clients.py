"""Clients on their own: finite, correctly shaped uploads; training lowers the local loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedtext.learning.data import client_data
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from fedtext.server.validation import failure_reason

from fedtext.node.node import client_class
from fedtext.server_app import strategy_class

SMALL = dict(prompt_length=4, max_length=48, shots_per_class=4, client_test_size=8)
SUBSPACE = dict(intrinsic_dim=20, popsize=4)


@pytest.mark.parametrize("method", ["fedprompt", "bbt-fed"])
def test_fit_and_evaluate_return_finite_shaped_results(method, backbone):
    extra = dict(batch_size=4) if method == "fedprompt" else SUBSPACE
    cfg = make_config(method, local_steps=3, **extra, **SMALL)
    strategy = strategy_class(method)(cfg, TASKS["demo"])
    init = strategy.initial_arrays()
    client = client_class(method)(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    arrays, n, metrics = client.fit(init, {"server_round": 1})
    assert [a.shape for a in arrays] == [a.shape for a in init]
    assert [a.dtype for a in arrays] == [a.dtype for a in init]
    assert all(np.isfinite(a).all() for a in arrays) and n == 8
    assert not np.array_equal(arrays[0], init[0])  # it trained
    assert metrics["queries"] > 0 and metrics["peak_rss_mb"] > 100 and np.isfinite(metrics["train_loss"])
    loss, n_test, emetrics = client.evaluate(arrays, {})
    assert n_test == 8 and 0 <= emetrics["accuracy"] <= 1 and np.isfinite(loss)
    # server and client evaluate the same arrays with the same code (one model class)
    assert type(strategy.model) is type(client.model)
    assert strategy.model.evaluate(arrays, client.test_batches) == (loss, emetrics["accuracy"])


def test_bbt_client_queries_and_determinism(backbone):
    cfg = make_config("bbt-fed", local_steps=2, **SUBSPACE, **SMALL)
    data = client_data(cfg, 1, 2)
    init = [np.zeros(20, np.float32)]
    a = client_class("bbt-fed")(cfg, TASKS["demo"], data).fit(init, {"server_round": 3})
    b = client_class("bbt-fed")(cfg, TASKS["demo"], data).fit(init, {"server_round": 3})
    np.testing.assert_array_equal(a[0][0], b[0][0])  # seeded: same client, same round
    n = len(data.train)
    assert a[2]["queries"] == 2 * 4 * n + n  # iterations x popsize x shots + final loss


def test_fedprompt_local_training_lowers_the_loss(backbone):
    cfg = make_config("fedprompt", local_steps=15, batch_size=8, lr=0.05, **SMALL)
    client = client_class("fedprompt")(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    p0 = strategy_class("fedprompt")(cfg, TASKS["demo"]).initial_arrays()
    before = client.backbone.evaluate(p0[0], [client.train_batch])[0]
    arrays, _, _ = client.fit(p0, {"server_round": 1})
    assert client.backbone.evaluate(arrays[0], [client.train_batch])[0] < before


def test_failure_reason_is_short_and_clean():
    raw = "ValueError('Message contains an Error (reason: \x1b[36mray::X\x1b[39m ...\\n  File x\\nRuntimeError: Inference tensors cannot be saved')"
    assert failure_reason(RuntimeError(raw)) == "RuntimeError: Inference tensors cannot be saved')"


def test_fedavg_clients_in_one_process_never_see_each_others_weights(backbone):
    """Two fedavg clients hosted by one process (as in one Ray actor): what A trains is
    in A's copy only; B, the process backbone and the server's model are untouched."""
    cfg = make_config("fedavg", local_steps=3, batch_size=4, lr=1e-4, **SMALL)
    strategy = strategy_class("fedavg")(cfg, TASKS["demo"])
    init = strategy.initial_arrays()
    assert [s.name for s in strategy.model.global_specs()][-2:] == ["head.weight", "head.bias"]
    a = client_class("fedavg")(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    b = client_class("fedavg")(cfg, TASKS["demo"], client_data(cfg, 1, 2))
    assert a.backbone is b.backbone  # the shared frozen backbone of the process
    before_b = b.evaluate(init, {})
    frozen_before = [p.detach().clone() for p in a.backbone.encoder.parameters()]
    up, n, metrics = a.fit(init, {"server_round": 1})
    assert [x.shape for x in up] == [x.shape for x in init] and all(x.dtype == np.float32 for x in up)
    assert any(not np.array_equal(x, y) for x, y in zip(up, init, strict=True))  # it trained
    assert np.isfinite(metrics["train_loss"]) and n == len(a.train_batch)
    after_b = b.evaluate(init, {})
    assert after_b[:2] == before_b[:2] and after_b[2]["accuracy"] == before_b[2]["accuracy"]  # B did not move
    for p, q in zip(a.backbone.encoder.parameters(), frozen_before, strict=True):
        assert torch.equal(p, q)
    assert a.model.network is not b.model.network
    # server and client evaluate with the same code
    loss, _, emetrics = a.evaluate(up, {})
    assert strategy.model.evaluate(up, a.test_batches) == (loss, emetrics["accuracy"])


def test_fedavg_local_training_lowers_the_loss(backbone):
    cfg = make_config("fedavg", local_steps=8, batch_size=8, **SMALL)
    client = client_class("fedavg")(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    init = strategy_class("fedavg")(cfg, TASKS["demo"]).initial_arrays()
    before = client.model.evaluate(init, [client.train_batch])[0]
    up, _, _ = client.fit(init, {"server_round": 1})
    assert client.model.evaluate(up, [client.train_batch])[0] < before
