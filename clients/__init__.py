"""Client side of every method: one ``NumPyClient`` per module; ``fedtext.registry.METHODS``
pairs each with its strategy and config."""

from clients.bbt_fed import BBTFedClient
from clients.fedavg import FedAvgClient
from clients.fedbpt import FedBPTClient
from clients.feddf import FedDFClient
from clients.feddls import FedDLSClient
from clients.feddrs import FedDRSClient
from clients.feddpg import FedDPGClient
from clients.fedprompt import FedPromptClient
from clients.fedptuning_v2 import FedPTuningV2Client

__all__ = ["BBTFedClient", "FedAvgClient", "FedBPTClient", "FedDFClient", "FedDLSClient", "FedDPGClient",
           "FedDRSClient", "FedPTuningV2Client", "FedPromptClient"]
