"""The scale study's table (simulations/studies/scale.py) from hand-made run records and launch lines:
no run, no Flower.

What it must say: the seconds from launch to the end of round 0 (round 0's ``wall_time_s`` plus
``started_epoch`` less ``launched_epoch``), rounds 1 and 2, round 2's overhead, the last round's server
memory and the launch line's wall seconds; each ``client-ids`` value its own table, each table's
ratios to its own smallest federation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedtext.records import FINISHED, RunRecorder
from simulations import compare
from simulations.studies import scale

from .test_compare import refuse_run

LAUNCHED = 1_000_000.0  # every hand-made launch's epoch; a run's clock starts `startup` seconds later


def scale_run(runs_dir: Path, label: str, clients: int | None, startup: float | None, round0: float,
              times: tuple[float, float], overhead2: float, rss: tuple[float, float], client_ids: str = "ask") -> str:
    """The records of a finished bbt-fed run ``label`` of 3 rounds (0-2): round 0 ends ``round0`` s after
    the run's clock start, which is ``startup`` s after :data:`LAUNCHED` (``config.json``'s
    ``started_epoch``; None: the recorder's own clock start); rounds 1 and 2 take ``times``, round 2 has ``overhead2`` s of overhead; the server
    holds ``rss`` MB after rounds 1 and 2; the provenance says ``clients`` SuperNodes. Returns the run id."""
    overrides = {"method": "bbt-fed", "run-name": label, "seed": 0, "num-server-rounds": 2,
                 "client-ids": client_ids, "output-dir": str(runs_dir)}
    config = {**compare.resolved(overrides), "resolved-task": "sst2", "trainable-parameters": 100}
    rec = RunRecorder(runs_dir, config, launch={"num_supernodes": clients})
    rec.log_round({"round": 0, "global_accuracy": 0.5, "wall_time_s": round0, "round_time_s": round0,
                   "server_rss_mb": rss[0] - 100})
    for r, (t, mb) in enumerate(zip(times, rss, strict=True), 1):
        rec.log_round({"round": r, "global_accuracy": 0.6, "num_clients": 10, "round_time_s": t,
                       "wall_time_s": round0 + sum(times[:r]), "overhead_s": overhead2 * (r == 2) + 9 * (r == 1),
                       "server_rss_mb": mb})
    rec.finish(FINISHED)
    if startup is not None:
        meta = json.loads((rec.dir / "config.json").read_text())
        meta["started_epoch"] = LAUNCHED + startup
        (rec.dir / "config.json").write_text(json.dumps(meta))
    return rec.run_id


def launch(label: str, run: str | None, clients: int, wall: float, launched: float = LAUNCHED) -> dict[str, Any]:
    """A ``launches.jsonl`` line as the runner writes it (:func:`simulations.compare.launch_line`)."""
    return compare.launch_line({"method": "bbt-fed", "run-name": label, "seed": 0}, "flower", clients, launched,
                               wall, 0 if run else 1, run)


def write_launches(out: Path, lines: list[dict[str, Any]]) -> None:
    (out / compare.LAUNCHES).write_text("".join(json.dumps(x) + "\n" for x in lines))


def rows(text: str) -> dict[str, list[str]]:
    """Each table's rows of ``text`` by the line above the table, a row's cells by its clients."""
    tables: dict[str, list[str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("`client-ids="):
            heading = line.split("`")[1]
        elif line.startswith("| ") and line[2].isdigit():
            tables.setdefault(heading, []).append(line)
    return tables


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def test_each_size_reads_launch_to_round0_its_rounds_and_ratios_to_the_smallest(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    # labels in the order large, medium, small (the runs' order): the table sorts by clients and divides by
    # the smallest federation, not by the first run
    big = scale_run(runs_dir, "large", 1000, startup=12.0, round0=9.0, times=(120.0, 60.0), overhead2=1.0,
                    rss=(900.0, 1000.0))
    small = scale_run(runs_dir, "small", 10, startup=7.5, round0=3.0, times=(40.0, 30.0), overhead2=0.5,
                      rss=(700.0, 800.0))
    mid = scale_run(runs_dir, "medium", 100, startup=10.0, round0=5.0, times=(80.0, 45.0), overhead2=0.25,
                    rss=(800.0, 880.0))
    write_launches(tmp_path, [launch("large", big, 1000, 400.0), launch("small", small, 10, 120.0),
                              launch("medium", mid, 100, 180.0)])
    (ask,) = rows(scale.table(tmp_path)).values()
    assert [cells(x)[0] for x in ask] == ["10", "100", "1,000"]
    # launch -> end of round 0: 3.0 s of the run's clock + 7.5 s from launch to its start (not 3.0 - 7.5,
    # not round 1's 43.0); round 1, round 2, round 2's overhead (not round 1's 9), the last round's RSS
    assert cells(ask[0]) == ["10", "10.5 s", "40.0 s", "30.0 s", "0.5 s", "800.0 MB", "120.0 s"]
    assert cells(ask[1]) == ["100", "15.0 s (1.43x)", "80.0 s (2.00x)", "45.0 s (1.50x)", "0.2 s (0.50x)",
                             "880.0 MB (1.10x)", "180.0 s (1.50x)"]
    assert cells(ask[2]) == ["1,000", "21.0 s (2.00x)", "120.0 s (3.00x)", "60.0 s (2.00x)", "1.0 s (2.00x)",
                             "1,000.0 MB (1.25x)", "400.0 s (3.33x)"]


def test_each_client_ids_value_is_its_own_table_with_its_own_base(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    ask = scale_run(runs_dir, "n10", 10, startup=5.0, round0=5.0, times=(40.0, 30.0), overhead2=0.5, rss=(700.0, 800.0))
    lazy_small = scale_run(runs_dir, "lazy-n10", 10, startup=10.0, round0=10.0, times=(80.0, 60.0), overhead2=1.0,
                           rss=(800.0, 1000.0), client_ids="lazy")
    lazy_big = scale_run(runs_dir, "lazy-n10000", 10000, startup=15.0, round0=15.0, times=(40.0, 30.0),
                         overhead2=2.0, rss=(800.0, 900.0), client_ids="lazy")
    write_launches(tmp_path, [launch("n10", ask, 10, 100.0), launch("lazy-n10", lazy_small, 10, 200.0),
                              launch("lazy-n10000", lazy_big, 10000, 100.0)])
    text = scale.table(tmp_path)
    found = rows(text)
    assert list(found) == ["client-ids=ask", "client-ids=lazy"]
    assert len(found["client-ids=ask"]) == 1 and "x)" not in found["client-ids=ask"][0]
    # 10,000 lazy clients against 10 lazy ones, not against 10 asked
    assert cells(found["client-ids=lazy"][1]) == ["10,000", "30.0 s (1.50x)", "40.0 s (0.50x)", "30.0 s (0.50x)",
                                                 "2.0 s (2.00x)", "900.0 MB (0.90x)", "100.0 s (0.50x)"]
    host = json.loads(next(runs_dir.glob("*/config.json")).read_text())["machine"]["host"]
    assert f"on {host}, " in text.split("\n")[0]  # where the runs ran, from their records


def test_a_run_without_its_launch_line_has_no_launch_columns(tmp_path: Path) -> None:
    """Records made elsewhere (no launches.jsonl line names them) or a launch that left no run: the two
    launch-based cells are '-', and the clients come from the launch line where the record has none."""
    runs_dir = tmp_path / "runs"
    orphan = scale_run(runs_dir, "n10", 10, startup=1.0, round0=3.0, times=(40.0, 30.0), overhead2=0.5, rss=(7.0, 8.0))
    unnamed = scale_run(runs_dir, "n100", None, startup=2.0, round0=4.0, times=(80.0, 60.0), overhead2=1.0,
                        rss=(7.0, 8.0))
    write_launches(tmp_path, [launch("n10", None, 10, 5.0), launch("n100", unnamed, 100, 50.0)])
    (table,) = rows(scale.table(tmp_path)).values()
    assert cells(table[0]) == ["10", "-", "40.0 s", "30.0 s", "0.5 s", "8.0 MB", "-"]
    # no ratio where the smallest's cell is unknown
    assert cells(table[1]) == ["100", "6.0 s", "80.0 s (2.00x)", "60.0 s (2.00x)", "1.0 s (2.00x)", "8.0 MB (1.00x)",
                               "50.0 s"]
    assert orphan != unnamed


def test_no_finished_run_says_how_to_make_them(tmp_path: Path) -> None:
    assert "python -m simulations.compare simulations/experiments/scale.toml" in scale.table(tmp_path)


def test_the_runner_runs_each_size_with_its_clients_and_the_table_reads_its_launch_lines(tmp_path, monkeypatch) -> None:
    """The study through the one runner, its Flower engine a stand-in that records a run of the clients it
    was handed: each label's num-supernodes reaches the engine, and the table's launch -> round 0 is the
    run's round 0 plus its started_epoch less the launch line's launched_epoch."""
    started: list[int] = []

    def engine(overrides: dict[str, Any], num_supernodes: int, *args: Any) -> int:
        started.append(num_supernodes)
        scale_run(Path(overrides["output-dir"]), overrides["run-name"], num_supernodes, startup=None, round0=2.0,
                  times=(4.0, 3.0), overhead2=0.1, rss=(7.0, 8.0), client_ids=overrides.get("client-ids", "ask"))
        return 0

    monkeypatch.setattr(compare, "run_one", engine)
    exp = tmp_path / "scale.toml"
    exp.write_text('study = "scale"\nmethods = ["n3", "n7"]\n[run-config]\nnum-server-rounds = 2\n'
                   '[method.n3]\nmethod = "bbt-fed"\nnum-supernodes = 3\n'
                   '[method.n7]\nmethod = "bbt-fed"\nnum-supernodes = 7\n')
    out = tmp_path / "out"
    assert compare.main([str(exp), "--out", str(out)]) == 0 and started == [3, 7]
    by_label = {x["label"]: x for x in map(json.loads, (out / compare.LAUNCHES).read_text().splitlines())}
    (table,) = rows((out / "table.md").read_text()).values()
    for line, label in zip(table, ("n3", "n7"), strict=True):
        meta = json.loads(next((out / "runs").glob(f"{by_label[label]['run']}/config.json")).read_text())
        expected = 2.0 + round(meta["started_epoch"] - by_label[label]["launched_epoch"], 1)
        assert cells(line)[0] == label[1:] and cells(line)[1].startswith(f"{expected:,.1f} s")
    monkeypatch.setattr(compare, "run_one", refuse_run)
    assert compare.main([str(exp), "--out", str(out), "--table-only"]) == 0
    assert rows((out / "table.md").read_text()) == {"client-ids=ask": table}  # the same from the records
