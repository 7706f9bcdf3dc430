"""Server side of every method: one Flower Strategy per module, each citing its paper and
stating what its client must do; ``fedtext.registry.METHODS`` pairs each with its client
and config."""

from strategies.bbt_fed import BBTFed
from strategies.fedavg import FedAvgStrategy
from strategies.fedbpt import FedBPT
from strategies.feddf import FedDF
from strategies.feddls import FedDLS
from strategies.feddpg import FedDPG
from strategies.feddrs import FedDRS
from strategies.fes import FedCLS, FedFSL, FedFSLBias, FeS
from strategies.fedprompt import FedPrompt
from strategies.fedptuning_v2 import FedPTuningV2

__all__ = ["BBTFed", "FeS", "FedAvgStrategy", "FedBPT", "FedCLS", "FedDF", "FedDLS", "FedDPG", "FedDRS", "FedFSL",
           "FedFSLBias", "FedPTuningV2", "FedPrompt"]
