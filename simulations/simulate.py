"""Run one fedtext simulation in Flower's Ray engine, without a SuperLink.

    python -m simulations.simulate --num-supernodes 10 \
        --run-config "method=bbt-fed dataset=../shared/data/sst2 partition=dirichlet bbt-fed.popsize=8"

The same ServerApp/ClientApp as ``flwr run .``, driven by ``flwr.simulation.run_simulation``
(which passes an empty run-config, so the overrides are handed to the app factories).
Unlike ``flwr run``, string values need no quotes. Paths resolve against the current
directory. The compare runner calls this once per (method, seed) in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from fedtext.config import ConfigError, RunConfig


def parse_pairs(text: str) -> dict[str, Any]:
    """``"a=1 b=x c=0.5 d='y z'"`` -> ``{"a": 1, "b": "x", "c": 0.5, "d": "y z"}``."""
    import shlex

    out: dict[str, Any] = {}
    for item in shlex.split(text):
        if "=" not in item:
            raise ConfigError(f"run-config item '{item}' is not key=value")
        key, value = item.split("=", 1)
        out[key] = _typed(value)
    return out


def _typed(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def backend_config(cpus_per_client: float = 2.0, ray_address: str = "") -> dict[str, Any]:
    """Flower's Ray backend config: a private Ray instance on this machine's CPUs, or,
    with ``ray_address`` (``"127.0.0.1:6379"``, ``"auto"``), the running Ray cluster
    there (its resources are the cluster's: ``num_cpus`` cannot be set when attaching)."""
    init: dict[str, Any] = {"include_dashboard": False}
    init.update({"address": ray_address} if ray_address else {"num_cpus": os.cpu_count() or 2})
    return {"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}, "init_args": init}


def simulate(overrides: dict[str, Any], num_supernodes: int, cpus_per_client: float = 2.0,
             ray_address: str = "") -> None:
    """Validate ``overrides`` and run them through Flower's simulation engine."""
    from flwr.simulation import run_simulation

    from fedtext.client_app import make_client_app
    from fedtext.registry import METHODS
    from fedtext.server_app import make_server_app

    cfg = RunConfig.from_run_config(overrides, METHODS)  # fail before Ray starts
    cfg.check_num_clients(num_supernodes)
    run_simulation(
        server_app=make_server_app(overrides),
        client_app=make_client_app(overrides),
        num_supernodes=num_supernodes,
        backend_config=backend_config(cpus_per_client, ray_address),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-supernodes", type=int, default=4, help="simulated clients (default 4)")
    ap.add_argument("--run-config", default="", help="space-separated key=value overrides of pyproject's run-config")
    ap.add_argument("--cpus-per-client", type=float, default=2.0, help="Ray CPUs per client actor (default 2)")
    ap.add_argument("--ray-address", default="", help="attach to a running Ray cluster (head's host:port, or "
                    "'auto'); default: start a private Ray instance on this machine")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        simulate(parse_pairs(args.run_config), args.num_supernodes, args.cpus_per_client, args.ray_address)
    except ConfigError as exc:
        print(f"fedtext: configuration error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
