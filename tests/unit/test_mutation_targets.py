"""tools/mutation.py names the functions that hold the papers' equations; a rename must
not silently drop one from the mutation score."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import mutation  # noqa: E402

NAMES = [name for names in mutation.TARGETS.values() for name in names]


@pytest.mark.parametrize("name", NAMES)
def test_every_mutation_target_exists(name: str) -> None:
    module, _, function = name.rpartition(".")
    obj = importlib.import_module(module)
    for part in function.removeprefix("x").strip("_ǁ").split("ǁ") if "ǁ" in function else [function[2:]]:
        obj = getattr(obj, part)
    assert callable(obj)


def test_group_of_maps_a_mutant_to_its_function_group() -> None:
    assert mutation.group_of("fedtext.methods.fes.x_representational_filter__mutmut_12") == "fes"
    assert mutation.group_of("fedtext.cmaes.xǁReferenceServerESǁtell__mutmut_3") == "fedbpt"
    assert mutation.group_of("fedtext.cmaes.x_representational_filter__mutmut_1") is None
