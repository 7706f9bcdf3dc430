"""Every generated block of README and docs/ is what its function writes now
(``python tools/generated.py`` rewrites them), and the measured timings it shows respect the
budget stated beside them (tools/timings.py)."""

from __future__ import annotations

import json

import pytest

from tools import generated, timings


def test_markers_round_trip():
    page = f"x\n{generated.begin('a')}\nold\n{generated.end('a')}\ny\n"
    start = page.index("old")
    assert generated.blocks_in(page) == {"a": (start, start + len("old\n"))}
    assert generated.replace(page, "a", "new\n") == f"x\n{generated.begin('a')}\nnew\n{generated.end('a')}\ny\n"
    assert generated.without_blocks(page) == f"x\n{generated.begin('a')}\n\n{generated.end('a')}\ny\n"
    for broken in (f"{generated.begin('a')}\n", f"{generated.end('a')}\n",
                   f"{generated.begin('a')}\n{generated.begin('b')}\n{generated.end('b')}\n{generated.end('a')}\n"):
        with pytest.raises(ValueError):
            generated.blocks_in(broken)


def test_every_generated_block_is_current():
    stale = generated.stale()
    assert not stale, "run: python tools/generated.py\n" + "\n".join(stale)


def test_the_measured_suite_is_within_its_budget():
    """docs/timings.json, the last measurement on a fresh clone: README's test command passed and
    took no longer than the budget, and each tier stayed within its share (docs/testing.md)."""
    t = timings.load()
    assert t is not None, "no measurement committed: python tools/timings.py measure"
    assert t["test_exit"] == 0, t["test_summary"]
    # the tests that read the measurement itself are the only ones a measurement leaves out
    assert set(t["deselected"]) <= set(timings.READS_THE_MEASUREMENT), t["deselected"]
    assert t["test_s"] <= timings.BUDGET_S["all"], (t["test_s"], timings.BUDGET_S["all"])
    over = {tier: v["s"] for tier, v in timings.tiers(t).items() if v["s"] > timings.BUDGET_S[tier]}
    assert not over, over
    assert sum(v["tests"] for v in timings.tiers(t).values()) == len(t["tests"]) > 0


def test_the_suite_measured_beside_another_job_is_within_its_budget():
    """docs/timings_beside.json (``measure --beside``), where one was made: README's test command
    passed beside a second job on the same cores, within the budget for that case."""
    if not timings.BESIDE.is_file():
        pytest.skip("no measurement beside another job committed")
    t = json.loads(timings.BESIDE.read_text())
    assert t["test_exit"] == 0, t["test_summary"]
    assert t["test_s"] <= timings.BESIDE_BUDGET_S, (t["test_s"], timings.BESIDE_BUDGET_S)
