"""The privacy studies' tables (simulations/studies/privacy.py, issue 59; privacy_cross_device.py, issue 69) from hand-made round records: no run, no model.

What it must say: the start (round 0) beside each noise's final accuracy, the ε of the last round
(∞ for clipping alone, no ε without DP), and the bytes per client-round once per method when every
noise sent the same (DP adds no byte).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulations.studies import privacy
from simulations.studies import privacy_cross_device as cross


def _run(tmp: Path, label: str, seed: int, start: float, final: float, eps: float | None, dp: bool) -> dict[str, Any]:
    folder = tmp / f"{label}-s{seed}"
    folder.mkdir()
    spent = {"mode": "central", "epsilon": eps, "clipped": 1} if dp else None
    rounds = [{"round": 0, "global_accuracy": start, "bytes_up_per_client": None, "privacy": None}]
    rounds += [{"round": r, "global_accuracy": None, "bytes_up_per_client": 400.0, "bytes_down_per_client": 400.0,
                "privacy": spent} for r in (1, 2)]
    (folder / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    return {"dir": str(folder), "summary": {"final_accuracy": final}}


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {("fedprompt-none", 0): _run(tmp_path, "fedprompt-none", 0, 0.7, 0.8, None, False),
            ("fedprompt-none", 1): _run(tmp_path, "fedprompt-none", 1, 0.6, 0.9, None, False),
            ("fedprompt-z0", 0): _run(tmp_path, "fedprompt-z0", 0, 0.7, 0.75, None, True),
            ("fedprompt-z1", 0): _run(tmp_path, "fedprompt-z1", 0, 0.7, 0.3, 5.46, True)}
    (tmp_path / "runs").mkdir()
    monkeypatch.setattr(privacy, "OUT", tmp_path)
    monkeypatch.setattr(privacy, "finished_runs", lambda root: runs)


def test_table_puts_the_start_beside_each_noise_and_the_last_rounds_epsilon(records: None) -> None:
    lines = privacy.table().splitlines()
    row = next(x for x in lines if x.startswith("| `fedprompt` | 0.650 |"))  # round 0: seed 0's 0.7, seed 1's 0.6
    assert "| 0.850 ± 0.071 (2) | 0.750 (1) | – | 0.300 (1) | – |" in row
    assert "| ε (every method) | | — | ∞ | 5.46 |" in lines


def test_table_writes_one_byte_count_when_every_noise_sent_the_same(records: None) -> None:
    assert any(x.startswith("| `fedprompt` | ") and x.endswith("| 400 / 400 |") for x in privacy.table().splitlines())


def _cross_device_run(tmp: Path, label: str, curve: dict[int, float], z: float | None) -> dict[str, Any]:
    """4 rounds of 10, 12, 8 and 10 clients, a minute each after 6 s of start (``wall_time_s``: since the run
    began); under DP, q = 0.3 at noise multiplier ``z``, the
    adaptive clip going 1.0, 1.1, 1.2, 1.3 and 2 updates clipped a round; accuracy at ``curve``'s rounds."""
    folder = tmp / label
    folder.mkdir()
    rounds = [{"round": 0, "global_accuracy": curve[0], "num_clients": 0, "wall_time_s": 6.0}]
    for r, n in zip((1, 2, 3, 4), (10, 12, 8, 10), strict=True):
        spent = {"epsilon": 1.0, "accountant": "rdp", "accounting": "poisson", "sampling_rate": 0.3,
                 "noise_multiplier": z, "delta": 1e-5, "clip": 1.0 + (r - 1) / 10, "clipped": 2} if z is not None else None
        rounds.append({"round": r, "global_accuracy": curve.get(r), "num_clients": n, "wall_time_s": 6.0 + 60 * r,
                       "bytes_up_per_client": 12416.0, "privacy": spent})
    (folder / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    return {"dir": str(folder)}


def test_the_cross_device_table_gives_the_gap_to_no_dp_and_both_accountants_epsilon(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per run: the last evaluated accuracy, its gap to the same seed's run without DP (in points, signed),
    ε after the rounds the run released (4) by RDP and PLD from its recorded q = 0.3 and z = 1: the
    dp-accounting figures 5.46 and 4.76 (tests/unit/test_poisson_sampling.py), ∞ at z = 0; the cohorts'
    mean and range, the clip's path and the share of updates clipped (8 of 40)."""
    runs = {("fedprompt-none", 0): _cross_device_run(tmp_path, "none", {0: 0.55, 2: 0.70, 4: 0.80}, None),
            ("fedprompt-z0", 0): _cross_device_run(tmp_path, "z0", {0: 0.55, 2: 0.72, 4: 0.81}, 0.0),
            ("fedprompt-z1", 0): _cross_device_run(tmp_path, "z1", {0: 0.55, 2: 0.66, 4: 0.785}, 1.0),
            ("fedlora-none", 0): _cross_device_run(tmp_path, "lora-none", {0: 0.45, 4: 0.90}, None),
            ("fedlora-z1", 0): _cross_device_run(tmp_path, "lora-z1", {0: 0.45, 4: 0.88}, 1.0),
            ("fedprompt-z0-dir", 0): _cross_device_run(tmp_path, "z0-dir", {0: 0.55, 4: 0.70}, 0.0),
            ("fedprompt-z1-dir", 0): _cross_device_run(tmp_path, "z1-dir", {0: 0.55, 4: 0.66}, 1.0),
            ("fedprompt-z1-dir", 1): _cross_device_run(tmp_path, "z1-dir-s1", {0: 0.55, 4: 0.66}, 1.0)}
    (tmp_path / "out" / "runs").mkdir(parents=True)
    monkeypatch.setattr(cross, "REPO", tmp_path)
    monkeypatch.setattr(cross, "OUT", tmp_path / "out")
    monkeypatch.setattr(cross, "finished_runs", lambda root: runs)
    lines = cross.table().splitlines()
    assert lines[0].startswith("`out` (4 rounds; server accuracy") and "accuracy at rounds 0, 2, 4 |" in lines[2]
    assert "| `fedprompt-none` | 0 | 0.800 | +0.0 pt | 0.550, 0.700, 0.800 | — | — | 10.0 (8–12) | — | — | 12,416 | 4 |" in lines
    assert "| `fedprompt-z0` | 0 | 0.810 | +1.0 pt | 0.550, 0.720, 0.810 | ∞ | ∞ | 10.0 (8–12) | 1.00 → 1.30 | 20 % |" \
        in "\n".join(lines)
    assert "| `fedprompt-z1` | 0 | 0.785 | -1.5 pt | 0.550, 0.660, 0.785 | 5.46 | 4.76 | 10.0 (8–12) | 1.00 → 1.30 | 20 % |" \
        in "\n".join(lines)
    # each run against its own method's run without DP, not the last one listed
    assert "| `fedlora-z1` | 0 | 0.880 | -2.0 pt |" in "\n".join(lines)
    assert "| `fedlora-none` | 0 | 0.900 | +0.0 pt |" in "\n".join(lines)
    # no run without DP of the -dir pair: the gap is to the same seed's run at z = 0, and says so
    assert "| `fedprompt-z1-dir` | 0 | 0.660 | -4.0 pt (vs z = 0) |" in "\n".join(lines)
    assert "| `fedprompt-z0-dir` | 0 | 0.700 | – |" in "\n".join(lines)  # not against itself
    assert "| `fedprompt-z1-dir` | 1 | 0.660 | – |" in "\n".join(lines)  # seed 1 has no twin


def test_a_runs_twin_without_dp_swaps_only_its_noise_part() -> None:
    assert cross.no_dp_twin("bbt-fed-z12") == "bbt-fed-none"
    assert cross.no_dp_twin("fedprompt-z12-dir") == "fedprompt-none-dir"
    assert cross.no_dp_twin("fedprompt-none") == "fedprompt-none"
    assert cross.zero_noise_twin("fedprompt-z12-dir") == "fedprompt-z0-dir"
    assert cross.zero_noise_twin("fedprompt-none") == "fedprompt-none"


# ------------------------------------------------------------------ issue 69, clause 3: where the noise goes
UPDATES = [[np.array([3.0, 4.0])], [np.array([0.0, 1.0])], [np.array([0.0, 2.0])]]  # norms 5, 1, 2


def test_a_releases_signal_is_the_clipped_sum_over_the_expected_cohort_at_the_median_norm() -> None:
    """By hand: C = median(5, 1, 2) = 2 (not the mean 8/3); clip (3, 4) to (1.2, 1.6); sum (1.2, 4.6) over
    m = 4 (the expected cohort, not the 3 that came) = (0.3, 1.15), norm 1.188486, signal 0.594243 C.
    z_Δ = (0.1⁻² - (2 σ_b)⁻²)^-½ with σ_b = m / 20 = 0.2: 0.103280; noise z_Δ √2 / 4 = 0.036515 C."""
    s = cross.release_stats(UPDATES, m=4, z=0.1, draws=8, seed=0)
    assert (s["d"], s["updates"], s["m"], s["clip"]) == (2, 3, 4, 2.0)
    assert s["signal"] == pytest.approx(0.594243, abs=1e-6)
    assert s["z_delta"] == pytest.approx(0.103280, abs=1e-6)
    assert s["noise"] == pytest.approx(0.036515, abs=1e-6)
    assert s["snr"] == pytest.approx(0.594243 / 0.036515, rel=1e-4)
    assert 0.99 < s["cosine"] <= 1.0  # noise 6 % of the signal: the direction survives


def test_more_noise_turns_the_release_away_from_the_mean_and_the_draws_are_seeded() -> None:
    quiet = cross.release_stats(UPDATES, m=40, z=0.1, draws=64, seed=1)
    loud = cross.release_stats(UPDATES, m=40, z=3.0, draws=64, seed=1)
    assert loud["noise"] > 25 * quiet["noise"] and loud["signal"] == quiet["signal"]
    assert -1.0 <= loud["cosine"] < quiet["cosine"] - 0.2
    assert cross.release_stats(UPDATES, m=40, z=3.0, draws=64, seed=1) == loud


def test_the_release_table_lists_each_method_by_its_released_dimension(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "simulations" / "results" / "privacy_cross_device"
    (profile := out.parent / "privacy_cross_device-cpu").mkdir(parents=True)
    rows = [{"method": "fedlora", "seed": 0, "z": 1.2, "m": 120, "d": 74498, "updates": 118, "clip": 0.57,
             "signal": 0.53, "noise": 2.73, "snr": 0.194, "cosine": 0.19, "fit_s": 141.6},
            {"method": "bbt-fed", "seed": 0, "z": 1.2, "m": 120, "d": 100, "updates": 118, "clip": 11.5,
             "signal": 0.51, "noise": 0.1, "snr": 5.1, "cosine": 0.98, "fit_s": 472.0}]
    (profile / cross.RELEASE_FILE).write_text(json.dumps({"rows": rows, "machine": "M", "date": "D"}))
    monkeypatch.setattr(cross, "REPO", tmp_path)
    monkeypatch.setattr(cross, "OUT", out)
    text = cross.render_release()
    lines = [x for x in text.splitlines() if x.startswith("| `")]
    assert [x.split("`")[1] for x in lines] == ["bbt-fed", "fedlora"]  # smallest release first
    assert "| `fedlora` | 74,498 | 118 | 0.57 | 0.530 | 2.730 | 0.19 | 0.190 | 1.20 |" in lines
    assert "z = 1.2, m = 120; M, D" in text and "privacy_cross_device-cpu/release.json" in text
    (profile / cross.RELEASE_FILE).unlink()
    assert "No release measurement yet" in cross.render_release()
