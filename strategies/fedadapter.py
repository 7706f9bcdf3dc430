"""FedAdapter: Houlsby bottleneck adapters (Houlsby et al., ICML 2019) in the frozen encoder,
FedAvg. Config and model: :mod:`fedtext.methods.fedadapter`.

Client must: load the downloaded adapter weights (``down``/``up``, two adapters per layer),
the layers' LayerNorms (``fedadapter.train-layernorm``) and ``head.*`` into its own copy of the
encoder, take ``fedadapter.local-steps`` AdamW steps of ``fedadapter.batch-size`` shots
(``fedadapter.lr``; ``fedadapter.head-lr`` for the head) and upload them.

Server: the example-weighted mean of every array (the base :meth:`aggregate`). Bytes per
client-round, each way: ``2 L (4 (2 m d + m + d) + 512)`` for the adapters, ``4 L (4 d + 128)``
for the LayerNorms (MiniLM-L6, m = 64: 2,426,880 B; a 2-class linear head adds 3,336 B).
"""

from __future__ import annotations

from fedtext.server.strategy import FedTextStrategy


class FedAdapter(FedTextStrategy):
    """Example-weighted FedAvg of the adapters and LayerNorms (the base :meth:`aggregate`).

    A class of its own although it adds nothing: the registry names one strategy per method,
    logs and records show its name, and a reader finds each method's server side at
    strategies/<method>.py."""
