"""simulations.guide, README's "Which method, when" table: one line per registered method from
what its config declares, figures picked from a committed ``table.md`` (hand-made ones here),
and a line that says so for a method without a committed record. That README holds exactly
what it prints, from the committed records: tests/docs/test_docs.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fedtext.config import MethodConfig
from fedtext.registry import CONFIGS
from simulations import guide


def _tables(folder: Path, rows: tuple[guide.Row, ...]) -> None:
    """A hand-made ``table.md`` per harness holding ``rows``' labels."""
    for experiment in guide.HARNESS:
        (folder / experiment).mkdir()
        header = ["method", *(column for column, _ in guide.COLUMNS)]
        cells = [[row.label, "1.00 ± 0.00", "2", "3 ± 0", "4", f"0.{len(row.label)}"] for row in rows
                 if row.experiment == experiment]
        lines = ["<!-- made by hand -->", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                 *("| " + " | ".join(r) + " |" for r in cells)]
        (folder / experiment / "table.md").write_text("\n".join(lines) + "\n")


def test_one_row_per_registered_method_in_registry_order_from_its_config():
    rows = guide.rows()
    assert [row.method for row in rows] == [config.name for config in CONFIGS]
    for row, config in zip(rows, CONFIGS, strict=True):
        assert (row.what, row.experiment, row.label, row.page) == (config.summary, config.results, config.name,
                                                                    config.page)


def test_the_guide_reads_the_cells_it_names_from_table_md(tmp_path, monkeypatch):
    """A hand-made table.md: the guide picks the row by label and the columns by header."""
    _tables(tmp_path, guide.rows())
    monkeypatch.setattr(guide, "RESULTS", tmp_path)
    out = guide.render().splitlines()
    assert out[0].startswith("| `method=` | what it tunes | KB up | KB down | queries | client MB | final acc |")
    assert len(out) == 2 + len(CONFIGS)
    fedbpt = next(line for line in out if line.startswith("| `fedbpt` |"))
    # zero spreads dropped, others kept, accuracy from fedbpt's own row, page link
    assert "| 1.00 | 2 | 3 | 4 | 0.6 | T1 | [fedbpt](docs/papers/fedbpt.md) |" in fedbpt


@dataclass(frozen=True)
class _Benchmarked(MethodConfig):
    name: ClassVar[str] = "fedprompt"  # a row of the hand-made T1 table
    summary: ClassVar[str] = "soft prompt"
    page: ClassVar[str] = "baselines"
    results: ClassVar[str] = "feddpg_table1_ag_news"


@dataclass(frozen=True)
class _New(MethodConfig):
    name: ClassVar[str] = "fednew"
    summary: ClassVar[str] = "something new"


@dataclass(frozen=True)
class _NotYetRun(MethodConfig):
    name: ClassVar[str] = "fedlater"  # names a harness whose table has no row of its name yet
    summary: ClassVar[str] = "run later"
    page: ClassVar[str] = "baselines"
    results: ClassVar[str] = "fes_ag_news"


def test_a_method_without_a_committed_record_gets_a_line_saying_so(tmp_path, monkeypatch):
    """A registered method before its benchmark is a line of its own, not a failure: its
    figures are dashes and its harness cell says there is no committed record yet."""
    _tables(tmp_path, guide.rows([_Benchmarked]))
    monkeypatch.setattr(guide, "RESULTS", tmp_path)
    out = guide.render([_Benchmarked, _New, _NotYetRun]).splitlines()[2:]
    assert out[0] == "| `fedprompt` | soft prompt | 1.00 | 2 | 3 | 4 | 0.9 | T1 | [baselines](docs/papers/baselines.md) |"
    assert out[1] == "| `fednew` | something new | — | — | — | — | — | no committed record yet | — |"
    assert out[2] == ("| `fedlater` | run later | — | — | — | — | — | no committed record yet | "
                      "[baselines](docs/papers/baselines.md) |")
