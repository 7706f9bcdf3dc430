"""fedtext against the authors' own code, from the committed fixtures (``tests/unit/reference/``).

Each fixture was written by ``python -m tools.reference.<paper> --repo <the authors' checkout>``:
the authors' outputs on seeded inputs. Here fedtext's side of every check is recomputed from the
fixture alone (the authors' code is not needed) by the function the harness used
(``tools.reference.<paper>.OURS``) and compared: a check that agreed must still agree within
its tolerance; a check written down as a departure (an option kept beside the authors'
behaviour) must still depart, by the amount the fixture recorded.
"""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from tools.reference import common

FIXTURES = sorted(common.FIXTURES.glob("*.json"))
CASES = [(f.stem, name) for f in FIXTURES for name in json.loads(f.read_text())["checks"]]


def test_every_paper_has_a_fixture() -> None:
    assert {f.stem for f in FIXTURES} >= {"fedbpt"}


@pytest.mark.parametrize(("paper", "name"), CASES, ids=[f"{p}-{n}" for p, n in CASES])
def test_against_the_authors(paper: str, name: str) -> None:
    fixture = common.read(paper)
    c = fixture["checks"][name]
    module = importlib.import_module(f"tools.reference.{paper}")
    ours = common.plain(module.OURS[name](c["inputs"]))
    diff = common.max_abs_diff(ours, c["expected"])
    if c["verdict"] == "agrees":
        assert diff <= c["tolerance"], (
            f"{c['function']}: fedtext is {diff:.3g} from the authors' code ({c['authors_file']}), "
            f"tolerance {c['tolerance']:.3g}")
    else:
        assert c["verdict"].startswith("departs"), c["verdict"]
        # the written-down departure, by the amount measured when the fixture was made
        assert diff > c["tolerance"] and np.isclose(diff, c["max_abs_diff"], rtol=1e-6, atol=c["tolerance"]), (
            f"{c['function']}: recorded departure {c['max_abs_diff']:.6g}, now {diff:.6g}")


def test_fixtures_say_where_they_come_from() -> None:
    for f in FIXTURES:
        doc = json.loads(f.read_text())
        assert doc["paper"] == f.stem
        assert doc["generated"]["command"].startswith(f"python -m tools.reference.{f.stem}")
        if doc["authors"]["repo"] is not None:
            assert doc["authors"]["commit"] and len(doc["authors"]["commit"]) == 40, f.name
            assert doc["authors"]["files"], f.name
        for name, c in doc["checks"].items():
            assert c["verdict"] != "DIFFERS", (f.name, name)
            assert c["max_abs_diff"] <= c["tolerance"] or c["verdict"].startswith("departs"), (f.name, name)


def test_docs_testing_holds_the_table_of_every_fixture() -> None:
    """docs/testing.md's "Against the authors' code" table is the one the fixtures make
    (``python tools/generated.py`` after writing a fixture)."""
    from tools.reference import table

    assert table.current() == table.render(), "run: python tools/generated.py"
