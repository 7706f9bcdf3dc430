"""Each paper's headline comparison at two scales: fedtext's run records on all-MiniLM-L6-v2
(22 M weights, 6 layers) and on all-mpnet-base-v2 (110 M, 12 layers, D = 768: RoBERTa-base's
size), beside the figure the paper reports (issue 67).

    python -m simulations.papers.claims figures   # docs/papers/figures/<paper>-base-scale.png
    python tools/generated.py                     # each paper page's "base-scale-<paper>" block

One :class:`Claim` per paper (:data:`CLAIMS`): the experiment file that holds the paper's
setting as fedtext runs it (its records under ``simulations/results/<experiment>`` for
MiniLM-L6 and ``<experiment>-base`` for MPNet-base, the same file with ``--profile base``),
the methods it compares (:class:`Arm`, each with the paper's own figure where the paper
gives one) and the ordering the paper argues (``pairs``: first beats second).

Nothing here is typed by hand but the paper's figures: every other number is read from the
committed records (the runs a results table counts, :func:`simulations.tables.one_run_per_seed`).
An ordering is judged on runs paired by seed (and held-out group): both arms of a pair ran on
the same partition, shots and test texts, so the per-seed difference removes what the seed
changes for both. It is reported as mean ± std of those differences in points and the number
of pairs in which the paper's winner is ahead. A figure (PNG) carries the numbers it plots in
its ``Description`` metadata, so tests/docs can tell a stale picture from a current one.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "simulations" / "results"
FIGURES = ROOT / "docs" / "papers" / "figures"
COMMAND = "python -m simulations.papers.claims figures"
# the two backbones, smallest first: (results-folder suffix, what the table calls it)
SCALES: tuple[tuple[str, str], ...] = (("", "MiniLM-L6 (22 M)"), ("-base", "MPNet-base (110 M)"))
# what a metric is called in the tables (simulations.tables.COLUMNS' keys)
METRICS = {"final_accuracy": "final acc", "p_accuracy": "P acc", "np_accuracy": "NP acc"}
# the cost columns shown at 110 M, with their headings and digits
COSTS: tuple[tuple[str, str, int], ...] = (
    ("kb_up_per_client_round", "KB up / client-round", 2),
    ("kb_down_per_client_round", "KB down / client-round", 2),
    ("peak_client_rss_mb", "peak client MB", 0),
)


@dataclass(frozen=True)
class Reference:
    """A figure the paper reports for one method: accuracy in percent, the backbone it was
    measured on, where the paper prints it and which metric it is (a key of :data:`METRICS`).
    ``relative``: the paper gives it as a share of full-label fine-tuning's accuracy (FeS's
    Table 4), so it is shown in the table but not drawn on an absolute axis."""

    value: float
    model: str
    source: str
    metric: str = "final_accuracy"
    relative: bool = False

    def text(self) -> str:
        share = " of full-label fine-tuning" if self.relative else ""
        return f"{self.value:.2f} %{share} ({self.model}; {self.source})"


@dataclass(frozen=True)
class Arm:
    """One method of a comparison: its label in the records (the method, or the compare
    runner's variant label) and the paper's figure for it, if the paper gives one."""

    label: str
    paper: tuple[Reference, ...] = ()

    def reference(self, metric: str) -> Reference | None:
        """The paper's absolute figure for ``metric``, if it gives one."""
        return next((r for r in self.paper if r.metric == metric and not r.relative), None)


@dataclass(frozen=True)
class Change:
    """A cheap change of the setting that could decide an ordering at 110 M (issue 67, item 3):
    the experiment file's ``[profile.<profile>]`` (its records under ``<experiment>-<profile>``),
    what it changes, and the arms it reruns: always every arm of a pair it judges, so no method's
    budget is tuned alone."""

    profile: str  # e.g. "base-d500": the base profile with one key changed for the arms below
    what: str  # what it changes, in words (shown in the block)
    arms: tuple[str, ...]  # the labels it reruns


@dataclass(frozen=True)
class Claim:
    """One paper's headline comparison (see the module docstring)."""

    key: str  # the paper: block "base-scale-<key>" on docs/papers/<key>.md, figure <key>-base-scale.png
    statement: str  # what the paper argues, in one line
    experiment: str  # simulations/experiments/<experiment>.toml
    arms: tuple[Arm, ...]
    pairs: tuple[tuple[str, str], ...]  # the paper's ordering: (winner, loser) labels
    metrics: tuple[str, ...] = ("final_accuracy",)  # the first is the one the ordering is judged on
    methods_flag: str = ""  # the --methods the base run took, where the file lists more methods
    unlearning: str = ""  # FedDPGu: the unlearning experiment whose summary follows (:func:`unlearning_lines`)
    changes: tuple[Change, ...] = ()  # cheap changes run at 110 M (:func:`change_lines`)

    @property
    def page(self) -> str:
        return f"docs/papers/{self.key}.md"

    @property
    def figure(self) -> Path:
        return FIGURES / f"{self.key}-base-scale.png"

    def command(self) -> str:
        """The command that makes the base-scale records."""
        methods = f" --methods {self.methods_flag}" if self.methods_flag else ""
        return f"python -m simulations.compare simulations/experiments/{self.experiment}.toml --profile base{methods}"


# The papers' figures come from ../shared/papers (the file named in each source) and are typed
# here once; docs/papers/<paper>.md quotes them only through the generated block.
_LARGE, _BASE = "RoBERTa-large", "RoBERTa-base"
_DPG_T1 = "FedDPG (004) Table 1"  # global accuracy, 100 clients (FedDPG §4.1)
CLAIMS: tuple[Claim, ...] = (
    Claim(
        key="fedbpt",
        statement=("FedBPT on SST-2: does gradient-free prompt tuning (fedbpt, and bbt-fed, the FedAvg of z "
                   "FedBPT replaces) come closer to back-propagated prompts (fedprompt) as the model grows?"),
        experiment="fedbpt_sst2",
        methods_flag="fedbpt bbt-fed fedprompt",
        arms=(
            # FedBPT's own file (003) holds §4 only, no results: FedDPG's Table 1 reports FedBPT and FedPrompt
            Arm("fedbpt", (Reference(87.16, _LARGE, f"{_DPG_T1}, SST-2"),)),
            # no table has FedBPT and BBT-Fed together: FedDLS's BBT (Fed), SST-2 at Dir(0.4), P accuracy
            Arm("bbt-fed", (Reference(81.46, _LARGE, "FedDLS (000) Table 2, SST-2 Dir(0.4), P"),)),
            Arm("fedprompt", (Reference(90.25, _LARGE, f"{_DPG_T1}, SST-2"),)),
        ),
        pairs=(("fedbpt", "bbt-fed"), ("fedprompt", "fedbpt")),
        changes=(Change("base-d500", "the paper's d = 500 for both CMA-ES methods (d = 100 above; the same "
                                     "model queries a seed: d does not change the budget)", ("fedbpt", "bbt-fed")),),
    ),
    Claim(
        key="fes",
        statement=("FeS on AG News with 64 gold labels: fes against fedfsl and fedcls, at a fraction of "
                   "fedfsl's bytes and memory."),
        experiment="fes_ag_news",
        methods_flag="fes fedfsl fedfsl-bias fedcls",
        arms=(
            # FeS (001) Table 4's "Conv. Acc." is relative to full-label fine-tuning (AG News, RoBERTa-large)
            Arm("fes", (Reference(95.9, _LARGE, "FeS (001) Table 4, AG News", relative=True),)),
            Arm("fedfsl", (Reference(92.5, _LARGE, "FeS (001) Table 4, AG News", relative=True),
                           # the FedFSL pipeline ("Both (Ours)") at 64 gold labels, FeS §2.3 Table 1
                           Reference(90.2, _LARGE, "FeS (001) Table 1, AG News, 64 labels"))),
            Arm("fedfsl-bias", (Reference(92.5, _LARGE, "FeS (001) Table 4, AG News", relative=True),)),
            Arm("fedcls", (Reference(27.9, _LARGE, "FeS (001) Table 4, AG News", relative=True),)),
        ),
        pairs=(("fes", "fedfsl"), ("fes", "fedcls"), ("fedfsl", "fedcls")),
    ),
    Claim(
        key="feddrs",
        statement="FedDRS at Dirichlet α = 0.05: feddrs against feddf and fedavg (FedDRS Table 1's column).",
        experiment="feddrs_ag_news_alpha005",
        arms=(
            # FedDRS (002) Table 1, α = 0.05, RoBERTa-base: the SuperGLUE dev score over 8 tasks, last 5 rounds
            Arm("feddrs", (Reference(70.27, _BASE, "FedDRS (002) Table 1, α = 0.05, SuperGLUE"),)),
            Arm("feddf", (Reference(67.11, _BASE, "FedDRS (002) Table 1, α = 0.05, SuperGLUE"),)),
            Arm("fedavg", (Reference(67.68, _BASE, "FedDRS (002) Table 1, α = 0.05, SuperGLUE"),)),
        ),
        pairs=(("feddrs", "feddf"), ("feddrs", "fedavg")),
    ),
    Claim(
        key="feddls",
        statement=("FedDLS on the Amazon domains (group cross-validation): feddls (Φ = 3) against fedprompt, "
                   "post-tuned accuracy of participants (P) and held-out clients (NP), and bytes per round."),
        experiment="feddls_amazon",
        methods_flag="feddls-phi3 fedprompt",
        metrics=("p_accuracy", "np_accuracy"),
        arms=(
            # FedDLS (000) Table 2, FDU-MTL column, RoBERTa-large (App. A): Ours (Φ=3) and Prompt Tuning (Fed)
            Arm("feddls-phi3", (Reference(86.64, _LARGE, "FedDLS (000) Table 2, FDU-MTL", "p_accuracy"),
                                Reference(86.66, _LARGE, "FedDLS (000) Table 2, FDU-MTL", "np_accuracy"))),
            Arm("fedprompt", (Reference(84.28, _LARGE, "FedDLS (000) Table 2, FDU-MTL", "p_accuracy"),
                              Reference(83.76, _LARGE, "FedDLS (000) Table 2, FDU-MTL", "np_accuracy"))),
        ),
        pairs=(("feddls-phi3", "fedprompt"),),
    ),
    Claim(
        key="feddpg",
        statement=("FedDPG's Table 1 on AG News: feddpg against fedprompt, fedptuning-v2 and fedavg (the paper "
                   "runs FedDPG on RoBERTa-base, the others on RoBERTa-large)."),
        experiment="feddpg_table1_ag_news",
        methods_flag="feddpg fedprompt fedptuning-v2 fedavg",
        arms=(
            Arm("feddpg", (Reference(92.33, _BASE, f"{_DPG_T1}, AG News"),)),
            Arm("fedprompt", (Reference(87.72, _LARGE, f"{_DPG_T1}, AG News"),)),
            Arm("fedptuning-v2", (Reference(88.17, _LARGE, f"{_DPG_T1}, AG News"),)),
            Arm("fedavg", (Reference(77.43, _LARGE, f"{_DPG_T1}, AG News"),)),
        ),
        pairs=(("feddpg", "fedprompt"), ("feddpg", "fedptuning-v2"), ("feddpg", "fedavg")),
        unlearning="feddpg_unlearning_ag_news",
    ),
)


def by_key(key: str) -> Claim:
    """The claim of paper ``key``."""
    for claim in CLAIMS:
        if claim.key == key:
            return claim
    raise KeyError(f"no claim for paper {key!r} (claims: {', '.join(c.key for c in CLAIMS)})")


# ----------------------------------------------------------------------------- reading records
@dataclass(frozen=True)
class Runs:
    """The counted runs of one arm at one scale: ``pair key -> record row`` (a row of
    :func:`simulations.tables.run_rows`), keyed by (seed, held-out group)."""

    rows: dict[tuple[Any, str], dict[str, Any]]

    def values(self, metric: str) -> list[float]:
        return [v for r in self.rows.values() if (v := _number(r.get(metric))) is not None]


def _number(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def load(folder: Path) -> dict[str, Runs]:
    """The runs each variant's table row counts under ``folder/runs`` (none: ``{}``)."""
    from simulations.tables import load_runs, one_run_per_seed

    runs_dir = folder / "runs"
    if not runs_dir.is_dir():
        return {}
    counted = one_run_per_seed(load_runs(runs_dir))
    out: dict[str, dict[tuple[Any, str], dict[str, Any]]] = {}
    for row in counted.to_dict("records") if not counted.empty else []:
        out.setdefault(str(row["variant"]), {})[(row["seed"], str(row["holdout"] or ""))] = row
    return {label: Runs(rows) for label, rows in out.items()}


def scales(claim: Claim, results: Path = RESULTS) -> list[dict[str, Runs]]:
    """The claim's runs at each of :data:`SCALES`, smallest first."""
    return [load(results / f"{claim.experiment}{suffix}") for suffix, _ in SCALES]


# ----------------------------------------------------------------------------- arithmetic
def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value), as the results tables compute them."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def paired(winner: Runs | None, loser: Runs | None, metric: str) -> list[float]:
    """``winner - loser`` in points (x 100) on every pair key both arms ran, in key order."""
    if winner is None or loser is None:
        return []
    out = []
    for key in sorted(set(winner.rows) & set(loser.rows), key=str):
        a, b = _number(winner.rows[key].get(metric)), _number(loser.rows[key].get(metric))
        if a is not None and b is not None:
            out.append(100 * (a - b))
    return out


def verdict(diffs: list[float]) -> str:
    """How a paired difference reads: holds (ahead in every pair), holds on average (ahead in
    the mean, not in every pair), reversed (behind in every pair), reversed on average, or tied
    (a mean of exactly 0)."""
    if not diffs:
        return "not run"
    mean = statistics.fmean(diffs)
    if all(d > 0 for d in diffs):
        return "holds"
    if all(d < 0 for d in diffs):
        return "reversed"
    if mean > 0:
        return "holds on average"
    if mean < 0:
        return "reversed on average"
    return "tied"


# ----------------------------------------------------------------------------- rendering
def pair_text(diffs: list[float]) -> str:
    """A paired ordering as the blocks write it: mean ± std in points, pairs the winner is
    ahead in, and the :func:`verdict` (``diffs`` not empty)."""
    m, s = mean_std(diffs)
    return f"{m:+.1f} ± {s:.1f} ({sum(d > 0 for d in diffs)}/{len(diffs)}), {verdict(diffs)}"


def _acc(runs: Runs | None, metric: str) -> str:
    values = runs.values(metric) if runs is not None else []
    if not values:
        return "—"
    m, s = mean_std(values)
    return f"{m:.3f} ± {s:.3f} ({len(values)})"


def _cost(runs: Runs | None, metric: str, digits: int) -> str:
    values = runs.values(metric) if runs is not None else []
    if not values:
        return "—"
    m, s = mean_std(values)
    return f"{m:,.{digits}f}" if round(s, digits) == 0 else f"{m:,.{digits}f} ± {s:,.{digits}f}"


def _paper(arm: Arm, metrics: tuple[str, ...]) -> str:
    shown = [f"{METRICS[r.metric]} {r.text()}" if len(metrics) > 1 else r.text() for r in arm.paper]
    return "; ".join(shown) or "—"


def render(claim: Claim, results: Path = RESULTS) -> str:
    """The paper page's block: the comparison at both scales beside the paper's figure, the
    paper's ordering judged at each scale on paired runs, and the picture."""
    small, base = scales(claim, results)
    head = ["method", "paper"]
    for metric in claim.metrics:
        head += [f"{METRICS[metric]}, {name}" for _, name in SCALES]
    head += [f"{title}, 110 M" for _, title, _ in COSTS]
    done = (results / f"{claim.experiment}-base").is_dir()
    where = f"`simulations/results/{claim.experiment}-base`" if done else "no run yet"
    out = [
        f"**{claim.statement}** Accuracy mean ± std (runs); the paper's figure in percent. "
        f"MiniLM-L6: `simulations/results/{claim.experiment}`; MPNet-base: `{claim.command()}` ({where}).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for arm in claim.arms:
        cells = [f"`{arm.label}`", _paper(arm, claim.metrics)]
        for metric in claim.metrics:
            cells += [_acc(at.get(arm.label), metric) for at in (small, base)]
        cells += [_cost(base.get(arm.label), key, digits) for key, _, digits in COSTS]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", f"The paper's ordering on {METRICS[claim.metrics[0]]}, paired by seed (difference in points, "
                "mean ± std over pairs; pairs where the paper's winner is ahead):", ""]
    for winner, loser in claim.pairs:
        parts = []
        for at, (_, name) in zip((small, base), SCALES, strict=True):
            diffs = paired(at.get(winner), at.get(loser), claim.metrics[0])
            if not diffs:
                parts.append(f"{name}: not run")
                continue
            parts.append(f"{name}: {pair_text(diffs)}")
        out.append(f"- `{winner}` ahead of `{loser}`: " + "; ".join(parts))
    for change in claim.changes:
        out += ["", *change_lines(claim, change, base, results)]
    if claim.unlearning:
        out += ["", *unlearning_lines(claim.unlearning, results)]
    out += ["", f"![{claim.key}: {METRICS[claim.metrics[0]]} at 22 M and 110 M beside the paper's figure]"
                f"(figures/{claim.figure.name})", "", f"The picture: `{COMMAND}` (from the same records)."]
    return "\n".join(out) + "\n"


def change_lines(claim: Claim, change: Change, base: dict[str, Runs], results: Path = RESULTS) -> list[str]:
    """A cheap change at 110 M: each rerun arm's accuracy beside its runs in the base profile
    (the "110 M" column: ``--profile base``, the block's table), its difference from them paired
    by seed, and the paper's pairs among the rerun arms judged again on the changed runs alone
    ("not run" where an arm has no changed run, "no common seed" where both ran on other seeds)."""
    metric = claim.metrics[0]
    folder = f"{claim.experiment}-{change.profile}"
    changed = load(results / folder)
    command = (f"python -m simulations.compare simulations/experiments/{claim.experiment}.toml "
               f"--profile {change.profile} --methods {' '.join(change.arms)}")
    where = f"`simulations/results/{folder}`" if changed else "no run yet"
    out = [f"A cheap change at 110 M, {change.what}: `{command}` ({where}).", "",
           f"| method | {METRICS[metric]}, 110 M | {METRICS[metric]}, 110 M changed "
           "| change, paired by seed (points) |",
           "|---|---|---|---|"]
    for label in change.arms:
        diffs = paired(changed.get(label), base.get(label), metric)
        moved = "—" if not diffs else "{:+.1f} ± {:.1f} ({})".format(*mean_std(diffs), len(diffs))
        out.append(f"| `{label}` | {_acc(base.get(label), metric)} | {_acc(changed.get(label), metric)} | {moved} |")
    for winner, loser in claim.pairs:
        if {winner, loser} <= set(change.arms):
            diffs = paired(changed.get(winner), changed.get(loser), metric)
            if diffs:
                text = pair_text(diffs)
            else:
                text = "no common seed" if winner in changed and loser in changed else "not run"
            out += ["", f"- changed, `{winner}` ahead of `{loser}`: {text}"]
    return out


# FedDPGu's summary columns: (unlearning_rows' key, heading), each a mean over seeds in points
UNLEARNING: tuple[tuple[str, str], ...] = (
    ("forget acc before", "forget acc before"),
    ("forget acc after", "forget acc after"),
    ("global acc before", "global acc before"),
    ("global acc after", "global acc after"),
    ("mean other change", "other clients' change"),
    ("worst other change", "worst other client's change"),
)


def unlearning_lines(experiment: str, results: Path = RESULTS) -> list[str]:
    """FedDPGu at both scales: the unlearning harness's per-seed rows
    (:func:`simulations.papers.feddpg.unlearning.unlearning_rows`) as means over seeds, with the
    seeds that meet issue 12's three criteria. FedDPG's paper gives no figure for it (§4.2.5 and
    Figure 4 describe it in words: little loss of global accuracy, a marginal effect on others)."""
    from simulations.papers.feddpg.unlearning import unlearning_rows

    command = f"python -m simulations.compare simulations/experiments/{experiment}.toml --profile base"
    head = ["FedDPGu, AG News", "seeds", *(title for _, title in UNLEARNING), "meets the criteria"]
    per_seed = (f"; per seed: `python -m simulations.papers.feddpg.unlearning table simulations/results/"
                f"{experiment}-base`" if (results / f"{experiment}-base").is_dir() else "")
    out = [f"FedDPGu's forgetting (`{command}`{per_seed}), accuracy in points, mean over seeds; the paper "
           "reports no figure for it:", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for suffix, name in SCALES:
        folder = results / f"{experiment}{suffix}" / "runs"
        rows = unlearning_rows(folder) if folder.is_dir() else []
        if not rows:
            out.append("| " + " | ".join([name, "0", *("—" for _ in UNLEARNING), "—"]) + " |")
            continue
        cells = [f"{statistics.fmean(r[key] for r in rows):.1f}" for key, _ in UNLEARNING]
        met = sum(bool(r["meets criteria"]) for r in rows)
        out.append("| " + " | ".join([name, str(len(rows)), *cells, f"{met}/{len(rows)}"]) + " |")
    return out


# ----------------------------------------------------------------------------- figures
def figure_data(claim: Claim, results: Path = RESULTS) -> dict[str, Any]:
    """What the picture plots: per arm, the first metric's mean and std in percent at each
    scale (None where not run) and the paper's figure; rounded to 0.01 points."""
    at = scales(claim, results)
    metric = claim.metrics[0]
    arms = []
    for arm in claim.arms:
        points = []
        for runs in at:
            values = runs[arm.label].values(metric) if arm.label in runs else []
            if values:
                m, s = mean_std(values)
                points.append([round(100 * m, 2), round(100 * s, 2), len(values)])
            else:
                points.append(None)
        ref = arm.reference(metric)
        arms.append({"label": arm.label, "scales": points, "paper": None if ref is None else [ref.value, ref.model]})
    return {"claim": claim.key, "metric": metric, "arms": arms}


def draw(claim: Claim, out: Path | None = None, results: Path = RESULTS) -> Path:
    """Write the claim's PNG: per method, the metric at 22 M and 110 M (mean, ± std bar) and
    the paper's figure as a black bar; its data in the PNG's ``Description``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = figure_data(claim, results)
    out = out or claim.figure
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(claim.arms), 3.6), dpi=110, layout="constrained")
    offsets, colours, markers = (-0.15, 0.15), ("#8da0cb", "#e78a3c"), ("o", "s")
    labelled: set[str] = set()  # each legend entry once: at the first method that has it

    def label(name: str) -> str | None:
        first = name not in labelled
        labelled.add(name)
        return name if first else None

    for i, arm in enumerate(data["arms"]):
        for j, point in enumerate(arm["scales"]):
            if point is not None:
                ax.errorbar(i + offsets[j], point[0], yerr=point[1], fmt=markers[j], color=colours[j], capsize=3,
                            label=label(SCALES[j][1]))
        if arm["paper"] is not None:
            ax.hlines(arm["paper"][0], i - 0.3, i + 0.3, colors="black", linewidth=2, label=label("paper"))
            ax.annotate(arm["paper"][1], (i + 0.3, arm["paper"][0]), fontsize=6, va="center")
    ax.set_xticks(range(len(claim.arms)), [a.label for a in claim.arms])
    ax.set_xlim(-0.6, len(claim.arms) - 0.1)
    ax.set_ylabel(f"{METRICS[data['metric']]} (%)")
    ax.set_title(f"{claim.key}: {claim.experiment}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.savefig(out, metadata={"Description": json.dumps(data, sort_keys=True), "Software": None})
    plt.close(fig)
    return out


def figure_description(path: Path) -> dict[str, Any] | None:
    """The data a committed figure was drawn from (its ``Description``), None if it has none."""
    from PIL import Image

    with Image.open(path) as im:
        text = im.text.get("Description") if hasattr(im, "text") else None
    return json.loads(text) if text else None


# ----------------------------------------------------------------------------- blocks
def block(key: str) -> str:
    """The generated block of paper ``key``'s page (tools/generated.py)."""
    return render(by_key(key))


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Each paper's headline comparison at 22 M and 110 M.")
    ap.add_argument("what", choices=["figures", "show"], help="figures: write every PNG; show: print every block")
    args = ap.parse_args(list(argv) if argv is not None else None)
    for claim in CLAIMS:
        if args.what == "figures":
            print(draw(claim).relative_to(ROOT))
        else:
            print(render(claim))
    return 0


if __name__ == "__main__":
    sys.exit(main())
