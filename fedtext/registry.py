"""The one place a method is named: ``METHODS[name] = Method(strategy, client, config)``.

A method's config class names its model (``config.model_class``), which its strategy
and client both build; so this table is all there is to keep in sync, and
``tests/test_config.py`` checks it. Besides the two Flower components
(``server_app``, ``client_app``), this is the only core module that imports
``strategies/`` and ``clients/``.

Adding a method: ``fedtext/methods/<m>.py`` (config + model), ``strategies/<m>.py``,
``clients/<m>.py``, its defaults under ``[tool.flwr.app.config.<m>]`` in pyproject, and
one line below (docs/add-a-method.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clients.bbt_fed import BBTFedClient
from clients.fedavg import FedAvgClient
from clients.fedbpt import FedBPTClient
from clients.feddf import FedDFClient
from clients.feddls import FedDLSClient
from clients.feddpg import FedDPGClient
from clients.feddrs import FedDRSClient
from clients.fedprompt import FedPromptClient
from clients.fedptuning_v2 import FedPTuningV2Client
from clients.fes import FewShotClient
from fedtext.client import FedTextClient
from fedtext.config import MethodConfig, RunConfig, kebab
from fedtext.methods.bbt_fed import BBTFedConfig
from fedtext.methods.fedavg import FedAvgConfig
from fedtext.methods.fedbpt import FedBPTConfig
from fedtext.methods.feddls import FedDLSConfig
from fedtext.methods.feddpg import FedDPGConfig
from fedtext.methods.feddrs import FedDFConfig, FedDRSConfig
from fedtext.methods.fes import FedCLSConfig, FedFSLBiasConfig, FedFSLConfig, FeSConfig
from fedtext.methods.fedprompt import FedPromptConfig
from fedtext.methods.fedptuning_v2 import FedPTuningV2Config
from fedtext.strategy import FedTextStrategy
from strategies.bbt_fed import BBTFed
from strategies.fedavg import FedAvgStrategy
from strategies.fedbpt import FedBPT
from strategies.feddf import FedDF
from strategies.feddls import FedDLS
from strategies.feddpg import FedDPG
from strategies.feddrs import FedDRS
from strategies.fedprompt import FedPrompt
from strategies.fedptuning_v2 import FedPTuningV2
from strategies.fes import FewShotStrategy


@dataclass(frozen=True)
class Method:
    """A method's three classes."""

    strategy: type[FedTextStrategy]
    client: type[FedTextClient]
    config: type[MethodConfig]


METHODS: dict[str, Method] = {
    "fedprompt": Method(FedPrompt, FedPromptClient, FedPromptConfig),
    "bbt-fed": Method(BBTFed, BBTFedClient, BBTFedConfig),
    "fedbpt": Method(FedBPT, FedBPTClient, FedBPTConfig),
    "feddls": Method(FedDLS, FedDLSClient, FedDLSConfig),
    "fedavg": Method(FedAvgStrategy, FedAvgClient, FedAvgConfig),
    "feddpg": Method(FedDPG, FedDPGClient, FedDPGConfig),
    "fedptuning-v2": Method(FedPTuningV2, FedPTuningV2Client, FedPTuningV2Config),
    "feddrs": Method(FedDRS, FedDRSClient, FedDRSConfig),
    "feddf": Method(FedDF, FedDFClient, FedDFConfig),
    "fes": Method(FewShotStrategy, FewShotClient, FeSConfig),
    "fedfsl": Method(FewShotStrategy, FewShotClient, FedFSLConfig),
    "fedfsl-bias": Method(FewShotStrategy, FewShotClient, FedFSLBiasConfig),
    "fedcls": Method(FewShotStrategy, FewShotClient, FedCLSConfig),
}


def make_config(method: str, **fields: Any) -> RunConfig:
    """A validated :class:`RunConfig` from snake_case fields, shared or the method's own
    (``make_config("feddls", prompt_length=4, phi=3)``); for tests and scripts."""
    shared = {f.name for f in RunConfig.shared_keys().values()}
    flat: dict[str, Any] = {"method": method}
    for name, value in fields.items():
        flat[kebab(name) if name in shared else METHODS[method].config.key(name)] = value
    return RunConfig.from_run_config(flat, METHODS)
