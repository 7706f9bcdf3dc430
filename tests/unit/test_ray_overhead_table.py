"""The Ray-overhead study (simulations/studies/ray_overhead.py): its engines run the simulation with
their setting's CPUs per actor and torch threads, and its table reads each round's parts from the records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulations import compare
from simulations.studies import ray_overhead

from .test_dashboard import _round, write_run


def _run(root: Path, run_id: str, label: str, cores: int, parts: list[tuple[float, float, float | None, float]]) -> None:
    """A finished bbt-fed run of ``label`` whose rounds 1.. have (round, busy, start-up, overhead) seconds."""
    rounds = [_round(0, 0.5)] + [_round(i, 0.6, round_time_s=r, busy_s=b, startup_s=s, overhead_s=o)
                                  for i, (r, b, s, o) in enumerate(parts, 1)]
    d = write_run(root, run_id, "bbt-fed", 0, rounds, **{"run-name": label})
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "machine": {"cpu_count": cores}}))


def test_each_round_after_round_0_is_a_row_of_its_setting_in_the_files_order(tmp_path) -> None:
    runs = tmp_path / "runs"
    _run(runs, "b", "cpus1-threads1", 4, [(37.3, 30.6, 6.3, 0.42), (24.7, 24.4, None, 0.23)])
    _run(runs, "a", "cpus2-threads2", 2, [(37.6, 31.3, 5.3, 1.03), (24.0, 23.8, 0.0, 0.22)])
    lines = ray_overhead.table(tmp_path).splitlines()
    assert lines[1].startswith("| Ray actors x torch threads (10 clients, clients-per-round=5 num-server-rounds=2) |")
    assert lines[3:] == [  # actors = the run's machine's cores / the setting's CPUs per client
        "| 1 x 2 | 1 | 37.6 s | 31.3 s | 5.3 s | 1.03 s | 2.7% |",
        "| 1 x 2 | 2 | 24.0 s | 23.8 s | 0.0 s | 0.22 s | 0.9% |",
        "| 4 x 1 | 1 | 37.3 s | 30.6 s | 6.3 s | 0.42 s | 1.1% |",
        "| 4 x 1 | 2 | 24.7 s | 24.4 s | 0.0 s | 0.23 s | 0.9% |",
    ]


def test_each_label_runs_the_simulation_with_its_settings_cpus_and_threads(tmp_path, monkeypatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(compare, "run_logged", lambda cmd, log, env=None: calls.append((cmd, env)) or 0)
    exp = compare.load_experiment(ray_overhead.EXPERIMENT)
    settings = compare.label_settings(exp)
    assert {s["engine"] for s in settings.values()} == set(ray_overhead.SETTINGS)
    for label in exp["methods"]:
        engine = compare.engines_of(ray_overhead)[settings[label]["engine"]]
        assert engine({"method": "bbt-fed", "seed": 0}, 10, tmp_path / "x.log", "auto", 0.0) == 0
    (two, _), (one, env1) = calls
    assert two[two.index("--cpus-per-client") + 1] == "2.0" and calls[0][1] == {"OMP_NUM_THREADS": "2"}
    assert one[one.index("--cpus-per-client") + 1] == "1.0" and env1 == {"OMP_NUM_THREADS": "1"}
    assert one[one.index("--ray-address") + 1] == "auto" and "--gpus-per-client" not in one
    assert one[one.index("--num-supernodes") + 1] == "10" and "method=bbt-fed seed=0" in one
