"""Robust aggregation against one lying client (issue 58): the T1 table, a study (:mod:`simulations.studies`).

    python -m simulations.compare simulations/experiments/robust_ag_news.toml               # runs, table
    python -m simulations.compare simulations/experiments/robust_ag_news.toml --seeds 0     # some seeds
    python -m simulations.compare simulations/experiments/robust_ag_news.toml --table-only  # from the records

Its runs are ``simulations/experiments/robust_ag_news.toml`` (its header says the setting: T1
with 5 clients per round, fedprompt, 3 seeds; each label is ``<aggregator>-<attack>``), run by the
compare runner through the server's own round loop in this process (``engine = "inprocess"``:
:mod:`simulations.inprocess`, the ServerApp's server and strategy, the ClientApp's clients behind
in-process proxies), not through Ray: the round math and the records are the same, and 60 runs
fit 2 cores without 60 Ray start-ups. Records go to ``simulations/results/robust_ag_news/runs/``;
a run already finished there (:func:`simulations.compare.finished_run`) is not run again.

The table (``table.md`` beside the runs, and the ``robust-table`` block of docs/reliability.md):
final server accuracy, mean ± std over the seeds, one row per aggregator, one column per attack;
how far the attack moved the final global prompt (:func:`write_drift`); and per attack, how many
of the attacker's uploads the server dropped and how many updates it clipped, summed over the runs.

*Drift* of an attacked run: ``‖x_T − x_T°‖ / ‖x_T° − x_0‖``, its final global prompt's distance
from the final prompt of the same aggregator's and seed's run without the attack, in units of
how far that honest run moved from the initial prompt x_0 in its 4 rounds. 0: the attack changed
nothing; 1: it moved the model as far as the whole honest training did. Computed from the runs'
checkpoints (``checkpoint.npz``: the global arrays after the last round, signed with this user's
key, not committed) into ``drift.json``, which is.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from simulations.compare import default_out
from simulations.tables import finished_runs

REPO = Path(__file__).resolve().parents[2]
# the compare runner resumes a run of this study that stopped part-way (its records are accuracies, not a launch's
# time): simulations.compare.resumable_run
RESUMES = True
EXPERIMENT = REPO / "simulations" / "experiments" / "robust_ag_news.toml"
OUT = default_out(EXPERIMENT)  # simulations/results/robust_ag_news
AGGREGATORS = {  # label prefix -> what the row says
    "mean": "mean (FedAvg)",
    "clip": "mean, update-clip=1 (FLAME)",
    "median": "median",
    "trimmed": "trimmed-mean, β 0.2",
    "krum": "krum, f = 1",
    "dpclip": "mean after DP's clip (dp=central, dp-clip=1.65, dp-noise=0)",
}
ATTACKS = {"none": "no attack", "weight-lie": "weight lie", "scale": "1,000× update", "sign-flip": "sign flip"}


def split_label(label: str) -> tuple[str, str]:
    """``"clip-sign-flip"`` -> ``("clip", "sign-flip")``."""
    agg, attack = label.split("-", 1)
    return agg, attack


DRIFT = "drift.json"  # beside the runs, committed


def finish(out: Path = OUT) -> None:
    """``<out>/drift.json``: each attacked run's drift (module docstring), from the checkpoints of
    the finished runs (the newest per label and seed); runs without a checkpoint here are left as
    ``drift.json`` had them."""
    from fedtext.server import checkpoint
    from fedtext.backbone import backbone_for
    from fedtext.learning.data import labelled
    from fedtext.common.registry import METHODS
    from fedtext.common.config import RunConfig

    finals: dict[tuple[str, int], tuple[Any, dict[str, Any]]] = {}
    for (label, seed), run in finished_runs(out / "runs").items():
        try:
            finals[(label, seed)] = (checkpoint.load(run["dir"]).global_arrays, run["config"]["config"])
        except (FileNotFoundError, checkpoint.CheckpointError):
            continue
    path = out / DRIFT
    drift = json.loads(path.read_text()) if path.exists() else {}
    initial: dict[int, list[Any]] = {}
    for (label, seed), (arrays, cfg) in sorted(finals.items()):
        agg, attack = split_label(label)
        honest = finals.get((f"{agg}-none", seed))
        if attack == "none" or honest is None:
            continue
        if seed not in initial:  # x_0: the model's initial arrays, seeded like the runs'
            rc = RunConfig.from_run_config({k: v for k, v in cfg.items() if k not in ("resolved-task", "resolved-labels",
                                                                                      "trainable-parameters")}, METHODS)
            initial[seed] = rc.method_config.model_class()(rc, backbone_for(rc, labelled(rc).task)).initial_arrays()
        travel = _distance(honest[0], initial[seed])
        drift[f"{label}/{seed}"] = _distance(arrays, honest[0]) / travel
    path.write_text(json.dumps(drift, indent=1, sort_keys=True) + "\n")


def _distance(a: list[Any], b: list[Any]) -> float:
    import numpy as np

    return float(np.sqrt(sum(np.sum((np.asarray(x, np.float64) - np.asarray(y, np.float64)) ** 2)
                             for x, y in zip(a, b, strict=True))))


def collect(out: Path = OUT) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Finished runs by (aggregator, attack): the newest per seed, each with its final accuracy
    and the attacker's drops and the clipped updates summed over its rounds."""
    newest = finished_runs(out / "runs") if (out / "runs").exists() else {}
    drift = json.loads((out / DRIFT).read_text()) if (out / DRIFT).exists() else {}
    by_cell: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for (label, seed), run in sorted(newest.items()):
        rounds = [json.loads(x) for x in (Path(run["dir"]) / "rounds.jsonl").read_text().splitlines()]
        attackers = set(run["config"]["config"]["attack-partitions"].split(","))
        by_cell.setdefault(split_label(label), []).append({
            "seed": seed,
            "accuracy": run["summary"]["final_accuracy"],
            "dropped": sum(1 for r in rounds for d in fit_drops(r) if d["client"] in attackers),
            "sampled": sum(1 for r in rounds
                           if attackers & (set(r.get("trained", [])) | {d["client"] for d in fit_drops(r)})),
            # update-clip's count is a method metric; central DP's is in the round's privacy entry
            "clipped": sum(int(r.get("method_metrics", {}).get("clipped", 0))
                           + int((r.get("privacy") or {}).get("clipped", 0)) for r in rounds),
            "drift": drift.get(f"{label}/{seed}"),
        })
    return by_cell


def fit_drops(record: dict[str, Any]) -> list[dict[str, str]]:
    """A round record's dropped fit results (an evaluate reply's drop says so first)."""
    return [d for d in record.get("dropped", []) if not d["reason"].startswith("evaluate reply")]


def table(out: Path = OUT) -> str:
    """The table (module docstring) from the records under ``out``."""
    found = collect(out)
    if not found:
        return ("No finished run under simulations/results/robust_ag_news/runs yet "
                "(`python -m simulations.compare simulations/experiments/robust_ag_news.toml`).\n")

    def cell(runs: list[dict[str, Any]]) -> str:
        acc = [r["accuracy"] for r in runs]
        spread = f" ± {statistics.stdev(acc):.3f}" if len(acc) > 1 else ""
        return f"{statistics.mean(acc):.3f}{spread} ({len(acc)})"

    lines = ["| aggregator | " + " | ".join(ATTACKS.values()) + " |", "|---" * (len(ATTACKS) + 1) + "|"]
    for agg, name in AGGREGATORS.items():
        lines.append(f"| {name} | " + " | ".join(cell(found[(agg, a)]) if (agg, a) in found else "–"
                                                 for a in ATTACKS) + " |")
    lines += ["", "Drift of the final global prompt under each attack (module docstring of simulations/studies/robust.py: "
              "0 = as if honest, 1 = as far as the honest run's whole training moved it), mean and largest "
              "over the seeds:", "", "| aggregator | " + " | ".join(list(ATTACKS.values())[1:]) + " |",
              "|---" * len(ATTACKS) + "|"]
    for agg, name in AGGREGATORS.items():
        cells = []
        for a in list(ATTACKS)[1:]:
            d = [r["drift"] for r in found.get((agg, a), []) if r["drift"] is not None]
            cells.append(f"{statistics.mean(d):.2f} (max {max(d):.2f})" if d else "–")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "The attacker's uploads dropped / rounds it was sampled in, and updates clipped, over every "
              "run of the column (all aggregators, all seeds):", "",
              "| | " + " | ".join(ATTACKS.values()) + " |", "|---" * (len(ATTACKS) + 1) + "|"]
    for what, key in (("attacker dropped / sampled", "dropped"), ("updates clipped", "clipped")):
        row = []
        for a in ATTACKS:
            runs = [r for (agg, att), rs in found.items() if att == a for r in rs]
            total = sum(r[key] for r in runs)
            row.append(f"{total} / {sum(r['sampled'] for r in runs)}" if key == "dropped" else str(total))
        lines.append(f"| {what} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
