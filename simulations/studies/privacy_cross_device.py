"""DP-FedAvg at a cross-device cohort (issue 69): 3,000 clients, Poisson q = 0.04, with and without
central DP, a study (:mod:`simulations.studies`); and what the noise does to one round's release.

    python -m simulations.compare simulations/experiments/privacy_cross_device.toml --profile cpu
    python -m simulations.compare simulations/experiments/privacy_cross_device.toml --profile cpu \\
        --methods fedprompt-none fedprompt-z12 --seeds 1                  # some labels and seeds
    python -m simulations.studies.privacy_cross_device --profile cpu --release  # clause 3's release measurement

Its runs are ``simulations/experiments/privacy_cross_device.toml`` (its header says the setting and
what a run costs here), run by the compare runner in this process (``engine = "inprocess"``). The
table (``table.md`` beside a folder's runs; the ``privacy-cross-device`` block of docs/privacy.md
holds every folder's): per run, the final accuracy and its curve, the gap to the same seed's run
without DP, ε by RDP and PLD, the cohorts drawn and the adaptive clip. The figure
(``accuracy_by_round``, made by :func:`finish` after new runs): accuracy by round of each run.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from simulations import compare
from simulations.studies.privacy import METHODS, record_updates, save_figure
from simulations.tables import finished_runs

REPO = Path(__file__).resolve().parents[2]
# the compare runner resumes a run of this study that stopped part-way (its records are accuracies, not a launch's
# time): simulations.compare.resumable_run
RESUMES = True
EXPERIMENT = REPO / "simulations" / "experiments" / "privacy_cross_device.toml"
OUT = compare.default_out(EXPERIMENT)  # simulations/results/privacy_cross_device; a profile's: <OUT>-<profile>


def cross_device_out(profile: str | None) -> Path:
    """Where the cross-device harness's runs go: :data:`OUT`, or a profile's folder
    beside it, named as :func:`simulations.compare.default_out` names every profile's."""
    return OUT if profile is None else compare.default_out(EXPERIMENT, profile)


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

    exp = compare.with_profile(compare.load_experiment(EXPERIMENT), profile)
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
    for path in sorted(OUT.parent.glob(f"{OUT.name}*/{RELEASE_FILE}")):
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
        "(python -m simulations.studies.privacy_cross_device --profile cpu --release).\n"


CROSS_DEVICE_FIGURE = "accuracy_by_round"


def _noise_twin(label: str, noise: str) -> str:
    """``label`` with its noise part (``z12``, ``z0``) read as ``noise``."""
    return "-".join(noise if re.fullmatch(r"z\d+", part) else part for part in label.split("-"))


def no_dp_twin(label: str) -> str:
    """The label of a cross-device run's twin without DP: its noise part (``z12``, ``z0``) read as
    ``none`` (``fedlora-z12`` -> ``fedlora-none``, ``fedprompt-z12-dir`` -> ``fedprompt-none-dir``)."""
    return _noise_twin(label, "none")


def zero_noise_twin(label: str) -> str:
    """The label of a run's twin at z = 0 (adaptive clipping, no noise): its noise part read as ``z0``
    (``fedprompt-z12-dir`` -> ``fedprompt-z0-dir``); the gap's reference where no run without DP exists."""
    return _noise_twin(label, "z0")


def cross_device_runs(out: Path) -> list[dict[str, Any]]:
    """The finished cross-device runs under ``out``, one per (label, seed) (the newest): the
    accuracy at each evaluated round, the cohorts drawn, the adaptive clip's path and ε by both
    accountants, computed from the run's own recorded q, z and rounds (:func:`fedtext.trust.privacy.epsilon`;
    the accountant the run used is the one its records carry)."""
    from fedtext.trust.privacy import epsilon

    rows = []
    if not (out / "runs").exists():
        return rows
    for (label, seed), run in finished_runs(out / "runs").items():
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


def table(out: Path | None = None) -> str:
    """The cross-device table: per run, the final accuracy and its curve, the gap to the same seed's
    run without DP, ε by RDP and PLD, the cohorts drawn and the adaptive clip; of the runs under
    ``out``, or (None: docs/privacy.md's block) for each folder of :func:`cross_device_out` (the
    experiment's 50 rounds, then each profile's) that has runs."""
    folders = [OUT, *sorted(OUT.parent.glob(f"{OUT.name}-*"))] if out is None else [out]
    lines: list[str] = []
    for out in folders:
        rows = cross_device_runs(out)
        if not rows:
            continue
        accuracy = {(r["label"], r["seed"]): r["accuracy"] for r in rows}
        evals = sorted({k for r in rows for k in r["curve"]})
        lines += [f"`{out.relative_to(REPO)}` ({rows[0]['rounds']} rounds; server accuracy on the whole test split):",
                  "", "| run | seed | accuracy | vs no DP | accuracy at rounds " + ", ".join(map(str, evals))
                  + " | ε RDP | ε PLD | clients a round | C first → last | clipped | bytes up | minutes |",
                  "|---" * 12 + "|"]
        for r in rows:
            # against the same seed's run without DP, else (none ran: the -dir pair) its run at z = 0
            gap = next((f"{100 * (r['accuracy'] - accuracy[(twin, r['seed'])]):+.1f} pt{note}"
                        for twin, note in ((no_dp_twin(r["label"]), ""), (zero_noise_twin(r["label"]), " (vs z = 0)"))
                        if (twin, r["seed"]) in accuracy and (note == "" or twin != r["label"])), "–")
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
        return ("No finished cross-device run yet "
                "(`python -m simulations.compare simulations/experiments/privacy_cross_device.toml`).\n")
    return "\n".join(lines)


def finish(out: Path) -> list[Path]:
    """Accuracy by round of each cross-device run under ``out`` (PNG and SVG beside the runs)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = cross_device_runs(out)
    fig, ax = plt.subplots(figsize=(9.0, 4.2))  # wide: the legend stands right of the curves, not on them
    colors = plt.get_cmap("tab20")  # 20 distinct colours: the default cycle repeats after 10 runs
    for i, r in enumerate(rows):
        eps = (r.get("epsilon") or {}).get("rdp")
        name = f"{r['label']} s{r['seed']}" + (f" (ε {eps:.2f} RDP)" if eps is not None else "")
        xs = sorted(r["curve"])
        ax.plot(xs, [r["curve"][x] for x in xs], marker="o", label=name, color=colors(i % 20),
                linestyle="--" if "-dir" in r["label"] else "-")
    ax.set_xlabel("round")
    ax.set_ylabel("server accuracy (the whole test split)")
    ax.set_title(f"{out.name}: 3,000 clients, Poisson q = 0.04, with and without central DP", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return save_figure(fig, out, CROSS_DEVICE_FIGURE)




def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="What z = 1.2's noise does to one round's release of fedprompt, "
                                 "fedlora, bbt-fed and fedkseed (issue 69, clause 3; the runs and the table: "
                                 "python -m simulations.compare simulations/experiments/privacy_cross_device.toml)")
    ap.add_argument("--release", action="store_true", required=True, help="measure the release")
    ap.add_argument("--profile", default="cpu", help="the experiment's [profile.<name>] setting (default cpu)")
    args = ap.parse_args(argv)
    run_release(args.profile)
    print(render_release())
    return 0


if __name__ == "__main__":
    sys.exit(main())
