"""The cost tables at the papers' scale (simulations/costs.py): what a row counts, the
settings it runs, and the papers' figures set beside it. The rows here are measured on
``tiny-roberta`` (RoBERTa's architecture at width 32): the same code measures RoBERTa-large."""

from __future__ import annotations

import pytest
import torch

from fedtext.common.registry import METHODS
from simulations.costs import CLAIMS, PAPER_KEYS, STEP_KEYS, Backprop, measure, paper_rows, run_keys

DEMO = {"dataset": "demo"}  # no benchmark data needed


def test_backprop_counts_the_weights_a_backward_reaches_once_each() -> None:
    torch.manual_seed(0)
    trained, frozen = torch.nn.Linear(3, 2), torch.nn.Linear(2, 1)  # 3*2 + 2 = 8 weights; 2 + 1 frozen
    frozen.requires_grad_(False)
    x = torch.randn(4, 3)
    original = torch.autograd.backward
    with Backprop().active() as bp:
        for _ in range(2):  # two steps: the same leaves, counted once
            frozen(trained(x)).sum().backward()
        torch.autograd.backward(trained(x).sum())  # the functional form too
    assert (bp.weights, bp.calls) == (8, 3)
    assert torch.autograd.backward is original  # restored
    with torch.no_grad(), Backprop().active() as none:
        frozen(trained(x))
    assert (none.weights, none.calls) == (0, 0)


def test_a_row_runs_one_unit_of_local_work_at_the_papers_settings() -> None:
    keys = run_keys("fedprompt", "roberta-large", {})
    assert keys["fedprompt.local-steps"] == 1 and keys["prompt-length"] == 50  # FedDLS Table 1's T
    assert keys["weights"] == "random" and keys["num-server-rounds"] == 1
    fes = run_keys("fes", "roberta-large", {})
    # FeS's AG News plan on 24 layers: 2/3 frozen, the rest bias-only; length 256 (§4.1)
    assert (fes["fes.frozen-layers"], fes["fes.bias-layers"], fes["max-length"]) == (16, 8, 256)
    assert fes["fes.max-local-steps"] == 1 and fes["dataset"].endswith("ag_news")
    assert run_keys("fes", "roberta-base", {})["fes.frozen-layers"] == 8
    assert run_keys("bbt-fed", "roberta-large", {"seed": 3})["bbt-fed.intrinsic-dim"] == 500
    feddls = run_keys("feddls", "roberta-large", {})
    assert feddls["feddls.steps"] == 1 and feddls["num-server-rounds"] == 2  # round 2 downloads the residual
    # every method's local work is cut to one unit: each config has one of the step keys
    assert all(any(f in METHODS[m].__dataclass_fields__ for f in STEP_KEYS) for m in METHODS)
    assert "weights" not in run_keys("fedavg", "all-MiniLM-L6-v2", {})  # a checkpoint keeps its own
    assert set(PAPER_KEYS) <= set(METHODS)


@pytest.mark.parametrize(("method", "backprop"), [("fedprompt", 50 * 32), ("bbt-fed", 0)])
def test_a_row_measures_bytes_values_and_back_propagation(method: str, backprop: int) -> None:
    """fedprompt's T = 50 prompt of width 32 is what it trains and sends (float32 + a 128 B
    NPY header); bbt-fed's z (d = 500) travels and nothing is back-propagated."""
    row = measure(method, "tiny-roberta", DEMO)
    sent = 50 * 32 if method == "fedprompt" else 500
    assert row["backprop_weights"] == backprop
    assert row["values_up"] == row["values_down"] == sent
    assert row["bytes_up"] == row["bytes_down"] == 4 * sent + 128
    assert row["weights_total"] == 1_643_168 and row["queries"] > 0 and row["fit_s"] > 0
    assert row["round_peak_mb"] >= row["round_start_mb"] > 100 and row["server_s"] >= 0


def test_the_papers_figures_stand_beside_the_rows_with_the_ratio() -> None:
    rows = [{"method": "feddls", "bytes_up": 228, "bytes_down": 1328, "backprop_weights": 0},
            {"method": "bbt-fed", "bytes_up": 2128}]
    text = paper_rows("feddls", {"roberta-large": {"rows": rows}, "roberta-base": {"rows": []}})
    lines = {line.split(" | ")[1]: line for line in text.splitlines()[2:]}
    assert "| 2.28 |" in lines["upload per round (`feddls`)"]  # 228 B against 0.8 K bits = 100 B
    assert "| 1.33 |" in lines["download per round (`feddls`)"]  # 1,328 B against 8 K bits = 1,000 B
    assert "| 2.13 |" in lines["BBT (Fed) upload per round (`bbt-fed`)"]  # 2,128 B against 1,000 B
    assert "| none | same |" in lines["back-propagation (G: no) (`feddls`)"]
    assert "not measured" in lines["Prompt Tuning (Fed) upload per round (`fedprompt`)"]
    memory = paper_rows("fes", {"roberta-large": {"rows": [{"method": "fes", "round_peak_mb": 2.3 * 1024 * 2}]}})
    assert "| 4.60 GB | 2.00 |" in memory
    # FedDPG states its own generator at RoBERTa-base: its row is read from that backbone's record
    params = paper_rows("feddpg", {"roberta-large": {"rows": [{"method": "feddpg", "values_up": 1}]},
                                   "roberta-base": {"rows": [{"method": "feddpg", "values_up": 92_500}]}})
    assert "| 185K | 92.5 K | 0.50 |" in params
    # a ratio claim: FedFSL's upload per FeS byte against the paper's 1,841.7x; FeS's round traffic at 5 clients
    fes = paper_rows("fes", {"roberta-large": {"rows": [
        {"method": "fedfsl", "bytes_up": 3683.4, "bytes_down": 6.84e9 - 3683.4, "round_peak_mb": 1.0},
        {"method": "fes", "bytes_up": 1.0, "bytes_down": 1.0}]}})
    assert "| 3,683.4× (`fedfsl` / `fes`) | 2.00 |" in fes
    assert "| 68.4 GB | 31.9 GB | 0.50 |" in fes  # (up + down) x 5 = 34.2e9 B = 31.9 GiB, half of 68.4e9
    failed = paper_rows("feddrs", {"roberta-large": {"rows": [{"method": "feddrs", "bytes_up": 5},
                                                            {"method": "fedavg", "error": "killed"}]}})
    assert failed.count("not measured") == 2  # a failed row is no figure
    assert {c.page for c in CLAIMS} == {"feddls", "fes", "fedbpt", "feddpg", "feddrs"}
    assert all(c.method in METHODS and (not c.versus or c.versus in METHODS) for c in CLAIMS)
