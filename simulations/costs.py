"""What each method costs at the papers' scale, from records this command makes.

    python -m simulations.costs                                # every method at RoBERTa-large's shape
    python -m simulations.costs --models roberta-base          # another shape (or several)
    python -m simulations.costs --methods fes fedfsl --models tiny-roberta --out /tmp/costs
    python -m simulations.costs --growth                       # MiniLM-L6, RoBERTa-base, RoBERTa-large + the figure
    python -m simulations.costs --table                        # print the committed tables again

Bytes are shapes, memory is shapes and activations, time is FLOPs: none needs the papers'
trained weights, so the backbones here are shapes (fedtext/backbone/shapes.py,
``weights=random``): RoBERTa-large (355 M weights, D = 1,024, 24 layers), RoBERTa-base,
BERT-base. Their accuracy is never read.

For each backbone and registered method, in a fresh process (its memory its own):

1. **One client's local round, alone** (:func:`simulations.bench.timed_client_round`, no
   warm-up): its seconds; the peak resident memory during the round (the kernel's high-water
   mark reset once the client is built, so the frozen backbone is in it and loading is not);
   the weights back-propagated to (:class:`Backprop`: the leaves of every autograd graph a
   ``backward`` walks; 0 = forward only, FedDLS Table 1's "BP?"); the values sent each way;
   the sequences pushed through the backbone (model queries).
2. **One federated round** in this process (:mod:`simulations.inprocess`: the ServerApp's
   strategy and the fewest ClientApp clients its round takes, one but for FedBPT's two, through
   Flower's message conversion, no Ray): bytes up
   and down per client-round from its last round's record (``bytes_up_per_client``,
   ``bytes_down_per_client``: the serialised arrays, fedtext/common/comm.py), and the server's
   seconds in ``aggregate_fit`` (all rounds).

Settings (:data:`COST_KEYS`, then :data:`PAPER_KEYS`, then ``--run-config``): each client-round
does one unit of local work (one optimizer step, CMA-ES iteration or search step: the
method's ``local-steps``, ``max-local-steps`` or FedDLS's ``steps`` set to 1) on 4 shots per class of SST-2, so a
shape of 355 M weights fits in minutes on 2 cores; a round of ``n`` steps costs ``n`` times the
seconds and queries (every step does the same work), and the same memory and bytes, except where
a method sends per step (none of the registered ones does: the rows' ``values`` say what
travels). Where a paper states its setting, :data:`PAPER_KEYS` applies it (FedDLS and BBT's
T = 50 and d = 500; FeS's AG News, length 256, batch 4 and depth/capacity plan). Each row
carries its keys.

Writes ``<out>/<model>.json`` (the machine, the date, the commit, every row and its keys) and
prints the markdown table. :func:`paper_rows` sets the papers' own figures beside these rows,
with the ratio; ``python tools/generated.py`` writes them into each paper's page and
docs/performance.md from the committed ``simulations/results/costs/roberta-large.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "simulations" / "results" / "costs"
PAPER_SHAPE = "roberta-large"  # the backbone of all five papers' main tables
SST2, AG_NEWS = "../shared/data/sst2", "../shared/data/ag_news"
# One unit of local work per client-round on a few examples, 1 round; evaluation minimal (its
# accuracy is a random model's and never read).
COST_KEYS: dict[str, Any] = {"dataset": SST2, "num-server-rounds": 1, "shots-per-class": 4, "eval-size": 8,
                             "client-test-size": 4, "seed": 0}
STEP_KEYS = ("local_steps", "max_local_steps", "steps")  # a method config's field for its local work: set to 1
# RoBERTa-large's 24 layers in FeS's AG News plan (§4.3: "up to 66.7 %" of the bottom layers
# frozen, "up to 33.3 %" bias-only): 16 frozen, 8 bias-only, as fedtext's default on MiniLM-L6's 6
FES_FROZEN_SHARE = 2 / 3
_FES = {"dataset": AG_NEWS, "max-length": 256}  # FeS §4.1: AG News, max sequence length 256 (batch 4: the default)
_BBT = {"prompt-length": 50}  # BBT (Sun et al. 2022) and FedDLS Appendix A: T = 50
PAPER_KEYS: dict[str, dict[str, Any]] = {
    # FedDLS Table 1: T = 50, Φ = 5 (the default); its download per round is the lasso residual of
    # round 2 on (round 1's clients start from the shared p0 and download nothing): two rounds, the last one's bytes
    "feddls": {**_BBT, "num-server-rounds": 2},
    "fedprompt": {**_BBT},  # FedDLS Table 1 row B, "Prompt Tuning (Fed)" at T = 50
    "bbt-fed": {**_BBT, "bbt-fed.intrinsic-dim": 500},  # FedDLS Table 1 row H: d = 500
    "fedbpt": {**_BBT, "fedbpt.intrinsic-dim": 500},  # FedDPG Table 1: FedBPT trains 500 parameters (d)
    "fes": _FES, "fedfsl": _FES, "fedfsl-bias": _FES, "fedcls": _FES,
}

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


def run_keys(method: str, model: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The run-config of ``method``'s cost row on ``model``: :data:`COST_KEYS`, one unit of
    local work, the paper's setting (:data:`PAPER_KEYS`, FeS's plan scaled to the depth),
    then ``extra``."""
    from fedtext.backbone.shapes import SHAPES
    from fedtext.common.registry import METHODS

    config = METHODS[method]
    keys: dict[str, Any] = {"method": method, "model": model, **COST_KEYS}
    if model in SHAPES:
        keys["weights"] = "random"
    fields = config.__dataclass_fields__
    keys.update({config.key(f): 1 for f in STEP_KEYS if f in fields})
    keys.update(PAPER_KEYS.get(method, {}))
    if method == "fes":
        layers = SHAPES[model].config["num_hidden_layers"] if model in SHAPES else 6
        frozen = round(layers * FES_FROZEN_SHARE)
        keys.update({"fes.frozen-layers": frozen, "fes.bias-layers": layers - frozen})
    return {**keys, **extra}


def measure(method: str, model: str, extra: dict[str, Any]) -> dict[str, Any]:
    """One row (module doc), in this process: the client alone first, then the round."""
    from fedtext.common.config import RunConfig
    from fedtext.common.registry import METHODS
    from simulations.bench import timed_client_round
    from simulations.inprocess import run

    import gc

    keys = run_keys(method, model, extra)
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
    # the fewest clients the method's round takes (FedBPT's population: 2): at 355 M weights a
    # whole-model method's round holds the global model, each upload and its serialised copies
    # (fedavg with 2 clients passed 23 GiB on a 24 GiB machine)
    clients = max(1, METHODS[method].min_clients_per_round)
    with tempfile.TemporaryDirectory(prefix="fedtext-costs-") as tmp:
        _, rounds = run(keys, Path(tmp), clients=clients, server_hook=time_aggregation)
    last = rounds[-1]
    # fit_s to 0.1 ms: a tiny encoder's one fedprompt step takes a few ms, which 2 decimals
    # rounded to 0.0 on a fast CI machine (and the row then claimed no local work was timed)
    return {"model": model, "method": method, "keys": keys, "clients": clients, "weights_total": client["weights_total"],
            "backprop_weights": backprop.weights, "backward_calls": backprop.calls,
            "values_up": client["values_up"], "values_down": client["values_down"],
            "bytes_up": last["bytes_up_per_client"], "bytes_down": last["bytes_down_per_client"],
            "fit_s": round(client["fit_s"], 4), "round_peak_mb": round(client["round_peak_mb"], 1),
            "round_start_mb": round(client["round_start_mb"], 1), "queries": client["queries"],
            "server_s": round(sum(server_s), 3)}


def measure_in_subprocess(method: str, model: str, extra: dict[str, Any], log: Path) -> dict[str, Any]:
    """:func:`measure` in a fresh interpreter (its memory its own); its output appended to ``log``."""
    cmd = [sys.executable, "-m", "simulations.costs", "--one", method, "--models", model,
           "--run-config-json", json.dumps(extra)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")})
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}[exit {proc.returncode} after {time.time() - t0:.0f} s]\n")
    if proc.returncode < 0:  # a signal: SIGKILL is what the kernel's out-of-memory killer sends
        why = " (out of memory?)" if proc.returncode == -9 else ""
        return {"model": model, "method": method, "error": f"killed by signal {-proc.returncode}{why}"}
    if proc.returncode:
        tail = next((line for line in reversed(proc.stderr.strip().splitlines()) if "Error" in line), "no error line")
        return {"model": model, "method": method, "error": tail[-200:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def machine() -> dict[str, Any]:
    """Where and when: the CPU, its cores, torch's threads, the date, the commit."""
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    # "-dirty": the measured code differs from the commit
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "date": _dt.date.today().isoformat(), "commit": commit,
            "load_before": os.getloadavg()[0]}


# ------------------------------------------------------------------ rendering
def load(model: str = PAPER_SHAPE, folder: Path = RESULTS) -> dict[str, Any]:
    """The committed record of ``model``'s rows."""
    return json.loads((folder / f"{model}.json").read_text())


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


def table(record: dict[str, Any]) -> str:
    """The markdown table of one backbone's rows, headed by its machine and date."""
    m = record["machine"]
    weights = record["rows"][0].get("keys", {}).get("weights", "pretrained")
    rows = [f"{record['model']} ({_count(record['rows'][0].get('weights_total'))} weights, {weights}), "
            f"{m['cpu']}, {m['cores']} cores, torch {m['torch']}, {m['date']}, commit {m['commit']}; "
            f"`python -m simulations.costs --models {record['model']}`", "",
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


NOT_MEASURED = "Not measured yet: `python -m simulations.costs`, then `python tools/generated.py`.\n"


def render_page(page: str) -> str:
    """A paper page's generated block: its claims beside the committed RoBERTa-large rows."""
    if not (RESULTS / f"{PAPER_SHAPE}.json").exists():
        return NOT_MEASURED
    records = {m: load(m) for m in GROWTH_MODELS if (RESULTS / f"{m}.json").exists()}
    m = records[PAPER_SHAPE]["machine"]
    return (f"At the paper's backbone's shape (random weights: costs only), {m['cpu']}, {m['date']}; "
            f"`python -m simulations.costs --growth`, then `python tools/generated.py`.\n\n" + paper_rows(page, records))


def render_feddls() -> str:
    """docs/papers/feddls.md's block (Table 1's bits per round)."""
    return render_page("feddls")


def render_fes() -> str:
    """docs/papers/fes.md's block (Figure 14's peak memory)."""
    return render_page("fes")


def render_feddpg() -> str:
    """docs/papers/feddpg.md's block (Table 1's parameter counts)."""
    return render_page("feddpg")


def render_feddrs() -> str:
    """docs/papers/feddrs.md's block (§5.2's communication against FedAvg)."""
    return render_page("feddrs")


def render_fedbpt() -> str:
    """docs/papers/fedbpt.md's block (inference-only clients, d = 500)."""
    return render_page("fedbpt")


def render_summary() -> str:
    """docs/performance.md's block: the whole RoBERTa-large table."""
    return table(load()) if (RESULTS / f"{PAPER_SHAPE}.json").exists() else NOT_MEASURED


# ------------------------------------------------------------------ growth
GROWTH_MODELS = ("all-MiniLM-L6-v2", "roberta-base", "roberta-large")  # 22 M, 125 M, 355 M weights
GROWTH_FIGURE = RESULTS / "growth.png"


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
    records = [load(m) for m in GROWTH_MODELS if (RESULTS / f"{m}.json").exists()]
    if len(records) < 2:
        return NOT_MEASURED
    return (growth_table(records) + f"\n![cost against backbone size](../{GROWTH_FIGURE.relative_to(ROOT)}) "
            f"(`python -m simulations.costs --growth`)\n")


# ------------------------------------------------------------------ command
def main(argv: list[str] | None = None) -> int:
    from fedtext.common.registry import METHODS

    ap = argparse.ArgumentParser(prog="python -m simulations.costs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=[PAPER_SHAPE], help="backbones: shapes or checkpoints")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), metavar="METHOD")
    ap.add_argument("--run-config", default="", help="extra keys, `key=value` separated by spaces")
    ap.add_argument("--run-config-json", default="{}", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=RESULTS, help="where <model>.json goes")
    ap.add_argument("--table", action="store_true", help="print the tables of the records in --out")
    ap.add_argument("--growth", action="store_true", help=f"measure {', '.join(GROWTH_MODELS)}, then draw the "
                    "growth figure and print its table (the one command behind every cost table of the docs)")
    ap.add_argument("--figure", action="store_true", help="only draw the growth figure from the records in --out")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # measure one method here, print its row as JSON
    args = ap.parse_args(argv)
    extra = json.loads(args.run_config_json)
    for pair in args.run_config.split():
        key, _, value = pair.partition("=")
        extra[key] = value.strip("'\"")
    if args.one:
        print(json.dumps(measure(args.one, args.models[0], extra)))
        return 0
    if args.table:
        for model in args.models:
            print(table(load(model, args.out)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    models = [] if args.figure else list(GROWTH_MODELS) if args.growth else args.models
    for model in models:
        # some methods again (--methods): their rows replace theirs in the record, the rest stay
        path = args.out / f"{model}.json"
        partial = set(args.methods) != set(METHODS) and path.exists()
        record = load(model, args.out) if partial else {"model": model, "machine": machine(), "rows": []}
        log = args.out / f"{model}.log"
        if not partial:
            log.write_text("")
        rows = {r["method"]: r for r in record["rows"]}
        for method in args.methods:
            t0 = time.time()
            rows[method] = measure_in_subprocess(method, model, extra, log)
            print(f"{model} {method}: {time.time() - t0:.0f} s {rows[method].get('error', '')}", file=sys.stderr,
                  flush=True)
        record["rows"] = [rows[m] for m in METHODS if m in rows]
        if partial:
            record["machine"].setdefault("again", []).append({"methods": args.methods, **machine()})
        record["machine"]["load_after"] = os.getloadavg()[0]
        (args.out / f"{model}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(table(record))
    if args.growth or args.figure:
        records = [load(m, args.out) for m in GROWTH_MODELS]
        print(growth_table(records))
        print(f"figure: {growth_figure(records, args.out / GROWTH_FIGURE.name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
