"""The ClientApp's node: client_fn -> a :class:`Node` that builds the method's client on demand.

:mod:`fedtext.client_app` (what Flower loads) imports this module on a message's first need
of it, in the ClientApp's process or in the SuperNode's long-lived node service
(:mod:`fedtext.node.service`): it pulls in torch and transformers.

The method's config (``fedtext.common.registry.METHODS[method]``) names its client as a
``"clients.<module>:<Class>"`` string; this module resolves it (:func:`client_class`), the
one core module besides the ServerApp that imports a plug-in.

The node's ``partition-id`` and ``num-partitions`` come from Flower's node config:
the simulation engine injects them; on a real device pass them with
``flower-supernode --node-config "partition-id=0 num-partitions=10"``.

Flower builds a fresh client object for every message. The server asks every client
once who it is (``get_properties``, for seeded sampling); :class:`Node` answers that
from the node config without loading the backbone, the data partition or the shots,
so a federation of 1,000 clients of which 10 train per round only ever builds the
clients that are sampled (``simulations/bench.py`` measures it). Fit and evaluate
build the method's client, and report when they started and ended (``busy_start``,
``busy_end``, epoch seconds) and how long building took (``load_s``), from which the
server's round record separates client compute from Flower/Ray overhead. The first
message a process answers also carries its start-up (``startup_start``: when the process
started, or its task reached a warm process: :func:`fedtext.records.probes.task_start_time`; ``startup_end``: when this module's
imports ended): a new Ray actor spends ~4 s on 2 cores importing torch and transformers, a
deployment's ClientApp process ~1 s more starting Python and Flower, which is start-up, not
per-round overhead.

The node's fedtext state (``context.state``: FeS's pseudo labels, FedDPGu's forgotten
indices, FedDLS's p') is journalled to ``<output-dir>/<run_key>/node-state/`` around every
fit and evaluate (:mod:`fedtext.node.state`), so that a run resumed from its checkpoint
(``resume=``), or a restarted SuperNode, continues with the state each client held after
the checkpointed round; a method's client only ever sees ``self.state``.

``client-failure-rate`` (a testing aid for simulations) makes each fit or evaluate
message fail with that probability, drawn from (seed, partition, round, message kind):
half of the failures raise, the other half sleep past ``round-timeout-s`` so that the
server gives up on them (without a round timeout every failure raises).
"""

from __future__ import annotations

import logging
import platform
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.app import RecordDict
from flwr.client import Client, NumPyClient
from flwr.common import Context, NDArrays, Scalar

from fedtext.client.numpy_client import FedTextClient
from fedtext.common.components import resolve
from fedtext.common.config import ConfigError, RunConfig
from fedtext.learning.data import client_data, labelled
from fedtext.node.memory import MemoryGuard, node_limit_mb, options_for
from fedtext.node.state import Journal
from fedtext.common.progress import muted, setup_logging
from fedtext.common.quiet import quiet_flower, quiet_ray_tip
from fedtext.records.probes import task_start_time
from fedtext.common.registry import METHODS

# Flower's simulation process imports this module before it starts Ray: Ray's FutureWarning
# at ray.init is filtered from here (fedtext.common.quiet; Ray's behaviour unchanged)
quiet_ray_tip()

NODE_PLATFORM = platform.machine() or "unknown"  # the node's CPU architecture (x86_64, aarch64), in its properties
log = logging.getLogger("fedtext")
_STARTUP = {"startup_start": task_start_time(), "startup_end": time.time()}  # reported once per process


def client_class(method: str) -> type[FedTextClient]:
    """The client class of a registered method (its config's ``client`` string, imported).

    Parameters
    ----------
    method
        A key of :data:`fedtext.common.registry.METHODS`.

    Returns
    -------
    type[FedTextClient]
        The class, e.g. ``clients.fedavg.FedAvgClient`` for ``"fedavg"``.
    """
    return resolve(METHODS[method].client)


def node_partition(node_config: Mapping[str, Any]) -> tuple[int, int]:
    """(partition id, number of partitions) from the node config, or one clear error."""
    try:
        return int(node_config["partition-id"]), int(node_config["num-partitions"])
    except KeyError as exc:
        raise ConfigError(
            f"node config lacks {exc}; start the SuperNode with "
            '--node-config "partition-id=<i> num-partitions=<n>"'
        ) from None


class InjectedFailure(RuntimeError):
    """A failure ``client-failure-rate`` asked for."""


class Node(NumPyClient):
    """One SuperNode's answer to one message; the method's client is built only for
    fit and evaluate.

    ``get_properties`` returns the partition id from the node config, and the
    client's domain only when the server asks for it (``{"domain": 1}``: a holdout by
    domain name), which is the one case that needs the data.
    """

    def __init__(self, cfg: RunConfig, partition_id: int, num_partitions: int, state: RecordDict | None,
                 flower_run: int | None = None, memory_limit_mb: float | None = None) -> None:
        self.cfg = cfg
        self.memory_limit_mb = memory_limit_mb  # the node's (fedtext.node.memory.node_limit_mb); None: unchecked
        self.partition_id = partition_id
        self.num_partitions = num_partitions
        self.state = state if state is not None else RecordDict()
        self.flower_run = flower_run  # Flower's run id (context.run_id), stamped into journal entries

    def build(self) -> FedTextClient:
        """The method's client for this node (data partition, shots, backbone)."""
        task = labelled(self.cfg).task
        data = client_data(self.cfg, self.partition_id, self.num_partitions)
        return client_class(self.cfg.method)(self.cfg, task, data, state=self.state)

    def get_properties(self, config: dict[str, Scalar]) -> dict[str, Scalar]:
        if int(config.get("domain", 0)):
            return {**self.build().get_properties(config), "num_partitions": self.num_partitions}
        return {"partition_id": self.partition_id, "num_partitions": self.num_partitions,
                "platform": NODE_PLATFORM}

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, dict[str, Scalar]]:
        self.maybe_fail("fit", config)
        return self._timed("fit", config, lambda c: c.fit(parameters, config))

    def evaluate(self, parameters: NDArrays, config: dict[str, Scalar]) -> tuple[float, int, dict[str, Scalar]]:
        self.maybe_fail("evaluate", config)
        return self._timed("evaluate", config, lambda c: c.evaluate(parameters, config))

    def maybe_fail(self, kind: str, config: dict[str, Scalar]) -> None:
        """Fail this message with probability ``client-failure-rate`` (seeded, see module doc)."""
        rate = self.cfg.client_failure_rate
        if not rate:
            return
        server_round = int(config.get("server_round", 0))
        rng = np.random.default_rng([self.cfg.seed, self.partition_id, server_round, zlib.crc32(kind.encode()), 0xFA11])
        if rng.random() >= rate:
            return
        if self.cfg.round_timeout_s and rng.random() < 0.5:
            time.sleep(self.cfg.round_timeout_s + 2)  # the server stops waiting first
        raise InjectedFailure(f"injected {kind} failure of client {self.partition_id} in round {server_round} "
                              f"(client-failure-rate={rate})")

    def _timed(self, kind: str, config: dict[str, Scalar],
               call: Callable[[FedTextClient], tuple[Any, int, dict[str, Scalar]]]):
        """Run ``call`` on the built client, between the journal's restore and record of
        the node state (:mod:`fedtext.node.state`; nothing without ``run_key``), with the
        timing metrics the server's round record reads. ``load_s`` includes the restore."""
        start = time.time()
        server_round = int(config.get("server_round", 0))
        journal = Journal.of(self.cfg.output_dir, config, self.partition_id, self.flower_run)
        before = journal.prepare(self.state, server_round, kind) if journal else {}
        # a client's progress lines (fedtext.common.progress) only where asked for: in a simulation
        # every actor's lines would interleave with the round lines
        guard = MemoryGuard(self.memory_limit_mb, f"{self.cfg.method}'s {kind} of partition {self.partition_id}",
                            options_for(self.cfg))
        with muted(not (self.cfg.client_progress or self.cfg.verbose)), guard:
            client = self.build()
            built = time.time()
            out, n, metrics = call(client)
        if journal:
            journal.record(self.state, server_round, kind, before)
        startup = _STARTUP.copy()
        _STARTUP.clear()  # the first message of this process carries it, no other
        return out, n, {**metrics, **startup, "load_s": built - start, "busy_start": start, "busy_end": time.time()}


def make_node(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], state: RecordDict | None = None,
    flower_run: int | None = None,
) -> Node:
    """This node from the run-config, its node config, its state (``context.state``, which
    persists on the node between rounds) and Flower's run id; one clear error otherwise."""
    cfg = RunConfig.from_run_config(run_config, METHODS)
    quiet_flower(cfg.verbose)  # this process's Flower lines ("Manually terminating ClientAppActor"), fedtext.common.quiet
    partition_id, num_partitions = node_partition(node_config)
    if not 0 <= partition_id < num_partitions:
        raise ConfigError(f"partition-id {partition_id} outside 0..{num_partitions - 1}")
    try:
        limit = node_limit_mb(node_config)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return Node(cfg, partition_id, num_partitions, state, flower_run, limit)


def make_client(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], state: RecordDict | None = None,
    flower_run: int | None = None,
) -> Client:
    """This node's client (:func:`make_node`), as Flower's ``client_fn`` returns it."""
    return make_node(run_config, node_config, state, flower_run).to_client()


def client_for_context(context: Context, overrides: Mapping[str, Any] | None = None) -> Client:
    """The ClientApp's ``client_fn``: this node's client from Flower's ``context`` (run-config
    updated with ``overrides``, node config, state, run id). :mod:`fedtext.client_app` calls it
    in the ClientApp's process, the node service (:mod:`fedtext.node.service`) in its own."""
    setup_logging()  # the client's progress lines (fedtext.common.progress) reach Flower's console
    return make_client({**context.run_config, **(overrides or {})}, context.node_config, context.state,
                       context.run_id)


def warm(context: Context) -> None:
    """Build this node's client once and drop it: the backbone, the tokenizer and the data
    partition stay in this process's caches (the node service calls it after answering a run's
    first message, so that the first round a node is sampled in does not pay its loads).
    Failures are logged, never raised: the message that needs the client will say them."""
    try:
        make_node(context.run_config, context.node_config).build()
    except Exception as exc:  # noqa: BLE001 - a warm-up is an optimisation
        log.info("fedtext: node service: no warm-up (%s)", exc)
