"""README's "which method, when" table, read from committed records.

Every figure in that table is a cell of a committed ``simulations/results/<experiment>/table.md``
(written by ``python -m simulations.compare``); this module picks the cells and prints the
table, and ``tests/docs/test_docs.py`` checks README holds exactly what it prints::

    python -m simulations.guide

What each method's line says comes from its config (``summary``: what it tunes; ``results``:
the folder of its committed row; ``page``: its paper page), one line per registered method in
registry order; a method without a committed row yet gets a line that says so.
Three shared harnesses cover the methods with records (their settings are on the linked pages):
the FedDPG Table 1 harness (AG News, 10 IID clients, 8 labelled examples per class, 4 rounds,
3 seeds), the FedDRS harness (AG News, 8 clients, Dirichlet α=0.05, 3 seeds) and the FeS
harness (AG News, 64 gold labels on 2 of 10 clients + unlabelled texts, 3 seeds).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedtext.common.config import MethodConfig

RESULTS = Path(__file__).resolve().parent / "results"

# The columns of a compare table.md that the guide shows, in order, with README's headings.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("KB up / client-round", "KB up"),
    ("KB down / client-round", "KB down"),
    ("model queries", "queries"),
    ("peak client MB", "client MB"),
    ("final acc", "final acc"),
)


@dataclass(frozen=True)
class Row:
    """One method's line: where its figures come from and what it does, in a few words
    (its config's ``summary``, ``results`` and ``page``)."""

    method: str
    what: str
    experiment: str  # folder under simulations/results/ ("" = no committed record yet)
    label: str  # the table.md row (the method's name)
    page: str  # docs/papers/<page>.md ("" = none yet)


# The shared harnesses whose committed tables the guide reads, and their short names.
HARNESS = {
    "feddpg_table1_ag_news": "T1",
    "feddrs_ag_news_alpha005": "DRS",
    "fes_ag_news": "FeS",
}
# What each harness is, for the legend under the table (its experiment file has the rest).
HARNESS_SETTING = {
    "T1": "FedDPG's Table 1 setting, 10 IID clients, 8 labelled examples per class, 4 rounds",
    "DRS": "FedDRS's, 8 clients, Dirichlet α=0.05",
    "FeS": "FeS's few-shot setting, 64 gold labels on 2 of 10 clients plus unlabelled texts",
}
NO_RECORD = "no committed record yet"
# Each harness's run on the base-size backbone (issue 66: the same experiment file with
# ``--profile base``, model=all-mpnet-base-v2): README's table shows its final accuracy beside
# MiniLM-L6's, and docs/backbones.md the whole row of both (:func:`base_block`).
BASE_SCALE = {"feddpg_table1_ag_news": "feddpg_table1_ag_news-base",
              "feddrs_ag_news_alpha005": "feddrs_ag_news_alpha005-base", "fes_ag_news": "fes_ag_news-base"}
BASE_TITLE = "MPNet acc"
# The columns docs/backbones.md sets side by side, MiniLM-L6 then MPNet-base, with their headings.
BASE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("runs", "seeds"),
    ("final acc", "final acc"),
    ("KB up / client-round", "KB up"),
    ("KB down / client-round", "KB down"),
    ("model queries", "queries"),
    ("peak client MB", "client MB"),
    ("wall s", "wall s"),
)


def cell(cells: dict[str, str] | None, column: str) -> str:
    """A table.md cell as the guide shows it ("—" where the row is missing); a spread of zero
    (every seed sent the same bytes) says nothing: the value alone."""
    if cells is None:
        return "—"
    return cells[column].removesuffix(" ± 0.00").removesuffix(" ± 0")


def rows(configs: Iterable[type[MethodConfig]] | None = None) -> tuple[Row, ...]:
    """One row per registered method, in registry order, from what its config declares."""
    if configs is None:
        from fedtext.common.registry import CONFIGS as configs
    return tuple(Row(c.name, c.summary, c.results, c.name, c.page) for c in configs)


def markdown_rows(text: str) -> list[list[str]]:
    """The rows of every markdown table in ``text``, as stripped cells, rule rows
    (``|---|``) left out; a cell may hold an escaped pipe (``\\|``)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("|") and line.endswith("|") and len(line) > 1:
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line[1:-1])]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                rows.append(cells)
    return rows


def read_table(experiment: str) -> dict[str, dict[str, str]]:
    """The rows of ``simulations/results/<experiment>/table.md``: label → {column → cell}."""
    header, *rows = markdown_rows((RESULTS / experiment / "table.md").read_text())
    return {cells[0]: dict(zip(header, cells, strict=True)) for cells in rows}


def tables_of(experiments: Iterable[str]) -> dict[str, dict[str, dict[str, str]]]:
    """The committed table.md of each experiment (an empty one where it has none yet)."""
    out = {}
    for experiment in experiments:
        path = RESULTS / experiment / "table.md"
        out[experiment] = read_table(experiment) if experiment and path.is_file() else {}
    return out


def render(configs: Iterable[type[MethodConfig]] | None = None) -> str:
    """The markdown table README shows (one line per registered method). A method whose
    config names no results folder, or whose folder has no committed ``table.md`` row of its
    name, gets a line saying so (a new method before its benchmark). ``MPNet acc`` is the
    final accuracy of the same harness on all-mpnet-base-v2 (:data:`BASE_SCALE`), "—" where
    those runs are not committed for as many seeds as the MiniLM cell's."""
    head = ["`method=`", "what it tunes", *(title for _, title in COLUMNS), BASE_TITLE, "harness", "details"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    listed = rows(configs)
    tables = tables_of({row.experiment for row in listed} | set(BASE_SCALE.values()))
    for row in listed:
        cells = tables.get(row.experiment, {}).get(row.label)
        link = f"[{row.page}](docs/papers/{row.page}.md)" if row.page else "—"
        if cells is None:
            figures, harness = ["—"] * len(COLUMNS), NO_RECORD
        else:
            figures = [cell(cells, column) for column, _ in COLUMNS]
            harness = HARNESS.get(row.experiment, row.experiment)
        base = tables.get(BASE_SCALE.get(row.experiment, ""), {}).get(row.label)
        if base is not None and (cells is None or base.get("runs") != cells.get("runs")):
            base = None  # fewer seeds than the MiniLM cell beside it: not yet comparable
        out.append("| " + " | ".join([f"`{row.method}`", row.what, *figures, cell(base, "final acc"), harness, link])
                   + " |")
    return "\n".join(out) + "\n"


def render_base(configs: Iterable[type[MethodConfig]] | None = None) -> str:
    """docs/backbones.md's table: per method of a harness with a base-scale run
    (:data:`BASE_SCALE`), each column of :data:`BASE_COLUMNS` as ``MiniLM → MPNet``: the
    harness on all-MiniLM-L6-v2, then the same harness and seeds on all-mpnet-base-v2."""
    listed = [row for row in rows(configs) if row.experiment in BASE_SCALE]
    tables = tables_of({row.experiment for row in listed} | {BASE_SCALE[row.experiment] for row in listed})
    head = ["`method=`", *(title for _, title in BASE_COLUMNS)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in listed:
        small = tables[row.experiment].get(row.label)
        base = tables[BASE_SCALE[row.experiment]].get(row.label)
        figures = [f"{cell(small, column)} → {cell(base, column)}" for column, _ in BASE_COLUMNS]
        out.append("| " + " | ".join([f"`{row.method}`", *figures]) + " |")
    return "\n".join(out) + "\n"


# Where a run's time goes, from its rounds (docs/records.md): each a sum over the run's rounds.
TIME_PARTS: tuple[tuple[str, str], ...] = (
    ("client_fit_s", "clients train"),
    ("client_eval_s", "clients evaluate"),
    ("server_eval_s", "server evaluates"),
    ("client_load_s", "clients build (model load)"),
    ("overhead_s", "Flower/Ray overhead"),
)


def render_base_time(configs: Iterable[type[MethodConfig]] | None = None) -> str:
    """docs/backbones.md's ``base-time`` block: per method with committed base-scale runs, the
    mean wall seconds of a run and the share of its rounds' time (``round_time_s``) in each of
    :data:`TIME_PARTS`, summed over its rounds, mean over the runs a table counts (one per seed,
    :func:`simulations.tables.one_run_per_seed`)."""
    from fedtext.records.reader import runs_under
    from simulations.tables import one_run_per_seed, run_rows

    head = ["`method=`", "harness", "runs", "wall s", *(title for _, title in TIME_PARTS)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for small, base in BASE_SCALE.items():
        folder = RESULTS / base / "runs"
        runs = list(runs_under(folder)) if folder.is_dir() else []
        counted = one_run_per_seed(run_rows(runs))
        by_id = {Path(r["dir"]).name: r for r in runs}
        for row in rows(configs):
            if row.experiment != small:
                continue
            ids = counted[counted["variant"] == row.label]["run_id"] if not counted.empty else []
            picked = [by_id[i] for i in ids if i in by_id]
            if not picked:
                continue
            shares = {key: [] for key, _ in TIME_PARTS}
            walls = []
            for run in picked:
                rounds = [r for r in run["rounds"] if isinstance(r, dict)]
                total = sum(r.get("round_time_s") or 0 for r in rounds)
                walls.append(total)
                for key, _ in TIME_PARTS:
                    shares[key].append(sum(r.get(key) or 0 for r in rounds) / total if total else 0.0)
            cells = [f"{100 * sum(v) / len(v):.0f} %" for v in shares.values()]
            out.append("| " + " | ".join([f"`{row.method}`", HARNESS.get(small, small), str(len(picked)),
                                          f"{sum(walls) / len(walls):,.0f}", *cells]) + " |")
    return "\n".join(out) + "\n"


def legend() -> str:
    """The lines under README's table: what the columns and the harnesses are."""
    harnesses = "; ".join(f"**{short}** {HARNESS_SETTING[short]}" for short in HARNESS.values())
    text = ("KB sent per client-round up and down, model queries per run, peak client memory (MB) and "
            "final global accuracy, mean ± std over seeds, each cell from a committed "
            "`simulations/results/<harness>/table.md` (all-MiniLM-L6-v2 backbone, 2-core CPU); MPNet acc: the "
            "same on all-mpnet-base-v2 (110 M weights). Harnesses, AG News each (compare within one only): "
            f"{harnesses}.")
    return textwrap.fill(text, width=100, break_on_hyphens=False, break_long_words=False) + "\n"


def block() -> str:
    """README's generated ``method-table`` block: the table, then its legend."""
    return render() + "\n" + legend()


def base_block() -> str:
    """docs/backbones.md's generated ``base-scale`` block: :func:`render_base`."""
    return render_base()


def base_time_block() -> str:
    """docs/backbones.md's generated ``base-time`` block: :func:`render_base_time`."""
    return render_base_time()


def main() -> None:
    print(block(), end="")


if __name__ == "__main__":
    main()
