"""The one place a method is named: its config class, one line in :data:`CONFIGS`.

A method's config class (``fedtext/methods/<m>.py``, a :class:`fedtext.config.MethodConfig`)
names everything else about it: its run-config table (``name``), its model
(``model_class``, which its strategy and its client both build), and its strategy and
client as ``"module:Class"`` strings (``strategy = "strategies.fedavg:FedAvgStrategy"``,
``client = "clients.fedavg:FedAvgClient"``), as Flower's ``[tool.flwr.app.components]``
names the apps. So :data:`CONFIGS` is all there is to keep in sync, and
``tests/unit/test_config.py`` checks it (names unique, every string resolving to a strategy and
a client of the same method module).

This module imports no ``strategies/`` or ``clients/`` module, and no core module does
(``tests/unit/test_imports.py``): only the two Flower components, ``fedtext/server_app.py``
and ``fedtext/client_app.py``, :func:`resolve` a config's strings, each its own side.

Adding a method: ``fedtext/methods/<m>.py`` (config + model), ``strategies/<m>.py``,
``clients/<m>.py``, its defaults under ``[tool.flwr.app.config.<m>]`` in pyproject, and
its config class as one line of :data:`CONFIGS` (docs/add-a-method.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from fedtext.config import MethodConfig, RunConfig, kebab
from fedtext.methods.bbt_fed import BBTFedConfig
from fedtext.methods.fedavg import FedAvgConfig
from fedtext.methods.fedbpt import FedBPTConfig
from fedtext.methods.feddls import FedDLSConfig
from fedtext.methods.feddpg import FedDPGConfig
from fedtext.methods.feddrs import FedDFConfig, FedDRSConfig
from fedtext.methods.fedprompt import FedPromptConfig
from fedtext.methods.fedptuning_v2 import FedPTuningV2Config
from fedtext.methods.fes import FedCLSConfig, FedFSLBiasConfig, FedFSLConfig, FeSConfig

# Every method, in the order the dashboard gives out colours (simulations.dashboard_data).
CONFIGS: tuple[type[MethodConfig], ...] = (
    FedPromptConfig,
    BBTFedConfig,
    FedBPTConfig,
    FedDLSConfig,
    FedAvgConfig,
    FedDPGConfig,
    FedPTuningV2Config,
    FedDRSConfig,
    FedDFConfig,
    FeSConfig,
    FedFSLConfig,
    FedFSLBiasConfig,
    FedCLSConfig,
)

# ``method=`` value -> its config class (the config's ``name``, its run-config table).
METHODS: dict[str, type[MethodConfig]] = {config.name: config for config in CONFIGS}


def resolve(spec: str) -> Any:
    """The object a ``"module:Class"`` string names, imported (``importlib``).

    Parameters
    ----------
    spec
        ``"<dotted module>:<attribute>"``, e.g. a config's ``strategy``
        (``"strategies.fedavg:FedAvgStrategy"``); the attribute may be dotted
        (``"module:Outer.Inner"``).

    Returns
    -------
    Any
        The attribute of the imported module.

    Raises
    ------
    ValueError
        ``spec`` is not of the form ``"module:Class"``.
    ImportError
        The module does not exist or lacks the attribute. A module that exists but fails
        to import (a missing dependency of its own) raises its own error unchanged.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name.strip() or not attribute.strip() or ":" in attribute:
        raise ValueError(f"'{spec}' is not a \"module:Class\" string (e.g. \"strategies.fedavg:FedAvgStrategy\")")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name == exc.name or module_name.startswith(f"{exc.name}.")):
            raise  # the module exists; something it imports does not
        raise ImportError(f"'{spec}': there is no module {module_name}") from None
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImportError(f"'{spec}': module {module_name} has no attribute {attribute}") from None
    return obj


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
