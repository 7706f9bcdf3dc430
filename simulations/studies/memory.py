"""Each method's client under an enforced memory limit, as on a small board, a study (:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/memory.toml               # the demo harness
    python -m simulations.compare simulations/experiments/memory.toml --profile t1  # FedDPG's Table 1
    python -m simulations.compare simulations/experiments/memory.toml --methods fedavg-1024 fedavg-2048
    python -m simulations.compare simulations/experiments/memory.toml --table-only  # from the record

A board has 4 or 8 GB for everything (FeS measures a Jetson TX2: FedFSL's 10.4 GB does not
fit, FeS's 2.3 GB does). Here each label of ``simulations/experiments/memory.toml`` runs its
method's client for one round's fit and evaluate of partition 0 (:func:`child`:
``simulations.bench.timed_client_round``; the server's strategy makes round 1's download and is
gone) in a fresh process placed in a new memory cgroup whose limit is set (:class:`Cgroup`:
cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes`` with ``memory.memsw`` where swap is
accounted; this machine has no swap), from its first instruction. The limit is the label's
engine, one of this study's :data:`ENGINES` (``engine = "cgroup-1024"``: 1 GB), so a label is a
(method, limit) and an *option*, a label with run-config keys of its own (``fedavg.batch-size =
4``), is a change that lowers a client's peak, run the same way. The harness is the experiment's
profile (:data:`HARNESSES`): ``demo`` (the demo task, 2 partitions) and ``t1`` (``--profile t1``:
FedDPG's Table 1 setting, 10 partitions).

Recorded per label (:func:`run_limited`, a line of ``<out>/cgroup.jsonl``): whether it completed,
how it ended otherwise (the kernel's OOM killer, or fedtext's own one-line refusal:
:func:`fedtext.node.memory.check_fits`), the cgroup's peak (``memory.max_usage_in_bytes`` /
``memory.peak``: resident memory and page cache the kernel charged) and the process's own peak
resident memory. Needs root (it makes cgroups). :func:`finish` folds the lines into
``<out>/limits.json``; docs/deployment.md's ``memory-limits`` block is :func:`render` of the
committed records.

A client that completes under 1 GB completes under 2 GB (its allocations do not depend on the
limit): a label whose client (the same run-config) completed under a smaller limit is not run
again, its line says so (``implied_by_mb``), as labels list the smaller limit first.

The engine's measurement is no run record: the runner finds no finished run to skip, so every
label asked is measured again (``--methods`` to measure a few).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from simulations import compare
from simulations.studies import HARNESSES, harness_run, measured_here

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "simulations" / "experiments" / "memory.toml"
OUT = compare.default_out(EXPERIMENT)  # simulations/results/memory; a profile's: <OUT>-<profile>
# harness -> the experiment's profile that runs it (its rows are <default out of that profile>/limits.json's)
RECORD = "limits.json"  # <out>/limits.json: the harness's rows and options (finish), what the tables read
CELLS = "cgroup.jsonl"  # <out>/cgroup.jsonl: one line per label the engine ran (run_limited), newest last
LIMITS_MB = (1024, 2048)  # each one an engine, "cgroup-<MB>"
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")
NOT_THE_CLIENT = ("run-name", "output-dir")  # planned keys that do not change what the client allocates


def child(partitions: int, pairs: str) -> None:
    """One client round of the run-config ``pairs`` (``simulations.simulate``'s syntax) on partition 0
    of ``partitions`` (this process); prints one JSON line, exits 3 with fedtext's refusal."""
    from fedtext.common.config import RunConfig
    from fedtext.common.registry import METHODS
    from fedtext.node.memory import MemoryGuard, NodeMemoryError, node_limit_mb, options_for
    from simulations.bench import timed_client_round
    from simulations.simulate import parse_pairs

    cfg = RunConfig.from_run_config(parse_pairs(pairs), METHODS)
    guard = MemoryGuard(node_limit_mb(), f"{cfg.method}'s fit of partition 0", options_for(cfg))
    try:
        with guard:
            out = timed_client_round(cfg, rounds=1, warm_up=False, partition=0, partitions=partitions)
    except NodeMemoryError as exc:
        print(json.dumps({"refused": str(exc), "guard_peak_mb": round(guard.peak_mb, 1)}))
        sys.exit(3)
    print(json.dumps({k: v for k, v in out.items() if k in ("fit_s", "peak_rss_mb", "round_start_mb", "round_peak_mb")}))


class Cgroup:
    """A new memory cgroup with a limit (v2 where mounted, else v1), removed on exit."""

    def __init__(self, limit_mb: int) -> None:
        name = f"fedtext-mem-{os.getpid()}-{time.monotonic_ns()}"
        self.v2 = (CGROUP_V2 / "cgroup.controllers").exists()
        self.path = (CGROUP_V2 if self.v2 else CGROUP_V1) / name
        self.path.mkdir()
        limit = str(limit_mb * 2**20)
        try:
            if self.v2:  # OSError where the parent does not delegate the memory controller (a container)
                (self.path / "memory.max").write_text(limit)
                with contextlib.suppress(OSError):
                    (self.path / "memory.swap.max").write_text("0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(limit)
                with contextlib.suppress(OSError):  # swap accounted: the limit holds for memory + swap too
                    (self.path / "memory.memsw.limit_in_bytes").write_text(limit)
        except OSError:
            self.path.rmdir()  # no empty cgroup is left behind
            raise

    def peak_mb(self) -> float:
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return round(int((self.path / name).read_text()) / 2**20, 1)
        return float("nan")

    def oom_killed(self) -> int:
        text = (self.path / ("memory.events" if self.v2 else "memory.oom_control")).read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def run_limited(pairs: dict[str, Any], partitions: int, limit_mb: int, log_path: Path) -> dict[str, Any]:
    """The client round of run-config ``pairs`` (:func:`child`) in a process confined to ``limit_mb``
    from its start; its output to ``log_path``. The outcome: ``completed`` (with the round's numbers),
    ``refused`` (fedtext's line), ``oom-killed`` or ``failed (<exit>)``."""
    group = Cgroup(limit_mb)
    try:
        procs = group.path / "cgroup.procs"
        # the shell joins the cgroup, then becomes Python: every byte of the client is charged
        cmd = ["sh", "-c", f'echo $$ > "{procs}" && exec "$0" -m simulations.studies.memory --child "$1" "$2"',
               sys.executable, str(partitions), compare.pairs_text(pairs)]
        t0 = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"})
        log_path.write_text(done.stdout + done.stderr)
        last = (done.stdout.strip().splitlines() or [""])[-1]
        row: dict[str, Any] = {"limit_mb": limit_mb, "cgroup_peak_mb": group.peak_mb(), "wall_s": round(time.time() - t0, 1)}
        if done.returncode == 0:
            row.update({"outcome": "completed", **json.loads(last)})
        elif done.returncode == 3 and last.startswith("{"):
            row.update({"outcome": "refused", "line": json.loads(last)["refused"],
                        "guard_peak_mb": json.loads(last)["guard_peak_mb"]})
        elif group.oom_killed() or done.returncode in (-9, 137):
            row.update({"outcome": "oom-killed"})
        else:
            row.update({"outcome": f"failed ({done.returncode})", "tail": (done.stdout + done.stderr)[-600:]})
        return row
    finally:
        group.remove()


def read_cells(out: Path) -> list[dict[str, Any]]:
    """The lines of ``<out>/cgroup.jsonl``, oldest first."""
    path = out / CELLS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def cgroup_round(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
                 gpus_per_client: float = 0.0, *, limit_mb: int) -> int:
    """The engine ``cgroup-<limit_mb>``: the planned run's client round under ``limit_mb``
    (:func:`run_limited`, partition 0 of ``num_supernodes``), or, where the newest line of the same
    client at a smaller limit completed, that line at this limit (``implied_by_mb``: not run again).
    Appends its line to ``<out>/cgroup.jsonl`` (``out``: ``log_path``'s folder, the runner's); 0 when
    it has an outcome to record (a refusal and an OOM kill are outcomes), 1 when the round failed
    otherwise. No Ray: ``ray_address`` and ``gpus_per_client`` are not read."""
    out = log_path.parent
    client = {k: v for k, v in overrides.items() if k not in NOT_THE_CLIENT}
    smaller = {line["limit_mb"]: line for line in read_cells(out)  # the newest line per smaller limit
               if line["config"] == client and line["limit_mb"] < limit_mb}
    fits = [smaller[mb] for mb in sorted(smaller) if smaller[mb]["outcome"] == "completed"]
    if fits:
        cell = {k: v for k, v in fits[0].items() if k not in ("label", "config")}
        cell = {**cell, "limit_mb": limit_mb, "implied_by_mb": fits[0]["limit_mb"]}
    else:
        try:
            cell = run_limited(client, num_supernodes, limit_mb, log_path)
        except (OSError, subprocess.TimeoutExpired) as exc:  # no cgroup here (not root, no controller), or hung
            cell = {"limit_mb": limit_mb, "outcome": f"failed ({type(exc).__name__})", "tail": str(exc)[-600:]}
    label = overrides.get("run-name") or overrides["method"]
    with (out / CELLS).open("a") as fh:
        fh.write(json.dumps({"label": label, "config": client, **cell}) + "\n")
    print(f"    {label} {limit_mb} MB: {cell['outcome']}" + (f" (completed under {cell['implied_by_mb']} MB)"
          if "implied_by_mb" in cell else f" (cgroup peak {cell.get('cgroup_peak_mb')} MB)"), flush=True)
    return 0 if cell["outcome"] in ("completed", "refused", "oom-killed") else 1


# looked up when a run starts, so that a test's stand-in for cgroup_round (or run_limited) is the one called
ENGINES = {f"cgroup-{mb}": (lambda *args, mb=mb: cgroup_round(*args, limit_mb=mb)) for mb in LIMITS_MB}


def option_of(table: dict[str, Any]) -> str:
    """A label's option, its ``[method.<label>]`` run-config keys as ``key=value`` pairs (``""``: none,
    the method as the harness runs it)."""
    pairs = {k: v for k, v in compare.flatten(table).items() if k != "method" and k not in compare.LABEL_KEYS}
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in pairs.items())


def finish(out: Path = OUT) -> None:
    """``<out>/limits.json`` from the engine's lines (the newest per label): per harness (the profile the
    runner ran, ``<out>/experiment.json``) and method, a cell per limit; an option's label (:func:`option_of`)
    an entry of ``options``. Cells and options not measured again are kept."""
    harness, exp = harness_run(out)
    newest = {line["label"]: line for line in read_cells(out)}
    path = out / RECORD
    record = json.loads(path.read_text()) if path.exists() else {}
    record.update({**measured_here(), "limits_mb": sorted(set(record.get("limits_mb", []))
                                                          | {line["limit_mb"] for line in newest.values()})})
    rows = record.setdefault("rows", {}).setdefault(harness, {})
    options = record.get("options", [])
    for label in exp.get("methods", []):
        if label not in newest:
            continue
        line = newest[label]
        cell = {k: v for k, v in line.items() if k not in ("label", "config")}
        method, option = line["config"]["method"], option_of(exp.get("method", {}).get(label, {}))
        if option:
            key = (harness, method, option, cell["limit_mb"])
            options = [o for o in options if (o["harness"], o["method"], o["option"], o["limit_mb"]) != key]
            options.append({"harness": harness, "method": method, "option": option, **cell})
        else:
            rows.setdefault(method, {})[str(cell["limit_mb"])] = cell
    for cells in rows.values():
        rederive(cells)
    by_option: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for o in options:
        by_option.setdefault((o["harness"], o["method"], o["option"]), {})[str(o["limit_mb"])] = o
    for cells in by_option.values():
        rederive(cells)
    options = [o for cells in by_option.values() for o in cells.values()]
    if options:
        record["options"] = options
    path.write_text(json.dumps(record, indent=1) + "\n")


def rederive(cells: dict[str, dict[str, Any]]) -> None:
    """One client's cells by limit (``"1024"`` -> cell), in place: a cell implied by a smaller limit's
    (``implied_by_mb``: not run again because the client completed there) follows that cell as it is now,
    a copy at its own limit while it completed, gone (not measured) once it did not (a newer measurement
    at the smaller limit ran out of memory): the cells never contradict each other."""
    for key, cell in list(cells.items()):
        source = cells.get(str(cell.get("implied_by_mb")))
        if "implied_by_mb" not in cell:
            continue
        if source is None or source["outcome"] != "completed" or "implied_by_mb" in source:
            del cells[key]
        else:
            cells[key] = {**source, "limit_mb": cell["limit_mb"], "implied_by_mb": source["limit_mb"]}


def _cell(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "-"
    if cell["outcome"] == "completed":
        return f"yes, {cell['cgroup_peak_mb']:.0f} / {cell['peak_rss_mb']:.0f} MB"
    if cell["outcome"] == "refused":
        if "would start with" in cell.get("line", ""):
            return "refused at once (one line)"
        return f"stopped at {cell.get('guard_peak_mb', 0):.0f} MB (one line)"
    return cell["outcome"]


def tables(found: dict[str, dict[str, Any]]) -> str:
    """The table of each harness's record (``found``: harness -> the record holding its rows), a column
    per harness and limit up to 2 GB, then the options' table."""
    if not found:
        return f"(no record yet: python -m simulations.compare {EXPERIMENT.relative_to(REPO)})\n"
    harnesses = [h for h in HARNESSES if h in found] + [h for h in found if h not in HARNESSES]
    heads = list(dict.fromkeys(f"{found[h]['machine']}, {found[h]['date']}, commit {found[h]['commit']}"
                               for h in harnesses))
    limits = sorted({str(x) for h in harnesses for x in found[h]["limits_mb"] if x <= 2048}, key=int)
    head = " | ".join(f"{h} {int(lim) // 1024} GB" for h in harnesses for lim in limits)
    profiles = "".join(f"; {h}: `--profile {HARNESSES[h]}`" for h in harnesses if HARNESSES.get(h))
    lines = [f"{'; '.join(heads)}: completed? cgroup peak / process peak "
             f"(`python -m simulations.compare {EXPERIMENT.relative_to(REPO)}`{profiles}).", "", f"| method | {head} |",
             "|---|" + "---|" * (len(harnesses) * len(limits))]
    methods = list(dict.fromkeys(m for h in harnesses for m in found[h]["rows"][h]))
    for method in methods:
        cells = [_cell(found[h]["rows"][h].get(method, {}).get(lim)) for h in harnesses for lim in limits]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    options = [o for h in harnesses for o in found[h].get("options", []) if o["harness"] == h]
    if options:
        lines += ["", "Options for the clients over 1 GB, run the same way:", "",
                  "| harness | method | option | limit | completed? cgroup / process peak |", "|---|---|---|---|---|"]
        lines += [f"| {o['harness']} | {o['method']} | `{o['option']}` | {o['limit_mb']} MB | {_cell(o)} |"
                  for o in options]
    return "\n".join(lines) + "\n"


def harness_records(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """Harness -> the record holding its rows, among the records at ``paths`` that exist; a later
    path's wins (a harness's own profile folder over a record that held several harnesses)."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        if path.exists():
            rec = json.loads(path.read_text())
            found.update({harness: rec for harness in rec.get("rows", {})})
    return found


def table(out: Path = OUT) -> str:
    """The table of ``<out>/limits.json``."""
    return tables(harness_records([out / RECORD]))


def render() -> str:
    """docs/deployment.md's ``memory-limits`` block: the committed records, each harness's from its profile's
    folder where it has one (``tools/generated.py``)."""
    return tables(harness_records([compare.default_out(EXPERIMENT, profile) / RECORD
                                   for profile in HARNESSES.values()]))


def main(argv: list[str] | None = None) -> int:
    """``--child PARTITIONS PAIRS``: :func:`child`, the process :func:`run_limited` confines."""
    ap = argparse.ArgumentParser(description="One client round in this process (the memory study's engine runs it).")
    ap.add_argument("--child", nargs=2, required=True, metavar=("PARTITIONS", "PAIRS"))
    args = ap.parse_args(argv)
    child(int(args.child[0]), args.child[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
