"""The git commit and dirty flag of a run's provenance, read by ``git`` subprocesses from a
repository made here and from this checkout; no git or no checkout is ``None``, not an
error. The rest of provenance: tests/unit/test_provenance.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fedtext import records
from fedtext.records import git_state, provenance

from ..conftest import REPO

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(folder), *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@needs_git
def test_git_state_tells_commit_and_tracked_changes(tmp_path):
    _git(tmp_path, "init", "-q")
    code = tmp_path / "code.py"
    code.write_text("x = 1\n")
    _git(tmp_path, "add", "code.py")
    _git(tmp_path, "commit", "-q", "-m", "c")
    assert git_state(code) == {"git_commit": _git(tmp_path, "rev-parse", "HEAD"), "git_dirty": False}
    (tmp_path / "new-result.json").write_text("{}")  # untracked: still clean
    assert git_state(code)["git_dirty"] is False
    code.write_text("x = 2\n")
    assert git_state(code)["git_dirty"] is True
    assert git_state(tmp_path / "new-result.json") == {"git_commit": None, "git_dirty": None}  # not tracked


def test_git_state_unknown_without_a_checkout_or_git(tmp_path, monkeypatch):
    (tmp_path / "code.py").write_text("")
    assert git_state(tmp_path / "code.py") == {"git_commit": None, "git_dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    assert git_state() == {"git_commit": None, "git_dirty": None}

    def hung(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], records.GIT_TIMEOUT_S)

    monkeypatch.setattr(subprocess, "run", hung)  # the module git_state calls through
    assert git_state() == {"git_commit": None, "git_dirty": None}


@needs_git
def test_provenance_of_this_checkout_is_its_head():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    assert provenance()["git_commit"] == _git(REPO, "rev-parse", "HEAD")
