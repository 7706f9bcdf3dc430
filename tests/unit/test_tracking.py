"""Experiment trackers (fedtext.common.tracking) and the run's own log (run.log).

The registry and config checks, the scalars fed from a round record, failure tolerance,
TensorBoard read back by its own event reader, W&B offline and MLflow on a local file
store where those packages are installed (else skipped), and both through fake modules
(always run: CI installs only the tensorboard extra).
"""

from __future__ import annotations

import json
import logging
import math
import struct
import sys
import tomllib
import types
from pathlib import Path

import pytest

from fedtext.common import tracking
from fedtext.common.config import ConfigError
from fedtext.records import RUN_LOG_FILE, RunRecorder
from fedtext.common.tracking import TRACKERS, Tracker, Trackers, check_installed, parse, round_scalars

from ..conftest import REPO

CONFIG = {"method": "bbt-fed", "dataset": "demo", "seed": 0, "num-server-rounds": 2, "bbt-fed.popsize": 10}
ROUNDS = [
    {"round": 0, "global_accuracy": 0.5, "global_loss": 0.69, "client_accuracy_mean": None, "bytes_up": 0,
     "bytes_down": 0, "model_queries": 0, "sim_time_s": None, "train_loss": None, "method_metrics": {},
     "client_accuracy": {}, "dropped": []},
    {"round": 1, "global_accuracy": 0.625, "global_loss": 0.6, "client_accuracy_mean": 0.55, "bytes_up": 1056,
     "bytes_down": 1056, "model_queries": 320, "sim_time_s": 1.25, "train_loss": 0.66,
     "method_metrics": {"sigma_prime": 0.4, "note": "text"}, "client_accuracy": {"0": 0.5, "1": 0.6}, "dropped": []},
    {"round": 2, "global_accuracy": 0.75, "global_loss": 0.5, "client_accuracy_mean": 0.7, "bytes_up": 1056,
     "bytes_down": 1056, "model_queries": 320, "sim_time_s": 1.5, "train_loss": 0.6,
     "method_metrics": {"sigma_prime": 0.3}, "client_accuracy": {"0": 0.7, "1": 0.7}, "dropped": []},
]


def record_run(out: Path, trackers: tuple[str, ...], rounds=ROUNDS, status="finished") -> RunRecorder:
    """A run of ``rounds`` through the recorder, as the strategy writes it."""
    rec = RunRecorder(out, dict(CONFIG), trackers=trackers)
    for r in rounds:
        rec.log_round(dict(r))
    rec.finish(status, error=None if status == "finished" else "boom")
    return rec


# ------------------------------------------------------------------ registry and config
def test_registry_holds_each_tracker_with_its_pyproject_extra():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(TRACKERS) == {"tensorboard", "wandb", "mlflow"}
    for name, cls in TRACKERS.items():
        assert issubclass(cls, Tracker) and cls.name == name and cls.module
        assert cls.extra in extras, f"pyproject has no extra {cls.extra} for tracker={name}"
    assert any(r.startswith("tensorboard") for r in extras["test"])  # CI tests the tensorboard tracker


def test_parse_tracker_values():
    assert parse("") == parse("none") == parse(" None ") == ()
    assert parse("tensorboard") == ("tensorboard",)
    assert parse("TensorBoard, mlflow,tensorboard,") == ("tensorboard", "mlflow")
    with pytest.raises(ConfigError) as err:
        parse("tensorbored")
    msg = str(err.value)
    assert "unknown tracker 'tensorbored'" in msg and "tensorboard, wandb, mlflow" in msg and "\n" not in msg


def test_run_config_checks_the_tracker_key():
    from fedtext.common.registry import make_config

    assert make_config("bbt-fed").trackers == ()
    assert make_config("bbt-fed", tracker="wandb,mlflow").trackers == ("wandb", "mlflow")
    with pytest.raises(ConfigError, match="unknown tracker 'neptune'"):
        make_config("bbt-fed", tracker="neptune")


class Missing(Tracker):
    name, module, extra = "missing", "fedtext_no_such_package_xyz", "missing-extra"


def test_a_tracker_without_its_package_is_one_config_line_before_anything_loads(monkeypatch, tmp_path):
    from fedtext import server_app
    from fedtext.common.registry import make_config

    monkeypatch.setitem(TRACKERS, "missing", Missing)
    with pytest.raises(ConfigError) as err:
        check_installed(("missing",))
    msg = str(err.value)
    assert "tracker=missing needs the fedtext_no_such_package_xyz package" in msg
    assert 'pip install -e ".[missing-extra]"' in msg and "\n" not in msg
    # the server refuses before loading data or the model (a dataset that does not exist is
    # only found later: the tracker's error comes first)
    cfg = make_config("bbt-fed", tracker="missing", output_dir=str(tmp_path / "out"))
    monkeypatch.setattr(server_app, "labelled", lambda *_: pytest.fail("data loaded before the tracker check"))
    with pytest.raises(ConfigError, match="tracker=missing needs"):
        server_app.build(cfg)


def test_round_scalars_are_the_records_numbers_under_group_tags():
    scalars = round_scalars({**ROUNDS[1], "flag": True, "nan": math.nan, "inf": math.inf, "new_field": 2})
    assert scalars == {"accuracy/global": 0.625, "accuracy/client_mean": 0.55, "loss/global": 0.6,
                       "loss/train": 0.66, "bytes/up": 1056.0, "bytes/down": 1056.0, "queries/model": 320.0,
                       "time/sim_time_s": 1.25, "other/new_field": 2.0, "method/sigma_prime": 0.4}
    # grouped: each group's tags together, in TAG_GROUPS order, then other/, then method/
    groups = [tag.split("/")[0] for tag in scalars]
    assert groups == ["accuracy", "accuracy", "loss", "loss", "bytes", "bytes", "queries", "time", "other", "method"]
    assert "round" not in round_scalars(ROUNDS[0]) and "accuracy/client_mean" not in round_scalars(ROUNDS[0])


def test_a_dp_rounds_privacy_numbers_are_tracked_as_privacy_scalars():
    """A round's ``privacy`` entry (an object) reached no tracker: its numbers are
    ``privacy/<name>`` (``privacy/epsilon``: the ε spent so far), after the method's;
    the mode (text) and an ε without bound (null) are left out."""
    from fedtext.common.tracking import round_scalars

    out = round_scalars({"round": 2, "global_accuracy": 0.6, "method_metrics": {"sigma": 0.5},
                         "privacy": {"mode": "central", "epsilon": 1.25, "delta": 1e-5, "clipped": 3}})
    assert list(out)[-4:] == ["method/sigma", "privacy/epsilon", "privacy/delta", "privacy/clipped"]
    assert out["privacy/epsilon"] == 1.25
    assert "privacy/epsilon" not in round_scalars({"round": 1, "privacy": {"mode": "local", "epsilon": None}})


def test_every_numeric_round_field_has_a_group_tag():
    from fedtext.records import ROUND_FIELDS

    # the round number is the step; these hold objects or lists (client_accuracy by id, dropped, ...)
    not_scalars = {"round", "client_accuracy", "client_post_accuracy", "participants", "trained", "dropped",
                   "method_metrics", "privacy", "secagg_bytes"}
    assert set(tracking.TAGS) == set(ROUND_FIELDS) - not_scalars
    assert len(set(tracking.TAGS.values())) == len(tracking.TAGS)  # no two fields share a tag
    assert all(tag.count("/") == 1 for tag in tracking.TAGS.values())


def test_trackers_add_running_byte_totals_from_the_rounds_already_recorded(monkeypatch, tmp_path):
    seen = []

    class Keep(Tracker):
        name, module, extra = "keep", "json", "keep"

        def log_round(self, step, scalars):
            seen.append((step, {k: v for k, v in scalars.items() if k.startswith("bytes/cum")}))

    monkeypatch.setitem(TRACKERS, "keep", Keep)
    group = Trackers(("keep",), tmp_path, "r", CONFIG)
    for r in ROUNDS:
        group.log_round(r)
    assert seen == [(0, {"bytes/cum_up": 0, "bytes/cum_down": 0, "bytes/cum_total": 0}),
                    (1, {"bytes/cum_up": 1056, "bytes/cum_down": 1056, "bytes/cum_total": 2112}),
                    (2, {"bytes/cum_up": 2112, "bytes/cum_down": 2112, "bytes/cum_total": 4224})]
    # a resumed run (rounds 0 and 1 kept) goes on from their totals, without resending them
    seen.clear()
    resumed = Trackers(("keep",), tmp_path, "r", CONFIG, previous=ROUNDS[:2])
    resumed.log_round({**ROUNDS[2], "bytes_down": 4000})
    assert seen == [(2, {"bytes/cum_up": 2112, "bytes/cum_down": 5056, "bytes/cum_total": 7168})]


def test_resume_may_change_the_tracker():
    from fedtext.server_app import RESUMABLE_CHANGES

    assert "tracker" in RESUMABLE_CHANGES


# ------------------------------------------------------------------ failure tolerance
class Flaky(Tracker):
    """Fails on the round ``fail_at``; remembers what reached it."""

    name, module, extra = "flaky", "json", "flaky"
    fail_at = 1
    seen: list = []

    def log_round(self, step, scalars):
        if step == self.fail_at:
            raise OSError("disk full")
        Flaky.seen.append(step)

    def finish(self, summary):
        Flaky.seen.append("finish")


class Broken(Tracker):
    name, module, extra = "broken", "json", "broken"

    def __init__(self, *args):
        raise ConnectionError("tracking server unreachable\nsecond line")


def test_a_failing_tracker_warns_once_and_the_run_goes_on(monkeypatch, tmp_path, caplog):
    monkeypatch.setitem(TRACKERS, "flaky", Flaky)
    monkeypatch.setitem(TRACKERS, "broken", Broken)
    monkeypatch.setattr(Flaky, "seen", [])
    caplog.set_level(logging.WARNING, logger="fedtext")
    rec = record_run(tmp_path, ("broken", "flaky"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "fedtext: tracker broken failed to start (ConnectionError: tracking server unreachable); "
        "the run goes on without it",
        "fedtext: tracker flaky failed to log a round (OSError: disk full); the run goes on without it",
    ]
    assert Flaky.seen == [0]  # dropped after its failure: not called again, not even to finish
    assert [json.loads(x)["round"] for x in (rec.dir / "rounds.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert json.loads((rec.dir / "summary.json").read_text())["status"] == "finished"
    assert "tracker flaky failed" in (rec.dir / RUN_LOG_FILE).read_text()
    assert rec.trackers.failed == {"broken": "ConnectionError: tracking server unreachable",
                                   "flaky": "OSError: disk full"}


def test_no_tracker_costs_nothing(tmp_path):
    rec = record_run(tmp_path, ())
    assert not rec.trackers and not (rec.dir / "wandb").exists()
    assert not list(rec.dir.glob("events.out.tfevents*")) and not (rec.dir / "tensorboard").exists()


# ------------------------------------------------------------------ run.log
def test_run_log_holds_the_runs_lines_from_open_to_finish(tmp_path):
    logger = logging.getLogger("fedtext")
    handlers, level = list(logger.handlers), logger.level
    rec = RunRecorder(tmp_path, dict(CONFIG))
    for r in ROUNDS:
        rec.log_round(dict(r))
    logger.warning("fedtext: a warning during the run")
    rec.finish()
    logger.warning("fedtext: after the run")
    text = (rec.dir / RUN_LOG_FILE).read_text()
    lines = text.splitlines()
    assert f"INFO fedtext: run records -> {rec.dir}" in lines[0]
    assert [ln.split(" INFO ", 1)[1].split(" |")[0] for ln in lines if "fedtext round" in ln] == [
        "fedtext round 0/2", "fedtext round 1/2", "fedtext round 2/2"]
    assert "WARNING fedtext: a warning during the run" in text and "after the run" not in text
    assert logger.handlers == handlers and logger.level == level  # detached, level as found


def test_a_resumed_run_appends_to_its_run_log(tmp_path):
    rec = record_run(tmp_path, (), rounds=ROUNDS[:2], status="failed")
    again = RunRecorder(tmp_path, dict(CONFIG), run_id=rec.run_id, resume=True, keep_rounds=1)
    again.log_round(dict(ROUNDS[2]))
    again.finish()
    text = (rec.dir / RUN_LOG_FILE).read_text()
    assert text.index("run records ->") < text.index("failed: boom") < text.index("resuming run") \
        < text.index("fedtext round 2/2")


def test_two_open_runs_each_keep_their_log(tmp_path):
    a = RunRecorder(tmp_path / "a", dict(CONFIG))
    b = RunRecorder(tmp_path / "b", dict(CONFIG))
    a.finish()
    logging.getLogger("fedtext").info("fedtext: only b is open")
    b.finish()
    assert "only b" not in (a.dir / RUN_LOG_FILE).read_text()
    assert "only b" in (b.dir / RUN_LOG_FILE).read_text()


# ------------------------------------------------------------------ TensorBoard
def test_tensorboard_event_files_read_back(tmp_path):
    """Read with TensorBoard's own reader: the run folder is the TensorBoard run (named by
    the run id, no ``/tensorboard``), tags in groups, accuracy and loss against bytes."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    rec = record_run(tmp_path, ("tensorboard",))
    assert list(rec.dir.glob("events.out.tfevents.*")) and not (rec.dir / "tensorboard").exists()
    # `tensorboard --logdir <output-dir>`: one run, named by the run id
    runs = EventMultiplexer().AddRunsFromDirectory(str(tmp_path))
    runs.Reload()
    assert list(runs.Runs()) == [rec.run_id]
    events = runs.GetAccumulator(rec.run_id)
    tags = events.Tags()
    assert {"config/text_summary", "summary/text_summary"} <= set(tags["tensors"])

    def series(tag):
        return [(e.step, pytest.approx(e.value)) for e in events.Scalars(tag)]

    assert series("accuracy/global") == [(0, 0.5), (1, 0.625), (2, 0.75)]
    assert series("accuracy/client_mean") == [(1, 0.55), (2, 0.7)]  # None in round 0: not a point
    assert series("bytes/up") == [(0, 0), (1, 1056), (2, 1056)]
    assert series("bytes/cum_total") == [(0, 0), (1, 2112), (2, 4224)]
    assert series("loss/train") == [(1, 0.66), (2, 0.6)]
    assert series("time/sim_time_s") == [(1, 1.25), (2, 1.5)]
    assert series("method/sigma_prime") == [(1, 0.4), (2, 0.3)]
    # the second tag set: step = cumulative bytes up + down (0, 2112, 4224)
    assert series("vs_bytes/accuracy/global") == [(0, 0.5), (2112, 0.625), (4224, 0.75)]
    assert series("vs_bytes/loss/global") == [(0, 0.69), (2112, 0.6), (4224, 0.5)]
    assert not any(t.startswith("vs_bytes/") and not t.startswith(("vs_bytes/accuracy/", "vs_bytes/loss/"))
                   for t in tags["scalars"])
    assert series("summary/final_accuracy") == [(2, 0.75)]
    # no flat field names, nothing for text metrics or the seed
    assert not {"global_accuracy", "bytes_up", "train_loss"} & set(tags["scalars"])
    assert "method/note" not in tags["scalars"] and "summary/seed" not in tags["scalars"]
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert '"bbt-fed.popsize": 10' in config


# ------------------------------------------------------------------ W&B
def wandb_records(run_file: Path) -> list:
    """The protobuf records of a W&B offline ``.wandb`` file (LevelDB log format: 7-byte
    file header, then 32 KiB blocks of records ``crc32 | length u16 | type u8 | data``)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, pos, buf, out = run_file.read_bytes(), 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos: pos + 7])
        if length == 0 and kind == 0:
            break
        buf += data[pos + 7: pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


def items(updates) -> dict:
    """W&B's key/value items as a dict (a key with a ``/`` travels as ``nested_key``)."""
    return {u.key or "/".join(u.nested_key): json.loads(u.value_json) for u in updates}


def test_wandb_offline_run_holds_config_rounds_and_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for var, sub in (("WANDB_CONFIG_DIR", "config"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    rec = record_run(tmp_path / "out", ("wandb",))
    (run_file,) = (rec.dir / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    kinds = [r.WhichOneof("record_type") for r in records]
    run = records[kinds.index("run")].run
    assert run.display_name == rec.run_id
    assert items(run.config.update)["bbt-fed.popsize"] == 10
    history = [items(r.history.item) for r in records if r.HasField("history")]
    assert [(h["_step"], h["accuracy/global"]) for h in history] == [(0, 0.5), (1, 0.625), (2, 0.75)]
    assert history[1]["method/sigma_prime"] == 0.4
    summary = {}
    for r in records:
        if r.HasField("summary"):
            summary.update(items(r.summary.update))
    assert summary["final_accuracy"] == 0.75 and summary["status"] == "finished"
    assert records[kinds.index("exit")].exit.exit_code == 0


def test_wandb_online_without_a_login_is_left_out_not_prompted(tmp_path, monkeypatch, caplog):
    fake = fake_wandb(monkeypatch, logged_in=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    caplog.set_level(logging.WARNING, logger="fedtext")
    rec = record_run(tmp_path, ("wandb",))
    assert fake.inits == [] and fake.login_calls == [{"prompt": False, "verify": False}]
    assert "tracker wandb failed to start (RuntimeError: no W&B login" in caplog.text
    assert json.loads((rec.dir / "summary.json").read_text())["status"] == "finished"


class FakeWandbRun:
    def __init__(self, **kwargs):
        self.kwargs, self.logged, self.summary, self.exit_code = kwargs, [], {}, None

    def log(self, data, step):
        self.logged.append((step, data))

    def finish(self, exit_code=0):
        self.exit_code = exit_code


def fake_wandb(monkeypatch, logged_in=True):
    module = types.ModuleType("wandb")
    module.inits, module.login_calls = [], []

    def login(**kwargs):
        module.login_calls.append(kwargs)
        return logged_in

    def init(**kwargs):
        run = FakeWandbRun(**kwargs)
        module.inits.append(run)
        return run

    module.login, module.init, module.Settings = login, init, lambda **kw: kw
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_wandb_tracker_with_a_fake_module(tmp_path, monkeypatch):
    fake = fake_wandb(monkeypatch)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "fed-project")
    rec = record_run(tmp_path, ("wandb",), status="failed")
    (run,) = fake.inits
    assert fake.login_calls == []  # offline: no login asked
    assert run.kwargs["name"] == rec.run_id and run.kwargs["project"] == "fed-project"
    assert run.kwargs["dir"] == str(rec.dir) and run.kwargs["config"] == CONFIG
    assert run.kwargs["settings"]["console"] == "off" and run.kwargs["reinit"] == "create_new"
    assert [s for s, _ in run.logged] == [0, 1, 2] and run.logged[2][1]["accuracy/global"] == 0.75
    assert run.logged[2][1]["bytes/cum_total"] == 4224
    assert run.summary["status"] == "failed" and run.summary["error"] == "boom" and run.exit_code == 1


# ------------------------------------------------------------------ MLflow
def test_mlflow_file_store_run_holds_params_metrics_and_status(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    uri = f"file:{tmp_path / 'mlruns'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses a new file store otherwise
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "fedtext-test")
    rec = record_run(tmp_path / "out", ("mlflow",))
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fedtext-test").experiment_id])
    assert run.info.run_name == rec.run_id and run.info.status == "FINISHED"
    assert run.data.params["bbt-fed.popsize"] == "10" and run.data.params["method"] == "bbt-fed"
    history = client.get_metric_history(run.info.run_id, "accuracy/global")
    assert sorted((m.step, m.value) for m in history) == [(0, 0.5), (1, 0.625), (2, 0.75)]
    assert run.data.metrics["summary/final_accuracy"] == 0.75 and run.data.metrics["method/sigma_prime"] == 0.3
    assert run.data.tags["fedtext.status"] == "finished"


def test_mlflow_default_store_sits_beside_the_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.mlflow_uri(tmp_path / "runs" / "r1") == f"sqlite:///{(tmp_path / 'runs').resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://localhost:5000")
    assert tracking.mlflow_uri(tmp_path / "runs" / "r1") == "http://localhost:5000"


def fake_mlflow(monkeypatch):
    calls = []

    class Client:
        def __init__(self, tracking_uri):
            calls.append(("uri", tracking_uri))

        def get_experiment_by_name(self, name):
            return None

        def create_experiment(self, name):
            calls.append(("experiment", name))
            return "7"

        def create_run(self, experiment_id, run_name, tags):
            calls.append(("run", experiment_id, run_name))
            return types.SimpleNamespace(info=types.SimpleNamespace(run_id="abc"))

        def log_batch(self, run_id, metrics=(), params=()):
            calls.append(("batch", [(p.key, p.value) for p in params], [(m.key, m.value, m.step) for m in metrics]))

        def set_tag(self, run_id, key, value):
            calls.append(("tag", key, value))

        def set_terminated(self, run_id, status):
            calls.append(("end", status))

    root = types.ModuleType("mlflow")
    entities = types.ModuleType("mlflow.entities")
    entities.Param = lambda key, value: types.SimpleNamespace(key=key, value=value)
    entities.Metric = lambda key, value, timestamp, step: types.SimpleNamespace(key=key, value=value, step=step)
    track_mod = types.ModuleType("mlflow.tracking")
    track_mod.MlflowClient = Client
    for name, mod in (("mlflow", root), ("mlflow.entities", entities), ("mlflow.tracking", track_mod)):
        monkeypatch.setitem(sys.modules, name, mod)
    return calls


def test_mlflow_tracker_with_a_fake_module(tmp_path, monkeypatch):
    calls = fake_mlflow(monkeypatch)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    rec = record_run(tmp_path, ("mlflow",), status="failed")
    assert calls[:3] == [("uri", "http://tracking:5000"), ("experiment", "fedtext"), ("run", "7", rec.run_id)]
    batches = [c for c in calls if c[0] == "batch"]
    assert dict(batches[0][1]) == {k: str(v) for k, v in CONFIG.items()}
    rounds = [m for b in batches[1:4] for m in b[2]]
    assert ("accuracy/global", 0.75, 2) in rounds and ("method/sigma_prime", 0.4, 1) in rounds
    assert ("summary/final_accuracy", 0.75, 2) in batches[4][2]
    assert calls[-3:] == [("tag", "fedtext.status", "failed"), ("tag", "fedtext.error", "boom"), ("end", "FAILED")]


def test_trackers_are_independent(monkeypatch, tmp_path):
    """A tracker set sends the same scalars to each; one failing leaves the others."""
    monkeypatch.setitem(TRACKERS, "flaky", Flaky)
    monkeypatch.setattr(Flaky, "seen", [])
    seen = []

    class Good(Tracker):
        name, module, extra = "good", "json", "good"

        def log_round(self, step, scalars):
            seen.append((step, scalars["accuracy/global"]))

    monkeypatch.setitem(TRACKERS, "good", Good)
    group = Trackers(("flaky", "good"), tmp_path, "r", CONFIG)
    for r in ROUNDS:
        group.log_round(r)
    group.finish({"status": "finished"})
    assert seen == [(0, 0.5), (1, 0.625), (2, 0.75)] and Flaky.seen == [0]
