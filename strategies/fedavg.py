"""FedAvg baseline: full fine-tuning of the encoder and a ``linear`` head.

McMahan et al. (2017), the baseline of FedDRS and FeS (``../shared/papers/README.md``);
config and model: :mod:`fedtext.methods.fedavg`.

Client must: load the downloaded weights (every encoder tensor, then ``head.weight``
and ``head.bias``) into its own trainable copy of the backbone, take
``fedavg.local-steps`` AdamW steps of ``fedavg.batch-size`` shots (``fedavg.lr`` for
the encoder, ``fedavg.head-lr`` for the head), and upload every tensor.

Server: the example-weighted mean of every tensor (the base :meth:`aggregate`).
Bytes per client-round, each way: the whole model, ``4 * (#weights) + 128 * (#tensors)``
(all-MiniLM-L6-v2 with a 2-class head: 22,713,986 weights in 105 tensors, 90,869,384 B).
"""

from __future__ import annotations

from fedtext.server.strategy import FedTextStrategy


class FedAvgStrategy(FedTextStrategy):
    """Example-weighted FedAvg of every trained tensor (the base :meth:`aggregate`)."""
