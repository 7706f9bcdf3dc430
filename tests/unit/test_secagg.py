"""Secure aggregation (issue 59, part 2; fedtext.server.secagg) without a Flower run: what the server
does with the results SecAgg+ hands ``aggregate_fit`` (every one carrying the unmasked
example-weighted mean, float64), the round's protocol bytes, and the client mod that lets
plain messages pass. The protocol itself through Flower's simulation engine:
tests/integration/test_flower_engine.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, Context, FitIns, FitRes, Status
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat
from flwr.supercore.task_identity import TaskIdentity

from fedtext.common import comm
from fedtext.client_app import secagg_mod
from fedtext.records import RunRecorder
from fedtext.common.registry import make_config
from fedtext.server.secagg import StageLog
from fedtext.common.tasks import TASKS
from strategies.fedprompt import FedPrompt


@pytest.fixture()
def fedprompt(backbone, tmp_path):
    cfg = make_config("fedprompt", prompt_length=2, max_length=64, output_dir=str(tmp_path), num_server_rounds=3,
                      secagg=True, clients_per_round=3)
    strat = FedPrompt(cfg, TASKS["demo"], recorder=RunRecorder(tmp_path, cfg.to_run_config()))
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    return strat


def test_every_result_carrying_the_float64_mean_gives_that_mean_once_in_float32(fedprompt):
    """Flower's unmask stage sets every surviving FitRes's parameters to the dequantised mean
    (float64): before fedtext.server.secagg the upload specs (float32) dropped all three and the round
    kept its model; now the mean is cast, validated and is the new global prompt."""
    base = fedprompt.global_arrays[0]
    mean = (base.astype(np.float64) + 0.1)
    results = [(SimpleNamespace(cid=str(pid)),
                FitRes(Status(Code.OK, ""), comm.encode([mean]), n, {"partition_id": pid, "train_loss": 0.5}))
               for pid, n in ((0, 2), (1, 6), (2, 4))]
    params, _ = fedprompt.aggregate_fit(1, results, [])
    (got,) = comm.decode(params)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, mean.astype(np.float32), rtol=0, atol=1e-7)  # the mean itself, once
    assert fedprompt.record.num_clients == 3 and fedprompt.record.trained == ["0", "1", "2"]
    assert fedprompt.record.dropped == []


def test_the_round_records_the_protocol_bytes_per_stage(fedprompt):
    """bytes_up is the replies' SecAgg+ records (the masked vector replaces the upload), bytes_down
    the fit instructions' arrays plus the records sent; secagg_bytes keeps each stage."""
    rec = fedprompt.record
    rec.trained, rec.bytes_down = ["0", "1", "2"], 300
    fedprompt.rounds.down_bytes = {"a": 100, "b": 100, "c": 100}
    stages = {"setup": StageLog(30, 60), "share_keys": StageLog(90, 120),
              "collect_masked_vectors": StageLog(60, 3000), "unmask": StageLog(30, 90)}
    fedprompt.rounds.secagg_sent(stages)
    assert list(rec.secagg_bytes) == ["setup", "share_keys", "collect_masked_vectors", "unmask"]
    assert rec.secagg_bytes["collect_masked_vectors"] == {"down": 60, "up": 3000}
    assert (rec.bytes_up, rec.bytes_up_per_client) == (3270, 1090)
    assert (rec.bytes_down, rec.bytes_down_per_client) == (510, 170)


# the most examples each node may claim: an unknown node's is the whole train split, larger than any
_CLAIMS = {"p8": 8, "p32": 32, "p16": 16, "stranger": 1000}


def _weight_strategy(max_weight: float, known: set[str]) -> SimpleNamespace:
    """What max_weight reads of a strategy: ``secagg-max-weight``, whether the sampler knows a node's
    partition (``known``) and each node's claim limit (:data:`_CLAIMS`)."""
    return SimpleNamespace(cfg=SimpleNamespace(secagg_max_weight=max_weight),
                           sampler=SimpleNamespace(known_partition=lambda p: p if p in known else None),
                           validator=SimpleNamespace(claim_limit=lambda p: (_CLAIMS[p], "assigned rows")))


def test_the_secagg_weight_bound_is_the_largest_claim_of_a_known_client():
    """Every client's n_k / max_weight must stay <= 1, so the bound is the *largest* claim any known
    client may make (claims 8, 32, 16 -> 32, not the smallest, 8, which would scale a 32-example
    client by 4); a node whose partition is unknown (its limit, the whole split, 1000) is left out;
    no known client: 1; ``secagg-max-weight`` > 0 is taken as it is."""
    from fedtext.server.secagg import max_weight

    nodes = SimpleNamespace(all=lambda: {"a": "p8", "b": "p32", "c": "p16", "d": "stranger"})
    assert max_weight(_weight_strategy(0.0, {"p8", "p32", "p16"}), nodes) == 32.0
    assert max_weight(_weight_strategy(0.0, set()), nodes) == 1.0
    assert max_weight(_weight_strategy(50.0, {"p8", "p32", "p16"}), nodes) == 50.0
    assert max_weight(_weight_strategy(0.0, set(_CLAIMS)), nodes) == 1000.0  # once known, it counts


def _train(content: RecordDict) -> Message:
    return Message(content=content, dst_node_id=1, message_type=MessageType.TRAIN, group_id="1")


def test_plain_fit_messages_pass_the_client_mod_and_protocol_ones_do_not(monkeypatch):
    """Flower's own secaggplus_mod fails a plain fit instruction (KeyError on its record):
    fedtext's secagg_mod hands it on untouched, and a SecAgg+ setup message to Flower's mod."""
    for key in ("_task_id", "_run_id", "_node_id"):  # what a ClientApp process has set before a message
        monkeypatch.setattr(TaskIdentity, key, 1)
    plain = _train(compat.fitins_to_recorddict(FitIns(comm.encode([np.zeros(2, np.float32)]), {}), True))
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    seen = []

    def call_next(msg, _ctx):
        seen.append(msg)
        return msg

    with pytest.raises(KeyError, match="secaggplus_configs"):
        secaggplus_mod(plain, ctx, call_next)
    assert secagg_mod(plain, ctx, call_next) is plain and seen == [plain]
    setup = _train(RecordDict({RECORD_KEY_CONFIGS: ConfigRecord({
        "stage": "setup", "sample_num": 3, "share_num": 3, "threshold": 2, "clipping_range": 8.0,
        "target_range": 4194304, "mod_range": 4294967296, "max_weight": 1000.0})}))
    reply = secagg_mod(setup, ctx, call_next)
    assert seen == [plain]  # answered by the protocol: the client never ran
    keys = reply.content.config_records[RECORD_KEY_CONFIGS]
    assert isinstance(keys["pk1"], bytes) and isinstance(keys["pk2"], bytes)


def test_an_upload_secagg_would_clip_fails_the_client_instead_of_being_clipped(monkeypatch):
    """Flower clips n_k / max_weight · x_k to ±clip before quantising, silently: a value 9 of a client
    with weight 1 against clip 8 would reach the sum as 8. fedtext's mod refuses the reply, naming
    the key to raise; weight 0.5 (16 of 32 examples) keeps 9 · 0.5 = 4.5 within it."""
    from fedtext.client_app import within_clip_range
    from flwr.common import Code, FitRes, Status
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE

    for key in ("_task_id", "_run_id", "_node_id"):  # what a ClientApp process has set before a message
        monkeypatch.setattr(TaskIdentity, key, 1)

    def reply(n: int) -> Message:
        res = FitRes(Status(Code.OK, ""), comm.encode([np.array([0.5, -9.0], np.float32)]), n, {})
        return Message(compat.fitres_to_recorddict(res, True), reply_to=_train(RecordDict()))

    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    ctx.state.config_records[RECORD_KEY_STATE] = ConfigRecord({"clipping_range": 8.0, "max_weight": 32.0})
    with pytest.raises(ValueError, match=r"largest \|value\| 9 x weight 1 exceeds secagg-clip-range=8"):
        within_clip_range(reply(32), ctx)
    ok = reply(16)
    assert within_clip_range(ok, ctx) is ok
