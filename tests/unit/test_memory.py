"""A node's memory limit (fedtext/node/memory.py): read from its cgroup or node config, checked at once
before a client computes, and watched while it computes, so that a client that would pass it
fails in one line instead of being killed by the kernel mid-round."""

from __future__ import annotations

import time

import pytest

from fedtext.node import memory
from fedtext.common.registry import make_config


def test_a_client_over_the_limit_is_stopped_in_one_line_and_the_thread_goes_on():
    used = [100.0]
    guard = memory.MemoryGuard(1000.0, "fedavg's fit of partition 0", "precision=bf16", usage=lambda: used[0])
    steps = 0
    with pytest.raises(memory.NodeMemoryError) as err, guard:
        for steps in range(10_000):  # a client allocating step by step
            used[0] += 1.0
            time.sleep(0.0005)
    line = str(err.value)
    assert "\n" not in line and "fedavg's fit of partition 0 reached" in line
    assert "memory limit of 1,000 MB" in line and "options: precision=bf16" in line
    # stopped past the limit less the reserve (920 MB), before the limit itself
    assert 1000 * (1 - memory.RESERVE_FRACTION) < guard.tripped < 1000 and steps < 10_000 - 1
    time.sleep(0.05)  # nothing is left pending in this thread
    assert sum(range(10)) == 45


def test_a_node_that_already_holds_too_much_refuses_at_once():
    ran = []
    with pytest.raises(memory.NodeMemoryError, match="would start with 950 MB of this node's memory limit of 1,000 MB"):
        with memory.MemoryGuard(1000.0, "fedavg's fit", "x", usage=lambda: 950.0):
            ran.append(1)
    assert ran == []


def test_work_under_the_limit_and_no_limit_run_untouched():
    with memory.MemoryGuard(1000.0, "w", "x", usage=lambda: 919.0) as guard:
        time.sleep(0.03)
    assert guard.tripped is None and guard.peak_mb == 919.0
    with memory.MemoryGuard(None, "w", "x", usage=lambda: 1e9):
        pass


def test_the_limit_is_the_smaller_of_the_cgroups_and_the_node_configs(tmp_path, monkeypatch):
    (tmp_path / "memory.limit_in_bytes").write_text(str(2048 * 2**20))
    (tmp_path / "memory.usage_in_bytes").write_text(str(700 * 2**20))
    (tmp_path / "memory.stat").write_text(f"cache 1\ntotal_rss {550 * 2**20}\ntotal_mapped_file {50 * 2**20}\n")
    monkeypatch.setattr(memory, "_own_cgroup", lambda: (tmp_path, False))
    assert memory.cgroup_limit_mb() == 2048 and memory.working_set_mb() == 600
    assert memory.node_limit_mb({}) == 2048 and memory.node_limit_mb({"memory-limit-mb": 1024}) == 1024
    assert memory.node_limit_mb({"memory-limit-mb": 4096}) == 2048
    # 0 is "the cgroup's", typed or as a node-config string ("0" was a 0 MB limit that refused every message)
    assert memory.node_limit_mb({"memory-limit-mb": "0"}) == memory.node_limit_mb({"memory-limit-mb": 0.0}) == 2048
    with pytest.raises(ValueError, match="memory-limit-mb='lots' is not a number"):
        memory.node_limit_mb({"memory-limit-mb": "lots"})
    (tmp_path / "memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "no limit"
    assert memory.cgroup_limit_mb() is None and memory.node_limit_mb({}) is None
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("max\n")
    monkeypatch.setattr(memory, "_own_cgroup", lambda: (v2, True))
    assert memory.cgroup_limit_mb() is None
    (v2 / "memory.max").write_text(str(1024 * 2**20))
    (v2 / "memory.current").write_text(str(500 * 2**20))
    (v2 / "memory.stat").write_text(f"anon {400 * 2**20}\nfile 7\nfile_mapped {50 * 2**20}\n")
    assert memory.cgroup_limit_mb() == 1024 and memory.working_set_mb() == 450


def test_the_options_name_the_methods_own_keys():
    fedavg = memory.options_for(make_config("fedavg"))
    assert "fedavg.batch-size (now 16)" in fedavg and "precision=bf16" in fedavg
    assert "batch-size" not in memory.options_for(make_config("bbt-fed"))


def test_a_node_passes_its_limit_to_the_guard(monkeypatch):
    from fedtext.node import node
    monkeypatch.setattr(memory, "cgroup_limit_mb", lambda: None)
    client = node.make_client({"method": "fedprompt"}, {"partition-id": 0, "num-partitions": 2, "memory-limit-mb": 1})
    with pytest.raises(memory.NodeMemoryError, match="fedprompt's fit of partition 0 would start with .* limit of 1 MB"):
        from flwr.common import FitIns, Parameters

        client.fit(FitIns(Parameters([], ""), {"server_round": 1}))
    from fedtext.common.config import ConfigError

    with pytest.raises(ConfigError, match="memory-limit-mb=-5"):
        node.make_client({"method": "fedprompt"}, {"partition-id": 0, "num-partitions": 2, "memory-limit-mb": -5})


def test_exactly_the_limit_less_the_reserve_fits_and_a_hair_past_it_does_not():
    """Limit 1,000 MB, reserve 8 %: 920 MB exactly is not past the line, at the start or while the
    work runs (five reads of 920 leave it untouched); 920.001 MB at the start refuses at once."""
    assert 1000.0 * (1 - memory.RESERVE_FRACTION) == 920.0
    reads = [0]

    def usage() -> float:
        reads[0] += 1
        return 920.0

    with memory.MemoryGuard(1000.0, "w", "x", usage=usage) as guard:
        deadline = time.monotonic() + 5.0
        while reads[0] < 6 and time.monotonic() < deadline:  # the start's read and five of the watcher's
            time.sleep(0.001)
    assert reads[0] >= 6 and guard.tripped is None and guard.peak_mb == 920.0
    with pytest.raises(memory.NodeMemoryError, match="would start with 920 MB"):
        with memory.MemoryGuard(1000.0, "w", "x", usage=lambda: 920.001):
            pass
