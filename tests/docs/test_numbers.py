"""Each fact written once: no figure is written by hand in two places of README and docs/.

A *figure* is a measured or quoted number a reader could copy: a mean with its spread
(``0.827 ± 0.025``), a number of four or more significant digits (``297,984``, ``12.12``,
``1,540``), or a number of three with a unit after it (``641 s``, ``186 MB``, ``10.4 GB``,
``93.7 %``). Not figures: small counts and settings (``3 rounds``, ``T = 50``), years, dates,
and anything in code (fenced blocks, inline code: commands, keys, values).

What is not written by hand: a generated block (``tools/generated.py``: its function writes
it from configs, records or measurements, and tests/docs/test_generated.py checks it), the
run-config tables of docs/run-config.md (``tools/run_config_docs.py``, checked by
tests/unit/test_config.py), docs/mutation.md (the report ``tools/mutation.py`` writes), and a
table row equal, cell for cell, to a row of a committed ``simulations/results/*/*.md`` table
(checked by tests/docs/test_docs.py). Everything else is a hand's, and:

* README holds no hand-written figure at all: its figures are generated (the method table,
  the measured times of its two commands); every other figure lives on the docs page it
  belongs to;
* a figure written by hand on one page of docs/ is written on no other page (a page may
  repeat its own figure; a second page links to the first instead).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from simulations.guide import markdown_rows
from tools import generated, mutation, run_config_docs

from ..conftest import REPO

README = REPO / "README.md"
DOCS = sorted(p for p in (REPO / "docs").rglob("*.md") if p != mutation.REPORT)  # the report: the tool's words
RESULTS = REPO / "simulations" / "results"

NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+|\d+"
PAIR = re.compile(rf"(?<![\w.\-/:=#@])({NUMBER}) ?± ?({NUMBER})")
UNITS = (r"KB|MB|GB|KiB|MiB|GiB|B|bytes|s|ms|min|h|seconds|minutes|hours|tests|passed|M|K|x")
# a number, then optionally its unit, with or without a space (`641 s`, `90.9MB`, `1.58x`, `22.7M`)
SINGLE = re.compile(rf"(?<![\w.\-/:=#@])({NUMBER})(?:( ?(?:{UNITS}))\b| ?(%|×))?(?![\w\-/:]|\.\d)")
YEAR = re.compile(r"(19|20)\d\d")


def committed_rows() -> set[tuple[str, ...]]:
    """Every row of every committed results table (what a page may copy, checked elsewhere)."""
    rows: set[tuple[str, ...]] = set()
    for md in RESULTS.glob("*/*.md"):
        rows.update(tuple(r) for r in markdown_rows(md.read_text())[1:])
    return rows


def hand_written(text: str, copies: set[tuple[str, ...]]) -> list[tuple[int, str]]:
    """``(line number, line)`` of what a hand wrote on a page: generated blocks, code and
    verified copies of committed table rows blanked."""
    text = generated.without_blocks(text)
    start, end = run_config_docs.MD_BEGIN, run_config_docs.MD_END  # docs/run-config.md's tables
    text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.S)
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            if tuple(c.strip() for c in re.split(r"(?<!\\)\|", s[1:-1])) in copies:
                continue
        line = re.sub(r"`[^`]*`", " ", line)  # code: commands, keys, values
        line = re.sub(r"\]\([^)]*\)", "]", line)  # link targets
        line = re.sub(r"<!--.*?-->", " ", line)
        line = re.sub(r"\d{4}-\d{2}-\d{2}", " ", line)  # dates
        out.append((number, line))
    return out


def significant(number: str) -> int:
    """Significant digits of ``1,234.50`` (5), ``0.827`` (3), ``100`` (3)."""
    return len(number.replace(",", "").replace(".", "").lstrip("0"))


def figures(line: str) -> list[str]:
    """The figures of one line (module doc), written one way whatever the hand did
    (``0.827 ± 0.025``, ``641 s``; ``1540`` and ``1,540`` alike; ``641s`` as ``641 s``)."""
    found = [f"{_plain(m.group(1))} ± {_plain(m.group(2))}" for m in PAIR.finditer(line)]
    for m in SINGLE.finditer(PAIR.sub(" ", line)):
        number, unit = m.group(1), (m.group(2) or m.group(3) or "").strip()
        if YEAR.fullmatch(number):
            continue
        if significant(number) >= 4 or (unit and significant(number) >= 3):
            found.append(f"{_plain(number)} {unit}" if unit else _plain(number))
    return found


def _plain(number: str) -> str:
    """``1,540`` -> ``1540``: one spelling per number."""
    return number.replace(",", "")


def small_number(number: str) -> bool:
    """A count or setting README may say in words' place: an integer below 100."""
    return number.isdigit() and int(number) < 100


def test_the_rules_on_written_examples():
    assert figures("fedprompt reached 0.827 ± 0.025 with 12.12 KB per round") == ["0.827 ± 0.025", "12.12 KB"]
    assert figures("it took 641 s for 1,540 tests, 10.4 GB at peak, 93.7 % killed") == [
        "641 s", "1540 tests", "10.4 GB", "93.7 %"]
    assert figures("90.9MB, 641s, 1.58x faster, 22.7M weights, 641 seconds, 1540") == [
        "90.9 MB", "641 s", "1.58 x", "22.7 M", "641 seconds", "1540"]
    assert figures("3 rounds of 2 clients, T = 50, d = 500, in 2024 and 2026") == []
    assert figures("0.827 alone, 128 tokens") == []  # three digits without a unit: a setting, a value
    page = "a\n```\n297,984 B\n```\n`297,984 B` and [x](297984.md)\n<!-- BEGIN generated: x -->\n1,234\n"
    page += "<!-- END generated: x -->\nlast 297,984 B\n"
    lines = hand_written(page, set())
    assert [(n, f) for n, line in lines for f in figures(line)] == [(9, "297984 B")]
    assert hand_written("| a | 1,234 |\n", {("a", "1,234")}) == []


def test_readme_writes_no_figure_by_hand():
    """README's figures are generated (the method table, its commands' measured times);
    any other number it writes by hand is a small count or setting."""
    bad = []
    for number, line in hand_written(README.read_text(), committed_rows()):
        bad += [f"README.md:{number}: {f}" for f in figures(line)]
        bad += [f"README.md:{number}: {m.group(1)}" for m in SINGLE.finditer(line)
                if not small_number(m.group(1)) and not YEAR.fullmatch(m.group(1))
                and not any(m.group(1) in f for f in figures(line))]
    assert not bad, "README: move these figures to the docs page they belong to (or a generated block):\n" + \
        "\n".join(bad)


def test_no_figure_is_written_by_hand_on_two_pages():
    copies = committed_rows()
    where: dict[str, set[str]] = defaultdict(set)
    for page in [README, *DOCS]:
        for number, line in hand_written(page.read_text(), copies):
            for f in figures(line):
                where[f].add(f"{page.relative_to(REPO)}:{number}")
    twice = {f: sorted(places) for f, places in where.items() if len({p.split(":")[0] for p in places}) > 1}
    assert not twice, "each figure on one page (link to it from the others):\n" + "\n".join(
        f"{f}: {', '.join(places)}" for f, places in sorted(twice.items()))


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_generated_blocks_are_well_formed(page: Path):
    generated.blocks_in(page.read_text())  # raises on a marker without its partner
