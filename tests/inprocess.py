"""Federated rounds in this process, without Ray: the ServerApp's server and strategy
(``fedtext.server_app.build``) drive the ClientApp's clients (``fedtext.client_app.make_client``,
the ``client_fn`` Flower calls per message) through in-process client proxies, as Flower's own
strategy tests do with mock proxies. Shared by the tiers: the unit tier's round loop
(tests/unit/test_round_loop.py, test_methods_rounds.py, test_method_metrics.py) and the
integration tier's golden records and precision rounds.

Plumbing runs use :data:`TINY_BERT`, a 2-layer encoder of width 32 with seeded random weights
(``model=tiny-bert weights=random``, fedtext/backbone/shapes.py): a round of any method takes
about a second, where the offline MiniLM-L6 took seconds to minutes (fedavg moved 90.9 MB per
client-round). What depends on the pretrained weights (the goldens, the demo, the papers' math
against the authors' code) keeps MiniLM.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from flwr.app import RecordDict
from flwr.compat.common import recorddict_compat as compat
from flwr.common import (
    DisconnectRes,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    GetParametersIns,
    GetParametersRes,
    GetPropertiesIns,
    GetPropertiesRes,
    ReconnectIns,
)
from flwr.server.client_proxy import ClientProxy

from fedtext.client_app import make_client
from fedtext.config import RunConfig
from fedtext.registry import METHODS
from fedtext.server_app import build

# 2 clients, 1 round, 4 shots per class and a 4-token prompt: seconds per method on 2 cores
TINY = {"num-server-rounds": 1, "shots-per-class": 4, "client-test-size": 8, "eval-size": 16,
        "prompt-length": 4, "max-length": 32, "seed": 0}
# the random 2-layer encoder of width D = 32 (BERT-uncased vocabulary: the offline default's tokenizer)
TINY_BERT = {"model": "tiny-bert", "weights": "random"}
TINY_BERT_D, TINY_BERT_LAYERS = 32, 2
# its encoder: embeddings (30,522 + 512 + 2 positions/types x 32, LayerNorm) 993,216 weights in 5 tensors;
# per layer Q, K, V, attention output (32 x 32 + 32 each), LayerNorm, FFN in (32 x 64 + 64) and out
# (64 x 32 + 32), LayerNorm: 8,544 in 16 tensors; pooler 1,056 in 2
TINY_BERT_WEIGHTS, TINY_BERT_TENSORS = 993_216 + 2 * 8_544 + 1_056, 5 + 2 * 16 + 2
# a method's keys that must fit 2 layers: FeS's default plan freezes 4 of MiniLM-L6's 6 layers and
# makes 2 bias-only (a plan of more layers than the encoder has is a ConfigError)
ON_TWO_LAYERS: dict[str, dict[str, Any]] = {"fes": {"fes.frozen-layers": 1, "fes.bias-layers": 1}}


def smoke(method: str) -> dict[str, Any]:
    """A method's smallest useful keys as run-config keys: what its config declares as
    ``smoke`` (fedtext.config.MethodConfig.smoke; {} runs its defaults)."""
    config = METHODS[method]
    return config.run_config(config.smoke)


def tiny_bert(method: str) -> dict[str, Any]:
    """The run-config keys that put ``method`` on :data:`TINY_BERT`."""
    return {**TINY_BERT, **ON_TWO_LAYERS.get(method, {})}


class InProcessProxy(ClientProxy):
    """A client proxy that hands each message to a freshly built ClientApp client, as
    Flower's ``client_fn`` does per message, keeping the node's ``context.state``.

    Every instruction and reply crosses Flower's own conversion to and from a message's
    ``RecordDict`` (``flwr.compat.common.recorddict_compat``, with the ``keep_input`` flags of
    Flower's ``GridClientProxy`` on the server side and its legacy message handler on the client
    side), as in a Ray or SuperNode run: arrays go through their serialised form and a metric
    or config value Flower cannot carry fails here as it would there.

    Flower's ``Server.fit`` sends a round's messages from a thread pool; in a real run each
    client is its own process (a Ray actor or a SuperNode), so the clients here take turns
    (``TURN``) instead of sharing one interpreter at once: two clients building in parallel
    threads hit CPython 3.11's process-wide AST recursion counter ("AST constructor recursion
    depth mismatch", CI, feddpg) and share the cached backbone, which no real run does."""

    TURN = threading.Lock()

    def __init__(self, run_config: dict[str, Any], partition_id: int, num_partitions: int) -> None:
        super().__init__(str(partition_id))
        self.run_config = run_config
        self.node_config = {"partition-id": partition_id, "num-partitions": num_partitions}
        self.state = RecordDict()  # what Flower keeps on the node between messages

    def _client(self):
        return make_client(self.run_config, self.node_config, self.state)

    def get_properties(self, ins: GetPropertiesIns, timeout: float | None, group_id: int | None) -> GetPropertiesRes:
        with self.TURN:
            ins = compat.recorddict_to_getpropertiesins(compat.getpropertiesins_to_recorddict(ins))
            res = self._client().get_properties(ins)
            return compat.recorddict_to_getpropertiesres(compat.getpropertiesres_to_recorddict(res))

    def get_parameters(self, ins: GetParametersIns, timeout: float | None, group_id: int | None) -> GetParametersRes:
        with self.TURN:
            ins = compat.recorddict_to_getparametersins(compat.getparametersins_to_recorddict(ins))
            res = self._client().get_parameters(ins)
            return compat.recorddict_to_getparametersres(compat.getparametersres_to_recorddict(res, False), False)

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        with self.TURN:
            ins = compat.recorddict_to_fitins(compat.fitins_to_recorddict(ins, keep_input=True), keep_input=True)
            res = self._client().fit(ins)
            return compat.recorddict_to_fitres(compat.fitres_to_recorddict(res, keep_input=False), keep_input=False)

    def evaluate(self, ins: EvaluateIns, timeout: float | None, group_id: int | None) -> EvaluateRes:
        with self.TURN:
            ins = compat.recorddict_to_evaluateins(compat.evaluateins_to_recorddict(ins, keep_input=True),
                                                   keep_input=True)
            res = self._client().evaluate(ins)
            return compat.recorddict_to_evaluateres(compat.evaluateres_to_recorddict(res))

    def reconnect(self, ins: ReconnectIns, timeout: float | None, group_id: int | None) -> DisconnectRes:
        return DisconnectRes(reason="")


def run(run_config: dict[str, Any], tmp_path: Path, clients: int = 2,
        proxy: type[InProcessProxy] = InProcessProxy) -> tuple[Path, list[dict[str, Any]]]:
    """A whole run of ``run_config`` (records under ``tmp_path``) with ``clients`` in-process
    clients, through the server's own round loop: its run folder and round records."""
    run_config = {**run_config, "output-dir": str(tmp_path)}
    cfg = RunConfig.from_run_config(run_config, METHODS)
    server, server_config = build(cfg)
    for pid in range(clients):
        server.client_manager().register(proxy(run_config, pid, clients))
    server.fit(num_rounds=server_config.num_rounds, timeout=None)
    folder = next(p.parent for p in tmp_path.rglob("config.json"))
    return folder, [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]


def one_round(method: str, tmp_path: Path, clients: int = 2, **extra: Any) -> list[dict[str, Any]]:
    """One round of ``method`` on the demo task with ``clients`` in-process clients; the
    run's round records (round 0 and round 1); the run finished."""
    folder, rounds = run({"method": method, **TINY, **smoke(method), **extra}, tmp_path, clients)
    assert json.loads((folder / "summary.json").read_text())["status"] == "finished"
    return rounds
