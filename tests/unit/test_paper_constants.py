"""The papers' constants, from one place of their own (issue 44, part 3).

Each paper page (``docs/papers/<page>.md``) has a section ``## The paper's constants``,
right before ``## Commands``, with one table::

    | constant | paper | where in the paper | key | default | why the default differs |

* ``paper``: the paper's value: a number (``0.2``, ``1e-3``), a backticked string, an
  expression (``λ_k/2``), a bound (``> 1``), or words (``not stated``: no value);
* ``key``: the run-config keys (backticked, comma-separated: ``feddrs.lr``, shared keys
  bare: ``prompt-length``), or ``—`` for a constant of the code that no key sets;
* ``default``: fedtext's default, written as docs/run-config.md writes it;
* ``why the default differs``: empty where the default is the paper's value, a reason
  everywhere else (a bound, no value, or another value).

What is checked: the default column is the config dataclasses' default (through
:mod:`fedtext.common.registry`, not pyproject or docs/run-config.md); the why column is empty
exactly where default and paper agree; and :data:`PAPER`, this module's own copy of the
most important constants, transcribed from ``../shared/papers/*.txt`` (not from the pages),
agrees with each page's paper column, with the paper profiles of its experiment files
(``[profile.paper.run-config]`` of ``simulations/experiments/<prefix>*.toml``) and, where
fedtext means to run the paper's value by default, with the dataclass default itself. So
a constant changed consistently in the config dataclass, pyproject.toml, docs/run-config.md
and even the page's default column still fails here.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from fedtext.common.config import RunConfig
from fedtext.common.registry import METHODS
from simulations.guide import markdown_rows

from ..conftest import REPO

PAGES = ("fedbpt", "feddls", "fes", "feddrs", "feddpg", "baselines")
SECTION = "## The paper's constants"
HEADER = ["constant", "paper", "where in the paper", "key", "default", "why the default differs"]
NO_KEY = "—"
# the experiment files whose [profile.paper] keeps each page's paper setting
EXPERIMENTS = {"fedbpt": "fedbpt_", "feddls": "feddls_", "fes": "fes_", "feddrs": "feddrs_", "feddpg": "feddpg_",
               "baselines": "sst2_baselines"}

# (page, key, the paper's value, whether fedtext's default is meant to be that value),
# transcribed from the paper texts in ../shared/papers (000 FedDLS, 001 FeS, 002 FedDRS,
# 003 FedBPT §4, 004 FedDPG); the comment says where.
PAPER: list[tuple[str, str, float, bool]] = [
    # FedBPT: 003 holds §4 only; d = 500 is FedDPG (004) Table 1's "FedBPT ... 500" parameters
    ("fedbpt", "fedbpt.intrinsic-dim", 500, False),
    # FedDLS (000)
    ("feddls", "feddls.candidates", 5, True),  # §5.2: "we keep K = 5 for all our experiments"
    ("feddls", "feddls.steps", 40, True),  # App. A: "each client updated 40 steps for each round"
    ("feddls", "feddls.lasso-alpha", 0.2, True),  # §4.3: "We empirically set alpha = 0.2"
    ("feddls", "feddls.phi", 5, True),  # Table 1: "G. Ours (Phi = 5)"
    ("feddls", "feddls.lasso-screen", 100, True),  # Alg. 2: "for L = [100, 5]"
    ("feddls", "feddls.pca-components", 10, True),  # App. E: "n = 10 (denoted as PCA10)"
    ("feddls", "feddls.quant-bits", 3, True),  # App. E: "Quant (b = 3)"
    ("feddls", "post-tune-sigma", 0.1, True),  # App. B: "in post tuning ... sigma = 0.1"
    ("feddls", "prompt-length", 50, False),  # App. A: "T = 50 prompt tokens"
    ("feddls", "num-server-rounds", 50, False),  # App. A: "50 rounds of federated learning"
    # FeS (001)
    ("fes", "fes.gold-labels", 64, True),  # Table 2: "64 is the total number of labels across clients"
    ("fes", "fes.batch-size", 4, True),  # §4.1: "mini-batch size as 4"
    ("fes", "fes.local-epochs", 1, True),  # §4.1: "local training epoch as 1"
    ("fes", "fes.static-labels", 100, True),  # §4.1: "adding 100 pseudo labels per selected client per round"
    ("fes", "bandwidth-mbps", 1, True),  # §4.1: "default number as 1MB/s"
    ("fes", "clients-per-round", 5, False),  # §4.1: "per-round participant client number as 5"
    ("fes", "max-length", 256, False),  # §4.1: "max sequence length as 256"
    ("fes", "fes.candidates", 8, False),  # §3.1: "the top-t (default 8)"
    ("fes", "fes.frozen-layers", 16, False),  # §3.3 / §4.4: layers 0-15 of 24 frozen (66.7 %)
    ("fes", "fes.bias-layers", 8, False),  # §3.3: "the bias of layers 16-23" (33.3 %)
    # FedDRS (002), §5.1 "Experiment hyperparameter settings" and "Baselines"
    ("feddrs", "feddrs.lam", 0.1, True),  # "The parameter lambda ... is always set by 0.1"
    ("feddrs", "feddrs.iterations", 1, True),  # "I = 1"
    ("feddrs", "feddrs.post-iterations", 3, True),  # "I* = 3"
    ("feddrs", "feddrs.beta", 0.1, False),  # "beta = 1e-1"
    ("feddrs", "feddrs.sample-steps", 100, False),  # "the update is performed for 100 iterations"
    ("feddrs", "feddrs.sample-batch", 64, False),  # "64 x 64 x 768"
    ("feddrs", "feddrs.sample-length", 64, False),  # "64 x 64 x 768"
    ("feddrs", "feddrs.lr", 1e-3, False),  # "eta = 1e-3" (Adafactor)
    ("feddrs", "feddrs.distill-lr", 1e-5, False),  # "eta* = 1e-5" (Adafactor)
    ("feddrs", "feddf.aux-size", 16000, False),  # "extracting 16,000 random samples"
    ("feddrs", "feddf.distill-lr", 1e-5, False),  # "a step size of 1e-5"
    ("feddrs", "seed", 42, False),  # "a fixed random seed of 42"
    # FedDPG (004)
    ("feddpg", "feddpg.hidden", 20, True),  # §4.2.3: h = 5, 10, 20; Table 1's 185K parameters at h = 20
    ("feddpg", "feddpg.prompts", 10, True),  # §4.2.5: "a prompt length of 10"
    ("feddpg", "feddpg.forget-fraction", 0.2, True),  # §4.2.5: "randomly mislabeled 20%"
    ("feddpg", "feddpg.unlearn-round", 11, False),  # §4.2.5: unlearning after "10 federated training rounds"
    # the baselines, as FedDLS (000) App. A-C / E runs them
    ("baselines", "bbt-fed.sigma0", 1, True),  # App. B: "keeping sigma = 1 in the other cases"
    ("baselines", "bbt-fed.popsize", 20, False),  # §5.2: BBT "requires 20 searches each step"
    ("baselines", "fedprompt.lr", 1e-2, True),  # App. C: "learning rate as 1e-2"
    ("baselines", "fedprompt.batch-size", 16, True),  # App. C: "batch size 16"
    ("baselines", "fedavg.lr", 1e-3, False),  # App. C: FedKD's "learning rate for joint training is 1e-3"
    ("baselines", "alpha", 0.4, False),  # App. A: "set gamma = 0.4 in the main results"
]


# ------------------------------------------------------------------ parsing
def section(page: str) -> str:
    """The text of ``page``'s constants section (up to the next ``## `` heading)."""
    text = (REPO / "docs" / "papers" / f"{page}.md").read_text()
    start = text.find("\n" + SECTION + "\n")
    assert start >= 0, f"docs/papers/{page}.md has no '{SECTION}' section"
    end = text.find("\n## ", start + 1)
    return text[start:end]


def rows(page: str) -> list[dict[str, str]]:
    """The table's rows as {column: cell} (escaped pipes unescaped)."""
    header, *body = markdown_rows(section(page))
    assert header == HEADER, (page, header)
    return [dict(zip(header, [c.replace("\\|", "|") for c in cells], strict=True)) for cells in body]


def keys(cell: str) -> list[str]:
    """The run-config keys of a key cell (none for ``—``)."""
    if cell == NO_KEY:
        return []
    found = re.findall(r"`([^`]+)`", cell)
    assert found and re.fullmatch(r"`[^`]+`(, `[^`]+`)*", cell), f"a key cell is `key`, `key` or {NO_KEY}: {cell!r}"
    return found


def value(cell: str) -> float | str | None:
    """A value cell as a number, a string (backticks dropped), or None for words."""
    plain = cell.strip().strip("`").replace("−", "-")
    try:
        return float(plain)
    except ValueError:
        pass
    if plain in ("true", "false"):
        return plain
    if cell.startswith("`") or re.fullmatch(r"[^\s]+", plain):  # a string or an expression (λ_k/2)
        return plain
    return None  # words: "not stated", "32 paces, not listed"


def bound(cell: str) -> tuple[str, float] | None:
    """``> 1`` -> (">", 1.0)."""
    m = re.fullmatch(r"(>|<|≥|≤)\s*([-\d.e]+)", cell.strip())
    return (m.group(1), float(m.group(2))) if m else None


def default_of(key: str) -> object:
    """The config dataclass default of a run-config key (``feddls.phi``, ``prompt-length``)."""
    if "." in key:
        name = key.split(".", 1)[0]
        return METHODS[name]().to_run_config()[key]
    shared = RunConfig().to_run_config()
    assert key in shared, f"unknown shared key {key}"
    return shared[key]


def same(cell: str, default: object) -> bool:
    """Does a default cell write this dataclass default?"""
    if isinstance(default, bool):
        return cell == str(default).lower()
    if isinstance(default, (int, float)):
        v = value(cell)
        return isinstance(v, float) and v == float(default)
    return cell.strip("`") == str(default)


def agrees(paper: str, default: str) -> bool:
    """Are the paper's value and the default one value (a bound or words never are)?"""
    p, d = value(paper), value(default)
    return p is not None and bound(paper) is None and p == d


def profiles(page: str) -> dict[str, dict]:
    """``[profile.paper.run-config]`` of each experiment file of ``page``, flattened."""
    out = {}
    for path in sorted((REPO / "simulations" / "experiments").glob(f"{EXPERIMENTS[page]}*.toml")):
        table = tomllib.loads(path.read_text()).get("profile", {}).get("paper", {}).get("run-config", {})
        out[path.name] = dict(flat(table))
    return out


def flat(table: dict, prefix: str = ""):
    for k, v in table.items():
        if isinstance(v, dict):
            yield from flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("page", PAGES)
def test_each_paper_page_has_its_constants_right_before_commands(page):
    text = (REPO / "docs" / "papers" / f"{page}.md").read_text()
    start = text.find("\n" + SECTION + "\n")
    assert start >= 0, page
    following = text.find("\n## ", start + 1)
    assert following == text.find("\n## Commands\n"), f"{page}: the section goes right before Commands"
    assert len(rows(page)) >= 5


@pytest.mark.parametrize("page", PAGES)
def test_the_default_column_is_the_config_dataclass_default(page):
    checked = 0
    for row in rows(page):
        for key in keys(row["key"]):
            default = default_of(key)
            assert same(row["default"], default), (page, row["constant"], key, row["default"], default)
            checked += 1
    assert checked >= 5, page


@pytest.mark.parametrize("page", PAGES)
def test_a_default_that_is_the_papers_says_nothing_and_every_other_says_why(page):
    for row in rows(page):
        why = row["why the default differs"]
        if agrees(row["paper"], row["default"]):
            assert why == "", f"{page}, {row['constant']}: the default is the paper's value, so no reason: {why!r}"
        else:
            assert len(why.split()) >= 2, \
                f"{page}, {row['constant']}: {row['default']} is not the paper's {row['paper']}: say why"
        b = bound(row["paper"])
        if b is not None:  # a bound the paper sets: the default must keep it
            d = float(value(row["default"]))
            assert {">": d > b[1], "<": d < b[1], "≥": d >= b[1], "≤": d <= b[1]}[b[0]], (page, row)


@pytest.mark.parametrize(("page", "key", "paper", "default_is_paper"), PAPER,
                         ids=[f"{p}-{k}" for p, k, _, _ in PAPER])
def test_the_papers_values_as_transcribed_here(page, key, paper, default_is_paper):
    """The page's paper column is this test's own transcription of the paper; where
    fedtext's default is meant to be the paper's value, the dataclass default is it too
    (a constant changed everywhere else, the page included, still fails here); where it
    is not, the page says why; and every paper profile of the page's experiments that sets
    the key sets the paper's value."""
    (row,) = [r for r in rows(page) if key in keys(r["key"])]
    assert value(row["paper"]) == float(paper), (page, key, row["paper"], paper)
    default = default_of(key)
    if default_is_paper:
        assert float(default) == float(paper), f"{key} = {default}, the paper's {paper}"
        assert row["why the default differs"] == ""
    else:
        assert float(default) != float(paper) and row["why the default differs"], (page, key)
    for name, table in profiles(page).items():
        if key in table:
            assert float(table[key]) == float(paper), f"{name} [profile.paper] sets {key} = {table[key]}, paper {paper}"


def test_the_transcription_covers_the_constants_the_issue_names():
    covered = {k for _, k, _, _ in PAPER}
    assert {"feddls.candidates", "feddls.lasso-alpha", "feddls.phi", "feddls.lasso-screen", "prompt-length",
            "post-tune-sigma", "fes.candidates", "feddrs.lam", "feddrs.beta", "feddrs.iterations",
            "feddrs.post-iterations", "feddpg.hidden", "feddpg.prompts", "fedbpt.intrinsic-dim",
            "bbt-fed.popsize", "fedprompt.lr", "feddrs.lr", "feddrs.distill-lr"} <= covered
    # and the constants that no value of the paper pins are on their pages, with a reason
    tabled = {k for page in PAGES for r in rows(page) for k in keys(r["key"])}
    assert {"fes.rho", "fes.neighbours", "fedbpt.keep-rate", "fedbpt.popsize", "fedbpt.local-steps",
            "fedbpt.sigma0", "feddrs.post-lam", "feddpg.unlearn-lambda"} <= tabled
    mu = [r for r in rows("fedbpt") if r["constant"].startswith("μ_l")]
    assert mu and mu[0]["paper"] == "λ_k/2" and mu[0]["default"] == "λ_k/2"  # eq. (13)'s mu_l


def test_the_parser_reads_what_the_pages_write():
    assert value("0.2") == 0.2 and value("1e-3") == 1e-3 and value("`z`") == "z" and value("λ_k/2") == "λ_k/2"
    assert value("not stated") is None and value("32 paces, not listed") is None
    assert bound("> 1") == (">", 1.0) and bound("1") is None
    assert agrees("1", "1.0") and not agrees("> 1", "10") and not agrees("not stated", "1.0")
    assert keys("`fes.eta`, `fes.theta`") == ["fes.eta", "fes.theta"] and keys(NO_KEY) == []
    assert same("5e-5", 5e-5) and same("`lasso`", "lasso") and not same("0.3", 0.2)
    with pytest.raises(AssertionError):
        keys("fes.rho")  # a key is backticked


def test_a_constant_changed_consistently_fails(monkeypatch):
    """α of FedDLS changed to 0.3 in the dataclass (and so wherever pyproject and
    docs/run-config.md repeat it), and in the page's default column with a reason added:
    only this module's own transcription of the paper still says 0.2, and that fails."""
    from dataclasses import field, make_dataclass

    from fedtext.methods.feddls.config import FedDLSConfig

    mutant = make_dataclass("FedDLSConfig", [("lasso_alpha", float, field(default=0.3))], bases=(FedDLSConfig,),
                            frozen=True)
    monkeypatch.setitem(METHODS, "feddls", mutant)
    assert default_of("feddls.lasso-alpha") == 0.3
    page = section("feddls").replace("| `feddls.lasso-alpha` | 0.2 | |",
                                     "| `feddls.lasso-alpha` | 0.3 | a sparser download |")
    assert page != section("feddls")
    monkeypatch.setattr(sys.modules[__name__], "section", lambda p: page)
    test_the_default_column_is_the_config_dataclass_default("feddls")  # the page's default column now agrees
    test_a_default_that_is_the_papers_says_nothing_and_every_other_says_why("feddls")  # and says why
    with pytest.raises(AssertionError, match="lasso-alpha = 0.3, the paper's 0.2"):
        test_the_papers_values_as_transcribed_here("feddls", "feddls.lasso-alpha", 0.2, True)
    # and the page's paper column edited too (0.3 everywhere): the transcription disagrees
    page = page.replace("| 0.2 | §4.3", "| 0.3 | §4.3")
    with pytest.raises(AssertionError, match="0.3"):
        test_the_papers_values_as_transcribed_here("feddls", "feddls.lasso-alpha", 0.2, True)


def test_every_page_path_exists():
    for page in PAGES:
        assert Path(REPO / "docs" / "papers" / f"{page}.md").is_file()
        assert profiles(page), f"no experiment file for {page}"
