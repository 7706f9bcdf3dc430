"""ClientApp: client_fn -> METHODS[method].client(...).to_client().

The node's ``partition-id`` and ``num-partitions`` come from Flower's node config:
the simulation engine injects them; on a real device pass them with
``flower-supernode --node-config "partition-id=0 num-partitions=10"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import RecordDict
from flwr.client import Client, ClientApp
from flwr.common import Context

from fedtext.config import ConfigError, RunConfig
from fedtext.data import client_data
from fedtext.registry import METHODS
from fedtext.tasks import resolve_task


def make_client(
    run_config: Mapping[str, Any], node_config: Mapping[str, Any], state: RecordDict | None = None
) -> Client:
    """Build this node's client from the run-config, its node config and its state
    (``context.state``, which persists on the node between rounds)."""
    cfg = RunConfig.from_run_config(run_config, METHODS)
    try:
        partition_id = int(node_config["partition-id"])
        num_partitions = int(node_config["num-partitions"])
    except KeyError as exc:
        raise ConfigError(
            f"node config lacks {exc}; start the SuperNode with "
            '--node-config "partition-id=<i> num-partitions=<n>"'
        ) from None
    task = resolve_task(cfg.task, cfg.dataset)
    data = client_data(cfg, partition_id, num_partitions)
    return METHODS[cfg.method].client(cfg, task, data, state=state).to_client()


def make_client_app(overrides: Mapping[str, Any] | None = None) -> ClientApp:
    """A ClientApp whose run-config is Flower's, updated with ``overrides``."""

    def client_fn(context: Context) -> Client:
        return make_client({**context.run_config, **(overrides or {})}, context.node_config, context.state)

    return ClientApp(client_fn=client_fn)


app = make_client_app()
