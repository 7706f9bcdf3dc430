"""Reliability: honest run status, checkpoint and resume, client failures, signals.

Unit tests on records and checkpoints; the runs through Flower's simulation engine
(killed and resumed, failing clients, SIGTERM) are in tests/integration/test_reliability_runs.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from fedtext.server import checkpoint
from fedtext.records import RunRecorder, load_run, run_status, summarize


def _only(folder: Path) -> Path:
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return run


# ---------------------------------------------------------------- status
def test_status_finished_failed_stale_running_and_malformed(tmp_path):
    rec = RunRecorder(tmp_path, {"method": "fedbpt", "stale-after-s": 5.0})
    rec.log_round({"round": 0, "global_accuracy": 0.5})
    run = load_run(rec.dir)
    assert run["status"] == "running" and run["reason"] is None
    # silent for longer than stale-after-s: stale, with the silence in the reason
    status, reason = run_status(run, now=time.time() + 60)
    assert status == "stale" and "no heartbeat for" in reason
    rec.finish("failed", error="terminated by SIGTERM")
    run = load_run(rec.dir)
    assert (run["status"], run["reason"]) == ("failed", "terminated by SIGTERM")
    assert run_status(run, now=time.time() + 1e6)[0] == "failed"  # a summary never turns stale
    # a binary rounds.jsonl without a summary is malformed, not running
    bad = tmp_path / "binary"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"config": {"method": "x"}}))
    (bad / "rounds.jsonl").write_bytes(bytes(range(256)) * 4 + b"\n\x00\xff\n")
    assert load_run(bad)["status"] == "malformed"


def test_heartbeat_is_rewritten_while_the_run_is_open(tmp_path):
    rec = RunRecorder(tmp_path, {"method": "fedbpt", "stale-after-s": 5.0})  # beats every 0.5 s
    first = float((rec.dir / "heartbeat").read_text())
    time.sleep(1.3)
    assert float((rec.dir / "heartbeat").read_text()) > first
    rec.finish()
    after = float((rec.dir / "heartbeat").read_text())
    time.sleep(1.0)
    assert float((rec.dir / "heartbeat").read_text()) == after  # stopped with the summary


def test_summarize_survives_type_garbled_fields():
    rounds = [
        {"round": 0, "global_accuracy": "0.5", "bytes_up": None},
        {"round": 1, "global_accuracy": 0.7, "bytes_up": "12", "bytes_down": [1], "client_accuracy": "x",
         "client_peak_rss_mb": {"a": 1}, "model_queries": True},
        {"round": 2, "global_accuracy": 0.6, "bytes_up": 100, "bytes_down": 50, "client_accuracy": {"0": 0.5},
         "participants": "nope"},
    ]
    s = summarize(rounds)
    assert s["final_accuracy"] == 0.6 and s["best_accuracy"] == 0.7 and s["initial_accuracy"] is None
    assert (s["total_bytes_up"], s["total_bytes_down"], s["total_model_queries"]) == (100, 50, 0)
    assert s["p_accuracy"] == 0.5 and s["peak_client_rss_mb"] is None


def test_a_refused_start_is_named_by_method_and_time_never_none(tmp_path):
    """A refused run-config often lacks dataset and seed: its record's folder is named by
    the start time, the method (the default one when none is named) and what is known,
    not ``<stamp>-None-None-sNone``."""
    import re

    from flwr.app import RecordDict
    from flwr.common import Context

    from fedtext.common.config import ConfigError, RunConfig
    from fedtext.server_app import make_server_app

    cases = {"nope": ({"method": "nope"}, r"\d{8}-\d{6}-nope"),
             # a run id's characters only: "/" -> "_", a dot before a dot -> "_" (fedtext.common.config.RUN_ID)
             "seed": ({"method": "nope", "seed": 3, "run-name": "../x"}, r"\d{8}-\d{6}-nope-s3-_\._x"),
             "default": ({"no-such-key": 1}, rf"\d{{8}}-\d{{6}}-{RunConfig.method}")}
    for case, (overrides, name) in cases.items():
        out = tmp_path / case
        app = make_server_app({**overrides, "output-dir": str(out)})
        with pytest.raises(ConfigError):
            app._server_fn(Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
        run_dir = _only(out)
        assert re.fullmatch(name, run_dir.name) and "None" not in run_dir.name, run_dir.name
        assert load_run(run_dir)["status"] == "failed"


# ------------------------------------------------------------ checkpoints
def test_checkpoint_round_trip_keeps_arrays_and_state(tmp_path, monkeypatch):
    from fedtext.methods.fedbpt.cmaes import ReferenceServerES

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))

    es = ReferenceServerES(d=5, sigma0=1.0, m=3, seed=7)
    es.tell(np.random.default_rng(0).standard_normal((3, 5)), [0.3, 0.1, 0.2], sigma_prime=0.8)
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2], dtype=np.uint16)]
    checkpoint.save(tmp_path, 4, arrays, {"server": es, "synced": {"17": 3}})
    ck = checkpoint.load(tmp_path)
    assert ck.round == 4 and ck.state["synced"] == {"17": 3}
    peeked = checkpoint.peek(tmp_path)  # the meta alone: no array, no state unpickled
    assert (peeked.round, peeked.global_arrays, peeked.state, peeked.meta) == (4, [], {}, ck.meta)
    for a, b in zip(arrays, ck.global_arrays, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    # pycma's whole state survives: the restored ES continues exactly as the original
    sol = np.random.default_rng(1).standard_normal((3, 5))
    assert es.tell(sol, [0.2, 0.3, 0.1], 0.7) == ck.state["server"].tell(sol, [0.2, 0.3, 0.1], 0.7)
    assert np.array_equal(es.mean, ck.state["server"].mean)
    assert not (tmp_path / "checkpoint.npz.tmp").exists()


class _RunsCode:
    """A pickle that makes a folder when unpickled: proof that a checkpoint's code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _poison(run_dir: Path, marker: Path, keep_signature: bool) -> None:
    """Swap the state of ``run_dir``'s checkpoint for a pickle that runs code (an attacker who
    can write the folder); the old signature stays when ``keep_signature``."""
    import io
    import pickle

    with np.load(run_dir / checkpoint.FILE) as z:
        blobs = {k: z[k] for k in z.files}
    blobs["state"] = np.frombuffer(pickle.dumps({"server": _RunsCode(marker)}), dtype=np.uint8)
    if not keep_signature:
        del blobs["signature"]
    buf = io.BytesIO()
    np.savez(buf, **blobs)
    (run_dir / checkpoint.FILE).write_bytes(buf.getvalue())


@pytest.mark.parametrize("attack", ["tampered", "unsigned", "other key"])
def test_a_checkpoint_not_signed_by_this_users_key_is_refused_before_anything_is_unpickled(
        tmp_path, monkeypatch, attack):
    """Issue 35: ``checkpoint.npz``'s state is a pickle. Edited after signing, unsigned (format
    1), or signed with another key, it is refused, and its code never runs."""
    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "mine.key"))
    run_dir, marker = tmp_path / "run", tmp_path / "code-ran"
    run_dir.mkdir()
    if attack == "other key":
        monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "theirs.key"))
        checkpoint.save(run_dir, 1, [np.zeros(3, np.float32)], {"server": _RunsCode(marker)})
        monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "mine.key"))
        checkpoint.save(tmp_path, 1, [np.zeros(3, np.float32)], {})  # this user has a key of their own
    else:
        checkpoint.save(run_dir, 1, [np.zeros(3, np.float32)], {"server": 1})
        assert checkpoint.load(run_dir).state == {"server": 1}  # untouched, it loads
        _poison(run_dir, marker, keep_signature=attack == "tampered")
    with pytest.raises(checkpoint.CheckpointError, match="not signed" if attack == "unsigned" else "does not verify"):
        checkpoint.load(run_dir)
    # peek (a runner's check before it resumes) refuses the same, but for an edited member: its signed meta is
    # all peek reads, and the server's load refuses it when the run starts
    if attack == "tampered":
        assert checkpoint.peek(run_dir).round == 1
    else:
        with pytest.raises(checkpoint.CheckpointError, match="not signed" if attack == "unsigned" else "does not verify"):
            checkpoint.peek(run_dir)
    assert not marker.exists()


def test_a_checkpoint_resolving_outside_its_run_folder_is_refused(tmp_path, monkeypatch):
    """Issue 35: a symlink planted in the run folder is not followed, even to a valid checkpoint."""
    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    elsewhere, run_dir = tmp_path / "elsewhere", tmp_path / "out" / "run"
    elsewhere.mkdir()
    run_dir.mkdir(parents=True)
    checkpoint.save(elsewhere, 1, [np.zeros(3, np.float32)], {})
    (run_dir / checkpoint.FILE).symlink_to(elsewhere / checkpoint.FILE)
    with pytest.raises(checkpoint.CheckpointError, match="outside its run folder"):
        checkpoint.load(run_dir)
    with pytest.raises(FileNotFoundError):
        checkpoint.load(tmp_path / "out" / "nothing")


def test_the_key_is_made_once_private_and_a_missing_key_is_one_line(tmp_path, monkeypatch):
    key = tmp_path / "k" / "checkpoint.key"
    monkeypatch.setenv(checkpoint.KEY_ENV, str(key))
    checkpoint.save(tmp_path, 1, [np.zeros(1)], {})
    first = key.read_bytes()
    checkpoint.save(tmp_path, 2, [np.zeros(1)], {})
    assert key.read_bytes() == first and len(first) == checkpoint.KEY_BYTES
    assert (key.stat().st_mode & 0o777) == 0o600
    key.unlink()
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint key readable"):
        checkpoint.load(tmp_path)


def test_resume_compares_the_config_and_the_folder_before_it_loads_the_checkpoint(tmp_path, monkeypatch):
    """Issue 35: ``resume=`` with another config, or naming a folder outside output-dir, is a
    one-line configuration error raised before the checkpoint is read; its code never runs."""
    from fedtext.common.config import ConfigError
    from fedtext.common.registry import make_config
    from fedtext.server_app import resume_checkpoint

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    out, marker = tmp_path / "out", tmp_path / "code-ran"
    cfg = make_config("fedbpt", output_dir=str(out), resume="run", num_server_rounds=3)
    run_config = cfg.to_run_config()
    (out / "run").mkdir(parents=True)
    (out / "run" / "config.json").write_text(json.dumps({"config": {**run_config, "seed": 1}}))
    checkpoint.save(out / "run", 1, [np.zeros(3, np.float32)], {})
    _poison(out / "run", marker, keep_signature=False)
    with pytest.raises(ConfigError, match=r"seed=0 \(run: 1\)"):
        resume_checkpoint(cfg, run_config, checkpoint.UNBOUNDED)
    (out / "run" / "config.json").write_text(json.dumps({"config": run_config}))
    with pytest.raises(ConfigError, match="not signed"):
        resume_checkpoint(cfg, run_config, checkpoint.UNBOUNDED)
    assert not marker.exists()
    with pytest.raises(ConfigError, match="a folder name under output-dir"):  # refused by the config itself
        make_config("fedbpt", output_dir=str(out), resume="../outside")
    # a run folder that is a symlink to elsewhere (planted in output-dir) is not followed
    (tmp_path / "outside").mkdir()
    (out / "linked").symlink_to(tmp_path / "outside")
    with pytest.raises(ConfigError, match="not a run folder inside output-dir"):
        resume_checkpoint(make_config("fedbpt", output_dir=str(out), resume="linked", num_server_rounds=3), run_config,
                          checkpoint.UNBOUNDED)


# Issue 45, item 4: a checkpoint is bound to its run and bounded by its model.
def _resumable(out: Path, run_id: str, method: str, seed: int = 0):
    """A run folder ``out/<run_id>`` as a run of ``method`` leaves it (its config.json), and
    ``(cfg, run-config, limits)`` of resuming it: the limits of its real model
    (``FedTextStrategy.checkpoint_limits``, on the demo backbone)."""
    from fedtext.backbone import backbone_for
    from fedtext.common.registry import make_config
    from fedtext.server_app import strategy_class
    from fedtext.common.tasks import TASKS

    cfg = make_config(method, output_dir=str(out), resume=run_id, num_server_rounds=3, seed=seed)
    config = cfg.to_run_config()
    (out / run_id).mkdir(parents=True)
    (out / run_id / "config.json").write_text(json.dumps({"run_id": run_id, "config": config}))
    model = cfg.method_config.model_class()(cfg, backbone_for(cfg, TASKS["demo"]))
    return cfg, config, strategy_class(method).checkpoint_limits(cfg, model)


def _save_as_run(run_dir: Path, config: dict, arrays: list[np.ndarray], state: dict) -> None:
    """The checkpoint the strategy saves after round 1 of the run in ``run_dir``."""
    binding = checkpoint.Binding(run_dir.name, config["method"], checkpoint.config_hash(config))
    checkpoint.save(run_dir, 1, arrays, state, {"seed": config["seed"]}, binding)


@pytest.mark.parametrize("other", ["method", "config", "run id"])
def test_a_checkpoint_of_another_run_is_refused_naming_what_differs_before_anything_is_unpickled(
        tmp_path, monkeypatch, other):
    """Issue 45: a fedprompt checkpoint signed with the same key, copied into a bbt-fed run
    folder, was loaded (a matmul error in round 1). A checkpoint carries its run id, method
    and config hash in the signed meta; another run's is refused in one line naming what
    differs, and its pickle never runs. The run's own checkpoint still resumes, bit-exact."""
    from fedtext.common.config import ConfigError
    from fedtext.server_app import resume_checkpoint

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    marker = tmp_path / "code-ran"
    cfg, config, limits = _resumable(tmp_path / "out", "victim", "bbt-fed")
    z = np.arange(100, dtype=np.float32) / 7
    _save_as_run(tmp_path / "out" / "victim", config, [z], {})
    own = resume_checkpoint(cfg, config, limits)
    assert own.round == 1 and own.global_arrays[0].dtype == np.float32 and np.array_equal(own.global_arrays[0], z)
    source = {"method": ("elsewhere", "fp-run", "fedprompt", 0), "config": ("elsewhere", "victim", "bbt-fed", 1),
              "run id": ("out", "other-run", "bbt-fed", 0)}[other]
    folder, run_id, method, seed = source
    _, their_config, _ = _resumable(tmp_path / folder, run_id, method, seed)
    their_arrays = [np.zeros((8, 384), np.float32)] if method == "fedprompt" else [z]
    _save_as_run(tmp_path / folder / run_id, their_config, their_arrays, {"server": _RunsCode(marker)})
    (tmp_path / "out" / "victim" / checkpoint.FILE).write_bytes((tmp_path / folder / run_id / checkpoint.FILE).read_bytes())
    with pytest.raises(ConfigError) as err:
        resume_checkpoint(cfg, config, limits)
    message = str(err.value)
    assert "\n" not in message and message.startswith("resume='victim': ") and "belongs to another run: " in message
    expected = {
        "method": ["run id 'fp-run' (this run: 'victim')", "method 'fedprompt' (this run: 'bbt-fed')",
                   "config hash '"],
        "config": ["config hash '"], "run id": ["run id 'other-run' (this run: 'victim')"]}[other]
    for words in expected:
        assert words in message
    assert ("method '" in message) == (other == "method") and ("config hash" in message) == (other != "run id")
    assert not marker.exists()


def _zip_bomb(path: Path, inflated: int, lie_to: int | None = None) -> None:
    """A ``checkpoint.npz`` of ``inflated`` zero bytes deflated (a few hundred kB on disk):
    in ``state`` beside a small meta and signature; with ``lie_to``, in ``meta`` (read first),
    whose zip header then declares ``lie_to`` bytes (a header that understates what the
    member inflates to)."""
    import zipfile

    big = "meta.npy" if lie_to is not None else "state.npy"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        if lie_to is None:
            zf.writestr("meta.npy", checkpoint._npy_bytes(np.frombuffer(b'{"round": 1, "format": 3}', np.uint8)))
        zf.writestr("signature.npy", checkpoint._npy_bytes(np.zeros(32, np.uint8)))
        with zf.open(big, "w") as f:
            block = bytes(2**20)
            for _ in range(inflated // len(block)):
                f.write(block)
    if lie_to is not None:  # the central directory's uncompressed size (offset 24), which zipfile reads
        data = bytearray(path.read_bytes())
        entry = data.rindex(b"PK\x01\x02", 0, data.rindex(big.encode()))
        data[entry + 24: entry + 28] = lie_to.to_bytes(4, "little")
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("lie", [False, True])
def test_a_compressed_checkpoint_is_refused_before_it_inflates(tmp_path, monkeypatch, lie):
    """Issue 45: a 1.4 MB compressed checkpoint inflated to 1.46 GB (20 s) before "not
    signed". Each member's declared uncompressed size is checked against what the run's
    model can hold before anything is decompressed; a header that understates it is caught
    by the capped read. Here 256 MiB of zeros, a quarter of a MB on disk: refused in one
    line, with under 8 MiB allocated."""
    import tracemalloc

    from fedtext.common.config import ConfigError
    from fedtext.server_app import resume_checkpoint

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    cfg, config, limits = _resumable(tmp_path / "out", "victim", "bbt-fed")
    _zip_bomb(tmp_path / "out" / "victim" / checkpoint.FILE, 256 * 2**20, lie_to=1000 if lie else None)
    assert (tmp_path / "out" / "victim" / checkpoint.FILE).stat().st_size < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as err:
            resume_checkpoint(cfg, config, limits)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(err.value)
    assert "\n" not in message and peak < 8 * 2**20, (message, peak)
    if lie:  # the zip's own check of what it inflated against the 1000 bytes declared
        assert message.startswith("resume='victim': ") and "not a readable checkpoint archive" in message
    else:
        assert f"its members declare {256 * 2**20 + 2 * 128 + 25 + 32} bytes uncompressed, more than the " \
               f"{limits.total} a checkpoint of this run's model can hold: refused" in message


def test_each_array_is_bounded_by_the_models_spec(tmp_path, monkeypatch):
    """A checkpoint of this very run (same binding) whose global array is larger than the
    model's spec allows (twice its bytes plus a header) is refused before it is read."""
    from fedtext.common.comm import ArraySpec

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    binding = checkpoint.Binding("run", "bbt-fed", "0" * 64)
    limits = checkpoint.Limits.for_model([ArraySpec("z", (100,), "float32")])
    assert limits.global_bytes == (2 * 400 + checkpoint.NPY_HEADER_BOUND,)
    assert limits.state_bytes == checkpoint.STATE_ALLOWANCE + checkpoint.NPY_HEADER_BOUND
    checkpoint.save(tmp_path, 1, [np.zeros(100, np.float64)], {}, binding=binding)  # float64: fits the factor 2
    assert checkpoint.load(tmp_path, binding, limits).global_arrays[0].dtype == np.float64
    checkpoint.save(tmp_path, 1, [np.zeros(2000, np.float32)], {}, binding=binding)
    with pytest.raises(checkpoint.CheckpointError, match=r"global_0 holds 8128 bytes, more than the 4896 this run's "
                                                          r"model can hold: refused"):
        checkpoint.load(tmp_path, binding, limits)
    checkpoint.save(tmp_path, 1, [np.zeros(100, np.float32)] * 2, {}, binding=binding)
    with pytest.raises(checkpoint.CheckpointError, match="holds 2 global arrays, this run's model has 1: refused"):
        checkpoint.load(tmp_path, binding, limits)


def test_a_checkpoint_of_the_older_format_is_refused_in_one_line(tmp_path, monkeypatch):
    """A format-2 checkpoint (signed, bound to nothing; what fedtext wrote before issue 45)
    verifies with the user's key under the old scheme: it is refused, saying to start anew."""
    import hashlib
    import hmac
    import io

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    checkpoint.save(tmp_path / "", 1, [np.zeros(1)], {})  # makes this user's key
    key = (tmp_path / "key").read_bytes()
    blobs = {"global_0": np.zeros(3, np.float32), "state": np.frombuffer(b"\x80\x05}\x94.", np.uint8),
             "meta": np.frombuffer(json.dumps({"round": 1, "format": 2, "method": "bbt-fed"}).encode(), np.uint8)}
    mac = hmac.new(key, digestmod=hashlib.sha256)  # format 2's signature, as fedtext wrote it
    for name in sorted(blobs):
        mac.update(json.dumps([name, blobs[name].dtype.str, list(blobs[name].shape)]).encode())
        mac.update(blobs[name].tobytes())
    blobs["signature"] = np.frombuffer(mac.digest(), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **blobs)
    (tmp_path / checkpoint.FILE).write_bytes(buf.getvalue())
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load(tmp_path)
    assert str(err.value) == (f"{tmp_path / checkpoint.FILE} was made by an older fedtext (checkpoint format 2, this "
                              f"one reads 3); start a new run")


def test_the_state_bounds_hold_the_methods_real_state():
    """FedBPT's declared state bound holds its pycma server after a few steps (d = 5..400);
    at d = 400 the declaration alone does, without the 4 MiB allowance. (FedDLS's holds by
    construction: the codec's own spec bytes per round.)"""
    import pickle
    from types import SimpleNamespace

    from fedtext.methods.fedbpt.cmaes import ReferenceServerES
    from strategies.fedbpt import FedBPT

    for d in (5, 50, 400):
        es = ReferenceServerES(d=d, sigma0=1.0, m=5, seed=7)
        for t in range(3):
            es.tell(np.random.default_rng(t).standard_normal((5, d)), [0.3, 0.1, 0.2, 0.4, 0.5], sigma_prime=0.8)
        pickled = len(pickle.dumps({"server": es}, protocol=pickle.HIGHEST_PROTOCOL))
        declared = FedBPT.checkpoint_state_bytes(None, SimpleNamespace(d=d))
        assert pickled <= declared + checkpoint.STATE_ALLOWANCE
        if d >= 400:  # where the d x d matrices dominate, the declaration alone must hold them:
            # 4 float64 d x d matrices; one (8 d^2) would not (pycma pickles to 2.2-4.1 of them)
            assert 8 * d**2 < pickled <= declared, (d, pickled, declared)


@pytest.mark.parametrize("where", ["/proc/fedtext-x", "file"])
def test_an_unwritable_output_dir_is_one_line_before_anything_loads(tmp_path, monkeypatch, where):
    """Issue 35: ``output-dir=/proc/x`` gave a raw traceback after the model had loaded."""
    from fedtext import server_app
    from fedtext.common.config import ConfigError
    from fedtext.common.registry import make_config

    if where == "file":
        (tmp_path / "file").write_text("not a folder")
        where = str(tmp_path / "file" / "runs")
    monkeypatch.setattr(server_app, "labelled", lambda *_: pytest.fail("data loaded before the check"))
    with pytest.raises(ConfigError, match=rf"^output-dir={where}: cannot write run records there \(") as err:
        server_app.build(make_config("fedprompt", output_dir=where))
    assert "\n" not in str(err.value)
    server_app.check_output_dir(str(tmp_path / "new" / "runs"))  # writable: tried, and nothing left
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    server_app.check_output_dir(str(tmp_path / "kept"))
    assert (tmp_path / "kept").is_dir() and not list((tmp_path / "kept").iterdir())


def test_feddls_resyncs_a_client_whose_state_was_lost():
    from fedtext.common.registry import make_config
    from fedtext.common.tasks import TASKS
    from strategies.feddls import FedDLS

    strat = FedDLS(make_config("feddls", max_length=64, prompt_length=4), TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    p0 = strat.global_arrays[0]
    for _ in range(3):  # three rounds of updates (any residual will do)
        p1 = p0 + 0.01
        strat.updates.append(strat.codec.encode(p1, p0))
        p0 = strat.codec.decode(strat.updates[-1], p0)

    class Proxy:
        cid = "42"

    strat.synced["42"] = 3  # the server believes node 42 holds version 3 ...
    arrays, extra = strat.download(4, Proxy(), "fit")
    assert arrays == [] and extra == {"dls_from": 3, "dls_to": 3}
    # ... but its node restarted: the client fails with "node state was lost"
    strat.client_failed("42", "fit", "RuntimeError: feddls client 0 holds p' version 0 ... node state was lost")
    strat.rounds.begin(5)
    arrays, extra = strat.download(5, Proxy(), "fit")
    assert extra == {"dls_from": 0, "dls_to": 3} and len(arrays) == 3 * strat.codec.num_arrays
    from fedtext.common import comm
    assert strat.record.resync_bytes == comm.expected_bytes(arrays) > 0
    # once the replay would cost more than p' itself, the resync sends p' (absolute)
    for _ in range(200):
        strat.updates.append(strat.updates[-1])
    strat.global_arrays = [p0]
    strat.client_failed("42", "fit", "... node state was lost")
    strat.rounds.begin(6)
    arrays, extra = strat.download(6, Proxy(), "fit")
    assert extra == {"dls_from": 203, "dls_to": 203, "dls_absolute": 1}
    assert len(arrays) == 1 and np.array_equal(arrays[0], p0)
    assert strat.record.resync_bytes == 4 * p0.size + comm.NPY_HEADER_BYTES
    # a client with no state takes it as its p' of version 203
    from clients.feddls import FedDLSClient

    assert FedDLSClient.synced_prompt(_Stateless(strat), arrays, extra)[0] == 203


class _Stateless:
    """Just what ``FedDLSClient.synced_prompt`` touches of a client whose node lost its state."""

    def __init__(self, strat) -> None:
        self.codec, self.p0 = strat.codec, strat.initial_arrays()[0]

    def stored(self):
        return 0, self.p0


# ------------------------------------------------------------- bad inputs
def _dataset(tmp_path: Path, train: bytes, test: bytes = b"text\tlabel\nfine\t0\nokay\t1\n") -> str:
    (tmp_path / "train.tsv").write_bytes(train)
    (tmp_path / "test.tsv").write_bytes(test)
    return str(tmp_path)


@pytest.mark.parametrize("train, test, message", [
    (b"", None, "train.tsv: the file is empty"),
    (b"text\tlabel\ncaf\xe9 au lait\t0\n", None, "train.tsv: not UTF-8 text (line 2, byte 14"),
    (b"text\tlabel\na\t0\nb\t1\n", b"text\tlabel\n", "test.tsv: a header but no rows"),
])
def test_unreadable_data_files_are_one_line_errors(tmp_path, train, test, message):
    from fedtext.common.config import ConfigError
    from fedtext.learning.data import load_splits

    path = _dataset(tmp_path, train, *(() if test is None else (test,)))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_splits(path)


def test_a_dataset_folder_with_a_space_runs_its_clients_journal_under_the_run_id(tmp_path, monkeypatch):
    """Issue 45 item 6: ``dataset=.../my data`` put ``my data`` into the run id, which
    every node refused as its journal's key (fedtext.node.state.check_run_key) after the
    whole first round. Nothing in Flower or the run-config stops such a path (the data
    loads): the run id now spells the folder ``my_data``, and a client's fit journals under it."""
    from types import SimpleNamespace

    from flwr.app import ConfigRecord, RecordDict
    from flwr.common import FitIns, ndarrays_to_parameters

    import fedtext.node.node as ca
    from fedtext.learning.data import partition_train
    from fedtext.common.registry import make_config

    folder = tmp_path / "my data"
    folder.mkdir()
    _dataset(folder, b"text\tlabel\n" + b"".join(b"text %d\t%d\n" % (i, i % 2) for i in range(40)))
    cfg = make_config("fedavg", dataset=str(folder), label_names="neg,pos", output_dir=str(tmp_path / "runs"))
    assert len(partition_train(cfg, 0, 2)) + len(partition_train(cfg, 1, 2)) == 40  # the folder's rows load
    run_id = RunRecorder(cfg.output_dir, cfg.to_run_config()).run_id
    assert run_id.endswith("-fedavg-my_data-s0"), run_id
    def build(node: ca.Node) -> SimpleNamespace:  # a client that holds node state (as FeS's pseudo labels)
        def fit(parameters, config):
            node.state["m"] = ConfigRecord({"ids": [4, 2]})
            return [parameters[0] + 1], 3, {}
        return SimpleNamespace(fit=fit)

    monkeypatch.setattr(ca.Node, "build", build)
    client = ca.make_client(cfg.to_run_config(), {"partition-id": 1, "num-partitions": 2}, RecordDict())
    reply = client.fit(FitIns(ndarrays_to_parameters([np.zeros(2)]), {"server_round": 1, "run_key": run_id}))
    assert reply.num_examples == 3
    assert (tmp_path / "runs" / run_id / "node-state" / "p1" / "round-1.json").is_file()


def test_simulate_says_in_one_line_why_a_run_stopped_outside_the_config_checks(monkeypatch, capsys):
    """``seed=-1`` reached numpy inside the ServerApp; ``python -m simulations.simulate``
    caught the error, exited 1 and printed nothing. Any such error now leaves one line."""
    import simulations.simulate as sim

    def stopped(*args, **kwargs):
        raise ValueError("expected non-negative integer")

    def exit_now(code: int) -> None:  # os._exit would end pytest
        raise SystemExit(code)

    finished = []
    monkeypatch.setattr(sim, "simulate", stopped)
    monkeypatch.setattr(sim.os, "_exit", exit_now)
    monkeypatch.setattr(sim, "install_signal_handlers", lambda: None)  # not in pytest's own process
    monkeypatch.setattr(sim, "finish_open_runs", lambda *a: finished.append(a))  # other tests' recorders stay open
    with pytest.raises(SystemExit) as ended:
        sim.main(["--num-supernodes", "2"])
    assert ended.value.code == 1
    assert capsys.readouterr().err == "fedtext: the run stopped: ValueError: expected non-negative integer\n"
    assert finished == [("failed", "ValueError: expected non-negative integer")]


def test_a_tsv_with_quoted_newlines_is_read_with_its_quotes(tmp_path):
    from fedtext.learning.data import load_splits

    path = _dataset(tmp_path, b'text\tlabel\n"two\nlines"\t1\nplain "quote\t0\n')
    train = load_splits(path).train
    assert list(train["label"]) == [1, 0] and train["text"][0] == "two\nlines"


def test_single_class_training_data_warns(tmp_path, caplog):
    from fedtext.common.registry import make_config
    from fedtext.server_app import build

    path = _dataset(tmp_path, b"text\tlabel\na\t0\nb\t0\n")
    with caplog.at_level("WARNING", logger="fedtext"):
        build(make_config("bbt-fed", dataset=path, task="sst2", output_dir=str(tmp_path / "runs"), max_length=32,
                          eval_size=2))
    assert "single class" in caplog.text


@pytest.mark.parametrize("prompt_length, max_length, message", [
    (100000, 32, "natural vocabulary tokens"), (400, 128, "exceeds the 512 positions")])
def test_prompt_length_beyond_the_vocabulary_or_positions_is_a_config_error(backbone, prompt_length, max_length,
                                                                            message):
    from fedtext.common.config import ConfigError
    from fedtext.common.registry import make_config
    from fedtext.server_app import check_prompt_fits

    with pytest.raises(ConfigError, match=message):
        check_prompt_fits(make_config("bbt-fed", prompt_length=prompt_length, max_length=max_length), backbone)
    check_prompt_fits(make_config("bbt-fed", prompt_length=8, max_length=128), backbone)  # the defaults fit


@pytest.mark.parametrize("text, words", [
    ("{not json", "config.json: not JSON (Expecting property name enclosed in double quotes"),
    ('{"run_id": "run"}', "config.json has no run-config ('config')"),
    ('{"config": [1, 2]}', "config.json: 'config' is a list, not an object"),
    ('{"config": {"seed": NaN}}', "config.json: NaN is not a finite number"),
])
def test_resume_of_a_garbled_config_json_is_one_line_saying_why(tmp_path, text, words):
    """Issue 69: resume= read the run's config.json whole with json.loads, and a garbled one read
    as "no run record"; it now goes through the records reader (bounded, checked): one line
    naming the file and what is wrong with it. A folder without one is still "no run record"."""
    from fedtext.common.config import ConfigError
    from fedtext.common.registry import make_config
    from fedtext.server_app import resume_checkpoint

    out = tmp_path / "out"
    cfg = make_config("fedbpt", output_dir=str(out), resume="run", num_server_rounds=3)
    (out / "run").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"^resume='run': no run record at "):
        resume_checkpoint(cfg, cfg.to_run_config(), checkpoint.UNBOUNDED)
    (out / "run" / "config.json").write_text(text)
    with pytest.raises(ConfigError) as err:
        resume_checkpoint(cfg, cfg.to_run_config(), checkpoint.UNBOUNDED)
    assert str(err.value).startswith(f"resume='run': {out / 'run' / 'config.json'} is not a run's config record "
                                     f"({words}")
    assert "\n" not in str(err.value)


def test_nohups_sighup_stays_ignored_and_the_other_signals_are_recorded():
    """Under nohup SIGHUP is ignored: the process goes on training, so its run is not marked failed (and
    unlocked for a rerun to resume under it). An inherited SIG_IGN of SIGINT (a background job's) still gets
    the recording handler: Flower stops a ServerApp whose SuperLink died with SIGINT."""
    import signal

    from fedtext.records import install_signal_handlers

    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
    before = {sig: signal.getsignal(sig) for sig in signals}
    try:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert install_signal_handlers()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            assert getattr(signal.getsignal(sig), "_fedtext", False), sig
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_tools_stop_handler_leaves_an_inherited_ignore_alone():
    """install_unless_ignored (the compare runner's and the deployment launcher's stop handlers): a signal the
    process was started ignoring (nohup's SIGHUP) stays ignored, the others get the handler; a version that
    installs everywhere, or nowhere, fails here."""
    import signal

    from fedtext.records.signals import install_unless_ignored

    def handler(signum: int, frame: object) -> None:  # never called: only installed
        raise AssertionError(signum)

    signals = (signal.SIGUSR1, signal.SIGUSR2)
    before = {sig: signal.getsignal(sig) for sig in signals}
    try:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)
        install_unless_ignored(signals, handler)
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGUSR2) is handler
    finally:
        for sig, previous in before.items():
            signal.signal(sig, previous)


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:6] + b"\x09\x00" + b[8:], "is not an .npy array .*version"),        # unknown NPY version
    (lambda b: b.replace(b"'descr'", b"'dexcr'"), "is not an .npy array"),            # mangled header dict
    (lambda b: b + b"\x00" * 4, r"meta's header \(uint8, .*\) does not match its \d+ bytes"),  # a length lie
])
def test_a_meta_member_that_is_not_its_npy_header_is_refused_in_one_line(tmp_path, monkeypatch, damage, message):
    """The meta member is read (through comm.npy_header, the one NPY parser) before its
    signature can be checked: a header that is not NPY, or that does not account for the member's
    bytes, is a one-line refusal, never a numpy traceback."""
    import io
    import zipfile

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    checkpoint.save(tmp_path, 1, [np.zeros(3, np.float32)], {})
    path = tmp_path / checkpoint.FILE
    with zipfile.ZipFile(path) as zf:
        members = {i.filename: zf.read(i) for i in zf.infolist()}
    members["meta.npy"] = damage(members["meta.npy"])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    path.write_bytes(buf.getvalue())
    with pytest.raises(checkpoint.CheckpointError, match=message):
        checkpoint.load(tmp_path)
