"""simulations.privacy's table (issue 59) from hand-made round records: no run, no model.

What it must say: the start (round 0) beside each noise's final accuracy, the ε of the last round
(∞ for clipping alone, no ε without DP), and the bytes per client-round once per method when every
noise sent the same (DP adds no byte).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulations import privacy, robust


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
    monkeypatch.setattr(robust, "newest_runs", lambda out: runs)


def test_table_puts_the_start_beside_each_noise_and_the_last_rounds_epsilon(records: None) -> None:
    lines = privacy.render().splitlines()
    row = next(x for x in lines if x.startswith("| `fedprompt` | 0.650 |"))  # round 0: seed 0's 0.7, seed 1's 0.6
    assert "| 0.850 ± 0.071 (2) | 0.750 (1) | – | 0.300 (1) | – |" in row
    assert "| ε (every method) | | — | ∞ | 5.46 |" in lines


def test_table_writes_one_byte_count_when_every_noise_sent_the_same(records: None) -> None:
    assert any(x.startswith("| `fedprompt` | ") and x.endswith("| 400 / 400 |") for x in privacy.render().splitlines())
