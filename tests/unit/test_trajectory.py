"""simulations/trajectory.py: per-round columns and the largest difference from the first run."""

from __future__ import annotations

import json

from simulations.trajectory import main, read_rounds, shared_metrics, table


def _run(path, rounds):
    path.mkdir()
    (path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    return path


def _rounds(acc2, sigma1, sigma2, extra=None):
    return [{"round": 0, "global_accuracy": 0.5, "train_loss": None, "method_metrics": {}},
            {"round": 1, "global_accuracy": None, "train_loss": 0.6, "method_metrics": {"sigma": sigma1, **(extra or {})}},
            {"round": 2, "global_accuracy": acc2, "train_loss": 0.5, "method_metrics": {"sigma": sigma2}}]


def test_table_lines_up_rounds_and_reports_the_largest_gap_from_the_first_run(tmp_path):
    a = read_rounds(_run(tmp_path / "a", _rounds(0.70, 1.0, 2.0, {"only_a": 1.0})))
    b = read_rounds(_run(tmp_path / "b", _rounds(0.65, 1.25, 1.9)))
    assert shared_metrics([a, b]) == ["global_accuracy", "train_loss", "sigma"]  # only_a: not in b
    text = table([a, b], ["cpu", "gpu"])
    assert "| 1 |  |  | 0.6000 | 0.6000 | 1.0000 | 1.2500 |" in text
    assert "| 2 | 0.7000 | 0.6500 | 0.5000 | 0.5000 | 2.0000 | 1.9000 |" in text
    # sigma: |1.25 - 1.0| = 0.25 beats |1.9 - 2.0| = 0.1; accuracy: round 0 equal, round 2 0.05 apart
    assert "| sigma | 0.25 |" in text and "| global_accuracy | 0.05 |" in text and "| train_loss | 0 |" in text


def test_main_refuses_mismatched_labels_and_folders_without_rounds(tmp_path, capsys):
    a = _run(tmp_path / "a", _rounds(0.7, 1.0, 2.0))
    assert main([str(a), "--labels", "x", "y"]) == 2
    assert main([str(a), str(tmp_path)]) == 2
    assert "no rounds.jsonl" in capsys.readouterr().err
    assert main([str(a), str(a)]) == 0


def test_metrics_picks_and_orders_columns_and_names_one_a_run_lacks(tmp_path, capsys):
    a = read_rounds(_run(tmp_path / "a", _rounds(0.70, 1.0, 2.0, {"only_a": 1.0})))
    b = read_rounds(_run(tmp_path / "b", _rounds(0.65, 1.25, 1.9)))
    text = table([a, b], ["cpu", "gpu"], ["sigma", "global_accuracy"])
    assert text.splitlines()[0] == "| round | sigma (cpu) | sigma (gpu) | global_accuracy (cpu) | global_accuracy (gpu) |"
    assert "train_loss" not in text
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--metrics", "only_a"]) == 2
    assert "only_a" in capsys.readouterr().err


def test_a_malformed_line_is_left_out_as_every_reader_does(tmp_path):
    """Issue 58: trajectory read rounds.jsonl with its own json.loads (a truncated line raised,
    a NaN or a line of any length was taken); it reads through fedtext.records now."""
    a = _run(tmp_path / "a", _rounds(0.7, 1.0, 2.0))
    with open(a / "rounds.jsonl", "a") as fh:
        fh.write('{"round": 3, "global_accuracy": NaN}\n{"round": 4, "glo')
    assert [r["round"] for r in read_rounds(a)] == [0, 1, 2]
