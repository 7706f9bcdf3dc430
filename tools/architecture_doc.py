"""docs/architecture.md's generated blocks: fedtext's folders by role, and the moved names.

    python tools/generated.py            # writes them (with every other page's blocks)

``roles``: one row per folder of ``fedtext/`` (:data:`fedtext.LANES`, in that order) with the
first line of its ``__init__`` docstring (what runs there), its modules and what it may import;
then the two Flower components. ``moved``: every old module name that still imports for one
release (:data:`fedtext.MOVED`, :data:`fedtext.FOLDED`) and its new home. Both read the package's
own facts and docstrings with :mod:`ast`: nothing here imports torch or a method.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/architecture_doc.py` from anywhere
    sys.path.insert(0, str(ROOT))

import fedtext  # noqa: E402  (light: the standard library only)


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring (what runs there), reST roles and double
    backquotes made markdown."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", first)
    return first.replace("``", "`").replace("|", "\\|")


def short(package: str) -> str:
    """``fedtext.common`` -> ``common``."""
    return package.split(".", 1)[1]


def render_roles() -> str:
    """The table of folders by role, from :data:`fedtext.LANES` and each ``__init__``."""
    rows = ["| folder | what runs there | modules | may import |", "|---|---|---|---|"]
    for folder, lane in fedtext.LANES.items():
        path = ROOT / folder.replace(".", "/")
        modules = sorted(p.stem for p in path.glob("*.py") if p.name != "__init__.py")
        subpackages = sorted(p.name + "/" for p in path.iterdir() if (p / "__init__.py").exists())
        listed = ", ".join(f"`{m}`" for m in modules + subpackages)
        allowed = ", ".join(f"`{short(p)}`" for p in lane) or "nothing of the project"
        rows.append(f"| `fedtext/{short(folder)}/` | {summary(path / '__init__.py')} | {listed} | {allowed} |")
    for component in fedtext.COMPONENTS:
        path = ROOT / (component.replace(".", "/") + ".py")
        rows.append(f"| `fedtext/{path.name}` | {summary(path)} | (a Flower component) | any folder |")
    return "\n".join(rows) + "\n"


def render_moved() -> str:
    """Every deprecated old name and where it lives now."""
    rows = ["| old name (deprecated) | new home |", "|---|---|"]
    rows += [f"| `{old}` | `{new}` |" for old, new in sorted(fedtext.MOVED.items())]
    rows += [f"| `{old}.<name>` (now a folder) | `{new}.<name>` |" for old, new in sorted(fedtext.FOLDED.items())]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render_roles())
    print(render_moved())
