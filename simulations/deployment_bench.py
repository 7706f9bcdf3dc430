"""Deployment rounds against simulation rounds, side by side: ``python -m simulations.deployment_bench``.

For each harness and method, the same run-config three ways, one after the other on this
machine: Flower's Ray simulation (``simulations.simulate``, one actor using every core, fits
in turn), Flower's deployment engine with fedtext's node service (``simulations.deployment``:
a SuperLink and N SuperNodes on loopback, each SuperNode behind ``python -m
fedtext.node.service`` with cores / N torch threads, as separate boards) and, with
``--before``, the deployment engine without the service (``--no-node-service``: each
message's ClientApp process loads everything anew). Per run: the mean round time over the
steady rounds (2 onwards: round 1 holds the process and actor start-ups of both engines,
reported apart), and the deployment round's parts from its record: the slowest fit, the
process start-ups (``startup_s``: each ClientApp process starting Python and Flower, the
service's or actor's imports), building the clients (``client_load_s``: data and backbone;
cached in the service), evaluation, and what is left (``overhead_s``: messaging and polls).

Harnesses: ``demo`` (README's command: the demo task, 2 SuperNodes, the run-config's
defaults) and ``t1`` (FedDPG's Table 1 setting, simulations/experiments/
feddpg_table1_ag_news.toml: AG News, 10 SuperNodes, 3 clients per round, 4 rounds).
Writes ``simulations/results/deployment/<harness>.json`` (machine, date, commit, load
before and after each run); docs/performance.md's table is generated from them
(``python tools/generated.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from fedtext.node.service import WARM_CLIENTAPPS
from simulations.compare import flatten

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "simulations" / "results" / "deployment"
METHODS = ("bbt-fed", "fedbpt", "feddls", "fes", "fedprompt", "fedlora")
TARGET = 1.2  # the deployment round may take at most this many Ray rounds (issue 57)


def harness(name: str) -> tuple[dict[str, Any], int]:
    """(run-config pairs, SuperNodes) of a harness."""
    if name == "demo":
        return {}, 2
    if name == "t1":
        exp = tomllib.loads((REPO / "simulations/experiments/feddpg_table1_ag_news.toml").read_text())
        pairs = flatten(exp["run-config"])
        pairs["dataset"] = str((REPO / pairs["dataset"]).resolve())  # experiment paths are the checkout's
        return pairs, int(exp["num-supernodes"])
    raise SystemExit(f"unknown harness {name!r} (demo, t1)")


# what a method needs of any harness: FeS's curriculum pacing (AUG-E) reads the server's accuracy
# after every round, so its runs evaluate every round (T1 evaluates every second one)
METHOD_NEEDS: dict[str, dict[str, Any]] = {"fes": {"eval-every": 1}}


def for_method(pairs: dict[str, Any], method: str) -> dict[str, Any]:
    """The harness's shared keys and ``method``'s own (``fedprompt.local-steps`` for fedprompt),
    with what the method needs (:data:`METHOD_NEEDS`); another method's keys would be refused."""
    own = {k: v for k, v in pairs.items() if "." not in k or k.split(".", 1)[0] == method}
    return {**own, **METHOD_NEEDS.get(method, {})}


def pairs_text(pairs: dict[str, Any]) -> str:
    """``simulations.simulate``'s ``--run-config`` syntax (``key=value``, strings quoted)."""
    import shlex

    return " ".join(f"{k}={shlex.quote(str(v).lower() if isinstance(v, bool) else str(v))}" for k, v in pairs.items())


def rounds_of(out: Path) -> list[dict[str, Any]]:
    (config,) = list(out.glob("*/config.json"))
    return [json.loads(line) for line in (config.parent / "rounds.jsonl").read_text().splitlines()]


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean round time of the steady rounds (2 onwards) and the mean of each part over them."""
    steady = [r for r in rounds if r["round"] >= 2]
    first = next(r for r in rounds if r["round"] == 1)

    def mean(key: str) -> float | None:
        values = [r[key] for r in steady if r.get(key) is not None]
        return round(statistics.fmean(values), 2) if values else None

    return {"round_s": mean("round_time_s"), "round1_s": first["round_time_s"], "fit_max_s": mean("client_fit_s_max"),
            "startup_s": mean("startup_s"), "load_s": mean("client_load_s"), "eval_s": mean("client_eval_s"),
            "server_eval_s": mean("server_eval_s"), "overhead_s": mean("overhead_s"),
            "messages": round(statistics.fmean((r.get("num_clients") or 0) + (r.get("clients_evaluated") or 0)
                                               for r in steady), 1),
            "accuracy": [r["global_accuracy"] for r in rounds], "steady_rounds": [r["round"] for r in steady]}


def process_costs(repeats: int = 3) -> dict[str, float]:
    """What one fresh process pays before it computes (best of ``repeats``): starting Python and
    importing the ClientApp the node service's shim loads (``fedtext.client_app``: Flower only),
    against importing what a client without the service needs (``fedtext.node.node``: torch,
    transformers, the data loaders)."""
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


# the deployment engines besides Ray: "service" (the node service and its warm ClientApp processes, as
# deploy/supernode.sh starts a node), "cold" (the service, Flower's cold flwr-clientapp per message), "before"
# (no service: each message's ClientApp loads everything)
ENGINE_FLAGS: dict[str, list[str]] = {"service": [], "cold": ["--warm-clientapps", "0"], "before": ["--no-node-service"]}


def one(engine: str, method: str, pairs: dict[str, Any], nodes: int, work: Path) -> dict[str, Any]:
    out = work / engine / method
    config = pairs_text({**for_method(pairs, method), "method": method, "run-name": f"bench-{engine}"})
    if engine == "ray":
        cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", str(nodes),
               "--run-config", f"{config} output-dir={out}"]
    else:
        cmd = [sys.executable, "-m", "simulations.deployment", "--num-supernodes", str(nodes), "--run-config", config,
               "--output-dir", str(out), "--timeout-s", "1800"] + ENGINE_FLAGS.get(engine, [])
    load = os.getloadavg()[0]
    t0 = time.time()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=2400, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"{engine} {method}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}")
    return {**summarise(rounds_of(out)), "wall_s": round(time.time() - t0, 1), "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--harness", nargs="+", default=["demo", "t1"], choices=["demo", "t1"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--before", action="store_true", help="also the deployment without the node service")
    ap.add_argument("--cold", action="store_true",
                    help="also the deployment with the node service but no warm ClientApp processes (fedtext.node.warm_exec)")
    ap.add_argument("--out", default=str(RESULTS), help="folder of the <harness>.json records")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for name in args.harness:
        pairs, nodes = harness(name)
        path = Path(args.out) / f"{name}.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        record.update({"harness": name, "supernodes": nodes, "run_config": pairs, "target": TARGET,
                       "process_costs": process_costs(), "warm_clientapps": WARM_CLIENTAPPS,
                       "machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                       "commit": commit})
        rows = record.setdefault("methods", {})
        for method in args.methods:
            work = Path(tempfile.mkdtemp(prefix="fedtext-bench-"))
            try:
                row = {engine: one(engine, method, pairs, nodes, work)
                       for engine in ("ray", "service", *(("cold",) if args.cold else ()),
                                      *(("before",) if args.before else ()))}
            finally:
                shutil.rmtree(work, ignore_errors=True)
            row["commit"] = commit  # the code each row ran (rows of one record may come from several runs)
            row["ratio"] = round(row["service"]["round_s"] / row["ray"]["round_s"], 2)
            for extra in ("cold", "before"):
                if extra in row:
                    row[f"ratio_{extra}"] = round(row[extra]["round_s"] / row["ray"]["round_s"], 2)
                elif extra in rows.get(method, {}):  # kept from an earlier --cold/--before run, with its own ratio
                    row[extra], row[f"ratio_{extra}"] = rows[method][extra], rows[method][f"ratio_{extra}"]
            rows[method] = row
            path.write_text(json.dumps(record, indent=1) + "\n")
            print(f"{name} {method}: ray {row['ray']['round_s']} s, service {row['service']['round_s']} s "
                  f"(x{row['ratio']})" + "".join(f", {e} {row[e]['round_s']} s (x{row[f'ratio_{e}']})"
                                                 for e in ("cold", "before") if e in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def render() -> str:
    """docs/performance.md's table of the committed records (``tools/generated.py``)."""
    lines = []
    for name in ("demo", "t1"):
        path = RESULTS / f"{name}.json"
        if not path.exists():
            continue
        rec = json.loads(path.read_text())
        steady = ", ".join(str(r) for r in next(iter(rec["methods"].values()))["ray"]["steady_rounds"])
        commits = sorted({r.get("commit", rec["commit"]) for r in rec["methods"].values()})
        cold = any("cold" in r for r in rec["methods"].values())
        warm = rec.get("warm_clientapps")  # absent: recorded before warm ClientApp processes (cold ones)
        service = f"node service, {warm} warm ClientApp" if warm else "node service"
        lines += [f"**{name}** ({rec['supernodes']} SuperNodes; {rec['machine']}, {rec['date']}, commit "
                  f"{', '.join(commits)} (each row's in the record); mean of rounds {steady}; `python -m "
                  f"simulations.deployment_bench --harness {name}{' --cold' if cold else ''}"
                  f"{' --before' if any('before' in r for r in rec['methods'].values()) else ''}`)", "",
                  f"| method | Ray round | deployment round ({service}) | ratio | slowest fit | start-ups | "
                  f"client builds | overhead |{' cold ClientApps |' if cold else ''} without the service | load |",
                  f"|---|---|---|---|---|---|---|---|{'---|' if cold else ''}---|---|"]
        for method, row in rec["methods"].items():
            ray, svc = row["ray"], row["service"]
            before = (f"{row['before']['round_s']:.1f} s (x{row['ratio_before']:.2f}; start-ups "
                      f"{row['before']['startup_s'] or 0:.1f} s, builds {row['before']['load_s'] or 0:.1f} s)"
                      if "before" in row else "-")
            colds = ((f" {row['cold']['round_s']:.1f} s (x{row['ratio_cold']:.2f}; start-ups "
                      f"{row['cold']['startup_s'] or 0:.1f} s) |" if "cold" in row else " - |") if cold else "")
            ok = "" if row["ratio"] <= rec["target"] else " (over)"
            lines.append(f"| {method} | {ray['round_s']:.1f} s | {svc['round_s']:.1f} s | x{row['ratio']:.2f}{ok} | "
                         f"{svc['fit_max_s'] or 0:.1f} s | {svc['startup_s'] or 0:.1f} s | {svc['load_s'] or 0:.2f} s | "
                         f"{svc['overhead_s'] or 0:.1f} s |{colds} {before} | {ray['load_before']:.1f} / "
                         f"{svc['load_before']:.1f} |")
        within = [m for m, r in rec["methods"].items() if r["ratio"] <= rec["target"]]
        over = [m for m, r in rec["methods"].items() if r["ratio"] > rec["target"]]
        fixed = statistics.fmean((r["service"]["startup_s"] or 0) + (r["service"]["overhead_s"] or 0)
                                 for r in rec["methods"].values())
        lines += ["", f"Within x{rec['target']}: {', '.join(within) or 'none'}; over: {', '.join(over) or 'none'}. "
                      f"What a deployment round pays that a Ray round does not, start-ups and overhead together: "
                      f"{fixed:.1f} s on average over these methods, whatever their compute."]
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
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
