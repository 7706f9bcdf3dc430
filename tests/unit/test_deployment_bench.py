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
