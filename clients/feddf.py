"""FedDF client: exactly ``fedavg``'s local fine-tuning (FedDF changes only the server)."""

from __future__ import annotations

from clients.fedavg import FedAvgClient


class FedDFClient(FedAvgClient):
    """:class:`FedAvgClient` under FedDF's config (``feddf.local-steps``, ``feddf.lr``, ...)."""
