"""Server side on mock client results: FedAvg math, validation, bytes, records."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.records import ROUND_FIELDS, RoundRecord, RunRecorder
from fedtext.common.registry import make_config
from fedtext.trust.robust import weighted_mean
from fedtext.common.tasks import TASKS
from strategies.bbt_fed import BBTFed
from strategies.fedprompt import FedPrompt

D = 6  # intrinsic dim of the mock runs


def fit_res(arrays, n, pid, **metrics):
    return (
        SimpleNamespace(cid=str(pid)),
        FitRes(Status(Code.OK, ""), comm.encode(arrays), n, {"partition_id": pid, "train_loss": 0.5, **metrics}),
    )


@pytest.fixture()
def bbt(backbone, tmp_path):
    cfg = make_config("bbt-fed", intrinsic_dim=D, prompt_length=2, max_length=64, output_dir=str(tmp_path))
    recorder = RunRecorder(tmp_path, cfg.to_run_config())
    strat = BBTFed(cfg, TASKS["demo"], evaluator=None, recorder=recorder)
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    return strat


def test_fedavg_of_z_is_example_weighted(bbt):
    z1, z2 = np.arange(D, dtype=np.float32), np.ones(D, np.float32) * 4
    params, _ = bbt.aggregate_fit(1, [fit_res([z1], 1, 0), fit_res([z2], 3, 1)], [])
    expected = (1 * z1 + 3 * z2) / 4  # hand-computed weighted mean
    np.testing.assert_allclose(comm.decode(params)[0], expected, rtol=1e-6)
    np.testing.assert_allclose(bbt.global_arrays[0], expected, rtol=1e-6)


def test_bad_uploads_are_dropped_and_the_round_goes_on(bbt, caplog):
    good = np.full(D, 2.0, np.float32)
    nan = good.copy()
    nan[0] = np.nan
    results = [
        fit_res([good], 2, 0),
        fit_res([nan], 2, 1),
        fit_res([np.zeros(D + 1, np.float32)], 2, 2),
        fit_res([good.astype(np.float64)], 2, 3),
        fit_res([good], 0, 4),
    ]
    with caplog.at_level("WARNING", logger="fedtext"):
        params, _ = bbt.aggregate_fit(1, results, [RuntimeError("client crashed")])
    np.testing.assert_allclose(comm.decode(params)[0], good)
    reasons = {d["client"]: d["reason"] for d in bbt.record.dropped}
    assert "non-finite" in reasons["1"] and "shape (7,)" in reasons["2"]
    assert "dtype float64" in reasons["3"] and "num_examples=0" in reasons["4"]
    assert "client crashed" in reasons["?"]
    assert bbt.record.num_clients == 1
    assert "dropped client 1" in caplog.text


def test_all_bad_keeps_the_global_model(bbt):
    params, _ = bbt.aggregate_fit(1, [fit_res([np.full(D, np.nan, np.float32)], 2, 0)], [])
    assert params is None
    np.testing.assert_array_equal(bbt.global_arrays[0], np.zeros(D, np.float32))


def test_bounded_z_out_of_range_is_dropped(backbone, tmp_path):
    cfg = make_config("bbt-fed", intrinsic_dim=D, prompt_length=2, max_length=64, bound=1.0)
    strat = BBTFed(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    params, _ = strat.aggregate_fit(1, [fit_res([np.full(D, 3.0, np.float32)], 2, 0)], [])
    assert params is None and "z: value 3.0 above 1.0" in strat.record.dropped[0]["reason"]


def test_bytes_are_recorded_per_round_and_written(bbt, tmp_path):
    z = np.zeros(D, np.float32)
    bbt.aggregate_fit(1, [fit_res([z], 1, 0), fit_res([z], 1, 1)], [])
    bbt.rounds.write()
    record = json.loads((bbt.recorder.dir / "rounds.jsonl").read_text().splitlines()[-1])
    assert record["bytes_up"] == 2 * (D * 4 + comm.NPY_HEADER_BYTES)
    assert record["bytes_up_per_client"] == D * 4 + 128
    assert record["num_clients"] == 2 and record["round"] == 1


def test_fedprompt_averages_prompts(backbone):
    cfg = make_config("fedprompt", prompt_length=2, max_length=64)
    strat = FedPrompt(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    assert strat.global_arrays[0].shape == (2, backbone.dim)
    strat.rounds.begin(1)
    a, b = np.zeros((2, backbone.dim), np.float32), np.ones((2, backbone.dim), np.float32)
    params, _ = strat.aggregate_fit(1, [fit_res([a], 1, 0), fit_res([b], 1, 1)], [])
    np.testing.assert_allclose(comm.decode(params)[0], 0.5)
    np.testing.assert_array_equal(strat.model.prompt([b]), b)


class _Proxy(SimpleNamespace):
    """A connected client that reports its partition id and domain."""

    def get_properties(self, ins, timeout, group_id):
        return SimpleNamespace(properties={"partition_id": self.pid, "domain": self.domain})


def _manager(n, domains=None):
    from flwr.server import SimpleClientManager

    manager = SimpleClientManager()
    for pid in range(n):  # node ids in an order unrelated to partition ids
        manager.register(_Proxy(cid=f"node{(7 * pid) % n}-{pid}", pid=pid, domain=(domains or {}).get(pid, "")))
    return manager


def test_clients_per_round_sampling_is_seeded_and_skips_holdouts(backbone):
    cfg = make_config("fedprompt", clients_per_round=3, max_length=64)
    picks = [[p.pid for p in FedPrompt(cfg, TASKS["demo"]).sample_clients(r, _manager(10))] for r in (1, 2)]
    again = [[p.pid for p in FedPrompt(cfg, TASKS["demo"]).sample_clients(r, _manager(10))] for r in (1, 2)]
    assert picks == again and picks[0] != picks[1] and all(len(p) == 3 == len(set(p)) for p in picks)
    # 0 = every participant; holdout by partition id or by domain name
    held = FedPrompt(make_config("fedprompt", max_length=64, holdout="1,dvd"), TASKS["demo"])
    manager = _manager(4, {0: "books", 1: "kitchen", 2: "dvd", 3: "electronics"})
    assert [p.pid for p in held.sample_clients(1, manager)] == [0, 3]
    assert [p.pid for p in held.sampler.clients(manager, participants_only=False)] == [0, 1, 2, 3]


def test_holding_out_every_client_is_a_config_error(backbone):
    from fedtext.common.config import ConfigError

    strat = FedPrompt(make_config("fedprompt", max_length=64, holdout="0,1"), TASKS["demo"])
    with pytest.raises(ConfigError, match="leaves no participant"):
        strat.sample_clients(1, _manager(2))
    strat = FedPrompt(make_config("fedprompt", max_length=64, clients_per_round=2, holdout="0"), TASKS["demo"])
    with pytest.raises(ConfigError, match="clients-per-round=2 exceeds the 1 participant clients"):
        strat.sample_clients(1, _manager(2))


def test_too_few_connected_clients_is_a_config_error(backbone, monkeypatch):
    from flwr.server import SimpleClientManager

    import fedtext.server.sampling
    from fedtext.common.config import ConfigError

    monkeypatch.setattr(fedtext.server.sampling, "CONNECT_TIMEOUT_S", 0.1)  # the waits read it there
    manager = SimpleClientManager()
    for cid in ("a", "b"):
        manager.register(SimpleNamespace(cid=cid))
    strat = FedPrompt(make_config("fedprompt", clients_per_round=3, max_length=64), TASKS["demo"])
    with pytest.raises(ConfigError, match="clients-per-round=3 exceeds the 2 connected clients"):
        strat.initialize_parameters(manager)
    ok = FedPrompt(make_config("fedprompt", clients_per_round=2, max_length=64), TASKS["demo"])
    assert ok.initialize_parameters(manager) is not None
    # issue 58: clients-per-eval=5 of 2 connected was cut to 2 without a word; now refused alike
    strat = FedPrompt(make_config("fedprompt", clients_per_eval=5, max_length=64), TASKS["demo"])
    with pytest.raises(ConfigError, match="^clients-per-eval=5 exceeds the 2 connected clients"):
        strat.initialize_parameters(manager)


def test_clients_without_local_test_data_do_not_count_as_zero_accuracy(bbt):
    from flwr.common import EvaluateRes

    def eval_res(pid, n, acc):
        return (SimpleNamespace(cid=str(pid)),
                EvaluateRes(Status(Code.OK, ""), 0.5, n, {"partition_id": pid, "accuracy": acc}))

    bbt.rounds.begin(1)
    bbt.aggregate_evaluate(1, [eval_res(0, 8, 0.75), eval_res(1, 0, 0.0), eval_res(2, 8, 0.25)], [])
    record = json.loads((bbt.recorder.dir / "rounds.jsonl").read_text().splitlines()[-1])
    assert record["client_accuracy"] == {"0": 0.75, "2": 0.25} and record["client_accuracy_mean"] == 0.5
    bbt.rounds.begin(2)
    assert bbt.aggregate_evaluate(2, [eval_res(1, 0, 0.0)], []) == (None, {})  # no division by zero


def test_weighted_mean_hand_computed_and_bit_identical_to_flower():
    """(1 * [0, 1] + 3 * [4, 4]) / 4 = [3, 3.25]; and the same bits as Flower's aggregate_inplace."""
    from flwr.server.strategy.aggregate import aggregate_inplace

    a = [np.array([0.0, 1.0], np.float32), np.array([[2.0]], np.float32)]
    b = [np.array([4.0, 4.0], np.float32), np.array([[6.0]], np.float32)]
    out = weighted_mean([a, b], [1, 3])
    np.testing.assert_array_equal(out[0], np.array([3.0, 3.25], np.float32))
    np.testing.assert_array_equal(out[1], np.array([[5.0]], np.float32))
    assert out[0].dtype == np.float32 and a[0][1] == 1.0  # inputs untouched
    rng = np.random.default_rng(0)
    clients = [[rng.standard_normal((5, 3)).astype(np.float32)] for _ in range(3)]
    flower = aggregate_inplace([fit_res(c, n, i) for i, (c, n) in enumerate(zip(clients, [3, 5, 7]))])
    np.testing.assert_array_equal(weighted_mean(clients, [3, 5, 7])[0], flower[0])


def test_weighted_mean_of_integer_arrays_casts_the_scale_like_flower() -> None:
    """Guards FedAvg's integer-dtype branch: like Flower's ``aggregate_inplace``, a scale
    ``n_k / n`` that cannot cast to the array's dtype is first cast to it (truncated),
    then multiplied in place, so every result stays an array of the input's dtype.

    One client: scale 4 / 4 = 1.0 -> 1, the arrays come back unchanged (0-d included).
    Two clients of 2 examples: scale 0.5 -> 0 each, so 0 * x + 0 * y = 0.
    """
    from flwr.server.strategy.aggregate import aggregate_inplace

    a = [np.array([3, 7], np.uint16), np.array(5, np.int64)]
    b = [np.array([1, 9], np.uint16), np.array(2, np.int64)]
    for out, want in ((weighted_mean([a], [4]), [[3, 7], 5]), (weighted_mean([a, b], [2, 2]), [[0, 0], 0])):
        assert [type(x) for x in out] == [np.ndarray, np.ndarray]
        assert [x.dtype for x in out] == [np.dtype(np.uint16), np.dtype(np.int64)]
        for got, expected in zip(out, want, strict=True):
            np.testing.assert_array_equal(got, expected)
    assert a[0].tolist() == [3, 7] and int(a[1]) == 5  # inputs untouched
    flower = aggregate_inplace([fit_res(a, 2, 0), fit_res(b, 2, 1)])
    for got, expected in zip(weighted_mean([a, b], [2, 2]), flower, strict=True):
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == expected.dtype


@pytest.mark.parametrize("short_first", [True, False])
def test_weighted_mean_rejects_clients_with_different_array_counts(short_first: bool) -> None:
    """Guards FedAvg's one-to-one pairing of arrays across clients: a client with one
    array fewer (or more) than the first is an error, as in Flower's ``aggregate_inplace``,
    not a mean silently truncated to (or padded with) the first client's arrays.

    Parameters
    ----------
    short_first
        Whether the first client or the second one uploads fewer arrays.
    """
    full = [np.ones(2, np.float32), np.ones(3, np.float32)]
    short = [np.ones(2, np.float32)]
    clients = [short, full] if short_first else [full, short]
    with pytest.raises(ValueError, match="longer" if short_first else "shorter"):
        weighted_mean(clients, [1, 1])


def test_simulated_seconds_is_compute_plus_bytes_over_the_link(backbone) -> None:
    """Guards FeS §4.1's device-time emulation: ``fit_time_s`` (0 when a client reports
    none) plus ``nbytes / (bandwidth-mbps * 10**6)`` seconds.

    At 2 MB/s: 1.5 s of compute + 3,000,000 B / 2,000,000 B/s = 1.5 + 1.5 = 3.0 s;
    no ``fit_time_s`` and 1,000,000 B: 0 + 0.5 = 0.5 s. All exact in binary floats.
    """
    strat = FedPrompt(make_config("fedprompt", max_length=64, bandwidth_mbps=2.0), TASKS["demo"])
    assert strat.simulated_seconds({"fit_time_s": 1.5}, 3_000_000) == 3.0
    assert strat.simulated_seconds({"train_loss": 0.5}, 1_000_000) == 0.5
    assert strat.simulated_seconds({"fit_time_s": 0.25}, 0) == 0.25


def test_uploads_are_decoded_once_into_named_arrays(bbt):
    z1, z2 = np.arange(D, dtype=np.float32), np.ones(D, np.float32)
    # validate() takes the replies aggregate_fit screened (which binds each node to its partition)
    uploads = bbt.validate(bbt.validator.replies(bbt.record, [fit_res([z1], 1, 0), fit_res([z2], 3, 1)], "fit"), [])
    assert [u.partition_id for u in uploads] == ["0", "1"] and [u.num_examples for u in uploads] == [1, 3]
    assert list(uploads[0].arrays) == ["z"]
    np.testing.assert_array_equal(uploads[0].arrays["z"], z1)


def test_round_record_writes_exactly_the_round_fields():
    record = RoundRecord(round=3)
    record.drop(7, "why")
    record.fit_queries, record.eval_queries, record.client_rss_mb = 10, 5, [100.0, 250.0]
    out = record.to_json(run_start=0.0)
    assert tuple(out) == ROUND_FIELDS
    assert out["model_queries"] == 15 and out["client_peak_rss_mb"] == 250.0
    assert out["dropped"] == [{"client": "7", "reason": "why"}]


def test_clients_sent_the_same_arrays_share_one_payload_and_each_counts_its_bytes(backbone, tmp_path):
    """The global model is encoded once a round (strategy.Encoded), not once per client: the server
    held a copy per sampled client until the round was aggregated (whole-model uploads at base scale).
    The bytes each client is sent, on the wire and in the record, stay the whole payload. A
    download that builds a list per client still gets its own payload (no id reuse of a list
    already freed)."""
    cfg = make_config("fedprompt", clients_per_round=3, max_length=64, output_dir=str(tmp_path))
    strat = FedPrompt(cfg, TASKS["demo"], recorder=RunRecorder(tmp_path, cfg.to_run_config()))
    strat.global_arrays = strat.initial_arrays()
    ins = strat.configure_fit(1, None, _manager(4))
    assert len(ins) == 3 and len({id(i.parameters) for _, i in ins}) == 1
    one = comm.payload_bytes(ins[0][1].parameters)
    assert one == comm.expected_bytes(strat.global_arrays) and strat.rounds.down_bytes
    assert sorted(strat.rounds.down_bytes.values()) == [one] * 3
    evaluate = strat.configure_evaluate(cfg.eval_every, None, _manager(4))  # an eval round: the same sharing
    assert evaluate and len({id(i.parameters) for _, i in evaluate}) == 1

    class PerClient(FedPrompt):
        def download(self, server_round, proxy, purpose):
            return [a + float(proxy.pid) for a in self.global_arrays], {}  # a fresh list each call, freed after

    strat = PerClient(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    ins = strat.configure_fit(1, None, _manager(4))
    assert len({id(i.parameters) for _, i in ins}) == 3
    for proxy, i in ins:
        np.testing.assert_array_equal(comm.decode(i.parameters)[0], strat.global_arrays[0] + float(proxy.inner.pid))


def test_uploads_are_read_in_place_not_copied(bbt, monkeypatch):
    """Validation views each upload over its reply's bytes (comm.view): a decoded copy per client
    doubled what the server held until aggregation. The aggregate is new arrays, writable."""
    seen = []
    inner = bbt.aggregate
    monkeypatch.setattr(bbt, "aggregate", lambda rnd, uploads: seen.extend(uploads) or inner(rnd, uploads))
    results = [fit_res([np.full(D, 1.0 + k, np.float32)], 2, k) for k in range(2)]
    bbt.aggregate_fit(1, results, [])
    for upload, (_, res) in zip(seen, results, strict=True):
        (z,) = upload.array_list()
        start = np.frombuffer(res.parameters.tensors[0], np.uint8).__array_interface__["data"][0]
        assert not z.flags.writeable and start <= z.__array_interface__["data"][0] < start + len(res.parameters.tensors[0])
    np.testing.assert_allclose(bbt.global_arrays[0], 1.5)
