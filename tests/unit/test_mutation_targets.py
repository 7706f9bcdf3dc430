"""tools/mutation.py names the functions that hold the papers' equations; a rename must
not silently drop one from the mutation score."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import mutation  # noqa: E402

NAMES = [name for names in mutation.TARGETS.values() for name in names]


@pytest.mark.parametrize("name", NAMES)
def test_every_mutation_target_exists(name: str) -> None:
    module, _, function = name.rpartition(".")
    obj = importlib.import_module(module)
    # x_f -> [f]; xǁClassǁmethod -> [Class, method] (a dunder such as __call__ keeps its underscores)
    for part in function.removeprefix("xǁ").split("ǁ") if "ǁ" in function else [function[2:]]:
        obj = getattr(obj, part)
    assert callable(obj)


def test_group_of_maps_a_mutant_to_its_function_group() -> None:
    assert mutation.group_of("fedtext.methods.fes.filter.x_representational_filter__mutmut_12") == "fes"
    assert mutation.group_of("fedtext.methods.fedbpt.cmaes.xǁReferenceServerESǁtell__mutmut_3") == "fedbpt"
    assert mutation.group_of("fedtext.methods.fedbpt.cmaes.x_representational_filter__mutmut_1") is None


def target_files() -> set[str]:
    """The source files that hold :data:`mutation.TARGETS` (``a.b.x_f`` -> ``a/b.py``)."""
    return {name.split(".x")[0].replace(".", "/") + ".py" for name in NAMES}


def test_mutmut_mutates_exactly_the_files_of_the_targets() -> None:
    """pyproject's ``[tool.mutmut] only_mutate`` repeats where the targets live: a target
    moved to another file would otherwise never be mutated (and count as 'not checked')."""
    config = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert set(config["tool"]["mutmut"]["only_mutate"]) == target_files()


def test_every_equivalent_names_a_target() -> None:
    """An equivalent listed under a function that is no longer a target (renamed, moved)
    would silently stop excusing its mutant."""
    targets = set(NAMES)
    assert {function for function, _ in mutation.equivalents()} <= targets
