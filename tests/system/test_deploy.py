"""A real deployment on this machine, through the scripts docs/deployment.md shows.

The recipe (tests/system/recipe.py, started once for the package by conftest.py): a
SuperLink on 127.0.0.1 only with TLS and SuperNode authentication, its Fleet API published
by nginx (``deploy/fleet_proxy.py``) on 127.0.0.2, which stands for the public interface;
two authenticated SuperNodes and one unregistered one connect there.

- a stranger holding only ``ca.crt`` tries, from the public address, to register a node
  key, unregister a legitimate SuperNode, list nodes and runs and ``flwr run`` an app whose
  ServerApp writes a file: each is refused, nothing changes, and the same app run by the
  operator does write its file;
- ``flwr run . <connection>`` of one gradient-free method (bbt-fed) and one
  back-propagation method (fedprompt), 2 rounds each, through nginx; their run records are
  checked, and no request they made came near nginx's body cap.

Floods, slow requests and oversized bodies: tests/system/test_adversarial.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from tests.system.recipe import PUBLIC, flwr, flwr_home, flwr_json, raw_status, run_method

pytestmark = pytest.mark.slow


STRANGER_APP = {
    "pyproject.toml": """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "stranger"
version = "1.0.0"
description = "a ServerApp that writes a file on the SuperLink host"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "stranger"

[tool.flwr.app.components]
serverapp = "stranger_app:app"
clientapp = "stranger_app:client"

[tool.flwr.app.config]
marker = "marker"
""",
    "stranger_app.py": """from pathlib import Path

from flwr.client import ClientApp
from flwr.common import Context
from flwr.server import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    Path(str(context.run_config["marker"])).write_text("written by a ServerApp on the SuperLink host\\n")


client = ClientApp()
""",
}


REFUSED = ("403 Forbidden", "Connection to the SuperLink is unavailable")


def test_a_stranger_holding_only_ca_crt_cannot_register_unregister_list_or_run(deployment):
    d = deployment
    app = d.tmp / "stranger-app"
    app.mkdir()
    for name, text in STRANGER_APP.items():
        (app / name).write_text(text)
    stranger_dir = d.tmp / "stranger"
    stranger_dir.mkdir()
    shutil.copy(d.certs / "ca.crt", stranger_dir / "ca.crt")  # all the stranger has, besides their own key
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f", str(stranger_dir / "own-key")],
                   check=True, timeout=60)
    runs_before = flwr_json(d.env, "ls", "lab")["runs"]
    victim = d.node_ids[0]
    stranger_markers = []
    # from the public address: nginx, where SuperNodes connect, and the SuperLink's own port there
    for port in (d.fleet_port, d.port):
        env = {**d.env, "FLWR_HOME": str(flwr_home(stranger_dir / f"home-{port}", "x", f"{PUBLIC}:{port}",
                                                    stranger_dir / "ca.crt"))}
        marker = d.tmp / f"stranger-was-here-{port}"
        attempts = {
            "register": flwr(env, "supernode", "register", str(stranger_dir / "own-key.pub"), "x"),
            "unregister": flwr(env, "supernode", "unregister", victim, "x"),
            "list nodes": flwr(env, "supernode", "ls", "x", "--format", "json"),
            "list runs": flwr(env, "ls", "x", "--format", "json"),
            "run": flwr(env, "run", str(app), "x", "--run-config", f"marker='{marker}'", timeout=180),
        }
        for action, result in attempts.items():
            out = result.stdout + result.stderr
            assert any(r in out for r in REFUSED), f"{action} via {PUBLIC}:{port} was not refused:\n{out[-2000:]}"
            assert "registered successfully" not in out and "unregistered successfully" not in out, out
            assert "Successfully started run" not in out and '"success": true' not in out, out
            if action.startswith("list"):
                assert victim not in result.stdout, f"{action} via {PUBLIC}:{port} listed:\n{out[-2000:]}"
        stranger_markers.append(marker)
    # Nothing changed: the legitimate SuperNodes are registered and online, no stranger's key
    # joined, the run list is as before.
    listed = flwr_json(d.env, "supernode", "ls", "lab")["nodes"]
    assert sorted(n["node-id"] for n in listed) == d.node_ids, listed
    assert all(n["status"] == "online" for n in listed), listed
    assert flwr_json(d.env, "ls", "lab")["runs"] == runs_before
    # Nothing but the Fleet routes passes nginx (no Runtime API, no docs, no path tricks).
    probes = {("POST", "/v1/runtime/create-task"): 403, ("POST", "/v1/control/list-runs"): 403,
              ("GET", "/docs"): 403, ("GET", "/openapi.json"): 403, ("GET", "/health"): 403,
              ("POST", "/v1/fleet/../control/list-runs"): 403, ("POST", "/v1/fleet/%2e%2e/control/list-runs"): 403,
              ("POST", "/v1/fleet//get-run"): 403, ("POST", "/v1/fleet/get-run?x=1"): 403,
              ("GET", "/v1/fleet/get-run"): 403, ("POST", "/V1/FLEET/get-run"): 403,
              # a Fleet route is forwarded, and the SuperLink's node authentication refuses an unsigned call
              ("POST", "/v1/fleet/get-run"): 401}
    for (method, target), status in probes.items():
        assert raw_status(PUBLIC, d.fleet_port, stranger_dir / "ca.crt", method, target) == status, (method, target)
    # The operator's path (loopback here; an SSH tunnel from elsewhere) works, and the same app
    # run there does write its file: the refusals above are what kept it out.
    marker = d.tmp / "operator-ran-it"
    run = flwr(d.env, "run", str(app), "lab", "--stream", "--run-config", f"marker='{marker}'", timeout=180)
    assert "Successfully started run" in run.stdout, run.stdout + run.stderr
    deadline = time.time() + 60
    while not marker.exists():
        assert time.time() < deadline, "the operator's run did not write its file"
        time.sleep(1)
    assert len(flwr_json(d.env, "ls", "lab")["runs"]) == len(runs_before) + 1
    # by now a stranger's run, had one started, would have written its file too
    assert not any(m.exists() for m in stranger_markers), stranger_markers


def test_tls_and_node_auth_deployment_runs_two_methods(deployment):
    d = deployment
    access = d.proxy_dir / "access.log"
    seen = len(access.read_text().splitlines())  # earlier tests' strangers and attackers
    # fedprompt's round runs through SecAgg+ (issue 59: the recipe, nginx, TLS and node auth, carries the
    # protocol's four stages; with two clients each holds the other's shares: secagg-shares=1, all of the round)
    for method, extra in (("bbt-fed", "bbt-fed.popsize=4 bbt-fed.local-steps=2"),
                          ("fedprompt", "fedprompt.local-steps=2 secagg=true secagg-shares=1")):
        # one round each (a SuperNode starts a process per message: the lost-node and adversarial
        # tests run longer federations through SuperNodes)
        summary, rounds = run_method(d, method, extra, rounds=1)
        assert summary["status"] == "finished", summary
        assert [r["round"] for r in rounds] == [0, 1]
        # the two registered SuperNodes trained; the unregistered one never joined
        assert rounds[1]["num_clients"] == 2 and rounds[1]["dropped"] == [] and rounds[1]["bytes_up"] > 0, rounds[1]
        assert sorted(rounds[1]["client_accuracy"]) == ["0", "1"] and rounds[1]["global_accuracy"] is not None
        if "secagg=true" in extra:  # the masked vectors replaced the plain uploads, counted per stage
            assert list(rounds[1]["secagg_bytes"]) == ["setup", "share_keys", "collect_masked_vectors", "unmask"]
            assert rounds[1]["bytes_up"] == sum(s["up"] for s in rounds[1]["secagg_bytes"].values())
    # every message of both runs (SecAgg+'s four stages included) went to a ClientApp process started ahead of
    # need (fedtext.node.warm_exec, deploy/supernode.sh's default); none needed Flower's cold start
    served = (d.tmp / "supernode-0.log").read_text()
    assert served.count("to warm ClientApp process") >= 6 and "to a cold" not in served, served[-3000:]
    refused = (d.tmp / "supernode-2.log").read_text()
    assert "Connection successful" not in refused, refused[-2000:]
    # it does not keep retrying: Flower reports exit code 305 and the SuperNode stops (docs/deployment.md says so)
    assert "Exit Code: 305" in refused, refused[-2000:]
    d.nodes[2].wait(timeout=120)  # ended (raises TimeoutExpired if it were still trying)
    # nginx's body cap fits what the methods really send: no legitimate request was refused,
    # and the largest one (a fedprompt push-object of its 12,288-byte prompt) is well under it
    ours = access.read_text().splitlines()[seen:]
    assert ours and not [line for line in ours if re.search(r'" (413|429|403) ', line)], ours[-20:]
    largest = max(int(m.group(1)) for line in ours if (m := re.search(r"req=(\d+)", line)))
    print(f"largest legitimate request through nginx: {largest:,} bytes; body cap {d.body_cap:,} bytes")
    assert largest < d.body_cap, (largest, d.body_cap)
