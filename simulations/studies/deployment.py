"""Deployment rounds against simulation rounds, side by side (issue 57), a study (:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/deployment.toml               # the demo harness
    python -m simulations.compare simulations/experiments/deployment.toml --profile t1  # FedDPG's Table 1
    python -m simulations.compare simulations/experiments/deployment.toml --profile steady  # the demo, 8 rounds
    python -m simulations.compare simulations/experiments/deployment.toml --methods fedprompt-ray fedprompt-service
    python -m simulations.compare simulations/experiments/deployment.toml --table-only  # from the record

Its runs are ``simulations/experiments/deployment.toml``: per method, the same run-config under
the runner's engines, one label each (``<method>-ray``: Flower's Ray simulation, engine
``"flower"``; ``-service``: Flower's deployment engine with fedtext's node service, engine
``"deployment"`` (:func:`simulations.compare.run_deployment`); and this study's own
:data:`ENGINES`, ``-cold``: the node service without warm ClientApp processes, ``-plain``: no node
service, each message's ClientApp process loading everything anew). The harness is the
experiment's profile (:data:`HARNESSES`): ``demo`` (README's command: the demo task, 2
SuperNodes, the run-config's defaults) and ``t1`` (``--profile t1``: FedDPG's Table 1 setting,
AG News, 10 SuperNodes, 3 clients per round, 4 rounds); a variant (:data:`VARIANTS`) runs a harness again
with more rounds (``--profile steady``: the demo over 8, so that a ratio is the mean of 7 steady rounds).

Per run (:func:`summarise`): the mean round time over the steady rounds (2 onwards: round 1 holds
the process and actor start-ups of both engines, reported apart), and the round's parts from its
record: the slowest fit, the process start-ups (``startup_s``: each ClientApp process starting
Python and Flower, the service's or actor's imports), building the clients (``client_load_s``:
data and backbone; cached in the service), evaluation, and what is left (``overhead_s``:
messaging and polls); and, from the runner's ``launches.jsonl`` line of the run, its wall time
and the load average before and after it. :func:`finish` writes them to ``<out>/<harness>.json``
(:data:`HARNESSES`; machine, date, commit, and what a fresh process costs before it computes:
:func:`process_costs`), one row per method and a part per engine, kept for the methods not run
again; docs/performance.md's ``deployment-rounds`` block is :func:`render` of the committed
records (``python tools/generated.py``).
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simulations import compare
from simulations.studies import HARNESSES, harness_run, measured_here
from simulations.tables import finished_runs

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "simulations" / "experiments" / "deployment.toml"
OUT = compare.default_out(EXPERIMENT)  # simulations/results/deployment; a profile's: <OUT>-<profile>
# harness -> the experiment's profile that runs it; its record is <default out of that profile>/<harness>.json
# per harness, the most Ray rounds a deployment round may take: the demo's 2 SuperNodes x1.2 (issue 57), T1's 10,
# which share this machine's 2 cores with the fits where Ray's one actor has them alone, x1.3 (issue 68)
TARGETS = {"demo": 1.2, "t1": 1.3}
# issue 68: the most a deployment round may pay that a Ray round of the same run-config does not (extra_s), in seconds
EXTRA_TARGET_S = 0.5
# the experiment's profiles that run a harness again with another setting, not a harness of their own -> that harness,
# whose SuperNodes and target they keep; each writes <default out of the profile>/<profile>.json, rendered after the
# harnesses' tables. "steady": the demo over 8 rounds, 7 steady rounds a row where the demo's 3 rounds give 2
# (two steady rounds of one run moved fedlora's ratio by 0.14 between sittings: docs/performance.md);
# "t1-steady": T1 over 8 rounds (7 steady rounds where T1's 4 give 3)
VARIANTS = {"steady": "demo", "t1-steady": "t1"}
# the runner's engine of a run -> its part of the method's row (the record's names: "before" is the deployment
# before the node service)
PARTS = {"flower": "ray", "deployment": "service", "deployment-fork": "fork", "deployment-spawn": "spawn",
         "deployment-cold": "cold", "deployment-plain": "before"}
# the parts besides the node service's own that a row may hold, each a column of the table when any row has it:
# the same node service with its warm ClientApp processes made one way or the other (forked from a fork server,
# or each a new Python: fedtext.node.warm_exec.WARM_STARTS), or with none; "before" (no node service) has its own
ALTERNATIVES = {"fork": "forked warm ClientApps", "spawn": "spawned warm ClientApps", "cold": "cold ClientApps"}
# the engines whose parts have warm ClientApp processes; how they were made is the launcher's <logs>/nodes.json
# (simulations.deployment.write_nodes), else "spawn": a run whose logs have none was launched while spawn was the
# node service's default (before 2026-11-30), and a record written then says so in its header ("warm_start", or
# only "warm_clientapps" in the oldest)
WARM_ENGINES = ("deployment", "deployment-fork", "deployment-spawn")
# this study's deployment engines besides the runner's "deployment" (the node service and its warm ClientApp
# processes, as deploy/supernode.sh starts a node) -> the launcher's flags (simulations.deployment)
OPTIONS: dict[str, tuple[str, ...]] = {"deployment-cold": ("--warm-clientapps", "0"),
                                       "deployment-plain": ("--no-node-service",),
                                       "deployment-fork": ("--warm-start", "fork"),
                                       "deployment-spawn": ("--warm-start", "spawn")}
# looked up when a run starts, so that a test's stand-in for compare.run_deployment is the one called
ENGINES = {name: (lambda *args, options=options: compare.run_deployment(*args, options=options))
           for name, options in OPTIONS.items()}


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean round time of the steady rounds (2 onwards), each of their times (``round_times_s``, for
    :func:`ratio_error`) and the mean of each part over them."""
    steady = [r for r in rounds if r["round"] >= 2]
    first = next(r for r in rounds if r["round"] == 1)

    def mean(key: str) -> float | None:
        values = [r[key] for r in steady if r.get(key) is not None]
        return round(statistics.fmean(values), 2) if values else None

    return {"round_s": mean("round_time_s"), "round_times_s": [round(r["round_time_s"], 3) for r in steady],
            "round1_s": first["round_time_s"], "fit_max_s": mean("client_fit_s_max"),
            "startup_s": mean("startup_s"), "load_s": mean("client_load_s"), "eval_s": mean("client_eval_s"),
            "server_eval_s": mean("server_eval_s"), "overhead_s": mean("overhead_s"),
            "messages": round(statistics.fmean((r.get("num_clients") or 0) + (r.get("clients_evaluated") or 0)
                                               for r in steady), 1),
            "accuracy": [r["global_accuracy"] for r in rounds], "steady_rounds": [r["round"] for r in steady]}


def ratio_error(ray: dict[str, Any], part: dict[str, Any]) -> float | None:
    """The standard error of ``part``'s ratio R = m_p / m_r to ``ray`` (both from :func:`summarise`), round by
    round: both engines run the same seed, so their round k samples the same clients and evaluates or not alike
    (T1 evaluates every second round, FeS's round 2 is slow under both), and what varies with the round is taken
    out by pairing. With d_k = p_k - R * r_k over the n steady rounds (p_k, r_k: round k's time deployed and under
    Ray), se = sd(d) / sqrt(n) / m_r (the first-order error of a ratio of paired means; "within two errors" reads
    it as normal, where 7 rounds' t quantile would be 2.45). None for parts without each round's time (recorded
    before 2026-12-03) or with different steady rounds, or under two of them."""
    paired = ray.get("round_times_s"), part.get("round_times_s")
    if None in paired or ray["steady_rounds"] != part["steady_rounds"] or len(ray["steady_rounds"]) < 2:
        return None
    ratio = statistics.fmean(paired[1]) / statistics.fmean(paired[0])
    gaps = [deployed - ratio * simulated for simulated, deployed in zip(*paired, strict=True)]
    return statistics.stdev(gaps) / len(gaps) ** 0.5 / statistics.fmean(paired[0])


def process_costs(repeats: int = 3) -> dict[str, float]:
    """What one fresh process pays before it computes (best of ``repeats``): starting Python and
    importing the ClientApp the node service's shim loads (``fedtext.client_app``: Flower only),
    against importing what a client without the service needs (``fedtext.node.node``: torch,
    transformers, the data loaders). Not a run: measured by :func:`finish` beside the runs."""
    def best(statement: str) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", statement], cwd=REPO, check=True)
            times.append(time.perf_counter() - t0)
        return round(min(times), 2)

    # flwr-clientapp, Flower's per-message process: its console script imports this first
    return {"flower_clientapp_s": best("from flwr.supernode.cli import flwr_clientapp"),
            "shim_process_s": best("import fedtext.client_app"), "client_process_s": best("import fedtext.node.node")}


def launched_parts(out: Path, commit: str) -> dict[str, dict[str, dict[str, Any]]]:
    """Per method, per part (:data:`PARTS`): the newest finished run of each label under ``<out>/runs``
    (:func:`simulations.tables.finished_runs`) that the runner launched (its ``launches.jsonl`` line):
    its rounds (:func:`summarise`), the launch's wall time and load average, and the commit the run ran:
    its record's, else its launch line's (a deployment run's record names no commit: its code is the app
    bundle ``flwr run`` packed from the checkout, which the record names by hash), else ``commit`` (a line
    written before launch lines named one)."""
    from simulations.deployment import NODES

    launch = compare.read_launches(out)  # the run it left -> its launch
    parts: dict[str, dict[str, dict[str, Any]]] = {}
    for run in finished_runs(out / "runs").values():
        line = launch.get(Path(run["dir"]).name)
        if line is None or line["engine"] not in PARTS:  # not launched by the runner here: no wall time
            continue
        ran = (run["config"].get("provenance") or {}).get("git_commit") or line.get("commit") or commit
        logs = out / f"{compare.log_stem(line['label'], line['seed'], line.get('holdout'))}-logs"
        # a part whose launcher's logs folder is gone (logs are not committed: a fresh clone has none) says nothing
        # of its warm processes here, and finish keeps what its row recorded of the same run (keep_warm_start)
        parts.setdefault(run["config"]["config"]["method"], {})[PARTS[line["engine"]]] = {
            **summarise(run["rounds"]), "wall_s": round(line["wall_s"], 1), "load_before": line.get("load_before"),
            "load_after": line.get("load_after"), "commit": ran[:7],
            **({"warm_start": made(logs / NODES)} if line["engine"] in WARM_ENGINES and logs.exists() else {})}
    return parts


def keep_warm_start(new: dict[str, dict[str, Any]], old: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``new`` (a method's parts read from its runs) with each warm part that says nothing of its warm processes
    (:func:`launched_parts`: its logs are gone) taking what its ``old`` row recorded, if that part was the same run
    (the same launch's wall time and commit), else ``"spawn"`` (:func:`made`'s reading of a run without logs)."""
    for engine in WARM_ENGINES:
        part, before = new.get(PARTS[engine]), old.get(PARTS[engine], {})
        if part is not None and "warm_start" not in part:
            same = (before.get("wall_s"), before.get("commit")) == (part["wall_s"], part["commit"])
            part["warm_start"] = (before.get("warm_start") if same else None) or "spawn"
    return new


def made(nodes: Path) -> str:
    """How a deployment run's warm ClientApp processes were made: its launcher's ``nodes.json``, else
    ``"spawn"`` (:data:`WARM_ENGINES`)."""
    return (json.loads(nodes.read_text()).get("warm_start") if nodes.exists() else None) or "spawn"


def header_start(record: dict[str, Any]) -> str | None:
    """How the warm processes of a record's parts without their own were made: its header's
    ``warm_start``, else ``"spawn"`` where it had warm processes at all (before fork existed)."""
    return record.get("warm_start") or ("spawn" if record.get("warm_clientapps") else None)


def commits_in(lists: Iterable[str]) -> list[str]:
    """Each commit named in ``lists`` (a part's one commit, or a row's ``"a, b"``) once, sorted."""
    return sorted({c.strip() for text in lists for c in text.split(",")} - {""})


def row_of(old: dict[str, Any], new: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A method's row: its parts (``new`` replacing ``old``'s part by part), the commits they ran
    (each new part's own; an old part's is its row's), and each deployment part's round time in Ray
    rounds (``ratio``: the node service's; ``ratio_<part>`` for the others)."""
    parts = {name: new.get(name, old.get(name)) for name in PARTS.values() if name in new or name in old}
    # a part measured before parts named their commit has its row's, itself a list: each commit once
    row: dict[str, Any] = {**parts, "commit": ", ".join(commits_in(p.get("commit", old.get("commit", "")) for p in
                                                                   parts.values()))}
    if "ray" in parts:
        for name in parts:
            if name != "ray":
                key = "ratio" if name == "service" else f"ratio_{name}"
                row[key] = round(parts[name]["round_s"] / parts["ray"]["round_s"], 2)
    return row


def finish(out: Path = OUT) -> None:
    """``<out>/<harness>.json`` (module doc) from the finished runs under ``out`` and the runner's launch
    lines; the harness is the profile the runner ran (``<out>/experiment.json``). A method is a row once
    it has its Ray and node-service parts; rows of methods without new runs are kept as they were."""
    from fedtext.node.service import WARM_CLIENTAPPS
    from fedtext.node.warm_exec import WARM_START

    harness, exp = harness_run(out)
    path = out / f"{harness}.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    here = measured_here()
    commit = here["commit"]
    old = header_start(record)
    for row in record.get("methods", {}).values():  # parts measured before parts said how: the header's
        if old and "warm_start" not in row["service"]:
            row["service"]["warm_start"] = old  # in the record read: stamping alone is no change to write
    rows = copy.deepcopy(record.get("methods", {}))
    for method, new in launched_parts(out, commit).items():
        row = row_of(rows.get(method, {}), keep_warm_start(new, rows.get(method, {})))
        if "ratio" not in row:
            print(f"deployment: {method} has no Ray and node-service pair yet ({', '.join(new)}): not a row",
                  flush=True)
            continue
        rows[method] = row
        print(f"{harness} {method}: ray {row['ray']['round_s']} s, service {row['service']['round_s']} s "
              f"(x{row['ratio']})" + "".join(f", {e} {row[e]['round_s']} s (x{row[f'ratio_{e}']})"
                                             for e in (*ALTERNATIVES, "before") if e in row), flush=True)
    # the record's header (machine, date, process costs) is of the runs its rows hold: a record is written
    # only when a row changed, and never without a row (its table would have nothing to show)
    target = target_of(harness)
    if rows and rows == record.get("methods") and record.get("target") != target:
        # the harness's target changed, no measurement did: the header (machine, date, process costs) stays the runs'
        record["target"] = target
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"deployment: {path.name}: target x{target}, rows unchanged", flush=True)
        return
    if not rows or rows == record.get("methods"):
        print(f"deployment: {path.name} {'unchanged' if rows else 'not written'}: no new Ray and node-service "
              "pair", flush=True)
        return
    record.update({"harness": harness, "supernodes": int(exp.get("num-supernodes", 4)),
                   "run_config": compare.flatten(exp.get("run-config", {})), "target": target,
                   "process_costs": process_costs(), "warm_clientapps": WARM_CLIENTAPPS,
                   "warm_start": WARM_START, **here, "methods": rows})
    path.write_text(json.dumps(record, indent=1) + "\n")


def target_of(harness: str) -> float:
    """The most Ray rounds a deployment round of ``harness`` may take: a harness's own (:data:`TARGETS`), a
    variant's harness's (:data:`VARIANTS`), and the demo's for any other profile (its own name)."""
    return TARGETS.get(harness, TARGETS[VARIANTS.get(harness, "demo")])


def extra_s(ray: dict[str, Any], service: dict[str, Any]) -> float:
    """What a deployment round pays that a Ray round does not: the node service's start-ups (each message's
    ClientApp process) and overhead (messaging, polls, serialization, and what both engines do between
    the clients' work: aggregation, records) less the Ray round's own start-ups (none in a steady round: the
    actor is warm) and overhead (its in-memory grid's polls and that same server work). Both from the
    round records (``startup_s``, ``overhead_s``: a missing part counts 0). Issue 68's target is
    :data:`EXTRA_TARGET_S`."""
    return paid_s(service) - paid_s(ray)


def paid_s(part: dict[str, Any]) -> float:
    """A part's start-ups and overhead a round (``startup_s`` + ``overhead_s``, a missing one 0)."""
    return (part.get("startup_s") or 0) + (part.get("overhead_s") or 0)


def command(harness: str) -> str:
    """The command that runs ``harness``'s labels (a variant or other profile: ``--profile <its name>``)."""
    profile = HARNESSES.get(harness, harness)
    return (f"python -m simulations.compare {EXPERIMENT.relative_to(REPO)}"
            + (f" --profile {profile}" if profile else ""))


def harness_table(rec: dict[str, Any]) -> list[str]:
    """The markdown lines of one harness's record."""
    name = rec["harness"]
    # a variant reads as what it runs: "demo over 8 rounds"
    shown = (f"{VARIANTS[name]} over {rec['run_config']['num-server-rounds']} rounds" if name in VARIANTS
             and "num-server-rounds" in rec.get("run_config", {}) else name)
    steady = ", ".join(str(r) for r in next(iter(rec["methods"].values()))["ray"]["steady_rounds"])
    commits = commits_in(r.get("commit", rec["commit"]) for r in rec["methods"].values())
    others = [p for p in ALTERNATIVES if any(p in r for r in rec["methods"].values())]
    warm = rec.get("warm_clientapps")  # absent: recorded before warm ClientApp processes (cold ones)
    # how the service column's warm processes were made: its parts' own, else the header's (absent: before fork,
    # all spawned); a column of mixed parts says so
    starts = sorted({r["service"].get("warm_start", header_start(rec)) or "" for r in rec["methods"].values()})
    how = f" {'/'.join(f'{m}ed' for m in starts)}" if all(starts) else ""
    service = f"node service, {warm}{how} warm ClientApp" if warm else "node service"
    errors = {m: ratio_error(r["ray"], r["service"]) for m, r in rec["methods"].items()}  # None: no per-round times
    extras = {m: extra_s(r["ray"], r["service"]) for m, r in rec["methods"].items()}
    lines = [f"**{shown}** ({rec['supernodes']} SuperNodes; {rec['machine']}, {rec['date']}, commit "
             f"{', '.join(commits)} (each row's in the record); mean of rounds {steady}; `{command(name)}`)", "",
             f"| method | Ray round | deployment round ({service}) | ratio | slowest fit | start-ups | "
             f"client builds | overhead | extra |{''.join(f' {ALTERNATIVES[p]} |' for p in others)} without the "
             f"service | load |",
             f"|---|---|---|---|---|---|---|---|---|{'---|' * len(others)}---|---|"]
    for method, row in rec["methods"].items():
        ray, svc = row["ray"], row["service"]
        before = (f"{row['before']['round_s']:.1f} s (x{row['ratio_before']:.2f}; start-ups "
                  f"{row['before']['startup_s'] or 0:.1f} s, builds {row['before']['load_s'] or 0:.1f} s)"
                  if "before" in row else "-")
        colds = "".join(f" {row[p]['round_s']:.1f} s (x{row[f'ratio_{p}']:.2f}; start-ups "
                        f"{row[p]['startup_s'] or 0:.1f} s, overhead {row[p]['overhead_s'] or 0:.1f} s) |"
                        if p in row else " - |" for p in others)
        ok = "" if row["ratio"] <= rec["target"] else " (over)"
        error = errors[method]
        ratio = f"x{row['ratio']:.2f}" + (f" ± {error:.2f}" if error is not None else "") + ok
        lines.append(f"| {method} | {ray['round_s']:.1f} s | {svc['round_s']:.1f} s | {ratio} | "
                     f"{svc['fit_max_s'] or 0:.1f} s | {svc['startup_s'] or 0:.1f} s | {svc['load_s'] or 0:.2f} s | "
                     f"{svc['overhead_s'] or 0:.1f} s | {extras[method]:.2f} s |{colds} {before} | "
                     f"{ray['load_before']:.1f} / "
                     f"{svc['load_before']:.1f} |")
    within = [m for m, r in rec["methods"].items() if r["ratio"] <= rec["target"]]
    over = [m for m, r in rec["methods"].items() if r["ratio"] > rec["target"]]
    fixed = statistics.fmean(paid_s(r["service"]) for r in rec["methods"].values())
    rays = statistics.fmean(paid_s(r["ray"]) for r in rec["methods"].values())
    extra_over = [m for m, e in extras.items() if e > EXTRA_TARGET_S]
    # a ratio within two standard errors of the target is not decided by these rounds (ratio_error)
    close = [m for m, r in rec["methods"].items()
             if (e := errors[m]) is not None and abs(r["ratio"] - rec["target"]) < 2 * e]
    undecided = (f" (± a ratio's standard error over its steady rounds, round k of one engine against round k of "
                 f"the other; within two of x{rec['target']}, "
                 f"not decided by these rounds: {', '.join(close) or 'none'})"
                 if any(e is not None for e in errors.values()) else "")
    lines += ["", f"Within x{rec['target']}: {', '.join(within) or 'none'}; over: {', '.join(over) or 'none'}"
                  f"{undecided}. What a deployment round pays that a Ray round does not (extra: the service's "
                  f"start-ups and overhead, {fixed:.2f} s on average over these methods whatever their compute, less "
                  f"the Ray round's own, {rays:.2f} s): "
                  f"{statistics.fmean(extras.values()):.2f} s on average; within {EXTRA_TARGET_S} s: "
                  f"{', '.join(m for m in extras if m not in extra_over) or 'none'}; over: "
                  f"{', '.join(extra_over) or 'none'}."]
    costs = rec.get("process_costs")
    if costs:
        flower = (f"Flower's own per-message process (`flwr-clientapp`: Python and its command's imports) "
                  f"{costs['flower_clientapp_s']:.2f} s before it pulls the message; "
                  if "flower_clientapp_s" in costs else "")
        lines += ["", f"A fresh process, before it computes (best of 3): {flower}Python + the shim's imports "
                      f"(`fedtext.client_app`, Flower only) {costs['shim_process_s']:.2f} s, against Python + a "
                      f"client's imports without the service (`fedtext.node.node`: torch, transformers, the data "
                      f"loaders) {costs['client_process_s']:.2f} s, before the data and backbone it would then "
                      f"build (the 'client builds' column without the service, over its messages per round)."]
    return [*lines, ""]


def records(paths: list[Path]) -> str:
    """The tables of the records among ``paths`` that exist, one after the other."""
    lines = [line for path in paths if path.exists() for line in harness_table(json.loads(path.read_text()))]
    return "\n".join(lines).rstrip() + "\n" if lines else "(no record yet: " + command("demo") + ")\n"


def table(out: Path = OUT) -> str:
    """The tables of the harness and variant records in ``out`` (``<harness>.json``, :data:`HARNESSES`,
    :data:`VARIANTS`)."""
    return records([out / f"{name}.json" for name in (*HARNESSES, *VARIANTS)])


def render() -> str:
    """docs/performance.md's ``deployment-rounds`` block: each harness's committed record, from its
    profile's folder (``tools/generated.py``)."""
    return records([*(compare.default_out(EXPERIMENT, profile) / f"{harness}.json"
                      for harness, profile in HARNESSES.items()),
                    *(compare.default_out(EXPERIMENT, variant) / f"{variant}.json" for variant in VARIANTS)])
