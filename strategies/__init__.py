"""Server side of every method: one Flower Strategy per module, each citing its paper and
stating what its client must do; ``fedtext.registry.METHODS`` pairs each with its client
and config."""

from strategies.bbt_fed import BBTFed
from strategies.fedavg import FedAvgStrategy
from strategies.fedbpt import FedBPT
from strategies.feddls import FedDLS
from strategies.fedprompt import FedPrompt

__all__ = ["BBTFed", "FedAvgStrategy", "FedBPT", "FedDLS", "FedPrompt"]
