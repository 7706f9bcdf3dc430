"""Tasks: label names, verbalizer words, label descriptions and the cloze template.

A task tells a head how to turn encoder outputs into class logits:

* ``tied`` / ``mlm`` heads read the hidden state at ``[MASK]`` in the template
  ``Temp = [p; e(X); e(It was [MASK].)]`` (eq. (1) of FedDLS) and compare it with the
  verbalizer words (eq. (2)).
* the ``similarity`` head compares the mean-pooled sentence embedding with the
  encoded label descriptions (a sentence encoder's natural zero-shot classifier).

Besides the built-in :data:`TASKS`, a dataset of one's own gets a task built from its
label names (:func:`custom_task`): from ``label-names`` in the run-config, a
``task.toml`` in the dataset folder (:func:`read_task_file`), or its string labels.
``fedtext.learning.data.labelled`` decides which (docs/own-data.md).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Task:
    """One text classification task.

    Attributes
    ----------
    name
        Registry key.
    labels
        Human-readable label names; index = integer label.
    verbalizer
        One word per label, used by the ``tied``/``mlm`` heads at ``[MASK]``.
    descriptions
        One sentence per label, used by the ``similarity`` head.
    template
        Cloze template with ``{text}`` and ``{mask}`` placeholders (``tied``/``mlm``).
    """

    name: str
    labels: tuple[str, ...]
    verbalizer: tuple[str, ...]
    descriptions: tuple[str, ...]
    template: str = "{text} It was {mask}."

    @property
    def num_classes(self) -> int:
        return len(self.labels)


_SENTIMENT = dict(
    labels=("negative", "positive"),
    verbalizer=("bad", "great"),
    descriptions=("This is negative, it is bad.", "This is positive, it is great."),
)

TASKS: dict[str, Task] = {
    "demo": Task(name="demo", **_SENTIMENT),
    "sst2": Task(name="sst2", **_SENTIMENT),
    "amazon": Task(
        name="amazon",
        labels=("negative", "positive"),
        verbalizer=("bad", "great"),
        descriptions=(
            "A negative product review: bad, disappointing.",
            "A positive product review: great, recommended.",
        ),
    ),
    "ag_news": Task(
        name="ag_news",
        labels=("World", "Sports", "Business", "Sci/Tech"),
        verbalizer=("world", "sports", "business", "science"),
        descriptions=(
            "World news about politics, countries and international affairs.",
            "Sports news about games, teams and players.",
            "Business news about companies, markets and the economy.",
            "Science and technology news about computers, software and research.",
        ),
        template="{mask} news: {text}",
    ),
}

# Hub dataset names and directory names that imply a task (``task=auto``).
_ALIASES = {
    "demo": "demo",
    "sst2": "sst2",
    "sst-2": "sst2",
    "glue/sst2": "sst2",
    "stanfordnlp/sst2": "sst2",
    "ag_news": "ag_news",
    "ag-news": "ag_news",
    "fancyzhx/ag_news": "ag_news",
    "amazon": "amazon",
    "books": "amazon",
    "dvd": "amazon",
    "electronics": "amazon",
    "kitchen": "amazon",
}


def resolve_task(task: str, dataset: str) -> Task:
    """Return the task named by ``task``, or guessed from ``dataset`` when ``auto``.

    Raises
    ------
    ValueError
        If ``task=auto`` and the dataset name implies no known task.
    """
    if task != "auto":
        return TASKS[task]
    candidates = [dataset.lower().rstrip("/"), Path(dataset.rstrip("/")).name.lower()]
    for name in candidates:
        if name in _ALIASES:
            return TASKS[_ALIASES[name]]
    raise ValueError(
        f"cannot guess the task of dataset '{dataset}'; set task= one of: {', '.join(sorted(TASKS))}"
    )


# ------------------------------------------------------------------ custom tasks
TASK_FILE = "task.toml"  # a dataset folder's own task (names, verbalizer, descriptions, template)
TASK_FILE_KEYS = ("name", "labels", "verbalizer", "descriptions", "template")
DEFAULT_TEMPLATE = Task.__dataclass_fields__["template"].default


@dataclass(frozen=True)
class TaskFile:
    """A dataset folder's ``task.toml``: every field optional (empty = not given)."""

    path: str
    name: str = ""
    labels: tuple[str, ...] = ()
    verbalizer: tuple[str, ...] = ()
    descriptions: tuple[str, ...] = ()
    template: str = ""

    @property
    def task_fields(self) -> list[str]:
        """The fields that only a task built from the file can use (not a built-in task)."""
        return [k for k in ("verbalizer", "descriptions", "template") if getattr(self, k)]


def read_task_file(path: Path) -> TaskFile:
    """Read and check a ``task.toml`` (every error is one ``ValueError`` line).

    ``labels`` (label names in id order), ``verbalizer`` (one word per label),
    ``descriptions`` (one sentence per label), ``template`` (``{text}`` once and
    ``{mask}``) and ``name``; unknown keys are refused.
    """
    try:
        raw: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path}: not a readable TOML task file ({why})") from None
    unknown = sorted(set(raw) - set(TASK_FILE_KEYS))
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {unknown}; a task file takes {', '.join(TASK_FILE_KEYS)}")
    out: dict[str, Any] = {}
    for key in ("labels", "verbalizer", "descriptions"):
        if key in raw:
            value = raw[key]
            if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
                raise ValueError(f"{path}: {key} must be a list of non-empty strings, got {value!r}")
            out[key] = tuple(v.strip() for v in value)
    for key in ("name", "template"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key].strip():
                raise ValueError(f"{path}: {key} must be a non-empty string, got {raw[key]!r}")
            out[key] = raw[key].strip()
    if "template" in out:
        check_template(out["template"], str(path))
    if len(set(out.get("labels", ()))) != len(out.get("labels", ())):
        raise ValueError(f"{path}: labels name a class twice: {list(out['labels'])}")
    n = len(out.get("labels", ()))
    for key in ("verbalizer", "descriptions"):
        if n and key in out and len(out[key]) != n:
            raise ValueError(f"{path}: {len(out[key])} {key} for {n} labels; give one per label")
    return TaskFile(path=str(path), **out)


def check_template(template: str, source: str) -> None:
    """A cloze template holds ``{text}`` once and ``{mask}`` (else the head cannot place them)."""
    if template.count("{text}") != 1 or "{mask}" not in template:
        raise ValueError(f"{source}: template must contain {{text}} once and {{mask}}, got {template!r}")
    try:
        template.format(text="", mask="")
    except (KeyError, IndexError, ValueError):
        raise ValueError(f"{source}: template may hold no other {{...}} than {{text}} and {{mask}}, "
                         f"got {template!r}") from None


def default_verbalizer(labels: tuple[str, ...]) -> tuple[str, ...]:
    """One word per label for the ``tied``/``mlm`` heads: the label name in lower case,
    ``_`` and ``-`` as spaces (the head uses its first sub-token)."""
    return tuple(name.lower().replace("_", " ").replace("-", " ") for name in labels)


def default_descriptions(labels: tuple[str, ...]) -> tuple[str, ...]:
    """One text per label for the ``similarity`` head: the label name, ``_`` as spaces."""
    return tuple(name.replace("_", " ") for name in labels)


def custom_task(name: str, labels: tuple[str, ...], verbalizer: tuple[str, ...] = (),
                descriptions: tuple[str, ...] = (), template: str = "") -> Task:
    """A task of one's own data: its label names in id order; what is not given defaults to
    :func:`default_verbalizer`, :func:`default_descriptions` and ``"{text} It was {mask}."``.
    A name that a built-in task has gets `` (custom)`` appended, so a record never
    passes one for the other."""
    return Task(
        name=f"{name} (custom)" if name in TASKS else name,
        labels=tuple(labels),
        verbalizer=tuple(verbalizer) or default_verbalizer(labels),
        descriptions=tuple(descriptions) or default_descriptions(labels),
        template=template or DEFAULT_TEMPLATE,
    )
