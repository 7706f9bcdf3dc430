"""Resolve a ``"module:Class"`` string (Flower's ``[tool.flwr.app.components]`` convention).

A method's config names its model, strategy and client this way
(:class:`fedtext.common.config.MethodConfig`), so that reading a config imports neither torch nor
a plug-in. A leaf module: it imports nothing of the project.
"""

from __future__ import annotations

import importlib
from typing import Any


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
