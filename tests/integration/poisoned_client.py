"""Run fedprompt through Flower's simulation engine with one poisoning client (test helper).

    python tests/integration/poisoned_client.py OUTPUT_DIR

Client 0 sends finite poison, a different kind each round (issue 35): round 1 a prompt
of 1e30 (with a metric fedprompt does not declare, ``dls_version="abc"``: issue 45),
round 2 the weight lie of issue 58 (``num_examples`` = its partition's every row, where it trained on
its 4 x 2 labelled shots: the old bound, the partition, let it through), round 3 ``queries="lots"``; its evaluate reply lacks
``accuracy`` in rounds 1 and 2, and in round 3 claims to be partition 1 with an accuracy
of 0 (issue 45: it overwrote client 1's). Clients 1 and 2 are honest. The faulty wrapper
lives in ``__main__`` so that Ray ships it to its workers by value.

    python tests/integration/poisoned_client.py OUTPUT_DIR fedkseed

runs fedkseed instead, client 0 sending issue 58's seed attack: its honest per-seed sums with
30,000 on one seed in round 1 and on every seed in round 2.
"""

from __future__ import annotations

import sys

import numpy as np

from fedtext.node.node import make_client

from flower_launch import simulate  # tests/integration/flower_launch.py: run by path, this folder is on sys.path

OVERRIDES = {
    "method": "fedprompt", "num-server-rounds": 3, "shots-per-class": 4, "client-test-size": 8,
    "eval-size": 40, "prompt-length": 4, "max-length": 48, "fedprompt.local-steps": 2,
    "model": "tiny-bert", "weights": "random",  # the engine is tested, not the weights
}


def patched(client, patch):
    """Wrap the node of ``client`` so that every method client it builds is first handed to
    ``patch``, which replaces its hooks."""
    node = client.numpy_client
    honest_build = node.build

    def build():
        method_client = honest_build()
        patch(method_client)
        return method_client

    node.build = build
    return client


def poison(method_client):
    """Client 0's fit and evaluate replies, poisoned a different way each round (module docstring)."""
    honest_fit, honest_eval = method_client.fit, method_client.evaluate

    def fit(arrays, config):
        up, n, metrics = honest_fit(arrays, config)
        r = int(config["server_round"])
        if r == 1:
            up = [np.full_like(up[0], 1e30)]
            metrics = {**metrics, "dls_version": "abc"}
        elif r == 2:
            data = method_client.data
            n = len(data.train) + len(data.test) + len(data.unlabeled)
        else:
            metrics = {**metrics, "queries": "lots"}
        return up, n, metrics

    def evaluate(arrays, config):
        loss, n, metrics = honest_eval(arrays, config)
        if int(config["server_round"]) == 3:
            return loss, n, {**metrics, "partition_id": 1, "accuracy": 0.0}
        return loss, n, {k: v for k, v in metrics.items() if k != "accuracy"}

    method_client.fit, method_client.evaluate = fit, evaluate


def seed_attack(method_client):
    """fedkseed's client 0: 30,000 on seed 0 (round 1), on every seed (round 2)."""
    honest_fit = method_client.fit

    def fit(arrays, config):
        up, n, metrics = honest_fit(arrays, config)
        g = np.array(up[0], copy=True)
        if int(config["server_round"]) == 1:
            g[0] = 30_000.0
        else:
            g[:] = 30_000.0
        return [g], n, metrics

    method_client.fit = fit


KSEED_OVERRIDES = {
    "method": "fedkseed", "num-server-rounds": 2, "shots-per-class": 4, "client-test-size": 8, "eval-size": 40,
    "max-length": 48, "fedkseed.seeds": 8, "fedkseed.batch-size": 4,  # its default 32 local steps: the old bound 32 x 1,000 passed 30,000
    "model": "tiny-bert", "weights": "random",
}
MODES = {"fedprompt": (OVERRIDES, poison), "fedkseed": (KSEED_OVERRIDES, seed_attack)}


def client_fn_for(mode):
    overrides, attack = MODES[mode]

    def client_fn(context):
        client = make_client({**context.run_config, **overrides}, context.node_config)
        return patched(client, attack) if int(context.node_config["partition-id"]) == 0 else client

    return client_fn


if __name__ == "__main__":
    mode = sys.argv[2] if len(sys.argv) > 2 else "fedprompt"
    simulate(MODES[mode][0], client_fn_for(mode), sys.argv[1])
