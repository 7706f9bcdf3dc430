"""The generated blocks of README.md and docs/: text a script writes from the repo's own
sources (method configs, committed run records, measured timings, fixtures), never a hand.

    python tools/generated.py            # rewrite every block from its source
    python tools/generated.py --check    # exit 1 and name each block that differs

A block sits between two marker lines of its page; only the lines between them are written::

    <!-- BEGIN generated: method-table (python tools/generated.py) -->
    | `method=` | what it tunes | ...
    <!-- END generated: method-table -->

Each block has one name, one page and one function that renders it (:data:`BLOCKS`); the
function reads its source (a committed ``table.md``, ``docs/timings.json``, the config
dataclasses) and returns the markdown. ``tests/docs/test_generated.py`` fails when a page's
block differs from what its function renders now (a rerun changed a record, a method changed
a config) or a page holds a block no function writes, and ``tests/docs/test_numbers.py`` reads
figures inside blocks as generated, not hand-written (docs/testing.md, "Docs").
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/generated.py` from anywhere
    sys.path.insert(0, str(ROOT))

COMMAND = "python tools/generated.py"


@dataclass(frozen=True)
class Block:
    """One generated block: the page it is on (relative to the repository) and the
    ``"module:function"`` that renders its lines (imported when asked, so that reading the
    table of blocks imports nothing); ``"module:function:argument"`` calls it with that one
    string (one function for a block on every paper page)."""

    page: str
    render: str

    def text(self) -> str:
        """What the block holds now: the function's markdown, ending in one newline."""
        module, function, *argument = self.render.split(":")
        out: Callable[..., str] = getattr(importlib.import_module(module), function)
        return out(*argument).rstrip("\n") + "\n"


BLOCKS: dict[str, Block] = {
    # README's "Which method, when": one line per registered method from committed records
    "method-table": Block("README.md", "simulations.guide:block"),
    # docs/backbones.md: T1 on all-MiniLM-L6-v2 beside all-mpnet-base-v2, from the two committed tables
    "base-scale": Block("docs/backbones.md", "simulations.guide:base_block"),
    # docs/backbones.md: the design card's command (fedbpt on the demo) on both backbones (simulations/results/card)
    "card": Block("docs/backbones.md", "tools.card:render"),
    # docs/backbones.md: where a base-scale run's time goes, from its rounds
    "base-time": Block("docs/backbones.md", "simulations.guide:base_time_block"),
    # README's two commands: how long each took on a fresh clone (docs/timings.json)
    "readme-timings": Block("README.md", "tools.timings:render_readme"),
    # docs/testing.md: each tier's time, its budget and its slowest tests (docs/timings.json)
    "test-durations": Block("docs/testing.md", "tools.timings:render_testing"),
    # docs/testing.md "Against the authors' code": one row per check of every fixture
    "reference-table": Block("docs/testing.md", "tools.reference.table:render"),
    # docs/methods.md: every method's arrays, bytes and parameters, from its config and model
    "methods": Block("docs/methods.md", "tools.methods_doc:render"),
    # every method's costs at RoBERTa-large's shape (simulations/results/costs/roberta-large.json)
    "costs-roberta-large": Block("docs/performance.md", "simulations.studies.costs:render_summary"),
    # the same at MiniLM-L6, RoBERTa-base and RoBERTa-large: time and memory against size
    "costs-growth": Block("docs/performance.md", "simulations.studies.costs:render_growth"),
    # each paper's stated costs beside fedtext's at the paper's shape, with the ratio
    "costs-feddls": Block("docs/papers/feddls.md", "simulations.studies.costs:render_page:feddls"),
    "costs-fes": Block("docs/papers/fes.md", "simulations.studies.costs:render_page:fes"),
    "costs-fedbpt": Block("docs/papers/fedbpt.md", "simulations.studies.costs:render_page:fedbpt"),
    "costs-feddpg": Block("docs/papers/feddpg.md", "simulations.studies.costs:render_page:feddpg"),
    "costs-feddrs": Block("docs/papers/feddrs.md", "simulations.studies.costs:render_page:feddrs"),
    # a deployment round (node service) against a Ray round, per method (simulations/results/deployment, deployment-t1)
    "deployment-rounds": Block("docs/performance.md", "simulations.studies.deployment:render"),
    # each method's client under 1 and 2 GB cgroup limits (simulations/results/memory/limits.json, memory-t1/ once measured)
    "memory-limits": Block("docs/deployment.md", "simulations.studies.memory:render"),
    # the emulated arm64 SuperNode's round (simulations/results/edge/arm64)
    "arm64-round": Block("docs/deployment.md", "simulations.arm64_round:render"),
    # issue 58: each aggregator's T1 accuracy with one attacker (simulations/results/robust_ag_news)
    "robust-table": Block("docs/reliability.md", "simulations.studies.robust:table"),
    # issue 59: accuracy against epsilon on T1 (simulations/results/privacy_ag_news), and who takes what
    "privacy-table": Block("docs/privacy.md", "simulations.studies.privacy:table"),
    "privacy-support": Block("docs/privacy.md", "simulations.studies.privacy:render_support"),
    # issue 69: the cross-device harness (simulations/results/privacy_cross_device*)
    "privacy-cross-device": Block("docs/privacy.md", "simulations.studies.privacy_cross_device:table"),
    # issue 69's clause 3: what z = 1.2's noise does to one round's release of each method
    "privacy-release": Block("docs/privacy.md", "simulations.studies.privacy_cross_device:render_release"),
    # docs/architecture.md: fedtext's folders by role and their lanes, and the deprecated old names (issue 70)
    "roles": Block("docs/architecture.md", "tools.architecture_doc:render_roles"),
    "moved": Block("docs/architecture.md", "tools.architecture_doc:render_moved"),
    # issue 67: each paper's headline comparison on MiniLM-L6 and MPNet-base beside the paper's figure
    **{f"base-scale-{key}": Block(f"docs/papers/{key}.md", f"simulations.papers.claims:block:{key}")
       for key in ("fedbpt", "fes", "feddrs", "feddls", "feddpg")},
}


def begin(name: str) -> str:
    """The opening marker line of block ``name``."""
    return f"<!-- BEGIN generated: {name} ({COMMAND}) -->"


def end(name: str) -> str:
    """The closing marker line of block ``name``."""
    return f"<!-- END generated: {name} -->"


MARKER = re.compile(r"^<!-- (BEGIN|END) generated: ([a-z0-9-]+)(?: \(.*\))? -->$", re.M)


def blocks_in(text: str) -> dict[str, tuple[int, int]]:
    """The blocks of a page: name -> (start, end) character offsets of the lines between
    its markers. A marker without its partner, out of order or repeated raises ``ValueError``."""
    found: dict[str, tuple[int, int]] = {}
    opened: tuple[str, int] | None = None
    for m in MARKER.finditer(text):
        kind, name = m.group(1), m.group(2)
        if kind == "BEGIN":
            if opened is not None:
                raise ValueError(f"block {opened[0]!r} is not closed before {name!r} opens")
            if name in found:
                raise ValueError(f"block {name!r} appears twice")
            opened = (name, m.end() + 1)
        else:
            if opened is None or opened[0] != name:
                raise ValueError(f"END of {name!r} without its BEGIN")
            found[name] = (opened[1], m.start())
            opened = None
    if opened is not None:
        raise ValueError(f"block {opened[0]!r} is never closed")
    return found


def without_blocks(text: str) -> str:
    """``text`` with every generated block's lines blanked (line numbers kept): what a hand
    wrote on the page."""
    spans = sorted(blocks_in(text).values())
    out, last = [], 0
    for start, stop in spans:
        out += [text[last:start], "\n" * text[start:stop].count("\n")]
        last = stop
    return "".join([*out, text[last:]])


def replace(text: str, name: str, body: str) -> str:
    """``text`` with block ``name``'s lines replaced by ``body`` (the markers stay)."""
    start, stop = blocks_in(text)[name]
    return text[:start] + body + text[stop:]


def stale() -> list[str]:
    """The blocks whose page differs from what their function renders, and blocks a page
    holds that no function writes (``"page: name"``)."""
    out = []
    for name, block in BLOCKS.items():
        text = (ROOT / block.page).read_text()
        spans = blocks_in(text)
        if name not in spans:
            out.append(f"{block.page}: {name} (missing: add its two marker lines)")
        elif text[slice(*spans[name])] != block.text():
            out.append(f"{block.page}: {name}")
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for name in blocks_in(page.read_text()):
            if BLOCKS.get(name) is None or ROOT / BLOCKS[name].page != page:
                out.append(f"{page.relative_to(ROOT)}: {name} (no function writes it here)")
    return out


def write() -> list[str]:
    """Rewrite every block from its function; the pages that changed."""
    changed = []
    for name, block in BLOCKS.items():
        path = ROOT / block.page
        text = path.read_text()
        new = replace(text, name, block.text())
        if new != text:
            path.write_text(new)
            changed.append(f"{block.page}: {name}")
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block differs")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale()
        for line in bad:
            print(f"stale: {line}")
        return 1 if bad else 0
    for line in write():
        print(f"wrote {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
