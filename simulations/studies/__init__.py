"""Studies: an experiment file plus the few lines that make its table.

A *study* is a question the project answers with runs (which aggregator survives a lying
client, what DP costs, ...). Its runs are an experiment file under ``simulations/experiments/``,
planned, run and reused by the one runner, :mod:`simulations.compare`, exactly as an accuracy
comparison is; what is the study's own is only how its table reads the finished runs. The
experiment file names its study::

    study = "robust"                 # simulations/studies/robust.py makes the table
    engine = "inprocess"             # optional: the server's round loop in this process, no Ray

and ``python -m simulations.compare simulations/experiments/<file>.toml`` runs what has not
finished, then writes ``<out>/table.md`` from the study's table instead of the comparison table
(``--table-only``: the table alone, from the records).

A study module defines

* ``EXPERIMENT``: the experiment file whose runs it reads (the one that names it:
  ``tests/unit/test_studies.py`` checks the two agree);
* ``table(out: Path = OUT) -> str``: the markdown, from the finished runs under ``out`` (read with
  :func:`simulations.tables.finished_runs`: finished, the newest per seed, as every table counts
  them); the docs' generated blocks call it with no argument (``tools/generated.py``);
* optionally ``finish(out: Path) -> None``: what the table needs computed from the runs once they
  ran (the robust study's drift, from the checkpoints), called by the runner after new runs.

A new study is an experiment file and a module with those names, not a new script.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

# The deployment and memory studies' harnesses: harness -> the experiment's profile that runs it
# (``demo``: the file itself; ``t1``: ``--profile t1``, FedDPG's Table 1 setting).
HARNESSES: dict[str, str | None] = {"demo": None, "t1": "t1"}


def harness_run(out: Path) -> tuple[str, dict[str, Any]]:
    """(harness, the experiment as the runner ran it: its profile applied) of the runner's folder ``out``,
    from its ``experiment.json``; a profile that is no harness is its own name."""
    from simulations import compare

    marker = json.loads((out / "experiment.json").read_text())
    harness = {profile: h for h, profile in HARNESSES.items()}.get(marker["profile"], marker["profile"])
    return harness, compare.with_profile(compare.load_experiment(Path(marker["file"])), marker["profile"])


def measured_here() -> dict[str, str]:
    """A study record's header: this machine, today, this checkout's commit (as each run record's
    provenance names it)."""
    from fedtext.records import probes

    return {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
            "commit": probes.short_commit() or ""}
