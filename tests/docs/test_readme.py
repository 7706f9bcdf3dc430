"""README's commands stay true (the test command CI extracts with awk: tests/integration/test_readme_ci.py)."""

from __future__ import annotations

from ..conftest import REPO


def test_readme_main_command_runs_the_embedded_defaults():
    readme = (REPO / "README.md").read_text()
    assert "pip install -e . && FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 HF_HUB_OFFLINE=1 flwr run . --stream" in readme
