"""FedAvg's model: the whole network's trainable weights."""

from __future__ import annotations

from fedtext.learning.model import NetworkModel


class FedAvgModel(NetworkModel):
    """Every weight trains and travels (``trainable() == "all"``)."""
