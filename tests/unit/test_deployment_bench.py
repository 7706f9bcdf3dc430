"""The deployment bench's and the memory table's own arithmetic (simulations/deployment_bench.py,
simulations/memory_limits.py): which rounds count, which keys a harness passes, what the
tables say. Their runs are experiments (docs/performance.md, docs/deployment.md), not tests."""

from __future__ import annotations

from simulations import deployment_bench as bench
from simulations import memory_limits


def _round(n: int, t: float, **kw) -> dict:
    return {"round": n, "round_time_s": t, "client_fit_s_max": 1.0, "startup_s": 0.5, "client_load_s": 0.1,
            "client_eval_s": 0.2, "server_eval_s": 0.3, "overhead_s": 0.4, "global_accuracy": 0.5,
            "num_clients": 2, "clients_evaluated": 2, **kw}


def test_the_steady_rounds_are_2_onwards_and_round_1_stands_apart():
    out = bench.summarise([_round(0, 1.0), _round(1, 30.0), _round(2, 10.0), _round(3, 12.0)])
    assert out["round_s"] == 11.0 and out["round1_s"] == 30.0 and out["steady_rounds"] == [2, 3]
    assert out["messages"] == 4.0 and out["accuracy"] == [0.5] * 4


def test_a_harness_passes_shared_keys_and_the_methods_own_only():
    pairs, nodes = bench.harness("t1")
    assert nodes == 10 and pairs["shots-per-class"] == 8 and pairs["dataset"].endswith("shared/data/ag_news")
    mine = bench.for_method(pairs, "fedprompt")
    assert mine["fedprompt.local-steps"] == 6 and not any(k.startswith("fedavg.") for k in mine)
    assert mine["eval-every"] == 2 and bench.for_method(pairs, "fes")["eval-every"] == 1  # FeS's pacing reads every round
    assert bench.pairs_text({"method": "fedprompt", "flag": True, "p": "a b"}) == "method=fedprompt flag=true p='a b'"


def test_the_memory_table_words_each_outcome():
    assert memory_limits._cell({"outcome": "completed", "cgroup_peak_mb": 500.4, "peak_rss_mb": 700.6}) == \
        "yes, 500 / 701 MB"
    assert memory_limits._cell({"outcome": "refused", "line": "x reached 950 MB", "guard_peak_mb": 950.2}) == \
        "stopped at 950 MB (one line)"
    assert memory_limits._cell({"outcome": "refused", "line": "x would start with 1,200 MB"}) == \
        "refused at once (one line)"
    assert memory_limits._cell({"outcome": "oom-killed"}) == "oom-killed" and memory_limits._cell(None) == "-"


def test_the_table_shows_the_warm_processes_and_the_cold_column_when_measured(tmp_path, monkeypatch):
    import json

    part = {"round_s": 4.0, "fit_max_s": 1.0, "startup_s": 0.5, "load_s": 0.0, "overhead_s": 0.4, "load_before": 1.0,
            "steady_rounds": [2, 3]}
    row = {"ray": {**part, "round_s": 3.2}, "service": part, "ratio": 1.25, "commit": "abc",
           "cold": {**part, "round_s": 8.0, "startup_s": 3.5}, "ratio_cold": 2.5}
    rec = {"supernodes": 2, "machine": "x86_64, 2 cores", "date": "2026-11-29", "commit": "abc", "target": 1.2,
           "warm_clientapps": 1, "methods": {"fedprompt": row, "bbt-fed": {**row, "ratio": 1.1}}}
    rec["methods"]["bbt-fed"].pop("cold"), rec["methods"]["bbt-fed"].pop("ratio_cold")
    (tmp_path / "demo.json").write_text(json.dumps(rec))
    monkeypatch.setattr(bench, "RESULTS", tmp_path)
    table = bench.render()
    assert "--harness demo --cold`" in table and "deployment round (node service, 1 warm ClientApp)" in table
    assert "| fedprompt | 3.2 s | 4.0 s | x1.25 (over) | 1.0 s | 0.5 s | 0.00 s | 0.4 s | 8.0 s (x2.50; start-ups 3.5 s) |" \
        in table
    assert "| bbt-fed | 3.2 s | 4.0 s | x1.10 | 1.0 s | 0.5 s | 0.00 s | 0.4 s | - | - |" in table
    assert "Within x1.2: bbt-fed; over: fedprompt." in table
    del rec["warm_clientapps"]  # a record from before the warm processes: the table as it was
    for r in rec["methods"].values():
        r.pop("cold", None), r.pop("ratio_cold", None)
    (tmp_path / "demo.json").write_text(json.dumps(rec))
    old = bench.render()
    assert "deployment round (node service) | ratio |" in old and "cold" not in old
