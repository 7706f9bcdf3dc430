"""README's first command, ``flwr run . --stream``: Flower's own local SuperLink and
simulation, as a user starts it (the methods through ``run_simulation`` are in
tests/integration/test_flower_engine.py; every method in process: tests/unit/test_methods_rounds.py)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedtext.common.quiet import FLOWER_STARTUP, strip_flower_prefix
from simulations.deployment import free_ports

from ..conftest import REPO, _env, _only_run, processes_with_token
from .fab import flwr_build

#: what a default `flwr run` of the demo may print once fedtext's code is loaded (issue 47 item 4):
#: fedtext's round line, fedtext's other lines (run start, progress of long steps), nothing else
FEDTEXT_LINES = (
    r"fedtext round \d+/\d+ \| acc [\d.]+ loss [\d.]+( \| clients mean [\d.]+)? \| up [\d.]+ KB down [\d.]+ KB"
    r"( \| ε ([\d.]+|∞) \(δ [\de.+-]+, (central|local)\))? \| round [\d.]+ s, total [\d.]+ s",
    r"fedtext: .*",
)


def unexpected_lines(out: str) -> list[str]:
    """Lines of ``flwr run``'s output that are neither fedtext's (:data:`FEDTEXT_LINES`) nor
    Flower's start-up before fedtext's code loads (``fedtext.common.quiet.FLOWER_STARTUP``); blank
    lines (the CLI's, around its start-up) are allowed."""
    allowed = [*FEDTEXT_LINES, *FLOWER_STARTUP]
    return [line for line in out.splitlines()
            if (text := strip_flower_prefix(line)) and not any(re.fullmatch(p, text) for p in allowed)]


def _flwr_run(tmp_path: Path, env: dict[str, str], run_config: str, rounds: int | None = 1) -> tuple[str, int]:
    """``flwr run . --stream`` of ``rounds`` demo rounds (``None``: the default number) in a
    fresh Flower home on free ports; its output and the local SuperLink's HTTP port."""
    # Flower's local SuperLink listens on fixed ports (39091 HTTP, 39093 Control) whatever
    # FLWR_HOME is; Flower reads these two variables for them: free ports of our own, so a
    # SuperLink elsewhere on the machine can neither fail this test nor receive its run.
    http_port, control_port = free_ports(2)
    env = {**_env(), **env, "FLWR_HOME": str(tmp_path / "flwr-home"),
           "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port), "FLWR_LOCAL_CONTROL_API_PORT": str(control_port)}
    cmd = [str(Path(sys.executable).parent / "flwr"), "run", ".", "--stream",
           "--run-config", ("" if rounds is None else f"num-server-rounds={rounds} ")
           + f"output-dir='{tmp_path / 'runs'}' {run_config}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out, http_port


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr", path=str(Path(sys.executable).parent)) is None, reason="flwr CLI not installed")
def test_flwr_run_on_demo_defaults_completes(tmp_path, own_processes):
    """README's first command: ``flwr run . --stream`` in a fresh Flower home, which gets
    Flower's default local simulation of 2 clients (README says so), with every default
    (the method, its rounds). The demo must show its method learning: the last round's global
    accuracy clearly above round 0's (issue 55: README's demo once ended below its start).
    The local SuperLink ``flwr run`` leaves running is stopped afterwards by the
    ``own_processes`` fixture, by PID: only the one this test started."""
    env, token = own_processes
    out, http_port = _flwr_run(tmp_path, env, "", rounds=None)
    run = _only_run(tmp_path / "runs")
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    total = json.loads((run / "config.json").read_text())["config"]["num-server-rounds"]
    assert f"fedtext round {total}/{total}" in out and len(rounds) == total + 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["final_accuracy"] is not None
    first, last = rounds[0], rounds[-1]
    assert last["global_accuracy"] > first["global_accuracy"] + 0.1, [r["global_accuracy"] for r in rounds]
    assert last["num_clients"] == 2 and len(last["client_accuracy"]) == 2  # README: "the 2 simulated clients"
    # Flower ran an installed copy of the app, packed from this checkout (no git there): the
    # record names the code by that bundle, the same bytes `flwr build` makes of the checkout
    prov = json.loads((run / "config.json").read_text())["provenance"]
    fab, _ = flwr_build(tmp_path / "build")
    assert prov["code_origin"] == "fab" and prov["git_commit"] is None, prov
    assert prov["fab_hash"] == hashlib.sha256(fab.read_bytes()).hexdigest() and prov["fab_id"] == "fedtext/fedtext"
    assert prov["fab_version"] == prov["versions"]["fedtext"] == tomllib.loads(
        (REPO / "pyproject.toml").read_text())["project"]["version"]
    mine = processes_with_token(token)
    assert mine, "expected the detached local SuperLink of flwr run to be running"
    cmdlines = []
    for pid in mine:
        try:
            cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))
        except OSError:  # a short-lived child that ended meanwhile
            pass
    assert any(b"--port" in c and str(http_port).encode() in c for c in cmdlines), "SuperLink not on our port"
    # issue 47 item 4: fedtext's lines only, once fedtext's code runs (docs/flower.md, "Output")
    assert unexpected_lines(out) == [], out[-3000:]
    for gone in ("FutureWarning", "[SUMMARY]", "Manually terminating", "[ROUND 1]", "configure_fit"):
        assert gone not in out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("flwr", path=str(Path(sys.executable).parent)) is None, reason="flwr CLI not installed")
def test_flwr_run_verbose_prints_flowers_own_lines_again(tmp_path, own_processes):
    """``verbose=true``: Flower's round and summary lines come back, with its example-weighted
    client accuracy history (fedtext's own round line prints no accuracy of random weights).
    The same run has central DP on (issue 59: "a flwr run with DP prints ε per round and records
    it"; one Flower run for both): its round line ends with the ε spent, its record holds it."""
    env, _ = own_processes
    out, _ = _flwr_run(tmp_path, env, "verbose=true model='tiny-bert' weights='random' dp='central' dp-noise=2.0")
    assert re.search(r"fedtext round 1/1 \| acc - \(random weights\) loss [\d.]+ \| up ", out)
    from fedtext.trust.privacy import epsilon

    eps = epsilon(1.0, 2.0, 1, 1e-5)  # Flower's default local simulation: 2 clients, both sampled (q = 1)
    assert f"| ε {eps:.2f} (δ 1e-05, central) |" in out, out[-2000:]
    last = json.loads((_only_run(tmp_path / "runs") / "rounds.jsonl").read_text().splitlines()[-1])
    assert last["privacy"]["epsilon"] == pytest.approx(eps) and last["privacy"]["noise_std"] == pytest.approx(1.0)
    for back in ("[ROUND 1]", "configure_fit: strategy sampled", "[SUMMARY]", "History (metrics, distributed, evaluate)"):
        assert back in out, back
    assert unexpected_lines(out)  # the lines the default run hides
