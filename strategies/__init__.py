"""Server side of every method: ``STRATEGIES[method]`` (explicit registry, tested).

Each module holds one ``flwr`` Strategy subclass that cites its paper and states
what its client must do. ``clients.CLIENTS`` has exactly the same keys.
"""

from strategies.bbt_fed import BBTFed
from strategies.fedbpt import FedBPT
from strategies.feddls import FedDLS
from strategies.fedprompt import FedPrompt

STRATEGIES = {
    "fedprompt": FedPrompt,
    "fedbpt": FedBPT,
    "feddls": FedDLS,
    "bbt-fed": BBTFed,
}

__all__ = ["FedDLS", "FedBPT", "STRATEGIES", "BBTFed", "FedPrompt"]
