"""simulations.guide, README's "Which method, when" table: one line per registered method from
what its config declares, figures picked from a committed ``table.md`` (hand-made ones here),
and a line that says so for a method without a committed record. That README holds exactly
what it prints, from the committed records: tests/docs/test_docs.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from fedtext.common.config import MethodConfig
from fedtext.common.registry import CONFIGS
from simulations import guide


def _tables(folder: Path, rows: tuple[guide.Row, ...], base: bool = False) -> None:
    """A hand-made ``table.md`` per harness holding ``rows``' labels (``base``: and per
    base-scale run of a harness, accuracies 0.5 + the harness's own)."""
    for experiment in guide.HARNESS:
        (folder / experiment).mkdir()
        header = ["method", "runs", *(column for column, _ in guide.COLUMNS), "wall s"]
        cells = [[row.label, "3", "1.00 ± 0.00", "2", "3 ± 0", "4", f"0.{len(row.label)}", "5 ± 1"] for row in rows
                 if row.experiment == experiment]
        if base and experiment in guide.BASE_SCALE:
            (folder / guide.BASE_SCALE[experiment]).mkdir()
            big = [[r[0], "3", "6.00 ± 0.00", "7", "8 ± 0", "9", f"0.5{len(r[0])}", "10 ± 2"] for r in cells[:-2]]
            big.append([cells[-2][0], "2", "6.00 ± 0.00", "7", "8 ± 0", "9", "0.99", "10 ± 2"])  # a seed short
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                     *("| " + " | ".join(r) + " |" for r in big)]
            (folder / guide.BASE_SCALE[experiment] / "table.md").write_text("\n".join(lines) + "\n")
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
    assert out[0].startswith("| `method=` | what it tunes | KB up | KB down | queries | client MB | final acc | "
                             "MPNet acc |")
    assert len(out) == 2 + len(CONFIGS)
    fedbpt = next(line for line in out if line.startswith("| `fedbpt` |"))
    # zero spreads dropped, others kept, accuracy from fedbpt's own row, no base-scale record yet, page link
    assert "| 1.00 | 2 | 3 | 4 | 0.6 | — | T1 | [fedbpt](docs/papers/fedbpt.md) |" in fedbpt


def test_the_base_scale_column_is_the_same_harness_on_mpnet(tmp_path, monkeypatch):
    """MPNet acc is the row of the method's label in its harness's base-scale table (T1 only);
    a method whose base-scale run is missing, or whose harness has none, shows a dash.
    docs/backbones.md's table sets every column MiniLM → MPNet."""
    monkeypatch.setattr(guide, "BASE_SCALE", {"feddpg_table1_ag_news": "feddpg_table1_ag_news-base"})
    _tables(tmp_path, guide.rows(), base=True)
    monkeypatch.setattr(guide, "RESULTS", tmp_path)
    t1 = [row.label for row in guide.rows() if row.experiment == "feddpg_table1_ag_news"]
    out = {line.split(" | ")[0].strip("| `"): line.split(" | ") for line in guide.render().splitlines()[2:]}
    for label in t1[:-2]:
        assert out[label][7] == f"0.5{len(label)}" and out[label][6] == f"0.{len(label)}"
    assert out[t1[-2]][7] == "—"  # two seeds of three: not beside the MiniLM cell yet
    assert out[t1[-1]][7] == "—"  # the base table lacks the harness's last row
    assert out["fes"][7] == "—"  # a harness without a base-scale run
    base = guide.render_base().splitlines()
    assert base[0] == "| `method=` | seeds | final acc | KB up | KB down | queries | client MB | wall s |"
    assert len(base) == 2 + len(t1)
    first = base[2].split(" | ")
    assert first[1:] == ["3 → 3", f"0.{len(t1[0])} → 0.5{len(t1[0])}", "1.00 → 6.00", "2 → 7", "3 → 8", "4 → 9",
                         "5 ± 1 → 10 ± 2 |"]
    assert base[-2].split(" | ")[1:3] == ["3 → 2", f"0.{len(t1[-2])} → 0.99"]  # docs show the seeds there are
    assert base[-1].split(" | ")[1:3] == ["3 → —", f"0.{len(t1[-1])} → —"]


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
    assert out[0] == ("| `fedprompt` | soft prompt | 1.00 | 2 | 3 | 4 | 0.9 | — | T1 | "
                      "[baselines](docs/papers/baselines.md) |")
    assert out[1] == "| `fednew` | something new | — | — | — | — | — | — | no committed record yet | — |"
    assert out[2] == ("| `fedlater` | run later | — | — | — | — | — | — | no committed record yet | "
                      "[baselines](docs/papers/baselines.md) |")


def test_where_a_base_scale_runs_time_goes_is_summed_from_its_rounds(tmp_path, monkeypatch):
    """A real run (in this process, tiny-bert, 2 rounds) filed as T1's base-scale record: its row
    holds its rounds' seconds, each part's share of their round time."""
    import json

    from tests.inprocess import TINY, run

    folder, rounds = run({"method": "fedprompt", **TINY, "num-server-rounds": 2, "model": "tiny-bert",
                          "weights": "random"}, tmp_path / "feddpg_table1_ag_news-base" / "runs")
    monkeypatch.setattr(guide, "RESULTS", tmp_path)
    monkeypatch.setattr(guide, "BASE_SCALE", {"feddpg_table1_ag_news": "feddpg_table1_ag_news-base"})
    out = guide.render_base_time().splitlines()
    assert out[0].startswith("| `method=` | harness | runs | wall s | clients train |") and len(out) == 3
    cells = out[2].strip("| ").split(" | ")
    total = sum(r["round_time_s"] for r in rounds)
    assert cells[:4] == ["`fedprompt`", "T1", "1", f"{total:,.0f}"]
    for (key, _), cell in zip(guide.TIME_PARTS, cells[4:], strict=True):
        assert cell == f"{100 * sum(r.get(key) or 0 for r in rounds) / total:.0f} %", key
    assert json.loads((folder / "summary.json").read_text())["status"] == "finished"
