"""Client side of every method: ``CLIENTS[method]``, the same keys as ``STRATEGIES``."""

from clients.fedbpt import FedBPTClient
from clients.bbt_fed import BBTFedClient
from clients.fedprompt import FedPromptClient

CLIENTS = {
    "fedprompt": FedPromptClient,
    "fedbpt": FedBPTClient,
    "bbt-fed": BBTFedClient,
}

__all__ = ["FedBPTClient", "CLIENTS", "BBTFedClient", "FedPromptClient"]
