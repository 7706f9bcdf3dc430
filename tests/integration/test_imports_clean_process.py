"""The dashboard's data layer loads without torch (the dashboard starts in a second),
checked in a fresh interpreter; the import graph itself: tests/unit/test_imports.py."""

from __future__ import annotations

import subprocess
import sys

from ..conftest import REPO


def test_the_dashboard_data_layer_loads_without_torch():
    code = "import simulations.dashboard_data, sys; assert 'torch' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
