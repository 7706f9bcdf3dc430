"""Tasks: label names, verbalizer words, label descriptions and the cloze template.

A task tells a head how to turn encoder outputs into class logits:

* ``tied`` / ``mlm`` heads read the hidden state at ``[MASK]`` in the template
  ``Temp = [p; e(X); e(It was [MASK].)]`` (eq. (1) of FedDLS) and compare it with the
  verbalizer words (eq. (2)).
* the ``similarity`` head compares the mean-pooled sentence embedding with the
  encoded label descriptions (a sentence encoder's natural zero-shot classifier).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
