"""Client side of every method: one ``NumPyClient`` per module; ``fedtext.registry.METHODS``
pairs each with its strategy and config."""

from clients.bbt_fed import BBTFedClient
from clients.fedavg import FedAvgClient
from clients.fedbpt import FedBPTClient
from clients.feddf import FedDFClient
from clients.feddls import FedDLSClient
from clients.feddrs import FedDRSClient
from clients.feddpg import FedDPGClient
from clients.fes import FedCLSClient, FedFSLBiasClient, FedFSLClient, FeSClient
from clients.fedprompt import FedPromptClient
from clients.fedptuning_v2 import FedPTuningV2Client

__all__ = ["BBTFedClient", "FeSClient", "FedAvgClient", "FedBPTClient", "FedCLSClient", "FedDFClient", "FedDLSClient",
           "FedDPGClient", "FedDRSClient", "FedFSLBiasClient", "FedFSLClient", "FedPTuningV2Client", "FedPromptClient"]
