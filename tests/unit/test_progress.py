"""Progress lines (fedtext.common.progress): quiet for short work, rate-limited, ETA, nesting."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from fedtext.common import progress
from fedtext.common.progress import Progress, format_seconds, track


class Clock:
    """A fake monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(total=10, **kw):
    clock, lines = Clock(), []
    bar = Progress("client 3: local training", total, "steps", clock=clock, emit=lines.append,
                   after_s=10, every_s=20, **kw)
    return bar, clock, lines


def test_work_shorter_than_the_quiet_start_prints_nothing():
    bar, clock, lines = make()
    with bar:
        for _ in range(10):
            clock.now += 0.9
            bar.advance()
    assert lines == []


def test_long_work_prints_at_most_one_line_per_interval_with_an_eta():
    bar, clock, lines = make(total=10)
    with bar:
        for _ in range(10):
            clock.now += 6.0  # 6 s a step: 60 s in all
            bar.advance()
    # 12 s: first line (past the quiet 10 s); the next at >= 20 s later: 36 s; then 60 s ends
    assert lines == [
        "fedtext: client 3: local training: 2/10 steps (20%), 12 s, ETA 48 s",
        "fedtext: client 3: local training: 6/10 steps (60%), 36 s, ETA 24 s",
        "fedtext: client 3: local training: done: 10/10 steps (100%) in 1 min 00 s",
    ]


def test_a_line_only_when_a_step_ends():
    """No thread, no timer: a step that takes minutes shows once it ends (rate-limited)."""
    bar, clock, lines = make(total=3)
    with bar:
        clock.now += 100
        bar.advance()
        clock.now += 1
        bar.advance()
    assert lines == ["fedtext: client 3: local training: 1/3 steps (33%), 1 min 40 s, ETA 3 min 20 s",
                     "fedtext: client 3: local training: done: 2/3 steps (67%) in 1 min 41 s"]


def test_unknown_total_counts_without_eta():
    bar, clock, lines = make(total=0)
    with bar:
        clock.now += 11
        bar.advance(5)
    assert lines == ["fedtext: client 3: local training: 5 steps, 11 s",
                     "fedtext: client 3: local training: done: 5 steps in 11 s"]


def test_an_exception_closes_with_stopped():
    bar, clock, lines = make(total=4)
    with pytest.raises(ValueError), bar:
        clock.now += 11
        bar.advance()
        raise ValueError("x")
    assert lines[-1] == "fedtext: client 3: local training: stopped: 1/4 steps (25%) in 11 s"


def test_nested_work_reports_once():
    clock, lines = Clock(), []
    outer = Progress("CMA-ES", 2, "iterations", clock=clock, emit=lines.append, after_s=10, every_s=20)
    with outer:
        for _ in range(2):
            inner = Progress("scoring", 4, "encoder calls", clock=clock, emit=lines.append, after_s=10, every_s=20)
            with inner:
                for _ in range(4):
                    clock.now += 5
                    inner.advance()
            outer.advance()
    assert [ln.split(":")[1].strip() for ln in lines] == ["CMA-ES", "CMA-ES"]  # 1/2 at 20 s, done at 40 s
    alone = Progress("scoring", 4, "encoder calls", clock=clock, emit=lines.append, after_s=10, every_s=20)
    with alone:  # once the outer one closed, an inner one reports again
        clock.now += 11
        alone.advance()
    assert lines[-2].startswith("fedtext: scoring: 1/4 encoder calls")


def test_a_failing_emit_does_not_stop_the_work():
    def emit(line):
        raise OSError("closed stream")

    clock = Clock()
    bar = Progress("x", 2, clock=clock, emit=emit, after_s=0, every_s=0)
    with bar:
        clock.now += 1
        bar.advance()
        bar.advance()
    assert bar.done == 2


def test_track_yields_every_item_unchanged():
    clock, lines = Clock(), []
    items = [np.arange(3), "a", None]
    got = []
    for item in track(items, "items", clock=clock, emit=lines.append, after_s=10, every_s=20):
        clock.now += 5
        got.append(item)
    assert got == items
    assert lines == ["fedtext: items: 2/3 steps (67%), 10 s, ETA 5 s", "fedtext: items: done: 3/3 steps (100%) in 15 s"]


def test_format_seconds():
    assert [format_seconds(s) for s in (0.4, 59.6, 61, 3599, 3600, 7325)] == [
        "0 s", "1 min 00 s", "1 min 01 s", "59 min 59 s", "1 h 00 min", "2 h 02 min"]


def test_progress_lines_reach_the_fedtext_logger(monkeypatch, caplog):
    """Where the work is done, lines go to the ``fedtext`` logger (and so to run.log); the
    loss a client's local loop returns is the same with or without them."""
    from fedtext.client.numpy_client import gradient_steps
    from fedtext.backbone.devices import CPU_FP32

    caplog.set_level(logging.INFO, logger="fedtext")
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(4, 2))
    batches = [type("B", (), {"x": torch.randn(8, 4), "labels": torch.randint(0, 2, (8,))})() for _ in range(3)]

    def run() -> float:
        with torch.no_grad():
            weight.copy_(torch.ones(4, 2))
        return gradient_steps(batches, lambda b: b.x @ weight, torch.optim.SGD([weight], lr=0.1), CPU_FP32,
                              "client 0: local training", 3, terms=())

    quiet = run()
    assert not [r for r in caplog.records if "local training" in r.getMessage()]
    monkeypatch.setattr(progress, "AFTER_S", 0.0)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    assert run() == quiet
    msgs = [r.getMessage() for r in caplog.records if r.name == "fedtext"]
    assert msgs[0].startswith("fedtext: client 0: local training: 1/3 steps (33%)")
    assert msgs[-1].startswith("fedtext: client 0: local training: done: 3/3 steps (100%) in")


def test_population_scoring_reports_encoder_calls_and_keeps_its_logits(backbone, monkeypatch, caplog):
    """``Backbone.score`` of a population in several encoder calls: one progress line per
    call when forced, the same logits either way."""
    caplog.set_level(logging.INFO, logger="fedtext")
    batch = backbone.encode(["a good film", "bad", "a dull and very long film indeed", "fine"], [1, 0, 0, 1])
    rng = np.random.default_rng(0)
    prompts = rng.normal(0, 0.02, (6, 2, backbone.dim)).astype(np.float32)
    monkeypatch.setattr(backbone, "chunk_tokens", lambda seq, budget_mb: 2 * len(batch) * seq)  # 2 prompts per call
    quiet = backbone.score(prompts, batch)
    monkeypatch.setattr(progress, "AFTER_S", 0.0)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    assert torch.equal(backbone.score(prompts, batch), quiet)
    msgs = [r.getMessage() for r in caplog.records if "scoring 6 prompts on 4 texts" in r.getMessage()]
    assert msgs and msgs[-1].startswith("fedtext: scoring 6 prompts on 4 texts: done:")


def test_muted_work_prints_nothing_and_nests():
    """Inside ``muted()`` no line is written, the closing one included; outside it lines are
    back, also after an exception, and ``muted(False)`` inside a muted block stays muted."""
    bar, clock, lines = make(total=3)
    with progress.muted(), bar:
        for _ in range(3):
            clock.now += 30
            bar.advance()
    assert lines == [] and bar.lines == 0
    with pytest.raises(RuntimeError), progress.muted():
        raise RuntimeError
    with progress.muted(), progress.muted(False):
        again, clock2, lines2 = make(total=1)
        with again:
            clock2.now += 30
            again.advance()
    assert lines2 == []
    loud, clock3, lines3 = make(total=2)
    with progress.muted(False), loud:
        clock3.now += 30
        loud.advance()
        clock3.now += 30
        loud.advance()
    assert lines3 == ["fedtext: client 3: local training: 1/2 steps (50%), 30 s, ETA 30 s",
                      "fedtext: client 3: local training: done: 2/2 steps (100%) in 1 min 00 s"]


@pytest.mark.parametrize(("keys", "shown"), [({}, False), ({"client-progress": True}, True), ({"verbose": True}, True)])
def test_a_clients_progress_lines_print_only_when_asked(keys, shown, monkeypatch, tmp_path):
    """A client's message runs muted unless ``client-progress=true`` or ``verbose=true``: a
    default simulation prints one line per round, not every actor's progress lines."""
    from fedtext.node.node import Node
    from fedtext.common.config import RunConfig
    from fedtext.common.registry import METHODS

    cfg = RunConfig.from_run_config({"output-dir": str(tmp_path), **keys}, METHODS)
    node = Node(cfg, 0, 2, None)
    monkeypatch.setattr(node, "build", lambda: None)
    monkeypatch.setattr(progress, "AFTER_S", 0.0)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    lines: list[str] = []

    def call(_client):
        with Progress("client 0: CMA-ES", 2, "iterations", emit=lines.append) as bar:
            bar.advance()
            bar.advance()
        return [], 1, {}

    node._timed("fit", {"server_round": 1}, call)
    assert bool(lines) is shown
