"""Issue 70, clause 2: the one release step (:mod:`fedtext.server.release`), its one norm and clip
(:mod:`fedtext.trust.clipping`) and its one table of refusals (:data:`fedtext.common.config.COMPOSITION`).

Each mechanism's own math is tested where it lives (central DP: test_privacy.py and
test_poisson_sampling.py; FLAME and the aggregators: test_robust.py; SecAgg+: test_secagg.py and
the Flower engine's test); here: which mechanisms a config turns on, the order they run in, what
each hands the next and reports, the method that opts a round out, and the refusals.
"""

from __future__ import annotations

import inspect
from itertools import combinations
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status

from fedtext.common import comm
from fedtext.common.config import COMPOSITION, ConfigError
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS
from fedtext.server import release
from fedtext.server.release import CentralPrivacy, ReleaseStep, RoundView, SecAggSum, UpdateClip
from fedtext.server.validation import Upload
from fedtext.trust import clipping, privacy, robust
from strategies.feddpg import FedDPG

from .test_privacy import _strategy  # fedprompt's server at round 1, m = 3 sampled

# a config fragment that turns each setting of COMPOSITION's rows on, alone valid
TURN_ON = {
    "dp=central": dict(dp="central"),
    "secagg=true": dict(secagg=True, clients_per_round=6),
    "aggregator": dict(aggregator="median"),
    "aggregator=krum": dict(aggregator="krum", krum_malicious=1, clients_per_round=6),
    "update-clip": dict(update_clip=1.0),
    "client-sampling=poisson": dict(client_sampling="poisson", clients_per_round=6),
}


def _along_e0(shape, norms, dtype=np.float32) -> list[np.ndarray]:
    out = []
    for n in norms:
        a = np.zeros(shape, dtype)
        a.flat[0] = n
        out.append(a)
    return out


# ---------------------------------------------------------------- the refusals: one table
@pytest.mark.parametrize("row", COMPOSITION, ids=lambda r: f"{r[0]} x {r[1]}")
def test_every_row_of_the_table_refuses_its_pair_and_neither_setting_alone(row) -> None:
    a, b, _ = row
    for alone in (a, b):
        make_config("fedprompt", **TURN_ON[alone])  # each setting alone is a valid run
    both = {**TURN_ON[a], **TURN_ON[b]}
    with pytest.raises(ConfigError) as refused:
        make_config("fedprompt", **both)
    spelled = {"aggregator": "aggregator=median", "update-clip": "update-clip=1.0"}.get(b, b)
    assert str(refused.value) == row[2].format(b=spelled, krum_need=5)


@pytest.mark.parametrize(("keys", "line"), [
    # the lines as users read them, written out (a row with the wrong words or pair fails here)
    (dict(dp="central", aggregator="trimmed-mean"),
     "dp=central bounds each client's say by dp-clip under the mean; aggregator=trimmed-mean combines updates "
     "another way (its sensitivity is not C/m): drop one"),
    (dict(dp="central", update_clip=2.0),
     "dp=central bounds each client's say by dp-clip under the mean; update-clip=2.0 combines updates another "
     "way (its sensitivity is not C/m): drop one"),
    (dict(secagg=True, clients_per_round=3, update_clip=1.0),
     "secagg=true shows the server only the sum of the uploads; update-clip=1.0 needs each upload on its own"),
    (dict(secagg=True, clients_per_round=3, dp="central"),
     "secagg=true shows the server only the sum of the uploads; dp=central needs each upload on its own (use "
     "dp=local with secagg: each client clips and noises its own update)"),
    (dict(client_sampling="poisson", clients_per_round=9, aggregator="krum", krum_malicious=2),
     "aggregator=krum needs at least 7 clients every round (n >= 2f + 3) and client-sampling=poisson may draw "
     "fewer: use client-sampling=fixed"),
])
def test_the_refusals_read_as_before(keys, line) -> None:
    with pytest.raises(ConfigError) as refused:
        make_config("fedprompt", **keys)
    assert str(refused.value) == line


@pytest.mark.parametrize(("first", "second"), list(combinations(release.MECHANISMS, 2)),
                         ids=lambda k: k.__name__)
def test_no_two_release_mechanisms_ever_meet(first, second) -> None:
    """The release docstring says at most one apply-stage mechanism runs a round: every pair of
    :data:`MECHANISMS` is a row of the table (either order) and is refused."""
    a, b = first.setting, second.setting  # each mechanism names its setting as the table does
    assert any({r[0], r[1]} == {a, b} for r in COMPOSITION)
    with pytest.raises(ConfigError):
        make_config("fedprompt", **{**TURN_ON[a], **TURN_ON[b]})


def test_the_config_refuses_composition_only_through_the_table() -> None:
    """No second copy of a composition refusal: the table's lines appear nowhere else in config.py."""
    from fedtext.common import config

    source = inspect.getsource(config.RunConfig)
    for phrase in ("bounds each client's say", "shows the server only the sum", "may draw fewer: use",
                   "draws a cohort of any size"):
        assert phrase not in source, phrase


# ---------------------------------------------------------------- which mechanisms, in which order
@pytest.mark.parametrize(("keys", "kinds"), [
    ({}, []),
    (TURN_ON["secagg=true"], [SecAggSum]),
    (TURN_ON["dp=central"], [CentralPrivacy]),
    (dict(dp="local"), []),  # local DP is the clients' own: the server only accounts
    (TURN_ON["update-clip"], [UpdateClip]),
    (TURN_ON["aggregator"], []),  # a robust rule is combine's, inside the method's step
])
def test_the_config_turns_on_its_mechanisms(backbone, keys, kinds) -> None:
    step = _strategy(backbone, **keys).release_step
    assert [type(m) for m in step.mechanisms] == kinds
    assert (step.central_dp is not None) == (CentralPrivacy in kinds)


def test_every_round_releases_only_central_dp_on_poisson_cohorts(backbone) -> None:
    assert _strategy(backbone, dp="central", client_sampling="poisson", clients_per_round=3).poisson_release()
    assert not _strategy(backbone, dp="central", clients_per_round=3).poisson_release()
    assert not _strategy(backbone, client_sampling="poisson", clients_per_round=3).poisson_release()
    assert not _strategy(backbone, dp="local", client_sampling="poisson", clients_per_round=3).poisson_release()


def test_each_mechanism_gets_what_the_one_before_left_in_the_tables_order(backbone, monkeypatch) -> None:
    """Two stand-in mechanisms, one doubling every upload, one adding 1: in order, (x·2)+1; each
    reports into the same ``Released``."""

    class Double(release.Mechanism):
        wanted = staticmethod(lambda cfg: True)

        def apply(self, rnd, uploads, out):
            out.metrics["double"] = len(uploads)
            return [Upload(u.proxy, u.partition_id, u.num_examples, {k: v * 2 for k, v in u.arrays.items()}, {})
                    for u in uploads]

    class AddOne(release.Mechanism):
        wanted = staticmethod(lambda cfg: True)

        def apply(self, rnd, uploads, out):
            out.metrics["add"] = rnd.number
            return [Upload(u.proxy, u.partition_id, u.num_examples, {k: v + 1 for k, v in u.arrays.items()}, {})
                    for u in uploads]

    monkeypatch.setattr(release, "MECHANISMS", (Double, AddOne))
    cfg = make_config("fedprompt", prompt_length=2, max_length=32)
    step = ReleaseStep(cfg, None)
    out = step.apply(RoundView(4, [], 1), [Upload(None, "0", 1, {"prompt": np.array([3.0])}, {})])
    assert out.uploads[0].arrays["prompt"][0] == 7.0 and out.metrics == {"double": 1, "add": 4}
    assert out.privacy is None


# ---------------------------------------------------------------- what each mechanism hands the method
def test_update_clip_runs_in_the_release_step_and_reports_there(backbone) -> None:
    """Updates of norm 1, 2 and 3 from x_t = 0, update-clip 0.5: the bound is 0.5 x the median 2 = 1,
    the last two are scaled to norm 1 (2 clipped), the first kept as it came; each upload keeps its
    client and its examples. Through aggregate_fit the mean is then 1 along e0, and the record
    says what was clipped."""
    strat = _strategy(backbone, update_clip=0.5)
    shape = strat.global_arrays[0].shape
    ups = [Upload(None, str(k), 4 + k, {"prompt": a}, {}) for k, a in enumerate(_along_e0(shape, [1.0, 2.0, 3.0]))]
    out = strat.release(1, ups)
    assert out.metrics == {"clipped": 2, "clip_bound": 1.0} and out.privacy is None
    assert [u.array_list()[0].flat[0] for u in out.uploads] == [1.0, 1.0, 1.0]
    assert [(u.partition_id, u.num_examples) for u in out.uploads] == [("0", 4), ("1", 5), ("2", 6)]
    assert out.uploads[0].arrays["prompt"] is ups[0].arrays["prompt"]
    assert ups[2].arrays["prompt"].flat[0] == 3.0  # the valid upload itself is not changed in place

    replies = [(SimpleNamespace(cid=str(k)), FitRes(Status(Code.OK, ""), comm.encode([a]), 1,
                                                    {"partition_id": k, "train_loss": 0.5}))
               for k, a in enumerate(_along_e0(shape, [1.0, 2.0, 3.0]))]
    params, metrics = strat.aggregate_fit(1, replies, [])
    assert comm.decode(params)[0].flat[0] == pytest.approx(1.0)
    assert metrics["clipped"] == 2 and strat.record.method_metrics == {"clipped": 2, "clip_bound": 1.0}


def test_without_arrays_sent_update_clip_has_nothing_to_measure_against(backbone) -> None:
    strat = _strategy(backbone, update_clip=0.5)
    strat.global_arrays = []
    ups = [Upload(None, "0", 1, {"prompt": np.ones(2, np.float32)}, {})]
    out = strat.release(1, ups)
    assert out.uploads == ups and out.metrics == {}


def test_secagg_hands_the_method_one_upload_of_all_the_examples(backbone) -> None:
    strat = _strategy(backbone, secagg=True, clients_per_round=3)
    mean = {"prompt": np.full((2, 2), 0.5, np.float32)}
    ups = [Upload(None, str(k), n, mean, {}) for k, n in enumerate((3, 5, 8))]
    (merged,) = strat.release(1, ups).uploads
    assert merged.num_examples == 16 and merged.partition_id == "secagg-mean" and merged.arrays is mean
    assert merged.proxy is None and merged.metrics == {}  # it stands for no one client
    assert strat.dp_releases == 0
    (alone,) = strat.release(1, ups[2:]).uploads  # the others dropped: one valid result is still the round's mean
    assert alone.num_examples == 8 and alone.arrays is mean


def test_secaggs_screen_casts_the_float64_mean_to_the_upload_specs(backbone) -> None:
    strat = _strategy(backbone, secagg=True, clients_per_round=3)
    shape = strat.global_arrays[0].shape
    res = FitRes(Status(Code.OK, ""), comm.encode([np.full(shape, 0.25, np.float64)]), 3, {})
    (_, screened), = strat.release_step.screen([(SimpleNamespace(cid="0"), res)])
    (got,) = comm.decode(screened.parameters)
    assert got.dtype == np.float32 and got.flat[0] == 0.25


def test_central_dp_counts_one_release_per_round_and_reports_its_figures(backbone) -> None:
    strat = _strategy(backbone, dp="central", dp_clip=1.0, dp_noise=0.0)
    shape = strat.global_arrays[0].shape
    out = strat.release(1, [Upload(None, "0", 4, {"prompt": a}, {}) for a in _along_e0(shape, [3.0])])
    assert strat.dp_releases == 1 and out.privacy is not None and out.privacy.clipped == 1
    (merged,) = out.uploads
    assert merged.num_examples == 1 and merged.partition_id == "dp-mean"
    assert merged.array_list()[0].flat[0] == pytest.approx(1 / 3)  # clip to 1, over m = 3 sampled


def test_feddpg_unlearning_round_meets_no_mechanism(backbone) -> None:
    """FedDPGu's G <- G_c^u is the unlearned G itself: update-clip 0.5 would halve its update in an
    ordinary round, and leaves it whole in the unlearning round."""
    cfg = make_config("feddpg", max_length=64, shots_per_class=8, client_test_size=8, eval_size=20, update_clip=0.5,
                      prompts=1, hidden=2, unlearn_round=3, unlearn_client=1)
    strat = FedDPG(cfg, TASKS["demo"])
    strat.global_arrays = [np.zeros(s.shape, np.float32) for s in strat.model.global_specs()]
    names = [s.name for s in strat.model.upload_specs()]
    g_u = Upload(None, "1", 6, {n: np.full(a.shape, 2.0, np.float32) for n, a in zip(names, strat.global_arrays)}, {})
    out = strat.release(3, [g_u])
    assert out.uploads == [g_u] and out.metrics == {}
    (halved,) = strat.release(2, [g_u]).uploads
    assert all(np.allclose(a, 1.0) for a in halved.array_list())


# ---------------------------------------------------------------- one norm and clip
def test_privacy_and_robust_aggregation_share_one_norm_and_clip() -> None:
    assert privacy.clip is clipping.clip
    assert robust.update_norms is clipping.update_norms and robust.along is clipping.along


def test_the_norm_is_flowers_on_float64_values() -> None:
    """3-4-12 across two arrays: 13 whatever the split; a float32 value of 1e20 measures 1e20, not inf
    (its square overflows float32)."""
    assert clipping.norm([np.array([3.0, 4.0], np.float32), np.array([[12.0]], np.float32)]) == 13.0
    assert clipping.norm([np.array([1e20, 0.0], np.float32)]) == pytest.approx(1e20, rel=1e-7)
    (norm,) = clipping.update_norms([[np.array([4.0, 5.0], np.float32)]], [np.array([1.0, 1.0], np.float32)])
    assert norm == 5.0
    out, unclipped = clipping.clip([np.array([6.0, 8.0], np.float32)], 5.0)
    assert not unclipped and out[0].dtype == np.float64 and list(out[0]) == [3.0, 4.0]
    assert clipping.clip([np.array([3.0, 4.0])], 5.0)[1]  # at the bound: not clipped (b_k = 1)
