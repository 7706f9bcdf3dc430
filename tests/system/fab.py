"""``flwr build`` of this checkout, as a user makes the app bundle (FAB) a SuperLink runs:
shared by tests/system/test_fab.py (what the bundle holds) and
tests/system/test_deployment_launcher.py (a SuperLink runs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ..conftest import REPO, _env

FLWR = Path(sys.executable).parent / "flwr"


def flwr_build(dest: Path) -> tuple[Path, str]:
    """Run ``flwr build --app <checkout>`` in ``dest`` (Flower writes the FAB into the current
    folder) with a Flower home of its own there; return the ``.fab`` file and what
    ``flwr build`` printed. Fails the test, with Flower's output, when no FAB was made."""
    dest.mkdir(parents=True, exist_ok=True)
    env = {**_env(), "FLWR_HOME": str(dest / "flwr-home")}
    done = subprocess.run([str(FLWR), "build", "--app", str(REPO)], cwd=dest, env=env,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    fabs = sorted(dest.glob("*.fab"))
    assert done.returncode == 0 and len(fabs) == 1, out[-3000:]
    return fabs[0], out
