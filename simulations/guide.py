"""README's "which method, when" table, read from committed records.

Every figure in that table is a cell of a committed ``simulations/results/<experiment>/table.md``
(written by ``python -m simulations.compare``); this module picks the cells and prints the
table, and ``tests/unit/test_docs.py`` checks README holds exactly what it prints::

    python -m simulations.guide

Three shared harnesses cover the thirteen methods (their settings are on the linked pages):
the FedDPG Table 1 harness (AG News, 10 IID clients, 8 labelled examples per class, 4 rounds,
3 seeds), the FedDRS harness (AG News, 8 clients, Dirichlet α=0.05, 3 seeds) and the FeS
harness (AG News, 64 gold labels on 2 of 10 clients + unlabelled texts, 3 seeds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
    """One method's line: where its figures come from and what it does, in a few words."""

    method: str
    what: str
    experiment: str  # folder under simulations/results/
    label: str  # the table.md row (a method or a variant label)
    page: str  # docs/papers/<page>.md


HARNESS = {
    "feddpg_table1_ag_news": "T1",
    "feddrs_ag_news_alpha005": "DRS",
    "fes_ag_news": "FeS",
}

ROWS: tuple[Row, ...] = (
    Row("fedprompt", "soft prompt, back-prop through the frozen PLM", "feddpg_table1_ag_news", "fedprompt", "baselines"),
    Row("bbt-fed", "CMA-ES on a 100-d prompt subspace, no gradients", "feddpg_table1_ag_news", "bbt-fed", "baselines"),
    Row("fedbpt", "bbt-fed + server CMA-ES step with corrected σ′", "feddpg_table1_ag_news", "fedbpt", "fedbpt"),
    Row("feddls", "discrete token search; 16-bit ids up, LASSO down", "feddpg_table1_ag_news", "feddls", "feddls"),
    Row("feddpg", "MLP prompt generator (back-prop); unlearning", "feddpg_table1_ag_news", "feddpg", "feddpg"),
    Row("fedptuning-v2", "prefix keys/values at every layer (back-prop)", "feddpg_table1_ag_news", "fedptuning-v2", "feddpg"),
    Row("fedavg", "fine-tune the whole model", "feddpg_table1_ag_news", "fedavg", "baselines"),
    Row("feddrs", "fedavg + text-free server distillation", "feddrs_ag_news_alpha005", "feddrs", "feddrs"),
    Row("feddf", "fedavg + distillation on public texts", "feddrs_ag_news_alpha005", "feddf", "feddrs"),
    Row("fes", "few-shot: pseudo labels, pacing, bias-only top", "fes_ag_news", "fes", "fes"),
    Row("fedfsl", "few-shot, static pacing, whole encoder", "fes_ag_news", "fedfsl", "fes"),
    Row("fedfsl-bias", "fedfsl tuning biases only", "fes_ag_news", "fedfsl-bias", "fes"),
    Row("fedcls", "gold labels only, whole model", "fes_ag_news", "fedcls", "fes"),
)


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


def render() -> str:
    """The markdown table README shows (one line per method)."""
    head = ["`method=`", "what it tunes", *(title for _, title in COLUMNS), "harness", "details"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    tables = {experiment: read_table(experiment) for experiment in HARNESS}
    for row in ROWS:
        cells = tables[row.experiment][row.label]
        # a spread of zero (every seed sent the same bytes) says nothing: show the value alone
        figures = [cells[column].removesuffix(" ± 0.00").removesuffix(" ± 0") for column, _ in COLUMNS]
        link = f"[{row.page}](docs/papers/{row.page}.md)"
        out.append("| " + " | ".join([f"`{row.method}`", row.what, *figures, HARNESS[row.experiment], link]) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    print(render(), end="")


if __name__ == "__main__":
    main()
