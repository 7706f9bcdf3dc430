"""tools/cpu_by_role.py: a process's role by its command line, and the CPU a role used in a round's window."""

from __future__ import annotations

import json
import sys

from ..conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import cpu_by_role  # noqa: E402


def test_each_process_of_a_deployment_has_its_role():
    py = "/venv/bin/python -m"
    assert cpu_by_role.role(f"{py} fedtext.node.service --threads 1 -- /venv/bin/flower-supernode --insecure") \
        == "supervisor"
    assert cpu_by_role.role(f"{py} fedtext.node.service --serve /run/x/node.sock --threads 1") == "node service"
    assert cpu_by_role.role(f"{py} fedtext.node.supernode --idle-poll-s 0.5 --insecure") == "supernode"
    assert cpu_by_role.role("/venv/bin/flower-supernode --insecure --superlink 127.0.0.1:1") == "supernode"
    assert cpu_by_role.role(f"{py} fedtext.node.warm_exec superexec --warm 2 --wake-fd 5 -- --insecure") \
        == "superexec"
    assert cpu_by_role.role(f"{py} fedtext.node.warm_exec worker --token-stdin") == "clientapp"
    assert cpu_by_role.role("/venv/bin/python -B -c from multiprocessing.forkserver import main; main(5)") \
        == "fork server, forked clientapps"
    assert cpu_by_role.role("/venv/bin/flower-superlink --insecure") == "superlink"
    assert cpu_by_role.role("ray::ClientAppActor.run") == "ray actor"
    assert cpu_by_role.role("bash") == "other"


def test_a_rounds_cpu_is_each_processs_growth_in_its_window(tmp_path):
    link, node = "/venv/bin/flower-superlink", "/venv/bin/python -m fedtext.node.service --serve /s"
    snaps = [(100.0, {1: (5.0, link), 2: (1.0, node)}),
             (110.0, {1: (6.5, link), 2: (9.0, node), 3: (0.4, "flwr-clientapp --token-stdin")}),
             (120.0, {1: (7.0, link), 3: (0.5, "flwr-clientapp --token-stdin"), 2: (2.0, "bash")})]
    # the window's ends are the nearest samples; a process first seen in it counts from 0
    assert cpu_by_role.cpu_between(snaps, 99.0, 111.0) == {"node service": 8.0, "superlink": 1.5, "clientapp": 0.4}
    # pid 2 is another process by 120 (its command line changed): all of its CPU is new
    assert cpu_by_role.cpu_between(snaps, 110.0, 120.0) == {"other": 2.0, "superlink": 0.5,
                                                             "clientapp": 0.1}
    # a snapshot that missed a process (its /proc files unreadable that instant) is looked past, not read as 0
    gap = [(90.0, {1: (4.0, link)}), (100.0, {}), (110.0, {1: (6.0, link)})]
    assert cpu_by_role.cpu_between(gap, 100.0, 110.0) == {"superlink": 2.0}
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"started_epoch": 100.0}))
    (run / "rounds.jsonl").write_text("".join(json.dumps({"round": i, "wall_time_s": w}) + "\n"
                                              for i, w in ((0, 10.0), (1, 20.0))))
    rounds = cpu_by_role.rounds_cpu(snaps, run)
    assert [(r["round"], r["seconds"]) for r in rounds] == [(0, 10.0), (1, 10.0)]
    assert rounds[0]["cores"] == round((8.0 + 1.5 + 0.4) / 10, 2) and rounds[1]["cpu_s"]["superlink"] == 0.5
