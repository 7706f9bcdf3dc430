"""The local-objective hook (:mod:`fedtext.client.local_terms`) and FedProx's proximal term
(``proximal-mu``): value and gradient by hand, the hook in the shared loop, and every
averaging gradient client training through it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedtext.client.numpy_client import FedTextClient, gradient_steps
from fedtext.learning.data import client_data
from fedtext.backbone.devices import CPU_FP32
from fedtext.client.local_terms import LocalStep, LocalTerm, ProximalTerm
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS

from fedtext.node.node import client_class
from fedtext.server_app import strategy_class


def test_proximal_term_value_and_gradient_by_hand() -> None:
    """(μ/2)||w − w_t||² over two tensors together, and its gradient μ (w − w_t)."""
    a, b = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([[3.0]], requires_grad=True)
    term = ProximalTerm(0.5)
    term.start([a, b])  # w_t = ([1, 2], [[3]])
    with torch.no_grad():
        a.copy_(torch.tensor([2.0, 0.0]))
        b.copy_(torch.tensor([[4.0]]))
    value = term(LocalStep((a, b), None, torch.zeros(1, 2)))
    # ||w − w_t||² = 1 + 4 + 1 = 6; (0.5 / 2) * 6 = 1.5
    assert value.item() == pytest.approx(1.5)
    value.backward()
    assert a.grad.tolist() == [0.5, -1.0] and b.grad.tolist() == [[0.5]]  # 0.5 * ([1, -2], [[1]])
    assert isinstance(term, LocalTerm)


def test_proximal_term_refuses_to_run_unstarted() -> None:
    with pytest.raises(RuntimeError, match="start"):
        ProximalTerm(1.0)(LocalStep((torch.zeros(2, requires_grad=True),), None, torch.zeros(1, 2)))


def _toy(terms, steps: int = 3) -> tuple[torch.Tensor, float]:
    """SGD (lr 0.5) on a 3 x 2 linear classifier, 4 rows, ``steps`` steps; (weights, loss)."""
    torch.manual_seed(0)
    x, labels = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    weight = torch.nn.Parameter(torch.randn(3, 2))
    frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)  # in the optimizer, never trained
    batch = type("B", (), {"x": x, "labels": labels})()
    loss = gradient_steps([batch] * steps, lambda b: b.x @ weight + 0 * frozen,
                          torch.optim.SGD([{"params": [weight, frozen]}], lr=0.5), CPU_FP32, terms=terms)
    return weight.detach(), loss


def test_the_loop_adds_each_term_and_reports_the_cross_entropy_alone() -> None:
    """A constant term changes no gradient: same weights, same reported loss; the proximal
    term's first step is the plain one (w = w_t), later steps are pulled back to w_t."""
    seen = []

    class Constant:
        def start(self, params):
            seen.append(len(params))  # the trained tensors only: not the frozen one

        def __call__(self, step: LocalStep) -> torch.Tensor:
            assert step.logits.shape == (4, 2) and len(step.batch.labels) == 4
            return torch.tensor(7.0)

    w0, loss0 = _toy([])
    w1, loss1 = _toy([Constant()])
    assert seen == [1] and torch.equal(w0, w1) and loss0 == loss1
    one_plain, _ = _toy([], steps=1)
    one_prox, _ = _toy([ProximalTerm(10.0)], steps=1)
    assert torch.equal(one_plain, one_prox)  # the gradient μ (w − w_t) is 0 at the start
    torch.manual_seed(0)
    start = (torch.randn(4, 3), torch.randn(3, 2))[1]  # the same draw as _toy's initial weights
    far, _ = _toy([], steps=3)
    near, _ = _toy([ProximalTerm(1.0)], steps=3)
    assert torch.linalg.norm(near - start) < torch.linalg.norm(far - start)


SMALL = dict(prompt_length=4, max_length=32, shots_per_class=4, client_test_size=8)
AVERAGING = {  # the methods whose server averages and whose clients use gradients, each at a tiny size
    "fedprompt": dict(local_steps=4, batch_size=4, lr=0.05),
    "fedptuning-v2": dict(local_steps=4, batch_size=4, lr=0.05),
    "feddpg": dict(local_steps=4, batch_size=4, hidden=5, prompts=2, lr=0.05),
    "fedavg": dict(local_steps=2, batch_size=4),
}


@pytest.mark.parametrize("method", list(AVERAGING))
def test_every_averaging_gradient_client_trains_through_the_hook(method, backbone, monkeypatch) -> None:
    """With ``proximal-mu`` the client's terms are [ProximalTerm(μ)], started once on the
    tensors it trains (holding the download) and called at every local step."""
    calls = {"start": 0, "call": 0, "params": None}
    start, call = ProximalTerm.start, ProximalTerm.__call__

    def spy_start(self, params):
        calls["start"] += 1
        calls["params"] = [p.detach().clone() for p in params]
        return start(self, params)

    def spy_call(self, step):
        calls["call"] += 1
        return call(self, step)

    monkeypatch.setattr(ProximalTerm, "start", spy_start)
    monkeypatch.setattr(ProximalTerm, "__call__", spy_call)
    cfg = make_config(method, proximal_mu=0.1, **AVERAGING[method], **SMALL)
    init = strategy_class(method)(cfg, TASKS["demo"]).initial_arrays()
    client = client_class(method)(cfg, TASKS["demo"], client_data(cfg, 0, 2))
    client.fit(init, {"server_round": 1})
    assert calls["start"] == 1 and calls["call"] == AVERAGING[method]["local_steps"]
    # w_t is the download: the started tensors hold the downloaded arrays' values
    flat = np.concatenate([np.ravel(a) for a in init]).astype(np.float64)
    started = np.concatenate([p.numpy().ravel() for p in calls["params"]]).astype(np.float64)
    assert started.size == flat.size and np.allclose(np.sort(started), np.sort(flat), atol=1e-6)


def test_without_proximal_mu_a_client_has_no_terms(backbone) -> None:
    cfg = make_config("fedprompt", **SMALL)
    assert client_class("fedprompt")(cfg, TASKS["demo"], client_data(cfg, 0, 2)).local_terms() == []
    assert FedTextClient.local_terms.__doc__  # the extension point is documented


def test_proximal_mu_keeps_a_clients_step_nearer_the_download(backbone) -> None:
    """The same client, batch order and seed: μ = 1 moves the prompt less far from w_t than μ = 0."""
    distances = []
    for mu in (0.0, 1.0):
        cfg = make_config("fedprompt", proximal_mu=mu, local_steps=8, batch_size=4, lr=0.05, **SMALL)
        p0 = strategy_class("fedprompt")(cfg, TASKS["demo"]).initial_arrays()
        arrays, _, _ = client_class("fedprompt")(cfg, TASKS["demo"], client_data(cfg, 0, 2)).fit(p0, {"server_round": 1})
        distances.append(float(np.linalg.norm(arrays[0] - p0[0])))
    assert distances[1] < distances[0], distances
