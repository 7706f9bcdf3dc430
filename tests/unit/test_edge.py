"""The deployment engine's waits (fedtext/server/grid.py, fedtext/node/supernode.py) and the board's install
list (deploy/edge/requirements.txt).

Flower's deployment grid pulls a reply every 3 s and its SuperNode sleeps 3 s whenever it finds
no message; fedtext's ServerApp pulls replies at most :data:`fedtext.server.grid.REPLY_POLL_S` apart
and its SuperNode command caps the idle sleep (docs/performance.md, "Deployment rounds").
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import tomllib
from types import SimpleNamespace

import pytest

from fedtext.common import pulls
from fedtext.server import grid as grid_mod
from fedtext.node import supernode
from ..conftest import REPO


def bare(name: str) -> SimpleNamespace:
    """A message without content: the grid's packing (fedtext.common.packing) leaves it alone."""
    return SimpleNamespace(name=name, has_content=lambda: False, metadata=SimpleNamespace(dst_node_id=1))


class FakeGrid:
    """Replies to pushed message ids appear at given pull numbers; records the sleeps between pulls."""

    def __init__(self, ready_at: dict[str, int]) -> None:
        self.ready_at, self.pulls, self.pushed = ready_at, 0, []

    def push_messages(self, messages):
        self.pushed = list(messages)
        return list(self.ready_at)

    def pull_messages(self, ids):
        self.pulls += 1
        ids = set(ids)
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i), has_content=lambda: False)
                for i, n in self.ready_at.items() if i in ids and n == self.pulls]


def test_replies_are_pulled_with_growing_waits_capped_at_reply_poll_s(monkeypatch):
    sleeps = []
    monkeypatch.setattr(grid_mod.time, "sleep", sleeps.append)
    fake = FakeGrid({"a": 1, "b": 12})
    sent = [bare("m1"), bare("m2")]
    got = grid_mod.ReplyPollingGrid(fake).send_and_receive(sent)
    assert [m.metadata.reply_to_message_id for m in got] == ["a", "b"] and fake.pulls == 12
    assert sleeps[:4] == pytest.approx([0.05, 0.075, 0.1, 0.1])  # x1.5 each time, capped
    assert max(sleeps) == grid_mod.REPLY_POLL_S == 0.1 and len(sleeps) == 11
    assert fake.pushed == sent


def test_a_timeout_ends_the_pulls_with_the_replies_so_far(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(grid_mod.time, "time", lambda: clock[0])
    monkeypatch.setattr(grid_mod.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    fake = FakeGrid({"a": 2, "b": 10_000})
    got = grid_mod.ReplyPollingGrid(fake).send_and_receive([bare("m")], timeout=1.0)
    assert [m.metadata.reply_to_message_id for m in got] == ["a"]
    assert clock[0] == pytest.approx(1001.0) and fake.pulls == 11  # at 0, 0.05, 0.125, then every 0.1 s to 0.925


def test_an_ask_the_superlink_held_is_made_again_without_a_sleep(monkeypatch):
    """Asks 2 and 3 come back empty after HELD_S (fedtext's SuperLink held them): no sleep follows them;
    quick empty asks are followed by the growing waits as before."""
    sleeps, clock = [], [50.0]
    monkeypatch.setattr(grid_mod.time, "sleep", lambda s: sleeps.append(s) or clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(grid_mod.time, "monotonic", lambda: clock[0])
    fake = FakeGrid({"a": 5})
    pull = fake.pull_messages

    def pull_messages(ids):
        got = pull(ids)
        if fake.pulls in (2, 3):
            clock[0] += grid_mod.pulls.HELD_S  # held until its hold ran out
        return got

    fake.pull_messages = pull_messages
    got = grid_mod.ReplyPollingGrid(fake).send_and_receive([bare("m")])
    assert [m.metadata.reply_to_message_id for m in got] == ["a"] and fake.pulls == 5
    assert sleeps == pytest.approx([0.05, 0.075])  # after asks 1 and 4 only


def test_the_wrapper_is_a_flower_grid_that_delegates_the_rest():
    calls = []

    class Inner:
        run = "the run"

        def __getattr__(self, name):
            return lambda *a: calls.append((name, a)) or name

        def pull_messages(self, ids):
            calls.append(("pull_messages", (ids,)))
            return []

    g = grid_mod.ReplyPollingGrid(Inner())
    assert g.run == "the run" and g.get_node_ids() == "get_node_ids" and g.pull_messages(["x"]) == []
    assert calls[-1] == ("pull_messages", (["x"],))
    assert g.create_message("c", "train", 3, "1") == "create_message"
    assert calls[-1] == ("create_message", ("c", "train", 3, "1", None))


def test_pushes_from_several_threads_go_one_at_a_time():
    """Flower's compat Server pushes each client's message from its own thread: the grid lets one
    push run at a time (ReplyPollingGrid.push_messages says why; the next test shows it on Flower)."""
    import threading
    import time

    running, most, lock = [0], [0], threading.Lock()

    class Inner:
        def push_messages(self, messages):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.05)  # a push over HTTP: the other threads arrive meanwhile
            with lock:
                running[0] -= 1
            return [m.name for m in messages]

    g = grid_mod.ReplyPollingGrid(Inner())
    start = threading.Barrier(4)
    got = []

    def push(i):
        start.wait()
        got.append(g.push_messages([bare(f"m{i}")]))

    threads = [threading.Thread(target=push, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads) and most[0] == 1 and sorted(got) == [["m0"], ["m1"], ["m2"], ["m3"]]


def test_flowers_linkstate_refuses_content_pushed_again_after_both_messages_were_consumed(monkeypatch):
    """Why the pushes are one at a time, replayed on Flower's own SuperLink state: two messages with one
    content, pushed in overlapping sessions, both list the whole content to push; once the first has
    pushed it and the nodes consumed both messages, a push of the second session still on its way is
    refused (the ObjectPushError CI saw). Pushed one after another, the second lists only its root and loses nothing.
    A Flower that stops refusing fails the first assert: the grid's lock then only saves the second push."""
    import numpy as np
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
    from flwr.superlink.federation.noop_federation_manager import NoOpFederationManager
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, get_object_tree
    from flwr.supercore.object_store.in_memory_object_store import InMemoryObjectStore
    from flwr.supercore.task_identity import TaskIdentity

    run_id = 7
    for key, value in (("_run_id", run_id), ("_node_id", 0), ("_task_id", 1)):  # what a ServerApp task has set
        monkeypatch.setattr(TaskIdentity, key, value)

    def replay(one_at_a_time: bool) -> tuple[int, int]:
        state = InMemoryLinkState(NoOpFederationManager(), InMemoryObjectStore())
        content = {"p": ArrayRecord({"w": Array(np.arange(4.0))}), "c": ConfigRecord({"lr": 0.1})}
        sent = [Message(RecordDict(dict(content)), dst_node_id=n, message_type="evaluate", group_id="1")
                for n in (1, 2)]
        objects = [get_all_nested_objects(m) for m in sent]
        sessions, listed, waiting = [], [], []  # per push: what Flower listed to push; what is not pushed yet

        def push(i, ids):
            assert all(state.store_object(run_id, sessions[i], o, objects[i][o].deflate()) for o in ids)
            waiting[i] = [o for o in waiting[i] if o not in ids]

        for i, m in enumerate(sent):
            sessions.append(state.start_session(run_id))
            listed.append(state.preregister_object_tree(get_object_tree(m), sessions[i]))
            waiting.append(list(listed[i]))
            if one_at_a_time:
                push(i, listed[i])
        if not one_at_a_time:
            push(0, listed[0])
            # the second session pushes the content again, two at a time, its root last: the root lands while
            # its last content object is still on its way
            last = next(o for o in reversed(listed[1]) if o != sent[1].object_id)
            push(1, [o for o in listed[1] if o != last])
        for m in sent:  # both nodes pulled their message and confirmed it: Flower deletes each tree
            state.object_store.delete(m.object_id)
        refused = [o for o in waiting[1] if not state.store_object(run_id, sessions[1], o, objects[1][o].deflate())]
        return len(listed[1]), len(refused)

    # overlapping: the second push listed its root and the whole content again (RecordDict, ArrayRecord, Array,
    # ConfigRecord, ...), and the content object still on its way when both messages were consumed is refused
    assert replay(one_at_a_time=False) == (6, 1)
    assert replay(one_at_a_time=True) == (1, 0)  # one after another: it listed only its root, and lost nothing


def test_quick_pulls_rebind_flowers_pull_objects_with_a_short_first_retry(monkeypatch):
    """Both modules get Flower's own function with initial_backoff = FIRST_RETRY_S, once however often it runs;
    a module without the seam is left alone, with the reason."""
    import importlib
    from types import ModuleType

    flowers = pulls.flowers_pull_objects()
    for name in (pulls.SERVER_PULLS, pulls.NODE_PULLS):
        module = importlib.import_module(name)
        monkeypatch.setattr(module, "pull_objects", flowers)  # restored after the test
        for _ in range(2):
            assert pulls.quick_pulls(name) == []
            assert module.pull_objects.func is flowers and module.pull_objects.args == ()
            assert module.pull_objects.keywords == {"initial_backoff": pulls.FIRST_RETRY_S} and pulls.FIRST_RETRY_S == 0.05
    other = ModuleType("elsewhere")
    assert pulls.pull_contract_problems(other) == ["elsewhere has no module-level pull_objects"]
    other.pull_objects = lambda *a, **k: None
    assert "elsewhere.pull_objects is not Flower's inflatable_utils.pull_objects" in pulls.pull_contract_problems(other)


def test_an_object_not_there_yet_is_asked_again_after_the_first_retry_not_after_1_s(monkeypatch):
    """The SuperNode loop's pull_objects after quick_pulls, called as the loop calls it."""
    import importlib
    import time

    from flwr.supercore.inflatable.inflatable_utils import ObjectUnavailableError

    loop = importlib.import_module(pulls.NODE_PULLS)
    monkeypatch.setattr(loop, "pull_objects", pulls.flowers_pull_objects())  # restored after the test
    assert pulls.quick_pulls(pulls.NODE_PULLS) == []
    asks = []

    def pull(object_id):
        asks.append(time.monotonic())
        if len(asks) == 1:  # registered, its bytes not pushed yet
            raise ObjectUnavailableError(object_id)
        return b"bytes"

    assert loop.pull_objects(["a" * 64], pull) == {"a" * 64: b"bytes"}
    assert len(asks) == 2 and 0.03 < asks[1] - asks[0] < 0.75  # Flower's default: 0.8-1.2 s


def test_flowers_pulls_still_wait_1_s_first_and_are_called_by_the_names_fedtext_rebinds():
    """A Flower upgrade that moves the pulls (or changes the 1 s that makes the rebinding worth it) shows here."""
    import importlib

    from flwr.supercore import constant

    assert constant.PULL_INITIAL_BACKOFF == 1 and constant.PULL_BACKOFF_CAP == 10
    for name in (pulls.SERVER_PULLS, pulls.NODE_PULLS):
        assert pulls.pull_contract_problems(importlib.import_module(name)) == []


def test_the_grid_makes_quick_pulls_only_on_flowers_deployment_grid(monkeypatch):
    made = []
    monkeypatch.setattr(pulls, "quick_pulls", lambda name: made.append(name) or [])
    grid_mod.ReplyPollingGrid(FakeGrid({}))  # a simulation's grid (or a test's): nothing to rebind
    assert made == []
    deployment = type("HttpGrid", (FakeGrid,), {"__module__": pulls.SERVER_PULLS})
    grid_mod.ReplyPollingGrid(deployment({}))
    assert made == [pulls.SERVER_PULLS]


class RecordedWaits:
    """A CappedSleep's ``stored`` event that records each local wait in ``slept`` instead of waiting."""

    def __init__(self, slept: list[float]) -> None:
        self.slept = slept

    def wait(self, timeout: float) -> bool:
        self.slept.append(timeout)
        return False

    def clear(self) -> None:
        pass


def keep_node_state(monkeypatch) -> type:
    """Flower's in-memory node state class, its store methods restored after the test (cap_idle_poll wraps them)."""
    from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState

    for name in supernode.STATE_STORES:
        monkeypatch.setattr(InMemoryNodeState, name, getattr(InMemoryNodeState, name))
    return InMemoryNodeState


def test_flowers_supernode_still_sleeps_3_s_where_fedtext_caps_it():
    """A Flower upgrade that changes the SuperNode's idle wait shows here: the cap rests on it."""
    import flwr.supernode.start_client_internal as loop

    source = inspect.getsource(loop)
    assert re.search(r"^import time$", source, re.MULTILINE) and "time.sleep(3)" in source
    # the active poll's seam: the loop pushes each message's reply through the module's _push_messages
    assert "_push_messages(" in inspect.getsource(loop.start_client_internal)
    # the local waits a store ends: the loop waits for a reply and its objects' bytes in the node state, which
    # the Runtime API's handlers fill through the methods wake_on_store wraps, on the class the factory makes
    from flwr.supernode.nodestate import nodestate_factory
    from flwr.supernode.servicer.runtime import runtime_handlers

    push = inspect.getsource(loop._push_messages)
    assert "state.get_messages_legacy(is_reply=True)" in push and "time.sleep(0.5)" in push
    handlers = inspect.getsource(runtime_handlers)
    assert all(f"state.{name}(" in handlers for name in supernode.STATE_STORES)
    assert "InMemoryNodeState(" in inspect.getsource(nodestate_factory)


def test_flowers_superexec_still_reads_its_poll_interval_from_the_variable_fedtext_sets():
    from flwr.supercore.superexec import run_superexec

    assert run_superexec._TASK_POLL_INTERVAL_ENV == supernode.TASK_POLL_ENV
    assert run_superexec._DEFAULT_TASK_POLL_INTERVAL_SECONDS == 1.0
    assert run_superexec._MIN_TASK_POLL_INTERVAL_SECONDS <= supernode.TASK_POLL_S


def test_the_supernode_command_sets_the_superexec_poll_unless_given(monkeypatch):
    import flwr.supernode.cli as cli

    seen = []
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main() hands Flower its own argv
    monkeypatch.setattr(cli, "flower_supernode", lambda: seen.append(os.environ.get(supernode.TASK_POLL_ENV)) or 0)
    monkeypatch.setattr(supernode, "cap_idle_poll", lambda cap, active: seen.append((cap, active)))
    quick = []  # the SuperNode's pulls of a message's objects retried after 0.05 s (fedtext.common.pulls)
    monkeypatch.setattr(pulls, "quick_pulls", lambda name: quick.append(name) or [])
    monkeypatch.setenv(supernode.TASK_POLL_ENV, "x")  # so that monkeypatch restores the variable as it was
    monkeypatch.delenv(supernode.TASK_POLL_ENV)
    assert supernode.main(["--idle-poll-s", "0.3", "--active-poll-s", "0.2", "--insecure"]) == 0
    monkeypatch.setenv(supernode.TASK_POLL_ENV, "2")
    assert supernode.main(["--insecure"]) == 0
    assert seen == [(0.3, 0.2), "0.1", (supernode.IDLE_POLL_S, supernode.ACTIVE_POLL_S), "2"]
    assert quick == [pulls.NODE_PULLS] * 2
    assert supernode.main(["--idle-poll-s", "0"]) == 2 and supernode.main(["--active-poll-s", "-1"]) == 2
    # a warm SuperExec is woken for each message: its looks between messages come every WOKEN_TASK_POLL_S; one
    # on a Flower whose wake seams moved stays warm, polled every 0.1 s, as a cold one is
    monkeypatch.setattr(supernode, "start_warm_superexec", lambda warm, start: True)
    for woken, poll in ((True, str(supernode.WOKEN_TASK_POLL_S)), (False, "0.1")):  # Flower's wake seams moved: polled
        monkeypatch.delenv(supernode.TASK_POLL_ENV)
        monkeypatch.setattr(supernode, "wake_superexec", lambda woken=woken: woken)
        assert supernode.main(["--warm-clientapps", "2"]) == 0 and seen[-1] == poll
    assert supernode.WOKEN_TASK_POLL_S == 5.0
    monkeypatch.delenv(supernode.TASK_POLL_ENV)
    monkeypatch.setattr(supernode, "start_warm_superexec", lambda warm, start: False)  # cold: never woken
    monkeypatch.setattr(supernode, "wake_superexec", lambda: pytest.fail("a cold SuperExec is not woken"))
    assert supernode.main(["--warm-clientapps", "2"]) == 0 and seen[-1] == "0.1"


def test_the_cap_shortens_only_sleeps_longer_than_it(monkeypatch):
    slept = []
    monkeypatch.setattr(supernode.time, "sleep", slept.append)
    clock = supernode.CappedSleep(0.5)
    clock.stored = RecordedWaits(slept)
    clock.sleep(3)
    clock.sleep(0.5)  # a wait on the node's own state
    clock.sleep(0.01)
    assert slept == [0.5, supernode.LOCAL_WAIT_S, 0.01] and clock.monotonic is supernode.time.monotonic
    import flwr.supernode.start_client_internal as loop

    monkeypatch.setattr(loop, "time", loop.time)  # restored after the test
    monkeypatch.setattr(loop, "_push_messages", loop._push_messages)
    keep_node_state(monkeypatch)
    supernode.cap_idle_poll(0.4)
    assert isinstance(loop.time, supernode.CappedSleep) and loop.time.cap == 0.4


def test_a_node_polls_fast_for_a_window_after_each_reply_it_pushed(monkeypatch):
    """Idle: the cap; within ACTIVE_WINDOW_S of a reply: the active poll (never above the cap); after
    the window: the cap again. cap_idle_poll hooks the reply on Flower's _push_messages, wrapped once."""
    slept, now = [], [100.0]
    monkeypatch.setattr(supernode.time, "sleep", lambda s: slept.append(s) or now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(supernode.time, "monotonic", lambda: now[0])
    clock = supernode.CappedSleep(0.5, 0.1, window=30.0)
    clock.stored = RecordedWaits(slept)
    clock.sleep(3)
    clock.replied()
    for _ in range(298):  # quick empty polls (a few ms each) 0.1 s apart: 29.9 s after the reply
        now[0] += 0.0003
        clock.sleep(3)
    clock.sleep(0.5)  # a local wait stays LOCAL_WAIT_S
    now[0] += 0.2
    clock.sleep(3)  # 30.1 s after the reply, past the window
    assert slept == [0.5] + [0.1] * 298 + [supernode.LOCAL_WAIT_S, 0.5] and clock.held == 0
    assert supernode.CappedSleep(0.05, 0.1).active == 0.05 and supernode.CappedSleep(0.5).active == 0.5
    import flwr.supernode.start_client_internal as loop

    pushes = []
    monkeypatch.setattr(loop, "time", loop.time)
    monkeypatch.setattr(loop, "_push_messages", lambda **kw: pushes.append(kw) or "pushed")
    keep_node_state(monkeypatch)
    supernode.cap_idle_poll(0.5)
    supernode.cap_idle_poll(0.5)  # a second call wraps Flower's function, not the first wrapper
    assert loop.time.active == supernode.ACTIVE_POLL_S and loop.time.active_until == float("-inf")
    assert loop._push_messages(state="s") == "pushed" and pushes == [{"state": "s"}]
    assert loop.time.active_until == now[0] + supernode.ACTIVE_WINDOW_S


def test_a_store_in_the_node_state_ends_the_loops_local_wait_at_once(monkeypatch):
    """A reply stored by the Runtime API (another thread) ends the loop's wait on its own state within
    milliseconds, not after LOCAL_WAIT_S (here 5 s); with nothing stored the wait runs its whole length;
    a second cap_idle_poll wraps Flower's method, not the first wrapper, and each store still runs it."""
    import threading
    import time

    import flwr.supernode.start_client_internal as loop

    monkeypatch.setattr(loop, "time", loop.time)
    monkeypatch.setattr(loop, "_push_messages", loop._push_messages)
    state = keep_node_state(monkeypatch)
    stored = []

    def flowers(name):  # Flower's store, stand-in: the wake must come after it, or the loop looks too early
        def store(self, *args, **kwargs):
            assert not loop.time.stored.is_set(), f"{name}: the wait ended before the state stored"
            stored.append((name, args))
            return "kept"
        return store

    for name in supernode.STATE_STORES:
        monkeypatch.setattr(state, name, flowers(name))
    monkeypatch.setattr(supernode, "LOCAL_WAIT_S", 5.0)
    supernode.cap_idle_poll(0.5)
    supernode.cap_idle_poll(0.5)
    clock = loop.time
    assert getattr(state, "store_object").__wrapped__.__name__ == "store"  # Flower's (here a stand-in), once
    start = time.monotonic()
    clock.sleep(0.3)  # nothing stored: the whole wait (at most LOCAL_WAIT_S)
    assert time.monotonic() - start >= 0.29
    for name in supernode.STATE_STORES:
        timer = threading.Timer(0.05, lambda n=name: getattr(state, n)(None, 1, 2))
        timer.start()
        start = time.monotonic()
        clock.sleep(0.5)
        timer.join()
        assert time.monotonic() - start < 0.4, name
    assert [n for n, _ in stored] == list(supernode.STATE_STORES) and stored[0][1] == (1, 2)
    assert not clock.stored.is_set()  # cleared after each wait


def test_a_boards_requirements_are_pyprojects_less_the_simulation_and_the_dashboard():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    ours = {re.split(r"[\[<>=]", d, 1)[0]: d for d in deps}
    lines = [line.split("#")[0].strip() for line in (REPO / "deploy/edge/requirements.txt").read_text().splitlines()]
    board = [line for line in lines if line]
    names = {re.split(r"[\[<>=;]", line, 1)[0].strip() for line in board}
    assert names == set(ours) - {"ray", "dash"}
    for line in board:
        name = re.split(r"[\[<>=;]", line, 1)[0].strip()
        spec = line.split(";")[0].strip()
        if name == "torch":
            assert line in ('torch==2.13.0; platform_machine != "aarch64"', 'torch==2.9.1; platform_machine == "aarch64"')
        elif name == "flwr":
            assert spec == ours["flwr"].replace("[simulation]", "")
        else:
            assert spec == ours[name], name


def test_the_systemd_unit_starts_the_supervisor_with_arguments_it_takes(tmp_path):
    """The unit's ExecStart is ``python -m fedtext.node.service ... -- flower-supernode ...`` with
    options the supervisor's parser takes, and systemd finds nothing wrong with the unit (where
    ``systemd-analyze`` is installed: the interpreter path made this machine's)."""
    import shlex
    import shutil
    import subprocess
    import sys

    from fedtext.node import service as node_service
    unit = (REPO / "deploy/systemd/fedtext-supernode@.service").read_text()
    exec_start = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit.replace("\\\n", " "), re.M).group(1)
    argv = shlex.split(exec_start.replace("${THREADS}", "2"))
    assert argv[:3] == ["/opt/fedtext/venv/bin/python", "-m", "fedtext.node.service"]
    cut = argv.index("--")
    assert argv[cut + 1] == "flower-supernode" and "--node-config" in argv
    parsed = node_service.argparse.ArgumentParser(add_help=False)
    parsed.add_argument("--threads", type=int)
    parsed.add_argument("--folder")
    opts = parsed.parse_args(argv[3:cut])
    assert opts.threads == 2 and opts.folder.startswith("/run/fedtext-%i")
    assert "RuntimeDirectoryMode=0700" in unit and "MemoryMax=" in unit and "KillMode=mixed" in unit
    if shutil.which("systemd-analyze"):
        here = tmp_path / "fedtext-supernode@.service"
        here.write_text(unit.replace("/opt/fedtext/venv/bin/python", sys.executable))
        done = subprocess.run(["systemd-analyze", "verify", f"{here}"], capture_output=True, text=True, check=False)
        problems = [line for line in (done.stdout + done.stderr).splitlines()
                    if "fedtext-supernode" in line and "is not executable" not in line]
        assert problems == [], problems
