"""Scale and performance: compute vs overhead in the records, sampled client evaluation,
identification without building clients, the scoring memory budget. Throughput is a
benchmark's (``python -m simulations.bench_score``), not a test's; a simulation attached to
a running Ray cluster: tests/system/test_ray_head.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedtext.records import RoundRecord, busy_seconds
from fedtext.common.registry import make_config
from fedtext.server.sampling import TRAIN_SALT
from fedtext.common.tasks import TASKS
from strategies.fedprompt import FedPrompt

from .test_strategy import _manager


# ------------------------------------------------------------ compute vs overhead
def test_busy_seconds_is_the_union_of_intervals():
    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0, 2), (1, 3), (5, 6)]) == 4.0  # [0, 3] + [5, 6]
    assert busy_seconds([(5, 6), (0, 10), (2, 3)]) == 10.0  # nested, unsorted
    assert busy_seconds([(0, 1), (1, 2)]) == 2.0  # touching


def test_round_record_separates_compute_build_and_overhead():
    rec = RoundRecord(round=1, started=100.0)
    # two clients trained one after the other (one Ray actor), then both tested at once
    rec.timing({"fit_time_s": 3.0, "load_s": 1.0, "busy_start": 100.5, "busy_end": 104.5}, "fit_time_s")
    rec.timing({"fit_time_s": 2.0, "load_s": 0.5, "busy_start": 105.0, "busy_end": 107.5}, "fit_time_s")
    rec.timing({"eval_time_s": 0.5, "load_s": 0.25, "busy_start": 108.0, "busy_end": 108.75}, "eval_time_s")
    rec.timing({"eval_time_s": 0.5, "load_s": 0.25, "busy_start": 108.0, "busy_end": 108.75}, "eval_time_s")
    rec.server_eval_s = 1.0
    rec.intervals.append((107.5, 108.5))  # server evaluation overlaps the client tests
    rec.timing({"fit_time_s": 9.0}, "fit_time_s")  # a client without stamps: seconds only
    out = rec.to_json(run_start=90.0)
    assert out["client_fit_s"] == 14.0 and out["client_fit_s_max"] == 9.0
    assert out["client_eval_s"] == 1.0 and out["client_load_s"] == 2.0 and out["server_eval_s"] == 1.0
    assert out["busy_s"] == 4.0 + 2.5 + 1.25  # [100.5, 104.5] + [105, 107.5] + [107.5, 108.75]
    assert out["overhead_s"] == pytest.approx(out["round_time_s"] - 7.75, abs=1e-3)
    assert out["server_rss_mb"] > 50
    assert out["startup_s"] is None


def test_round_record_keeps_process_start_up_apart_from_overhead():
    rec = RoundRecord(round=1, started=100.0)
    # a new actor imported torch from 99 to 104 (clipped to the round: 4 s), then trained
    rec.timing({"fit_time_s": 2.0, "startup_start": 99.0, "startup_end": 104.0,
                "busy_start": 104.0, "busy_end": 106.0}, "fit_time_s")
    # an actor that started before the round: its start-up lies outside, counts nothing
    rec.timing({"fit_time_s": 1.0, "startup_start": 50.0, "startup_end": 55.0,
                "busy_start": 105.0, "busy_end": 107.0}, "fit_time_s")
    out = rec.to_json(run_start=90.0)
    assert out["busy_s"] == 3.0 and out["startup_s"] == 4.0  # [104, 107]; [100, 104]
    assert out["overhead_s"] == pytest.approx(out["round_time_s"] - 7.0, abs=1e-3)


# --------------------------------------------------------- who evaluates, who is asked
class _CountingProxy(SimpleNamespace):
    def get_properties(self, ins, timeout, group_id):
        self.asked.append(dict(ins.config))
        return SimpleNamespace(properties={"partition_id": self.pid, "domain": self.domain})


def _counting_manager(n: int, held_domains: dict[int, str] | None = None):
    from flwr.server import SimpleClientManager

    manager, asked = SimpleClientManager(), []
    for pid in range(n):
        manager.register(_CountingProxy(cid=f"n{(7 * pid) % n}-{pid}", pid=pid,
                                        domain=(held_domains or {}).get(pid, ""), asked=asked))
    return manager, asked


def test_every_client_is_asked_who_it_is_once_and_only_for_its_domain_when_needed(backbone):
    strat = FedPrompt(make_config("fedprompt", clients_per_round=3, max_length=64), TASKS["demo"])
    manager, asked = _counting_manager(20)
    for r in (1, 2, 3):
        strat.sample_clients(r, manager)
        strat.sampler.sample_eval(r, manager)
    assert len(asked) == 20 and all(c == {"domain": 0} for c in asked)
    held = FedPrompt(make_config("fedprompt", max_length=64, holdout="dvd"), TASKS["demo"])
    manager, asked = _counting_manager(3, {1: "dvd"})
    assert [p.pid for p in held.sample_clients(1, manager)] == [0, 2]
    assert asked == [{"domain": 1}] * 3


def test_lazy_client_ids_ask_one_node_once_and_draw_in_node_id_order(backbone):
    """``client-ids=lazy`` sends one message in all (issue 45: the node with the smallest
    node id is asked ``num-partitions`` so that the server checks the partitions), and
    draws over the node ids as before."""
    from fedtext.common.config import ConfigError

    cfg = make_config("fedprompt", clients_per_round=3, client_ids="lazy", max_length=64)
    strat = FedPrompt(cfg, TASKS["demo"])
    manager, asked = _counting_manager(20)
    picked = [p.cid for p in strat.sample_clients(1, manager)]
    evaluated = strat.sampler.sample_eval(1, manager)
    strat.sample_clients(2, manager)
    assert asked == [{"domain": 0}] and len(picked) == 3 and len(evaluated) == 3
    by_cid = sorted(manager.all())  # the draw is rng positions over the cids, sorted
    rng = np.random.default_rng([cfg.seed, 1, TRAIN_SALT])
    assert picked == [by_cid[i] for i in np.sort(rng.choice(20, size=3, replace=False))]
    with pytest.raises(ConfigError, match="holdout needs client-ids=ask"):
        make_config("fedprompt", client_ids="lazy", holdout="1")
    with pytest.raises(ConfigError, match="unknown client-ids 'eager'"):
        make_config("fedprompt", client_ids="eager")


def test_clients_per_eval_samples_and_keeps_participants_and_holdouts_apart(backbone):
    def pids(cfg, r, n=20):
        return [p.pid for p in FedPrompt(cfg, TASKS["demo"]).sampler.sample_eval(r, _manager(n))]

    # default (-1) = clients-per-round; seeded, different per round, sorted by partition id
    cfg = make_config("fedprompt", clients_per_round=4, max_length=64)
    assert cfg.eval_sample_size == 4
    first, again, second = pids(cfg, 1), pids(cfg, 1), pids(cfg, 2)
    assert first == again == sorted(first) and len(set(first)) == 4 and first != second
    # 0 = all; clients-per-round=0 with the default also evaluates everyone
    assert pids(make_config("fedprompt", clients_per_round=4, clients_per_eval=0, max_length=64), 1) == list(range(20))
    assert pids(make_config("fedprompt", max_length=64), 1) == list(range(20))
    # 5 of 20 held out, 8 per eval: round(8 * 15/20) = 6 participants + 2 non-participants
    held = make_config("fedprompt", clients_per_eval=8, holdout="0,1,2,3,4", max_length=64)
    picked = pids(held, 3)
    assert len(picked) == 8 and sum(p < 5 for p in picked) == 2
    # 1 of 20 held out, 4 per eval: round(4 * 19/20) = 4 would leave no NP; keep one
    one = pids(make_config("fedprompt", clients_per_eval=4, holdout="7", max_length=64), 1)
    assert len(one) == 4 and 7 in one


def test_clients_per_eval_is_validated():
    from fedtext.common.config import ConfigError

    with pytest.raises(ConfigError, match="clients-per-eval must be >= -1"):
        make_config("fedprompt", clients_per_eval=-2)
    with pytest.raises(ConfigError, match="max-client-memory-mb must be >= 0"):
        make_config("fedprompt", max_client_memory_mb=-1)


def test_a_node_answers_who_it_is_without_building_its_client(monkeypatch):
    import fedtext.node.node as ca

    built = []
    monkeypatch.setattr(ca.Node, "build", lambda self: built.append(self.partition_id) or SimpleNamespace(
        get_properties=lambda config: {"partition_id": self.partition_id, "domain": "books"}))
    client = ca.make_client({"method": "fedprompt"}, {"partition-id": 3, "num-partitions": 5})
    from flwr.common import GetPropertiesIns

    import platform

    assert dict(client.get_properties(GetPropertiesIns({})).properties) == {
        "partition_id": 3, "num_partitions": 5, "platform": platform.machine()}
    assert built == []
    with_domain = dict(client.get_properties(GetPropertiesIns({"domain": 1})).properties)
    assert (with_domain["domain"], with_domain["num_partitions"]) == ("books", 5)
    assert built == [3]
    from fedtext.common.config import ConfigError

    with pytest.raises(ConfigError, match="partition-id 5 outside 0..4"):
        ca.make_client({"method": "fedprompt"}, {"partition-id": 5, "num-partitions": 5})


def test_a_node_reports_build_time_and_busy_stamps(monkeypatch):
    import fedtext.node.node as ca

    def build(self):
        time.sleep(0.05)
        return SimpleNamespace(fit=lambda p, c: (p, 4, {"fit_time_s": 0.0}))

    monkeypatch.setattr(ca.Node, "build", build)
    node = ca.Node(make_config("fedprompt"), 0, 2, None)
    t0 = time.time()
    _, n, metrics = node.fit([np.zeros(2)], {})
    assert n == 4 and metrics["load_s"] >= 0.05
    assert t0 <= metrics["busy_start"] <= metrics["busy_end"] <= time.time()
    # the process's imports: reported by its first message only (this test's may not be first)
    monkeypatch.setattr(ca, "_STARTUP", {"startup_start": 1.0, "startup_end": 2.0})
    _, _, first = node.fit([np.zeros(2)], {})
    _, _, second = node.fit([np.zeros(2)], {})
    assert (first["startup_start"], first["startup_end"]) == (1.0, 2.0) and "startup_start" not in second


# ----------------------------------------------------------------- memory budget
def test_chunk_tokens_follow_the_memory_budget(backbone, monkeypatch):
    import fedtext.backbone.scoring as fb

    per_token = backbone.activation_bytes_per_token(84)
    assert per_token == 3.5 * 4 * (384 + 1536 + 12 * 84)  # MiniLM: D=384, D_ff=1536, H=12: 40,992 B
    monkeypatch.setattr(backbone, "loaded_rss_mb", 520.0)
    assert backbone.chunk_tokens(84, 900) == int(220 * 2**20 / per_token) == 5627
    assert backbone.chunk_tokens(84, 600) == 84  # less than loaded + fixed: one sequence
    assert backbone.chunk_tokens(84, 900) == 5627  # a budget used in between leaves no trace
    assert backbone.chunk_tokens(84, 100_000) == fb.MAX_TOKENS_PER_CHUNK  # never above the fixed chunk
    assert backbone.chunk_tokens(84, 0) == fb.MAX_TOKENS_PER_CHUNK


def test_a_tight_budget_chunks_scoring_without_changing_results(backbone, demo, monkeypatch):
    batch = backbone.encode(list(demo.test["text"][:4]), [0, 1, 0, 1])
    prompts = np.stack([backbone.initial_prompt(3, s) for s in range(6)])
    full = backbone.score(prompts, batch)
    calls = []
    real = backbone.logits
    monkeypatch.setattr(backbone, "logits", lambda p, b, **kw: calls.append(len(p)) or real(p, b, **kw))
    # below resident: one prompt per call
    torch.testing.assert_close(backbone.score(prompts, batch, budget_mb=1), full, atol=1e-5, rtol=1e-5)
    assert calls == [1] * 6


def test_clients_of_two_runs_share_the_backbone_but_each_scores_under_its_own_budget(monkeypatch):
    """The process's cached backbone serves clients of runs with different
    ``max-client-memory-mb``: each run's budget sizes its own clients' encoder calls, in
    any order (budget A, then B, then A again), since the client passes it to score."""
    from fedtext.node.node import client_class
    from fedtext.learning.data import client_data

    small = dict(prompt_length=4, max_length=64, shots_per_class=4, intrinsic_dim=20, popsize=4)
    cfg_a = make_config("bbt-fed", max_client_memory_mb=100_000, **small)  # capped at the fixed chunk
    cfg_b = make_config("bbt-fed", max_client_memory_mb=1, **small)  # below resident: one prompt per call
    a = client_class("bbt-fed")(cfg_a, TASKS["demo"], client_data(cfg_a, 0, 2))
    b = client_class("bbt-fed")(cfg_b, TASKS["demo"], client_data(cfg_b, 0, 2))
    shared = a.backbone
    assert b.backbone is shared  # one backbone per process and (model, head, task, max length)
    budgets, sizes = [], []
    real_chunk, real_logits = shared.chunk_tokens, shared.logits
    monkeypatch.setattr(shared, "chunk_tokens", lambda seq, mb: budgets.append(mb) or real_chunk(seq, mb))
    monkeypatch.setattr(shared, "logits", lambda p, x, **kw: sizes.append(len(p)) or real_logits(p, x, **kw))
    z = np.random.default_rng(0).normal(size=(4, 20)).astype(np.float32)

    def fitness(client) -> tuple[set[int], list[int], np.ndarray]:
        """(budgets scored under, prompts per encoder call, losses) of one population."""
        budgets.clear()
        sizes.clear()
        loss = client.fitness(z)
        return set(budgets), list(sizes), loss

    seen_a, calls_a, loss_a = fitness(a)
    seen_b, calls_b, loss_b = fitness(b)
    again_a, again_calls_a, again_loss_a = fitness(a)
    assert seen_a == again_a == {100_000} and seen_b == {1}
    assert set(calls_a) == {4} and calls_b == [1] * (4 * len(calls_a))  # 4 prompts per call vs 1
    assert again_calls_a == calls_a
    np.testing.assert_array_equal(again_loss_a, loss_a)
    np.testing.assert_allclose(loss_b, loss_a, rtol=1e-5)  # chunking never changes the losses


# -------------------------------------------------------------- throughput floor
def test_the_scoring_benchmark_measures_both_paths():
    """``simulations.bench_score`` (the speed of batched scoring against a plain forward; a
    benchmark, not a test: timings on shared cores are noise) still runs and measures two
    positive rates. That scoring P prompts in one call gives each prompt's own scores is
    tests/unit/test_backbone.py's check."""
    from simulations.bench_score import bench

    plain, scored = bench(p=2, b=2, t=2, repeats=1)
    assert np.isfinite([plain, scored]).all() and plain > 0 and scored > 0


# ----------------------------------------------------------------- length buckets
def test_population_scoring_by_length_buckets_keeps_results_and_drops_padding(backbone, demo, monkeypatch):
    import fedtext.backbone.scoring as fb

    texts = sorted(demo.test["text"][:16], key=len)
    texts = texts[::2] + texts[1::2]  # mixed lengths in one batch
    batch = backbone.encode(texts, [i % 2 for i in range(16)])
    lengths = batch.attention_mask.sum(1).numpy()
    groups = fb.length_buckets(batch, 4)
    assert [len(g) for g in groups] == [4, 4, 4, 4] and sorted(np.concatenate(groups)) == list(range(16))
    assert all(lengths[a].max() <= lengths[b].min() for a, b in zip(groups, groups[1:]))  # sorted by length
    trimmed = batch.take(groups[0]).trimmed()
    assert trimmed.input_ids.shape[1] == lengths[groups[0]].max() < batch.input_ids.shape[1]
    shared = np.stack([backbone.initial_prompt(3, s) for s in range(5)])
    per_input = np.random.default_rng(0).normal(0, 0.02, (5, 16, 3, backbone.dim)).astype(np.float32)
    q0 = backbone.queries
    got = [backbone.score(shared, batch), backbone.score(per_input, batch)]
    assert backbone.queries - q0 == 2 * 5 * 16  # bucketing counts the same sequences
    monkeypatch.setattr(fb, "BUCKET_ROWS", 1000)  # no buckets: one padded batch
    for prompts, bucketed in zip((shared, per_input), got):
        torch.testing.assert_close(bucketed, backbone.score(prompts, batch), atol=1e-5, rtol=1e-5)
    same = backbone.encode(["good film"] * 16, [0] * 16)
    assert fb.length_buckets(same, 4) is None  # nothing to save
