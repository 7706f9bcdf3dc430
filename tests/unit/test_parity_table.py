"""The parity study's table (simulations/studies/parity.py): the bf16 runs of fedbpt_sst2_bf16.toml
beside fedbpt_sst2.toml's fp32 runs, from hand-made records (test_compare.py's ``record_run``); no run."""

from __future__ import annotations

from pathlib import Path

from simulations import compare
from simulations.studies import parity

from ..conftest import REPO
from .test_compare import record_run


def test_parity_puts_each_seed_of_two_precisions_side_by_side(tmp_path: Path) -> None:
    """Per method, each precision's mean ± std over seeds, the mean and largest same-seed difference,
    whether it is within the fp32 spread, bytes both ways."""
    for folder, accuracies in (("fp32", {0: 0.70, 1: 0.80}), ("bf16", {0: 0.72, 1: 0.79})):
        for seed, acc in accuracies.items():
            record_run({"method": "fedprompt", "seed": seed, "output-dir": str(tmp_path / folder / "runs")}, acc)
    text = parity.table(tmp_path / "bf16", reference=tmp_path / "fp32")
    row = next(r for r in text.splitlines() if r.startswith("| fedprompt"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # fp32 0.75 ± 0.0707 (sample std of 0.70, 0.80); bf16 0.755 ± 0.0495; differences +0.02, -0.01
    assert cells[:7] == ["fedprompt", "2", "0.750 ± 0.071", "0.755 ± 0.049", "+0.005", "0.020", "yes"]
    for pair in cells[7:10]:  # bytes up, down and queries: the fp32 figure, then the bf16 one
        fp32, bf16 = pair.split(", ")
        assert fp32 == bf16
    # the header names the runner's command for these runs and the fp32 folder
    assert text.startswith(f"<!-- python -m simulations.compare simulations/experiments/fedbpt_sst2_bf16.toml "
                           f"--out {tmp_path / 'bf16'} | fp32: {tmp_path / 'fp32'} | ")


def test_the_fp32_side_is_fedbpt_sst2s_folder_of_the_same_profile() -> None:
    results = REPO / "simulations" / "results"
    assert parity.reference_of(parity.OUT) == results / "fedbpt_sst2"
    assert parity.reference_of(results / "fedbpt_sst2_bf16-paper") == results / "fedbpt_sst2-paper"
    assert parity.reference_of(Path("/elsewhere/out")) == compare.default_out(parity.REFERENCE)
    assert parity.command(parity.OUT) == "python -m simulations.compare simulations/experiments/fedbpt_sst2_bf16.toml"
    assert parity.command(results / "fedbpt_sst2_bf16-paper").endswith("fedbpt_sst2_bf16.toml --profile paper")


def test_no_runs_on_either_side_says_which_and_how_to_make_them(tmp_path: Path) -> None:
    record_run({"method": "fedprompt", "seed": 0, "output-dir": str(tmp_path / "bf16" / "runs")}, 0.7)
    text = parity.table(tmp_path / "bf16", reference=tmp_path / "fp32")
    assert f"No finished run under {tmp_path / 'fp32' / 'runs'} yet" in text
    assert "(`python -m simulations.compare simulations/experiments/fedbpt_sst2.toml`)" in text
    assert "No finished run under" in parity.table(tmp_path / "none", reference=tmp_path / "bf16")
