"""docs/methods.md's block (tools/methods_doc.py): every registered method says in its own config
what its client and server do (``description``) and what travels (``travels``, a formula), and
the block has one row per registered method, its bytes and parameters read from the committed
record its config names. That the page holds what ``render()`` writes now is
tests/docs/test_generated.py's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import pytest

from fedtext.methods.fedavg.config import FedAvgConfig
from fedtext.records import FINISHED, runs_under
from fedtext.common.registry import CONFIGS
from simulations.guide import markdown_rows
from tools import methods_doc

from ..conftest import REPO
from .test_numbers import figures


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_every_registered_method_declares_what_it_does_and_what_travels(config):
    for attr in methods_doc.DECLARED:
        text = methods_doc.declared(config, attr)  # raises, naming what to write, when missing
        assert text, (config.name, attr)
    # a formula and words, with no worked figure (code aside: keys, values): the figures are the record's
    for text in (config.travels, config.description):
        assert not figures(re.sub(r"`[^`]*`", " ", text)), (config.name, figures(re.sub(r"`[^`]*`", " ", text)))


@dataclass(frozen=True)
class _Undeclared(FedAvgConfig):
    """A method that extends fedavg's config and says nothing of its own."""

    name: ClassVar[str] = "undeclared"


@dataclass(frozen=True)
class _Declared(FedAvgConfig):
    """A method before its benchmark: words, no record."""

    name: ClassVar[str] = "fresh"
    results: ClassVar[str] = ""
    description: ClassVar[str] = "trains something; the server averages it"
    travels: ClassVar[str] = "`4·#weights` B each way, |w| of them"


def test_a_config_without_its_own_texts_fails_naming_what_to_write():
    with pytest.raises(methods_doc.UndeclaredText, match=r"undeclared: .*_Undeclared declares no `description` "
                       r"\(it only inherits one from FedAvgConfig\): add `description: ClassVar\[str\]"):
        methods_doc.declared(_Undeclared, "description")
    with pytest.raises(methods_doc.UndeclaredText, match="undeclared: .* declares no `description`"):
        methods_doc.render([CONFIGS[0], _Undeclared])
    blank = type("_Blank", (_Declared,), {"travels": "  ", "__module__": __name__})
    with pytest.raises(methods_doc.UndeclaredText, match="fresh: .*_Blank declares no `travels`"):
        methods_doc.declared(blank, "travels")


def test_a_method_without_a_record_says_so():
    rows = markdown_rows(methods_doc.render([_Declared]))
    assert len(rows) == 2 and rows[1][0] == "[`fresh`](#fresh)"
    assert rows[1][2] == "`4·#weights` B each way, \\|w\\| of them"  # a pipe of the formula is escaped
    assert rows[1][-2] == methods_doc.NO_RECORD
    assert rows[1][-1] == "central DP, local DP, SecAgg+"  # _Declared extends fedavg's config: it inherits its support


def test_the_guide_says_which_methods_run_privately():
    """The last column names what each config declares (issue 59), "no" for none."""
    rows = dict((r[0], r[-1]) for r in markdown_rows(methods_doc.render().split("\n\n### ")[0])[1:])
    assert rows["[`fedkseed`](#fedkseed)"] == "central DP, SecAgg+"
    assert rows["[`feddpg`](#feddpg)"] == "central DP, local DP"
    assert rows["[`fedbpt`](#fedbpt)"] == rows["[`fes`](#fes)"] == "no"


def test_render_has_one_row_per_registered_method_in_registry_order():
    text = methods_doc.render()
    header, *rows = markdown_rows(text.split("\n\n### ")[0])
    assert header == list(methods_doc.HEAD)
    assert [row[0] for row in rows] == [f"[`{c.name}`](#{c.name})" for c in CONFIGS]
    assert all(len(row) == len(header) for row in rows)
    for config in CONFIGS:  # a section per method, its description in it
        assert f"\n### {config.name}\n" in text
    assert max(len(line) for line in text.splitlines()) < 600


def test_the_figures_are_the_committed_records():
    """A row's bytes are every finished run's recorded bytes per client-round (the summary's
    mean, where every round sent the same) and its parameters config.json's."""
    rows = {row[0]: dict(zip(methods_doc.HEAD, row, strict=True))
            for row in markdown_rows(methods_doc.render().split("\n\n### ")[0])[1:]}
    checked = 0
    for config in CONFIGS:
        row = rows[f"[`{config.name}`](#{config.name})"]
        runs = [run for run in runs_under(REPO / "simulations" / "results" / config.results / "runs")
                if run["status"] == FINISHED and (run["config"]["config"].get("run-name")
                                                  or run["config"]["config"]["method"]) == config.name]
        assert runs, f"{config.name}: no finished run labelled {config.name} under {config.results}"
        assert row["record"].endswith(f"(../simulations/results/{config.results}/), {len(runs)} runs")
        params = {run["config"]["config"]["trainable-parameters"] for run in runs}
        if len(params) == 1:
            assert row["trainable parameters"] == f"{params.pop():,}"
        for direction in ("up", "down"):
            means = {run["summary"][f"mean_bytes_{direction}_per_client"] for run in runs}
            cell = row[f"bytes {direction} / client-round"]
            if "mean" not in cell:
                assert means == {float(cell.removesuffix(" B").replace(",", ""))}, (config.name, direction)
                checked += 1
    assert checked >= 2 * len(CONFIGS) - 2  # only feddls's download varies by round
