"""The "Against the authors' code" table of docs/testing.md, from the committed fixtures.

    python -m tools.reference.table            # print it
    python -m tools.reference.table --write    # replace it in docs/testing.md

One row per check of every fixture (``tests/unit/reference/*.json``): the paper, what is
compared, the authors' file (or "the paper" where no public code exists), fedtext's file,
the largest absolute difference measured when the fixture was written, the tolerance and the
verdict. ``tests/unit/test_reference.py`` checks that docs/testing.md holds exactly this table.
"""

from __future__ import annotations

import argparse
import json

from tools.reference import common

DOC = common.ROOT / "docs" / "testing.md"
BEGIN, END = "<!-- reference-table -->", "<!-- /reference-table -->"
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


def block() -> str:
    return "\n".join([BEGIN, *rows(), END])


def current() -> str:
    """The block as docs/testing.md holds it now ("" when it has none)."""
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        return ""
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.reference.table", description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="replace the table in docs/testing.md")
    args = p.parse_args()
    if not args.write:
        print(block())
        return
    old = current()
    if not old:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} block to replace")
    DOC.write_text(DOC.read_text().replace(old, block()))
    print(f"wrote the table into {DOC}")


if __name__ == "__main__":
    main()
