"""The project's import graph: no circle, and the core never imports a plug-in.

Every ``.py`` under ``fedtext/``, ``strategies/``, ``clients/`` and ``simulations/`` is
parsed with :mod:`ast`; every ``import`` in it counts (module level, inside functions,
under ``if TYPE_CHECKING:``), since each is an import some run can execute. An edge
goes from a module to each project module it names: ``from fedtext import comm`` names
``fedtext.comm`` (a submodule), ``from fedtext.config import RunConfig`` names
``fedtext.config``. Checked:

* no cycle anywhere (each one is reported as ``a -> b -> ... -> a``);
* the core (``fedtext/``) imports no method plug-in (``strategies/``, ``clients/``),
  except the two Flower components, ``fedtext/server_app.py`` and
  ``fedtext/client_app.py``, which resolve the registry's ``"module:Class"`` strings;
* the dashboard's data layer loads without torch (the dashboard starts in a second):
  tests/integration/test_imports_clean_process.py, in a fresh interpreter.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from ..conftest import REPO

PACKAGES = ("fedtext", "strategies", "clients", "simulations")
PLUG_INS = ("strategies", "clients")
FLOWER_COMPONENTS = frozenset({"fedtext.server_app", "fedtext.client_app"})


def module_name(path: Path) -> str:
    """``fedtext/methods/fes/config.py`` -> ``fedtext.methods.fes.config``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    """Every project module (dotted name -> file), packages included."""
    return {module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names one module's imports name, anywhere in its code: ``import a.b``
    gives ``a.b``; ``from a import b`` gives ``a.b`` and ``a`` (``a.b`` counts where it is a
    module); relative imports are resolved against ``module``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            yield source
            yield from (f"{source}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Project module -> the project modules it imports (itself excluded)."""
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str] = set()
        for dotted in imported_names(tree, name, path.name == "__init__.py"):
            # the longest project module the name starts with (``fedtext.config.RunConfig`` -> ``fedtext.config``)
            parts = dotted.split(".")
            for i in range(len(parts), 0, -1):
                if ".".join(parts[:i]) in modules:
                    targets.add(".".join(parts[:i]))
                    break
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module
    (Tarjan's algorithm, then a path back to the component's first module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [cycle_through(graph, set(c), c[0]) for c in components]


def cycle_through(graph: dict[str, set[str]], component: set[str], start: str) -> list[str]:
    """A shortest path ``start -> ... -> start`` inside ``component`` (breadth first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"{start} is in no cycle of {sorted(component)}")  # pragma: no cover


def test_the_graph_sees_every_kind_of_import():
    """The parser finds imports inside functions and TYPE_CHECKING blocks, and submodules
    named by ``from package import module``."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedtext.config import X\n"
                     "def f():\n    from fedtext import comm\n    import strategies.fes\nfrom . import sibling\n")
    names = set(imported_names(tree, "clients.fes", is_package=False))
    assert {"fedtext.config", "fedtext.comm", "strategies.fes", "clients.sibling"} <= names
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_core_imports_no_plug_in_but_through_the_flower_components():
    graph = import_graph()
    wrong = {m: sorted(t for t in targets if t.split(".")[0] in PLUG_INS)
             for m, targets in sorted(graph.items()) if m.split(".")[0] == "fedtext" and m not in FLOWER_COMPONENTS}
    wrong = {m: t for m, t in wrong.items() if t}
    assert not wrong, f"core modules importing strategies/ or clients/: {wrong}"
