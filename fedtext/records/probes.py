"""Probes of the process and the machine a run happens on: memory (:func:`peak_rss_mb`,
:func:`current_rss_mb`), the machine (:func:`machine`) and the run's provenance
(:func:`provenance`: :func:`git_state` of the code, :func:`package_versions`, the
:data:`LAUNCH_FIELDS` the launcher knows, Flower's app bundle included (:func:`fab_fields`),
and :func:`code_origin`, which of them names the code). Nothing here imports torch or
writes a file."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import resource
import subprocess
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def proc_stat_fields(pid: int | str = "self") -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses): index 0 is the state (field 3), 11 and 12 user and system ticks (fields 14,
    15), 19 the start time (field 22). Raises OSError where it cannot be read."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()


def process_start_time(pid: int | str = "self") -> float:
    """When process ``pid`` started, in epoch seconds: ``/proc/<pid>/stat``'s start time (clock
    ticks after boot) plus the boot time (``/proc/stat``'s ``btime``). Where ``/proc`` lacks
    them, now (a start-up interval then begins at the first line of Python that asks)."""
    try:
        ticks = int(proc_stat_fields(pid)[19])  # field 22
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return time.time()


TASK_START_ENV = "FEDTEXT_TASK_START"  # set by a warm ClientApp process (fedtext.node.warm_exec) when its task arrives


def task_start_time() -> float:
    """When this process's task began, in epoch seconds: for a process started ahead of its task
    (:mod:`fedtext.node.warm_exec`) the moment its task token arrived (``$FEDTEXT_TASK_START``), else
    :func:`process_start_time`. A start-up interval that begins here counts what the task waited
    for, not how long a warm process sat ready."""
    try:
        return float(os.environ[TASK_START_ENV])
    except (KeyError, ValueError):
        return process_start_time()


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
# fedtext pins the rule (fedtext.learning.blackbox.new_es), the record says which pycma ran it.
# scikit-learn: FedDLS's LASSO (coordinate descent) solves with it.
PROVENANCE_PACKAGES = ("fedtext", "flwr", "torch", "transformers", "numpy", "cma", "scikit-learn")
# What the process starting the server knows of the run (None when it does not):
# Flower's run id, the SuperNodes a simulation launched, the nodes connected at training start,
# and the Flower app bundle (FAB) the run's code was installed from (:func:`fab_fields`):
# under `flwr run` the ServerApp imports an installed copy of the app, not the checkout, so
# git cannot name the code there; the FAB's SHA-256 does (`flwr build` of the same files
# gives the same bytes: fixed dates, sorted entries).
FAB_FIELDS = ("fab_id", "fab_version", "fab_hash")
LAUNCH_FIELDS = ("flower_run_id", "num_supernodes", "nodes_at_start", "node_platforms", *FAB_FIELDS)
# Where a run's code came from (:func:`code_origin`), most exact first: a git commit (with
# its dirty flag), the FAB's hash, or only the version of an installed fedtext.
CODE_ORIGINS = ("git", "fab", "installed")
GIT_TIMEOUT_S = 5.0  # a hung git (network file system, lock) must not hold up a run


def provenance(launch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What made a run: the code (:func:`git_state` of this module's checkout), the package
    versions (:func:`package_versions`), ``launch``'s :data:`LAUNCH_FIELDS` (None where
    not given) and ``code_origin`` (:func:`code_origin`: which of them names the code).
    Costs three short git calls and no import.

    Parameters
    ----------
    launch
        Fields of :data:`LAUNCH_FIELDS` the caller knows (e.g. ``{"flower_run_id": 7}``).

    Raises
    ------
    ValueError
        ``launch`` holds a key that is not one of :data:`LAUNCH_FIELDS`.
    """
    prov = {**git_state(), "versions": package_versions(), **dict.fromkeys(LAUNCH_FIELDS), **launch_fields(launch)}
    return {**prov, "code_origin": code_origin(prov)}


def code_origin(prov: Mapping[str, Any]) -> str | None:
    """Which field of a provenance block names the code that ran (:data:`CODE_ORIGINS`):
    ``"git"`` where the code is tracked by a git checkout (``git_commit``, with
    ``git_dirty``), else ``"fab"`` where Flower installed it from an app bundle
    (``fab_hash``, the SHA-256 of the FAB, and ``fab_version``), else ``"installed"`` where
    only fedtext's version is known (an installed wheel), else None.
    """
    versions = prov.get("versions") if isinstance(prov.get("versions"), Mapping) else {}
    if prov.get("git_commit"):
        return "git"
    if prov.get("fab_hash"):
        return "fab"
    return "installed" if versions.get("fedtext") else None


def fab_fields(run: object) -> dict[str, str | None]:
    """:data:`FAB_FIELDS` of Flower's run object (``grid.run``, a ``flwr`` ``Run``): the app
    bundle's id (``<publisher>/<name>``), version (pyproject's ``[project].version``) and
    SHA-256. Flower leaves them empty where no FAB was made (``run_simulation``): None
    here. Read by attribute, so any object with these names (a test's fake) will do."""
    return {name: (str(value) if (value := getattr(run, name, None)) else None) for name in FAB_FIELDS}


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


def short_commit() -> str | None:
    """This checkout's commit, 7 hex digits (:func:`git_state`), None where git cannot tell."""
    return (git_state()["git_commit"] or "")[:7] or None


def package_versions() -> dict[str, str | None]:
    """Versions of :data:`PROVENANCE_PACKAGES` (None: not installed) and Python's, read from
    package metadata (nothing is imported): each package's installed distribution
    (:func:`distribution_version`), fedtext's from the code that runs (:func:`fedtext_version`)."""
    versions = {name: distribution_version(name) for name in PROVENANCE_PACKAGES}
    return {**versions, "fedtext": fedtext_version(), "python": platform.python_version()}


def distribution_version(name: str) -> str | None:
    """The version of the installed distribution ``name``, else of a distribution that
    provides the import package ``name`` under another name: Flower's nightly builds are
    the distribution ``flwr-nightly`` of the package ``flwr``, so
    ``importlib.metadata.version("flwr")`` finds nothing there. None: neither is installed.
    """
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pass
    # {import package: [distributions]}, e.g. {"flwr": ["flwr-nightly"]}; sorted: the same
    # answer whatever order the environment lists them in
    for dist in sorted(importlib.metadata.packages_distributions().get(name.replace("-", "_"), [])):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def fedtext_version(root: Path = Path(__file__).resolve().parents[2]) -> str | None:
    """The version of the fedtext code that runs: ``[project].version`` of fedtext's
    ``pyproject.toml`` in ``root``, the folder holding the ``fedtext`` package (a checkout,
    or the app Flower installed from a FAB), else the installed distribution's (a wheel:
    no pyproject beside it). An editable install elsewhere does not answer for a FAB's copy.
    """
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        project = {}
    if isinstance(project, dict) and project.get("name") == "fedtext" and isinstance(project.get("version"), str):
        return project["version"]
    return distribution_version("fedtext")
