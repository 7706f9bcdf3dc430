"""Federated rounds in this process, without Ray: the ServerApp's server and strategy
(``fedtext.server_app.build``) drive the ClientApp's clients (``fedtext.node.node.make_client``,
the ``client_fn`` Flower calls per message) through in-process client proxies, as Flower's own
strategy tests do with mock proxies.

Used where a Flower engine would show nothing more: the cost tables (the cost study's engine,
:mod:`simulations.studies.costs`: a round's bytes, queries and server seconds from its records),
the compare runner's ``engine = "inprocess"`` and the test tiers (tests/inprocess.py adds the
tests' tiny settings).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
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
from flwr.server import Server
from flwr.server.client_proxy import ClientProxy

from fedtext.node.node import make_client
from fedtext.common.config import RunConfig
from fedtext.common.registry import METHODS
from fedtext.server_app import build


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
        proxy: type[InProcessProxy] = InProcessProxy,
        server_hook: Callable[[Server], None] | None = None) -> tuple[Path, list[dict[str, Any]]]:
    """A whole run of ``run_config`` (records under ``tmp_path``) with ``clients`` in-process
    clients, through the server's own round loop: its run folder and round records.
    ``server_hook`` sees the built server (and its strategy) before the first round."""
    run_config = {**run_config, "output-dir": str(tmp_path)}
    cfg = RunConfig.from_run_config(run_config, METHODS)
    # the federation's size in the run's provenance, as a Flower simulation records its SuperNodes: the partition
    # depends on it and the run-config does not say it (the compare runner resumes only a run of the planned size)
    server, server_config = build(cfg, launch={"num_supernodes": clients})
    if server_hook is not None:
        server_hook(server)
    for pid in range(clients):
        server.client_manager().register(proxy(run_config, pid, clients))
    server.fit(num_rounds=server_config.num_rounds, timeout=None)
    folder = server.recorder.dir  # this run's, not any run folder under tmp_path (the compare runner shares one)
    return folder, [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
