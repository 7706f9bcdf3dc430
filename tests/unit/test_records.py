"""Run records: summaries from round records, tolerant reading, malformed records named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fedtext.records import ROUND_FIELDS, RunRecorder, load_run, progress_line, run_folder_name, summarize

ROUNDS = [
    {"round": 0, "global_accuracy": 0.5, "bytes_up": 0, "bytes_down": 0, "model_queries": 0, "num_clients": 0},
    {"round": 1, "global_accuracy": 0.7, "bytes_up": 1000, "bytes_down": 2000, "bytes_up_per_client": 500,
     "bytes_down_per_client": 1000, "model_queries": 300, "client_peak_rss_mb": 900.0, "num_clients": 2},
    {"round": 2, "global_accuracy": 0.6, "bytes_up": 1000, "bytes_down": 2000, "bytes_up_per_client": 500,
     "bytes_down_per_client": 1000, "model_queries": 300, "client_peak_rss_mb": 950.0, "num_clients": 2,
     "client_accuracy_mean": 0.65},
]


def test_every_re_exported_name_is_its_modules_own_and_nothing_else_is_made_up():
    """``fedtext.records`` re-exports each submodule's public names, imported on first use: each is the very
    object its module defines, each submodule is reachable as an attribute, ``from`` imports see them, and a
    name no module exports is an AttributeError (not a silent None)."""
    import importlib

    import fedtext.records as records

    assert len(records.__all__) == len(set(records.__all__)) == sum(map(len, records.EXPORTS.values()))
    for module, names in records.EXPORTS.items():
        assert getattr(records, module) is importlib.import_module(f"fedtext.records.{module}")
        for name in names:
            assert getattr(records, name) is getattr(getattr(records, module), name), name
    assert set(records.__all__) <= set(dir(records))
    with pytest.raises(AttributeError, match="has no attribute 'RunRecorders'"):
        records.RunRecorders  # noqa: B018
    # what a type checker sees (the package's `if TYPE_CHECKING:` imports) is EXPORTS, name for name
    import ast
    import inspect

    (block,) = [n for n in ast.parse(inspect.getsource(records)).body
                if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    seen = {i.module.rsplit(".", 1)[1]: tuple(a.name for a in i.names) for i in block.body}
    assert {m: set(n) for m, n in seen.items()} == {m: set(n) for m, n in records.EXPORTS.items()}


def test_summarize_hand_computed():
    s = summarize(ROUNDS)
    assert s["initial_accuracy"] == 0.5 and s["final_accuracy"] == 0.6 and s["best_accuracy"] == 0.7
    assert s["total_bytes_up"] == 2000 and s["total_bytes_down"] == 4000
    assert s["mean_bytes_up_per_client"] == 500 and s["total_model_queries"] == 600
    assert s["peak_client_rss_mb"] == 950.0 and s["rounds_done"] == 2
    assert s["final_client_accuracy_mean"] == 0.65


def test_recorder_writes_the_three_files(tmp_path):
    rec = RunRecorder(tmp_path, {"method": "bbt-fed", "dataset": "demo", "seed": 0, "num-server-rounds": 2})
    for r in ROUNDS:
        rec.log_round(r)
    summary = rec.finish()
    run = load_run(rec.dir)
    assert run["config"]["config"]["method"] == "bbt-fed" and "machine" in run["config"]
    assert [r["round"] for r in run["rounds"]] == [0, 1, 2]
    assert run["summary"]["status"] == "finished" == summary["status"]
    assert rec.finish("failed")["status"] == "finished"  # first call wins
    second = RunRecorder(tmp_path, {"method": "bbt-fed", "dataset": "demo", "seed": 0}, run_id=rec.run_id)
    assert second.dir != rec.dir  # never overwrite a run


def test_truncated_rounds_file_is_read_up_to_the_break(tmp_path):
    (tmp_path / "rounds.jsonl").write_text(json.dumps(ROUNDS[0]) + "\n" + '{"round": 1, "glo')
    run = load_run(tmp_path)
    assert len(run["rounds"]) == 1 and run["malformed_lines"] == 1 and run["summary"] is None


def test_progress_line():
    line = progress_line({**ROUNDS[1], "global_loss": 0.4, "round_time_s": 1.25, "wall_time_s": 3.0}, 10)
    assert line.startswith("fedtext round 1/10 | acc 0.700 loss 0.400")
    assert "up 1.0 KB down 2.0 KB" in line
    assert line.endswith("| round 1.2 s, total 3.0 s")  # per round and cumulative, each said
    old = {k: v for k, v in ROUNDS[1].items() if k != "round_time_s"}  # a record without it: the total alone
    assert progress_line({**old, "wall_time_s": 3.0}, 10).endswith("| total 3.0 s")


def test_round_fields_are_documented():
    assert {"round", "global_accuracy", "bytes_up", "bytes_down", "model_queries", "client_peak_rss_mb",
            "wall_time_s", "client_accuracy"} <= set(ROUND_FIELDS)


def test_folder_names_leave_out_what_the_config_lacks():
    import datetime as dt

    when = dt.datetime(2026, 11, 22, 22, 4, 55)
    full = {"method": "bbt-fed", "dataset": "../shared/data/sst2", "seed": 0, "run-name": "a/b"}
    assert run_folder_name(full, when) == "20261122-220455-bbt-fed-sst2-s0-a_b"  # "/" opens no sub-folder
    assert run_folder_name({"method": "x"}, when) == "20261122-220455-x"  # never "None-None-sNone"
    assert run_folder_name({"method": ".."}, when) == "20261122-220455"


# ---------------------------------------------------------- malformed records
# A run record that is not what the recorder writes: each case writes one into
# ``<root>/bad`` and gives the words its one-line reason must hold.
CONFIG = {"method": "bbt-fed", "dataset": "demo", "partition": "iid", "seed": 0, "shots-per-class": 8,
          "num-server-rounds": 2}


def write_record(root: Path, run_id: str, config: object = None, rounds: list | None = None,
                 summary: object = True) -> Path:
    """``<root>/<run_id>``'s records as the recorder writes them (``config`` None: :data:`CONFIG`;
    ``summary`` True: the finished summary of ``rounds``, False: none)."""
    d = root / run_id
    d.mkdir(parents=True)
    rounds = ROUNDS if rounds is None else rounds
    (d / "config.json").write_text(json.dumps({"run_id": run_id, "config": CONFIG if config is None else config}))
    (d / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    if summary is True:
        summary = {**summarize(rounds), "run_id": run_id, "status": "finished", "error": None, **CONFIG}
    if summary:
        (d / "summary.json").write_text(json.dumps(summary))
    return d


def _list_seed(root: Path) -> Path:
    return write_record(root, "bad", config={**CONFIG, "seed": [1, 2]})


def _string_total(root: Path) -> Path:
    return write_record(root, "bad", summary={**summarize(ROUNDS), "status": "finished", "total_bytes_up": "2000"})


def _deep_nesting(root: Path) -> Path:
    d = write_record(root, "bad", rounds=[], summary=False)
    (d / "rounds.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")  # RecursionError in json.loads
    return d


def _config_directory(root: Path) -> Path:
    d = write_record(root, "bad")
    (d / "config.json").unlink()
    (d / "config.json").mkdir()
    return d


def _config_list(root: Path) -> Path:
    return write_record(root, "bad", config=["method", "bbt-fed"])


SECRET = "s3cret-outside-the-runs"  # in the files the links below point at, outside the records folder


def _linked_config(root: Path) -> Path:
    """Issue 45: ``config.json`` a symlink to a (valid) config record outside ``root``."""
    d = write_record(root, "bad")
    outside = root.parent / "elsewhere-config.json"
    outside.write_text(json.dumps({"run_id": "bad", "config": {**CONFIG, "api-token": SECRET}}))
    (d / "config.json").unlink()
    (d / "config.json").symlink_to(outside)
    return d


def _linked_rounds(root: Path) -> Path:
    """Issue 45: ``rounds.jsonl`` a symlink to (valid) round lines outside ``root``."""
    d = write_record(root, "bad", summary=False)
    outside = root.parent / "elsewhere-rounds.jsonl"
    outside.write_text("".join(json.dumps({**r, "note": SECRET}) + "\n" for r in ROUNDS))
    (d / "rounds.jsonl").unlink()
    (d / "rounds.jsonl").symlink_to(outside)
    return d


def _huge_int_total(root: Path) -> Path:
    """Issue 45: ``10**400`` in summary.json (``float()`` of it raises OverflowError)."""
    d = write_record(root, "bad", summary=False)
    summary = {**summarize(ROUNDS), "run_id": "bad", "status": "finished", "error": None, **CONFIG}
    (d / "summary.json").write_text(json.dumps({**summary, "total_bytes_up": 10**400}))
    return d


def _number_line(text: str) -> Callable[[Path], Path]:
    """Issue 45: a round line whose accuracy is ``text`` (``1e400``, ``NaN``, ``-Infinity``:
    Python's json reads them as inf or NaN), the only line."""
    def write(root: Path) -> Path:
        d = write_record(root, "bad", rounds=[], summary=False)
        (d / "rounds.jsonl").write_text('{"round": 0, "global_accuracy": ' + text + "}\n")
        return d
    return write


def _long_line(root: Path) -> Path:
    """Issue 58: one line longer than the longest round record a writer writes, the only line."""
    from fedtext.records.schema import ROUND_LINE_MAX

    d = write_record(root, "bad", rounds=[], summary=False)
    (d / "rounds.jsonl").write_text('{"round": 0, "pad": "' + "x" * ROUND_LINE_MAX + '"}\n')
    return d


def _over_the_bound(name: str) -> Callable[[Path], Path]:
    """Issue 69: ``name`` (config.json or summary.json) a valid record padded one byte past
    RECORD_FILE_MAX: both were read whole, whatever their size."""
    def write(root: Path) -> Path:
        from fedtext.records.reader import RECORD_FILE_MAX

        d = write_record(root, "bad")
        record = json.loads((d / name).read_text())
        head = json.dumps({**record, "pad": ""})[:-3]  # '{..., "pad": '
        (d / name).write_text(head + '"' + "x" * (RECORD_FILE_MAX - len(head) - 2) + '"}')
        assert (d / name).stat().st_size == RECORD_FILE_MAX + 1
        return d
    return write


def _round_beyond(root: Path) -> Path:
    """Issue 58: round 3 of a run of num-server-rounds=2 (read as "rounds 3/2"), the only line."""
    return write_record(root, "bad", rounds=[{"round": 3, "global_accuracy": 0.9}], summary=False)


MALFORMED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "list seed": (_list_seed, "config.json: config.seed is a list, not a single value"),
    "string total": (_string_total, "summary.json: total_bytes_up is a string, not a number"),
    "deep nesting": (_deep_nesting, "rounds.jsonl has no readable round (line 1: nested deeper than 32 levels)"),
    "config.json a directory": (_config_directory, "config.json is a directory"),
    "config a list": (_config_list, "config.json: 'config' is a list, not an object"),
    "config.json linked outside": (_linked_config, "config.json resolves outside the records folder: not read"),
    "rounds.jsonl linked outside": (_linked_rounds, "rounds.jsonl resolves outside the records folder: not read"),
    "10**400 in summary.json": (_huge_int_total, "summary.json: integer of 401 digits does not fit a float"),
    "1e400 in rounds.jsonl": (_number_line("1e400"),
                              "rounds.jsonl has no readable round (line 1: number 1e400 is not finite)"),
    "NaN in rounds.jsonl": (_number_line("NaN"), "rounds.jsonl has no readable round (line 1: NaN is not a finite number)"),
    "-Infinity in rounds.jsonl": (_number_line("-Infinity"),
                                  "rounds.jsonl has no readable round (line 1: -Infinity is not a finite number)"),
    "10**400 in rounds.jsonl": (_number_line(str(10**400)),
                                "rounds.jsonl has no readable round (line 1: integer of 401 digits does not fit a float)"),
    "a line over the bound": (_long_line, ("rounds.jsonl has no readable round (line 1: longer than 16777216 bytes, "
                                           "the longest round record a writer writes: not read)")),
    "a round beyond num-server-rounds": (_round_beyond, ("rounds.jsonl has no readable round (line 1: round 3 is "
                                                         "outside 0..2 (num-server-rounds))")),
    "config.json over the bound": (_over_the_bound("config.json"),
                                   "config.json: longer than 16777216 bytes, more than a writer writes: not read"),
    "summary.json over the bound": (_over_the_bound("summary.json"),
                                    "summary.json: longer than 16777216 bytes, more than a writer writes: not read"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_status_names_a_malformed_run_and_shows_the_rest(case, tmp_path, capsys):
    from simulations import status

    root = tmp_path / "runs"  # the records folder; the linked cases point beside it
    write_record(root, "good")
    write_fn, reason = MALFORMED[case]
    bad = write_fn(root)
    run = load_run(bad)
    assert (run["status"], run["reason"]) == ("malformed", reason)
    assert load_run(root / "good")["status"] == "finished"
    assert status.main([str(root), "--last", "5"]) == 1  # as for any run that did not finish
    out = capsys.readouterr().out.splitlines()
    bad_line = next(line for line in out if line.startswith("bad  "))
    assert bad_line.startswith("bad  malformed  method=") and bad_line.endswith(f"reason: {reason}")
    assert SECRET not in "\n".join(out)  # nothing of a file outside the records is shown
    assert any(line.startswith("good  finished  method=bbt-fed  rounds 2/2  acc 0.600") for line in out)
    assert status.main([str(root), "--run", "good"]) == 0  # the finished run alone: 0, as always
    capsys.readouterr()
    assert status.main([str(root), "--run", "bad"]) == 1
    assert capsys.readouterr().out.startswith("bad  malformed  method=")


def test_a_deep_line_among_readable_rounds_is_a_malformed_line(tmp_path):
    d = write_record(tmp_path, "r", summary=False)
    with open(d / "rounds.jsonl", "a") as fh:
        fh.write('{"round": 3, "x": ' + "[" * 100 + "]" * 100 + "}\n")  # parses, but deeper than any record
        fh.write('{"round": 4, "x": ' + "9" * 5000 + "}\n")  # an integer too long to convert: ValueError
    run = load_run(d)
    assert [r["round"] for r in run["rounds"]] == [0, 1, 2] and run["malformed_lines"] == 2
    assert run["status"] == "running" and run["line_problem"] == "line 4: nested deeper than 32 levels"


def test_a_non_finite_line_among_readable_rounds_is_a_malformed_line(tmp_path):
    """Issue 45: a 1e400 / NaN / -Infinity among readable rounds is a malformed line (never a
    number that reaches a chart or a sum as inf or NaN); the other rounds stay."""
    d = write_record(tmp_path, "r", summary=False)
    with open(d / "rounds.jsonl", "a") as fh:
        fh.write('{"round": 3, "global_accuracy": 1e400}\n{"round": 4, "global_loss": NaN}\n')
        fh.write('{"round": 5, "bytes_up": -Infinity}\n{"round": 6, "bytes_up": ' + str(10**400) + "}\n")
    run = load_run(d)
    assert [r["round"] for r in run["rounds"]] == [0, 1, 2] and run["malformed_lines"] == 4
    assert run["status"] == "running" and run["line_problem"] == "line 4: number 1e400 is not finite"
    assert summarize(run["rounds"])["final_accuracy"] == 0.6


def test_the_writer_stores_a_non_finite_number_as_null(tmp_path):
    """What the readers refuse, the writer never writes: a diverged (NaN) loss, an inf
    metric read as unknown, and the round stays readable."""
    rec = RunRecorder(tmp_path, dict(CONFIG))
    rec.log_round({"round": 0, "global_accuracy": 0.5, "global_loss": float("nan"),
                   "method_metrics": {"sigma": float("inf"), "ok": 1.5}})
    rec.finish()
    run = load_run(rec.dir)
    assert run["status"] == "finished" and run["malformed_lines"] == 0
    assert run["rounds"] == [{"round": 0, "global_accuracy": 0.5, "global_loss": None,
                              "method_metrics": {"sigma": None, "ok": 1.5}}]


def test_a_heartbeat_linked_outside_the_records_is_not_read(tmp_path):
    """Issue 45: the heartbeat is a record file too. One that links to a fresh time outside
    the records folder does not keep a silent run ``running``: the run's own files say stale."""
    import os
    import time

    from fedtext.records import read_heartbeat, run_status

    root = tmp_path / "runs"
    d = write_record(root, "r", config={**CONFIG, "stale-after-s": 5.0}, summary=False)
    outside = tmp_path / "elsewhere-heartbeat"
    outside.write_text(f"{time.time():.3f}\n")
    (d / "heartbeat").symlink_to(outside)
    an_hour_ago = time.time() - 3600
    for f in d.iterdir():
        os.utime(f, (an_hour_ago, an_hour_ago), follow_symlinks=False)
    assert read_heartbeat(d, root) is None
    status, reason = run_status(load_run(d, root))
    assert status == "stale" and reason.startswith("no heartbeat for 360")


def test_directories_where_files_should_be_are_malformed(tmp_path):
    for name in ("summary.json", "rounds.jsonl"):
        d = write_record(tmp_path, f"{name}-dir", summary=False)
        (d / name).unlink(missing_ok=True)
        (d / name).mkdir()
        assert (load_run(d)["status"], load_run(d)["reason"]) == ("malformed", f"{name} is a directory")


def test_a_record_file_swapped_for_a_link_after_the_check_is_not_followed_out(tmp_path):
    """file_problem checks the path, then the read opens it: a config.json replaced by a link
    to a file outside the records folder in between is refused, not read (O_NOFOLLOW and the
    resolved path checked again at open)."""
    from fedtext.records import reader

    runs, outside = tmp_path / "runs", tmp_path / "secret.json"
    run = runs / "r1"
    run.mkdir(parents=True)
    outside.write_text('{"secret": 1}')
    config = run / "config.json"
    config.write_text('{"method": "fedprompt"}')
    assert reader.file_problem(config, runs) is None
    with reader.open_checked(config, runs) as fh:
        assert fh.read() == b'{"method": "fedprompt"}'
    config.unlink()
    config.symlink_to(outside)  # the swap, after the check
    with pytest.raises(OSError, match="resolves outside the records folder: not read"):
        reader.open_checked(config, runs)
    # a link inside the folder to another run's file still reads (resolved, inside)
    config.unlink()
    (runs / "r0").mkdir()
    (runs / "r0" / "config.json").write_text('{"method": "fedavg"}')
    config.symlink_to(runs / "r0" / "config.json")
    with reader.open_checked(config, runs) as fh:
        assert b"fedavg" in fh.read()


def test_a_line_over_the_bound_is_malformed_unparsed_and_never_held_whole(tmp_path, capsys):
    """Issue 58: one 50 MB line (a valid round 2 of a 1-round run) was a round: status took
    31 s and 795 MB and printed "rounds 2/1". A line over ROUND_LINE_MAX is a malformed line,
    read in chunks of at most the bound; a round beyond num-server-rounds is one too."""
    import tracemalloc

    from fedtext.records.schema import ROUND_LINE_MAX
    from simulations import status

    d = write_record(tmp_path, "r", config={**CONFIG, "num-server-rounds": 1}, rounds=ROUNDS[:2], summary=False)
    with open(d / "rounds.jsonl", "a") as fh:
        fh.write('{"round": 2, "pad": "' + "x" * (3 * ROUND_LINE_MAX) + '"}\n')
        fh.write('{"round": 2, "global_accuracy": 0.9}\n')
    tracemalloc.start()
    try:
        run = load_run(d)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r["round"] for r in run["rounds"]] == [0, 1] and run["malformed_lines"] == 2
    assert run["line_problem"].startswith("line 3: longer than 16777216 bytes")
    assert peak < 1.5 * ROUND_LINE_MAX  # the 48 MiB line was never held whole
    assert status.main([str(tmp_path), "--run", "r"]) == 0
    assert "rounds 1/1  acc 0.700" in capsys.readouterr().out  # not "rounds 2/1"
    # a line of exactly the bound (its newline aside) is a round
    head = '{"round": 1, "pad": "'
    (d / "rounds.jsonl").write_text(head + "x" * (ROUND_LINE_MAX - len(head) - 2) + '"}\n')
    assert [r["round"] for r in load_run(d)["rounds"]] == [1]


def test_a_drop_reason_is_cut_to_its_bytes_in_the_round_line():
    """A client's failure or an odd metric value quoted in a drop reason is cut to
    DROP_REASON_BYTES once JSON-escaped: a round line stays within ROUND_LINE_MAX."""
    from fedtext.records import RoundRecord
    from fedtext.records.schema import DROP_REASON_BYTES

    record = RoundRecord(round=1)
    for reason in ("x" * 10_000, "\u00e9" * 10_000, "\U0001F600" * 10_000, "ok"):
        record.drop(3, reason)
    written = [json.dumps(d["reason"]) for d in record.to_json(0.0)["dropped"]]
    assert all(len(w) - 2 <= DROP_REASON_BYTES for w in written) and written[-1] == '"ok"'
    assert [len(d["reason"]) for d in record.dropped[:3]] == [300, 50, 25]


# ------------------------------------------------------------------- issue 59: the privacy spent
def _private(eps: float | None, mode: str = "central") -> dict:
    return {"mode": mode, "epsilon": eps, "delta": 1e-5, "noise_multiplier": 1.1}


def test_the_summary_says_the_privacy_spent_at_the_last_round_with_an_entry(tmp_path):
    """``summary.json`` had no ε: the run's privacy spent is the last round's privacy entry's
    (ε is cumulative; a last round without an entry, e.g. no client trained, keeps the one
    before); no noise is ``dp`` set and ``epsilon`` null; a run without DP and a record from
    before the field read as no DP; the summary's check takes the fields."""
    from fedtext.records import check_summary, spent_text

    rounds = [{**ROUNDS[0], "privacy": None}, {**ROUNDS[1], "privacy": _private(0.8)},
              {**ROUNDS[2], "privacy": _private(1.25)}, {"round": 3, "privacy": None}]
    s = summarize(rounds)
    assert (s["dp"], s["epsilon"], s["dp_delta"]) == ("central", 1.25, 1e-5)
    assert check_summary({**s, "status": "finished"}) is None
    assert "summary.json: epsilon is" in check_summary({**s, "epsilon": "1.25"})
    unbounded = summarize([{**ROUNDS[1], "privacy": _private(None, "local")}])
    assert (unbounded["dp"], unbounded["epsilon"], unbounded["dp_delta"]) == ("local", None, 1e-5)
    for old in (ROUNDS, [{**r, "privacy": None} for r in ROUNDS]):
        assert (summarize(old)["dp"], summarize(old)["epsilon"], summarize(old)["dp_delta"]) == (None, None, None)
    assert spent_text("central", 1.25, 1e-5) == "ε 1.25 (δ 1e-05, central)"
    assert spent_text("local", None, 1e-5) == "ε ∞ (δ 1e-05, local)" and spent_text(None, None, None) == ""
    rec = RunRecorder(tmp_path, {"method": "fedprompt", "dataset": "demo", "seed": 0, "num-server-rounds": 2})
    for r in rounds[:3]:
        rec.log_round(r)
    rec.finish()
    assert json.loads((rec.dir / "summary.json").read_text())["epsilon"] == 1.25  # what summary.json holds


def test_simulations_status_shows_the_privacy_spent(tmp_path, capsys):
    """``python -m simulations.status`` printed status, rounds and accuracy only: a DP run's
    line now says the ε it spent at its δ; a run without DP's line is as it was."""
    from simulations import status

    for run_id, privacy in (("dp", _private(2.5)), ("plain", None)):
        d = tmp_path / run_id
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"run_id": run_id, "config": {"method": "fedavg",
                                                                                 "num-server-rounds": 1}}))
        (d / "rounds.jsonl").write_text(json.dumps({**ROUNDS[1], "round": 1, "privacy": privacy}) + "\n")
    status.main([str(tmp_path), "--run", "dp"])
    assert capsys.readouterr().out.rstrip().endswith("acc 0.700  ε 2.50 (δ 1e-05, central)")
    status.main([str(tmp_path), "--run", "plain"])
    assert capsys.readouterr().out.rstrip().endswith("acc 0.700")


def test_a_config_or_summary_over_the_bound_is_never_held_whole_and_one_at_the_bound_is_read(tmp_path):
    """Issue 69: config.json and summary.json were read whole. A 48 MiB summary.json is refused
    after reading at most RECORD_FILE_MAX + 1 bytes; a record of exactly the bound is read."""
    import tracemalloc

    from fedtext.records.reader import RECORD_FILE_MAX, read_config, read_summary

    d = write_record(tmp_path, "r")
    summary = json.loads((d / "summary.json").read_text())
    head = json.dumps({**summary, "pad": ""})[:-3]
    (d / "summary.json").write_text(head + '"' + "x" * (3 * RECORD_FILE_MAX) + '"}')
    tracemalloc.start()
    try:
        got = read_summary(d / "summary.json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == (None, f"summary.json: longer than {RECORD_FILE_MAX} bytes, more than a writer writes: not read")
    assert peak < 1.5 * RECORD_FILE_MAX
    meta = json.loads((d / "config.json").read_text())
    head = json.dumps({**meta, "pad": ""})[:-3]
    (d / "config.json").write_text(head + '"' + "x" * (RECORD_FILE_MAX - len(head) - 3) + '"}')
    assert (d / "config.json").stat().st_size == RECORD_FILE_MAX
    config, problem = read_config(d / "config.json")
    assert problem is None and config["config"] == CONFIG


def test_a_resumed_run_counts_the_time_it_worked_not_the_pause_before_its_resume(tmp_path):
    """Stopped after round 2 (100 s, then 200 s of work), resumed a day later from round 1's
    checkpoint: its clock goes on from round 1's 100 s, not from the first start's."""
    from fedtext.server.round_log import RoundLog
    from fedtext.common.registry import make_config

    first = RunRecorder(tmp_path, {"method": "bbt-fed", "seed": 0})
    for r, wall in ((0, 0.0), (1, 100.0), (2, 200.0)):
        first.log_round({"round": r, "wall_time_s": wall})
    first.finish("failed", error="terminated by SIGTERM")
    meta = json.loads((first.dir / "config.json").read_text())
    meta["started_epoch"] -= 86_400  # the first start, a day ago
    (first.dir / "config.json").write_text(json.dumps(meta))
    again = RunRecorder(tmp_path, {"method": "bbt-fed", "seed": 0}, run_id=first.run_id, resume=True, keep_rounds=1)
    assert again.worked_s == 100.0
    log = RoundLog(make_config("bbt-fed"), again, lambda r: None, lambda: None)
    log.begin(2)
    assert 100.0 <= log.record.to_json(log._t0)["wall_time_s"] < 160.0  # round 2 again: on from round 1's clock
    again.finish()
    assert 100.0 <= json.loads((first.dir / "summary.json").read_text())["wall_time_s"] < 160.0
    assert RunRecorder(tmp_path / "fresh", {"method": "bbt-fed", "seed": 0}).worked_s == 0.0


def test_a_run_open_in_a_live_process_is_locked_and_never_reopened_until_it_closes(tmp_path):
    """The writer holds an flock on its run folder until it finishes (the kernel drops it when the
    process dies, SIGKILL too): a resume, or a runner's check, meets it while the run is open."""
    from fedtext.common.config import ConfigError
    from fedtext.records.writer import run_in_use

    config = {"method": "bbt-fed", "seed": 0}
    rec = RunRecorder(tmp_path, config)
    for r in (0, 1):
        rec.log_round({"round": r, "wall_time_s": float(r)})
    assert run_in_use(rec.dir)
    files = {p.name: p.read_bytes() for p in rec.dir.iterdir() if p.name != "heartbeat"}
    with pytest.raises(ConfigError, match=f"resume='{rec.run_id}': the run is still open in a live process"):
        RunRecorder(tmp_path, config, run_id=rec.run_id, resume=True, keep_rounds=0)
    # the refused resume changed nothing: no round cut, no resumed entry, no log line
    assert {p.name: p.read_bytes() for p in rec.dir.iterdir() if p.name != "heartbeat"} == files
    rec.finish("failed", error="stopped")
    assert not run_in_use(rec.dir)
    again = RunRecorder(tmp_path, config, run_id=rec.run_id, resume=True, keep_rounds=0)
    assert run_in_use(rec.dir)
    again.finish()
    assert not run_in_use(rec.dir) and not run_in_use(tmp_path / "no-such-run")
