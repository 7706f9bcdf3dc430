"""FedAdapter client: AdamW on the adapters, LayerNorms (and the ``linear`` head), as fedavg
trains its weights."""

from __future__ import annotations

from clients.fedavg import FedAvgClient
from fedtext.methods.fedadapter.model import AdapterModel


class FedAdapterClient(FedAvgClient):
    """:class:`FedAvgClient`'s local loop on :class:`AdapterModel`'s copy: its trainable weights
    are the adapters and, with ``train-layernorm``, the layers' LayerNorms (``fedadapter.lr``),
    and the head (``fedadapter.head-lr``); the pretrained weights get no gradient. Uploads them,
    float32.

    A class of its own although it adds no code (only the type of its model): the registry
    names one client per method, logs and records show its name, and a reader finds each
    method's client side at clients/<method>.py."""

    model: AdapterModel
