"""README's commands stay true: CI runs the test command found there."""

from __future__ import annotations

import subprocess

from .conftest import REPO


def test_ci_extracts_the_readme_test_command():
    awk = "/<!-- test-command -->/{f=1; next} f && /^```/{if (n++) exit; next} f"
    cmd = subprocess.run(["awk", awk, "README.md"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert cmd == 'pip install -e ".[test]" && python -m pytest -q tests'
    assert awk in (REPO / ".ci" / "run").read_text()


def test_readme_main_command_runs_the_embedded_defaults():
    readme = (REPO / "README.md").read_text()
    assert "pip install -e . && FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 HF_HUB_OFFLINE=1 flwr run . --stream" in readme


def test_readme_figures_exist_and_come_from_the_plot_command():
    """Every image README shows is a committed PNG under a results folder's figures/, made
    by ``python -m simulations.plot`` from the records beside it."""
    import re

    readme = (REPO / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert len(images) >= 2
    for image in images:
        path = REPO / image
        assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
        assert path.parent.name == "figures" and (path.parent.parent / "runs").is_dir(), image
        assert f"python -m simulations.plot {path.parent.parent.relative_to(REPO)}" in readme, image
