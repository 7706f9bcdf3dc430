"""Issue 35, "resume loses nothing": the clients' node state survives ``resume=``.

Unit tests of :mod:`fedtext.node.state` (the journal) and of its use in
:class:`fedtext.node.node.Node`. "Kill + resume equals the uninterrupted run" through
Flower's simulation engine, for FeS (pseudo labels) and FedDPGu (forgotten indices), is
in tests/integration/test_resume_client_state_flower.py.
"""

from __future__ import annotations

import json
import math
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict

from fedtext.node import state as ns
RUN_KEY = "20250101-000000-fes-demo-s0"


def _state(**records) -> RecordDict:
    st = RecordDict()
    for name, values in records.items():
        st[name] = ConfigRecord(values)
    return st


def _plain(state: RecordDict) -> dict:
    """The state's fedtext records as plain dicts (the stamp left out)."""
    return {k: dict(state[k]) for k in state.keys() if k != ns.STAMP_KEY}


def _journal(tmp_path, flower_run=7, partition=0) -> ns.Journal:
    return ns.Journal.of(str(tmp_path), {"run_key": RUN_KEY}, partition, flower_run)


def _put(**records):
    """A ``change`` that sets these records."""
    def change(state: RecordDict) -> None:
        for name, values in records.items():
            state[name] = ConfigRecord(values)
    return change


def _round(journal: ns.Journal, state: RecordDict, r: int, kind: str = "fit", change=None):
    """One message of round ``r``: prepare, let ``change`` edit the state, record."""
    before = journal.prepare(state, r, kind)
    if change:
        change(state)
    return journal.record(state, r, kind, before)


# ------------------------------------------------------------------ encoding
def test_every_config_record_value_type_round_trips_exactly_through_json(tmp_path):
    p = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    values = {
        "ids": [3, 1, 4, 1, 5], "labels": [0, 1, 1, 0, 1], "empty": [], "version": 7, "neg": -2**62,
        "prompt": p.tobytes(), "shape": [4, 6], "chunks": [b"\x00\xff", b""],
        "f64": [0.1, 1 / 3, 2.0, -0.0, 5e-324, 1.7976931348623157e308], "f32": [float(x) for x in p.ravel()],
        "odd": [math.nan, math.inf, -math.inf], "one": 0.1 + 0.2, "flag": True, "flags": [True, False],
        "name": "x y ü", "names": ["a", ""],
    }
    change = _put(**{"feddls": values, "fes": {"ids": [2, 9], "labels": [1, 0], "kept": [0, 2, 9]}})
    path = _round(_journal(tmp_path), RecordDict(), 1, change=change)
    entry = json.loads(path.read_text())  # strict JSON, readable by anything
    assert entry["round"] == 1 and entry["prev"] == 0 and entry["flower_run"] == 7
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    fresh = RecordDict()
    _journal(tmp_path).prepare(fresh, 2, "fit")
    got = dict(fresh["feddls"])
    for key, want in values.items():
        if key == "odd":
            assert math.isnan(got[key][0]) and got[key][1:] == [math.inf, -math.inf]
            continue
        assert got[key] == want and type(got[key]) is type(want), key
        if isinstance(want, list):
            assert [type(x) for x in got[key]] == [type(x) for x in want], key
    assert math.copysign(1, got["f64"][3]) == -1  # -0.0 stays negative
    assert np.array_equal(np.frombuffer(got["prompt"], np.float32).reshape(4, 6), p)
    assert np.array_equal(np.asarray(got["f32"], dtype=np.float32), p.ravel())
    assert dict(fresh["fes"]) == {"ids": [2, 9], "labels": [1, 0], "kept": [0, 2, 9]}


def test_the_journal_is_json_never_pickle(tmp_path):
    journal = _journal(tmp_path)
    path = _round(journal, RecordDict(), 1, change=_put(fes={"ids": [1]}))
    assert path == tmp_path / RUN_KEY / "node-state" / "p0" / "round-1.json"
    assert path.read_bytes()[:1] == b"{"
    path.write_bytes(pickle.dumps({"format": 1, "round": 1, "prev": 0, "records": {}}))  # a pickle is refused
    with pytest.raises(ns.NodeStateError, match="unreadable node state"):
        journal.prepare(RecordDict(), 2, "fit")
    path.write_text(json.dumps({"format": 1, "round": 1, "prev": 0,
                                "records": {"fes": {"ids": {"type": "int", "list": True, "value": ["1"]}}}}))
    with pytest.raises(ns.NodeStateError, match="journalled int holds '1'"):
        journal.prepare(RecordDict(), 2, "fit")
    path.write_text(json.dumps({"format": 1, "round": 3, "prev": 0, "records": {}}))  # round not its name's
    with pytest.raises(ns.NodeStateError, match="not a fedtext node-state entry"):
        journal.prepare(RecordDict(), 2, "fit")


def test_an_unsafe_run_key_is_refused(tmp_path):
    for key in ("../x", "..", ".hidden", "a/b", "", "a\\b", 3):
        if key:
            with pytest.raises(ns.NodeStateError, match="not a run folder name"):
                ns.Journal.of(str(tmp_path), {"run_key": key}, 0)
    assert ns.Journal.of(str(tmp_path), {"run_key": ""}, 0) is None


# ------------------------------------------------------------------ rules
def test_a_fresh_node_gets_the_newest_entry_before_the_round(tmp_path):
    journal, state = _journal(tmp_path), RecordDict()
    _round(journal, state, 1, change=_put(fes={"ids": [1]}))
    _round(journal, state, 2, "evaluate")  # no change: nothing written
    _round(journal, state, 3, change=_put(fes={"ids": [3]}))
    assert sorted(ns.entries(journal.directory)) == [1, 3]
    fresh = RecordDict()
    journal.prepare(fresh, 4, "fit")
    assert _plain(fresh) == {"fes": {"ids": [3]}} and ns.stamp(fresh) == (3, 1)
    fresh = RecordDict()
    journal.prepare(fresh, 2, "fit")  # redoing round 2: the state after round 1
    assert _plain(fresh) == {"fes": {"ids": [1]}} and ns.stamp(fresh) == (1, 0)
    assert sorted(ns.entries(journal.directory)) == [1]  # round 3 was an abandoned attempt's
    fresh = RecordDict()
    journal.prepare(fresh, 1, "fit")  # nothing before round 1: empty
    assert _plain(fresh) == {} and ns.stamp(fresh) == (0, 0)


def test_state_stamped_with_the_round_being_redone_or_later_is_replaced(tmp_path):
    journal, state = _journal(tmp_path), RecordDict()
    _round(journal, state, 1, change=_put(fes={"ids": [1]}))
    _round(journal, state, 2, change=_put(fes={"ids": [2]}))
    # a node that survived the crash holds the state of round 2, being redone
    journal.prepare(state, 2, "fit")
    assert _plain(state) == {"fes": {"ids": [1]}} and ns.stamp(state) == (1, 0)
    # a state stamped later than the round (and one without a stamp) is replaced as well
    newer = _state(fes={"ids": [9]}, other={"x": 1})
    ns.set_stamp(newer, 5, 4)
    journal.prepare(newer, 3, "fit")
    assert _plain(newer) == {"fes": {"ids": [1]}}
    unstamped = _state(fes={"ids": [9]})
    journal.prepare(unstamped, 3, "fit")
    assert _plain(unstamped) == {"fes": {"ids": [1]}}


def test_live_state_older_than_the_round_is_used_without_reading_the_disk(tmp_path, monkeypatch):
    journal, state = _journal(tmp_path), RecordDict()
    _round(journal, state, 1, change=_put(fes={"ids": [1]}))
    (journal.directory / "round-1.json").write_text("garbage")  # would fail if it were read
    monkeypatch.setattr(ns, "entries", lambda d: pytest.fail("the normal path read the disk"))
    journal.prepare(state, 2, "fit")
    journal.prepare(state, 1, "evaluate")  # the same round's fit made it
    assert _plain(state) == {"fes": {"ids": [1]}}


def test_an_evaluate_trusts_an_entry_of_its_own_round_only_from_the_same_flower_run(tmp_path):
    state = RecordDict()
    _round(_journal(tmp_path, flower_run=7), state, 1, change=_put(fes={"v": 1}))
    _round(_journal(tmp_path, flower_run=7), state, 2, change=_put(fes={"v": 2}))
    fresh = RecordDict()  # a SuperNode restarted between the fit and the evaluate of round 2
    _journal(tmp_path, flower_run=7).prepare(fresh, 2, "evaluate")
    assert _plain(fresh) == {"fes": {"v": 2}}
    fresh = RecordDict()  # a resumed run (another Flower run) evaluating round 2 on a node it did not fit
    _journal(tmp_path, flower_run=8).prepare(fresh, 2, "evaluate")
    assert _plain(fresh) == {"fes": {"v": 1}}
    assert sorted(ns.entries(_journal(tmp_path).directory)) == [1]


def test_an_evaluate_that_changes_the_state_is_journalled_and_keeps_the_redo_entry(tmp_path):
    journal, state = _journal(tmp_path), RecordDict()
    _round(journal, state, 1, change=_put(fes={"v": 1}))
    _round(journal, state, 2, change=_put(fes={"v": 2}))
    assert _round(journal, state, 2, "evaluate") is None
    _round(journal, state, 2, "evaluate", change=_put(fes={"v": 22}))
    assert ns.stamp(state) == (2, 1) and sorted(ns.entries(journal.directory)) == [1, 2]
    fresh = RecordDict()
    journal.prepare(fresh, 3, "fit")
    assert _plain(fresh) == {"fes": {"v": 22}}


def test_old_entries_are_pruned_to_the_last_two(tmp_path):
    journal, state = _journal(tmp_path), RecordDict()
    for r in range(1, 6):
        _round(journal, state, r, change=_put(fes={"v": r}))
        assert sorted(ns.entries(journal.directory)) == ([1] if r == 1 else [r - 1, r])
    assert not [p for p in journal.directory.iterdir() if not p.name.startswith("round-")]  # no temp files


def test_an_empty_state_writes_nothing_and_no_run_key_journals_nothing(tmp_path):
    journal, state = _journal(tmp_path), RecordDict()
    assert _round(journal, state, 1) is None and not journal.directory.exists()
    assert ns.stamp(state) == (1, 0)
    assert ns.Journal.of(str(tmp_path), {"server_round": 1}, 0) is None


def test_a_write_killed_midway_leaves_the_previous_entry(tmp_path, monkeypatch):
    journal, state = _journal(tmp_path), RecordDict()
    _round(journal, state, 1, change=_put(fes={"v": 1}))
    _round(journal, state, 2, change=_put(fes={"v": 2}))
    old = (journal.directory / "round-2.json").read_bytes()

    def dies(obj, f, **kw):
        f.write('{"format": 1, "round": 2, "pr')  # half an entry, then the node dies
        raise KeyboardInterrupt

    monkeypatch.setattr(ns.json, "dump", dies)
    with pytest.raises(KeyboardInterrupt):
        ns.write_entry(journal.directory, {"format": 1, "round": 2, "prev": 1, "records": {}})
    assert (journal.directory / "round-2.json").read_bytes() == old
    assert sorted(p.name for p in journal.directory.iterdir()) == ["round-1.json", "round-2.json"]


def test_a_journal_that_cannot_be_written_warns_and_the_round_goes_on(tmp_path, caplog):
    (tmp_path / RUN_KEY).write_text("a file where the run folder should be")
    journal, state = _journal(tmp_path), RecordDict()
    with caplog.at_level("WARNING", logger="fedtext"):
        assert _round(journal, state, 1, change=_put(fes={"v": [1]})) is None
    assert "could not journal node state" in caplog.text and ns.stamp(state) == (1, 0)
    assert "could not read the node-state journal" in caplog.text  # the fresh node's restore: empty


# ------------------------------------------------------------------ in the Node
def _node(monkeypatch, tmp_path, changes: dict[int, dict], flower_run=11):
    """A Node whose built client sets ``state["m"]`` to ``changes[round]`` in fit and
    records what it saw in ``seen``."""
    import fedtext.node.node as ca
    from fedtext.common.registry import make_config

    seen = []

    def build(node):
        def fit(p, c):
            seen.append(("fit", c["server_round"], _plain(node.state)))
            if c["server_round"] in changes:
                node.state["m"] = ConfigRecord(changes[c["server_round"]])
            return p, 1, {}

        def evaluate(p, c):
            seen.append(("evaluate", c["server_round"], _plain(node.state)))
            return 0.0, 1, {}

        return SimpleNamespace(fit=fit, evaluate=evaluate)

    monkeypatch.setattr(ca.Node, "build", build)
    return lambda state: ca.Node(make_config("fes", output_dir=str(tmp_path)), 1, 3, state, flower_run), seen


def test_a_new_node_continues_from_the_journal_and_without_run_key_nothing_is_written(tmp_path, monkeypatch):
    make, seen = _node(monkeypatch, tmp_path, {1: {"ids": [4, 2]}, 2: {"ids": [5]}})
    state = RecordDict()
    for r in (1, 2):
        make(state).fit([np.zeros(1)], {"server_round": r, "run_key": RUN_KEY})
        make(state).evaluate([np.zeros(1)], {"server_round": r, "run_key": RUN_KEY})
    assert seen[2] == ("fit", 2, {"m": {"ids": [4, 2]}})
    assert sorted(ns.entries(tmp_path / RUN_KEY / "node-state" / "p1")) == [1, 2]
    seen.clear()
    make2, seen = _node(monkeypatch, tmp_path, {}, flower_run=12)  # the resumed run: a new node, a new Flower run
    make2(RecordDict()).fit([np.zeros(1)], {"server_round": 2, "run_key": RUN_KEY})
    assert seen == [("fit", 2, {"m": {"ids": [4, 2]}})]
    seen.clear()
    make2(RecordDict()).fit([np.zeros(1)], {"server_round": 3, "run_key": RUN_KEY})
    assert seen == [("fit", 3, {"m": {"ids": [4, 2]}})]  # round 2 was redone without a change to m
    other = tmp_path / "plain"
    make3, _ = _node(monkeypatch, other, {1: {"ids": [1]}})
    make3(RecordDict()).fit([np.zeros(1)], {"server_round": 1})
    assert not other.exists()


def test_feddls_state_restored_from_the_journal_is_the_stored_prompt_exactly(tmp_path):
    """FedDLS keeps p' as float32 bytes: after the journal the client holds the same
    version and p', so the server's checkpointed versions match and no resync happens."""
    from clients.feddls import FedDLSClient

    p = np.random.default_rng(1).normal(size=(4, 384)).astype(np.float32)
    holder = SimpleNamespace(state=RecordDict(), STATE_KEY=FedDLSClient.STATE_KEY)
    _round(_journal(tmp_path), holder.state, 3, change=lambda s: FedDLSClient.store(holder, 3, p))
    fresh = SimpleNamespace(state=RecordDict(), STATE_KEY=FedDLSClient.STATE_KEY)
    _journal(tmp_path).prepare(fresh.state, 4, "fit")
    version, prompt = FedDLSClient.stored(fresh)
    assert version == 3 and prompt.dtype == np.float32 and np.array_equal(prompt, p)
