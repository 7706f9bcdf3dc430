"""README's commands stay true: CI runs the test command found there."""

from __future__ import annotations

import subprocess

from ..conftest import REPO


def test_ci_extracts_the_readme_test_command():
    awk = "/<!-- test-command -->/{f=1; next} f && /^```/{if (n++) exit; next} f"
    cmd = subprocess.run(["awk", awk, "README.md"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert cmd == 'pip install -e ".[test]" && python -m pytest -q tests'
    assert awk in (REPO / ".ci" / "run").read_text()


def test_readme_main_command_runs_the_embedded_defaults():
    readme = (REPO / "README.md").read_text()
    assert "pip install -e . && FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 HF_HUB_OFFLINE=1 flwr run . --stream" in readme

