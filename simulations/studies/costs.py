"""What each method costs at the papers' scale, a study (:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/costs.toml                         # RoBERTa-large's shape
    python -m simulations.compare simulations/experiments/costs.toml --profile roberta-base  # another backbone
    python -m simulations.compare simulations/experiments/costs.toml --methods fes fedfsl    # some rows
    python -m simulations.compare simulations/experiments/costs.toml --table-only            # from the records
    python -m simulations.compare simulations/experiments/costs.toml --profile tiny --out /tmp/costs  # seconds
    python -m simulations.studies.costs --growth    # MiniLM-L6, RoBERTa-base, RoBERTa-large, then the growth figure

Bytes are shapes, memory is shapes and activations, time is FLOPs: none needs the papers'
trained weights, so the backbones here are shapes (fedtext/backbone/shapes.py,
``weights=random``): RoBERTa-large (355 M weights, D = 1,024, 24 layers), RoBERTa-base,
BERT-base. Their accuracy is never read.

Its runs are ``simulations/experiments/costs.toml``: every registered method, one row each, at
the settings its header says (one unit of local work per client-round, the papers' own settings
where they state them, each citing its source), RoBERTa-large's shape by default and the other
backbones as profiles (``roberta-base``, ``minilm``; ``paper``: the trained weights on a GPU;
``tiny``: a 2-layer RoBERTa, the pipeline in seconds).
The compare runner plans them and hands each to this study's engine ``"cost"``
(:func:`measure_in_subprocess`), which measures it in a fresh process (its memory its own):

1. **One client's local round, alone** (:func:`simulations.bench.timed_client_round`, no
   warm-up): its seconds; the peak resident memory during the round (the kernel's high-water
   mark reset once the client is built, so the frozen backbone is in it and loading is not);
   the weights back-propagated to (:class:`Backprop`: the leaves of every autograd graph a
   ``backward`` walks; 0 = forward only, FedDLS Table 1's "BP?"); the values sent each way;
   the sequences pushed through the backbone (model queries).
2. **One federated round** in that process (:mod:`simulations.inprocess`: the ServerApp's
   strategy and the fewest ClientApp clients its round takes, the experiment's
   ``num-supernodes``: one but for FedBPT's two, through Flower's message conversion, no Ray):
   bytes up and down per client-round from its last round's record (``bytes_up_per_client``,
   ``bytes_down_per_client``: the serialised arrays, fedtext/common/comm.py), and the server's
   seconds in ``aggregate_fit`` (all rounds).

The round's own run record is written into a temporary folder beside ``<out>/runs``, its row
(:data:`COST_FILE`: the row, the machine, when) next to it, and only then is the folder moved
into ``<out>/runs``: a run there is a finished measurement, which the runner's
:func:`simulations.compare.finished_run` skips on a rerun as it skips every finished run. A
measurement that fails (the kernel's out-of-memory killer's SIGKILL: FedDF at RoBERTa-large
on 24 GiB) leaves nothing in ``runs`` (a rerun tries it again) and one line in
``<out>/cost-failures.jsonl`` (:data:`FAILURES`), the engine's: the runner's
``launches.jsonl`` has its exit status too, but neither the backbone nor the error's text.

:func:`finish` (after new runs) writes ``<out>/<model>.json`` from them: the machine, the
date, the commit, every row in the registry's order (a failed one as ``{"error": ...}``) with
its keys, as the command before the runner wrote it, so the committed records render as they
did; where a record has rows of methods not measured here (a committed record whose runs are
not in this checkout, and ``--methods`` measured a few), those stay and the new rows replace
theirs (:func:`merged`). :func:`table` renders each record of a folder; :func:`paper_rows` sets the papers' own
figures beside the rows, with the ratio; ``python tools/generated.py`` writes them into each
paper's page and docs/performance.md from the committed records (each backbone's in its
profile's folder: ``simulations/results/costs/roberta-large.json``,
``simulations/results/costs-roberta-base/``, ``simulations/results/costs-minilm/``), and
``--growth`` draws ``simulations/results/costs/growth.png`` from the three.

Nothing here computes a setting: FeS's depth plan is the file's ``fes.frozen-layers = -1``
(fedtext's own rounding of FeS's 2/3 share, :func:`fedtext.methods.fes.model.planned_frozen`,
16 of 24 layers), not a number the engine would derive from the shape. A key the engine added
would be in the round's recorded run-config and not in the planned one, so no rerun would ever
find the run finished.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulations import compare

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = REPO / "simulations" / "experiments" / "costs.toml"
OUT = compare.default_out(EXPERIMENT)  # simulations/results/costs: RoBERTa-large's shape; a profile's: <OUT>-<profile>
PAPER_SHAPE = "roberta-large"  # the backbone of all five papers' main tables
# A method config's field for its local work: each method's key of it is set to 1 in the experiment file (one
# unit of local work a client-round); tests/unit/test_costs.py fails on a method with none of them
STEP_KEYS = ("local_steps", "max_local_steps", "steps")
COST_FILE = "cost.json"  # in a cost run's record folder: {"row", "machine", "measured_epoch"}
FAILURES = "cost-failures.jsonl"  # <out>/: one line per failed measurement, as cost.json without a run
# The study's engine runs this, with ``--one``, in a fresh process (a test's stand-in replaces it)
CHILD = [sys.executable, "-m", "simulations.studies.costs"]


def backbones() -> dict[str, str | None]:
    """Each backbone the experiment measures without a GPU or a hub -> the profile that measures it
    (None: the experiment's own run-config): the ``model`` of its run-config, the first profile of
    a backbone kept, a profile that ``requires`` something (``paper``) left out. Read from the
    experiment file, so that a backbone's folder is where its runs write."""
    exp = tomllib.loads(EXPERIMENT.read_text())
    found: dict[str, str | None] = {}
    for profile in [None, *exp.get("profile", {})]:
        setting = compare.with_profile(exp, profile)
        if not setting.get("requires"):
            found.setdefault(compare.flatten(setting.get("run-config", {}))["model"], profile)
    return found


def folder(model: str) -> Path:
    """Where ``model``'s record is: its profile's output folder (:func:`backbones`)."""
    return compare.default_out(EXPERIMENT, backbones()[model])


def command(model: str) -> str:
    """The command that measures ``model``'s rows: the experiment, with its profile's flag."""
    profile = backbones().get(model)
    return (f"python -m simulations.compare {EXPERIMENT.relative_to(REPO)}"
            + (f" --profile {profile}" if profile else ""))


# ------------------------------------------------------------------ measuring
class Backprop:
    """Counts the distinct weights that back-propagation reaches while active: each
    ``torch.autograd.backward`` (``Tensor.backward`` calls it) walks its graph from the
    outputs to the ``AccumulateGrad`` leaves, the tensors that receive a gradient. Patched
    in this measuring process only."""

    def __init__(self) -> None:
        self.leaves: dict[int, int] = {}  # id(tensor) -> its number of values
        self.calls = 0

    def _walk(self, tensors: Any) -> None:
        tensors = [tensors] if hasattr(tensors, "grad_fn") else list(tensors)
        stack, seen = [t.grad_fn for t in tensors if t.grad_fn is not None], set()
        while stack:
            fn = stack.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            variable = getattr(fn, "variable", None)
            if variable is not None:  # an AccumulateGrad node: a leaf that gets a .grad
                self.leaves[id(variable)] = variable.numel()
            stack.extend(next_fn for next_fn, _ in fn.next_functions)

    @contextmanager
    def active(self) -> Iterator[Backprop]:
        import torch.autograd

        original = torch.autograd.backward

        def counted(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self._walk(tensors)
            return original(tensors, *args, **kwargs)

        torch.autograd.backward = counted
        try:
            yield self
        finally:
            torch.autograd.backward = original

    @property
    def weights(self) -> int:
        return sum(self.leaves.values())


def measure(keys: dict[str, Any], into: Path, clients: int = 1) -> tuple[dict[str, Any], Path]:
    """One row (module doc), in this process: the client alone first, then the round, whose run
    record goes under ``into``; the row and that record's folder.

    Parameters
    ----------
    keys
        The run-config overrides of the planned run (its ``output-dir`` is not read: the round's
        records go under ``into``).
    into
        The folder the round's run record is written under.
    clients
        The round's in-process clients (the fewest its method's round takes).
    """
    import gc

    from fedtext.common.config import RunConfig
    from fedtext.common.registry import METHODS
    from simulations.bench import timed_client_round
    from simulations.inprocess import run

    keys = {k: v for k, v in keys.items() if k != "output-dir"}
    cfg = RunConfig.from_run_config(keys, METHODS)
    with Backprop().active() as backprop:
        client = timed_client_round(cfg, rounds=1, warm_up=False)
    server_s: list[float] = []

    def time_aggregation(server: Any) -> None:
        strategy = server.strategy
        aggregate = strategy.aggregate_fit

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return aggregate(*args, **kwargs)
            finally:
                server_s.append(time.perf_counter() - t0)

        strategy.aggregate_fit = timed

    gc.collect()  # the lone client's model and optimizer state: gone before the round builds its own
    record, rounds = run(keys, into, clients=clients, server_hook=time_aggregation)
    last = rounds[-1]
    gpu = {"round_peak_gpu_mb": round(client["round_peak_gpu_mb"], 1)} if "round_peak_gpu_mb" in client else {}
    # fit_s to 0.1 ms: a tiny encoder's one fedprompt step takes a few ms, which 2 decimals
    # rounded to 0.0 on a fast CI machine (and the row then claimed no local work was timed)
    row = {"model": cfg.model, "method": cfg.method, "keys": keys, "clients": clients,
           "weights_total": client["weights_total"], "backprop_weights": backprop.weights,
           "backward_calls": backprop.calls, "values_up": client["values_up"], "values_down": client["values_down"],
           "bytes_up": last["bytes_up_per_client"], "bytes_down": last["bytes_down_per_client"],
           "fit_s": round(client["fit_s"], 4), "round_peak_mb": round(client["round_peak_mb"], 1),
           "round_start_mb": round(client["round_start_mb"], 1), "queries": client["queries"],
           "server_s": round(sum(server_s), 3), **gpu}
    return row, record


def machine() -> dict[str, Any]:
    """Where and when: the CPU, its cores, torch's threads, the date, the commit, the load now."""
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    # "-dirty": the measured code differs from the commit
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "date": _dt.date.today().isoformat(), "commit": commit,
            "load_before": os.getloadavg()[0]}


def failure(rc: int, stderr: str) -> str:
    """Why a measuring process with exit status ``rc`` left no row: the signal that ended it
    (SIGKILL is what the kernel's out-of-memory killer sends), or its last error line."""
    if rc < 0:
        return f"killed by signal {-rc}" + (" (out of memory?)" if rc == -9 else "")
    if rc == 0:
        return "no cost record written"
    return next((line for line in reversed(stderr.strip().splitlines()) if "Error" in line), "no error line")[-200:]


def measure_in_subprocess(overrides: dict[str, Any], num_supernodes: int, log_path: Path, ray_address: str = "",
                          gpus_per_client: float = 0.0) -> int:
    """The engine ``"cost"`` (:data:`ENGINES`, the runner's engine signature): :func:`measure` of one
    planned run in a fresh interpreter (:data:`CHILD`), its memory its own, with ``num_supernodes``
    clients in its round; its output to ``log_path``. The round's record and its row are written
    into a temporary folder beside ``<out>/runs`` and moved into ``runs`` once both are there,
    less the round's checkpoint; a failure leaves a :data:`FAILURES` line instead (module doc).
    No Ray: ``ray_address`` and ``gpus_per_client`` are not read. The exit status: the measuring
    process's, 1 where it exited 0 without a row."""
    from fedtext.common.config import RunConfig
    from fedtext.common.registry import METHODS
    from fedtext.server import checkpoint

    runs_dir = Path(overrides["output-dir"])
    runs_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix=".cost-", dir=runs_dir.parent) as tmp:  # one filesystem: a rename
        cmd = [*CHILD, "--one", json.dumps(overrides), "--clients", str(num_supernodes), "--into", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")})
        log_path.write_text(f"$ {shlex.join(cmd)}\n{proc.stdout}{proc.stderr}"
                            f"[exit {proc.returncode} after {time.time() - t0:.0f} s]\n")
        made = sorted(Path(tmp).glob(f"*/{COST_FILE}"))
        if proc.returncode == 0 and len(made) == 1:
            row = json.loads(made[0].read_text())["row"]
            # the round's global arrays (1.3 GB for a whole-model method at RoBERTa-large): no table reads them
            (made[0].parent / checkpoint.FILE).unlink(missing_ok=True)
            os.replace(made[0].parent, runs_dir / made[0].parent.name)
            print(f"    {row['model']} {row['method']}: local step {row['fit_s']:.1f} s, round peak "
                  f"{row['round_peak_mb']:.0f} MB, {row['bytes_up']:.0f} B up", flush=True)
            return 0
    error = failure(proc.returncode, proc.stderr)
    cfg = RunConfig.from_run_config({k: v for k, v in overrides.items() if k != "output-dir"}, METHODS)
    where = machine()
    line = {"row": {"model": cfg.model, "method": cfg.method, "error": error},
            "machine": {**where, "load_after": where["load_before"]}, "measured_epoch": round(t0, 3),
            "exit": proc.returncode}
    with (runs_dir.parent / FAILURES).open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    print(f"    failed: {error} (log: {log_path})", flush=True)
    return proc.returncode or 1


#: The runner's engines this study brings (:func:`simulations.compare.engines_of`), looked up by name
#: when a run starts so that a test's stand-in for :func:`measure_in_subprocess` is the one called.
ENGINES = {"cost": lambda *args: measure_in_subprocess(*args)}


# ------------------------------------------------------------------ records
# A measurement's machine fields that make two rows' settings one (the load is not among them)
SETTING = ("cpu", "cores", "torch_threads", "torch", "date", "commit")


def measurements(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest measurement of each (backbone, method) under ``out``: the :data:`COST_FILE` of
    each finished run under ``<out>/runs`` (with its run's id) and each :data:`FAILURES` line, by
    ``measured_epoch``."""
    from fedtext.records.reader import FINISHED, runs_under

    found: dict[tuple[str, str], dict[str, Any]] = {}
    candidates: list[dict[str, Any]] = []
    if (out / "runs").is_dir():
        for run in runs_under(out / "runs"):
            path = Path(run["dir"]) / COST_FILE
            if run["status"] == FINISHED and path.is_file():
                candidates.append({**json.loads(path.read_text()), "run": Path(run["dir"]).name})
    if (out / FAILURES).is_file():
        candidates += [json.loads(line) for line in (out / FAILURES).read_text().splitlines() if line.strip()]
    for m in sorted(candidates, key=lambda m: m["measured_epoch"]):  # the newest last, so it wins
        found[(m["row"]["model"], m["row"]["method"])] = m
    return found


def _setting(where: dict[str, Any]) -> tuple[Any, ...]:
    """A machine's :data:`SETTING` fields."""
    return tuple(where.get(k) for k in SETTING)


def merged(model: str, measured: list[dict[str, Any]], existing: dict[str, Any] | None) -> dict[str, Any]:
    """``model``'s record: the rows of ``measured`` (its :func:`measurements`), and those of the
    ``existing`` record for the methods not measured (some rows measured again: the rest stay),
    in the registry's order.

    Its machine: the existing record's where it keeps rows, else the first measurement's (its
    load before; the load after of the last one in its setting). ``again`` lists, per setting
    (:data:`SETTING`), the rows measured elsewhere or later than that machine's, as
    ``{"methods", <machine>, "from_runs": true}``; written from the runs each time, so that a
    second :func:`finish` writes the same record."""
    from fedtext.common.registry import METHODS

    ours = {m["row"]["method"]: m for m in measured}
    kept = [r for r in existing["rows"] if r["method"] not in ours] if existing else []
    by_time = sorted(ours.values(), key=lambda m: m["measured_epoch"])
    if kept:
        base = {k: v for k, v in existing["machine"].items() if k != "again"}
        again = [a for a in existing["machine"].get("again", []) if not a.get("from_runs")]
        later = by_time
    else:
        first = by_time[0]["machine"]
        same = [m for m in by_time if _setting(m["machine"]) == _setting(first)]
        base = {**first, "load_after": same[-1]["machine"].get("load_after", first.get("load_before"))}
        again, later = [], [m for m in by_time if _setting(m["machine"]) != _setting(first)]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for m in later:
        groups.setdefault(_setting(m["machine"]), []).append(m)
    again += [{"methods": [m["row"]["method"] for m in group], **group[0]["machine"], "from_runs": True}
              for group in groups.values()]
    rows = {r["method"]: r for r in kept} | {method: m["row"] for method, m in ours.items()}
    return {"model": model, "machine": {**base, **({"again": again} if again else {})},
            "rows": [rows[m] for m in METHODS if m in rows]}


def finish(out: Path = OUT) -> list[Path]:
    """``<out>/<model>.json`` for each backbone measured under ``out`` (:func:`merged`), the record
    the tables read (module doc); a folder without measurements keeps its records as they are."""
    by_model: dict[str, list[dict[str, Any]]] = {}
    for (model, _), m in measurements(out).items():
        by_model.setdefault(model, []).append(m)
    written = []
    for model, measured in sorted(by_model.items()):
        path = out / f"{model}.json"
        existing = json.loads(path.read_text()) if path.is_file() else None
        path.write_text(json.dumps(merged(model, measured, existing), indent=1) + "\n")
        written.append(path)
    return written


def records(out: Path) -> list[dict[str, Any]]:
    """The cost records (``<model>.json``: a model, a machine and rows) in ``out``, by name."""
    found = []
    for path in sorted(out.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and {"model", "machine", "rows"} <= set(data) and path.stem == data["model"]:
            found.append(data)
    return found


def load(model: str = PAPER_SHAPE, where: Path | None = None) -> dict[str, Any]:
    """The record of ``model``'s rows, in ``where`` or else its profile's folder (:func:`folder`)."""
    return json.loads(((where or folder(model)) / f"{model}.json").read_text())


def has_record(model: str) -> bool:
    """Whether ``model`` has a committed record in its profile's folder."""
    return model in backbones() and (folder(model) / f"{model}.json").is_file()


# ------------------------------------------------------------------ rendering
def _mb(n: float | None) -> str:
    from simulations.dashboard_data import byte_text

    return "—" if n is None else byte_text(n)


def _count(n: int | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return str(n)


def record_table(record: dict[str, Any]) -> str:
    """The markdown table of one backbone's rows, headed by its machine, its date and its command."""
    m = record["machine"]
    weights = record["rows"][0].get("keys", {}).get("weights", "pretrained")
    rows = [f"{record['model']} ({_count(record['rows'][0].get('weights_total'))} weights, {weights}), "
            f"{m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['date']}, commit {m['commit']}; "
            f"`{command(record['model'])}`", "",
            "| method | back-propagated weights | values up / down | bytes up / down per client-round "
            "| local step s | round peak RSS | queries | server s |",
            "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in record["rows"]:
        if "error" in r:
            rows.append(f"| `{r['method']}` | failed: {r['error']} | | | | | | |")
            continue
        rows.append(f"| `{r['method']}` | {_count(r['backprop_weights']) if r['backprop_weights'] else 'none'} "
                    f"| {_count(r['values_up'])} / {_count(r['values_down'])} "
                    f"| {_mb(r['bytes_up'])} / {_mb(r['bytes_down'])} | {r['fit_s']:.1f} "
                    f"| {_mb(r['round_peak_mb'] * 2**20)} | {r['queries']} | {r['server_s']:.2f} |")
    return "\n".join(rows) + "\n"


def table(out: Path = OUT) -> str:
    """The study's table (``<out>/table.md``): :func:`record_table` of each record in ``out``."""
    found = records(out) if out.is_dir() else []
    if not found:
        return f"No cost record in {out} yet (`{command(PAPER_SHAPE)}`).\n"
    return "\n".join(record_table(record) for record in found)


@dataclass(frozen=True)
class Claim:
    """A cost a paper states, and the row and field of fedtext's that measures the same."""

    page: str  # docs/papers/<page>.md
    where: str  # the paper's table, figure or section
    what: str  # the quantity, in the paper's words
    method: str  # fedtext's method
    field: str  # a row's field: bytes_up, bytes_down, round_peak_mb, backprop_weights
    paper: float  # the paper's figure in the field's unit (bytes, MB, weights)
    paper_text: str  # as the paper writes it
    differs: str  # where fedtext's setting or counting differs
    model: str = PAPER_SHAPE  # the backbone the paper states it at
    versus: str = ""  # a method: the paper's figure is a ratio, fedtext's is this row's field / that row's


# Fields a claim may name beyond a row's own: FeS's traffic of a round, both ways, at its 5
# clients per round (FeS §4.1)
FES_CLIENTS_PER_ROUND = 5
DERIVED = {"round_traffic": lambda r: (r["bytes_up"] + r["bytes_down"]) * FES_CLIENTS_PER_ROUND}


_F16 = "the paper counts float16 (2 B a value) and no headers; fedtext sends float32 and 128 B per array"
CLAIMS: tuple[Claim, ...] = (
    Claim("feddls", "Table 1, G (Φ = 5)", "upload per round", "feddls", "bytes_up", 50 * 16 / 8, "0.8 K bits",
          "fedtext sends the T = 50 ids as uint16 plus one 128 B header"),
    Claim("feddls", "Table 1, G (Φ = 5)", "download per round", "feddls", "bytes_down", 50 * 2 * 5 * 16 / 8, "8 K bits",
          "Φ ids (uint16) and Φ coefficients (float16) per position as the paper counts, plus two 128 B headers"),
    Claim("feddls", "Table 1, H", "BBT (Fed) upload per round", "bbt-fed", "bytes_up", 500 * 16 / 8, "8 K bits",
          _F16),
    Claim("feddls", "Table 1, B", "Prompt Tuning (Fed) upload per round", "fedprompt", "bytes_up",
          50 * 1024 * 16 / 8, "819 K bits", _F16),
    Claim("feddls", "Table 1, F", "Fine Tuning (Fed) upload per round", "fedavg", "bytes_up", 5.3e9 / 8, "5.3 G bits",
          _F16 + "; fedtext's fedavg sends the encoder, no LM head"),
    Claim("feddls", "Table 1, BP?", "back-propagation (G: no)", "feddls", "backprop_weights", 0, "no", ""),
    Claim("fes", "Figure 14", "FedFSL peak memory, RoBERTa-large", "fedfsl", "round_peak_mb", 10.4 * 1024, "10.4 GB",
          "the paper's on a GPU server (footnote 5), fedtext's the CPU process's resident memory; fedtext pads a batch "
          "to its longest text, not to the 256 positions PET pads to, so its activations are smaller"),
    Claim("fes", "Figure 14", "FedFSL-BIAS peak memory", "fedfsl-bias", "round_peak_mb", 5.8 * 1024, "5.8 GB",
          "as above: activations are what bias-only tuning keeps (FeS §4.4), and padding sets their size"),
    Claim("fes", "Figure 14", "FeS peak memory (depth/capacity plan)", "fes", "round_peak_mb", 2.3 * 1024, "2.3 GB",
          "as above; plan 16 frozen, 8 bias-only layers"),
    Claim("feddpg", "Table 1, Params.", "FedPrompt's parameters", "fedprompt", "values_up", 51e3, "51k",
          "T = 50 (FedDLS App. A; 50 × 1,024 = 51,200)"),
    Claim("feddpg", "Table 1, Params.", "Fed P-tuning V2's parameters", "fedptuning-v2", "values_up", 15e6, "15M",
          "fedtext's default prompt length per layer, not the paper's (unstated)"),
    Claim("feddpg", "Table 1, Params.", "FedAvg's parameters", "fedavg", "values_up", 355e6, "355M",
          "fedtext's fedavg sends the encoder and its head"),
    Claim("feddpg", "Table 1, Params.", "FedBPT's parameters", "fedbpt", "values_up", 500, "500", ""),
    Claim("feddpg", "Table 1, Params. (RoBERTa Base)", "FedDPG's parameters", "feddpg", "values_up", 185e3, "185K",
          "fedtext's default generator (hidden size and prompt count), the paper's not stated beside the figure",
          model="roberta-base"),
    Claim("fes", "Figure 3, §2", "FedFSL's network traffic to converge on AG News", "fedfsl", "round_traffic",
          68.4e9, "68.4 GB", "fedtext's is one round's, both ways, at 5 clients (§4.1): the paper's is a whole "
          "training's (its rounds are not stated beside it), so the ratio is the share of it one round makes"),
    Claim("fes", "§1, Figure 13", "traffic FedFSL sends per FeS byte", "fedfsl", "bytes_up", 1841.7, "1,841.7×",
          "the paper's is to convergence, averaged over four datasets (FeS also needs fewer rounds); fedtext's "
          "is one round's upload, FeS's plan against full fine-tuning", versus="fes"),
    Claim("feddrs", "§5.2", "communication comparable to FedAvg", "feddrs", "bytes_up", 1.0, "comparable",
          "", versus="fedavg"),
    Claim("feddrs", "§5.2", "FedDF's communication comparable to FedAvg", "feddf", "bytes_up", 1.0, "comparable",
          "FedDF's server distillation (64 auxiliary texts per encoder call) ran out of this machine's 24 GiB at "
          "RoBERTa-large: read at RoBERTa-base", versus="fedavg", model="roberta-base"),
    Claim("fedbpt", "§1, §4", "clients only run inference", "fedbpt", "backprop_weights", 0, "no back-propagation", ""),
    Claim("fedbpt", "§4; d = 500 from FedDPG Table 1", "upload per client-round: z", "fedbpt", "bytes_up", 500 * 4,
          "d = 500 values", "the paper states d, not bytes: 500 float32 values taken as its figure"),
)


def paper_rows(page: str, records: dict[str, dict[str, Any]]) -> str:
    """The paper's stated costs beside fedtext's rows at the paper's shape (``records``: a
    backbone's name -> its record), with the ratio."""
    out = ["| paper | what | paper's figure | fedtext | fedtext / paper | where the settings differ |",
           "|---|---|--:|--:|--:|---|"]
    for c in (c for c in CLAIMS if c.page == page):
        rows = {r["method"]: r for r in records.get(c.model, {}).get("rows", []) if "error" not in r}

        def value(method: str) -> float | None:
            row = rows.get(method, {})
            return DERIVED[c.field](row) if c.field in DERIVED and row else row.get(c.field)

        ours, other = value(c.method), value(c.versus) if c.versus else None
        if ours is None or (c.versus and not other):
            shown, ratio = "not measured", "—"
        elif c.versus:
            shown = f"{ours / other:,.1f}× (`{c.method}` / `{c.versus}`)"
            ratio = f"{ours / other / c.paper:.2f}"
        elif c.field == "backprop_weights":
            shown, ratio = ("none" if ours == 0 else f"{_count(ours)} weights"), ("same" if (ours == 0) == (c.paper == 0) else "differs")
        elif c.field == "round_peak_mb":
            shown, ratio = f"{ours / 1024:.2f} GB", f"{ours / c.paper:.2f}"  # GB = 2**30 B both
        elif c.field.startswith("values"):
            shown, ratio = _count(ours), f"{ours / c.paper:.2f}"
        else:
            shown, ratio = _mb(ours), f"{ours / c.paper:.2f}"
        out.append(f"| {c.where} | {c.what} (`{c.method}`) | {c.paper_text} | {shown} | {ratio} | {c.differs} |")
    return "\n".join(out) + "\n"


GROWTH_MODELS = ("all-MiniLM-L6-v2", "roberta-base", "roberta-large")  # 22 M, 125 M, 355 M weights
GROWTH_COMMAND = "python -m simulations.studies.costs --growth"
GROWTH_FIGURE = OUT / "growth.png"  # beside RoBERTa-large's record
NOT_MEASURED = f"Not measured yet: `{GROWTH_COMMAND}`, then `python tools/generated.py`.\n"


def render_page(page: str) -> str:
    """A paper page's generated block (``tools/generated.py``'s ``costs-<page>``): its claims beside
    the committed RoBERTa-large rows."""
    if not has_record(PAPER_SHAPE):
        return NOT_MEASURED
    found = {m: load(m) for m in GROWTH_MODELS if has_record(m)}
    m = found[PAPER_SHAPE]["machine"]
    return (f"At the paper's backbone's shape (random weights: costs only), {m['cpu']}, {m['date']}; "
            f"`{GROWTH_COMMAND}`, then `python tools/generated.py`.\n\n" + paper_rows(page, found))


def render_summary() -> str:
    """docs/performance.md's block: the whole RoBERTa-large table."""
    return record_table(load()) if has_record(PAPER_SHAPE) else NOT_MEASURED


# ------------------------------------------------------------------ growth
def growth_table(records: list[dict[str, Any]]) -> str:
    """Seconds per local step and round peak memory of each method at each backbone, with
    the ratio of the largest to the smallest (log-log slope against the weight count)."""
    import math

    records = sorted(records, key=lambda r: r["rows"][0].get("weights_total") or 0)
    sizes = [r["rows"][0].get("weights_total") for r in records]
    head = " | ".join(f"{r['model']} ({_count(n)})" for r, n in zip(records, sizes, strict=True))
    out = [f"| method | {head} | slope, time / memory |", "|---|" + "--:|" * (len(records) + 1)]
    methods = [row["method"] for row in records[-1]["rows"]]
    for method in methods:
        cells, points = [], []
        for record in records:
            row = next((x for x in record["rows"] if x["method"] == method and "error" not in x), None)
            cells.append("—" if row is None else f"{row['fit_s']:.1f} s, {_mb(row['round_peak_mb'] * 2**20)}")
            if row is not None:
                points.append((row["weights_total"], row["fit_s"], row["round_peak_mb"]))
        slope = "—"
        if len(points) >= 2 and points[0][0] != points[-1][0]:
            span = math.log(points[-1][0] / points[0][0])
            slope = (f"{math.log(points[-1][1] / points[0][1]) / span:.2f} / "
                     f"{math.log(points[-1][2] / points[0][2]) / span:.2f}")
        out.append(f"| `{method}` | " + " | ".join(cells) + f" | {slope} |")
    return "\n".join(out) + "\n"


def growth_figure(records: list[dict[str, Any]], path: Path = GROWTH_FIGURE) -> Path:
    """Log-log: seconds per local step and round peak memory against the backbone's weights,
    one line per method."""
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    methods = [row["method"] for row in records[-1]["rows"]]
    colours = plt.cm.tab20.colors  # 20 distinct colours: one per method (16 registered)
    for i, method in enumerate(methods):
        pts = sorted((row["weights_total"], row["fit_s"], row["round_peak_mb"] / 1024)
                     for record in records for row in record["rows"] if row["method"] == method and "error" not in row)
        if len(pts) < 2:
            continue
        xs = [p[0] for p in pts]
        style = "--" if all(row.get("backprop_weights") == 0 for record in records for row in record["rows"]
                            if row["method"] == method) else "-"
        colour = colours[i % len(colours)]
        axes[0].plot(xs, [p[1] for p in pts], style, marker="o", label=method, color=colour)
        axes[1].plot(xs, [p[2] for p in pts], style, marker="o", label=method, color=colour)
    for ax, label in zip(axes, ("seconds per local step (one client)", "peak resident memory in the round (GiB)"),
                         strict=True):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: minor labels overlap
        ax.set_xlabel("backbone weights")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7, ncol=2)
    m = records[-1]["machine"]
    fig.suptitle(f"Cost against backbone size ({', '.join(r['model'] for r in records)}; dashed: forward only); "
                 f"{m['cores']} cores, {m['date']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render_growth() -> str:
    """docs/performance.md's growth block: the table of every committed backbone record."""
    found = [load(m) for m in GROWTH_MODELS if has_record(m)]
    if len(found) < 2:
        return NOT_MEASURED
    return (growth_table(found) + f"\n![cost against backbone size](../{GROWTH_FIGURE.relative_to(REPO)}) "
            f"(`{GROWTH_COMMAND}`)\n")


# ------------------------------------------------------------------ command
def main(argv: list[str] | None = None) -> int:
    """``--growth``: every method at :data:`GROWTH_MODELS` through the runner (each backbone's
    profile, finished runs skipped), then the figure and its table; ``--figure``: those two from
    the records alone. ``--one``: the engine's measuring process (:func:`measure_in_subprocess`)."""
    ap = argparse.ArgumentParser(prog="python -m simulations.studies.costs", description=(
        "The growth figure of the cost study: every method at MiniLM-L6, RoBERTa-base and RoBERTa-large "
        f"(one backbone: python -m simulations.compare {EXPERIMENT.relative_to(REPO)} [--profile NAME])"))
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--growth", action="store_true", help=f"measure {', '.join(GROWTH_MODELS)} (what has not "
                      "finished), then draw the growth figure and print its table")
    what.add_argument("--figure", action="store_true", help="only draw the figure and print its table (the records)")
    what.add_argument("--one", help=argparse.SUPPRESS)  # the engine's: measure these run-config overrides here
    ap.add_argument("--methods", nargs="+", help="with --growth: these methods only (the runner's --methods)")
    ap.add_argument("--clients", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--into", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        t0, where = time.time(), machine()
        row, record = measure(json.loads(args.one), args.into, args.clients)
        cost = {"row": row, "machine": {**where, "load_after": os.getloadavg()[0]}, "measured_epoch": round(t0, 3)}
        (record / COST_FILE).write_text(json.dumps(cost, indent=1) + "\n")
        print(json.dumps(row))
        return 0
    failed = 0
    if args.growth:
        experiment = os.path.relpath(EXPERIMENT)
        for model in GROWTH_MODELS:
            profile = backbones()[model]
            failed += compare.main([experiment, *(["--profile", profile] if profile else []),
                                    *(["--methods", *args.methods] if args.methods else [])]) != 0
    found = [load(m) for m in GROWTH_MODELS]
    print(growth_table(found))
    print(f"figure: {growth_figure(found, GROWTH_FIGURE)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
