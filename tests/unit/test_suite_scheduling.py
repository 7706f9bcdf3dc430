"""README's test command runs two xdist workers with tests/conftest.py's ``RunsTogether``: the
integration and system tests in two units, those on Ray (one Ray head at a time) and the rest, each unit
on one worker, one test after another, the two at the same time; the unit and docs tests fill in. Driven
here through xdist's own scheduler with two stand-in workers, so that an xdist upgrade that moves the seam
(``LoadScopeScheduling._split_scope``) or its order fails here and not as a flaky run in CI."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import RAY_GROUP, RAY_MODULES, REPO, RUNS_GROUP, adjacent, work_unit


def test_the_runs_share_two_units_of_work_and_every_other_test_is_its_own():
    assert work_unit("tests/integration/test_a.py::test_x[1-2]") == RUNS_GROUP
    assert work_unit("tests/system/test_b.py::TestC::test_y") == RUNS_GROUP
    assert work_unit("tests/integration/test_flower_engine.py::test_x") == RAY_GROUP
    assert work_unit("tests/system/test_ray_head.py::test_y[a]") == RAY_GROUP
    assert work_unit("tests/system/test_flower_engine.py::test_x") == RUNS_GROUP  # by the whole path, not the name
    for nodeid in ("tests/unit/test_a.py::test_x", "tests/docs/test_d.py::test_z[integration]",
                   "tests/unit/test_system_like.py::test_integration", "tests/unit/integration/x.py::t"):
        assert work_unit(nodeid) == nodeid  # by the tier's folder only, not by a word in the name


class _Worker:
    """What xdist's scheduler calls on a worker: the indexes it is sent, and its shutdown."""

    def __init__(self, name: str) -> None:
        self.gateway, self.shutting_down, self.sent = SimpleNamespace(id=name), False, []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


RAY = RAY_MODULES[0]
COLLECTION = ["tests/unit/test_a.py::test_1", "tests/system/test_s.py::test_2", "tests/unit/test_a.py::test_3",
              "tests/integration/test_i.py::test_4", "tests/docs/test_d.py::test_5", "tests/system/test_s.py::test_6",
              f"{RAY}::test_9", "tests/unit/test_b.py::test_7", "tests/integration/test_j.py::test_8",
              f"{RAY}::test_10"]


def _scheduler(dist: str = "load"):
    """What README's ``-n 2`` gets from tests/conftest.py's hook, with two stand-in workers registered."""
    pytest.importorskip("xdist")
    from tests import conftest

    config = SimpleNamespace(getvalue=lambda name: {"tx": ["2*popen"], "dist": dist}[name],
                             option=SimpleNamespace(loadscopereorder=True))
    scheduler = conftest.pytest_xdist_make_scheduler(config, None)
    if scheduler is None:
        return None, []
    assert isinstance(scheduler, conftest.RunsTogether)
    workers = [_Worker("gw0"), _Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, COLLECTION)
    scheduler.schedule()
    return scheduler, workers


def _complete(scheduler, workers) -> None:
    """Each worker finishes what it was sent (and so asks for more), until nothing is left to send."""
    done: set[int] = set()
    for _ in range(len(COLLECTION) + 2):  # a scheduler that never empties its queue fails, not hangs
        if not scheduler.workqueue:
            break
        for worker in workers:
            for index in [i for i in worker.sent if i not in done]:
                done.add(index)
                scheduler.mark_test_complete(worker, index)
    assert not scheduler.workqueue


def test_xdists_scheduler_starts_the_two_groups_of_runs_at_once_one_on_each_worker_in_collection_order():
    scheduler, workers = _scheduler()
    _complete(scheduler, workers)
    runs = [i for i, nodeid in enumerate(COLLECTION) if work_unit(nodeid) == RUNS_GROUP]
    ray = [i for i, nodeid in enumerate(COLLECTION) if work_unit(nodeid) == RAY_GROUP]
    (runner,) = [w for w in workers if set(runs) & set(w.sent)]
    (other,) = [w for w in workers if w is not runner]
    # each group whole on one worker, first (the largest units first), in the collection's (random) order
    assert runner.sent[:len(runs)] == runs and other.sent[:len(ray)] == ray
    assert not set(runs) & set(other.sent) and not set(ray) & set(runner.sent)
    assert sorted(runner.sent + other.sent) == list(range(len(COLLECTION)))  # every test sent once


def test_every_module_named_to_run_on_ray_exists():
    """A renamed module would leave ``RAY_MODULES`` and quietly join the other group, beside the Ray runs."""
    assert len(set(RAY_MODULES)) == len(RAY_MODULES)
    for module in RAY_MODULES:
        assert (REPO / module).is_file(), module
        assert module.split("/")[1] in ("integration", "system"), module


def test_a_crashed_worker_gives_back_only_the_tests_it_had_not_run():
    scheduler, workers = _scheduler()
    other = next(w for w in workers if 1 not in w.sent)  # not the worker of the larger group: the Ray group's
    finished = other.sent[0]
    scheduler.mark_test_complete(other, finished)
    scheduler.remove_node(other)  # it crashed: what it had not finished goes back to the queue
    assert scheduler.workqueue
    pending = {nodeid for unit in scheduler.workqueue.values() for nodeid, done in unit.items() if not done}
    assert COLLECTION[finished] not in pending and set(other.sent) - {finished} <= {
        COLLECTION.index(nodeid) for nodeid in pending}
    assert all(not all(unit.values()) for unit in scheduler.workqueue.values())  # no unit with nothing to run


def test_another_dist_a_user_names_is_xdists():
    assert _scheduler("loadfile")[0] is None and _scheduler("each")[0] is None


def test_the_tests_of_modules_sharing_a_package_fixture_move_next_to_the_first_of_them():
    items = [SimpleNamespace(module=m) for m in "a b c b d c e".split()]
    assert "".join(i.module for i in adjacent(items, {"b", "c"})) == "abcbcde"  # their own order kept
    assert adjacent(items, {"z"}) == items
