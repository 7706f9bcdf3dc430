"""Federation size against server cost: the same run with 10, 100, 1,000 and 10,000 clients; a study
(:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/scale.toml                         # ~25 min
    python -m simulations.compare simulations/experiments/scale.toml --methods n10 n1000      # some sizes
    python -m simulations.compare simulations/experiments/scale.toml --table-only            # from the records

Its runs are ``simulations/experiments/scale.toml``: bbt-fed on ``../shared/data/sst2``, 10 clients per
round, 2 rounds, one label per federation size (``n10`` ... ``n10000``: the label's ``num-supernodes``)
and the same with ``client-ids = "lazy"`` at the smallest and largest (``lazy-n10``, ``lazy-n10000``).
Each runs through Flower's simulation engine in a fresh process (the runner's default engine): what
is measured is that engine's start-up and its first rounds, which the in-process engine has not.

The table (``table.md`` beside the runs), one per ``client-ids`` value, a row per federation size:
seconds from launch to the end of round 0 (process and Ray start, node registration, server model
load and evaluation: the round's ``wall_time_s``, counted from the run's clock start, plus the
seconds from the runner's launch to that start, ``config.json``'s ``started_epoch`` less
``launches.jsonl``'s ``launched_epoch``), round 1 (every client is asked once who it is, the sampled
clients load), round 2 (steady state), the Flower/Ray overhead of round 2 (round time minus the time
some client or the server evaluation was computing), the server process's resident memory after the
last round, and the process's wall time (``launches.jsonl``'s ``wall_s``). Ratios are to the smallest
federation of the table. A run without its launch line (records made elsewhere) shows ``-`` for the
two launch-based columns. Above each table: the dates and machines of its runs, from their records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedtext.common.config import CLIENT_IDS
from simulations.compare import default_out, read_launches
from simulations.tables import finished_runs

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "simulations" / "experiments" / "scale.toml"
OUT = default_out(EXPERIMENT)  # simulations/results/scale
# column key -> (header, unit) of a row (:func:`measure`), in the table's order after ``clients``
COLUMNS = {"to_round0_s": ("to end of round 0", "s"), "round1_s": ("round 1", "s"), "round2_s": ("round 2", "s"),
           "overhead2_s": ("overhead round 2", "s"), "server_rss_mb": ("server RSS", "MB"), "wall_s": ("wall", "s")}


def measure(run: dict[str, Any], launch: dict[str, Any] | None) -> dict[str, Any]:
    """One row: a finished run's (:func:`fedtext.records.load_run` dict) timings, with its launch line's
    (``None``: none, the two columns that need it are ``None``)."""
    meta = run["config"]
    rounds = {r["round"]: r for r in run["rounds"]}
    started = meta.get("started_epoch")
    startup = round(float(started) - launch["launched_epoch"], 1) if launch and started else None
    zero, two = rounds.get(0, {}).get("wall_time_s"), rounds.get(2, {})
    return {
        "clients": (meta.get("provenance") or {}).get("num_supernodes") or (launch or {}).get("num-supernodes"),
        "client_ids": meta["config"].get("client-ids", CLIENT_IDS[0]),
        "to_round0_s": zero + startup if zero is not None and startup is not None else None,
        "round1_s": rounds.get(1, {}).get("round_time_s"),
        "round2_s": two.get("round_time_s"),
        "overhead2_s": two.get("overhead_s"),
        "server_rss_mb": rounds[max(rounds)].get("server_rss_mb"),
        "wall_s": round(launch["wall_s"], 1) if launch else None,
        "date": str(meta.get("started", ""))[:10],
        "machine": f"{meta.get('machine', {}).get('host')}, {meta.get('machine', {}).get('cpu_count')} CPUs",
    }


def size_table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of ``rows`` (:func:`measure`), smallest federation first; each other row's
    cells carry their ratio to the smallest's (where both are known and the smallest's is not 0)."""
    rows = sorted(rows, key=lambda r: r["clients"] or 0)
    base = rows[0]
    lines = ["| clients | " + " | ".join(name for name, _ in COLUMNS.values()) + " |",
             "| --- |" + " --- |" * len(COLUMNS)]
    for r in rows:
        def cell(key: str, unit: str) -> str:
            if r[key] is None:
                return "-"
            ratio = f" ({r[key] / base[key]:.2f}x)" if r is not base and base[key] else ""
            return f"{r[key]:,.1f} {unit}{ratio}"

        clients = f"{r['clients']:,}" if r["clients"] is not None else "?"  # neither the record nor a launch says
        lines.append(f"| {clients} | " + " | ".join(cell(k, unit) for k, (_, unit) in COLUMNS.items()) + " |")
    return "\n".join(lines)


def table(out: Path = OUT) -> str:
    """The tables (module docstring) from the finished runs and the launch lines under ``out``."""
    found = finished_runs(out / "runs") if (out / "runs").is_dir() else {}
    if not found:
        return ("No finished run under simulations/results/scale/runs yet "
                "(`python -m simulations.compare simulations/experiments/scale.toml`).\n")
    launched = read_launches(out)
    rows = [measure(run, launched.get(Path(run["dir"]).name)) for run in found.values()]
    parts = []
    for ids in CLIENT_IDS:
        group = [r for r in rows if r["client_ids"] == ids]
        if group:
            when = ", ".join(sorted({r["date"] for r in group}))
            where = "; ".join(sorted({r["machine"] for r in group}))
            parts.append(f"`client-ids={ids}`, runs of {when} on {where}:\n\n{size_table(group)}\n")
    return "\n".join(parts)
