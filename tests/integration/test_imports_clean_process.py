"""What reads records and configs loads no model code: the dashboard's data layer, the
compare runner and the registry, with every method's config built and validated, import
neither torch nor cma nor a strategy or client (the dashboard starts in a second; before the
config modules were torch-free the registry alone took 10-13 s). Checked in a fresh
interpreter; the import graph itself: tests/unit/test_imports.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..conftest import REPO

HEAVY = ("torch", "transformers", "cma", "sklearn", "ray", "strategies", "clients")


@pytest.mark.parametrize("module", ["simulations.dashboard_data", "simulations.compare", "fedtext.common.registry"])
def test_reading_records_and_configs_imports_no_model_code(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "from fedtext.common.registry import METHODS, make_config\n"
        "for name in METHODS:\n"
        "    make_config(name)\n"
        f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_model_class_resolves_on_demand() -> None:
    """The other side of the strings: asking a config for its model imports it (and torch)."""
    code = (
        "import sys\n"
        "from fedtext.common.registry import METHODS\n"
        "from fedtext.learning.model import Model\n"
        "assert all(issubclass(c.model_class(), Model) for c in METHODS.values())\n"
        "assert 'torch' in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
