"""Run one fedtext simulation in Flower's Ray engine, without a SuperLink.

    python -m simulations.simulate --num-supernodes 10 \
        --run-config "method=bbt-fed dataset=../shared/data/sst2 partition=dirichlet bbt-fed.popsize=8"

The same ServerApp/ClientApp as ``flwr run .``, driven by ``flwr.simulation.run_simulation``
(which passes an empty run-config, so the overrides are handed to the app factories).
Unlike ``flwr run``, string values need no quotes. Paths resolve against the current
directory. The compare runner calls this once per (method, seed) in a fresh process.
Exit status: 0 when the run finished, 1 when it failed (the reason is printed and is in
its ``summary.json``), 2 for a configuration error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from fedtext.common.config import ConfigError, RunConfig
from fedtext.records.reader import runs_since
from fedtext.records.signals import exit_reason, finish_open_runs, install_signal_handlers
from fedtext.common.tracking import check_installed


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


def backend_config(cpus_per_client: float = 2.0, ray_address: str = "", gpus_per_client: float = 0.0) -> dict[str, Any]:
    """Flower's Ray backend config: a private Ray instance on this machine's CPUs, or,
    with ``ray_address`` (``"127.0.0.1:6379"``, ``"auto"``), the running Ray cluster
    there (its resources are the cluster's: ``num_cpus`` cannot be set when attaching).

    ``gpus_per_client`` is Ray's ``num_gpus`` per client actor, fractional so that several
    clients share one GPU (0.25: four actors per GPU, each building its backbone there
    with ``device=auto``); 0 keeps the actors on the CPUs."""
    if gpus_per_client < 0:
        raise ConfigError(f"--gpus-per-client must be >= 0, got {gpus_per_client}")
    init: dict[str, Any] = {"include_dashboard": False}
    init.update({"address": ray_address} if ray_address else {"num_cpus": os.cpu_count() or 2})
    return {"client_resources": {"num_cpus": cpus_per_client, "num_gpus": float(gpus_per_client)}, "init_args": init}


def simulate(overrides: dict[str, Any], num_supernodes: int, cpus_per_client: float = 2.0,
             ray_address: str = "", gpus_per_client: float = 0.0) -> list[dict[str, Any]]:
    """Validate ``overrides``, run them through Flower's simulation engine and return the
    run record(s) it wrote (:func:`fedtext.records.load_run` dicts, with ``status``)."""
    from flwr.simulation import run_simulation

    from fedtext.client_app import make_client_app
    from fedtext.common.registry import METHODS
    from fedtext.common.quiet import quiet_flower
    from fedtext.server_app import make_server_app

    cfg = RunConfig.from_run_config(overrides, METHODS)  # fail before Ray starts
    quiet_flower(cfg.verbose)  # before run_simulation logs its deprecation notice (fedtext.common.quiet)
    # Ray's FutureWarning on every start ("Ray will no longer override accelerator visible
    # devices env var if num_gpus=0"): opt in to that future behaviour, which is what a
    # CPU client (num_gpus=0) wants anyway; the variable is the one the warning names.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    cfg.check_num_clients(num_supernodes)
    cfg.check_num_partitions(num_supernodes)  # Flower's simulation gives each node num-partitions=num_supernodes
    check_installed(cfg.trackers)  # tracker=wandb without wandb: exit 2 now, not a failed run
    started = time.time()
    _record_before_ray_sigterm()
    run_simulation(
        server_app=make_server_app(overrides, num_supernodes),
        client_app=make_client_app(overrides),
        num_supernodes=num_supernodes,
        backend_config=backend_config(cpus_per_client, ray_address, gpus_per_client),
    )
    # A ServerApp thread that never closed its run (the engine stopped under it) is failed.
    finish_open_runs("failed", "the simulation engine stopped before the run finished (see the log)")
    return runs_since(cfg.output_dir, started)


def _record_before_ray_sigterm() -> None:
    """Make the SIGTERM handler Ray's ``ray.init`` installs in this main thread
    (``sys.exit(15)``, replacing ours) first record ``terminated by SIGTERM`` in every
    open run: its ``SystemExit`` unwinds through Flower's engine shutdown, which can take
    long enough for whoever sent SIGTERM to follow with SIGKILL."""
    try:
        import ray._private.utils as ray_utils
    except ImportError:  # pragma: no cover - Ray is a dependency
        return
    install = ray_utils.set_sigterm_handler
    if getattr(install, "_fedtext", False):
        return

    def chained_install(handler):
        def recording(signum, frame):
            finish_open_runs("failed", "terminated by SIGTERM")
            handler(signum, frame)

        install(recording)

    chained_install._fedtext = True  # type: ignore[attr-defined]
    ray_utils.set_sigterm_handler = chained_install


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-supernodes", type=int, default=4, help="simulated clients (default 4)")
    ap.add_argument("--run-config", default="", help="space-separated key=value overrides of pyproject's run-config")
    ap.add_argument("--cpus-per-client", type=float, default=2.0, help="Ray CPUs per client actor (default 2)")
    ap.add_argument("--gpus-per-client", type=float, default=0.0, help="Ray GPUs per client actor, fractional "
                    "(0.25: four clients share a GPU; default 0)")
    ap.add_argument("--ray-address", default="", help="attach to a running Ray cluster (head's host:port, or "
                    "'auto'); default: start a private Ray instance on this machine")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    install_signal_handlers()  # the ServerApp runs in a thread here: record SIGTERM from the main one
    try:
        runs = simulate(parse_pairs(args.run_config), args.num_supernodes, args.cpus_per_client, args.ray_address,
                        args.gpus_per_client)
    except ConfigError as exc:
        print(f"fedtext: configuration error: {exc}", file=sys.stderr)
        return 2
    except BaseException as exc:  # Ray's driver turns SIGTERM into SystemExit(15) in this thread
        finish_open_runs("failed", exit_reason(exc))
        # one line of why: an error outside the configuration checks (seed=-1 was one) left
        # no record and exited 1 without a word
        print(f"fedtext: the run stopped: {' '.join(exit_reason(exc).split())}", file=sys.stderr)
        # Flower runs the ServerApp in a non-daemon thread; stopped while it identifies
        # clients (failures there are tolerated) it went on training and kept this process
        # alive for minutes after SIGTERM. The record is written: stop the process now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code else 1)
    return exit_code(runs)


def exit_code(runs: list[dict[str, Any]]) -> int:
    """0 when every run this command wrote finished; else 1, with each run's status and
    reason on stderr (Flower's ``run_simulation`` returns normally when the ServerApp
    fails, so the records are the truth)."""
    bad = [r for r in runs if r["status"] != "finished"]
    for r in bad:
        print(f"fedtext: run {Path(r['dir']).name} {r['status']}: {r['reason']}", file=sys.stderr)
    if not runs:
        print("fedtext: the simulation wrote no run record (see the log above)", file=sys.stderr)
    return 1 if bad or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
