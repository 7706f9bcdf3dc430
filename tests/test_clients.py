"""Clients on their own: finite, correctly shaped uploads; training lowers the local loss."""

from __future__ import annotations

import numpy as np
import pytest

from clients import CLIENTS
from fedtext.config import RunConfig
from fedtext.data import client_data
from fedtext.strategy import failure_reason
from fedtext.tasks import TASKS
from strategies import STRATEGIES

SMALL = dict(prompt_length=4, max_length=48, shots_per_class=4, client_test_size=8, intrinsic_dim=20, popsize=4)


@pytest.mark.parametrize("method", ["fedprompt", "bbt-fed"])
def test_fit_and_evaluate_return_finite_shaped_results(method, backbone):
    cfg = RunConfig(method=method, local_steps=3, batch_size=4, **SMALL)
    strategy = STRATEGIES[method](cfg, TASKS["demo"])
    init = strategy.initial_arrays()
    client = CLIENTS[method](cfg, TASKS["demo"], client_data(cfg, 0, 2))
    arrays, n, metrics = client.fit(init, {"server_round": 1})
    assert [a.shape for a in arrays] == [a.shape for a in init]
    assert [a.dtype for a in arrays] == [a.dtype for a in init]
    assert all(np.isfinite(a).all() for a in arrays) and n == 8
    assert not np.array_equal(arrays[0], init[0])  # it trained
    assert metrics["queries"] > 0 and metrics["peak_rss_mb"] > 100 and np.isfinite(metrics["train_loss"])
    loss, n_test, emetrics = client.evaluate(arrays, {})
    assert n_test == 8 and 0 <= emetrics["accuracy"] <= 1 and np.isfinite(loss)
    # server and client agree on the prompt the arrays stand for
    np.testing.assert_allclose(strategy.prompt_of(arrays), client.prompt_of(arrays), rtol=1e-6)


def test_bbt_client_queries_and_determinism(backbone):
    cfg = RunConfig(method="bbt-fed", local_steps=2, **SMALL)
    data = client_data(cfg, 1, 2)
    init = [np.zeros(20, np.float32)]
    a = CLIENTS["bbt-fed"](cfg, TASKS["demo"], data).fit(init, {"server_round": 3})
    b = CLIENTS["bbt-fed"](cfg, TASKS["demo"], data).fit(init, {"server_round": 3})
    np.testing.assert_array_equal(a[0][0], b[0][0])  # seeded: same client, same round
    n = len(data.train)
    assert a[2]["queries"] == 2 * 4 * n + n  # iterations x popsize x shots + final loss


def test_fedprompt_local_training_lowers_the_loss(backbone):
    cfg = RunConfig(method="fedprompt", local_steps=15, batch_size=8, lr=0.05, **SMALL)
    client = CLIENTS["fedprompt"](cfg, TASKS["demo"], client_data(cfg, 0, 2))
    p0 = STRATEGIES["fedprompt"](cfg, TASKS["demo"]).initial_arrays()
    before = client.backbone.evaluate(p0[0], [client.train_batch])[0]
    arrays, _, _ = client.fit(p0, {"server_round": 1})
    assert client.backbone.evaluate(arrays[0], [client.train_batch])[0] < before


def test_failure_reason_is_short_and_clean():
    raw = "ValueError('Message contains an Error (reason: \x1b[36mray::X\x1b[39m ...\\n  File x\\nRuntimeError: Inference tensors cannot be saved')"
    assert failure_reason(RuntimeError(raw)) == "RuntimeError: Inference tensors cannot be saved')"
