"""Run fedtext's unit tier against the next Flower (``flwr-nightly`` from PyPI)::

    python tools/flower_nightly.py                       # newest nightly, fresh venv in a tmp dir
    python tools/flower_nightly.py --venv /tmp/nightly   # that venv (made when missing, reused when there)
    python tools/flower_nightly.py --flwr 1.43.0.dev20261026   # one nightly
    python tools/flower_nightly.py --dry-run             # print the commands, run nothing
    python tools/flower_nightly.py -- tests/unit/test_config.py -q   # other pytest arguments

It makes its own virtual environment, installs the repo's dependencies there with
``flwr-nightly`` in place of ``flwr`` (docs/flower.md, "Running the tests on the next
Flower"), runs ``python -m pytest tests/unit -q -m "not slow"`` from the repo root and prints
one summary line last::

    flwr-nightly 1.43.0.dev20261026: 1290 passed, 4 failed in 301.2s (tests/unit -q -m not slow)

Exit status: pytest's (0 when every test passed), or 2 when the install failed.

Why not ``pip install -e . flwr-nightly``: ``flwr-nightly`` is a separate distribution that
installs the same ``flwr`` package directory, and ``pyproject.toml`` asks for
``flwr[simulation]>=1.41,<1.43``, which no ``flwr`` installed as ``flwr-nightly`` satisfies,
so pip installs stable ``flwr`` over the nightly's files. The install therefore goes in
this order, each pin read from ``pyproject.toml`` (one definition per fact):

1. ``torch`` alone, at the project's pin (``torch==2.13.0``, the CPU wheel where pip's
   configuration offers it, as CI's ``.ci/run`` relies on; ``--torch-index URL`` adds an
   index such as https://download.pytorch.org/whl/cpu on a machine without one), so no
   later step can pull a CUDA build: torch is already satisfied;
2. every other dependency and the ``[test]`` extra, *without* the ``flwr`` requirement;
3. ``flwr-nightly[simulation]`` (``--pre``: nightlies are ``.devN`` releases);
4. fedtext itself, editable, with ``--no-deps`` (its ``flwr<1.43`` bound is not resolved);
5. when a stable ``flwr`` got in anyway, it is uninstalled and the nightly reinstalled
   over the files the uninstall took (both own ``flwr/``);
6. a check in the venv: ``import flwr`` is the nightly's file, no ``flwr`` distribution is
   installed, torch is at the pin.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NIGHTLY = "flwr-nightly"
#: pytest arguments when none are given after ``--``: README's unit tier without Flower runs
DEFAULT_PYTEST_ARGS = ("tests/unit", "-q", "-m", "not slow")
#: printed in place of a command that only runs when its condition holds (dry run)
CONDITIONAL = "# only when a stable flwr got installed: "

#: checks run inside the new venv after the install (step 6): the nightly is what
#: ``import flwr`` finds, no stable ``flwr`` distribution is left, torch is at the pin
CHECK = """\
import importlib.metadata as md, sys
import flwr, torch
nightly = md.distribution({nightly!r})
where = [str(p) for p in nightly.files or () if str(p) == 'flwr/__init__.py']
assert where and str(nightly.locate_file(where[0])) == flwr.__file__, (flwr.__file__, where)
try:
    md.distribution('flwr')
except md.PackageNotFoundError:
    pass
else:
    sys.exit('a stable flwr distribution is installed beside ' + {nightly!r})
assert torch.__version__.split('+')[0] == {torch!r}, torch.__version__
print({nightly!r}, nightly.version, '| torch', torch.__version__, '| flwr at', flwr.__file__)
"""


class InstallError(RuntimeError):
    """A step of the install failed; its command is the message."""


@dataclass(frozen=True)
class Requirements:
    """What ``pyproject.toml`` asks for, split the way the install needs it.

    Attributes
    ----------
    torch:
        The torch requirement (``torch==2.13.0``), installed first and alone.
    flwr_extras:
        The extras of the ``flwr`` requirement (``simulation``), kept for the nightly.
    others:
        Every other runtime dependency plus the ``[test]`` extra, in pyproject's order.
    """

    torch: str
    flwr_extras: tuple[str, ...]
    others: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.torch.startswith("torch"):
            raise ValueError(f"not a torch requirement: {self.torch!r}")
        if any(_name(r) in ("flwr", "torch") for r in self.others):
            raise ValueError(f"flwr/torch must not be among the other requirements: {self.others}")


def _name(requirement: str) -> str:
    """The distribution name of a PEP 508 requirement, normalized (``flwr[simulation]>=1`` -> ``flwr``)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not m:
        raise ValueError(f"not a requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def read_requirements(pyproject: Path = REPO / "pyproject.toml") -> Requirements:
    """Split ``[project] dependencies`` + the ``test`` extra into torch, flwr's extras, the rest."""
    project = tomllib.loads(pyproject.read_text())["project"]
    torch: str | None = None
    extras: tuple[str, ...] | None = None
    others: list[str] = []
    for req in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        name = _name(req)
        if name == "torch":
            torch = req
        elif name == "flwr":
            m = re.match(r"\s*flwr\[([^\]]*)\]", req)
            extras = tuple(e.strip() for e in m.group(1).split(",")) if m else ()
        else:
            others.append(req)
    if torch is None or extras is None:
        raise ValueError(f"{pyproject}: dependencies must name torch and flwr")
    return Requirements(torch=torch, flwr_extras=extras, others=tuple(others))


def torch_version(requirement: str) -> str:
    """The version a ``torch==X`` pin names (the install checks torch stayed there)."""
    m = re.fullmatch(r"torch\s*==\s*([0-9][^\s;,]*)", requirement.strip())
    if not m:
        raise ValueError(f"torch must be pinned with == in pyproject.toml, not {requirement!r}")
    return m.group(1)


def nightly_requirement(reqs: Requirements, version: str | None) -> str:
    """``flwr-nightly[simulation]`` (newest) or ``flwr-nightly[simulation]==<version>``."""
    extras = f"[{','.join(reqs.flwr_extras)}]" if reqs.flwr_extras else ""
    return f"{NIGHTLY}{extras}" + (f"=={version}" if version else "")


def install_commands(python: str, reqs: Requirements, version: str | None = None,
                     torch_index: str | None = None, repo: Path = REPO) -> list[list[str]]:
    """Steps 1-4 of the module docstring: the pip command lines, in order."""
    pip = [python, "-m", "pip", "install", "-q"]
    index = ["--extra-index-url", torch_index] if torch_index else []
    return [
        [python, "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [*pip, *index, reqs.torch],
        [*pip, *reqs.others],
        [*pip, "--pre", nightly_requirement(reqs, version)],
        [*pip, "--no-deps", "-e", str(repo)],
    ]


def repair_commands(python: str, nightly_version: str) -> list[list[str]]:
    """Step 5: drop a stable ``flwr`` and put back the nightly's files it shared."""
    return [
        [python, "-m", "pip", "uninstall", "-y", "-q", "flwr"],
        [python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
         f"{NIGHTLY}=={nightly_version}"],
    ]


def pytest_command(python: str, pytest_args: Sequence[str]) -> list[str]:
    """The test command, run from the repo root."""
    return [python, "-m", "pytest", *(pytest_args or DEFAULT_PYTEST_ARGS)]


def venv_python(venv: Path) -> str:
    """The venv's interpreter (POSIX layout: this tool runs where CI does)."""
    return str(venv / "bin" / "python")


def summarize(nightly_version: str, pytest_output: str, pytest_args: Sequence[str]) -> str:
    """One line: the nightly's version and pytest's own last summary line (``N passed, M failed in Xs``)."""
    counts = "no pytest summary line (see the output above)"
    for line in reversed(pytest_output.splitlines()):
        stripped = line.strip("= ").strip()
        if re.search(r"\b(passed|failed|error|errors|skipped|deselected|no tests ran)\b", stripped) \
                and re.search(r"\bin [0-9.]+s\b", stripped):
            counts = stripped
            break
    return f"{NIGHTLY} {nightly_version}: {counts} ({' '.join(pytest_args or DEFAULT_PYTEST_ARGS)})"


def _env() -> dict[str, str]:
    """Offline at run time, as CI: no hub downloads, Flower installs no app dependencies."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1", PYTHONUNBUFFERED="1")
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)  # the venv's packages only
    return env


def _run(cmd: list[str]) -> None:
    print("+", shlex.join(cmd), flush=True)
    if subprocess.run(cmd, env=_env(), cwd=REPO).returncode != 0:
        raise InstallError(shlex.join(cmd))


def _installed(python: str, dist: str) -> str | None:
    """The version of ``dist`` in the venv, or None."""
    out = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                         env=_env(), capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Arguments before ``--`` are this tool's; after it, pytest's."""
    argv = list(argv)
    pytest_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(prog="python tools/flower_nightly.py",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--venv", type=Path, default=None,
                   help="virtual environment to make (or reuse, when it has a python); default: a new tmp dir")
    p.add_argument("--flwr", metavar="VERSION", default=None,
                   help="flwr-nightly version (e.g. 1.43.0.dev20261026); default: the newest")
    p.add_argument("--torch-index", metavar="URL", default=None,
                   help="extra index for the CPU torch wheel, e.g. https://download.pytorch.org/whl/cpu")
    p.add_argument("--install-only", action="store_true", help="install and check, run no tests")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = p.parse_args(argv)
    args.pytest_args = pytest_args
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Make the venv, install, check, run pytest, print the summary line; the exit status."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    reqs = read_requirements()
    torch = torch_version(reqs.torch)
    venv = args.venv or Path(tempfile.gettempdir()) / f"fedtext-flwr-nightly-{os.getpid()}"
    python = venv_python(venv)
    make_venv = [sys.executable, "-m", "venv", str(venv)]
    check = [python, "-c", CHECK.format(nightly=NIGHTLY, torch=torch)]
    test = pytest_command(python, args.pytest_args)
    if args.dry_run:
        print(shlex.join(make_venv))
        for cmd in install_commands(python, reqs, args.flwr, args.torch_index):
            print(shlex.join(cmd))
        for cmd in repair_commands(python, args.flwr or "<installed nightly>"):
            print(CONDITIONAL + shlex.join(cmd))
        print(shlex.join(check))
        if not args.install_only:
            print(f"(cd {shlex.quote(str(REPO))} && {shlex.join(test)})")
        return 0
    try:
        if not Path(python).exists():
            _run(make_venv)
        for cmd in install_commands(python, reqs, args.flwr, args.torch_index):
            _run(cmd)
        nightly = _installed(python, NIGHTLY)
        if nightly is None:
            raise InstallError(f"{NIGHTLY} is not installed in {venv}")
        if _installed(python, "flwr") is not None:
            for cmd in repair_commands(python, nightly):
                _run(cmd)
        _run(check)
    except InstallError as e:
        print(f"{NIGHTLY}: install failed at: {e}", file=sys.stderr)
        return 2
    if args.install_only:
        print(f"{NIGHTLY} {nightly} installed in {venv}")
        return 0
    print("+", shlex.join(test), flush=True)
    start = time.monotonic()
    # stream pytest's output as it comes and keep it for the summary line
    proc = subprocess.Popen(test, env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    rc = proc.wait()
    print(f"(pytest took {time.monotonic() - start:.0f} s; venv kept at {venv})")
    print(summarize(nightly, "".join(lines), args.pytest_args))
    return rc


if __name__ == "__main__":
    sys.exit(main())
