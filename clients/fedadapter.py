"""FedAdapter client: AdamW on the adapters, LayerNorms (and the ``linear`` head), as fedavg
trains its weights."""

from __future__ import annotations

from clients.fedavg import FedAvgClient
from fedtext.methods.fedadapter.model import AdapterModel


class FedAdapterClient(FedAvgClient):
    """:class:`FedAvgClient`'s local loop on :class:`AdapterModel`'s copy: its trainable weights
    are the adapters and, with ``train-layernorm``, the layers' LayerNorms (``fedadapter.lr``),
    and the head (``fedadapter.head-lr``); the pretrained weights get no gradient. Uploads them,
    float32."""

    model: AdapterModel
