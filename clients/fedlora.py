"""FedLoRA client: AdamW on the LoRA factors (and the ``linear`` head), as fedavg trains its weights."""

from __future__ import annotations

from clients.fedavg import FedAvgClient
from fedtext.methods.fedlora.model import LoRAModel


class FedLoRAClient(FedAvgClient):
    """:class:`FedAvgClient`'s local loop on :class:`LoRAModel`'s copy: its trainable weights
    are the LoRA factors (``fedlora.lr``; B only with ``freeze-a``) and the head
    (``fedlora.head-lr``); the pretrained weights get no gradient. Dropout (the encoder's and
    ``fedlora.dropout`` on the LoRA branch) is on while training, with a seeded mask per client
    and round. Uploads the factors and the head, float32.

    A class of its own although it adds no code (only the type of its model): the registry
    names one client per method, logs and records show its name, and a reader finds each
    method's client side at clients/<method>.py."""

    model: LoRAModel
