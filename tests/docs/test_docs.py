"""README and docs/ stay true: README is a short guide whose method table is printed by a
script from committed records; every registered method has its paper page and the committed
record its config names; every page's links, figures, result folders, experiment files and
commands exist; every table row a page copies from a committed ``table.md`` equals that row;
each paper page has the Flower Baselines shape.

The docs tier (tests/docs): ``python -m pytest -q -n 2 tests`` (README's command, CI) runs it,
``python -m pytest tests/unit`` does not, so that a new method's unit tests pass before its
page is written and its benchmark committed; then README's table is regenerated with
``python -m simulations.guide``."""

from __future__ import annotations

import importlib.util
import itertools
import re
from pathlib import Path

import pytest

from fedtext.common.registry import CONFIGS
from simulations import guide
from simulations.guide import markdown_rows
from simulations.papers import claims

from ..conftest import REPO

README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md"))]
PAPER_PAGES = sorted((REPO / "docs" / "papers").glob("*.md"))
PAPER_SECTIONS = ("## About", "## Setup and departures from the paper", "## Commands",
                  "## Expected results", "## What does not reproduce, and why")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _rel(page: Path) -> str:
    return str(page.relative_to(REPO))


def test_readme_is_a_short_guide():
    """A newcomer reads README in five minutes: at most 1,200 words (a word: a token with a
    letter or digit, so a table's ``|`` rules are not words), generated blocks included."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    words = [w for w in text.split() if re.search(r"[A-Za-z0-9]", w)]
    assert len(words) <= 1200, len(words)


def test_readme_method_table_is_what_the_guide_script_prints_from_committed_records():
    table = guide.render()
    assert table in README.read_text(), "README's method table differs: run `python tools/generated.py`"
    assert "python -m simulations.guide" in README.read_text()
    # every figure is a cell of the committed table.md of its harness (guards render itself)
    for row, line in zip(guide.rows(), table.splitlines()[2:], strict=True):
        assert f"`{row.method}`" in line
        if guide.NO_RECORD not in line:
            cells = guide.read_table(row.experiment)[row.label]
            assert cells["final acc"] in line and cells["peak client MB"] in line


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_every_registered_method_has_its_paper_page_and_its_committed_record(config):
    """What a method's config declares for README's table exists: its page
    (docs/papers/<page>.md) and the committed ``table.md`` row of its name in its results
    folder. A method before its benchmark declares no ``results``: its line says so."""
    assert config.page, f"{config.name}: declare page (its docs/papers/<page>.md)"
    assert (REPO / "docs" / "papers" / f"{config.page}.md").is_file(), config.page
    if config.results:
        table = REPO / "simulations" / "results" / config.results / "table.md"
        assert table.is_file(), f"{config.name}: results={config.results!r} has no committed table.md"
        assert config.name in guide.read_table(config.results), f"{table} has no row {config.name}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_and_image_resolves(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{_rel(page)}: {target}"


def test_every_figure_is_a_committed_png_made_by_the_plot_command_on_its_page():
    """Figures of results come from ``simulations.plot`` on the records beside them (the cost
    growth figure from ``simulations.studies.costs --growth``); the dashboard's screenshots from the
    browser test, whose command the page gives."""
    shown = 0
    for page in PAGES:
        text = page.read_text()
        for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
            path = (page.parent / image).resolve()
            assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
            if path.parent == REPO / "docs" / "papers" / "figures":  # each paper's claim at two scales (issue 67)
                assert claims.COMMAND in text, (page, image)
                claim = claims.by_key(path.name.removesuffix("-base-scale.png"))
                # drawn from the committed records as they are now: a rerun without a redraw fails here
                assert claims.figure_description(path) == claims.figure_data(claim), (page, image, claims.COMMAND)
                shown += 1
                continue
            if path.parent == REPO / "docs" / "screenshots":  # the browser test's screenshots
                assert "DASH_SHOTS_DIR=docs/screenshots python -m pytest" in text, (page, image)
                shown += 1
                continue
            if path == REPO / "simulations" / "results" / "costs" / "growth.png":  # the cost records' figure
                assert (path.parent / "roberta-large.json").is_file(), image
                assert "python -m simulations.studies.costs --growth" in text, (page, image)
                shown += 1
                continue
            assert path.parent.name == "figures" and (path.parent.parent / "runs").is_dir(), image
            assert f"python -m simulations.plot {path.parent.parent.relative_to(REPO)}" in text, (page, image)
            shown += 1
    assert shown >= 4


def _expand(pattern: str) -> list[str]:
    """``a{0,1}b`` → ``a0b``, ``a1b`` (the shell's brace expansion, which pages use)."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def test_every_experiment_file_and_results_path_a_page_names_exists():
    named = 0
    for page in PAGES:
        for raw in re.findall(r"simulations/(?:experiments|results)/[\w./{},-]*", page.read_text()):
            raw = raw.rstrip(".,")
            if raw.endswith(("-", "_")):  # a prefix in prose, e.g. "tradeoff-s<seed>"
                continue
            for path in _expand(raw):
                assert (REPO / path).exists(), f"{_rel(page)}: {path}"
                named += 1
    assert named >= 40


def test_every_python_module_a_page_runs_exists():
    modules = set()
    for page in PAGES:
        modules |= set(re.findall(r"python -m ((?:simulations|fedtext|tools)(?:\.\w+)+)", page.read_text()))
    assert {"simulations.compare", "simulations.plot", "simulations.guide", "simulations.simulate"} <= modules
    for module in sorted(modules):
        assert importlib.util.find_spec(module) is not None, module


def _cites(text: str, name: str) -> bool:
    """Whether a page names results folder ``name`` by its path or by the experiment file whose
    compare run writes it (``feddls_amazon`` is not cited by ``feddls_amazon_codecs``)."""
    return re.search(rf"simulations/(?:results/{re.escape(name)}(?![\w-])|experiments/{re.escape(name)}\.toml)",
                     text) is not None


def test_every_results_folder_a_page_cites_is_committed():
    """A results folder a page cites and that exists here must be one .gitignore lets in: otherwise
    the page's rows pass here against a table that a fresh clone (CI) does not have. (Found when
    feddls.md quoted feddls_amazon_codecs' table, present on the machine that ran it only.)"""
    gitignore = (REPO / ".gitignore").read_text()
    committed = set(re.findall(r"^!simulations/results/([\w-]+)/$", gitignore, re.MULTILINE))
    assert {"feddls_amazon", "fes_ag_news"} <= committed
    results = REPO / "simulations" / "results"
    here = sorted(folder.name for folder in results.iterdir() if folder.is_dir()) if results.is_dir() else []
    for page in PAGES:
        text = page.read_text()
        missing = [name for name in here if _cites(text, name) and name not in committed]
        assert not missing, f"{_rel(page)} cites {missing}: add '!simulations/results/<name>/' to .gitignore"


def test_every_table_row_a_page_copies_from_a_committed_table_equals_it():
    """A row whose first three cells match a row of a committed table (``table.md``,
    ``fes_table.md``, ...) of a results
    folder the page names (or of its experiment file) must be one of those rows, cell for cell (a rerun that changed the
    records must change the page; the same label may appear in several folders)."""
    results = REPO / "simulations" / "results"
    tables: dict[str, list[list[str]]] = {}
    for md in results.glob("*/*.md"):  # table.md, fes_table.md, tradeoff-*.md, ...
        tables.setdefault(md.parent.name, []).extend(markdown_rows(md.read_text())[1:])
    checked = 0
    for page in PAGES:
        text = page.read_text()
        # a folder is named by its path or by the experiment file whose compare run writes it
        cited = [name for name in tables if _cites(text, name)]
        candidates: dict[tuple[int, tuple[str, ...]], list[list[str]]] = {}
        for name in cited:
            for row in tables[name]:
                candidates.setdefault((len(row), tuple(row[:3])), []).append(row)
        for row in markdown_rows(text):
            same = candidates.get((len(row), tuple(row[:3])))
            if same:
                assert row in same, f"{_rel(page)}: {row[:3]} matches no committed row of {cited}"
                checked += 1
    assert checked >= 80


@pytest.mark.parametrize("page", PAPER_PAGES, ids=_rel)
def test_each_paper_page_has_the_flower_baselines_shape(page):
    text = page.read_text()
    positions = [text.find("\n" + section + "\n") for section in PAPER_SECTIONS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), _rel(page)
    assert "python -m simulations." in text[positions[2]:positions[3]], "commands in Commands"
    assert "|---" in text[positions[3]:positions[4]] or "| ---" in text[positions[3]:positions[4]], "a results table"


def test_every_page_a_method_declares_is_a_paper_page():
    assert {p.stem for p in PAPER_PAGES} >= {config.page for config in CONFIGS}
