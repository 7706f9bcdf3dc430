"""docs/methods.md's generated block: every registered method, from its config and its record.

    python tools/generated.py            # writes it (with README's and docs/testing.md's blocks)

What a method does and what it sends are its config's words (:class:`fedtext.common.config.MethodConfig`'s
``summary``, ``description``, ``travels``, ``page``); what it sent is read from the committed
record its config's ``results`` names (``simulations/results/<results>/runs/*/``, through
:mod:`fedtext.records`' readers): bytes up and down per client-round, exact, from every round
of its finished runs (the runs labelled with its name: the compare runner's label is the
run's ``run-name``, else its method), and its trainable parameters (``config.json``'s
``trainable-parameters``). Nothing here loads a model or a backbone: it reads configs and
JSON, so the docs tier (tests/docs/test_generated.py) renders it in well under a second.

The block is one table, one row per registered method in registry order
(:data:`fedtext.common.registry.CONFIGS`), then one section per method with its description.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/methods_doc.py` from anywhere
    sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from fedtext.common.config import MethodConfig

RESULTS = ROOT / "simulations" / "results"
NO_RECORD = "no committed record yet"
WIDTH = 100  # a section's lines
# What every registered config declares itself (not inherited from the config it extends), and what it says.
DECLARED = {
    "description": "what its client does and what its server does, in words",
    "travels": "what travels per client-round, as a formula with no worked figures",
}
HEAD = ("`method=`", "what it tunes", "what travels per client-round", "bytes up / client-round",
        "bytes down / client-round", "trainable parameters", "record", "runs privately ([privacy.md](privacy.md))")
# The privacy mechanisms as the guide names them (MethodConfig.privacy's keys: fedtext.common.config.PRIVACY)
PRIVATE = {"dp-central": "central DP", "dp-local": "local DP", "secagg": "SecAgg+"}


def private(config: type[MethodConfig]) -> str:
    """The guide's cell of what a method's config declares it can take (its defaults' settings:
    ``effective_privacy``), "no" when nothing; docs/privacy.md says why not."""
    supported, _ = config().effective_privacy()
    return ", ".join(name for key, name in PRIVATE.items() if key in supported) or "no"


class UndeclaredText(ValueError):
    """A registered config that does not declare :data:`DECLARED`'s texts itself."""


def declared(config: type[MethodConfig], attr: str) -> str:
    """``config``'s own ``attr`` (one of :data:`DECLARED`); raises :class:`UndeclaredText`, naming
    the config and what to write, when it is empty or only inherited (a config that extends
    another, as ``feddrs`` extends ``fedavg``'s, must say what it does differently)."""
    where = f"{config.__module__}:{config.__qualname__}"
    text = vars(config).get(attr, "")
    if isinstance(text, str) and text.strip():
        return text.strip()
    parents = [c.__qualname__ for c in config.__mro__[1:] if str(vars(c).get(attr, "")).strip()]
    how = f" (it only inherits one from {parents[0]})" if parents else ""
    raise UndeclaredText(f"{config.name or where}: {where} declares no `{attr}`{how}: add "
                         f"`{attr}: ClassVar[str] = \"...\"`, {DECLARED[attr]} (docs/add-a-method.md)")


@dataclass(frozen=True)
class Measured:
    """What a method's committed record says it sent (over its finished runs)."""

    runs: int
    up: str  # bytes up per client-round, as shown
    down: str
    trainable: str  # trainable parameters, as shown


def _bytes(rounds: list[dict[str, Any]], direction: str) -> str:
    """Bytes per client-round in ``direction`` (``up``/``down``): the exact value when every round
    of every run sent the same per client, else the mean over client-rounds and the range of
    the rounds' means."""
    per_round = [r[f"bytes_{direction}_per_client"] for r in rounds if r.get(f"bytes_{direction}_per_client") is not None]
    if not per_round:
        return "—"
    if len(set(per_round)) == 1 and float(per_round[0]).is_integer():
        return f"{int(per_round[0]):,} B"
    total = sum(r[f"bytes_{direction}"] for r in rounds if r.get(f"bytes_{direction}_per_client") is not None)
    clients = sum(r["num_clients"] for r in rounds if r.get(f"bytes_{direction}_per_client") is not None)
    return f"{total / clients:,.0f} B mean ({min(per_round):,.0f}–{max(per_round):,.0f} B by round)"


def _runs(results: str) -> list[dict[str, Any]]:
    from fedtext.records import FINISHED, runs_under

    folder = RESULTS / results / "runs"
    return [run for run in runs_under(folder) if run["status"] == FINISHED] if folder.is_dir() else []


def label(run: dict[str, Any]) -> str | None:
    """A run's row label, as the compare runner gives it: its ``run-name``, else its method."""
    keys = (run["config"] or {}).get("config") or {}
    return keys.get("run-name") or keys.get("method")


def measured(config: type[MethodConfig], runs: list[dict[str, Any]]) -> Measured | None:
    """The figures of ``config``'s runs among ``runs`` (its label's finished runs), None if none."""
    mine = [run for run in runs if label(run) == config.name]
    if not mine:
        return None
    rounds = [r for run in mine for r in run["rounds"] if r["round"] > 0 and r.get("num_clients")]
    params = sorted({run["config"]["config"].get("trainable-parameters") for run in mine} - {None})
    trainable = "—" if not params else " to ".join(dict.fromkeys(f"{p:,}" for p in (params[0], params[-1])))
    return Measured(len(mine), _bytes(rounds, "up"), _bytes(rounds, "down"), trainable)


def _cell(text: str) -> str:
    """``text`` in a table cell: pipes escaped, one line."""
    return " ".join(text.replace("\\|", "|").replace("|", "\\|").split())


def paragraph(text: str, width: int = WIDTH) -> list[str]:
    """``text`` as the lines of one markdown paragraph of at most ``width`` characters where
    words allow; a line that markdown would read as a list item, a heading, a quote or a table
    row is joined to the one before."""
    lines: list[str] = []
    # a code span is one word: never broken across lines
    text = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), " ".join(text.split()))
    for line in textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False):
        if lines and re.match(r"([-+*#>|]|\d+[.)])(\s|$)", line):
            lines[-1] += " " + line
        else:
            lines.append(line)
    return [line.replace("\0", " ") for line in lines]


def render(configs: Iterable[type[MethodConfig]] | None = None) -> str:
    """The block: the table (one row per method in registry order) and each method's section."""
    from simulations.guide import HARNESS

    if configs is None:
        from fedtext.common.registry import CONFIGS as configs
    configs = tuple(configs)
    texts = {c.name: {attr: declared(c, attr) for attr in DECLARED} for c in configs}
    runs: dict[str, list[dict[str, Any]]] = {}
    table = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for c in configs:
        if c.results and c.results not in runs:
            runs[c.results] = _runs(c.results)
        found = measured(c, runs[c.results]) if c.results else None
        if found is None:
            figures = ["—", "—", "—", NO_RECORD]
        else:
            link = f"[{HARNESS.get(c.results, c.results)}](../simulations/results/{c.results}/)"
            figures = [found.up, found.down, found.trainable, f"{link}, {found.runs} runs"]
        table.append("| " + " | ".join([f"[`{c.name}`](#{c.name})", _cell(c.summary), _cell(texts[c.name]["travels"]),
                                         *figures, private(c)]) + " |")
    sections = []
    for c in configs:
        page = f" Paper page: [papers/{c.page}.md](papers/{c.page}.md)." if c.page else ""
        sections += ["", f"### {c.name}", "", *paragraph(texts[c.name]["description"] + page)]
    return "\n".join(table + sections) + "\n"


if __name__ == "__main__":
    print(render(), end="")
