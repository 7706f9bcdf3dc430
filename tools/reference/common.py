"""What every differential check shares: loading a file of the authors' checkout with stand-ins
for the packages it imports but does not use in the checked step, the fixture format, and the
comparison both the harness and the unit tests make.

Fixture (``tests/unit/reference/<paper>.json``)::

    {"paper": "fedbpt",
     "authors": {"repo": "NVIDIA/NVFlare", "commit": "<sha>", "files": ["research/fed-bpt/src/global_es.py"]},
     "generated": {"date": "2026-11-25", "command": "...", "packages": {"cma": "3.4.0", ...}},
     "checks": {"<name>": {"function": "...", "authors_file": "...", "fedtext_file": "...",
                           "inputs": {...}, "expected": {...}, "tolerance": 1e-10,
                           "max_abs_diff": 0.0, "verdict": "agrees", "note": "..."}}}

``expected`` is what the authors' code returned; ``max_abs_diff`` the largest absolute
difference of fedtext's side from it over every number of ``expected`` when the fixture was
written; ``verdict`` is ``agrees`` when that is within ``tolerance``, else a word on the
departure (``departs``), which the check's ``note`` explains and the paper's page writes down.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "unit" / "reference"


# ------------------------------------------------------------------ the authors' checkout
def parser(paper: str, repo: str | None) -> argparse.ArgumentParser:
    """The command line every harness module takes: ``--repo`` (a checkout of ``repo``) and ``--out``."""
    p = argparse.ArgumentParser(prog=f"python -m tools.reference.{paper}", description=__doc__.split("\n")[0])
    if repo is not None:
        p.add_argument("--repo", type=Path, required=True,
                       help=f"a checkout of github.com/{repo} (git clone; nothing of it is copied into fedtext)")
    p.add_argument("--out", type=Path, default=FIXTURES / f"{paper}.json", help="the fixture to write")
    p.add_argument("--authors-python", type=Path, default=None,
                   help="compute the authors' side in this interpreter (a venv with the authors' pinned packages, "
                        "e.g. cma==3.4.0); fedtext's side runs in this one")
    p.add_argument("--authors-only", action="store_true", help=argparse.SUPPRESS)  # the child of --authors-python
    return p


def authors_side(args: argparse.Namespace, paper: str, compute: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """The authors' results ``compute(repo)``: here, or in ``--authors-python`` (a child process
    running this module with ``--authors-only``, which prints them as JSON). With
    ``--authors-only`` (the child), print them and exit."""
    if args.authors_only:
        print(json.dumps(plain(compute(args.repo))))
        raise SystemExit(0)
    if args.authors_python is None:
        return compute(args.repo)
    cmd = [str(args.authors_python), "-m", f"tools.reference.{paper}", "--repo", str(args.repo.resolve()),
           "--authors-only"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def versions_in(python: Path | None, packages: tuple[str, ...]) -> dict[str, str | None]:
    """Versions of ``packages`` in interpreter ``python`` (this one when None)."""
    if python is None:
        return {p: _version(p) for p in packages}
    code = ("import importlib.metadata as m, json\n"
            "def v(p):\n try: return m.version(p)\n except m.PackageNotFoundError: return None\n"
            f"print(json.dumps({{p: v(p) for p in {list(packages)!r}}}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def commit_of(repo: Path) -> str | None:
    """The checkout's commit (``git rev-parse HEAD``), None when it is not a git checkout."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def stub(name: str, **attrs: Any) -> types.ModuleType:
    """A stand-in module ``name`` holding ``attrs`` (for an import the checked step never uses)."""
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


@contextlib.contextmanager
def stand_ins(stubs: Mapping[str, types.ModuleType], paths: tuple[Path, ...] = ()) -> Iterator[None]:
    """``stubs`` in ``sys.modules`` and ``paths`` on ``sys.path`` for the duration (both restored)."""
    saved = {n: sys.modules.get(n) for n in stubs}
    sys.modules.update(stubs)
    sys.path[:0] = [str(p) for p in paths]
    try:
        yield
    finally:
        del sys.path[: len(paths)]
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def load(path: Path, name: str, stubs: Mapping[str, types.ModuleType] | None = None,
         paths: tuple[Path, ...] = ()) -> types.ModuleType:
    """Import the authors' file ``path`` as module ``name`` (``stubs``: stand-ins for imports it
    makes but the checked functions do not need; ``paths``: folders its own imports resolve in)."""
    if not path.is_file():
        raise SystemExit(f"{path} not found: is --repo a checkout of the authors' repository?")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    with stand_ins(stubs or {}, paths):
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ comparing
def flat(value: Any) -> np.ndarray:
    """Every number in ``value`` (nested dicts, lists, arrays, scalars) as one float64 vector,
    in a fixed order (dict keys sorted)."""
    if isinstance(value, Mapping):
        parts = [flat(value[k]) for k in sorted(value)]
        return np.concatenate(parts) if parts else np.zeros(0)
    if isinstance(value, (list, tuple)) and value and not np.isscalar(value[0]) and not isinstance(value[0], (list, tuple)):
        parts = [flat(v) for v in value]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.asarray(value, dtype=np.float64).reshape(-1)


def max_abs_diff(ours: Any, expected: Any) -> float:
    """Largest absolute difference between two results of the same structure (inf when the
    structures differ: another shape, another count of numbers)."""
    a, b = flat(ours), flat(expected)
    if a.shape != b.shape:
        return float("inf")
    if not a.size:
        return 0.0
    if np.array_equal(np.isnan(a), np.isnan(b)):
        a, b = np.nan_to_num(a), np.nan_to_num(b)
    return float(np.max(np.abs(a - b)))


def plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars made JSON-writable (lists, floats, ints)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


# ------------------------------------------------------------------ fixtures
def check(function: str, authors_file: str, fedtext_file: str, inputs: Mapping[str, Any], expected: Any,
          ours: Any, tolerance: float, note: str = "", departs: str = "") -> dict[str, Any]:
    """One check's fixture entry; ``ours`` is fedtext's side on ``inputs``. ``departs`` names a
    departure that is expected (an option kept beside the authors' behaviour, written down)."""
    diff = max_abs_diff(ours, expected)
    agrees = diff <= tolerance
    if departs and agrees:
        raise SystemExit(f"{function}: expected a departure ({departs}) but fedtext agrees (max |diff| {diff:.3g})")
    verdict = "agrees" if agrees else f"departs: {departs}" if departs else "DIFFERS"
    return {"function": function, "authors_file": authors_file, "fedtext_file": fedtext_file,
            "inputs": plain(inputs), "expected": plain(expected), "tolerance": tolerance,
            "max_abs_diff": diff, "verdict": verdict, "note": note}


def write(out: Path, paper: str, repo: str | None, commit: str | None, files: list[str],
          checks: Mapping[str, dict[str, Any]], packages: tuple[str, ...] = ("numpy",),
          authors_python: Path | None = None) -> None:
    """Write the fixture and print its table rows; exit 1 when a check differs unexpectedly.
    ``packages``: whose versions the fixture records, on the authors' side (``authors_python``)
    and on fedtext's."""
    doc = {
        "paper": paper,
        "authors": {"repo": repo, "commit": commit, "files": files,
                    "packages": versions_in(authors_python, packages)},
        "generated": {"date": datetime.date.today().isoformat(),
                      "command": " ".join(["python -m", f"tools.reference.{paper}", *_portable(sys.argv[1:])]),
                      "packages": versions_in(None, packages)},
        "checks": dict(checks),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({k: v for k, v in doc.items() if k != "checks"}, indent=1, allow_nan=False)[:-2]
    body = ",\n".join(f"  {json.dumps(n)}: {json.dumps(c, allow_nan=False)}" for n, c in doc["checks"].items())
    out.write_text(f'{head},\n "checks": {{\n{body}\n }}\n}}\n')  # one line per check
    for name, c in checks.items():
        print(f"{paper:7s} {name:34s} max |diff| {c['max_abs_diff']:.3g}  {c['verdict']}")
    print(f"wrote {out}")
    if any(c["verdict"] == "DIFFERS" for c in checks.values()):
        raise SystemExit(1)


def _portable(argv: list[str]) -> list[str]:
    """The command line with this machine's paths replaced by what they stand for."""
    names = {"--repo": "<checkout>", "--authors-python": "<python with the authors' packages>", "--out": None}
    out, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in names:
            if names[a] is not None:
                out += [a, names[a]]
            skip = True
        else:
            out.append(a)
    return out


def read(paper: str) -> dict[str, Any]:
    """The committed fixture of ``paper``."""
    return json.loads((FIXTURES / f"{paper}.json").read_text())


OursFn = Callable[[dict[str, Any]], Any]
