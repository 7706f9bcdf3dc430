"""Utility against privacy (issue 59): the T1 table and figure of final accuracy against ε.

    python -m simulations.privacy                  # every planned run not yet finished, then table and figure
    python -m simulations.privacy --seeds 0        # some seeds
    python -m simulations.privacy --table-only     # table and figure from the committed records
    python -m simulations.privacy --pilot fedlora  # the honest update norms a dp-clip is chosen from
    python -m simulations.privacy --cross-device --profile cpu            # issue 69's cross-device runs
    python -m simulations.privacy --cross-device --profile cpu --release  # what z's noise does to each release

Runs ``simulations/experiments/privacy_ag_news.toml`` (its header says the setting: T1, central DP at
noise multipliers 0, 0.5, 1 and 2 for fedprompt, fedlora, bbt-fed and fedkseed, 3 seeds; each label is
``<method>-<noise>``) through the server's own round loop in this process, as
:mod:`simulations.robust` does (:func:`simulations.robust.run_all`: the same round math and records,
no Ray start-up per run). Records go to ``simulations/results/privacy_ag_news/runs/``.

The table (``table.md`` beside the runs, and the ``privacy-table`` block of docs/privacy.md): per
method and noise, the final server accuracy (mean ± std over the seeds), the ε spent at δ = 10⁻⁵
after the last round (from the round records' ``privacy`` entry: the RDP accountant's), the updates
clipped and the bytes per client-round. The figure (``accuracy_vs_epsilon.png`` / ``.svg``): accuracy
against ε per method, the run without DP drawn as a dashed line at its accuracy.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulations import compare, robust

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "simulations" / "experiments" / "privacy_ag_news.toml"
OUT = REPO / "simulations" / "results" / "privacy_ag_news"
# issue 69's cross-device harness (its header says the setting and what a run costs here)
CROSS_DEVICE = REPO / "simulations" / "experiments" / "privacy_cross_device.toml"
CROSS_DEVICE_OUT = REPO / "simulations" / "results" / "privacy_cross_device"
METHODS = ("fedprompt", "fedlora", "bbt-fed", "fedkseed")
NOISES = {"none": "no DP", "z0": "clip only (z = 0)", "z05": "z = 0.5", "z1": "z = 1", "z2": "z = 2"}
FIGURE = "accuracy_vs_epsilon"


def cross_device_out(profile: str | None) -> Path:
    """Where the cross-device harness's runs go: :data:`CROSS_DEVICE_OUT`, or a profile's folder
    beside it, named as :func:`simulations.compare.default_out` names every profile's."""
    return CROSS_DEVICE_OUT if profile is None else compare.default_out(CROSS_DEVICE, profile)


def split_label(label: str) -> tuple[str, str]:
    """``"bbt-fed-z05"`` -> ``("bbt-fed", "z05")`` (the noise is the last dash's part)."""
    method, noise = label.rsplit("-", 1)
    return method, noise


def collect() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Finished runs by (method, noise): the newest per seed, with its final accuracy, final ε,
    clipped updates over its rounds and bytes per client-round."""
    table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if not (OUT / "runs").exists():
        return table
    for (label, seed), run in sorted(robust.newest_runs(OUT).items()):
        rounds = [json.loads(x) for x in (Path(run["dir"]) / "rounds.jsonl").read_text().splitlines()]
        spent = [r["privacy"] for r in rounds if r.get("privacy")]
        trained = [r for r in rounds if r.get("bytes_up_per_client") is not None]
        table.setdefault(split_label(label), []).append({
            "seed": seed,
            "accuracy": run["summary"]["final_accuracy"],
            "start": rounds[0].get("global_accuracy"),  # round 0: the initial model, before any training
            "epsilon": spent[-1]["epsilon"] if spent else None,
            "clipped": sum(int(p.get("clipped", 0)) for p in spent),
            "up": statistics.mean(r["bytes_up_per_client"] for r in trained) if trained else None,
            "down": statistics.mean(r["bytes_down_per_client"] for r in trained) if trained else None,
        })
    return table


def _acc(runs: list[dict[str, Any]]) -> str:
    acc = [r["accuracy"] for r in runs]
    spread = f" ± {statistics.stdev(acc):.3f}" if len(acc) > 1 else ""
    return f"{statistics.mean(acc):.3f}{spread} ({len(acc)})"


def _eps(runs: list[dict[str, Any]], noise: str) -> str:
    if noise == "none":
        return "—"
    eps = {r["epsilon"] for r in runs}
    if eps == {None}:
        return "∞"
    return ", ".join(f"{e:.2f}" for e in sorted(e for e in eps if e is not None))


def render() -> str:
    """The table (module docstring) from the records under :data:`OUT`."""
    table = collect()
    if not table:
        return "No finished run under simulations/results/privacy_ag_news/runs yet (`python -m simulations.privacy`).\n"
    lines = ["Final server accuracy, mean ± std over the seeds (runs), beside the initial model's (round 0: the mean "
             "over the seeds), and ε at δ = 10⁻⁵ after the 4 rounds:", "",
             "| method | round 0 | " + " | ".join(NOISES.values()) + " |", "|---" * (len(NOISES) + 2) + "|"]
    for method in METHODS:
        # round 0 is the same initial model in every run of a seed: one value per seed, then their mean
        by_seed = {r["seed"]: r["start"] for n in NOISES for r in table.get((method, n), []) if r["start"] is not None}
        start = f"{statistics.mean(by_seed.values()):.3f}" if by_seed else "–"
        lines.append(f"| `{method}` | {start} | " + " | ".join(_acc(table[(method, n)]) if (method, n) in table else "–"
                                                              for n in NOISES) + " |")
    eps_row = [_eps(runs, n) for n in NOISES if (runs := next((table[(m, n)] for m in METHODS if (m, n) in table), None))]
    lines.append("| ε (every method) | | " + " | ".join(eps_row) + " |")
    lines += ["", "Updates clipped at dp-clip (of 12 a run: 3 clients × 4 rounds; summed over the seeds) and bytes "
              "per client-round up / down (every noise alike: DP adds no byte):", "",
              "| method | dp-clip | clipped: " + " | ".join(list(NOISES.values())[1:]) + " | bytes up / down |",
              "|---" * (len(NOISES) + 2) + "|"]
    clips = _clips()
    for method in METHODS:
        cells = [str(sum(r["clipped"] for r in table.get((method, n), []))) if (method, n) in table else "–"
                 for n in list(NOISES)[1:]]
        runs = [r for n in NOISES for r in table.get((method, n), []) if r["up"] is not None]
        ups, downs = {round(r["up"]) for r in runs}, {round(r["down"]) for r in runs}
        sent = f"{'/'.join(f'{u:,}' for u in sorted(ups))} / {'/'.join(f'{d:,}' for d in sorted(downs))}" if runs else "–"
        lines.append(f"| `{method}` | {clips.get(method, '–')} | " + " | ".join(cells) + f" | {sent} |")
    return "\n".join(lines) + "\n"


def _clips() -> dict[str, float]:
    """Each method's dp-clip as the experiment sets it."""
    exp = compare.load_experiment(EXPERIMENT)
    return {split_label(label)[0]: float(over["dp-clip"]) for label, over in exp.get("method", {}).items()
            if "dp-clip" in over}


def figure() -> list[Path]:
    """Accuracy against ε per method (PNG and SVG beside the table); the no-DP accuracy as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = collect()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, method in enumerate(METHODS):
        colour = f"C{i}"
        points = []
        for noise in ("z05", "z1", "z2"):
            runs = table.get((method, noise), [])
            eps = [r["epsilon"] for r in runs if r["epsilon"] is not None]
            if runs and eps:
                acc = [r["accuracy"] for r in runs]
                points.append((statistics.mean(eps), statistics.mean(acc), statistics.stdev(acc) if len(acc) > 1 else 0))
        if points:
            xs, ys, es = zip(*sorted(points), strict=True)
            ax.errorbar(xs, ys, yerr=es, marker="o", color=colour, capsize=3, label=method)
        plain = table.get((method, "none"), [])
        if plain:
            ax.axhline(statistics.mean(r["accuracy"] for r in plain), color=colour, linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ε at δ = 1e-5 after 4 rounds (central DP, q = 0.3)")
    ax.set_ylabel("final server accuracy (AG News, 200 texts)")
    ax.set_title("T1: accuracy against privacy (dashed: the same method without DP)", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, OUT, FIGURE)


def save_figure(fig: Any, folder: Path, name: str) -> list[Path]:
    """``fig`` laid out and written as ``<name>.png`` (120 dpi) and ``<name>.svg`` (no date in it: the
    same records give the same bytes) in ``folder``, then closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    for path in paths:
        fig.savefig(path, **({"metadata": {"Date": None}} if path.suffix == ".svg" else {"dpi": 120}))
    plt.close(fig)
    return paths


def record_updates(updates: list[list[Any]]) -> Callable[[Any], None]:
    """A :func:`simulations.inprocess.run` server hook that appends to ``updates`` the update
    (:meth:`fedtext.learning.model.Model.update`: upload minus the global arrays) of every upload the
    strategy's validation keeps, round after round."""

    def hook(server: Any) -> None:
        strategy = server.strategy
        validate = strategy.validate

        def measured(results: Any, failures: Any) -> Any:
            uploads = validate(results, failures)
            updates.extend(list(strategy.model.update(strategy.global_arrays, u.array_list())) for u in uploads)
            return uploads

        strategy.validate = measured

    return hook


def pilot(method: str, extra: dict[str, Any]) -> list[float]:
    """The L2 norms of the honest updates (:meth:`fedtext.learning.model.Model.update`) of a 2-round T1 run of
    ``method`` without DP: what each method's ``dp-clip`` in the experiment is the median of."""
    import tempfile

    import numpy as np

    from simulations.inprocess import run

    exp = compare.load_experiment(EXPERIMENT)
    updates: list[list[np.ndarray]] = []
    # the experiment's TOML tables (fedprompt.local-steps = ...) as Flower's flat keys, this method's only
    config = compare.for_method(compare.flatten(exp["run-config"]), method)
    with tempfile.TemporaryDirectory() as tmp:
        run({**config, "method": method, "num-server-rounds": 2, "eval-size": 50, "eval-every": 2, **extra},
            Path(tmp), clients=int(exp["num-supernodes"]), server_hook=record_updates(updates))
    return [float(np.sqrt(sum(float((x ** 2).sum()) for x in update))) for update in updates]


RELEASE_FILE = "release.json"  # beside the cross-device runs: issue 69's clause 3, one entry per method


def release_stats(updates: list[list[Any]], m: int, z: float, draws: int, seed: int) -> dict[str, float]:
    """What central DP's noise does to one round's release, at adaptive clipping's fixed point.

    With C the median update norm (adaptive clipping's target quantile 0.5 settles there, Andrew et
    al. 2021), the release is Δ̃ = (1/m) Σ clip_C(Δ_k) + N(0, (z_Δ C / m)² I_d) (fedtext.trust.privacy.
    CentralDP.release; z_Δ from Flower's ``compute_adaptive_noise_params(z, m)``, m the expected
    cohort). Its signal is ``signal`` = ‖(1/m) Σ clip_C(Δ_k)‖ / C (1 when every client points the
    same way, about 1/√m when they point at random); its noise has expected norm
    ``noise`` = z_Δ √d / m in units of C (d values released). ``snr`` = signal / noise; ``cosine``:
    the mean over ``draws`` seeded noise draws of cos(Δ̃, the noiseless clipped mean), what the
    global model's step keeps of its direction.

    Parameters
    ----------
    updates
        The round's honest updates Δ_k, each a list of arrays (one client's).
    m
        The denominator (``clients-per-round``: Poisson's expected cohort qN).
    z
        The noise multiplier asked for (``dp-noise``); z_Δ is what the update's noise gets.
    draws, seed
        Noise draws averaged for ``cosine``, and their generator's seed.
    """
    import math

    import numpy as np

    from fedtext.trust.privacy import clip, compute_adaptive_noise_params

    flat = [np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in u]) for u in updates]
    norms = [float(np.linalg.norm(f)) for f in flat]
    bound = statistics.median(norms)
    _, z_delta = compute_adaptive_noise_params(z, m, None)
    mean = np.sum([clip([f], bound)[0][0] for f in flat], axis=0) / m
    d = mean.size
    rng = np.random.default_rng(seed)
    cosines = []
    for _ in range(draws):
        noised = mean + rng.normal(0.0, z_delta * bound / m, d)
        cosines.append(float(noised @ mean / (np.linalg.norm(noised) * np.linalg.norm(mean))))
    signal = float(np.linalg.norm(mean)) / bound
    noise = z_delta * math.sqrt(d) / m
    return {"d": d, "updates": len(updates), "m": m, "z": z, "z_delta": float(z_delta), "clip": bound,
            "signal": signal, "noise": noise, "snr": signal / noise, "cosine": statistics.mean(cosines)}


def release(method: str, profile: str | None = "cpu", seed: int = 0, z: float = 1.2, draws: int = 16,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`release_stats` of ``method``'s first round in the cross-device setting (the
    experiment's run-config under ``profile``, without DP, the method's own budgets): the ~qN
    honest updates of the clients Poisson drew (:func:`record_updates`, as :func:`pilot`); with the
    round's client fit seconds. ``extra``: run-config keys over the experiment's (a test's tiny encoder)."""
    import tempfile
    import time

    from simulations.inprocess import run

    exp = compare.with_profile(compare.load_experiment(CROSS_DEVICE), profile)
    updates: list[list[Any]] = []
    config = {**exp["run-config"], "method": method, "seed": seed, "num-server-rounds": 1, "eval-size": 50,
              "eval-every": 1, **(extra or {})}
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        _, rounds = run(config, Path(tmp), clients=int(exp["num-supernodes"]), server_hook=record_updates(updates))
    stats = release_stats(updates, int(config["clients-per-round"]), z, draws, seed)
    return {"method": method, "seed": seed, **stats, "fit_s": rounds[-1]["client_fit_s"],
            "minutes": (time.time() - t0) / 60}


def run_release(profile: str | None, methods: tuple[str, ...] = METHODS, seed: int = 0, z: float = 1.2) -> Path:
    """:func:`release` of each of ``methods`` not yet measured (same seed and z), each saved to
    :data:`RELEASE_FILE` beside the profile's cross-device runs as soon as it is done, with the
    machine and the date."""
    import datetime as dt

    from fedtext.records.probes import machine_line

    path = cross_device_out(profile) / RELEASE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    done = json.loads(path.read_text()) if path.exists() else {"rows": []}
    for method in methods:
        if any(r["method"] == method and r["seed"] == seed and r["z"] == z for r in done["rows"]):
            print(f"{method}: measured before", flush=True)
            continue
        row = release(method, profile, seed, z)
        done["rows"] = [r for r in done["rows"] if r["method"] != method] + [row]
        done.update(machine=machine_line(), date=dt.date.today().isoformat(), profile=profile)
        path.write_text(json.dumps(done, indent=1) + "\n")
        print(f"{method}: {row['updates']} updates, snr {row['snr']:.3g}, {row['minutes']:.1f} min", flush=True)
    return path


def render_release() -> str:
    """docs/privacy.md's clause-3 table: per method, what central DP's noise does to one round's
    release at the cross-device point (:func:`release_stats`), from each profile's :data:`RELEASE_FILE`."""
    lines: list[str] = []
    for path in sorted(CROSS_DEVICE_OUT.parent.glob(f"{CROSS_DEVICE_OUT.name}*/{RELEASE_FILE}")):
        data = json.loads(path.read_text())
        rows = sorted(data["rows"], key=lambda r: r["d"])
        lines += [f"`{path.relative_to(REPO)}` (round 1, seed {rows[0]['seed']}, z = {rows[0]['z']:g}, m = "
                  f"{rows[0]['m']}; {data['machine']}, {data['date']}):", "",
                  "| method | values released d | updates | C (median norm) | signal ‖mean‖ / C | noise z_Δ√d / m "
                  "| signal / noise | cos(release, mean) | fit s a client |", "|---" * 9 + "|"]
        for r in rows:
            lines.append(f"| `{r['method']}` | {r['d']:,} | {r['updates']} | {r['clip']:.3g} | {r['signal']:.3f} | "
                         f"{r['noise']:.3f} | {r['snr']:.2f} | {r['cosine']:.3f} | {r['fit_s'] / r['updates']:.2f} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n" if lines else "No release measurement yet " \
        "(python -m simulations.privacy --cross-device --profile cpu --release).\n"


CROSS_DEVICE_FIGURE = "accuracy_by_round"


def no_dp_twin(label: str) -> str:
    """The label of a cross-device run's twin without DP: its noise part (``z12``, ``z0``) read as
    ``none`` (``fedlora-z12`` -> ``fedlora-none``, ``fedprompt-z12-dir`` -> ``fedprompt-none-dir``)."""
    return "-".join("none" if re.fullmatch(r"z\d+", part) else part for part in label.split("-"))


def cross_device_runs(out: Path) -> list[dict[str, Any]]:
    """The finished cross-device runs under ``out``, one per (label, seed) (the newest): the
    accuracy at each evaluated round, the cohorts drawn, the adaptive clip's path and ε by both
    accountants, computed from the run's own recorded q, z and rounds (:func:`fedtext.trust.privacy.epsilon`;
    the accountant the run used is the one its records carry)."""
    from fedtext.trust.privacy import epsilon

    rows = []
    if not (out / "runs").exists():
        return rows
    for (label, seed), run in sorted(robust.newest_runs(out).items()):
        rounds = [json.loads(x) for x in (Path(run["dir"]) / "rounds.jsonl").read_text().splitlines()]
        trained = [r for r in rounds if r["round"] > 0]
        spent = [r["privacy"] for r in trained if r.get("privacy")]
        row: dict[str, Any] = {
            "label": label, "seed": seed, "rounds": len(trained),
            "curve": {r["round"]: r["global_accuracy"] for r in rounds if r.get("global_accuracy") is not None},
            "cohort": [int(r["num_clients"]) for r in trained],
            "minutes": float(rounds[-1].get("wall_time_s") or 0.0) / 60,  # since the run began, at its last round
            "up": statistics.mean(r["bytes_up_per_client"] for r in trained if r.get("bytes_up_per_client")),
        }
        row["accuracy"] = row["curve"][max(row["curve"])]
        if spent:
            last = spent[-1]
            q, z, delta = float(last["sampling_rate"]), float(last["noise_multiplier"]), float(last["delta"])
            row.update(recorded=(last["accountant"], last.get("epsilon")), accounting=last["accounting"], q=q, z=z,
                       clip=(float(spent[0]["clip"]), float(last["clip"])),
                       clipped=sum(int(p["clipped"]) for p in spent) / sum(row["cohort"]))
            row["epsilon"] = {a: (epsilon(q, z, len(spent), delta, a) if z > 0 else None) for a in ("rdp", "pld")}
        rows.append(row)
    return rows


def render_cross_device() -> str:
    """docs/privacy.md's cross-device table: per run, the final accuracy and its curve, the gap to the
    same seed's run without DP, ε by RDP and PLD, the cohorts drawn and the adaptive clip; for each
    folder of :func:`cross_device_out` (the experiment's 50 rounds, then each profile's) that has runs."""
    folders = [CROSS_DEVICE_OUT, *sorted(CROSS_DEVICE_OUT.parent.glob(f"{CROSS_DEVICE_OUT.name}-*"))]
    lines: list[str] = []
    for out in folders:
        rows = cross_device_runs(out)
        if not rows:
            continue
        plain = {(r["label"], r["seed"]): r["accuracy"] for r in rows if no_dp_twin(r["label"]) == r["label"]}
        evals = sorted({k for r in rows for k in r["curve"]})
        lines += [f"`{out.relative_to(REPO)}` ({rows[0]['rounds']} rounds; server accuracy on the whole test split):",
                  "", "| run | seed | accuracy | vs no DP | accuracy at rounds " + ", ".join(map(str, evals))
                  + " | ε RDP | ε PLD | clients a round | C first → last | clipped | bytes up | minutes |",
                  "|---" * 12 + "|"]
        for r in rows:
            twin = (no_dp_twin(r["label"]), r["seed"])
            gap = f"{100 * (r['accuracy'] - plain[twin]):+.1f} pt" if twin in plain else "–"
            eps = r.get("epsilon") or {}
            cells = [f"{eps[a]:.2f}" if eps.get(a) is not None else ("∞" if eps else "—") for a in ("rdp", "pld")]
            clip = f"{r['clip'][0]:.2f} → {r['clip'][1]:.2f}" if "clip" in r else "—"
            clipped = f"{100 * r['clipped']:.0f} %" if "clipped" in r else "—"
            cohort = r["cohort"]
            lines.append(f"| `{r['label']}` | {r['seed']} | {r['accuracy']:.3f} | {gap} | "
                         + ", ".join(f"{r['curve'].get(k, float('nan')):.3f}" for k in evals)
                         + f" | {cells[0]} | {cells[1]} | {statistics.mean(cohort):.1f} ({min(cohort)}–{max(cohort)}) "
                         f"| {clip} | {clipped} | {r['up']:,.0f} | {r['minutes']:.0f} |")
        lines.append("")
    if not lines:
        return "No finished cross-device run yet (`python -m simulations.privacy --cross-device`).\n"
    return "\n".join(lines)


def cross_device_figure(out: Path) -> list[Path]:
    """Accuracy by round of each cross-device run under ``out`` (PNG and SVG beside the runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = cross_device_runs(out)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in rows:
        eps = (r.get("epsilon") or {}).get("rdp")
        name = f"{r['label']} s{r['seed']}" + (f" (ε {eps:.2f} RDP)" if eps is not None else "")
        xs = sorted(r["curve"])
        ax.plot(xs, [r["curve"][x] for x in xs], marker="o", label=name)
    ax.set_xlabel("round")
    ax.set_ylabel("server accuracy (the whole test split)")
    ax.set_title(f"{out.name}: 3,000 clients, Poisson q = 0.04, with and without central DP", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, out, CROSS_DEVICE_FIGURE)


def render_support() -> str:
    """docs/privacy.md's "which methods can run privately": each registered config's declared
    support (``privacy``, at its defaults: ``effective_privacy``) and, where it lacks one, its
    ``privacy_reason`` (what the one-line refusal quotes), and the method's own fit metrics (sent
    in clear beside the shared telemetry)."""
    from fedtext.common.registry import CONFIGS

    marks = {"dp-central": "central DP", "dp-local": "local DP", "secagg": "SecAgg+"}
    lines = ["| `method=` | " + " | ".join(marks.values()) + " | why not | its own fit metrics (in clear) |",
             "|---" * (len(marks) + 3) + "|"]
    for config in CONFIGS:
        supported, reason = config().effective_privacy()
        own = ", ".join(f"`{m.name}`" for m in config.fit_metrics) or "—"
        why = reason.replace("|", "\\|") if len(supported) < len(marks) else ""
        lines.append(f"| `{config.name}` | " + " | ".join("yes" if k in supported else "no" for k in marks)
                     + f" | {why} | {own} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", help="override the experiment's seeds")
    ap.add_argument("--table-only", action="store_true", help="render the table and figure from the records, run nothing")
    ap.add_argument("--labels", nargs="+", help="run only these of the experiment's labels (e.g. without the -z0 ones)")
    ap.add_argument("--pilot", metavar="METHOD", help="print the honest update norms of METHOD (dp-clip's source)")
    ap.add_argument("--cross-device", action="store_true", help="run issue 69's cross-device harness "
                    "(simulations/experiments/privacy_cross_device.toml) and list its runs' accuracy and epsilon")
    ap.add_argument("--release", action="store_true", help="with --cross-device: measure what z = 1.2's noise does "
                    "to one round's release of fedprompt, fedlora, bbt-fed and fedkseed (issue 69, clause 3)")
    ap.add_argument("--profile", help="with --cross-device: its [profile.<name>] setting (cpu: 30 rounds, what a "
                    "2-core sitting holds; paper: a GPU and a hub), results under <out>-<name>")
    args = ap.parse_args(argv)
    if args.cross_device and args.release:
        run_release(args.profile)
        print(render_release())
        return 0
    if args.cross_device:
        out = cross_device_out(args.profile)
        if not args.table_only:
            robust.run_all(args.seeds, CROSS_DEVICE, out, args.labels, args.profile)
        if not (out / "runs").exists():
            print(f"no run under {out.relative_to(REPO)} yet (python -m simulations.privacy --cross-device)")
            return 0
        print(render_cross_device())
        if cross_device_runs(out):
            cross_device_figure(out)
        return 0
    if args.pilot:
        norms = pilot(args.pilot, {})
        print(f"{args.pilot}: {len(norms)} updates, L2 norms {', '.join(f'{n:.3g}' for n in norms)}; "
              f"median {statistics.median(norms):.3g}")
        return 0
    if not args.table_only:
        robust.run_all(args.seeds, EXPERIMENT, OUT, args.labels)
    text = render()
    (OUT / "table.md").write_text(text)
    figure()
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
