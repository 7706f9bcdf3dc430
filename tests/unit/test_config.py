"""Run-config validation: every bad value fails before training with one clear line."""

from __future__ import annotations

import re
import sys
import tomllib

import numpy as np
import pytest

from fedtext.common.components import resolve
from fedtext.common.config import ConfigError, MethodConfig, RunConfig
from fedtext.learning.model import Model
from fedtext.common.registry import CONFIGS, METHODS, make_config
from simulations.compare import flatten

from ..conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import run_config_docs  # noqa: E402


def parse(**overrides):
    return RunConfig.from_run_config({k.replace("_", "-"): v for k, v in overrides.items()}, METHODS)


def test_one_registry_names_each_method_once():
    assert len(CONFIGS) >= 1 and len(CONFIGS) == len(METHODS) and tuple(METHODS.values()) == CONFIGS  # registry order
    for name, config in METHODS.items():
        assert config.name == name and re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name), name  # a TOML table name
        assert issubclass(config.model_class(), Model)
        assert config.summary and "|" not in config.summary, f"{name}: declare summary (README's 'what it tunes')"


def test_each_config_names_its_own_strategy_and_client_of_one_method_module():
    """Every config declares its three strings itself (a subclass of another method's config
    must not inherit its classes silently); the model lives in a method package's
    ``model.py``; the strategy and client resolve to a strategy and a client of the
    same method module (``strategies.<m>`` / ``clients.<m>``)."""
    from fedtext.client.numpy_client import FedTextClient
    from fedtext.server.strategy import FedTextStrategy

    for config in CONFIGS:
        assert "strategy" in vars(config) and "client" in vars(config) and "model" in vars(config), config
        assert config.model.startswith("fedtext.methods.") and ".model:" in config.model, config  # beside its config
        strategy_module, client_module = config.strategy.split(":")[0], config.client.split(":")[0]
        assert strategy_module.startswith("strategies.") and client_module.startswith("clients."), config
        assert strategy_module.removeprefix("strategies.") == client_module.removeprefix("clients."), config
        assert issubclass(resolve(config.strategy), FedTextStrategy), config
        assert issubclass(resolve(config.client), FedTextClient), config
    # FeS and its baselines differ by config only: one strategy, one client
    from fedtext.methods.fes.config import FewShotConfig

    few_shot = {(c.strategy, c.client) for c in CONFIGS if issubclass(c, FewShotConfig)}
    assert few_shot == {("strategies.fes:FewShotStrategy", "clients.fes:FewShotClient")}


def test_resolve_names_the_bad_part_of_a_spec():
    from strategies.fedavg import FedAvgStrategy

    assert resolve("strategies.fedavg:FedAvgStrategy") is FedAvgStrategy
    assert resolve("fedtext.common.config:MethodConfig.key") == MethodConfig.key  # a dotted attribute
    for spec in ("strategies.fedavg.FedAvgStrategy", "strategies.fedavg:", ":FedAvgStrategy", "a:b:c"):
        with pytest.raises(ValueError, match="is not a \"module:Class\" string"):
            resolve(spec)
    with pytest.raises(ImportError, match="there is no module strategies.nope"):
        resolve("strategies.nope:FedNope")
    with pytest.raises(ImportError, match="there is no module nopackage.nope"):
        resolve("nopackage.nope:FedNope")
    with pytest.raises(ImportError, match="module strategies.fedavg has no attribute FedNope"):
        resolve("strategies.fedavg:FedNope")


def test_pyproject_and_run_config_md_are_what_the_generator_writes_from_the_dataclasses():
    """Every key's default and comment is defined once, in its config dataclass; pyproject's
    ``[tool.flwr.app.config*]`` tables and docs/run-config.md's tables are written from them."""
    stale = run_config_docs.stale()
    assert not stale, (f"{', '.join(str(p.relative_to(REPO)) for p in stale)} differ from the config dataclasses: "
                       f"run `{run_config_docs.COMMAND}`")


def test_the_generated_tables_give_flower_every_key_at_its_dataclass_default():
    """What the generator writes parses (TOML) to every shared key and every method's keys at
    their defaults, as Flower flattens nested tables, and every method parses from it alone."""
    flat = flatten(tomllib.loads(run_config_docs.pyproject_block())["tool"]["flwr"]["app"]["config"])
    expected = RunConfig().to_run_config()
    for config in CONFIGS:
        expected.update(config().to_run_config())
    assert flat == expected and all(type(flat[k]) is type(v) for k, v in expected.items())
    for name in METHODS:
        assert RunConfig.from_run_config({**flat, "method": name}, METHODS).method_config == METHODS[name]()


def test_the_generator_refuses_a_key_without_a_comment_and_takes_the_doc_comment(tmp_path, monkeypatch):
    import dataclasses
    import importlib.util

    source = tmp_path / "nocomment.py"
    source.write_text(
        "from dataclasses import dataclass\n"
        "from typing import ClassVar\n"
        "from fedtext.common.config import MethodConfig\n\n\n"
        "@dataclass(frozen=True)\n"
        "class Explained(MethodConfig):\n"
        "    name: ClassVar[str] = 'explained'\n"
        "    #: the longer text\n"
        "    #: on two lines\n"
        "    steps: int = 2  # the one line\n"
        "    rate: float = 0.005  # a | b\n\n\n"
        "@dataclass(frozen=True)\n"
        "class Silent(Explained):\n"
        "    name: ClassVar[str] = 'silent'\n"
        "    quiet: int = 1\n"
    )
    spec = importlib.util.spec_from_file_location("nocomment", source)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "nocomment", module)
    spec.loader.exec_module(module)
    docs = run_config_docs.field_docs(module.Explained)
    assert docs["steps"] == run_config_docs.FieldDoc("the one line", "the longer text on two lines", "")
    assert [f.name for f in dataclasses.fields(module.Silent)] == ["steps", "rate", "quiet"]
    with pytest.raises(SystemExit, match=r"nocomment.py:18: field quiet has no '# comment' on its line"):
        run_config_docs.field_docs(module.Silent)
    table = run_config_docs.method_table([module.Explained])
    assert "| `explained` | `steps` | 2 | the longer text on two lines |" in table  # #: text in the docs
    assert "| `explained` | `rate` | 5e-3 | a \\| b |" in table  # a pipe escaped in its cell
    assert f"{'rate = 5e-3':<30}# a | b\n" in run_config_docs.pyproject_block([module.Explained])  # as TOML


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"method": "nope"}, f"unknown method 'nope'; choose one of: {', '.join(sorted(METHODS))}"),
        ({"bandwidth_mbps": 0}, "bandwidth-mbps must be > 0, got 0"),
        ({"method": "fes", "fes.paces": "2-0-5"}, "fes.paces: '2-0-5' is not f-n-k"),
        ({"method": "fes", "fes.keep-ratio": 1.5}, "fes.keep-ratio must be <= 1, got 1.5"),
        ({"method": "fes", "fes.rho": 1.0}, "fes.rho must be > 1, got 1.0"),
        ({"method": "fedcls", "head": "similarity"}, "head=similarity does not fit method fedcls"),
        ({"task": "imdb"}, "unknown task 'imdb'"),
        ({"partition": "pathological"}, "unknown partition 'pathological'; choose one of: iid, dirichlet, dirichlet-client, label, domain"),
        ({"head": "softmax"}, "unknown head 'softmax'"),
        ({"head": "linear", "method": "fedprompt"}, "head=linear does not fit method fedprompt"),
        ({"num_server_rounds": 0}, "num-server-rounds must be >= 1, got 0"),
        ({"alpha": 0.0}, "alpha must be > 0, got 0.0"),
        ({"alpha": -1}, "alpha must be > 0"),
        ({"clients_per_round": -2}, "clients-per-round must be >= 0"),
        ({"method": "bbt-fed", "bbt-fed.popsize": 1}, "bbt-fed.popsize must be >= 2"),
        ({"post_tune_popsize": 1}, "post-tune-popsize must be >= 2"),
        ({"eval_every": 0}, "eval-every must be >= 1"),
        ({"dataset": "./no/such/dir"}, "dataset path './no/such/dir' does not exist"),
        ({"num_server_rounds": "ten"}, "num-server-rounds must be int, got 'ten'"),
        ({"num_server_rounds": 2.5}, "num-server-rounds must be int, got 2.5"),
        ({"num_rounds": 3}, "unknown run-config key 'num-rounds'; did you mean num-server-rounds?"),
        ({"method": "feddls", "phi": 3}, "unknown run-config key 'phi'; did you mean feddls.phi?"),
        ({"method": "fedbpt", "popsize": 3}, "unknown run-config key 'popsize'; did you mean fedbpt.popsize?"),
        ({"method": "bbt-fed", "popsize": 3}, "did you mean bbt-fed.popsize?"),
        ({"method": "feddls", "dls-steps": 3}, "unknown run-config key 'dls-steps'; did you mean feddls.steps?"),
        ({"method": "feddls", "feddls.phii": 3}, "unknown run-config key 'feddls.phii'; did you mean feddls.phi?"),
        ({"method": "fedbpt", "feddls.phi": 3},
         "'feddls.phi=3' is a key of method feddls, but method=fedbpt would ignore it (set method=feddls"),
        ({"method": "feddls", "feddls.compression": "zip"},
         "unknown feddls.compression 'zip'; choose one of: lasso, full, pca, quant"),
        ({"method": "feddls", "feddls.phi": 0}, "feddls.phi must be >= 1, got 0"),
        ({"method": "feddls", "feddls.phi": 8, "feddls.lasso-screen": 5},
         "feddls.lasso-screen (5) must be >= feddls.phi (8)"),
        ({"method": "feddls", "feddls.quant-bits": 1}, "feddls.quant-bits must be >= 2"),
        ({"post_tune_sigma": 0}, "post-tune-sigma must be > 0"),
        ({"method": "feddls", "feddls.steps": 0}, "feddls.steps must be >= 1"),
        ({"method": "fedbpt", "fedbpt.sigma-update": "loud"}, "unknown fedbpt.sigma-update 'loud'; choose one of: damped, printed"),
        ({"method": "fedbpt", "fedbpt.keep-rate": 0}, "fedbpt.keep-rate must be > 0"),
        ({"method": "fedavg", "fedavg.lr": 0}, "fedavg.lr must be > 0"),
    ],
)
def test_bad_values_raise_one_clear_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        parse(**overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_key_of_another_method_at_its_default_is_fine():
    """pyproject carries every method's defaults, so Flower's run-config always has them."""
    cfg = parse(method="fedbpt", **{"feddls.phi": 5, "fedbpt.popsize": 6})
    assert cfg.method_config.popsize == 6 and not hasattr(cfg.method_config, "phi")


def test_clients_per_round_above_connected_clients():
    cfg = parse(clients_per_round=5)
    cfg.check_num_clients(5)
    with pytest.raises(ConfigError, match="clients-per-round=5 exceeds the 4 connected clients"):
        cfg.check_num_clients(4)


def test_clients_per_eval_above_connected_clients_is_refused_as_clients_per_round_is():
    """Issue 58: clients-per-eval=5 with 2 clients was cut to 2 without a word, where
    clients-per-round=5 was refused; now the same check refuses both, and the server waits
    for the larger of the two before round 1."""
    cfg = parse(clients_per_eval=5)
    assert cfg.clients_asked == 5
    cfg.check_num_clients(5)
    with pytest.raises(ConfigError) as err:
        cfg.check_num_clients(2)
    assert str(err.value) == ("clients-per-eval=5 exceeds the 2 connected clients (set num-supernodes or lower "
                              "clients-per-eval)")
    assert parse(clients_per_round=3).clients_asked == 3  # clients-per-eval=-1: clients-per-round's
    assert parse(clients_per_round=3, clients_per_eval=0).clients_asked == 3  # 0: every connected client


@pytest.mark.parametrize("method, meant", [("fedpromt", "fedprompt"), ("FedPrompt", "fedprompt"),
                                           ("bbt_fed", "bbt-fed"), ("FED_DPG", "feddpg")])
def test_a_misspelt_method_gets_did_you_mean(method, meant):
    """Issue 58: a misspelt method got the list of methods but no "did you mean", unlike a
    misspelt key; case and '_' for '-' are forgiven in the comparison."""
    with pytest.raises(ConfigError) as err:
        parse(method=method)
    assert str(err.value) == (f"unknown method '{method}' (did you mean {meant}?); choose one of: "
                              f"{', '.join(sorted(METHODS))}")


# ------------------------------------------------ issue 45 item 6: bad inputs, one line
def test_a_negative_seed_is_one_line_at_config_time():
    """``seed=-1`` passed the config and stopped the server deep in numpy (SeedSequence:
    "expected non-negative integer"): ``python -m simulations.simulate`` exited 1 with no
    output and no run record."""
    with pytest.raises(ConfigError) as err:
        parse(seed=-1)
    assert str(err.value) == "seed must be >= 0, got -1"
    assert parse(seed=0).seed == 0


@pytest.mark.parametrize("name", ["a b", "x..y", "../x", "..", "a/b", "-lead", "caf\u00e9", "tab\there", "n" * 65])
def test_a_run_name_the_nodes_would_refuse_is_one_line_at_config_time(name):
    """``run-name`` goes into the run id, under which every node journals its state
    (fedtext.node.state.check_run_key): a space or ``..`` passed the config, and every client
    refused the run after the whole first round."""
    with pytest.raises(ConfigError) as err:
        parse(run_name=name)
    assert str(err.value) == (f"run-name '{name}' must be at most 64 letters, digits and . _ = + - (starting "
                              "with a letter or digit, no '..'): it names the run's folder on every node")


@pytest.mark.parametrize("name", ["fes-searched", "n10", "a.b_c=d+e", "n" * 64])
def test_an_accepted_run_name_gives_a_run_id_every_node_accepts(name):
    from fedtext.node.state import check_run_key
    from fedtext.records import run_folder_name

    cfg = parse(run_name=name, method="fedbpt", dataset="demo")
    run_id = run_folder_name(cfg.to_run_config())
    assert run_id.endswith(f"-fedbpt-demo-s0-{name}") and check_run_key(run_id) == run_id


def test_resume_takes_only_a_run_id_the_nodes_accept():
    """``resume`` names the run id the clients journal under: a folder name with a space
    (as a dataset named ``my data`` made) would be refused by every node."""
    for bad in ("a b", "x/y", ".", "..", "x..y"):
        with pytest.raises(ConfigError, match=re.escape(f"resume takes a run id (a folder name under output-dir), "
                                                        f"got '{bad}'")):
            parse(resume=bad)
    assert parse(resume="20261122-220455-fedbpt-demo-s0").resume == "20261122-220455-fedbpt-demo-s0"


def _float_keys() -> list[tuple[str, str]]:
    """(method, key) for every float key: the shared ones (under fedprompt) and each method's own."""

    shared = [("fedprompt", k) for k, f in RunConfig.shared_keys().items() if f.type in (float, "float")]
    own = [(m, k) for m, config in METHODS.items() for k, f in config.keys().items() if f.type in (float, "float")]
    return shared + own


def test_there_are_float_keys_to_check():
    keys = _float_keys()
    assert ("fedprompt", "alpha") in keys and ("bbt-fed", "bbt-fed.sigma0") in keys and len(keys) > 20


@pytest.mark.parametrize("bad", ["nan", float("nan"), "inf", float("-inf")])
@pytest.mark.parametrize("method,key", _float_keys())
def test_every_float_key_refuses_nan_and_inf_in_one_line(method, key, bad):
    """Issue 35: NaN passed every range check (``nan < x`` is False), so ``alpha=nan`` or
    ``fedprompt.lr=nan`` ran to a ``finished`` record at the initial model."""
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be a finite number, got") as err:
        parse(method=method, **{key: bad})
    assert "\n" not in str(err.value)


def test_values_are_coerced_and_frozen():
    cfg = parse(alpha=1, seed=3, method="fedprompt", **{"fedprompt.lr": 1})
    assert isinstance(cfg.alpha, float) and cfg.seed == 3 and isinstance(cfg.method_config.lr, float)
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.method_config.lr = 4  # type: ignore[misc]


def test_make_config_routes_fields_and_round_trips():
    cfg = make_config("feddls", prompt_length=4, phi=3)
    assert cfg.prompt_length == 4 and cfg.method_config.phi == 3
    flat = cfg.to_run_config()
    assert flat["feddls.phi"] == 3 and flat["prompt-length"] == 4
    assert RunConfig.from_run_config(flat, METHODS) == cfg
    assert make_config("fedavg").resolved_head == "linear" and make_config("fedbpt").resolved_head == "similarity"


def test_unknown_task_for_unnamed_dataset(tmp_path):
    from fedtext.common.tasks import resolve_task

    with pytest.raises(ValueError, match="cannot guess the task"):
        resolve_task("auto", str(tmp_path))
    assert resolve_task("auto", "../shared/data/sst2").name == "sst2"
    assert resolve_task("auto", "../shared/data/amazon/").name == "amazon"


def test_a_seed_beyond_flowers_sint64_is_one_line_at_config_time():
    """A 40-digit seed made a run id the nodes refuse (and Flower's config values are sint64)."""
    from fedtext.common.registry import make_config

    assert make_config("fedprompt", seed=2**63 - 1).seed == 2**63 - 1
    with pytest.raises(ConfigError, match=r"^seed must be <= 9223372036854775807, got 9223372036854775808$"):
        make_config("fedprompt", seed=2**63)


@pytest.mark.parametrize("value", [0.005, 1 / 300, 0.0012345678901234567, 5e-5, 1e-9, 0.0, 1000.0, 0.25, 7,
                                   True, False, "", 'a"b\\c', "tab\there", "new\nline\x7f"])
def test_the_generator_writes_every_default_so_that_toml_reads_back_the_same_value(value):
    """A default in pyproject must parse back to exactly the dataclass's value: a float's
    shortest digits (a 16-digit mantissa turned 1/300 into another float), a string's quotes,
    backslashes and control characters escaped (a raw newline is invalid TOML)."""
    text = run_config_docs.toml_value(value)
    back = tomllib.loads(f"x = {text}")["x"]
    assert back == value and type(back) is type(value)


def test_check_range_accepts_each_bound_and_refuses_one_step_past_it():
    from fedtext.common.config import check_range

    check_range("k", 0, 0), check_range("k", 5, 0, 5), check_range("k", float(np.nextafter(0.0, 1.0)), 0, low_open=True)
    for value, low, high, open_, message in ((-1, 0, None, False, "k must be >= 0, got -1"),
                                             (6, 0, 5, False, "k must be <= 5, got 6"),
                                             (0.0, 0, None, True, "k must be > 0, got 0.0")):
        with pytest.raises(ConfigError, match=f"^{message}$"):
            check_range("k", value, low, high, low_open=open_)


UP = float(np.nextafter(1.0, 2.0))  # one float past 1
BELOW_ONE = float(np.nextafter(1.0, 0.0))  # the largest float below 1


@pytest.mark.parametrize("method, fields, refused", [
    # (the value exactly at each bound: accepted), (one step past it: refused with its line)
    ("fedprompt", dict(num_server_rounds=1), (dict(num_server_rounds=0), "num-server-rounds must be >= 1, got 0")),
    ("fedprompt", dict(clients_per_eval=-1), (dict(clients_per_eval=-2), "clients-per-eval must be >= -1, got -2")),
    ("fedprompt", dict(upload_bound=0.0), (dict(upload_bound=-5e-324), "upload-bound must be >= 0, got -5e-324")),
    ("fedprompt", dict(bandwidth_mbps=5e-324), (dict(bandwidth_mbps=0.0), "bandwidth-mbps must be > 0, got 0.0")),
    ("fedprompt", dict(seed=2**63 - 1), (dict(seed=2**63), f"seed must be <= {2**63 - 1}, got {2**63}")),
    ("fedprompt", dict(client_failure_rate=BELOW_ONE),
     (dict(client_failure_rate=1.0), "client-failure-rate must be in [0, 1), got 1.0")),
    ("fedprompt", dict(server_optimizer="fedavgm", server_momentum=BELOW_ONE),
     (dict(server_optimizer="fedavgm", server_momentum=1.0), "server-momentum must be in [0, 1), got 1.0")),
    ("fedprompt", dict(proximal_mu=0.0), (dict(proximal_mu=-5e-324), "proximal-mu must be >= 0, got -5e-324")),
    ("fedkseed", dict(seeds=1), (dict(seeds=0), "fedkseed.seeds must be >= 1, got 0")),
    ("fedkseed", dict(seeds=65_536), (dict(seeds=65_537), "fedkseed.seeds must be <= 65536, got 65537")),
])
def test_a_range_key_takes_its_bound_and_refuses_one_step_past_it(method, fields, refused):
    cfg = make_config(method, **fields)
    for key, value in fields.items():
        assert getattr(cfg, key, None) == value or getattr(cfg.method_config, key) == value
    with pytest.raises(ConfigError) as err:
        make_config(method, **refused[0])
    assert str(err.value).startswith(refused[1]) and "\n" not in str(err.value), str(err.value)
