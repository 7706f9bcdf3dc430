"""fedtext's SuperLink holds a SuperNode's empty pull until a message is stored (fedtext.server.superlink),
and fedtext's SuperNode asks again at once after a held poll (fedtext.node.supernode.CappedSleep)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from fedtext.node import supernode
from fedtext.server import superlink


class Answers:
    """Flower's pull handler as the holder sees it: each call pops the next answer (a list of messages)
    and runs ``on_call`` (a store landing while it answers)."""

    def __init__(self, *answers: list[str], on_call=None) -> None:
        self.answers, self.calls, self.on_call = list(answers), 0, on_call

    def __call__(self, request=None, state=None, store=None):
        self.calls += 1
        if self.on_call:
            self.on_call(self.calls)
        return SimpleNamespace(messages_list=self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])


def test_a_pull_with_a_message_is_answered_at_once_and_an_empty_one_after_the_hold():
    holder = superlink.Holder(hold_s=0.3)
    handler = Answers(["m"])
    t0 = time.monotonic()
    assert holder.pull(handler, request="r").messages_list == ["m"] and handler.calls == 1
    assert time.monotonic() - t0 < 0.25
    handler = Answers([])
    t0 = time.monotonic()
    assert holder.pull(handler).messages_list == [] and handler.calls == 1  # nothing stored: asked once
    assert 0.3 <= time.monotonic() - t0 < 1.0 and holder.held == 0


def test_a_store_during_the_hold_answers_the_held_pull_within_milliseconds():
    holder = superlink.Holder(hold_s=5.0)
    handler = Answers([], ["m"])
    t0 = time.monotonic()  # before the timer starts: its 0.2 s are then at most the time since t0
    threading.Timer(0.2, holder.stored).start()
    assert holder.pull(handler).messages_list == ["m"] and handler.calls == 2
    assert 0.2 <= time.monotonic() - t0 < 1.0


def test_a_message_for_another_node_sends_the_pull_back_to_wait_out_its_hold():
    holder = superlink.Holder(hold_s=0.6)
    handler = Answers([])  # every ask finds nothing for this node
    t0 = time.monotonic()
    threading.Timer(0.1, holder.stored).start()
    assert holder.pull(handler).messages_list == [] and handler.calls == 2
    assert 0.6 <= time.monotonic() - t0 < 1.2  # the hold counts from the first ask, not from the store


def test_a_store_between_the_empty_answer_and_the_wait_is_not_missed():
    holder = superlink.Holder(hold_s=5.0)
    handler = Answers([], ["m"], on_call=lambda n: n == 1 and holder.stored())  # stored while Flower answered
    t0 = time.monotonic()
    assert holder.pull(handler).messages_list == ["m"] and time.monotonic() - t0 < 0.5


def test_pulls_beyond_max_held_are_answered_at_once():
    holder = superlink.Holder(hold_s=2.0, max_held=1)
    first = threading.Thread(target=holder.pull, args=(Answers([]),))
    first.start()
    deadline = time.monotonic() + 2
    while holder.held < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    t0 = time.monotonic()
    handler = Answers([])
    assert holder.pull(handler).messages_list == [] and handler.calls == 1 and time.monotonic() - t0 < 0.2
    assert holder.held == 1  # the second pull took no slot
    holder.stored()  # the first asks again, finds nothing, waits out its hold
    first.join(timeout=5)
    assert not first.is_alive() and holder.held == 0
    with pytest.raises(ValueError):
        superlink.Holder(hold_s=-1)
    with pytest.raises(ValueError):
        superlink.Holder(max_held=-1)


def test_a_zero_hold_is_flowers_answer():
    holder = superlink.Holder(hold_s=0.0)
    handler = Answers([])
    threading.Timer(0.5, holder.stored).start()
    t0 = time.monotonic()
    assert holder.pull(handler).messages_list == [] and handler.calls == 1 and time.monotonic() - t0 < 0.4


def keep_flowers(monkeypatch) -> None:
    """Flower's pull handlers, LinkState stores and the SuperLink app's middleware list (``main`` scopes it:
    scope_middleware) restored after the test."""
    import importlib

    app_module = importlib.import_module(superlink.SUPERLINK_APP)
    monkeypatch.setattr(app_module, "_get_middleware", app_module._get_middleware)
    for name in (superlink.FLEET_HANDLERS, superlink.RUNTIME_HANDLERS):
        handlers = importlib.import_module(name)
        monkeypatch.setattr(handlers, "pull_messages", handlers.pull_messages)
    for cls in superlink.link_states():
        for method in (*superlink.STORES, superlink.PUSHES):
            monkeypatch.setattr(cls, method, getattr(cls, method))


def test_the_flower_seams_are_there_and_hold_pulls_wraps_each_once(monkeypatch):
    """Fleet pulls (a SuperNode's) wait on stored instructions, Runtime pulls (the ServerApp's) on stored
    replies, not the other way round; a second call wraps Flower's functions, not the first wrappers."""
    import importlib

    assert superlink.contract_problems() == []
    keep_flowers(monkeypatch)
    fleet, runtime = (importlib.import_module(n) for n in (superlink.FLEET_HANDLERS, superlink.RUNTIME_HANDLERS))
    flowers = {m: m.pull_messages for m in (fleet, runtime)}
    stores = {(cls, m): getattr(cls, m) for cls in superlink.link_states() for m in superlink.STORES}
    superlink.hold_pulls(superlink.Holder(), superlink.Holder())
    instructions, replies = superlink.Holder(), superlink.Holder()
    superlink.hold_pulls(instructions, replies)
    for module, holder in ((fleet, instructions), (runtime, replies)):
        assert module.pull_messages.__wrapped__ is flowers[module] and module.pull_messages.__fedtext_holder__ is holder
    for (cls, method), store in stores.items():
        wrapped = getattr(cls, method)
        assert wrapped.__wrapped__ is store
        assert wrapped.__fedtext_holder__ is (instructions if method == "store_message_ins" else replies)
    for cls in superlink.link_states():
        assert cls.store_message_and_object_tree.__fedtext_holder__ == (instructions, replies)
        assert not hasattr(cls.store_message_and_object_tree.__wrapped__, "__fedtext_holder__")


def test_a_push_wakes_the_holder_its_message_is_for_once_flower_stored_it():
    instructions, replies = superlink.Holder(), superlink.Holder()
    answers = iter([(True, []), (True, []), (False, [])])
    push = superlink._notifying_after(lambda self, message, tree, session: next(answers), instructions, replies)
    ins = SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=""))
    res = SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id="m1"))
    push(None, ins, "tree", "s")
    assert (instructions.stores, replies.stores) == (1, 0)
    push(None, message=res, tree="tree", session="s")
    assert (instructions.stores, replies.stores) == (1, 1)
    push(None, res, "tree", "s")  # Flower refused it: no wake
    assert (instructions.stores, replies.stores) == (1, 1)


def test_a_changed_flower_seam_is_named_and_the_superlink_still_starts_unheld(monkeypatch, capsys):
    import importlib

    from flwr.superlink import main as superlink_main

    keep_flowers(monkeypatch)
    monkeypatch.setattr(superlink.sys, "argv", list(superlink.sys.argv))  # main() sets it for Flower's CLI
    monkeypatch.setattr(superlink_main, "_RUNTIME_HANDLERS", object())
    assert superlink.contract_problems() == [
        f"the SuperLink no longer hands its Runtime router the module {superlink.RUNTIME_HANDLERS}"]
    started = []
    monkeypatch.setattr("flwr.superlink.cli.flower_superlink", lambda: started.append(list(superlink.sys.argv)))
    fleet = importlib.import_module(superlink.FLEET_HANDLERS)
    flowers = fleet.pull_messages
    assert superlink.main(["--insecure"]) == 0 and started == [["flower-superlink", "--insecure"]]
    assert fleet.pull_messages is flowers and "answered at once" in capsys.readouterr().err
    assert superlink.main(["--hold-s", "-1"]) == 2 and superlink.main(["--max-held", "-1"]) == 2
    assert superlink.main(["--max-held-replies", "-1"]) == 2
    monkeypatch.setattr(superlink, "contract_problems", lambda: [])
    monkeypatch.setattr(superlink, "hold_pulls", lambda *holders: started.append(holders))
    assert superlink.main(["--hold-s", "0.5", "--max-held-replies", "3"]) == 0
    assert "shorter than" in capsys.readouterr().err  # the askers would not tell its holds
    instructions, replies = started[-2]
    assert (instructions.hold_s, instructions.max_held, replies.max_held) == (0.5, superlink.MAX_HELD, 3)


def test_a_store_notifies_only_when_flower_stored_the_message():
    holder = superlink.Holder()
    stored = superlink._notifying(lambda self, message: message, holder)
    assert stored(None, "id") == "id" and holder.stores == 1
    assert stored(None, None) is None and holder.stores == 1  # Flower refused it (returned None): no wake


@pytest.mark.parametrize("kind", ["memory", "sql"])
def test_flowers_state_wakes_a_held_pull_with_the_message_it_stored(monkeypatch, tmp_path, kind):
    """End to end on Flower's own LinkStates (in memory, and SQL on a file as deploy/superlink.sh runs it)
    and Fleet handler: a node's pull is held, the ServerApp's message for it is pushed as Flower's push
    API does it (store_message_and_object_tree), and the held pull returns it well before the hold ends."""
    import importlib

    from flwr.app import ConfigRecord, Message, RecordDict
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.proto.fleet_pb2 import PullMessagesRequest
    from flwr.proto.node_pb2 import Node
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
    from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
    from flwr.superlink.federation.noop_federation_manager import NOOP_FEDERATION_ID, NoOpFederationManager
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, get_object_tree
    from flwr.supercore.object_store.in_memory_object_store import InMemoryObjectStore
    from flwr.supercore.object_store.sql_object_store import SqlObjectStore
    from flwr.supercore.task_identity import TaskIdentity

    handlers = importlib.import_module(superlink.FLEET_HANDLERS)
    keep_flowers(monkeypatch)
    holder, replies = superlink.Holder(hold_s=5.0), superlink.Holder(hold_s=5.0)
    superlink.hold_pulls(holder, replies)

    if kind == "memory":
        state = InMemoryLinkState(NoOpFederationManager(), InMemoryObjectStore())
    else:
        store = SqlObjectStore(str(tmp_path / "state.db"))
        store.initialize()
        state = SqlLinkState(str(tmp_path / "state.db"), NoOpFederationManager(), store)
        state.initialize()
    node_id = state.create_node("owner", "owner", b"key", heartbeat_interval=30)
    state.activate_node(node_id, 30)
    run_id = state.create_run(None, None, None, {}, NOOP_FEDERATION_ID, None, None, "serverapp")
    for key, value in (("_run_id", run_id), ("_node_id", 0), ("_task_id", 1)):  # what a ServerApp task has set
        monkeypatch.setattr(TaskIdentity, key, value)
    msg = Message(RecordDict({"c": ConfigRecord({"lr": 0.1})}), dst_node_id=node_id, message_type="train",
                  group_id="1")
    msg.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID  # what the ServerApp's grid sets
    request = PullMessagesRequest(node=Node(node_id=node_id))
    got, took = [], []

    def pull():
        t0 = time.monotonic()
        got.append(handlers.pull_messages(request=request, state=state, store=state.object_store))
        took.append(time.monotonic() - t0)

    puller = threading.Thread(target=pull)
    puller.start()
    deadline = time.monotonic() + 5.0  # the pull reaches its hold (seconds on a loaded machine with SQL)
    while holder.held < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # the pull is held: nothing is stored for the node yet
    assert puller.is_alive() and holder.held == 1
    session = state.start_session(run_id)  # as Flower's push API does it: the message and its tree, then its objects
    msg.metadata.__dict__["_message_id"] = msg.object_id
    stored, _ = state.store_message_and_object_tree(msg, get_object_tree(msg), session)
    assert stored and holder.stores == 2 and replies.stores == 0  # inside Flower's store, and once it returned
    stored_at = time.monotonic()
    for object_id, obj in get_all_nested_objects(msg).items():
        state.store_object(run_id, session, object_id, obj.deflate())
    puller.join(timeout=5)
    # held at least the 0.3 s before the store, and answered within 2 s of it, not at the 5 s hold's end
    assert not puller.is_alive() and len(got[0].messages_list) == 1 and took[0] >= 0.3
    assert time.monotonic() - stored_at < 2.0
    assert got[0].messages_list[0].metadata.message_id == msg.object_id


def test_a_node_asks_again_at_once_after_a_held_poll_and_sleeps_after_a_quick_one(monkeypatch):
    """CappedSleep: an empty poll that took HELD_S or more since the last sleep returned or a reply was
    pushed (Flower's loop pulls right after either) is followed by no sleep; a quick one (Flower's own
    SuperLink) by the usual sleep, the active one within the window after a reply."""
    slept, now = [], [100.0]
    monkeypatch.setattr(supernode.time, "sleep", lambda s: slept.append(s) or now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(supernode.time, "monotonic", lambda: now[0])
    clock = supernode.CappedSleep(0.5, 0.1, window=30.0)
    clock.stored.wait = lambda timeout: slept.append(timeout) or False  # a local wait, recorded
    now[0] += 0.01  # a quick empty poll
    clock.sleep(3)
    now[0] += supernode.HELD_S  # a held empty poll
    clock.sleep(3)
    assert slept == [0.5] and clock.held == 1
    now[0] += 5.0  # a message pulled and handled (its local waits)...
    clock.sleep(0.5)
    now[0] += 2.0
    clock.replied()  # ...its reply pushed, then a held empty poll: asked again at once
    now[0] += supernode.HELD_S
    clock.sleep(3)
    assert slept == [0.5, supernode.LOCAL_WAIT_S] and clock.held == 2
    now[0] += 0.02  # a quick empty poll within the window after the reply: the active poll
    clock.sleep(3)
    now[0] += supernode.HELD_S - 0.01  # just short of HELD_S: not held
    clock.sleep(3)
    assert slept == [0.5, supernode.LOCAL_WAIT_S, 0.1, 0.1] and clock.held == 2
