"""Server optimizers (``server-optimizer``, :mod:`fedtext.server.server_opt`): two rounds of each on
mock uploads against hand-computed numbers (so a dropped moment update fails), bit-equality
with Flower 1.42's own strategies on the same inputs, ``fedavg`` at η = 1 as the plain mean,
the one-line refusals, and the optimizer's state surviving a checkpoint and ``resume=``."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server.strategy import FedAdagrad, FedAdam, FedAvgM, FedYogi

from fedtext.server import checkpoint
from fedtext.common.config import MEAN, ConfigError
from fedtext.common.registry import METHODS, make_config
from fedtext.server.server_opt import ServerOptimizer
from fedtext.trust.robust import weighted_mean
from fedtext.server.validation import Upload

X0 = [np.zeros(2)]
# round 1: uploads [5, -1] (1 example) and [1, -1] (3 examples): mean [2, -1], so Δ1 = [2, -1]
ROUND1 = ([[np.array([5.0, -1.0])], [np.array([1.0, -1.0])]], [1, 3])
DELTA2 = np.array([1.0, 0.0])  # round 2: both clients upload x1 + [1, 0]


def two_rounds(opt: ServerOptimizer) -> tuple[np.ndarray, np.ndarray]:
    """x1 and x2 of ``opt`` on the mock rounds above."""
    x1 = opt.step(1, X0, weighted_mean(*ROUND1))
    x2 = opt.step(2, x1, weighted_mean([[x1[0] + DELTA2]] * 2, [2, 2]))
    return x1[0], x2[0]


def test_fedavgm_two_rounds_by_hand() -> None:
    # Flower's convention: g = x - mean = -Δ; v1 = g1 = [-2, 1]; x1 = 0 - 1 * v1 = [2, -1]
    # g2 = [-1, 0]; v2 = 0.5 v1 + g2 = [-2, 0.5]; x2 = x1 - v2 = [4, -1.5] (no momentum: [3, -1])
    x1, x2 = two_rounds(ServerOptimizer("fedavgm", lr=1.0, momentum=0.5))
    np.testing.assert_array_equal(x1, [2.0, -1.0])
    np.testing.assert_array_equal(x2, [4.0, -1.5])
    # eta = 0.5: x1 = 0 - 0.5 [-2, 1] = [1, -0.5]; g2 = x1 - (x1 + [1, 0]) = [-1, 0]
    # v2 = 0.5 [-2, 1] + [-1, 0] = [-2, 0.5]; x2 = [1, -0.5] - 0.5 [-2, 0.5] = [2, -0.75]
    x1, x2 = two_rounds(ServerOptimizer("fedavgm", lr=0.5, momentum=0.5))
    np.testing.assert_array_equal(x1, [1.0, -0.5])
    np.testing.assert_array_equal(x2, [2.0, -0.75])


def test_fedavg_with_a_server_learning_rate_by_hand() -> None:
    # x1 = 0 + 0.5 [2, -1] = [1, -0.5]; x2 = x1 + 0.5 [1, 0] = [1.5, -0.5]: no state
    x1, x2 = two_rounds(ServerOptimizer("fedavg", lr=0.5))
    np.testing.assert_array_equal(x1, [1.0, -0.5])
    np.testing.assert_array_equal(x2, [1.5, -0.5])


def test_fedadam_two_rounds_by_hand() -> None:
    tau = 1e-3
    x1, x2 = two_rounds(ServerOptimizer("fedadam", lr=0.1, beta1=0.9, beta2=0.99, tau=tau))
    # m1 = 0.1 Δ1 = [0.2, -0.1]; v1 = 0.01 Δ1² = [0.04, 0.01]; Flower's bias-corrected
    # η1 = 0.1 sqrt(1 - 0.99^2) / (1 - 0.9^2) (exponent round + 1 = 2)
    eta1 = 0.1 * math.sqrt(1 - 0.99**2) / (1 - 0.9**2)
    want1 = np.array([eta1 * 0.2 / (0.2 + tau), eta1 * -0.1 / (0.1 + tau)])
    np.testing.assert_allclose(x1, want1, rtol=1e-13)
    # m2 = 0.9 m1 + 0.1 [1, 0] = [0.28, -0.09]; v2 = 0.99 v1 + 0.01 [1, 0] = [0.0496, 0.0099]
    eta2 = 0.1 * math.sqrt(1 - 0.99**3) / (1 - 0.9**3)
    want2 = want1 + eta2 * np.array([0.28 / (math.sqrt(0.0496) + tau), -0.09 / (math.sqrt(0.0099) + tau)])
    np.testing.assert_allclose(x2, want2, rtol=1e-13)


def test_fedyogi_two_rounds_by_hand() -> None:
    tau = 1e-3
    x1, x2 = two_rounds(ServerOptimizer("fedyogi", lr=0.01, beta1=0.9, beta2=0.99, tau=tau))
    # m1 = [0.2, -0.1]; v1 = 0 - 0.01 Δ1² sign(0 - Δ1²) = [0.04, 0.01]; no bias correction
    want1 = 0.01 * np.array([0.2 / (0.2 + tau), -0.1 / (0.1 + tau)])
    np.testing.assert_allclose(x1, want1, rtol=1e-13)
    # m2 = [0.28, -0.09]; v2 = v1 - 0.01 [1, 0] sign(v1 - [1, 0]) = [0.04 + 0.01, 0.01] (Adam's: 0.0496)
    want2 = want1 + 0.01 * np.array([0.28 / (math.sqrt(0.05) + tau), -0.09 / (math.sqrt(0.01) + tau)])
    np.testing.assert_allclose(x2, want2, rtol=1e-13)


def test_fedadagrad_two_rounds_by_hand() -> None:
    tau = 1e-3
    x1, x2 = two_rounds(ServerOptimizer("fedadagrad", lr=0.1, beta1=0.9, tau=tau))  # beta1 ignored: Flower's 0
    # m1 = Δ1 = [2, -1]; v1 = Δ1² = [4, 1]
    want1 = 0.1 * np.array([2 / (2 + tau), -1 / (1 + tau)])
    np.testing.assert_allclose(x1, want1, rtol=1e-13)
    # m2 = Δ2 = [1, 0]; v2 = v1 + Δ2² = [5, 1] (a dropped sum: [1, 0] and a step of 0.1 / (1 + tau))
    want2 = want1 + 0.1 * np.array([1 / (math.sqrt(5) + tau), 0.0])
    np.testing.assert_allclose(x2, want2, rtol=1e-13)


def test_fedavg_at_server_lr_one_is_the_plain_mean_bit_for_bit(backbone) -> None:
    """The default (server-optimizer=fedavg, server-lr=0 -> 1) returns exactly what the base
    aggregate returned before server optimizers: weighted_mean of the uploads."""
    from fedtext.common.tasks import TASKS
    from strategies.fedprompt import FedPrompt

    rng = np.random.default_rng(0)
    for lr in (0.0, 1.0):
        cfg = make_config("fedprompt", prompt_length=2, max_length=32, server_lr=lr)
        strat = FedPrompt(cfg, TASKS["demo"])
        strat.global_arrays = strat.initial_arrays()
        uploads = [Upload(None, str(k), n, {"prompt": rng.standard_normal((2, 384)).astype(np.float32)}, {})
                   for k, n in enumerate((3, 5, 8))]
        arrays, _ = strat.aggregate(1, uploads)
        mean = weighted_mean([u.array_list() for u in uploads], [u.num_examples for u in uploads])
        assert arrays[0].dtype == np.float32 and arrays[0].tobytes() == mean[0].tobytes()


def test_fedyogi_leaves_a_coordinate_no_client_moved_where_it_is():
    """Δ = 0 in a coordinate (every upload left it as sent): v − Δ² = 0, sign 0, so v stays 0
    and x stays put (m = 0 there), not 0/0 = nan."""
    opt = ServerOptimizer("fedyogi", lr=0.01, beta1=0.9, beta2=0.99, tau=1e-3)
    x1 = opt.step(1, [np.zeros(2)], [np.array([2.0, 0.0])])[0]
    np.testing.assert_allclose(opt.v[0], [0.04, 0.0], rtol=1e-13, atol=0)
    np.testing.assert_allclose(x1, [0.01 * 0.2 / (0.2 + 1e-3), 0.0], rtol=1e-13)
    # v = Δ² != 0 (0.25 = 0.5², exact): sign 0 again, v keeps its value (0.25 - 0.01 * 0.25 * 0)
    opt.load_state({"m": [np.zeros(2)], "v": [np.array([0.25, 0.25])]})
    opt.step(2, [np.zeros(2)], [np.array([0.5, 0.0])])
    np.testing.assert_array_equal(opt.v[0], [0.25, 0.25])


ADAPTIVE = ["fedadam", "fedyogi", "fedadagrad"]


@pytest.mark.parametrize("name", ["fedavg", "fedavgm", *ADAPTIVE])
def test_a_mean_of_another_array_count_is_refused_not_truncated(name: str) -> None:
    """One array per global array: a mean with an extra array raises instead of being cut
    to the model's count (zip would drop it silently)."""
    opt = ServerOptimizer(name, lr=0.5, momentum=0.5 if name == "fedavgm" else 0.0)
    with pytest.raises(ValueError):
        opt.step(1, [np.zeros(2)], [np.ones(2), np.ones(3)])


@pytest.mark.parametrize("name", ADAPTIVE)
@pytest.mark.parametrize("moment", ["m", "v"])
def test_moments_of_another_array_count_are_refused_not_truncated(name: str, moment: str) -> None:
    """A state (a resumed checkpoint's) whose m or v holds more arrays than the model: the
    step raises rather than pair the first ones and drop the rest."""
    opt = ServerOptimizer(name, lr=0.1)
    state = {"m": [np.zeros(2)], "v": [np.zeros(2)]}
    state[moment] = [np.zeros(2), np.zeros(2)]
    opt.load_state(state)
    with pytest.raises(ValueError):
        opt.step(1, [np.zeros(2)], [np.ones(2)])


@pytest.mark.parametrize("name", ["fedavg", "fedavgm", *ADAPTIVE])
def test_float32_global_arrays_stay_float32_whatever_the_dtype_of_the_mean_and_the_state(name: str) -> None:
    """Δ is taken in x's dtype (a float64 mean is rounded to float32 first, so the step and its
    moments are those of the float32 mean, bit for bit), and moments loaded as float64 (a
    state from float64 arithmetic) still give float32 arrays back."""
    rng = np.random.default_rng(3)
    x = [rng.standard_normal(5).astype(np.float32)]
    mean64 = [x[0].astype(np.float64) + rng.standard_normal(5) * 0.1]
    kw = dict(lr=0.5, momentum=0.5 if name == "fedavgm" else 0.0)
    a, b = ServerOptimizer(name, **kw), ServerOptimizer(name, **kw)
    got, want = a.step(1, x, mean64), b.step(1, x, [mean64[0].astype(np.float32)])
    assert got[0].dtype == np.float32 and got[0].tobytes() == want[0].tobytes()
    for m in (a.m, a.v):
        assert m is None or m[0].dtype == np.float32
    if name != "fedavg":
        wide = ServerOptimizer(name, **kw)
        wide.load_state({k: None if v is None else [v[0].astype(np.float64)] for k, v in b.state().items()})
        assert wide.step(2, want, [want[0] + np.float32(0.1)])[0].dtype == np.float32


# ---------------------------------------------------------------- Flower's classes
FLOWER = {
    "fedavgm": lambda p: FedAvgM(initial_parameters=p, server_learning_rate=0.7, server_momentum=0.9),
    "fedadam": lambda p: FedAdam(initial_parameters=p),
    "fedyogi": lambda p: FedYogi(initial_parameters=p),
    "fedadagrad": lambda p: FedAdagrad(initial_parameters=p),
}
OURS = {
    "fedavgm": dict(server_optimizer="fedavgm", server_lr=0.7, server_momentum=0.9),
    "fedadam": dict(server_optimizer="fedadam"),  # Flower's defaults: eta 0.1, beta 0.9 / 0.99, tau 1e-9
    "fedyogi": dict(server_optimizer="fedyogi"),  # eta 0.01, tau 1e-3
    "fedadagrad": dict(server_optimizer="fedadagrad"),  # eta 0.1, tau 1e-9, beta_1 = 0
}


@pytest.mark.parametrize("name", list(FLOWER))
def test_three_rounds_equal_flowers_strategy_bit_for_bit(name: str) -> None:
    """Flower's strategy driven through its own aggregate_fit with one FitRes holding the
    round's mean (its FedAvg of one result is that result) gives the same float64 arrays
    as ours, round after round (their state m, v included); our defaults are theirs."""
    rng = np.random.default_rng(1)
    x = [rng.standard_normal((3, 4)), rng.standard_normal(5)]
    flower = FLOWER[name](ndarrays_to_parameters(x))
    ours = ServerOptimizer.from_config(make_config("fedprompt", **OURS[name]))
    for t in (1, 2, 3):
        uploads = [[a + rng.standard_normal(a.shape) for a in x] for _ in range(3)]
        mean = weighted_mean(uploads, [2, 3, 5])
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(mean), 1, {})
        theirs = parameters_to_ndarrays(flower.aggregate_fit(t, [(SimpleNamespace(cid="0"), res)], [])[0])
        x = ours.step(t, x, mean)
        for a, b in zip(x, theirs, strict=True):
            assert a.dtype == b.dtype == np.float64 and a.tobytes() == b.tobytes(), (name, t)


def test_float32_arrays_stay_float32_where_flowers_fedadam_returns_float64() -> None:
    rng = np.random.default_rng(2)
    x = [rng.standard_normal(6).astype(np.float32)]
    mean = [x[0] + np.float32(0.5)]
    flower = FedAdam(initial_parameters=ndarrays_to_parameters(x))
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(mean), 1, {})
    theirs = parameters_to_ndarrays(flower.aggregate_fit(1, [(SimpleNamespace(cid="0"), res)], [])[0])
    ours = ServerOptimizer("fedadam", lr=0.1).step(1, x, mean)
    assert theirs[0].dtype == np.float64 and ours[0].dtype == np.float32
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)


# ---------------------------------------------------------------- refusals
NOT_AVERAGING = [m for m, c in METHODS.items() if c.server_aggregation != MEAN]


@pytest.mark.parametrize("method", NOT_AVERAGING)
def test_methods_whose_server_does_not_average_refuse_both_options_in_one_line(method: str) -> None:
    for key, value, said in (("server_optimizer", "fedadam", "server-optimizer=fedadam"),
                             ("proximal_mu", 0.01, "proximal-mu=0.01"),
                             ("server_lr", 0.5, "server-lr=0.5")):
        with pytest.raises(ConfigError) as err:
            make_config(method, **{key: value})
        text = str(err.value)
        assert "\n" not in text and text.startswith(
            f"{method}: {said} needs a server that averages arrays; {method}'s server step is "), text
        assert text.endswith(METHODS[method].server_aggregation)


def test_the_refusals_name_the_step() -> None:
    # the papers' non-averaging servers are refused (a subset: a method added later declares its own)
    assert {"fedbpt", "feddls", "feddrs", "feddf", "fes", "fedfsl", "fedfsl-bias", "fedcls"} <= set(NOT_AVERAGING)
    with pytest.raises(ConfigError, match="^fedbpt: server-optimizer=fedadam needs a server that averages arrays; "
                                          "fedbpt's server step is a CMA-ES update$"):
        make_config("fedbpt", server_optimizer="fedadam")


def test_bbt_fed_composes_with_a_server_optimizer_only_as_a_plain_mean_of_z_and_never_with_proximal_mu() -> None:
    assert make_config("bbt-fed", server_optimizer="fedyogi").server_optimizer == "fedyogi"
    with pytest.raises(ConfigError, match="^bbt-fed: proximal-mu=0.1 needs clients that train with gradients; "
                                          "bbt-fed's clients run CMA-ES"):
        make_config("bbt-fed", proximal_mu=0.1)
    with pytest.raises(ConfigError, match="^bbt-fed: server-optimizer=fedadam needs .* a mean of z, sigma and C"):
        make_config("bbt-fed", server_optimizer="fedadam", average="z-sigma-C")
    with pytest.raises(ConfigError, match="box"):
        make_config("bbt-fed", server_optimizer="fedavgm", server_momentum=0.9, bound=1.0)


@pytest.mark.parametrize("method", ["fedprompt", "fedptuning-v2", "feddpg", "fedavg"])
def test_the_averaging_gradient_methods_take_both(method: str) -> None:
    cfg = make_config(method, server_optimizer="fedadam", proximal_mu=0.01)
    assert cfg.resolved_server_lr == 0.1 and cfg.resolved_server_tau == 1e-9 and cfg.proximal_mu == 0.01


@pytest.mark.parametrize("fields, message", [
    (dict(server_beta1=0.5), "server-beta1=0.5 is read by server-optimizer=fedadam, fedyogi only; "
                             "server-optimizer=fedavg would ignore it"),
    (dict(server_optimizer="fedadagrad", server_beta1=0.5), "server-beta1=0.5 is read by server-optimizer=fedadam, "
                                                            "fedyogi only; server-optimizer=fedadagrad would ignore it"),
    (dict(server_optimizer="fedadam", server_momentum=0.9), "server-momentum=0.9 is read by server-optimizer=fedavgm "
                                                            "only; server-optimizer=fedadam would ignore it"),
    (dict(server_tau=1e-3), "server-tau=0.001 is read by server-optimizer=fedadam, fedyogi, fedadagrad only"),
    (dict(server_optimizer="sgd"), "unknown server-optimizer 'sgd'; choose one of: fedavg, fedavgm, fedadam, "
                                   "fedyogi, fedadagrad"),
    (dict(proximal_mu=-1.0), "proximal-mu must be >= 0, got -1.0"),
    (dict(server_optimizer="fedavgm", server_momentum=1.0), "server-momentum must be in [0, 1), got 1.0"),
    (dict(server_lr=-0.1), "server-lr must be >= 0, got -0.1"),
])
def test_bad_server_optimizer_settings_are_one_line(fields, message) -> None:
    with pytest.raises(ConfigError) as err:
        make_config("fedprompt", **fields)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_defaults_resolve_to_flowers() -> None:
    for name, lr, tau in (("fedavg", 1.0, 0.0), ("fedavgm", 1.0, 0.0), ("fedadam", 0.1, 1e-9),
                          ("fedyogi", 0.01, 1e-3), ("fedadagrad", 0.1, 1e-9)):
        cfg = make_config("fedprompt", server_optimizer=name)
        assert (cfg.resolved_server_lr, cfg.resolved_server_tau) == (lr, tau)
    assert make_config("fedprompt", server_optimizer="fedadam", server_lr=0.3).resolved_server_lr == 0.3


@pytest.mark.parametrize("name, state", [("fedyogi", "the global arrays"), ("fedadagrad", "the global arrays"),
                                         ("fedavgm", "the global arrays")])
def test_a_step_that_overflows_is_one_line_naming_the_optimizer_and_server_lr(name, state) -> None:
    """Issue 58: server-lr=1e300 overflowed float32 in the first step (a numpy RuntimeWarning),
    and the non-finite global arrays went to the clients. Now: one line, no numpy warning."""
    opt = ServerOptimizer(name, lr=1e300, momentum=0.5 if name == "fedavgm" else 0.0, tau=1e-3)
    x = [np.zeros(3, np.float32)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered" would fail here
        with pytest.raises(ConfigError) as err:
            opt.step(1, x, [np.array([0.1, -0.2, 0.3], np.float32)])
    assert str(err.value) == (f"server-optimizer={name} with server-lr=1e+300 made {state} non-finite in round 1: "
                              "lower server-lr")


def test_non_finite_state_alone_is_refused_too() -> None:
    """v overflowing to inf leaves the step finite (m / inf = 0) but every later step wrong."""
    opt = ServerOptimizer("fedadagrad", lr=0.1, tau=1e-3)
    with pytest.raises(ConfigError, match=r"^server-optimizer=fedadagrad with server-lr=0.1 made its state v "
                                          r"non-finite in round 1: lower server-lr$"):
        opt.step(1, [np.zeros(1)], [np.array([1e200])])  # Δ² = 1e400 = inf in float64


def test_a_run_whose_server_step_overflows_fails_with_that_line_and_blames_no_client(tmp_path) -> None:
    """Issue 58: fedyogi at server-lr=1e300 finished, both clients' evaluations dropped as
    "loss=nan is not finite". Now the run ends failed in round 1 with the optimizer's line."""
    from fedtext.records.reader import load_run
    from tests.inprocess import TINY, TINY_BERT, run, smoke

    with pytest.raises(ConfigError, match="^server-optimizer=fedyogi with server-lr=1e"):
        run({"method": "fedprompt", **TINY, **TINY_BERT, **smoke("fedprompt"), "server-optimizer": "fedyogi",
             "server-lr": 1e300}, tmp_path)
    record = load_run(next(tmp_path.rglob("summary.json")).parent)
    assert record["status"] == "failed"
    assert record["summary"]["error"] == ("server-optimizer=fedyogi with server-lr=1e+300 made the global arrays non-finite in "
                               "round 1: lower server-lr")
    assert not any(r.get("dropped") for r in record["rounds"])  # no client blamed


# ---------------------------------------------------------------- checkpoint and resume
def _bbt(tmp_path, backbone, **fields):
    from fedtext.records import RunRecorder
    from fedtext.common.tasks import TASKS
    from strategies.bbt_fed import BBTFed

    cfg = make_config("bbt-fed", intrinsic_dim=4, prompt_length=2, max_length=32, output_dir=str(tmp_path), **fields)
    strat = BBTFed(cfg, TASKS["demo"], recorder=RunRecorder(tmp_path, cfg.to_run_config()))
    strat.global_arrays = strat.initial_arrays()
    return strat


def _uploads(t: int, x: np.ndarray) -> list[Upload]:
    rng = np.random.default_rng(t)
    return [Upload(None, str(k), n, {"z": (x + rng.standard_normal(4)).astype(np.float32)}, {})
            for k, n in enumerate((2, 5))]


def _round(strat, t: int) -> None:
    arrays, _ = strat.aggregate(t, _uploads(t, strat.global_arrays[0]))
    strat.global_arrays = arrays  # what aggregate_fit keeps


@pytest.mark.parametrize("name", ["fedavgm", "fedadam", "fedyogi", "fedadagrad"])
def test_a_resumed_run_continues_with_the_same_moments(name, tmp_path, backbone, monkeypatch) -> None:
    """save after round 2 -> load into a fresh strategy -> round 3 equals the uninterrupted
    run's round 3 bit for bit; a fresh strategy given only the arrays (m, v dropped) does not."""
    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    fields = dict(server_optimizer=name, **(dict(server_momentum=0.9) if name == "fedavgm" else {}))
    run = _bbt(tmp_path / "a", backbone, **fields)
    for t in (1, 2):
        _round(run, t)
    run.save_checkpoint(2)
    ckpt = checkpoint.load(run.recorder.dir, limits=type(run).checkpoint_limits(run.cfg, run.model))
    assert set(ckpt.state) == {"server_optimizer", "privacy"}
    resumed = _bbt(tmp_path / "b", backbone, **fields)
    resumed.restore(ckpt)
    amnesiac = _bbt(tmp_path / "c", backbone, **fields)
    amnesiac.global_arrays = [np.asarray(a) for a in ckpt.global_arrays]
    for strat in (run, resumed, amnesiac):
        _round(strat, 3)
    assert run.global_arrays[0].tobytes() == resumed.global_arrays[0].tobytes()
    assert not np.array_equal(run.global_arrays[0], amnesiac.global_arrays[0])


def test_a_checkpoint_without_optimizer_state_resumes_plain_fedavg(tmp_path, backbone) -> None:
    """Checkpoints written before server optimizers hold no ``server_optimizer`` entry: their
    runs ran plain FedAvg (the default), which keeps no state."""
    strat = _bbt(tmp_path, backbone)
    strat.restore(checkpoint.Checkpoint(1, [np.ones(4, np.float32)], {}, {}))
    assert strat.server_opt.state() == {"m": None, "v": None} and strat.resumed_round == 1


def test_the_checkpoint_bound_holds_the_moments_of_the_whole_model(backbone) -> None:
    """fedavg's whole MiniLM with fedadam: m and v, pickled, fit the declared state bound."""
    import pickle

    from fedtext.common.tasks import TASKS
    from strategies.fedavg import FedAvgStrategy

    cfg = make_config("fedavg", server_optimizer="fedadam", head="linear")
    model = cfg.method_config.model_class()(cfg, backbone)
    limits = FedAvgStrategy.checkpoint_limits(cfg, model)
    plain = FedAvgStrategy.checkpoint_limits(make_config("fedavg", head="linear"), model)
    arrays = model.initial_arrays()
    opt = ServerOptimizer.from_config(cfg)
    opt.step(1, arrays, [a + 1 for a in arrays])
    pickled = len(pickle.dumps({"server_optimizer": opt.state()}, protocol=pickle.HIGHEST_PROTOCOL))
    assert pickled <= limits.state_bytes and pickled > plain.state_bytes  # without the declaration: refused
    assert TASKS  # the demo task builds the head's classes


def test_a_round_with_fedadam_and_proximal_mu_runs_end_to_end_and_checkpoints_its_moments(tmp_path, monkeypatch):
    """fedprompt through the ServerApp's strategy and in-process ClientApp clients (as
    test_round_loop), with both options on: the round finishes, nothing is dropped, and the
    checkpoint holds the optimizer's m and v beside the global prompt."""
    from tests.inprocess import one_round

    monkeypatch.setenv(checkpoint.KEY_ENV, str(tmp_path / "key"))
    rounds = one_round("fedprompt", tmp_path, **{"server-optimizer": "fedadam", "proximal-mu": 0.01})
    assert rounds[1]["dropped"] == [] and rounds[1]["num_clients"] == 2
    ckpt = checkpoint.load(next(tmp_path.rglob("checkpoint.npz")).parent)
    m, v = ckpt.state["server_optimizer"]["m"], ckpt.state["server_optimizer"]["v"]
    assert [a.shape for a in m] == [a.shape for a in v] == [a.shape for a in ckpt.global_arrays]
    assert (v[0] > 0).any() and m[0].dtype == np.float32
