"""Run fedbpt through Flower's simulation engine with two faulty clients (test helper).

    python tests/integration/fault_injection.py OUTPUT_DIR

Client 0 uploads NaNs, client 1 an array of the wrong shape, client 2 is honest. The
faulty classes live in ``__main__`` so that Ray ships them to its workers by value.
"""

from __future__ import annotations

import sys

import numpy as np

from fedtext.node.node import make_client

from flower_launch import simulate  # tests/integration/flower_launch.py: run by path, this folder is on sys.path

OVERRIDES = {
    "method": "fedbpt", "num-server-rounds": 2, "shots-per-class": 4, "client-test-size": 8,
    "eval-size": 40, "prompt-length": 4, "max-length": 48, "fedbpt.local-steps": 2, "fedbpt.popsize": 4,
    "fedbpt.intrinsic-dim": 20, "model": "tiny-bert", "weights": "random",
}


def faulty(client, partition_id: int):
    """Wrap the method client a node builds so that its train returns a broken upload."""
    node = client.numpy_client
    honest_build = node.build

    def build():
        method_client = honest_build()
        honest = method_client.train

        def train(arrays, config):
            (up,), n, loss = honest(arrays, config)
            bad = np.full_like(up, np.nan) if partition_id == 0 else up[:-3]
            return [bad], n, loss

        method_client.train = train
        return method_client

    node.build = build
    return client


def client_fn(context):
    client = make_client({**context.run_config, **OVERRIDES}, context.node_config)
    pid = int(context.node_config["partition-id"])
    return faulty(client, pid) if pid < 2 else client


if __name__ == "__main__":
    simulate(OVERRIDES, client_fn, sys.argv[1])
