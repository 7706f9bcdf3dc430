"""``flwr build``: the Flower app bundle (FAB) of this checkout follows Flower's app format 1
(``fab-format-version``, ``flwr-version-target``, the LICENSE file) and holds the app and
nothing else (no virtualenv, results, mutants, caches, tests); its code imports from the
bundle alone. A SuperLink running this FAB: tests/system/test_deployment_launcher.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from ..conftest import REPO, _env
from .fab import FLWR, flwr_build

pytestmark = pytest.mark.skipif(not FLWR.exists(), reason="flwr CLI not installed")

APP_PACKAGES = ("fedtext", "strategies", "clients")  # what the ServerApp and ClientApps import
FAB_MAX_BYTES = 10 * 1024 * 1024  # Flower refuses a bigger FAB (flwr.common.constant.FAB_MAX_SIZE)


def _app_sources() -> set[str]:
    """The checkout's Python files of :data:`APP_PACKAGES`, as paths in a FAB."""
    return {p.relative_to(REPO).as_posix() for pkg in APP_PACKAGES for p in (REPO / pkg).rglob("*.py")
            if "__pycache__" not in p.parts}


def test_flwr_build_makes_a_format_1_fab_of_the_app_alone(tmp_path):
    fab, out = flwr_build(tmp_path)
    data = fab.read_bytes()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # Flower's name: <publisher>.<name>.<version with dashes>.<first 8 hex of the SHA-256>.fab
    digest = hashlib.sha256(data).hexdigest()
    assert fab.name == f"fedtext.{project['name']}.{project['version'].replace('.', '-')}.{digest[:8]}.fab", fab
    assert fab.name in out and "missing the following recommended properties" not in out, out
    print(f"flwr build: {fab.name}, {len(data):,} bytes")
    # measured 792,227 bytes (fedtext 0.1.0, Flower 1.42.0, 2026-11-26); the committed results alone
    # are 15 MB, over Flower's cap, and the bundle held 6.2 MB of them before fab-include
    assert len(data) < 2_000_000 < FAB_MAX_BYTES, len(data)
    # `flwr build` in the checkout leaves the bundle there: git ignores it (issue 55), so neither
    # `git status` nor the next bundle carries it
    ignored = subprocess.run(["git", "check-ignore", "-q", fab.name], cwd=REPO, capture_output=True)
    assert ignored.returncode == 0, f"{fab.name} is not ignored by .gitignore"

    with zipfile.ZipFile(fab) as z:
        names = set(z.namelist())
        # the app's code, README (pyproject's readme), LICENSE, Flower's pyproject and manifest
        assert {n.split("/")[0] for n in names} == {*APP_PACKAGES, "README.md", "LICENSE", "pyproject.toml", ".info"}
        assert {n for n in names if n.split("/")[0] in APP_PACKAGES} == _app_sources()
        assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")
                    or n.startswith((".venv", "simulations/", "mutants/", "tests/", "runs/", "docs/"))]
        # every file's SHA-256 and size in bits, as `flwr install` checks them
        manifest = [line.split(",") for line in z.read(".info/CONTENT").decode().splitlines()]
        assert {m[0] for m in manifest} == names - {".info/CONTENT"}
        for path, sha, bits in manifest:
            content = z.read(path)
            assert (hashlib.sha256(content).hexdigest(), len(content) * 8) == (sha, int(bits)), path
        license_text = z.read("LICENSE")
        config = tomllib.loads(z.read("pyproject.toml").decode())

    # app format 1 (Flower >= 1.28): a license file in the bundle, a ">=" lower bound on flwr,
    # and a target version inside the declared range
    assert license_text == (REPO / "LICENSE").read_bytes()
    assert b"Apache License" in license_text and b"Version 2.0, January 2004" in license_text
    assert b"Copyright 2026 fedtext authors" in license_text
    assert config["project"]["license"] == {"file": "LICENSE"}
    app = config["tool"]["flwr"]["app"]
    assert app["fab-format-version"] == 1
    (flwr,) = [Requirement(d) for d in config["project"]["dependencies"] if Requirement(d).name == "flwr"]
    lower = max(Version(s.version) for s in flwr.specifier if s.operator == ">=")
    target = Version(app["flwr-version-target"])
    assert target >= lower and target in flwr.specifier, (target, str(flwr.specifier))
    assert "federations" not in config["tool"]["flwr"]  # Flower drops them from a FAB


def test_the_fabs_code_imports_from_the_bundle_alone(tmp_path):
    """The bundle is self-contained: its ServerApp, ClientApp and every method's model,
    strategy and client import with this checkout (and an editable install of it, which
    would hide a package left out of the FAB) off ``sys.path``."""
    fab, _ = flwr_build(tmp_path / "build")
    app_dir = tmp_path / "app"
    with zipfile.ZipFile(fab) as z:
        z.extractall(app_dir)
    probe = f"""
import json, sys
from pathlib import Path
app = {str(app_dir)!r}
# every other folder holding one of the app's packages goes: the checkout, an editable install's path
sys.path[:] = [app] + [p for p in sys.path if p and not any((Path(p) / pkg).is_dir() for pkg in {APP_PACKAGES!r})]
import fedtext.client_app, fedtext.server_app
from fedtext.common.components import resolve
from fedtext.common.registry import METHODS
for config in METHODS.values():
    for spec in (config.model, config.strategy, config.client):
        if spec:
            resolve(spec)
print(json.dumps({{n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())
                  if n.split(".")[0] in {APP_PACKAGES!r}}}))
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"fedtext.server_app", "strategies.fedavg", "clients.fedavg"} <= set(loaded)
    outside = {n: f for n, f in loaded.items() if f is not None and not Path(f).is_relative_to(app_dir)}
    assert outside == {}, outside
