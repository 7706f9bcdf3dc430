"""Run records: summaries from round records, tolerant reading."""

from __future__ import annotations

import json

from fedtext.records import ROUND_FIELDS, RunRecorder, load_run, progress_line, summarize

ROUNDS = [
    {"round": 0, "global_accuracy": 0.5, "bytes_up": 0, "bytes_down": 0, "model_queries": 0, "num_clients": 0},
    {"round": 1, "global_accuracy": 0.7, "bytes_up": 1000, "bytes_down": 2000, "bytes_up_per_client": 500,
     "bytes_down_per_client": 1000, "model_queries": 300, "client_peak_rss_mb": 900.0, "num_clients": 2},
    {"round": 2, "global_accuracy": 0.6, "bytes_up": 1000, "bytes_down": 2000, "bytes_up_per_client": 500,
     "bytes_down_per_client": 1000, "model_queries": 300, "client_peak_rss_mb": 950.0, "num_clients": 2,
     "client_accuracy_mean": 0.65},
]


def test_summarize_hand_computed():
    s = summarize(ROUNDS)
    assert s["initial_accuracy"] == 0.5 and s["final_accuracy"] == 0.6 and s["best_accuracy"] == 0.7
    assert s["total_bytes_up"] == 2000 and s["total_bytes_down"] == 4000
    assert s["mean_bytes_up_per_client"] == 500 and s["total_model_queries"] == 600
    assert s["peak_client_rss_mb"] == 950.0 and s["rounds_done"] == 2
    assert s["final_client_accuracy_mean"] == 0.65


def test_recorder_writes_the_three_files(tmp_path):
    rec = RunRecorder(tmp_path, {"method": "bbt-fed", "dataset": "demo", "seed": 0, "num-server-rounds": 2})
    for r in ROUNDS:
        rec.log_round(r)
    summary = rec.finish()
    run = load_run(rec.dir)
    assert run["config"]["config"]["method"] == "bbt-fed" and "machine" in run["config"]
    assert [r["round"] for r in run["rounds"]] == [0, 1, 2]
    assert run["summary"]["status"] == "finished" == summary["status"]
    assert rec.finish("failed")["status"] == "finished"  # first call wins
    second = RunRecorder(tmp_path, {"method": "bbt-fed", "dataset": "demo", "seed": 0}, run_id=rec.run_id)
    assert second.dir != rec.dir  # never overwrite a run


def test_truncated_rounds_file_is_read_up_to_the_break(tmp_path):
    (tmp_path / "rounds.jsonl").write_text(json.dumps(ROUNDS[0]) + "\n" + '{"round": 1, "glo')
    run = load_run(tmp_path)
    assert len(run["rounds"]) == 1 and run["malformed_lines"] == 1 and run["summary"] is None


def test_progress_line():
    line = progress_line({**ROUNDS[1], "global_loss": 0.4, "wall_time_s": 3.0}, 10)
    assert line.startswith("fedtext round 1/10 | acc 0.700 loss 0.400")
    assert "up 1.0 KB down 2.0 KB" in line


def test_round_fields_are_documented():
    assert {"round", "global_accuracy", "bytes_up", "bytes_down", "model_queries", "client_peak_rss_mb",
            "wall_time_s", "client_accuracy"} <= set(ROUND_FIELDS)
