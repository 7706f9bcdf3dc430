"""Client side of every method: ``CLIENTS[method]``, the same keys as ``STRATEGIES``."""

from clients.bbt_fed import BBTFedClient
from clients.fedprompt import FedPromptClient

CLIENTS = {
    "fedprompt": FedPromptClient,
    "bbt-fed": BBTFedClient,
}

__all__ = ["CLIENTS", "BBTFedClient", "FedPromptClient"]
