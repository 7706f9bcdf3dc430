"""The project's import graph: no circle, and the core never imports a plug-in.

Every ``.py`` under ``fedtext/``, ``strategies/``, ``clients/`` and ``simulations/`` is
parsed with :mod:`ast`; every ``import`` in it counts (module level, inside functions,
under ``if TYPE_CHECKING:``), since each is an import some run can execute. An edge
goes from a module to each project module it names: ``from fedtext import comm`` names
``fedtext.common.comm`` (a submodule), ``from fedtext.common.config import RunConfig`` names
``fedtext.common.config``. Checked:

* no cycle anywhere (each one is reported as ``a -> b -> ... -> a``);
* the core (``fedtext/``) imports no method plug-in (``strategies/``, ``clients/``),
  except the two Flower components, ``fedtext/server_app.py`` and
  ``fedtext/node/node.py`` (the ClientApp's node), which resolve the registry's ``"module:Class"`` strings;
* no module reaches into another one's private names (``_x``; dunders are public):
  neither ``from <project module> import _x`` nor ``<project module>._x`` on a module it
  imported (``import a.b as m``, ``from a import b``, ``import a.b``) or was handed as a
  ``ModuleType`` parameter; what another module needs is public in its owner;
* each of fedtext's folders by role imports only the folders its lane allows (:data:`LANES`,
  written in each folder's ``__init__``: the client side never imports the server's, nothing
  below imports the two Flower components), and the top of ``fedtext/`` is those folders and
  the two components; the modules that moved (issue 70) still import under their old names;
* the dashboard's data layer loads without torch (the dashboard starts in a second):
  tests/integration/test_imports_clean_process.py, in a fresh interpreter.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import fedtext  # the lanes and the moved names are the package's own facts

from ..conftest import REPO

PACKAGES = ("fedtext", "strategies", "clients", "simulations")
PLUG_INS = ("strategies", "clients")
FLOWER_COMPONENTS = frozenset({"fedtext.server_app", "fedtext.node.node"})  # fedtext.client_app loads fedtext.node.node


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
            # the longest project module the name starts with (``fedtext.common.config.RunConfig`` -> ``fedtext.common.config``)
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
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedtext.common.config import X\n"
                     "def f():\n    from fedtext.common import comm\n    import strategies.fes\nfrom . import sibling\n")
    names = set(imported_names(tree, "clients.fes", is_package=False))
    assert {"fedtext.common.config", "fedtext.common.comm", "strategies.fes", "clients.sibling"} <= names
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


LANES = {folder: frozenset(lane) for folder, lane in fedtext.LANES.items()}
COMPONENTS = tuple(name.split(".")[1] for name in fedtext.COMPONENTS)  # fedtext/<name>.py
MAX_MODULES = 12  # a folder a newcomer reads at a glance (issue 70)


def folder_of(module: str) -> str:
    """``fedtext.server.strategy`` -> ``fedtext.server``; outside fedtext, the top package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "fedtext" and len(parts) > 1 else parts[0]


def lane_breaches(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import from one of fedtext's folders into a project package its
    lane does not allow (plug-ins and the two components included)."""
    wrong = []
    for module, targets in sorted(graph.items()):
        lane = LANES.get(folder_of(module))
        if lane is None:
            continue
        for target in sorted(targets):
            into = folder_of(target)
            if into not in lane | {folder_of(module), "fedtext"} and not (into in PLUG_INS and module in FLOWER_COMPONENTS):
                wrong.append(f"{module} -> {target}")
    return wrong


def test_the_lane_check_sees_a_wrong_import():
    graph = {"fedtext.client.numpy_client": {"fedtext.server.strategy", "fedtext.common.config"},
             "fedtext.trust.privacy": {"fedtext.learning.model", "fedtext"},
             "fedtext.common.config": {"fedtext.server_app"},
             "fedtext.server.strategy": {"clients.fes", "fedtext.trust.robust"},
             "fedtext.node.node": {"clients.fes", "fedtext.client.numpy_client"}}
    assert lane_breaches(graph) == ["fedtext.client.numpy_client -> fedtext.server.strategy",
                                    "fedtext.common.config -> fedtext.server_app",
                                    "fedtext.server.strategy -> clients.fes",
                                    "fedtext.trust.privacy -> fedtext.learning.model"]
    assert folder_of("fedtext.node") == "fedtext.node" and folder_of("strategies.fes") == "strategies"


def test_every_folder_imports_only_what_its_lane_allows():
    assert not lane_breaches(import_graph())


def test_the_top_of_fedtext_is_its_folders_by_role_and_the_two_components():
    top = REPO / "fedtext"
    folders = {p.name for p in top.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in top.glob("*.py")} - {"__init__"}
    assert {f"fedtext.{name}" for name in folders} == set(LANES)
    assert modules == set(COMPONENTS)
    for folder in folders:
        doc = ast.get_docstring(ast.parse((top / folder / "__init__.py").read_text())) or ""
        if folder not in ("methods", "records"):  # the role folders say their lane in words too
            said = " ".join(doc.split("May import")[-1].split("Never")[0].split())
            named = set(re.findall(r":mod:`(fedtext\.\w+)`", said))
            assert "May import" in doc and named - {f"fedtext.{folder}"} == LANES[f"fedtext.{folder}"], (folder, named)
        count = len([p for p in (top / folder).glob("*.py") if p.name != "__init__.py"])
        assert count <= MAX_MODULES, f"fedtext/{folder} holds {count} modules"


def test_every_moved_module_imports_under_its_old_name_with_a_warning(recwarn):
    import importlib
    import sys
    import warnings

    import fedtext

    assert len(fedtext.MOVED) == 33
    for old, new in fedtext.MOVED.items():
        assert not (REPO / (old.replace(".", "/") + ".py")).exists(), old
        assert (REPO / (new.replace(".", "/") + ".py")).exists(), new
        sys.modules.pop(old, None)  # another test may have imported it: import it afresh
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert importlib.import_module(old) is importlib.import_module(new)
        assert sys.modules[new].__spec__.name == new  # still the new module's own (pickle, reload, runpy)
        assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught), old
        sys.modules.pop(old, None)
    code = fedtext.MOVED_FINDER.get_code("fedtext.supernode")  # python -m fedtext.supernode still runs
    assert code is not None and code.co_filename.endswith("fedtext/node/supernode.py")
    for folder, module, name in (("fedtext.node", "fedtext.node.node", "Node"),
                                 ("fedtext.client", "fedtext.client.numpy_client", "FedTextClient")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(importlib.import_module(folder), name)
        assert value is getattr(importlib.import_module(module), name)
        assert any(f"{module}.{name}" in str(w.message) for w in caught), folder


def test_the_core_imports_no_plug_in_but_through_the_flower_components():
    graph = import_graph()
    wrong = {m: sorted(t for t in targets if t.split(".")[0] in PLUG_INS)
             for m, targets in sorted(graph.items()) if m.split(".")[0] == "fedtext" and m not in FLOWER_COMPONENTS}
    wrong = {m: t for m, t in wrong.items() if t}
    assert not wrong, f"core modules importing strategies/ or clients/: {wrong}"


def is_private(name: str) -> bool:
    """``_x`` is private; ``__x__`` (``__version__``, ``__file__``) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _source(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module an ``ImportFrom`` imports from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_module_type(annotation: ast.expr | None) -> bool:
    """Whether a parameter's annotation is ``ModuleType`` (``types.ModuleType``, or as a string)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.split(".")[-1] == "ModuleType"
    if isinstance(annotation, ast.Attribute):
        return annotation.attr == "ModuleType"
    return isinstance(annotation, ast.Name) and annotation.id == "ModuleType"


def private_uses(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for each use of another project module's private name in one module."""
    roots = {m.split(".")[0] for m in modules}
    bound: dict[str, str] = {}  # local name -> the project module (or top package) it is
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in roots:
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source = _source(node, module, is_package)
            if source.split(".")[0] not in roots:
                continue
            for alias in node.names:
                dotted = f"{source}.{alias.name}"
                if dotted in modules:
                    bound[alias.asname or alias.name] = dotted
                elif is_private(alias.name) and source != module:
                    yield node.lineno, f"from {source} import {alias.name}"
    handed: dict[ast.AST, set[str]] = {}  # function -> its parameters typed ModuleType
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            names = {a.arg for a in args if _is_module_type(a.annotation)}
            if names:
                handed[node] = names
    for function, names in handed.items():
        for node in ast.walk(function):
            if (isinstance(node, ast.Attribute) and is_private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in names):
                yield node.lineno, f"{node.value.id}.{node.attr} (a module handed in as {node.value.id})"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            dotted = ".".join([bound[value.id], *reversed(chain)])
            if dotted in modules and dotted != module:
                yield node.lineno, f"{dotted}.{node.attr}"


def test_the_private_name_check_sees_each_way_in():
    modules = {"fedtext", "fedtext.a", "fedtext.b", "fedtext.pkg", "fedtext.pkg.c"}
    code = ("import fedtext.a as a\nfrom fedtext import b\nimport fedtext.pkg.c\nfrom fedtext.a import _x, y, __version__\n"
            "from .c import _z\nfrom types import ModuleType\nimport os\n"
            "def f(page: ModuleType, other: int):\n    return page._card, page.card, other._n, os._exit\n"
            "a._y; a.y; b._w; a.__doc__; fedtext.pkg.c._v; self._own\n")
    found = sorted(what for _, what in private_uses(ast.parse(code), "fedtext.pkg.d", False, modules))
    assert found == sorted(["from fedtext.a import _x", "from fedtext.pkg.c import _z", "fedtext.a._y",
                            "fedtext.b._w", "fedtext.pkg.c._v", "page._card (a module handed in as page)"]), found
    # a module's own private names, and a package's, are its own
    assert list(private_uses(ast.parse("import fedtext.a as me\nme._x\nfrom fedtext.a import _y\n"),
                             "fedtext.a", False, modules)) == []


def test_no_module_uses_another_modules_private_names():
    """What another module needs is public in its owner (``fedtext.learning.model.over_bound``,
    ``Backbone.weights_changed``, ``fedtext.records.writer.open_recorders``), so a rename
    inside one module never breaks another silently."""
    modules = project_modules()
    found = [f"{path.relative_to(REPO)}:{line}: {what}"
             for name, path in modules.items()
             for line, what in private_uses(ast.parse(path.read_text(), filename=str(path)), name,
                                            path.name == "__init__.py", set(modules))]
    assert not found, "private names used across modules:\n" + "\n".join(found)
