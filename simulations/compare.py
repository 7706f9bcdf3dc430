"""Compare runner: several methods, same data, same partition, same seeds -> one table.

    python -m simulations.compare simulations/experiments/demo_baselines.toml
    python -m simulations.compare simulations/experiments/sst2_baselines.toml --seeds 0 1 2

An experiment file holds overrides only (everything else is pyproject's default),
with the run-config's own keys (shared ones, and ``<method>.<key>`` for a method's):

    methods = ["fedprompt", "bbt-fed"]      # what to compare
    seeds = [0, 1, 2]                       # one run per method and seed
    num-supernodes = 10                     # simulated clients
    [run-config]                            # overrides of every run
    dataset = "../shared/data/sst2"
    bbt-fed.local-steps = 4                 # a method's key: used by that method's runs only
    fedprompt.local-steps = 4
    [method.bbt-fed]                        # overrides of one label's runs only
    bbt-fed.popsize = 8

A label in ``methods`` that is not a registered method is a *variant*: its table
``[method.<label>]`` must say which method it runs (``method = "feddls"``) and holds
the variant's overrides; the run's ``run-name`` is the label and the table has one
row per label (e.g. ``feddls-phi3``, ``feddls-phi5``, ``feddls-full``).

``holdouts = ["books", "dvd", ...]`` runs every (method, seed) once per entry with
``holdout`` set to it: the group cross-validation of FedDLS §5.1, where each run's
held-out clients never train and give the NP accuracy. With ``rotate-holdouts = true``
the i-th seed runs only with the i-th holdout (cyclically): one run per seed, each
group held out in turn, at 1/len(holdouts) of the cost.

``engine = "inprocess"`` runs each planned run through the server's own round loop in this
process (:mod:`simulations.inprocess`: the ServerApp's server and strategy, the ClientApp's
clients behind in-process proxies) instead of Flower's simulation engine in a fresh process
(``"flower"``, the default): the same round math and records without a Ray start-up per run,
for studies of many short runs. ``engine = "deployment"`` runs each through Flower's deployment
engine on this machine (:mod:`simulations.deployment`: a SuperLink and one SuperNode per
partition on loopback, each behind fedtext's node service, as ``deploy/supernode.sh`` starts a
node), the processes and messages of an edge deployment, without Ray. ``study = "<name>"``
makes the experiment a *study* (:mod:`simulations.studies`): ``simulations/studies/<name>.py``
makes its table from the finished runs, written as ``table.md`` instead of the comparison table;
a study module may bring engines of its own (its ``ENGINES``: the cost study's one client round
in a fresh process, the memory study's round under a cgroup limit, the deployment study's
SuperNodes without warm ClientApp processes or without the node service). A
``[method.<label>]`` table may also set the runner's own ``engine`` and ``num-supernodes`` for
that label's runs (:data:`LABEL_KEYS`: the deployment study runs one run-config under four
engines, the scale study one per federation size); they are not run-config keys and never reach
the run.

After each run it starts, the runner appends one line to ``<out>/launches.jsonl``
(:func:`launch_line`): the label, seed, holdout, engine, clients, the launch time, the wall
seconds from launch to exit (process and Ray start-up included, which no run record can see),
this machine's 1-minute load average at launch and at exit (what else ran beside it), the exit
status, the id of the finished run it left (``None`` if none), the checkout's commit at launch
(a deployment run's record names none: its code is the app bundle ``flwr run`` packed from the checkout),
and for a resume the run it resumed and the round its checkpoint held (``resumed``, ``resumed_after``).

``--profile paper`` runs the experiment's ``[profile.paper]`` instead (:func:`with_profile`):
the paper's backbone, clients, shots, rounds and budgets, each key citing its source, for a
machine with a GPU and a hub. What the profile ``requires`` (``gpu``, ``hub``) is checked
before anything runs (:func:`preflight`: one line where torch sees no GPU or the backbone
cannot be read), and its results go to ``<default out>-paper``. A hub *dataset* a profile
names (``dataset = "ag_news"``) is not checked there: its first run fails in one line.

The output folder (``--out``; default :func:`default_out`: ``simulations/results/<stem>``
of this checkout for an experiment file inside it, ``<file's folder>/results/<stem>``
for one elsewhere) gets ``experiment.json`` (name, file, methods, seeds), which the
dashboard and ``python -m simulations.plot`` group runs by. Every run goes through
Flower's simulation engine in a fresh process (:mod:`simulations.simulate`) and writes
its records under ``<out>/runs/``. The partition depends on (dataset, partition, alpha,
seed, number of clients) alone, so all methods of a seed see the same clients.

A rerun skips every planned run that already *finished* under ``<out>/runs/`` (one line
per skipped run), so an interrupted sweep continues where it stopped and a finished one
starts nothing. A run of the same run-config and federation size that stopped before its
last round (``failed``: an error or a signal, recorded; ``stale``: killed without a word, no
heartbeat for ``stale-after-s``) and left a checkpoint is *resumed* from it (``resume=<its id>``,
:func:`resumable_run`: the furthest such run), not redone: an hour-long run stopped after 40 of
50 rounds costs 10 more rounds, not 50, and its records equal an uninterrupted run's round for
round (``docs/records.md``). Its checkpoint's meta is checked first as the server checks it
(signed with this user's key, bound to the run, the run's own config, rounds left); one that
fails the check, whose resume its server already refused at that round, of an unknown federation
size, or whose folder a live process still locks (:func:`fedtext.records.writer.hold_run`) is
not resumed, the line saying why, and the run is redone from the start. The runner's own engines resume (:data:`RESUMES`); a study's runs only where
the study says ``RESUMES = True`` (the accuracy studies): a timing study's launch is what it
measures. SIGTERM, SIGHUP or SIGINT to the runner (:func:`_stop_on_signal`) records the
in-process run it stops as ``failed`` and exits, or passes SIGTERM on to a run's own process
(:func:`stop_child`): either way a rerun resumes it. *Same run* (:func:`same_run`): the planned run's full run-config (the
experiment's overrides on the defaults) and the recorded one agree on variant, seed,
holdout and every other key both have, except :data:`NOT_COMPARED` (where records go and
how a run is watched). So an edited experiment file, or a changed default, reruns what it
changes; a key added to the harness after a run was recorded does not (its default is
taken to be the old behaviour). A run the runner launched with another number of clients
(``launches.jsonl``: another partition, though the run-config is the same) is another run.
Failed, stale and unfinished runs without a checkpoint to resume are redone; a ``running``
one (its heartbeat fresh: another process may still write it) is never taken over.

The table (markdown and CSV: final and best accuracy, KB up/down per client-round, total
MB, model queries, peak client memory, wall time; mean ± std over seeds) is built from
the records only: finished runs, one per (variant, seed, holdout), the newest where a
seed finished more than once (:func:`simulations.tables.one_run_per_seed`). Where a
variant has fewer runs than the experiment asks for, a note under the markdown table
names the missing seeds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pandas as pd

from fedtext.common.config import ConfigError, RunConfig
from fedtext.records.probes import machine_line, short_commit
from fedtext.records.reader import FINISHED, load_run, run_status, runs_under
from fedtext.records.signals import finish_open_runs, install_unless_ignored
from fedtext.records.writer import open_recorders, run_in_use
from simulations.tables import compare_table, load_runs, one_run_per_seed, run_key, to_markdown

REPO = Path(__file__).resolve().parents[1]  # the checkout whose simulations/results/ takes its experiments
# Run-config keys that say where a run's records go and how it is watched, not what it
# computes: a finished run recorded under another output folder is the same run.
NOT_COMPARED = frozenset({"output-dir", "resume", "stale-after-s"})


# What a [method.<label>] table may set besides run-config keys: how the runner runs that label's
# runs (the experiment's own ``engine`` / ``num-supernodes`` otherwise), never handed to the run.
LABEL_KEYS = frozenset({"engine", "num-supernodes"})
LAUNCHES = "launches.jsonl"  # <out>/launches.jsonl: one line per run the runner started (launch_line)
EXPERIMENT_KEYS = frozenset({"methods", "seeds", "holdouts", "rotate-holdouts", "num-supernodes", "run-config", "method",
                             "description", "profile", "engine", "study"})
# What a [profile.<name>] table may set: the experiment keys that say how the runs are
# configured (not which methods run: a profile changes the setting, not the comparison).
# ``extends`` names another profile of the same file whose setting this one starts from (a variant: the same
# harness over more rounds) so that a setting is written once.
PROFILE_KEYS = frozenset({"description", "extends", "num-supernodes", "seeds", "run-config", "method", "requires"})
# What a profile's ``requires`` may name: checked before anything runs (:func:`preflight`).
REQUIREMENTS = frozenset({"gpu", "hub"})


def load_experiment(path: Path) -> dict[str, Any]:
    exp = tomllib.loads(path.read_text())
    unknown = set(exp) - EXPERIMENT_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown experiment keys {sorted(unknown)}")
    if "study" in exp and not (STUDIES / f"{exp['study']}.py").is_file():
        raise ConfigError(f"{path}: study = {exp['study']!r}: no simulations/studies/{exp['study']}.py "
                          f"(studies: {', '.join(sorted(p.stem for p in STUDIES.glob('[!_]*.py')))})")
    engines = engines_of(load_study(exp))
    for where, table in [("", exp), *((f"[method.{label}] ", t) for label, t in exp.get("method", {}).items())]:
        if table.get("engine", "flower") not in engines:
            raise ConfigError(f"{path}: {where}engine = {table['engine']!r}: one of {', '.join(sorted(engines))}")
    for name, profile in exp.get("profile", {}).items():
        bad = set(profile) - PROFILE_KEYS
        if bad:
            raise ConfigError(f"{path}: [profile.{name}] has unknown keys {sorted(bad)} "
                              f"(known: {', '.join(sorted(PROFILE_KEYS))})")
        if set(profile.get("requires", [])) - REQUIREMENTS:
            raise ConfigError(f"{path}: [profile.{name}] requires = {profile['requires']}: each one of "
                              f"{', '.join(sorted(REQUIREMENTS))}")
        profile_chain(exp.get("profile", {}), name, where=f"{path}: ")
    return exp


def profile_chain(profiles: dict[str, Any], name: str, where: str = "") -> list[str]:
    """``name`` and the profiles it extends, the furthest first (``["t1", "t1-steady"]``).

    Raises
    ------
    ConfigError
        ``extends`` names no profile of the file, or the chain comes back to a profile it passed.
    """
    chain = [name]
    while "extends" in profiles[chain[0]]:
        parent = profiles[chain[0]]["extends"]
        if not isinstance(parent, str) or parent not in profiles:
            raise ConfigError(f"{where}[profile.{chain[0]}] extends = {parent!r}: not a profile of this file "
                              f"(profiles: {', '.join(sorted(profiles))})")
        if parent in chain:
            raise ConfigError(f"{where}[profile.{name}] extends in a circle: {' -> '.join([*reversed(chain), parent])}")
        chain.insert(0, parent)
    return chain


def with_profile(exp: dict[str, Any], name: str | None) -> dict[str, Any]:
    """The experiment with its ``[profile.<name>]`` applied (``name`` None: unchanged).

    A profile is the same comparison in another setting, typically ``paper``: the
    backbone, shots, clients, rounds and budgets as the paper ran them. Its
    ``run-config`` keys override the experiment's ``[run-config]`` key by key, its
    ``[profile.<name>.method.<label>]`` tables override that label's, and its
    ``num-supernodes`` / ``seeds`` replace the experiment's; ``methods`` stay. A profile with
    ``extends = "<other>"`` is applied after the one it names (which may extend another), key by
    key the same way; its ``requires`` adds to theirs.

    Raises
    ------
    ConfigError
        The experiment has no such profile.
    """
    if name is None:
        return exp
    profiles = exp.get("profile", {})
    if name not in profiles:
        raise ConfigError(f"the experiment has no [profile.{name}] (profiles: {', '.join(sorted(profiles)) or 'none'})")
    out = {k: v for k, v in exp.items() if k != "profile"}
    out["run-config"] = flatten(exp.get("run-config", {}))
    out["method"] = {label: flatten(table) for label, table in exp.get("method", {}).items()}
    out["requires"] = []
    for step in profile_chain(profiles, name):  # the profile it extends first, so that this one's keys win
        profile = profiles[step]
        out["run-config"] = {**out["run-config"], **flatten(profile.get("run-config", {}))}
        for label, table in profile.get("method", {}).items():
            out["method"][label] = {**out["method"].get(label, {}), **flatten(table)}
        for key in ("num-supernodes", "seeds"):
            if key in profile:
                out[key] = profile[key]
        out["requires"] += [r for r in profile.get("requires", []) if r not in out["requires"]]
    return out


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML's nested tables of dotted keys -> Flower's flat ``a.b`` keys."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def for_method(overrides: dict[str, Any], method: str) -> dict[str, Any]:
    """The overrides a ``method`` run takes: shared keys and its own ``<method>.*``, not
    the keys meant for the other methods of the experiment."""
    from fedtext.common.registry import METHODS

    return {k: v for k, v in overrides.items() if "." not in k or k.split(".", 1)[0] not in METHODS
            or k.split(".", 1)[0] == method}


def plan(exp: dict[str, Any], seeds: list[int] | None) -> list[dict[str, Any]]:
    """One run-config override dict per (method or variant, seed, holdout), validated
    before anything runs."""
    from fedtext.common.registry import METHODS

    labels = exp.get("methods", [])
    for label in labels:
        if label not in METHODS and "method" not in exp.get("method", {}).get(label, {}):
            raise ConfigError(
                f"unknown method '{label}' (choose one of: {', '.join(sorted(METHODS))}); a variant "
                f'label needs [method.{label}] with method = "<one of them>"'
            )
    holdouts = exp.get("holdouts", [None])
    runs = []
    # seed-major: an interrupted sweep still has every method for the seeds it finished
    for i, seed in enumerate(seeds if seeds is not None else exp.get("seeds", [0])):
        for holdout in [holdouts[i % len(holdouts)]] if exp.get("rotate-holdouts") else holdouts:
            for label in labels:
                own = {k: v for k, v in flatten(exp.get("method", {}).get(label, {})).items() if k not in LABEL_KEYS}
                method = own.get("method", label)
                ov = {**for_method(flatten(exp.get("run-config", {})), method), **own, "method": method, "seed": seed}
                if label != method:
                    ov["run-name"] = label
                if holdout is not None:
                    ov["holdout"] = str(holdout)
                RunConfig.from_run_config(ov, METHODS)
                runs.append(ov)
    if not runs:
        raise ConfigError("experiment lists no methods")
    return runs


def preflight(runs: list[dict[str, Any]], requires: list[str]) -> None:
    """Check, before anything runs, what a profile needs: every run's backbone readable
    (:func:`fedtext.backbone.check_model`: the hub, a local folder or a shipped shape with
    ``weights=random``), its ``device`` and
    ``precision`` usable here (:meth:`fedtext.backbone.devices.Precision.of`), and a CUDA GPU where
    ``requires`` names ``gpu``. Each failure is one :class:`ConfigError` line. Imports
    torch and transformers, so only ``--profile`` pays for it."""
    import torch

    from fedtext.backbone import check_model
    from fedtext.backbone.devices import Precision
    from fedtext.common.registry import METHODS

    if "gpu" in requires and not torch.cuda.is_available():
        raise ConfigError(f"this profile needs a CUDA GPU (requires = {requires}); torch {torch.__version__} "
                          f"sees none: run it on a GPU machine, or without --profile")
    checked: set[tuple[str, str, str, str]] = set()
    for ov in runs:
        cfg = RunConfig.from_run_config(ov, METHODS)
        if (key := (cfg.model, cfg.weights, cfg.device, cfg.precision)) not in checked:
            checked.add(key)
            Precision.of(cfg.device, cfg.precision)
            check_model(cfg.model, cfg.weights)


def default_out(experiment: Path, profile: str | None = None) -> Path:
    """The output folder of an experiment file when ``--out`` is not given:
    ``<checkout>/simulations/results/<stem>`` for a file inside this checkout, else
    ``<the file's folder>/results/<stem>`` (a file elsewhere never writes into the checkout);
    ``<stem>-<profile>`` for a ``[profile.<name>]``'s runs."""
    path = experiment.resolve()
    base = REPO / "simulations" / "results" if path.is_relative_to(REPO) else path.parent / "results"
    return base / (experiment.stem + (f"-{profile}" if profile else ""))


def resolved(overrides: dict[str, Any]) -> dict[str, Any]:
    """The run-config a planned run records (``config.json``'s ``config``, less the keys the
    server derives), as JSON gives it back (tuples read as lists)."""
    from fedtext.common.registry import METHODS

    return json.loads(json.dumps(RunConfig.from_run_config(overrides, METHODS).to_run_config(), default=str))


def same_run(planned: dict[str, Any], recorded: dict[str, Any]) -> bool:
    """Whether a recorded run-config is the run ``planned`` (a :func:`resolved` config) asks
    for: same variant, seed and holdout, and the same value of every other key both hold,
    but for :data:`NOT_COMPARED`."""
    return run_key(planned) == run_key(recorded) and all(
        recorded[k] == v for k, v in planned.items() if k in recorded and k not in NOT_COMPARED)


def finished_run(planned: dict[str, Any], runs: list[dict[str, Any]]) -> str | None:
    """The id of a finished run among ``runs`` (:func:`fedtext.records.load_run` dicts) that
    is :func:`same_run` as ``planned``, or None."""
    return next((Path(r["dir"]).name for r in runs if r["status"] == FINISHED and r["config"]
                 and isinstance(r["config"].get("config"), dict) and same_run(planned, r["config"]["config"])),
                None)


# The statuses of a run the runner resumes: it stopped before its last round, an error or a signal recorded
# (``failed``) or killed without a word (``stale``: no heartbeat for stale-after-s). A ``running`` run's heartbeat is
# fresh: its process may still be writing it, so it is never taken over; nor is a stale one whose folder a live process
# on this machine still locks (fedtext.records.writer.hold_run: a suspended process).
RESUMABLE = frozenset({"failed", "stale"})


def resumable_run(overrides: dict[str, Any], planned: dict[str, Any], runs: list[dict[str, Any]],
                  clients: int | None = None, sizes: dict[str, int] | None = None,
                  failed_resumes: dict[str, int] | None = None) -> tuple[str | None, int | None, str]:
    """``(run id, round, line)``: the run to resume among ``runs`` (:func:`fedtext.records.load_run`
    dicts) that are :func:`same_run` as ``planned`` and stopped before their last round
    (:data:`RESUMABLE`) with a checkpoint: of those launched with ``clients`` (:func:`size_of`
    with ``sizes``; a run whose size is not known is not resumed: its partition may differ),
    unlocked (:func:`fedtext.records.writer.run_in_use`), whose checkpoint passes the server's
    own check (:func:`checkpoint_round`) and whose last resume did not fail before the server
    reopened it at the same round (``failed_resumes``: :func:`failed_resumes`; a resume that
    failed later, in a round, is tried again), the furthest (its checkpoint's round), the newest
    of equals; and that round. Else ``None`` twice. The line says which run resumes after which
    round, or why the stopped runs are not resumed (the run is then redone from the start), or is
    empty where no run stopped part-way."""
    from fedtext.server.checkpoint import FILE

    stopped = [r for r in runs if r["config"] and isinstance(r["config"].get("config"), dict)
               and run_status(r)[0] in RESUMABLE and (Path(r["dir"]) / FILE).is_file()
               and same_run(planned, r["config"]["config"])]
    why: list[str] = []
    fit: list[tuple[int, str, dict[str, Any]]] = []
    for run in sorted(stopped, key=lambda r: Path(r["dir"]).name, reverse=True):  # names begin with the start time
        name = Path(run["dir"]).name
        size = size_of(run, sizes or {}) if clients is not None else None
        if clients is not None and size != clients:
            why.append(f"{name}: launched with {size if size is not None else 'an unknown number of'} clients, "
                       f"not {clients}")
            continue
        if run_in_use(Path(run["dir"])):
            why.append(f"{name}: still open in a live process")
            continue
        try:
            done = checkpoint_round({**overrides, "resume": name}, run["config"]["config"])
        except Exception as exc:  # noqa: BLE001 - whatever the check meets (a refusal, an unreadable file), one line
            why.append(f"{name}: {exc if isinstance(exc, ConfigError) else f'{type(exc).__name__}: {exc}'}")
            continue
        reopened = {e.get("from_round") for e in run["config"].get("resumed") or [] if isinstance(e, dict)}
        if (failed_resumes or {}).get(name) == done and done not in reopened:
            why.append(f"{name}: its resume after round {done} failed before, refused by the run's server "
                       f"(see {LAUNCHES})")
            continue
        fit.append((done, name, run))
    if fit:
        done, name, run = max(fit, key=lambda f: (f[0], f[1]))
        return name, done, f"resuming {name} after round {done} ({run_status(run)[0]})"
    if why:
        return None, None, f"not resumed ({'; '.join(why)}): redone from the start"
    return None, None, ""


def checkpoint_round(overrides: dict[str, Any], stored: dict[str, Any]) -> int:
    """The round after which ``overrides`` (with ``resume``) would continue its run: the
    server's own check (:func:`fedtext.server_app.resume_checkpoint`: the run folder, the
    run-config against the run's, the checkpoint's signature with this user's key, its binding
    to the run, rounds left) before anything starts, reading the checkpoint's meta alone
    (:func:`fedtext.server.checkpoint.peek`: no array decompressed, nothing unpickled). The keys
    the server derives from the data (:data:`fedtext.common.config.DERIVED_KEYS`) are the run's
    own here, and the model's array count and sizes are not known: the server checks both
    when the run starts, and a resume it refuses there fails its launch
    (:func:`failed_resumes` keeps it from being tried again at the same round)."""
    from fedtext.common.config import DERIVED_KEYS
    from fedtext.common.registry import METHODS
    from fedtext.server.checkpoint import UNBOUNDED, peek
    from fedtext.server_app import resume_checkpoint

    cfg = RunConfig.from_run_config(overrides, METHODS)
    config = {**cfg.to_run_config(), **{k: stored[k] for k in DERIVED_KEYS if k in stored}}
    return resume_checkpoint(cfg, config, UNBOUNDED, read=peek).round


def failed_resumes(out: Path) -> dict[str, int]:
    """Run id -> the round after which the last launch that resumed it started, where that
    launch failed (``<out>/launches.jsonl``, :func:`launch_line`'s ``resumed`` and
    ``resumed_after``; the last line of a run wins): :func:`resumable_run` does not try again
    a resume its server refused."""
    last = {line["resumed"]: line for line in launch_lines(out) if line.get("resumed")}
    return {run: int(line["resumed_after"]) for run, line in last.items()
            if line.get("exit") != 0 and isinstance(line.get("resumed_after"), int)}


def missing_note(rows: pd.DataFrame, runs: list[dict[str, Any]]) -> str:
    """A note naming, per label, the planned (seed, holdout) runs the table ``rows``
    (:func:`simulations.tables.one_run_per_seed`'s) lack; ``""`` when none is missing."""
    have = set(zip(rows["variant"], rows["seed"], rows["holdout"], strict=True))
    missing: dict[str, list[str]] = {}
    wanted: dict[str, int] = {}
    for ov in runs:
        label, seed, holdout = key = run_key(ov)
        wanted[label] = wanted.get(label, 0) + 1
        if key not in have:
            missing.setdefault(label, []).append(f"seed {seed}" + (f" holdout {holdout}" if holdout else ""))
    if not missing:
        return ""
    parts = [f"{label} has {wanted[label] - len(m)} of {wanted[label]} (missing {', '.join(m)})"
             for label, m in missing.items()]
    return "Fewer finished runs than the experiment asks for: " + "; ".join(parts) + ".\n"


def run_one(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
            gpus_per_client: float = 0.0, cpus_per_client: float = 0.0, env: dict[str, str] | None = None) -> int:
    """One simulation in a fresh process (a private Ray per run, or the cluster at
    ``ray_address``; ``gpus_per_client`` / ``cpus_per_client``: Ray GPUs / CPUs per client actor,
    simulate's default where 0; ``env``: over this process's environment, e.g. torch's threads)."""
    cmd = [sys.executable, "-m", "simulations.simulate", "--num-supernodes", str(num_supernodes), "--run-config",
           pairs_text(overrides)]
    if ray_address:
        cmd += ["--ray-address", ray_address]
    if gpus_per_client:
        cmd += ["--gpus-per-client", str(gpus_per_client)]
    if cpus_per_client:
        cmd += ["--cpus-per-client", str(cpus_per_client)]
    return run_logged(cmd, log_path, env)


def run_deployment(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
                   gpus_per_client: float = 0.0, options: tuple[str, ...] = ()) -> int:
    """One run through Flower's deployment engine on this machine (``engine = "deployment"``:
    ``python -m simulations.deployment``, a SuperLink and ``num_supernodes`` SuperNodes on loopback,
    each behind fedtext's node service), its record under the run's ``output-dir``; the launcher's
    lines go to ``log_path``, its processes' logs to ``<log_path without .log>-logs/``.
    ``options``: more of the launcher's flags (the deployment study's ``--warm-clientapps 0``,
    ``--no-node-service``). No Ray: ``--ray-address`` and ``--gpus-per-client`` are refused
    before anything runs (:func:`main`)."""
    pairs = {k: v for k, v in overrides.items() if k != "output-dir"}  # the launcher's --output-dir sets it
    cmd = [sys.executable, "-m", "simulations.deployment", "--num-supernodes", str(num_supernodes), "--run-config",
           pairs_text(pairs), "--output-dir", str(overrides["output-dir"]),
           "--logs", str(log_path.with_name(f"{log_path.stem}-logs")), *options]
    return run_logged(cmd, log_path)


def pairs_text(overrides: dict[str, Any]) -> str:
    """``--run-config``'s ``key=value`` pairs of ``simulations.simulate`` and ``simulations.deployment``
    (:func:`simulations.simulate.parse_pairs` reads them back)."""
    return " ".join(f"{k}={_quote(v)}" for k, v in overrides.items())


def run_logged(cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> int:
    """``cmd`` in a fresh process (this one's environment with ``env`` over it), its output to
    ``log_path`` and its progress lines to the console; its exit status."""
    with open(log_path, "w") as log:
        env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}  # progress lines as they happen
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                errors="replace")
        try:
            for line in proc.stdout:  # progress lines to the console, everything to the log
                log.write(line)
                log.flush()
                if "fedtext round" in line or "configuration error" in line or "Error" in line:
                    print("   ", line.split("fedtext ", 1)[-1].rstrip(), flush=True)
            return proc.wait()
        except BaseException:  # the runner stopped (_stop_on_signal): so does its run
            stop_child(proc, log)
            raise


CHILD_STOP_S = 120.0  # what a stopped run's process gets to record itself and stop its own (a deployment's nodes)


def stop_child(proc: subprocess.Popen, log: Any = None) -> None:
    """SIGTERM to a run's process the runner started, then its wait (:data:`CHILD_STOP_S`, then
    SIGKILL), its last output drained to ``log`` meanwhile (a child blocked on a full pipe would
    never stop): it records itself ``failed: terminated by SIGTERM`` with its checkpoint, which a
    rerun resumes, instead of running on unwatched beside the rerun's duplicate."""
    if proc.poll() is not None:
        return
    print(f"    stopping the run's process {proc.pid} (SIGTERM; up to {CHILD_STOP_S:.0f} s)", file=sys.stderr,
          flush=True)
    proc.send_signal(signal.SIGTERM)
    try:
        rest = proc.communicate(timeout=CHILD_STOP_S)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        rest = proc.communicate()[0]
    if log is not None and rest:
        log.write(rest)
        log.flush()


def run_in_process(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
                   gpus_per_client: float = 0.0) -> int:
    """One run through the server's own round loop in this process (``engine = "inprocess"``:
    :func:`simulations.inprocess.run`, records under the run's ``output-dir``); its lines go to the
    console, a failure's traceback to ``log_path``. No Ray: ``--ray-address`` and
    ``--gpus-per-client`` are refused before anything runs (:func:`main`)."""
    import traceback

    from fedtext.records.signals import exit_reason
    from simulations.inprocess import run

    try:
        run(overrides, Path(overrides["output-dir"]), clients=num_supernodes)
    except Exception as exc:  # noqa: BLE001 - one failed run is recorded and counted, the sweep goes on
        # the round loop records its own failures (RecordingServer.fit); one after the record opened and before the
        # loop (the strategy's start, a restore) left the run open, read as ``running`` until its heartbeat went
        # stale (stale-after-s): recorded now, as simulations.simulate records its run's
        finish_open_runs("failed", exit_reason(exc))
        log_path.write_text(traceback.format_exc())
        print(f"    failed: {type(exc).__name__}: {exc} (traceback: {log_path})", flush=True)
        return 1
    return 0


def _quote(v: Any) -> str:
    return f"'{v}'" if isinstance(v, str) and (" " in v or not v) else str(v)


#: The experiment's ``engine`` -> how one planned run is run (same arguments, the exit status). Looked up
#: by name when a run starts, so that a test's stand-in for ``run_one`` is the one called.
ENGINES = {"flower": lambda *args: run_one(*args), "inprocess": lambda *args: run_in_process(*args),
           "deployment": lambda *args: run_deployment(*args)}
# The engines whose runs resume a run of the same run-config that stopped part-way (:func:`resumable_run`): the
# runner's own. A study's own engines (its ``ENGINES``) measure a launch and always start afresh.
RESUMES = frozenset(ENGINES)
# The runner's engines without Ray (``--ray-address`` and ``--gpus-per-client`` are refused for them) -> how each runs.
WITHOUT_RAY = {"inprocess": "runs in this process", "deployment": "runs on Flower's deployment engine"}
STUDIES = REPO / "simulations" / "studies"  # a study's table module: simulations/studies/<study>.py


def load_study(exp: dict[str, Any]) -> Any | None:
    """The experiment's study module (:mod:`simulations.studies`), or ``None`` for a comparison."""
    import importlib

    return importlib.import_module(f"simulations.studies.{exp['study']}") if "study" in exp else None


def engines_of(study: Any | None) -> dict[str, Any]:
    """The engines an experiment may name: the runner's (:data:`ENGINES`) and its study's own
    (the study module's ``ENGINES``, if any)."""
    return {**ENGINES, **getattr(study, "ENGINES", {})}


def label_settings(exp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per label of ``exp``: the runner's ``engine`` and ``num-supernodes`` for its runs, the
    label's ``[method.<label>]`` value (:data:`LABEL_KEYS`) or else the experiment's."""
    default = {"engine": exp.get("engine", "flower"), "num-supernodes": int(exp.get("num-supernodes", 4))}
    return {label: {**default, **{k: v for k, v in flatten(exp.get("method", {}).get(label, {})).items()
                                  if k in LABEL_KEYS}} for label in exp.get("methods", [])}


def log_stem(label: str, seed: int, holdout: str | None = None) -> str:
    """``<label>-s<seed>[-<holdout>]``: a launch's log is ``<out>/<stem>.log``, and a deployment run's
    processes log to ``<out>/<stem>-logs/`` (:func:`run_deployment`)."""
    return f"{label}-s{seed}" + (f"-{holdout}" if holdout else "")


def launch_line(ov: dict[str, Any], engine: str, clients: int, launched: float, wall_s: float, rc: int,
                run: str | None, load: tuple[float, float] | None = None,
                commit: str | None = None, resumed_after: int | None = None) -> dict[str, Any]:
    """The ``launches.jsonl`` line of one run the runner started (module doc); ``load``: the 1-minute
    load average at launch and at exit; ``commit``: the checkout's at launch (7 hex digits, None where
    git cannot tell); ``resumed``: the run it resumed (``ov``'s ``resume``, else None) and
    ``resumed_after`` the round its checkpoint had (:func:`resumable_run`)."""
    before, after = load if load is not None else (None, None)
    return {"label": ov.get("run-name") or ov["method"], "seed": ov["seed"], "holdout": ov.get("holdout"),
            "engine": engine, "num-supernodes": clients, "launched_epoch": round(launched, 3),
            "wall_s": round(wall_s, 3), "load_before": before, "load_after": after, "exit": rc, "run": run,
            "commit": commit, "resumed": ov.get("resume") or None, "resumed_after": resumed_after}


def read_launches(out: Path) -> dict[str, dict[str, Any]]:
    """Run id -> the ``<out>/launches.jsonl`` line (:func:`launch_line`) of the launch that left it, the
    last line naming a run winning; launches that left no run are not kept, nor is a run recorded
    before the file existed (or elsewhere)."""
    return {line["run"]: line for line in launch_lines(out) if line.get("run")}


def launch_lines(out: Path) -> list[dict[str, Any]]:
    """``<out>/launches.jsonl``'s lines (:func:`launch_line`), oldest first; none where it does not exist."""
    path = out / LAUNCHES
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def launched_sizes(out: Path) -> dict[str, int]:
    """Run id -> the number of clients the runner launched it with (:func:`read_launches`)."""
    return {run: int(line["num-supernodes"]) for run, line in read_launches(out).items()}


def size_of(run: dict[str, Any], sizes: dict[str, int]) -> int | None:
    """The number of clients ``run`` (a :func:`fedtext.records.load_run` dict) was launched with: its
    ``launches.jsonl`` line's (``sizes``: :func:`launched_sizes`), else its record's provenance (the
    simulated SuperNodes, or the nodes its grid had at the start); ``None`` where neither says."""
    if (name := Path(run["dir"]).name) in sizes:
        return sizes[name]
    provenance = (run["config"] or {}).get("provenance") or {}
    size = provenance.get("num_supernodes") or provenance.get("nodes_at_start")
    return int(size) if size else None


def run_planned(runs: list[dict[str, Any]], out: Path, num_supernodes: int, engine: str = "flower",
                ray_address: str = "", gpus_per_client: float = 0.0,
                settings: dict[str, dict[str, Any]] | None = None, study: Any | None = None) -> int:
    """Every planned run not yet finished under ``<out>/runs`` (:func:`finished_run`), one after
    another, by ``engine`` (:func:`engines_of` ``study``) with ``num_supernodes`` clients, or by
    its label's own (``settings``: :func:`label_settings`); returns how many failed. Each run
    started leaves a line in ``<out>/launches.jsonl`` (:func:`launch_line`)."""
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    recorded = list(runs_under(runs_dir))
    sizes = launched_sizes(out)
    engines = engines_of(study)
    failed = 0
    for i, ov in enumerate(runs, 1):
        ov = {**ov, "output-dir": str(runs_dir.resolve())}
        label = ov.get("run-name") or ov["method"]
        own = (settings or {}).get(label, {"engine": engine, "num-supernodes": num_supernodes})
        clients = own["num-supernodes"]
        held = f" holdout={ov['holdout']}" if ov.get("holdout") else ""
        planned = resolved(ov)
        # a run launched with another number of clients is another run (another partition), though its
        # run-config is the same: the federation's size is the runner's, recorded in launches.jsonl only
        done = finished_run(planned, [r for r in recorded if size_of(r, sizes) in (clients, None)])
        if done:
            print(f"[{i}/{len(runs)}] {label} seed={ov['seed']}{held}: skipped, finished as {done}", flush=True)
            continue
        # a study resumes only where it says so (its RESUMES): a timing study's launch is what it measures
        resumes = own["engine"] in RESUMES and (study is None or (getattr(study, "RESUMES", False)
                                                                  and own["engine"] not in getattr(study, "ENGINES", {})))
        # only a run known to have this federation size: a partition depends on it, the run-config does not say it
        resumed, resumed_after, why = (resumable_run(ov, planned, recorded, clients, sizes, failed_resumes(out))
                                       if resumes else (None, None, ""))
        if resumed:
            ov = {**ov, "resume": resumed}
        by = f", {own['engine']}" if own["engine"] != engine else ""
        print(f"[{i}/{len(runs)}] {label} seed={ov['seed']}{held} ({clients} clients{by}){': ' + why if why else ''}",
              flush=True)
        load = os.getloadavg()[0]
        commit = short_commit()  # the code this launch runs, as the checkout has it
        t0 = time.time()
        # looked up when the run starts, so that a test's stand-in for run_one is the one called
        rc = engines[own["engine"]](ov, clients, out / f"{log_stem(label, ov['seed'], ov.get('holdout'))}.log",
                                    ray_address, gpus_per_client)
        wall = time.time() - t0
        failed += rc != 0
        # the run this launch left is among the folders it made: an older finished run of the same run-config
        # (another federation size) must not be named as this launch's
        known = {Path(r["dir"]).name for r in recorded} - {resumed}  # only the new folders (and the resumed one) are
        new = [load_run(c.parent, runs_dir) for c in sorted(runs_dir.rglob("config.json")) if c.parent.name not in known]
        recorded = [r for r in recorded if Path(r["dir"]).name != resumed] + new  # read again, not every record
        left = finished_run(planned, new)
        if left:
            sizes[left] = clients
        with (out / LAUNCHES).open("a") as fh:
            fh.write(json.dumps(launch_line(ov, own["engine"], clients, t0, wall, rc, left,
                                            (round(load, 2), round(os.getloadavg()[0], 2)), commit,
                                            resumed_after)) + "\n")
        print(f"    done in {wall:.0f} s (exit {rc})", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run methods side by side and write a comparison table.")
    ap.add_argument("experiment", type=Path, help="TOML file of overrides (see module docstring)")
    ap.add_argument("--seeds", type=int, nargs="+", help="override the experiment's seeds")
    ap.add_argument("--methods", nargs="+", help="override the experiment's methods")
    ap.add_argument("--out", type=Path, help="output folder (default: simulations/results/<experiment name> "
                    "for an experiment file inside this checkout, else results/<experiment name> beside the file)")
    ap.add_argument("--table-only", action="store_true", help="rebuild the table from existing records")
    ap.add_argument("--profile", help="run the experiment's [profile.<name>] setting, e.g. paper (the paper's "
                    "backbone and budgets; results under <out>-<name>)")
    ap.add_argument("--gpus-per-client", type=float, default=0.0, help="Ray GPUs per client actor (fractional: "
                    "0.25 runs four clients per GPU; see docs/performance.md)")
    ap.add_argument("--ray-address", default="", help="run on this running Ray cluster (see docs/performance.md)")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        exp = load_experiment(args.experiment)
        exp = with_profile(exp, args.profile)
        listed = {"methods": exp.get("methods"), "seeds": exp.get("seeds", [0])}  # the experiment's, for experiment.json
        if args.methods:
            exp["methods"] = args.methods
        runs = plan(exp, args.seeds)
        if args.profile and not args.table_only:
            preflight(runs, exp["requires"])
        settings = label_settings(exp)
        without = sorted({s["engine"] for s in settings.values()} & set(WITHOUT_RAY))
        if without and (args.ray_address or args.gpus_per_client):
            raise ConfigError(f"engine = \"{without[0]}\" {WITHOUT_RAY[without[0]]}, without Ray: drop --ray-address "
                              "and --gpus-per-client")
    except (ConfigError, tomllib.TOMLDecodeError, FileNotFoundError) as exc:
        print(f"fedtext: configuration error: {exc}", file=sys.stderr)
        return 2
    out = args.out or default_out(args.experiment, args.profile)
    name = default_out(args.experiment, args.profile).name
    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    n = int(exp.get("num-supernodes", 4))
    # marks the folder as one experiment: the dashboard and the plot command group by it. Its methods and
    # seeds are the experiment file's (with any --seeds asked): a sweep run a few labels at a time, in
    # processes side by side (docs/privacy.md), is still the one experiment the file describes
    (out / "experiment.json").write_text(json.dumps({
        "name": name, "file": str(args.experiment), "profile": args.profile, "methods": listed["methods"],
        "seeds": sorted(set(listed["seeds"]) | {ov["seed"] for ov in runs}), "num-supernodes": n,
    }, indent=2) + "\n")
    failed = 0
    study = load_study(exp)
    if not args.table_only:
        failed = run_planned(runs, out, n, exp.get("engine", "flower"), args.ray_address, args.gpus_per_client,
                             settings, study)
    if study is not None:  # a study's own table (simulations.studies), from the finished runs
        if not args.table_only and hasattr(study, "finish"):
            study.finish(out)
        text = study.table(out)
        (out / "table.md").write_text(text)
        print(text)
        return 1 if failed else 0
    rows = one_run_per_seed(load_runs(runs_dir))
    if rows.empty:
        print(f"fedtext: no finished run under {runs_dir}: no table", file=sys.stderr)
        return 1
    table = compare_table(rows)
    header = (
        f"<!-- {args.experiment}{f' --profile {args.profile}' if args.profile else ''} | {n} clients | {dt.date.today()} | "
        f"{machine_line()} -->\n"
    )
    note = missing_note(rows, runs)
    markdown = to_markdown(table) + (f"\n{note}" if note else "")
    (out / "table.md").write_text(header + markdown)
    table.to_csv(out / "table.csv", index=False)
    print(markdown)
    print(f"table: {out / 'table.md'} and {out / 'table.csv'}")
    return 1 if failed else 0


def _stop_on_signal(signum: int, frame: object) -> None:
    """SIGTERM/SIGHUP/SIGINT (``kill``, ``timeout``, a job scheduler, a closed terminal, Ctrl-C)
    stop the runner and what it runs, each run recorded ``failed: terminated by <signal>`` with
    its checkpoint kept, so that a rerun resumes it. An in-process run is recorded here and the
    process exits at once (its round's queued clients would train on for minutes, the run already
    read as stopped); a run in a process of its own is passed SIGTERM and waited for
    (:func:`stop_child`, through the ``SystemExit`` raised here). Python's default ended the
    runner at once and left that process running unwatched."""
    for sig in STOP_SIGNALS:  # one clean-up, not one per repeated or further signal
        signal.signal(sig, signal.SIG_IGN)
    in_process = bool(open_recorders())
    try:
        finish_open_runs("failed", f"terminated by {signal.Signals(signum).name}")
    finally:
        if in_process:
            sys.stdout.flush()
            os._exit(128 + signum)
        raise SystemExit(128 + signum)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)  # what stops the runner (_stop_on_signal)

if __name__ == "__main__":
    # Here, not in main(): the tests call main() in pytest's own process, whose signals are pytest's. A signal the
    # runner was started ignoring (nohup's SIGHUP, a background job's SIGINT) stays ignored
    install_unless_ignored(STOP_SIGNALS, _stop_on_signal)
    sys.exit(main())
