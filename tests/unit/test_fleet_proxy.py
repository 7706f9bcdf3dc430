"""deploy/fleet_proxy.py: nginx's body cap and its configuration, without starting nginx
(tests/system/test_deploy.py and test_adversarial.py run it)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("fleet_proxy", REPO / "deploy" / "fleet_proxy.py")
fleet_proxy = importlib.util.module_from_spec(spec)
sys.modules["fleet_proxy"] = fleet_proxy  # its dataclass looks its module up there
spec.loader.exec_module(fleet_proxy)
CHUNK = 5 * 1024 * 1024  # Flower 1.42's FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE default


def test_flower_still_cuts_arrays_into_5_mib_chunks():
    """The cap's formula rests on it; a Flower that changes it must change the docs too."""
    from flwr.common.constant import FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE

    assert FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE == CHUNK


@pytest.mark.parametrize(("shape", "dtype", "expected"), [
    ((8, 384), "float32", 8 * 384 * 4),        # fedprompt's default prompt
    ((500,), "float32", 2_000),                # a BBT z of d=500
    ((50,), "uint16", 100),                    # FedDLS token ids
    ((30522, 384), "float32", CHUNK),          # word embeddings: one chunk is the most per object
    (None, "float32", CHUNK),                  # no fixed shape: could be anything up to a chunk
    ((10,), None, 80),                         # unknown dtype: 8 bytes per value
])
def test_spec_bytes_is_the_array_on_the_wire_at_most_one_chunk(shape, dtype, expected):
    from fedtext.common.comm import ArraySpec

    assert fleet_proxy.spec_bytes(ArraySpec("x", shape, dtype), CHUNK) == expected


def test_body_cap_is_the_largest_upload_array_plus_framing_over_the_served_methods():
    # fedprompt's 8 x 384 float32 prompt is larger than anything bbt-fed uploads (d=500 + fitness)
    cap = fleet_proxy.body_cap(["bbt-fed", "fedprompt"], {})
    assert (cap.bytes, cap.method, cap.array_bytes) == (8 * 384 * 4 + 65_536, "fedprompt", 12_288)
    alone = fleet_proxy.body_cap(["bbt-fed"], {})
    assert alone.method == "bbt-fed" and alone.bytes < cap.bytes
    # the run-config is the runs' own: a longer prompt raises the cap by exactly its bytes
    longer = fleet_proxy.body_cap(["fedprompt"], {"prompt-length": 20})
    assert longer.bytes == 20 * 384 * 4 + 65_536
    # a method uploading encoder weights: one whole chunk
    assert fleet_proxy.body_cap(["fedavg"], {}).bytes == CHUNK + 65_536


def test_a_reply_of_many_arrays_counts_them_together_as_packing_and_sealing_send_them():
    """fedlora uploads many small LoRA matrices: fedtext's ClientApp sends them as one object (packed, then
    sealed), so the cap is their sum, not the largest one's (which nginx would answer 413)."""
    from fedtext.common.comm import ArraySpec

    specs = [ArraySpec("a", (8, 384), "float32"), ArraySpec("b", (384, 8), "float32"), ArraySpec("c", (2,), "int64")]
    assert fleet_proxy.upload_bytes(specs, CHUNK) == ("its 3 upload arrays together", 2 * 12_288 + 16)
    assert fleet_proxy.upload_bytes(specs[:1], CHUNK) == ("a", 12_288)
    assert fleet_proxy.upload_bytes([ArraySpec("x", None, "float32"), *specs], CHUNK)[1] == CHUNK  # at most a chunk
    cap = fleet_proxy.body_cap(["fedlora"], {})
    import numpy as np
    from fedtext.backbone import backbone_for
    from fedtext.common.config import RunConfig
    from fedtext.common.registry import METHODS
    from fedtext.learning.data import labelled

    cfg = RunConfig.from_run_config({"method": "fedlora"}, METHODS)
    model = cfg.method_config.model_class()(cfg, backbone_for(cfg, labelled(cfg).task))
    arrays = list(model.upload_specs())
    total = sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in arrays)
    assert len(arrays) > 1 and cap.array_bytes == total and cap.bytes == total + 65_536


def test_with_secagg_the_cap_holds_the_masked_vector_flower_sends_as_one_config_record():
    """Under SecAgg+ a fit reply is Flower's masked vector: NPY blobs of int64 (8 bytes a value, twice
    fedlora's float32) in one ConfigRecord that Flower never chunks. Built here the way
    ``secaggplus_mod`` builds it (quantize, factor_combine, a mask, mod), then deflated as Flower
    pushes it and sealed as fedtext's ClientApp may: the cap must hold every form."""
    import numpy as np
    from flwr.app import ConfigRecord, RecordDict
    from flwr.common import ndarray_to_bytes
    from flwr.common.secure_aggregation.ndarrays_arithmetic import factor_combine, parameters_addition, parameters_mod
    from flwr.common.secure_aggregation.quantization import quantize
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen

    from fedtext.backbone import backbone_for
    from fedtext.common.config import RunConfig
    from fedtext.common.packing import seal
    from fedtext.common.registry import METHODS
    from fedtext.learning.data import labelled

    plain = fleet_proxy.body_cap(["fedlora"], {})
    cap = fleet_proxy.body_cap(["fedlora"], {"secagg": True})
    cfg = RunConfig.from_run_config({"method": "fedlora", "secagg": True}, METHODS)
    model = cfg.method_config.model_class()(cfg, backbone_for(cfg, labelled(cfg).task))
    upload = [np.full(s.shape, 0.01, dtype=s.dtype) for s in model.upload_specs()]
    quantized = factor_combine(7, quantize(upload, 8.0, 1 << 22))
    mask = pseudo_rand_gen(b"seed", 1 << 30, [a.shape for a in quantized])
    masked = parameters_mod(parameters_addition(quantized, mask), 1 << 30)
    blobs = [ndarray_to_bytes(a) for a in masked]
    record = ConfigRecord({Key.MASKED_PARAMETERS: blobs})
    assert all(a.dtype == np.int64 for a in masked)
    assert cap.array_bytes == sum(len(b) for b in blobs) == 599_448  # exact: a 4-byte value or a dropped header fails
    assert not cap.chunked and "masked vector" in cap.reason and "chunk" not in cap.reason
    assert cap.bytes == 599_448 + 65_536 > plain.bytes == 363_528  # the plain cap would answer 413
    sealed = seal(RecordDict({RECORD_KEY_CONFIGS: record}))  # 599 KB: under SEAL_BELOW, so one envelope
    assert len(sealed) == 1 and RECORD_KEY_CONFIGS not in sealed
    for wire in (record.deflate(), *(r.deflate() for r in sealed.values())):
        assert len(wire) <= cap.bytes
    # the largest over the served methods, and a method whose arrays outweigh nothing keeps its plain cap
    assert fleet_proxy.body_cap(["fedprompt", "fedlora"], {"secagg": True}) == cap
    assert fleet_proxy.body_cap(["fedlora"], {"secagg": False}) == plain


def test_a_masked_vector_is_never_cut_to_a_chunk():
    from fedtext.common.comm import ArraySpec

    # 10^6 values: 8,000,000 bytes + a 128-byte header, and the weight factor's blob (128 + 8), past a 5 MiB chunk
    assert fleet_proxy.masked_bytes([ArraySpec("w", (10**6,), "float32")])[1] == 8_000_128 + 136 > CHUNK


def test_with_secagg_the_cap_holds_every_stages_reply_as_flowers_own_code_builds_it():
    """SecAgg+'s setup, share-keys and unmask replies, built by Flower 1.42's own stage functions for a client
    with n neighbours, each fit ``secagg_stage_bytes(n)``; the share-keys reply grows ~625 bytes a neighbour, so
    with every client of a 200-client round as a neighbour it sets fedprompt's cap, and with every connected
    client (no bound) the proxy refuses in one line."""
    import importlib
    import random

    from flwr.app import ConfigRecord
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    from fedtext.common.errors import ConfigError

    mod = importlib.import_module("flwr.client.mod.secure_aggregation.secaggplus_mod")  # the package shadows it
    for n in (3, 40):
        rng = random.Random(n)
        ids = [rng.getrandbits(63) | 1 << 62 for _ in range(n)]  # 64-bit node ids, as Flower draws them
        settings = ConfigRecord({Key.SAMPLE_NUMBER: n, Key.SHARE_NUMBER: n, Key.THRESHOLD: n // 2 + 1,
                                 Key.CLIPPING_RANGE: 8.0, Key.TARGET_RANGE: 1 << 22, Key.MOD_RANGE: 1 << 30,
                                 Key.MAX_WEIGHT: 100.0})
        states = {nid: mod.SecAggPlusState(nid=nid) for nid in ids}
        setup = [ConfigRecord(mod._setup(state, settings)) for state in states.values()][0]
        keys = ConfigRecord({str(nid): [st.pk1, st.pk2] for nid, st in states.items()})
        first = states[ids[0]]
        share = ConfigRecord(mod._share_keys(first, keys))
        for nid in ids[1:]:  # the shares it would hold of every other client: the unmask reply at its largest
            first.rd_seed_share_dict[nid], first.sk1_share_dict[nid] = first.rd_seed_share_dict[ids[0]], \
                first.sk1_share_dict[ids[0]]
        alive = n // 2 + 1
        unmask = ConfigRecord(mod._unmask(first, ConfigRecord({Key.ACTIVE_NODE_ID_LIST: ids[:alive],
                                                               Key.DEAD_NODE_ID_LIST: ids[alive:]})))
        sizes = [len(r.deflate()) for r in (setup, share, unmask)]
        assert max(sizes) == sizes[1] <= fleet_proxy.secagg_stage_bytes(n) < sizes[1] + 2_048 + 15 * (n - 1)
    cap = fleet_proxy.body_cap(["fedprompt"], {"secagg": True, "secagg-shares": 1, "clients-per-round": 200})
    assert cap.array_bytes == fleet_proxy.secagg_stage_bytes(200) == 640 * 199 + 2_048 and not cap.chunked
    assert "share-keys reply (200 neighbours)" in cap.reason
    with pytest.raises(ConfigError, match="secagg-shares=1 with clients-per-round=0"):
        fleet_proxy.body_cap(["fedprompt"], {"secagg": True, "secagg-shares": 1})


def test_the_configuration_fills_every_placeholder_and_refuses_a_missing_one(tmp_path):
    template = fleet_proxy.TEMPLATE.read_text()
    names = set(re.findall(r"@([a-z_]+)@", template))
    values = {name: f"<{name}>" for name in names}
    text = fleet_proxy.render(values)
    assert "@" not in text.replace("$", "")
    for name in names:
        assert f"<{name}>" in text
    # nginx's own variables are left alone
    assert "$request_uri" in text and "$binary_remote_addr" in text
    with pytest.raises(KeyError):
        fleet_proxy.render({k: v for k, v in values.items() if k != "body_cap"})
    with pytest.raises(KeyError):
        fleet_proxy.render({**values, "unused": 1})


def test_only_the_twelve_fleet_routes_pass_the_route_map():
    """The regular expression nginx matches ``$request_uri`` against, tried as PCRE would,
    against the routes Flower's SuperNode calls."""
    template = fleet_proxy.TEMPLATE.read_text()
    (pattern,) = re.findall(r"^\s*~(\^/v1/fleet/\S+\$) 1;$", template, re.M)
    route = re.compile(pattern)
    # Flower's own client: every path flower-supernode POSTs to (so an added route is caught)
    import flwr.supernode.fleet_http_client as client

    fleet = re.findall(r'path="/v1/fleet/([a-z-]+)"', Path(client.__file__).read_text())
    assert len(fleet) == 12, fleet
    assert all(route.match(f"/v1/fleet/{name}") for name in fleet)
    for target in ["/v1/control/list-runs", "/v1/fleet/get-run?x=1", "/v1/fleet//get-run", "/V1/FLEET/get-run",
                   "/v1/fleet/../control/list-runs", "/v1/fleet/get-run/", "/v1/fleet/get-runs", "/docs",
                   "/v1/runtime/create-task", "x/v1/fleet/get-run"]:
        assert not route.match(target), target
