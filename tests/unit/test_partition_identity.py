"""Issue 45 item 3: a client's partition is the server's binding, not what its reply says.

The server binds each node id to the partition it first reports (its properties, or with
``client-ids=lazy`` its first reply). On mock client proxies, as Flower's round loop
drives them: a reply claiming another partition is its own node's drop and cannot
overwrite another client's accuracy; a second node claiming a bound partition is refused
(never drawn, its results dropped with the reason); a partition outside the federation is
refused instead of failing the round; a node whose partition's holder left takes it over;
and the run's summary lists the partitions that never trained, with a warning.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, EvaluateRes, FitRes, Status
from flwr.server import SimpleClientManager

from fedtext.common import comm
from fedtext.records import RunRecorder, check_summary
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from strategies.fedprompt import FedPrompt


class Node(SimpleNamespace):
    """A connected SuperNode as the server sees it: node id ``cid``, answering who it is
    from its node config (``partition-id`` ``pid``, ``num-partitions`` ``parts``), which an
    impostor sets to another node's partition."""

    __hash__ = object.__hash__

    def get_properties(self, ins, timeout, group_id):
        return SimpleNamespace(properties={"partition_id": self.pid, "num_partitions": self.parts})


def manager_of(*nodes: Node) -> SimpleClientManager:
    manager = SimpleClientManager()
    for node in nodes:
        manager.register(node)
    return manager


def fit_res(node, arrays, n=2, pid=None):
    """``node``'s fit reply; ``pid``: the partition it claims (default: its node config's)."""
    return node, FitRes(Status(Code.OK, ""), comm.encode(arrays), n,
                        {"partition_id": node.pid if pid is None else pid, "train_loss": 0.5})


def eval_res(node, accuracy, pid=None):
    return node, EvaluateRes(Status(Code.OK, ""), 0.5, 8,
                             {"partition_id": node.pid if pid is None else pid, "accuracy": accuracy})


def reasons(strat):
    return [(d["client"], d["reason"]) for d in strat.record.dropped]


@pytest.fixture()
def fedprompt(backbone, tmp_path):
    """FedPrompt on the demo task, recorded, 2 rounds, at its initial prompt."""
    cfg = make_config("fedprompt", prompt_length=2, max_length=64, output_dir=str(tmp_path), num_server_rounds=2)
    strat = FedPrompt(cfg, TASKS["demo"], recorder=RunRecorder(tmp_path, cfg.to_run_config()))
    strat.global_arrays = strat.initial_arrays()
    return strat


def test_a_bad_upload_tagged_with_another_partition_is_its_own_nodes_drop(fedprompt):
    """Before: client 0's 1e30 upload tagged ``partition_id=1`` was recorded as client 1's drop."""
    a, b = Node(cid="a", pid=0, parts=2), Node(cid="b", pid=1, parts=2)
    manager = manager_of(a, b)
    base = fedprompt.global_arrays[0]
    fedprompt.rounds.begin(1)
    assert fedprompt.sample_clients(1, manager) == [a, b]  # both report who they are: bound
    params, _ = fedprompt.aggregate_fit(1, [fit_res(a, [np.full_like(base, 1e30)], pid=1), fit_res(b, [base + 1])], [])
    assert reasons(fedprompt) == [("0", "claims partition 1, but node a is partition 0 (its first report)")]
    np.testing.assert_allclose(comm.decode(params)[0], base + 1, rtol=1e-6)  # b's alone
    assert fedprompt.record.trained == ["1"]


def test_an_evaluate_reply_tagged_with_another_partition_cannot_overwrite_its_accuracy(fedprompt):
    """Before: client 0's evaluate reply tagged ``partition_id=1`` overwrote client 1's accuracy."""
    a, b = Node(cid="a", pid=0, parts=2), Node(cid="b", pid=1, parts=2)
    manager = manager_of(a, b)
    fedprompt.rounds.begin(1)
    assert fedprompt.sampler.sample_eval(1, manager) == [a, b]
    fedprompt.aggregate_evaluate(1, [eval_res(b, 0.9), eval_res(a, 0.0, pid=1)], [])
    assert fedprompt.record.client_accuracy == {"1": 0.9}
    assert reasons(fedprompt) == [("0", "evaluate reply: claims partition 1, but node a is partition 0 "
                                         "(its first report)")]
    assert fedprompt.record.participants == ["1"]


def test_with_lazy_ids_the_first_reply_binds_and_a_later_claim_is_checked(backbone):
    strat = FedPrompt(make_config("fedprompt", prompt_length=2, max_length=64, client_ids="lazy"), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    base = strat.global_arrays[0]
    a, b = Node(cid="a", pid=0, parts=2), Node(cid="b", pid=1, parts=2)
    strat.rounds.begin(1)
    strat.aggregate_fit(1, [fit_res(a, [base + 1]), fit_res(b, [base + 3])], [])
    strat.rounds.begin(2)
    params, _ = strat.aggregate_fit(2, [fit_res(a, [base + 5], pid=1), fit_res(b, [base + 3])], [])
    assert reasons(strat) == [("0", "claims partition 1, but node a is partition 0 (its first report)")]
    np.testing.assert_allclose(comm.decode(params)[0], base + 3, rtol=1e-6)
    assert strat.record.trained == ["1"] and strat.sampler.bound == {"a": "0", "b": "1"}


def test_a_second_node_claiming_a_bound_partition_is_refused_and_the_untrained_partition_named(fedprompt, caplog):
    """Before: a node with node-1's key and ``partition-id=0`` trained as a second partition 0,
    the run finished with ``num_clients=2`` and partition 1 never trained, without a word."""
    honest, impostor = Node(cid="n0", pid=0, parts=2), Node(cid="n1", pid=0, parts=2)
    manager = manager_of(honest, impostor)
    base = fedprompt.global_arrays[0]
    with caplog.at_level(logging.WARNING, logger="fedtext"):
        for r in (1, 2):
            fedprompt.rounds.begin(r)
            assert fedprompt.sample_clients(r, manager) == [honest]
            # were the impostor's reply to arrive anyway, it is dropped, not averaged in
            fedprompt.aggregate_fit(r, [fit_res(honest, [base + r]), fit_res(impostor, [base - 7])], [])
            assert reasons(fedprompt) == [("node n1", "node n1 claims partition 0, which node n0 holds: refused")]
            assert fedprompt.sampler.sample_eval(r, manager) == [honest]
            fedprompt.aggregate_evaluate(r, [eval_res(honest, 0.5)], [])
    np.testing.assert_allclose(fedprompt.global_arrays[0], base + 2, rtol=1e-6)
    run = fedprompt.recorder.dir
    lines = [json.loads(x) for x in (run / "rounds.jsonl").read_text().splitlines()]
    assert [(ln["num_clients"], ln["trained"]) for ln in lines] == [(1, ["0"]), (1, ["0"])]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["partitions_never_trained"] == [1]
    assert check_summary(summary) is None
    said = [r.getMessage() for r in caplog.records]
    assert said.count("node n1 claims partition 0, which node n0 holds: refused; its results are dropped") == 1
    assert ("fedtext: 1 of 2 participant partitions never trained in this run (no upload of theirs was "
            "aggregated): 1") in said


def test_a_run_in_which_every_partition_trained_names_none(fedprompt, caplog):
    a, b = Node(cid="a", pid=0, parts=2), Node(cid="b", pid=1, parts=2)
    manager = manager_of(a, b)
    base = fedprompt.global_arrays[0]
    with caplog.at_level(logging.WARNING, logger="fedtext"):
        for r, trains in ((1, [a]), (2, [b])):  # each partition trains in one of the rounds
            fedprompt.rounds.begin(r)
            fedprompt.sample_clients(r, manager)
            fedprompt.aggregate_fit(r, [fit_res(n, [base + 1]) for n in trains], [])
            fedprompt.aggregate_evaluate(r, [eval_res(a, 0.5)], [])
    assert json.loads((fedprompt.recorder.dir / "summary.json").read_text())["partitions_never_trained"] == []
    assert not [r for r in caplog.records if "never trained" in r.getMessage()]


def test_a_partition_outside_the_federation_is_refused_not_a_failed_round(fedprompt):
    """Before: the server looked up partition 5 of 2 to bound its examples and raised
    ConfigError inside aggregate_fit: one node's node config ended the run."""
    a, b, odd = Node(cid="a", pid=0, parts=2), Node(cid="b", pid=1, parts=2), Node(cid="odd", pid=5, parts=2)
    manager = manager_of(a, b, odd)
    base = fedprompt.global_arrays[0]
    fedprompt.rounds.begin(1)
    assert fedprompt.sample_clients(1, manager) == [a, b]
    params, _ = fedprompt.aggregate_fit(1, [fit_res(a, [base + 1]), fit_res(odd, [base + 9]), fit_res(b, [base + 3])],
                                        [])
    assert reasons(fedprompt) == [("node odd", "node odd claims partition 5, outside 0..1 (num-partitions=2): refused")]
    np.testing.assert_allclose(comm.decode(params)[0], base + 2, rtol=1e-6)


def test_a_node_whose_partitions_holder_left_takes_it_over_and_the_old_one_is_refused_back(fedprompt, caplog):
    """A SuperNode restarted without a registered key comes back under a new node id: once
    the old node id has left, the new one holds the partition; the old one, should it
    reappear, is refused while the new one holds it."""
    a, b, a2 = Node(cid="a", pid=0, parts=2), Node(cid="b", pid=1, parts=2), Node(cid="a2", pid=0, parts=2)
    manager = manager_of(a, b)
    fedprompt.rounds.begin(1)
    assert fedprompt.sample_clients(1, manager) == [a, b]
    manager.register(a2)  # the restarted node, while the old id is still listed: refused for now
    fedprompt.rounds.begin(2)
    assert fedprompt.sample_clients(2, manager) == [a, b]
    manager.unregister(a)
    with caplog.at_level(logging.WARNING, logger="fedtext"):
        assert fedprompt.sample_clients(2, manager) == [a2, b]
    assert "partition 0: node a has left; node a2, reporting it, takes it over" in caplog.text
    assert fedprompt.sampler.info_if_known("a2") == "0"
    manager.register(a)  # the old node id reappears
    assert fedprompt.sample_clients(2, manager) == [a2, b]
    assert fedprompt.sampler.refused == {"a": "0"}


def test_node_partitions_pins_each_registered_node_so_a_first_comer_cannot_take_another_partition(backbone, tmp_path):
    """Without pins the first report binds: an impostor (a registered node with partition-id=0)
    that reports before the honest node 0 holds partition 0, and node 0 is refused. With the
    operator's ``node-partitions`` (node ids as ``flwr supernode register`` prints them) the
    impostor is refused whatever the order, an unpinned node too, and node 0 trains."""
    base_cfg = dict(prompt_length=2, max_length=64, output_dir=str(tmp_path), num_server_rounds=1)
    impostor, honest, stranger = Node(cid="11", pid=0, parts=2), Node(cid="10", pid=0, parts=2), Node(
        cid="99", pid=1, parts=2)
    unpinned = FedPrompt(make_config("fedprompt", **base_cfg), TASKS["demo"])
    unpinned.sampler.identify([impostor, honest])  # the impostor answers first
    assert unpinned.sampler.bound == {"11": "0"} and "10" in unpinned.sampler.refused
    pinned = FedPrompt(make_config("fedprompt", node_partitions="10=0, 12=1", **base_cfg), TASKS["demo"])
    pinned.global_arrays = pinned.initial_arrays()
    manager = manager_of(impostor, honest, stranger)
    pinned.rounds.begin(1)
    assert pinned.sample_clients(1, manager) == [honest]
    assert pinned.sampler.bound == {"10": "0"}
    assert pinned.sampler.refused == {"11": "0", "99": "1"}
    assert pinned.sampler.claim("11", 0) == "node 11 claims partition 0, but node-partitions does not name it: refused"
    # a pinned node's reply claiming another partition is dropped; it stays bound to its pin
    base = pinned.global_arrays[0]
    pinned.aggregate_fit(1, [fit_res(honest, [base + 1]), fit_res(honest, [base - 7], pid=1)], [])
    assert reasons(pinned) == [("0", "claims partition 1, but node 10 is partition 0 (its first report)")]
    # node 12, pinned to 1, binds when it reports 1, and is refused claiming 0
    assert pinned.sampler.claim("12", 0) == "node 12 claims partition 0, but node-partitions pins it to 1: refused"
    assert pinned.sampler.claim("12", 1) is None and pinned.sampler.bound["12"] == "1"


@pytest.mark.parametrize(("pins", "message"), [
    ("10=0,10=1", "node-partitions pins node 10 twice"),
    ("10=0,11=0", "node-partitions pins two nodes to one partition"),
    ("10:0", "node-partitions wants 'NODE_ID=PARTITION,...' with whole numbers, got '10:0'"),
    ("a=0", "node-partitions wants 'NODE_ID=PARTITION,...' with whole numbers, got 'a=0'"),
    ("10=\u00b2", "node-partitions wants 'NODE_ID=PARTITION,...' with whole numbers, got '10=\u00b2'"),
    ("07=0,7=1", "node-partitions pins node 7 twice"),
])
def test_a_malformed_node_partitions_is_one_line_at_config_time(pins, message):
    from fedtext.common.errors import ConfigError

    with pytest.raises(ConfigError, match="^" + message.replace(".", r"\.").replace("(", r"\(") + "$"):
        make_config("fedprompt", node_partitions=pins)


def test_a_node_joining_later_with_another_partition_count_is_refused_not_a_failed_run(fedprompt):
    """The first draw's nodes agreed on 2 partitions; a node joining in round 2 that says
    ``partition-id=5 num-partitions=6`` used to pass the range check on its own count and then
    end the run ("nodes disagree") in configure_fit. Now it is refused; the round goes on."""
    a, b = Node(cid="a", pid=0, parts=2), Node(cid="b", pid=1, parts=2)
    manager = manager_of(a, b)
    fedprompt.rounds.begin(1)
    assert fedprompt.sample_clients(1, manager) == [a, b]
    late = Node(cid="z", pid=5, parts=6)
    manager.register(late)
    fedprompt.rounds.begin(2)
    assert fedprompt.sample_clients(2, manager) == [a, b]
    assert fedprompt.sampler.refused == {"z": "5"} and "z" not in fedprompt.sampler.bound
    # a reply's claim is checked against the federation's count
    assert fedprompt.sampler.claim("y", 3) == "node y claims partition 3, outside 0..1 (num-partitions=2): refused"


def test_a_node_without_a_valid_partition_id_is_bounded_by_the_whole_split_not_read_as_one(fedprompt):
    """A node whose properties carry num-partitions but no usable partition id is named by its
    (all-digit) node id; its uploads' row bound must not read that as a partition id (which
    raised "partition-id ... outside" inside aggregate_fit)."""
    from fedtext.learning.data import labelled

    odd = Node(cid="4558285214187179596", pid="x", parts=2)
    fedprompt.sampler.identify([odd])
    assert fedprompt.sampler.max_examples(odd) == len(labelled(fedprompt.cfg).splits.train)


def test_a_partition_id_equal_to_num_partitions_is_refused_and_the_last_one_bound(fedprompt, caplog):
    """Issue 69, the top of the range: partition ``num-partitions`` (one past the last) is refused
    with its reason as any other id outside the federation, by the server's claim check and by the
    node's own config; ``num-partitions - 1`` is bound. (Pinned: the checks were already right.)"""
    from fedtext.common.config import ConfigError
    from fedtext.node.node import make_node

    a, b = Node(cid="a", pid=0, parts=3), Node(cid="b", pid=1, parts=3)
    fedprompt.sampler.identify([a, b])  # the federation's count: 3
    with caplog.at_level(logging.WARNING, logger="fedtext"):
        assert fedprompt.sampler.claim("top", 3) == "node top claims partition 3, outside 0..2 (num-partitions=3): refused"
    assert "node top claims partition 3, outside 0..2 (num-partitions=3): refused; its results are dropped" in caplog.text
    assert fedprompt.sampler.refused == {"top": "3"} and "top" not in fedprompt.sampler.bound
    assert fedprompt.sampler.claim("last", 2) is None and fedprompt.sampler.bound["last"] == "2"
    # an unbound node's own count, as in its properties (before the federation's is known)
    fresh = FedPrompt(make_config("fedprompt", prompt_length=2, max_length=64), TASKS["demo"]).sampler
    assert fresh.claim("x", 2, num_partitions=2) == "node x claims partition 2, outside 0..1 (num-partitions=2): refused"
    assert fresh.claim("y", 1, num_partitions=2) is None
    # the node refuses its own node config the same way
    with pytest.raises(ConfigError, match=r"^partition-id 3 outside 0\.\.2$"):
        make_node({}, {"partition-id": 3, "num-partitions": 3})
    assert make_node({}, {"partition-id": 2, "num-partitions": 3}).partition_id == 2
