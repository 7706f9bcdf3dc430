"""The one place a method is named: its config class, one line in :data:`REGISTERED`.

A method's config class (``fedtext/methods/<m>/config.py``, a
:class:`fedtext.common.config.MethodConfig`) names everything else about it: its run-config table
(``name``), and as ``"module:Class"`` strings, as Flower's ``[tool.flwr.app.components]``
names the apps, its model (``model = "fedtext.methods.fedavg.model:FedAvgModel"``, which
its strategy and its client both build), its strategy (``strategy =
"strategies.fedavg:FedAvgStrategy"``) and its client (``client =
"clients.fedavg:FedAvgClient"``). The config modules import no torch, so neither does this
one (the dashboard and the compare runner read it). So :data:`REGISTERED` is all there is to keep in sync, and
``tests/unit/test_config.py`` checks it (names unique, every string resolving to a strategy and
a client of the same method module).

This module imports no ``strategies/`` or ``clients/`` module, and no core module does
(``tests/unit/test_imports.py``): only the two Flower components, ``fedtext/server_app.py``
and ``fedtext/node/node.py``, resolve a config's strategy and client strings
(:func:`fedtext.common.components.resolve`), each its own side.

Adding a method: ``fedtext/methods/<m>/`` (``config.py`` + ``model.py``), ``strategies/<m>.py``,
``clients/<m>.py``, its config class as one ``"module:Class"`` line of :data:`REGISTERED`, then
``python tools/run_config_docs.py`` writes its pyproject table and docs/run-config.md rows
from the config (docs/add-a-method.md). Nothing else names a method: the tests, the guide
(README's table) and the dashboard read this tuple.
"""

from __future__ import annotations

from typing import Any

from fedtext.common.components import resolve
from fedtext.common.config import MethodConfig, RunConfig, kebab

# Every method's config class as a "module:Class" string, one line each, in the order of
# README's table (simulations.guide), the run-config tables (tools/run_config_docs.py) and
# the dashboard's colours (simulations.dashboard_data). Strings, as a config names its model,
# strategy and client: adding a method is this one line (config modules import no torch).
REGISTERED: tuple[str, ...] = (
    "fedtext.methods.fedprompt.config:FedPromptConfig",
    "fedtext.methods.bbt_fed.config:BBTFedConfig",
    "fedtext.methods.fedbpt.config:FedBPTConfig",
    "fedtext.methods.feddls.config:FedDLSConfig",
    "fedtext.methods.feddpg.config:FedDPGConfig",
    "fedtext.methods.fedptuning_v2.config:FedPTuningV2Config",
    "fedtext.methods.fedavg.config:FedAvgConfig",
    "fedtext.methods.fedlora.config:FedLoRAConfig",
    "fedtext.methods.fedadapter.config:FedAdapterConfig",
    "fedtext.methods.fedkseed.config:FedKSeedConfig",
    "fedtext.methods.feddrs.config:FedDRSConfig",
    "fedtext.methods.feddrs.config:FedDFConfig",
    "fedtext.methods.fes.config:FeSConfig",
    "fedtext.methods.fes.config:FedFSLConfig",
    "fedtext.methods.fes.config:FedFSLBiasConfig",
    "fedtext.methods.fes.config:FedCLSConfig",
)
# The config classes, imported (each module once).
CONFIGS: tuple[type[MethodConfig], ...] = tuple(resolve(spec) for spec in REGISTERED)

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
