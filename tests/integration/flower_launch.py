"""The launch shared by the fault-injection scripts run by path (fault_injection.py,
poisoned_client.py): fedtext's ServerApp with the script's overrides and a ClientApp of
the script's ``client_fn`` on 3 simulated SuperNodes (2 CPUs each, no Ray dashboard).

The scripts import it as a sibling module (``python tests/integration/<script>.py`` puts
this folder first on sys.path). Their ``client_fn`` and faulty wrappers stay in their
``__main__`` so that Ray ships them to its workers by value; this module is only run by the
driver.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from flwr.client import ClientApp
from flwr.simulation import run_simulation

from fedtext.server_app import make_server_app

RAY_ADDRESS_VAR = "FEDTEXT_TEST_RAY_ADDRESS"  # a running Ray head to attach to (tests/conftest.py ray_head)


def simulate(overrides: dict, client_fn: Callable, output_dir: str, num_supernodes: int = 3) -> None:
    """Run fedtext's ServerApp (run-config ``overrides``, records under ``output_dir``)
    against ``client_fn``'s clients through Flower's simulation engine: on the Ray head that
    ``FEDTEXT_TEST_RAY_ADDRESS`` names (the test session's), else a Ray instance of its own."""
    address = os.environ.get(RAY_ADDRESS_VAR, "")
    init = {"address": address} if address else {"num_cpus": 2}
    run_simulation(
        server_app=make_server_app({**overrides, "output-dir": output_dir}),
        client_app=ClientApp(client_fn=client_fn),
        num_supernodes=num_supernodes,
        backend_config={"client_resources": {"num_cpus": 2, "num_gpus": 0.0},
                        "init_args": {**init, "include_dashboard": False}},
    )
