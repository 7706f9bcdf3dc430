"""Issue 67: each paper's headline comparison at two scales (simulations/papers/claims.py).

The arithmetic is checked on hand-made records with hand-computed values: a paired
difference with its sign flipped, a pair taken across seeds, a run of one arm counted in the
other or an unpaired seed kept in the pairs all fail here.
"""

from __future__ import annotations

import pytest

from simulations.papers import claims
from simulations.papers.claims import Arm, Claim, Reference

from .test_dashboard import _round, write_run

CLAIM = Claim(key="toy", statement="a beats b.", experiment="toy", arms=(
    Arm("a", (Reference(90.0, "RoBERTa-large", "Table 1"),)), Arm("b")), pairs=(("a", "b"),))


def _runs(results, suffix, accs):
    """``accs``: {(label, seed): final accuracy} as finished runs of ``toy<suffix>``."""
    for (label, seed), acc in accs.items():
        write_run(results / f"toy{suffix}" / "runs", f"{label}-s{seed}", label, seed, [_round(0, 0.5), _round(1, acc)])


@pytest.fixture
def results(tmp_path):
    _runs(tmp_path, "", {("a", 0): 0.70, ("a", 1): 0.80, ("b", 0): 0.75, ("b", 1): 0.70})
    # seed 2 of a has no b to pair with: in a's mean, in no pair
    _runs(tmp_path, "-base", {("a", 0): 0.90, ("a", 1): 0.85, ("a", 2): 0.50, ("b", 0): 0.80, ("b", 1): 0.84})
    return tmp_path


def test_the_ordering_is_judged_on_runs_paired_by_seed(results):
    small, base = claims.scales(CLAIM, results)
    assert claims.paired(small["a"], small["b"], "final_accuracy") == pytest.approx([-5.0, 10.0])
    assert claims.paired(base["a"], base["b"], "final_accuracy") == pytest.approx([10.0, 1.0])
    assert claims.paired(base["b"], base["a"], "final_accuracy") == pytest.approx([-10.0, -1.0])
    assert claims.paired(None, base["a"], "final_accuracy") == []


def test_the_block_has_each_arm_at_both_scales_and_the_pairs_verdict(results):
    text = claims.render(CLAIM, results)
    assert "| `a` | 90.00 % (RoBERTa-large; Table 1) | 0.750 ± 0.071 (2) | 0.750 ± 0.218 (3) |" in text
    assert "| `b` | — | 0.725 ± 0.035 (2) | 0.820 ± 0.028 (2) |" in text
    # small: -5 and +10 -> +2.5 ± 10.6, a ahead in 1 of 2; base: +10 and +1 -> +5.5 ± 6.4, 2 of 2
    assert ("- `a` ahead of `b`: MiniLM-L6 (22 M): +2.5 ± 10.6 (1/2), holds on average; "
            "MPNet-base (110 M): +5.5 ± 6.4 (2/2), holds") in text
    assert "`simulations/results/toy-base`" in text and "(figures/toy-base-scale.png)" in text


def test_a_cheap_change_is_paired_with_the_base_runs_and_rejudges_the_pairs(results):
    """Issue 67, item 3: the changed runs (``toy-d9``) against the same arm's base runs, seed by
    seed, and the paper's pair judged again among the changed runs only."""
    from dataclasses import replace

    claim = replace(CLAIM, changes=(claims.Change("d9", "d = 9 for both", ("a", "b")),))
    _runs(results, "-d9", {("a", 0): 0.95, ("a", 1): 0.80, ("b", 0): 0.85})
    text = claims.render(claim, results)
    assert "--profile d9 --methods a b` (`simulations/results/toy-d9`)" in text
    # a: base 0.90 / 0.85 / 0.50, changed 0.95 / 0.80 -> +5 and -5 on seeds 0 and 1 (seed 2 unpaired)
    assert "| `a` | 0.750 ± 0.218 (3) | 0.875 ± 0.106 (2) | +0.0 ± 7.1 (2) |" in text
    assert "| `b` | 0.820 ± 0.028 (2) | 0.850 ± 0.000 (1) | +5.0 ± 0.0 (1) |" in text
    # the pair among the changed runs: seed 0 only, 0.95 - 0.85
    assert "- changed, `a` ahead of `b`: +10.0 ± 0.0 (1/1), holds" in text
    empty = claims.render(replace(CLAIM, changes=(claims.Change("d7", "d = 7", ("a", "b")),)), results)
    assert "(no run yet)" in empty and "- changed, `a` ahead of `b`: not run" in empty
    (results / "toy-d8").mkdir()  # a folder without runs is no run
    assert "(no run yet)" in claims.render(replace(CLAIM, changes=(claims.Change("d8", "d = 8", ("a", "b")),)), results)


def test_a_cheap_change_pairs_by_seed_not_by_position(results):
    """The changed runs on seeds a base arm also has, but not its first ones: a on seed 1 only
    (against base a's 0.85, not seed 0's 0.90), b on seed 0 only: no pair among the changed."""
    from dataclasses import replace

    claim = replace(CLAIM, changes=(claims.Change("d6", "d = 6", ("a", "b")),))
    _runs(results, "-d6", {("a", 1): 0.95, ("b", 0): 0.70})
    text = claims.render(claim, results)
    assert "| `a` | 0.750 ± 0.218 (3) | 0.950 ± 0.000 (1) | +10.0 ± 0.0 (1) |" in text
    assert "| `b` | 0.820 ± 0.028 (2) | 0.700 ± 0.000 (1) | -10.0 ± 0.0 (1) |" in text
    assert "- changed, `a` ahead of `b`: no common seed" in text


def test_a_claim_not_run_at_base_scale_says_so(tmp_path):
    _runs(tmp_path, "", {("a", 0): 0.70, ("b", 0): 0.75})
    text = claims.render(CLAIM, tmp_path)
    assert "MPNet-base (110 M): not run" in text and "(no run yet)" in text
    assert "| `b` | — | 0.750 ± 0.000 (1) | — |" in text


@pytest.mark.parametrize("diffs, verdict", [
    ([1.0, 2.0], "holds"), ([-1.0, -2.0], "reversed"), ([3.0, -1.0], "holds on average"),
    ([1.0, -3.0], "reversed on average"), ([0.0, 0.0], "tied"), ([2.0, -2.0], "tied"), ([], "not run"),
    ([0.0, -1.0], "reversed on average"),  # a tie in one pair is not "behind in every pair"
])
def test_verdicts(diffs, verdict):
    assert claims.verdict(diffs) == verdict


def test_the_figure_carries_the_numbers_it_plots(results, tmp_path):
    data = claims.figure_data(CLAIM, results)
    assert data["arms"][0] == {"label": "a", "scales": [[75.0, 7.07, 2], [75.0, 21.79, 3]],
                               "paper": [90.0, "RoBERTa-large"]}
    assert data["arms"][1]["paper"] is None
    out = claims.draw(CLAIM, tmp_path / "f.png", results)
    assert claims.figure_description(out) == data


def test_a_relative_figure_is_shown_but_never_drawn_as_an_accuracy():
    arm = Arm("fes", (Reference(95.9, "RoBERTa-large", "Table 4", relative=True),))
    assert arm.reference("final_accuracy") is None
    assert "95.90 % of full-label fine-tuning" in claims._paper(arm, ("final_accuracy",))


def test_every_claim_names_methods_its_records_have_and_each_paper_page_has_its_block():
    """The labels are the compare runner's (a typo reads as "not run" forever), every pair is
    two of the claim's arms, and tools/generated.py lists exactly the claims' pages."""
    from tools import generated

    for claim in claims.CLAIMS:
        labels = {arm.label for arm in claim.arms}
        assert {x for pair in claim.pairs for x in pair} <= labels, claim.key
        small = claims.load(claims.RESULTS / claim.experiment)
        assert labels <= set(small), (claim.key, labels - set(small))
        assert set(claim.metrics) <= set(claims.METRICS)
        assert not claim.methods_flag or set(claim.methods_flag.split()) == labels, claim.key
    assert {k for k in generated.BLOCKS if k.startswith("base-scale-")} == {f"base-scale-{c.key}" for c in claims.CLAIMS}
    assert all(generated.BLOCKS[f"base-scale-{c.key}"].page == c.page for c in claims.CLAIMS)


def test_every_papers_figure_is_printed_in_the_paper_it_cites():
    """Each :class:`Reference` is transcribed from ``../shared/papers/<nnn>_*.txt`` (the number in
    its source): the figure, as the paper prints it, is in that file's text (a typo fails)."""
    import re

    from ..conftest import REPO

    papers = REPO.parent / "shared" / "papers"
    if not papers.is_dir():
        pytest.skip("../shared/papers is not beside this checkout (a user's clone)")
    checked = 0
    for claim in claims.CLAIMS:
        for arm in claim.arms:
            for ref in arm.paper:
                number = re.search(r"\((\d{3})\)", ref.source).group(1)
                (path,) = papers.glob(f"{number}_*.txt")
                assert re.search(rf"(?<![\d.]){re.escape(f'{ref.value:g}')}(?!\d)", path.read_text()), (
                    claim.key, arm.label, ref)
                checked += 1
    assert checked >= 18
