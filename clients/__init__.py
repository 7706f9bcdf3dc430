"""Client side of every method: ``CLIENTS[method]``, the same keys as ``STRATEGIES``."""

from clients.bbt_fed import BBTFedClient
from clients.fedbpt import FedBPTClient
from clients.feddls import FedDLSClient
from clients.fedprompt import FedPromptClient

CLIENTS = {
    "fedprompt": FedPromptClient,
    "fedbpt": FedBPTClient,
    "feddls": FedDLSClient,
    "bbt-fed": BBTFedClient,
}

__all__ = ["FedDLSClient", "FedBPTClient", "CLIENTS", "BBTFedClient", "FedPromptClient"]
