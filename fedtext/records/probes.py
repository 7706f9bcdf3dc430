"""Probes of the process and the machine a run happens on: memory (:func:`peak_rss_mb`,
:func:`current_rss_mb`), the machine (:func:`machine`) and the run's provenance
(:func:`provenance`: :func:`git_state` of the code, :func:`package_versions`, the
:data:`LAUNCH_FIELDS` the launcher knows). Nothing here imports torch or writes a file."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import resource
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb() -> float:
    """Resident memory of this process now, in MiB (``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def machine() -> dict[str, Any]:
    """Where a run happened (README numbers quote it)."""
    return {
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def machine_line() -> str:
    """The machine as a table header names it: ``2 CPUs, Linux-...`` (compare, parity)."""
    m = machine()
    return f"{m['cpu_count']} CPUs, {m['platform']}"


# The packages whose versions decide a run's numbers (recorded in its provenance).
# cma: pycma's defaults changed between 3.x and 4.x (step-size rule at d >= 300, CSA damping);
# fedtext pins the rule (fedtext.blackbox.new_es), the record says which pycma ran it.
# scikit-learn: FedDLS's LASSO (coordinate descent) solves with it.
PROVENANCE_PACKAGES = ("fedtext", "flwr", "torch", "transformers", "numpy", "cma", "scikit-learn")
# What the process starting the server knows of the run (None when it does not):
# Flower's run id, the SuperNodes a simulation launched, the nodes connected at training start.
LAUNCH_FIELDS = ("flower_run_id", "num_supernodes", "nodes_at_start")
GIT_TIMEOUT_S = 5.0  # a hung git (network file system, lock) must not hold up a run


def provenance(launch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What made a run: the code (:func:`git_state` of this module's checkout), the package
    versions (:func:`package_versions`) and ``launch``'s :data:`LAUNCH_FIELDS` (None where
    not given). Costs three short git calls and no import.

    Parameters
    ----------
    launch
        Fields of :data:`LAUNCH_FIELDS` the caller knows (e.g. ``{"flower_run_id": 7}``).

    Raises
    ------
    ValueError
        ``launch`` holds a key that is not one of :data:`LAUNCH_FIELDS`.
    """
    return {**git_state(), "versions": package_versions(), **dict.fromkeys(LAUNCH_FIELDS), **launch_fields(launch)}


def launch_fields(fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """``fields`` as a dict, after checking every key is one of :data:`LAUNCH_FIELDS`
    (raises ``ValueError`` naming the others)."""
    unknown = set(fields or {}) - set(LAUNCH_FIELDS)
    if unknown:
        raise ValueError(f"unknown provenance fields {sorted(unknown)} (known: {', '.join(LAUNCH_FIELDS)})")
    return dict(fields or {})


def git_state(path: Path = Path(__file__)) -> dict[str, Any]:
    """``{"git_commit": <40 hex digits>, "git_dirty": <bool>}`` of the git checkout that
    tracks ``path`` (default: this module), or None values where that cannot be told: git
    missing or hung (:data:`GIT_TIMEOUT_S`), no checkout, or ``path`` not tracked there (an
    installed copy inside some repository's ignored virtualenv is not that repository's
    code). Dirty: a tracked file differs from the commit (untracked files, such as new
    results, do not count).
    """
    path = Path(path).resolve()

    def git(*args: str) -> str | None:
        try:  # --no-optional-locks: never write the index of a tree others are working in
            proc = subprocess.run(["git", "--no-optional-locks", "-C", str(path.parent), *args],
                                  capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    if git("ls-files", "--error-unmatch", "--", path.name) is None or (commit := git("rev-parse", "HEAD")) is None:
        return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit.strip(), "git_dirty": None if status is None else bool(status.strip())}


def package_versions() -> dict[str, str | None]:
    """Installed versions of :data:`PROVENANCE_PACKAGES` (None: not installed) and Python's,
    read from package metadata (nothing is imported)."""

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {**{name: version(name) for name in PROVENANCE_PACKAGES}, "python": platform.python_version()}
