"""fedtext: federated tuning of pretrained language models for text classification.

The package by who runs the code (each folder's ``__init__`` says what runs there and what
it may import; ``tests/unit/test_imports.py`` keeps every folder in its lane):

* :mod:`fedtext.server_app` and :mod:`fedtext.client_app`: the two components Flower loads
  (``[tool.flwr.app.components]``), each composing its side;
* :mod:`fedtext.server`: what runs in the ServerApp (the strategy, sampling, validation,
  SecAgg+'s server side, round records, checkpoints);
* :mod:`fedtext.client`: what runs in a ClientApp to answer a message (the NumPyClient);
* :mod:`fedtext.node`: what a SuperNode's machine holds around its clients (the node that
  builds them, its journal and memory guard, the long-lived node service, warm processes);
* :mod:`fedtext.trust`: DP and robust aggregation, applied by both sides;
* :mod:`fedtext.learning`: the Model, the data and CMA-ES both sides build;
* :mod:`fedtext.common`: the run-config, the registry and the plumbing every process shares;
* :mod:`fedtext.backbone`: the frozen encoder, its heads, soft prompts and dtype;
* :mod:`fedtext.methods`: each method's config and Model (its strategy and client are the
  plug-ins in ``strategies/`` and ``clients/``); :mod:`fedtext.records`: the run records.

Moved names. The modules that sat at the top of ``fedtext/`` until 2026-11-29 (issue 70)
still import under their old names for one release, with a :class:`DeprecationWarning`
naming the new one: :data:`MOVED` lists them (``fedtext.config`` is ``fedtext.common.config``,
the same module object). ``python -m fedtext.node_service`` and ``python -m
fedtext.supernode`` still run too. ``fedtext.client`` and ``fedtext.node`` are folders now;
the names their modules held (``from fedtext.node import Node``) are forwarded the same way.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import CodeType, ModuleType

# old module -> its new home (issue 70); deprecated, removed in the release after next
MOVED: dict[str, str] = {
    "fedtext.comm": "fedtext.common.comm",
    "fedtext.components": "fedtext.common.components",
    "fedtext.config": "fedtext.common.config",
    "fedtext.errors": "fedtext.common.errors",
    "fedtext.metrics": "fedtext.common.metrics",
    "fedtext.progress": "fedtext.common.progress",
    "fedtext.quiet": "fedtext.common.quiet",
    "fedtext.registry": "fedtext.common.registry",
    "fedtext.tasks": "fedtext.common.tasks",
    "fedtext.tracking": "fedtext.common.tracking",
    "fedtext.devices": "fedtext.backbone.devices",
    "fedtext.heads": "fedtext.backbone.heads",
    "fedtext.prompts": "fedtext.backbone.prompts",
    "fedtext.blackbox": "fedtext.learning.blackbox",
    "fedtext.data": "fedtext.learning.data",
    "fedtext.model": "fedtext.learning.model",
    "fedtext.privacy": "fedtext.trust.privacy",
    "fedtext.robust": "fedtext.trust.robust",
    "fedtext.checkpoint": "fedtext.server.checkpoint",
    "fedtext.grid": "fedtext.server.grid",
    "fedtext.round_log": "fedtext.server.round_log",
    "fedtext.sampling": "fedtext.server.sampling",
    "fedtext.secagg": "fedtext.server.secagg",
    "fedtext.server_opt": "fedtext.server.server_opt",
    "fedtext.strategy": "fedtext.server.strategy",
    "fedtext.validation": "fedtext.server.validation",
    "fedtext.attacks": "fedtext.client.attacks",
    "fedtext.local_terms": "fedtext.client.local_terms",
    "fedtext.memory": "fedtext.node.memory",
    "fedtext.node_service": "fedtext.node.service",
    "fedtext.node_state": "fedtext.node.state",
    "fedtext.supernode": "fedtext.node.supernode",
    "fedtext.warm_exec": "fedtext.node.warm_exec",
}
# fedtext's folders by role -> the project packages each may import besides itself and this root
# (each folder's __init__ says the same under "May import", checked by tests/unit/test_imports.py,
# which also holds every import to it; docs/architecture.md's table is rendered from it)
LANES: dict[str, tuple[str, ...]] = {
    "fedtext.common": (),
    "fedtext.records": ("fedtext.common",),
    "fedtext.backbone": ("fedtext.common", "fedtext.records"),
    "fedtext.learning": ("fedtext.common", "fedtext.backbone", "fedtext.records"),
    "fedtext.trust": ("fedtext.common",),
    "fedtext.client": ("fedtext.common", "fedtext.backbone", "fedtext.learning", "fedtext.records", "fedtext.trust"),
    "fedtext.server": ("fedtext.common", "fedtext.backbone", "fedtext.learning", "fedtext.records", "fedtext.trust"),
    "fedtext.node": ("fedtext.common", "fedtext.backbone", "fedtext.learning", "fedtext.records", "fedtext.trust",
                     "fedtext.client"),
    # each method's config and Model, read by both sides; FedDPGu's unlearning is client-side code
    "fedtext.methods": ("fedtext.common", "fedtext.backbone", "fedtext.learning", "fedtext.records", "fedtext.trust",
                        "fedtext.client"),
}
# what Flower loads ([tool.flwr.app.components]): above every folder, each may import any of them
COMPONENTS: tuple[str, ...] = ("fedtext.server_app", "fedtext.client_app")
# old modules whose names are folders now: the folder forwards the module's names
FOLDED: dict[str, str] = {"fedtext.client": "fedtext.client.numpy_client", "fedtext.node": "fedtext.node.node"}


def moved_warning(old: str, new: str, stacklevel: int = 3) -> None:
    """The one deprecation warning an old name gives."""
    warnings.warn(f"{old} moved to {new} (issue 70); the old name goes in the release after next",
                  DeprecationWarning, stacklevel=stacklevel)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name as the new module itself (``sys.modules[old] is
    sys.modules[new]``), so a patch or an ``isinstance`` through either name sees one module."""

    def __init__(self) -> None:
        self.specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=False)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        moved_warning(spec.name, MOVED[spec.name])
        module = importlib.import_module(MOVED[spec.name])
        self.specs[module.__name__] = module.__spec__  # importlib sets the old name's spec on it next
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The new module ran when it was imported: give it back its own spec."""
        module.__spec__ = self.specs[module.__name__]

    def get_code(self, name: str) -> CodeType | None:
        """``python -m <old name>``: runpy runs the new module's code as ``__main__``."""
        moved_warning(name, MOVED[name])
        spec = importlib.util.find_spec(MOVED[name])
        if spec is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"{MOVED[name]} (the new home of {name}) cannot be found")
        return spec.loader.get_code(MOVED[name])


MOVED_FINDER: _Alias = next((f for f in sys.meta_path if isinstance(f, _Alias)), None) or _Alias()
if MOVED_FINDER not in sys.meta_path:
    sys.meta_path.append(MOVED_FINDER)


def forward(folder: str, name: str) -> object:
    """``from fedtext.node import Node`` (a name of the module the folder replaced), with
    the deprecation warning; a submodule or a private name is the folder's own business."""
    if name.startswith("_"):
        raise AttributeError(f"module {folder!r} has no attribute {name!r}")
    new = FOLDED[folder]
    spec = importlib.util.find_spec(f"{folder}.{name}")
    if spec is not None:  # a submodule being imported (``from fedtext.node import service``)
        raise AttributeError(f"module {folder!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(new), name)
    moved_warning(f"{folder}.{name}", f"{new}.{name}", stacklevel=4)  # the line that named it
    return value
