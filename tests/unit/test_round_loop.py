"""Every registered method through one federated round, in this process: the ServerApp's
server and strategy (``fedtext.server_app.build``) drive the ClientApp's clients
(``fedtext.node.node.make_client``, the ``client_fn`` Flower calls) through in-process
client proxies (tests/inprocess.py), as Flower's own strategy tests do with mock proxies; no
Ray, no subprocess.

What each run must show: the round finishes with both clients' uploads aggregated (none
dropped), every figure a round records is measured (bytes each way, queries, peak memory,
accuracy in [0, 1]) and the run records its backbone. The runs are on ``model=tiny-bert
weights=random`` (2 layers of width D = 32, seeded random weights built alike by the server and
each client): the plumbing is the same whatever the encoder's shape, and a round takes about a
second. Two rounds of every method with exact bytes: test_methods_rounds.py; the engine itself
(Ray actors, a SuperLink, SuperNodes): tests/integration and tests/system.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedtext.common.config import RunConfig
from fedtext.common.registry import METHODS

from ..inprocess import one_round, tiny_bert


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_a_round_in_process(method: str, tmp_path: Path) -> None:
    rounds = one_round(method, tmp_path, **tiny_bert(method))
    assert [r["round"] for r in rounds] == [0, 1]
    r = rounds[1]
    assert r["dropped"] == [] and r["num_clients"] == 2, r
    assert r["bytes_up_per_client"] > 0 and r["bytes_up"] == 2 * r["bytes_up_per_client"]
    assert r["bytes_down_per_client"] >= 0
    assert r["model_queries"] > 0 and r["client_peak_rss_mb"] > 100 and r["client_peak_gpu_mb"] is None  # CPU
    assert 0.0 <= r["global_accuracy"] <= 1.0 and np.isfinite(r["global_loss"])
    config = json.loads(next(tmp_path.rglob("config.json")).read_text())["config"]
    assert (config["model"], config["weights"]) == ("tiny-bert", "random")


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_a_round_on_robertas_architecture(method: str, tmp_path: Path) -> None:
    """The papers' backbone is RoBERTa (simulations/studies/costs.py measures every method at its
    shape): its embeddings offset positions by the padding id and have one token type, and the
    shapes read a stand-in tokenizer with fewer ids (30,522) than the embedding has rows (50,265)."""
    rounds = one_round(method, tmp_path, **{**tiny_bert(method), "model": "tiny-roberta"})
    r = rounds[1]
    assert r["dropped"] == [] and r["num_clients"] == 2 and r["bytes_up_per_client"] > 0, r
    assert 0.0 <= r["global_accuracy"] <= 1.0 and np.isfinite(r["global_loss"])


@pytest.mark.parametrize("method", list(METHODS))
def test_every_smoke_key_is_a_key_of_the_method_or_a_shared_key(method: str) -> None:
    """A method joins this loop by being registered; its config's ``smoke`` and
    ``smoke_modes`` name only its own keys (bare) or shared keys, with values that parse."""
    config = METHODS[method]
    shared = set(RunConfig.shared_keys())
    for keys in (config.smoke, config.smoke_modes):
        flat = config.run_config(keys)
        assert set(flat) <= shared | set(config.keys()), set(flat) - shared - set(config.keys())
        parsed = RunConfig.from_run_config({"method": method, **flat}, METHODS).to_run_config()
        assert all(parsed[k] == v for k, v in flat.items()), flat


def test_run_config_dots_a_methods_own_keys_and_keeps_shared_ones() -> None:
    fedavg = METHODS["fedavg"]
    assert fedavg.run_config({"local-steps": 1, "num-server-rounds": 2, "seed": 3}) == {
        "fedavg.local-steps": 1, "num-server-rounds": 2, "seed": 3}
    assert fedavg.run_config({}) == {}
