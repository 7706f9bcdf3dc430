"""The "Against the authors' code" table of docs/testing.md, from the committed fixtures.

    python -m tools.reference.table            # print it
    python tools/generated.py                  # write it (and every other generated block)

One row per check of every fixture (``tests/unit/reference/*.json``): the paper, what is
compared, the authors' file (or "the paper" where no public code exists), fedtext's file,
the largest absolute difference measured when the fixture was written, the tolerance and the
verdict. It is docs/testing.md's generated block ``reference-table`` (tools/generated.py);
``tests/unit/test_reference.py`` checks that docs/testing.md holds exactly this table.
"""

from __future__ import annotations

import argparse
import json

from tools.reference import common

DOC = common.ROOT / "docs" / "testing.md"
PAPERS = ("fedbpt", "bbt", "fes", "feddpg", "feddls")  # row order; any other fixture follows


def rows() -> list[str]:
    """The table's markdown lines (header included)."""
    fixtures = sorted(common.FIXTURES.glob("*.json"),
                      key=lambda f: (PAPERS.index(f.stem) if f.stem in PAPERS else len(PAPERS), f.stem))
    out = ["| paper | check | authors' file | fedtext | max abs difference | tolerance | verdict |",
           "|---|---|---|---|---|---|---|"]
    for f in fixtures:
        doc = json.loads(f.read_text())
        repo, commit = doc["authors"]["repo"], doc["authors"]["commit"]
        where = f"{repo}@{commit[:7]}" if repo else "the paper (no public code)"
        for c in doc["checks"].values():
            authors_file = f"{where} `{c['authors_file']}`" if repo else f"{where}: {c['authors_file']}"
            cells = [doc["paper"], c["function"], authors_file, f"`{c['fedtext_file']}`", f"{c['max_abs_diff']:.2g}",
                     f"{c['tolerance']:.0e}", c["verdict"]]
            out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return out


def render() -> str:
    """The table as docs/testing.md's generated block holds it (tools/generated.py)."""
    return "\n".join(rows()) + "\n"


def current() -> str:
    """The block as docs/testing.md holds it now ("" when it has none)."""
    from tools import generated

    text = DOC.read_text()
    spans = generated.blocks_in(text)
    return text[slice(*spans["reference-table"])] if "reference-table" in spans else ""


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.reference.table", description=__doc__.split("\n")[0])
    p.parse_args()
    print(render(), end="")


if __name__ == "__main__":
    main()
