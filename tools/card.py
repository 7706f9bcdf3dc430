"""The design card's command at base scale (issue 66): does ``fedbpt`` learn on the demo with
all-mpnet-base-v2, and in how many rounds, against all-MiniLM-L6-v2?

    python tools/card.py          # about 15 minutes on 2 cores

Runs the card's command as a user types it, ``flwr run . --stream --run-config "method='fedbpt'
model='<model>'"`` (Flower's default local simulation: 2 SuperNodes, the embedded demo data, 3
rounds), for each backbone, and once more on all-mpnet-base-v2 for :data:`LONG` rounds; each in
a new Flower home on free ports of its own, its local SuperLink stopped by PID afterwards
(tools/timings.py's way). Writes ``simulations/results/card/card.json``: the machine, the date,
each run's command, seconds and round lines; docs/backbones.md's ``card`` block is rendered
from it (:func:`render`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python tools/card.py` from anywhere
    sys.path.insert(0, str(ROOT))
OUT = ROOT / "simulations" / "results" / "card" / "card.json"
MODELS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")
LONG = 8  # rounds of the longer all-mpnet-base-v2 run: where does it level off?
ROUND = re.compile(r"fedtext round (\d+)/\d+ \| acc ([\d.]+)")


def command(model: str, rounds: int = 0) -> str:
    """The card's command on ``model`` (``rounds``: num-server-rounds, 0 = the default 3)."""
    extra = f" num-server-rounds={rounds}" if rounds else ""
    return f"""flwr run . --stream --run-config "method='fedbpt' model='{model}'{extra}\""""


def measure() -> dict[str, Any]:
    """Each run of the module doc; the record written to :data:`OUT`."""
    from simulations.deployment import free_ports
    from tools.timings import TOKEN_VAR, _run, _stop_token, machine

    work = Path(tempfile.mkdtemp(prefix="fedtext-card-"))
    token = uuid.uuid4().hex
    runs = []
    started, load = dt.datetime.now(dt.timezone.utc), os.getloadavg()
    try:
        for model, rounds in [*((m, 0) for m in MODELS), (MODELS[1], LONG)]:
            http_port, control_port = free_ports(2)
            home = work / f"flwr-home-{len(runs)}"
            env = {**os.environ, TOKEN_VAR: token, "FLWR_HOME": str(home), "PYTHONUNBUFFERED": "1",
                   "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "HF_HUB_OFFLINE": "1",
                   "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port),
                   "FLWR_LOCAL_CONTROL_API_PORT": str(control_port)}
            cmd = command(model, rounds)
            seconds, out, rc = _run(f"{cmd} --run-config \"output-dir='{work / 'runs'}'\"", ROOT, env,
                                    work / "card.log", 3600)
            _stop_token(token)
            if rc:
                raise SystemExit(f"{cmd} failed (exit {rc}): see {work / 'card.log'}")
            lines = [m.group(0) for m in re.finditer(r"fedtext round \d+/\d+ \|.*", out)]
            runs.append({"model": model, "command": cmd, "seconds": round(seconds, 1), "lines": lines,
                         "accuracy": [float(a) for _, a in ROUND.findall(out)]})
            print(f"{cmd}: {seconds:.0f} s, accuracy {runs[-1]['accuracy']}", flush=True)
    finally:
        _stop_token(token)
    record = {"machine": machine(), "date": started.date().isoformat(), "load_before": [round(x, 2) for x in load],
              "load_after": [round(x, 2) for x in os.getloadavg()], "runs": runs}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    return record


def render() -> str:
    """docs/backbones.md's ``card`` block: per run its command, seconds and accuracy by round."""
    if not OUT.is_file():
        return "Not measured yet: `python tools/card.py`.\n"
    rec = json.loads(OUT.read_text())
    m = rec["machine"]
    out = [f"Measured {rec['date']} on {m.get('cores', '?')} cores ({m.get('cpu', 'CPU')}; 1-minute load "
           f"{rec['load_before'][0]:.1f} before, {rec['load_after'][0]:.1f} after: above 0 the seconds include other "
           "jobs' share of the cores), `python tools/card.py`:",
           "", "| command | global accuracy, round 0 → last | seconds |", "| --- | --- | --- |"]
    for run in rec["runs"]:
        acc = " → ".join(f"{a:.3f}" for a in run["accuracy"])
        out.append(f"| `{run['command']}` | {acc} | {run['seconds']:.0f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    measure()
