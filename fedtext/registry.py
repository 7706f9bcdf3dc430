"""The one place a method is named: its config class, one line in :data:`CONFIGS`.

A method's config class (``fedtext/methods/<m>/config.py``, a
:class:`fedtext.config.MethodConfig`) names everything else about it: its run-config table
(``name``), and as ``"module:Class"`` strings, as Flower's ``[tool.flwr.app.components]``
names the apps, its model (``model = "fedtext.methods.fedavg.model:FedAvgModel"``, which
its strategy and its client both build), its strategy (``strategy =
"strategies.fedavg:FedAvgStrategy"``) and its client (``client =
"clients.fedavg:FedAvgClient"``). The config modules import no torch, so neither does this
one (the dashboard and the compare runner read it). So :data:`CONFIGS` is all there is to keep in sync, and
``tests/unit/test_config.py`` checks it (names unique, every string resolving to a strategy and
a client of the same method module).

This module imports no ``strategies/`` or ``clients/`` module, and no core module does
(``tests/unit/test_imports.py``): only the two Flower components, ``fedtext/server_app.py``
and ``fedtext/client_app.py``, resolve a config's strategy and client strings
(:func:`fedtext.components.resolve`), each its own side.

Adding a method: ``fedtext/methods/<m>/`` (``config.py`` + ``model.py``), ``strategies/<m>.py``,
``clients/<m>.py``, its config class as one line of :data:`CONFIGS`, then
``python tools/run_config_docs.py`` writes its pyproject table and docs/run-config.md rows
from the config (docs/add-a-method.md). Nothing else names a method: the tests, the guide
(README's table) and the dashboard read this tuple.
"""

from __future__ import annotations

from typing import Any

from fedtext.config import MethodConfig, RunConfig, kebab
from fedtext.methods.bbt_fed.config import BBTFedConfig
from fedtext.methods.fedavg.config import FedAvgConfig
from fedtext.methods.fedbpt.config import FedBPTConfig
from fedtext.methods.feddls.config import FedDLSConfig
from fedtext.methods.feddpg.config import FedDPGConfig
from fedtext.methods.feddrs.config import FedDFConfig, FedDRSConfig
from fedtext.methods.fedprompt.config import FedPromptConfig
from fedtext.methods.fedptuning_v2.config import FedPTuningV2Config
from fedtext.methods.fes.config import FedCLSConfig, FedFSLBiasConfig, FedFSLConfig, FeSConfig

# Every method, in the order of README's table (simulations.guide), the run-config tables
# (tools/run_config_docs.py) and the dashboard's colours (simulations.dashboard_data).
CONFIGS: tuple[type[MethodConfig], ...] = (
    FedPromptConfig,
    BBTFedConfig,
    FedBPTConfig,
    FedDLSConfig,
    FedDPGConfig,
    FedPTuningV2Config,
    FedAvgConfig,
    FedDRSConfig,
    FedDFConfig,
    FeSConfig,
    FedFSLConfig,
    FedFSLBiasConfig,
    FedCLSConfig,
)

# ``method=`` value -> its config class (the config's ``name``, its run-config table).
METHODS: dict[str, type[MethodConfig]] = {config.name: config for config in CONFIGS}


def make_config(method: str, **fields: Any) -> RunConfig:
    """A validated :class:`RunConfig` from snake_case fields, shared or the method's own
    (``make_config("feddls", prompt_length=4, phi=3)``); for tests and scripts.

    Parameters
    ----------
    method
        A key of :data:`METHODS`.
    **fields
        Shared keys (:class:`RunConfig` fields) and the method's own keys (its config's
        fields), by their snake_case names.

    Returns
    -------
    RunConfig
        Validated as a run-config with these keys would be.
    """
    shared = {f.name for f in RunConfig.shared_keys().values()}
    flat: dict[str, Any] = {"method": method}
    for name, value in fields.items():
        flat[kebab(name) if name in shared else METHODS[method].key(name)] = value
    return RunConfig.from_run_config(flat, METHODS)
