"""Simulated poisoning (``attack``, ``attack-partitions``, ``attack-scale``): what a lying
client sends, so that the server's defences are measured, not asserted.

The clients of the partitions in ``attack-partitions`` train honestly, then change their fit
reply (:meth:`fedtext.client.numpy_client.FedTextClient.fit`) by one of :data:`ATTACKS`; every other client
is honest. ``x_t`` is the global arrays the client was sent, ``x_k`` its honest upload,
``Δ = x_k − x_t``:

* ``weight-lie``: the honest arrays, but the example count claimed is the client's whole
  partition (train, test and unlabelled rows: the most the server's check allowed before
  issue 58, when it bounded a claim by the partition rather than by the examples it assigned);
* ``scale``: ``x_t + s·Δ`` with s = ``attack-scale`` (default 1,000: the issue's 1,000× update);
* ``sign-flip``: ``x_t − Δ``, the honest update reversed: as long as an honest one, so no norm
  check can tell it apart, only the direction.

Only methods whose server averages arrays take an attack (an upload and the global arrays
are then the same arrays): refused in one line otherwise
(:meth:`fedtext.common.config.RunConfig.check_composition`). The records name no attacker; the
experiment's config (``config.json``) does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedtext.common.config import RunConfig
from fedtext.trust.clipping import along


@dataclass(frozen=True)
class Reply:
    """What an attack reads and returns: the upload arrays and the example count claimed."""

    arrays: list[np.ndarray]
    num_examples: int


#: ``attack`` -> ``(cfg, x_t, honest reply, partition rows) -> poisoned reply``. ``none`` is the
#: honest reply (no client applies it: :func:`for_client` returns ``None``).
ATTACKS: dict[str, Callable[[RunConfig, list[np.ndarray], Reply, int], Reply]] = {
    "none": lambda cfg, sent, reply, rows: reply,
    "weight-lie": lambda cfg, sent, reply, rows: Reply(reply.arrays, rows),
    "scale": lambda cfg, sent, reply, rows: Reply(along(sent, reply.arrays, cfg.attack_scale), reply.num_examples),
    "sign-flip": lambda cfg, sent, reply, rows: Reply(along(sent, reply.arrays, -1.0), reply.num_examples),
}


def for_client(cfg: RunConfig, partition_id: int | str) -> Callable[[list[np.ndarray], Reply, int], Reply] | None:
    """The attack the client of ``partition_id`` applies to its fit replies, or ``None`` (honest)."""
    if cfg.attack == "none" or not str(partition_id).isdigit() or int(partition_id) not in cfg.attack_partition_set:
        return None
    attack = ATTACKS[cfg.attack]
    return lambda sent, reply, rows: attack(cfg, sent, reply, rows)
