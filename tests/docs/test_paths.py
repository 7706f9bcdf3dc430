"""Every repo path README.md and docs/ name exists (issue 47 item 5).

A *named path* is a word of a backticked span (```fedtext/methods/<m>/```, ```deploy/superlink.sh
--state ...```) or a link target (relative to its page) that starts with one of the repo's
top-level folders, :data:`PREFIXES`. Before it is looked up:

* ``::test_name`` (a pytest node id) and ``#anchor`` are cut off, and trailing ``. , ; : )``
  (sentence punctuation) stripped;
* ``{a,b}`` is expanded as the shell does (``tradeoff-s{0,1,2}.md`` is three paths), each checked;
* ``<method>`` and ``<m>`` stand for a registered method's module name (``bbt_fed``, the
  package of its config under ``fedtext/methods/``): at least one method must have the path
  (``fedtext/methods/<method>.py`` names none: methods are packages);
* any other placeholder ``<...>`` (``<experiment name>``, ``<paper>``) and ``*`` stand for one
  path segment or part of one and must match at least one existing name, never a private one
  (``_`` or ``.`` first, as ``__init__.py``);
* a path that commands *write* and that is not committed is listed in :data:`WRITTEN`, with
  where it comes from; nothing else is skipped.
"""

from __future__ import annotations

import functools
import itertools
import re
import subprocess
from pathlib import Path

import pytest

from ..conftest import REPO

PREFIXES = ("fedtext/", "simulations/", "tests/", "tools/", "docs/", "strategies/", "clients/", "deploy/", ".ci/")
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "papers").glob("*.md"))]

#: named paths that only exist after a command wrote them (not committed), and which command
WRITTEN = {
    "simulations/results/<stem>-paper": "compare <file> --profile paper writes it on a GPU machine; none is committed",
}

CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"<[^<>/]+>")
METHOD = re.compile(r"<(?:method|m)>")


def method_modules() -> list[str]:
    """Each registered method's module name (its config's package: ``fedtext.methods.<m>.config``)."""
    from fedtext.common.registry import CONFIGS

    return sorted({c.__module__.split(".")[2] for c in CONFIGS})
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def _expand_braces(word: str) -> list[str]:
    """``a{0,1}b`` -> ``[a0b, a1b]`` (every brace group, as the shell does)."""
    parts = BRACES.split(word)  # literal, alternatives, literal, ...
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def named_paths(page: Path) -> list[str]:
    """The repo paths ``page`` names (module doc), relative to the repo root, as written
    (placeholders kept), each once, in order."""
    text = page.read_text()
    words: list[str] = []
    for span in CODE.findall(text):
        # a placeholder may hold spaces (<experiment name>): keep it one word
        span = PLACEHOLDER.sub(lambda m: m.group(0).replace(" ", "_"), span)
        words += re.split(r"[\s=\"'(]+", span)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        resolved = (page.parent / target.split("#")[0]).resolve()
        if resolved.is_relative_to(REPO):
            words.append(str(resolved.relative_to(REPO)) + ("/" if target.split("#")[0].endswith("/") else ""))
    out: list[str] = []
    for word in words:
        if not word.startswith(PREFIXES):
            continue
        word = word.split("::")[0].split("#")[0].rstrip(".,;:)")
        for path in _expand_braces(word):
            if path not in out:
                out.append(path)
    return out


@functools.cache
def tracked() -> frozenset[str]:
    """Every file git tracks and every folder above one (repo-relative): what a fresh clone
    has. An untracked or ignored file here (a build output, a run folder) must not make a
    named path pass that a clone lacks. Without git (an unpacked archive): None of this,
    the working tree decides (:func:`exists`)."""
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return frozenset()
    names = set()
    for f in files.decode().split("\0"):
        parts = f.split("/")
        names.update("/".join(parts[:i]) for i in range(1, len(parts) + 1) if f)
    return frozenset(names)


def exists(path: str) -> bool:
    """Whether ``path`` (placeholders and ``*`` allowed, module doc) names something the
    repo tracks (:func:`tracked`; the working tree where git is not there)."""
    if METHOD.search(path):
        return any(exists(METHOD.sub(m, path)) for m in method_modules())
    known = tracked()
    if not PLACEHOLDER.search(path) and "*" not in path:
        return path.rstrip("/") in known if known else (REPO / path).exists()
    pattern = PLACEHOLDER.sub("\0", path).replace("*", "\0")
    regex = "".join(r"[^/_.][^/]*" if c == "\0" else re.escape(c) for c in pattern.rstrip("/"))
    if known:
        return any(re.fullmatch(regex, name) for name in known)
    glob = pattern.replace("\0", "*")
    return any(re.fullmatch(regex, str(p.relative_to(REPO))) for p in REPO.glob(glob.rstrip("/")))


def test_the_rules_on_written_examples(tmp_path):
    assert _expand_braces("r/tradeoff-s{0,1}-x{a,b}.md") == ["r/tradeoff-s0-xa.md", "r/tradeoff-s0-xb.md",
                                                             "r/tradeoff-s1-xa.md", "r/tradeoff-s1-xb.md"]
    page = tmp_path / "p.md"
    page.write_text("Run `python tools/mutation.py fes` and `tests/system/test_flwr_run.py::test_x`, see "
                    "`fedtext/methods/<m>/config.py`; [a](docs/flower.md#versions) `runs/<run-id>/` "
                    "`simulations/results/<experiment name>/`.\n")
    assert named_paths(page) == ["tools/mutation.py", "tests/system/test_flwr_run.py",
                                 "fedtext/methods/<m>/config.py", "simulations/results/<experiment_name>/"]
    assert exists("fedtext/methods/<m>/config.py") and exists("simulations/results/<experiment_name>/")
    assert not exists("fedtext/methods/<method>.py")  # methods are packages (injected.py is no method)
    assert exists("strategies/<m>.py") and exists("fedtext/methods/<method>/model.py")
    assert exists("fedtext/methods/<x>.py")  # a generic placeholder: injected.py, subspace.py
    assert not exists("fedtext/methods/<x>/no_such_file.py")
    assert not exists("fedtext/no_such_module.py") and exists("fedtext/") and exists(".ci/run")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_repo_path_a_page_names_exists(page):
    missing = [p for p in named_paths(page) if p not in WRITTEN and not exists(p)]
    assert not missing, f"{page.relative_to(REPO)} names paths that do not exist: {missing}"


def test_written_paths_are_still_named_somewhere():
    named = {p for page in PAGES for p in named_paths(page)}
    assert set(WRITTEN) <= named, set(WRITTEN) - named


def test_paths_are_checked_against_what_git_tracks():
    """A fresh clone decides: tracked files and their folders count, build outputs do not."""
    known = tracked()
    if not (REPO / ".git").exists():
        pytest.skip("no git checkout: the working tree decides")
    assert {"fedtext", "fedtext/common/registry.py", "docs/flower.md"} <= known
    assert not any("__pycache__" in name for name in known)
    assert exists("fedtext/common/registry.py") and not exists("fedtext/__pycache__")
