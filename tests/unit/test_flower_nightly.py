"""Issue 47 item 2: ``tools/flower_nightly.py`` installs the nightly in place of stable
``flwr`` and nothing else moves (docs/flower.md, "Running the tests on the next Flower").

Nothing here downloads: the pip command lines are checked as written, and ``--dry-run``
prints them without running any."""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import flower_nightly as fn  # noqa: E402

PY = "/v/bin/python"


def _write(tmp_path: Path, deps: list[str], test: list[str]) -> Path:
    p = tmp_path / "pyproject.toml"
    p.write_text("[project]\ndependencies = " + repr(deps).replace("'", '"')
                 + '\n[project.optional-dependencies]\ntest = ' + repr(test).replace("'", '"') + "\n")
    return p


def test_requirements_are_split_out_of_a_written_pyproject(tmp_path):
    p = _write(tmp_path, ["numpy>=2", "flwr[simulation,dp]>=1.41,<1.43", "torch==2.13.0", "peft<1"], ["pytest>=8"])
    reqs = fn.read_requirements(p)
    assert reqs.torch == "torch==2.13.0"
    assert reqs.flwr_extras == ("simulation", "dp")
    assert reqs.others == ("numpy>=2", "peft<1", "pytest>=8")  # pyproject's order, test extra last
    assert fn.nightly_requirement(reqs, None) == "flwr-nightly[simulation,dp]"
    assert fn.nightly_requirement(reqs, "1.43.0.dev20261026") == "flwr-nightly[simulation,dp]==1.43.0.dev20261026"
    # flwr without extras, and names spelled with other separators/case, are still recognized
    bare = fn.read_requirements(_write(tmp_path, ["Flwr>=1", "torch==1.0", "flwr_datasets==0.6.1"], []))
    assert bare.flwr_extras == () and bare.others == ("flwr_datasets==0.6.1",)
    assert fn.nightly_requirement(bare, None) == "flwr-nightly"


def test_the_repos_own_pyproject_every_dependency_but_flwr_is_installed():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = fn.read_requirements()
    assert reqs.torch == "torch==2.13.0" and fn.torch_version(reqs.torch) == "2.13.0"
    assert reqs.flwr_extras == ("simulation",)
    wanted = [r for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]
              if not r.startswith(("flwr[", "flwr>", "torch"))]
    assert list(reqs.others) == wanted and any(r.startswith("pytest") for r in reqs.others)


def test_unpinned_torch_is_refused_a_cuda_build_could_come_in():
    with pytest.raises(ValueError, match="pinned"):
        fn.torch_version("torch>=2.13")
    assert fn.torch_version("torch == 2.13.0") == "2.13.0"


def test_install_order_torch_alone_first_nightly_then_fedtext_without_deps(tmp_path):
    reqs = fn.read_requirements(_write(tmp_path, ["flwr[simulation]>=1.41,<1.43", "torch==2.13.0", "numpy"],
                                       ["pytest"]))
    cmds = fn.install_commands(PY, reqs, repo=Path("/repo"))
    assert cmds[0] == [PY, "-m", "pip", "install", "-q", "--upgrade", "pip"]
    assert cmds[1] == [PY, "-m", "pip", "install", "-q", "torch==2.13.0"]
    assert cmds[2] == [PY, "-m", "pip", "install", "-q", "numpy", "pytest"]
    assert cmds[3] == [PY, "-m", "pip", "install", "-q", "--pre", "flwr-nightly[simulation]"]
    assert cmds[4] == [PY, "-m", "pip", "install", "-q", "--no-deps", "-e", "/repo"]
    # no step names stable flwr, and only the first after pip names torch
    words = [w for c in cmds for w in c]
    assert not [w for w in words if re.match(r"flwr(\[|[<>=!~ ]|$)", w, re.I)]
    assert [i for i, c in enumerate(cmds) if any(w.startswith("torch") for w in c)] == [1]


def test_torch_index_goes_to_the_torch_step_only(tmp_path):
    reqs = fn.read_requirements(_write(tmp_path, ["flwr>=1", "torch==2.13.0", "numpy"], []))
    cmds = fn.install_commands(PY, reqs, "1.43.0.dev1", torch_index="https://download.pytorch.org/whl/cpu")
    assert cmds[1] == [PY, "-m", "pip", "install", "-q", "--extra-index-url", "https://download.pytorch.org/whl/cpu",
                       "torch==2.13.0"]
    assert sum("--extra-index-url" in c for c in cmds) == 1
    assert cmds[3][-1] == "flwr-nightly==1.43.0.dev1"


def test_repair_drops_stable_flwr_then_restores_the_nightlys_files():
    assert fn.repair_commands(PY, "1.43.0.dev7") == [
        [PY, "-m", "pip", "uninstall", "-y", "-q", "flwr"],
        [PY, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "flwr-nightly==1.43.0.dev7"],
    ]


def test_arguments_before_the_double_dash_are_the_tools_after_it_pytests():
    args = fn.parse_args(["--venv", "/tmp/v", "--flwr", "1.43.0.dev1", "--", "tests/unit/test_config.py", "-x"])
    assert args.venv == Path("/tmp/v") and args.flwr == "1.43.0.dev1" and not args.dry_run
    assert args.pytest_args == ["tests/unit/test_config.py", "-x"]
    assert fn.pytest_command(PY, args.pytest_args) == [PY, "-m", "pytest", "tests/unit/test_config.py", "-x"]
    default = fn.parse_args([])
    assert default.venv is None and default.pytest_args == []
    assert fn.pytest_command(PY, []) == [PY, "-m", "pytest", "tests/unit", "-q", "-m", "not slow"]


def test_summary_line_is_pytests_last_count_line_with_the_version():
    out = "....F\n=== short test summary info ===\nFAILED tests/unit/x.py::t\n" \
          "========= 1 failed, 1290 passed, 3 warnings in 301.22s (0:05:01) =========\n"
    assert fn.summarize("1.43.0.dev20261026", out, []) == (
        "flwr-nightly 1.43.0.dev20261026: 1 failed, 1290 passed, 3 warnings in 301.22s (0:05:01) "
        "(tests/unit -q -m not slow)")
    assert fn.summarize("1.43.0.dev1", "12 passed in 3.00s\n", ["tests/unit/test_config.py"]).endswith(
        ": 12 passed in 3.00s (tests/unit/test_config.py)")
    assert "no pytest summary line" in fn.summarize("1.43.0.dev1", "ImportError: boom\n", [])


def test_dry_run_prints_every_step_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fn.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    monkeypatch.setattr(fn.subprocess, "Popen", lambda *a, **k: pytest.fail(f"ran {a}"))
    venv = tmp_path / "nightly"
    assert fn.main(["--dry-run", "--venv", str(venv)]) == 0
    lines = capsys.readouterr().out.splitlines()
    py = str(venv / "bin" / "python")
    assert shlex.split(lines[0]) == [sys.executable, "-m", "venv", str(venv)]
    assert shlex.split(lines[2]) == [py, "-m", "pip", "install", "-q", "torch==2.13.0"]
    assert shlex.split(lines[4]) == [py, "-m", "pip", "install", "-q", "--pre", "flwr-nightly[simulation]"]
    assert shlex.split(lines[5]) == [py, "-m", "pip", "install", "-q", "--no-deps", "-e", str(REPO)]
    assert lines[6].startswith(fn.CONDITIONAL) and lines[6].endswith("uninstall -y -q flwr")
    assert lines[-1] == f"(cd {shlex.quote(str(REPO))} && {shlex.join([py, '-m', 'pytest', 'tests/unit', '-q', '-m', 'not slow'])})"
    assert not venv.exists()
