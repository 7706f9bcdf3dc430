"""Datasets, partitions and few-shot sampling.

Three sources, one shape (``pandas.DataFrame`` with ``text``, ``label``, ``domain``):

* ``demo``: a small multi-domain sentiment set generated deterministically here, so
  ``flwr run .`` works on a fresh offline machine (4 domains x 300 texts).
* a local directory: ``train.*`` and ``test.*`` (or ``dev.*`` / ``validation.*``) in
  TSV, CSV, JSONL or Parquet with columns ``text``, ``label`` and optionally
  ``domain``; or sub-directories laid out like that, one per domain (the domain is the
  sub-directory's name), as in ``../shared/data/amazon``.
* a Hugging Face hub name (``sst2``, ``ag_news``, ...) through ``datasets`` when a hub
  is reachable; offline this fails with one line that says so.

Other column names are read through ``text-column`` / ``label-column``; labels are
integers 0..C-1 or label names (strings). :func:`labelled` then resolves the run's task
and maps string labels to ids (docs/own-data.md): a name's position in ``label-names``,
the folder's ``task.toml``, the built-in task's labels, or the sorted distinct train
labels. The data's classes must be exactly the task's, else one ``ConfigError`` line.

Clients are cut from the train split by flwr-datasets partitioners (``iid``,
``dirichlet`` on the label, ``dirichlet-client`` = each client's label mix from a Dirichlet,
equal sizes, ``domain`` = one client per natural domain). Inside its
partition each client holds out a local test split, then samples ``k`` labelled shots
per class; the rest of its partition is kept as unlabelled data (for semi-supervised
methods such as FeS).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedtext.common.config import ConfigError, RunConfig, looks_like_path
from fedtext.common.tasks import TASK_FILE, TASKS, Task, TaskFile, custom_task, read_task_file, resolve_task

log = logging.getLogger("fedtext")

def _read_tsv(path: Path, label_column: str = "label") -> pd.DataFrame:
    """A TSV as GLUE writes it: quotes are text (``QUOTE_NONE``), except that a file
    whose labels only parse with quoted fields (texts with tabs or newlines inside
    quotes) is read that way."""
    df = pd.read_csv(path, sep="\t", quoting=3, keep_default_na=False)
    if label_column in df.columns and not _integer_like(df[label_column]):
        quoted = pd.read_csv(path, sep="\t", keep_default_na=False)
        if label_column in quoted.columns and _integer_like(quoted[label_column]):
            log.info("fedtext: %s has quoted fields with tabs or newlines; read with quoting", path)
            return quoted
    return df


def _integer_like(col: pd.Series) -> bool:
    return bool(pd.to_numeric(col, errors="coerce").notna().all())


_READERS = {  # path, label column -> frame
    ".tsv": _read_tsv,
    ".csv": lambda p, _label: pd.read_csv(p, keep_default_na=False),
    ".jsonl": lambda p, _label: pd.read_json(p, lines=True),
    ".parquet": lambda p, _label: pd.read_parquet(p),
}
_TEST_NAMES = ("test", "dev", "validation")


@dataclass(frozen=True)
class Splits:
    """A dataset's train and test splits (columns ``text``, ``label``, ``domain``).

    As loaded (:func:`load_splits`) the labels are integers (``int64``) or label names
    (``str``, both splits alike); after :func:`labelled` integers 0..C-1. ``names``: the
    label names the source itself gives (a hub dataset's ``ClassLabel``), else empty.
    """

    train: pd.DataFrame
    test: pd.DataFrame
    names: tuple[str, ...] = ()

    @property
    def string_labels(self) -> bool:
        """Whether the labels are names (strings) rather than integers."""
        return not pd.api.types.is_integer_dtype(self.train["label"])

    @property
    def num_classes(self) -> int:
        return int(max(self.train["label"].max(), self.test["label"].max())) + 1

    @property
    def domains(self) -> list[str]:
        return sorted(self.train["domain"].unique())


@dataclass(frozen=True)
class ClientData:
    """What one client holds: labelled shots, a local test split, unlabelled rest."""

    train: pd.DataFrame
    test: pd.DataFrame
    unlabeled: pd.DataFrame
    partition_id: int


# ----------------------------------------------------------------------------- demo
_DEMO_DOMAINS = {
    "books": (
        ["this novel", "the book", "the author's new story", "this biography", "the sequel"],
        ["the plot", "the characters", "the writing", "the ending", "the pacing"],
    ),
    "movies": (
        ["this film", "the movie", "the director's latest", "this documentary", "the remake"],
        ["the acting", "the script", "the soundtrack", "the ending", "the visuals"],
    ),
    "electronics": (
        ["this laptop", "the headphones", "this phone", "the charger", "this camera"],
        ["the battery", "the screen", "the sound", "the build quality", "the software"],
    ),
    "restaurants": (
        ["this restaurant", "the cafe", "this bistro", "the pizza place", "this diner"],
        ["the food", "the service", "the dessert", "the staff", "the atmosphere"],
    ),
}
_POS = ["wonderful", "excellent", "delightful", "superb", "great", "impressive", "lovely"]
_NEG = ["terrible", "awful", "disappointing", "poor", "dreadful", "boring", "mediocre"]
_POS_CLAUSE = ["I would gladly recommend it", "worth every penny", "I loved it", "a real pleasure"]
_NEG_CLAUSE = ["I want my money back", "a waste of time", "I regret it", "never again"]
_NEUTRAL = ["I tried it last week", "a friend told me about it", "I had read the reviews", ""]


def make_demo(n_per_domain: int = 300, seed: int = 1234) -> Splits:
    """Generate the embedded ``demo`` dataset deterministically.

    Binary sentiment over four domains. A third of the texts are harder: negated
    opinions ("not ... at all") or mixed clauses where the final verdict decides, so a
    zero-shot classifier is clearly below 100 % and tuning has something to learn.
    80 % of each domain is train, 20 % test.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for domain, (subjects, aspects) in _DEMO_DOMAINS.items():
        for _ in range(n_per_domain):
            label = int(rng.integers(2))
            good, bad = (_POS, _NEG) if label else (_NEG, _POS)
            subj, aspect = rng.choice(subjects), rng.choice(aspects)
            kind = rng.integers(3)
            if kind == 0:  # plain opinion
                clause = rng.choice(_POS_CLAUSE if label else _NEG_CLAUSE)
                text = f"{subj.capitalize()} was {rng.choice(good)}, {clause}."
            elif kind == 1:  # negated opposite opinion
                text = f"{subj.capitalize()} was not {rng.choice(bad)} at all; {aspect} was {rng.choice(good)}."
            else:  # mixed: the last clause carries the verdict
                text = (
                    f"{rng.choice(_NEUTRAL).capitalize()}. {aspect.capitalize()} was {rng.choice(bad)}, "
                    f"but overall {subj} was {rng.choice(good)}."
                ).lstrip(". ")
            rows.append((text, label, domain))
    df = pd.DataFrame(rows, columns=["text", "label", "domain"])
    is_test = np.zeros(len(df), dtype=bool)
    for domain in _DEMO_DOMAINS:
        idx = np.flatnonzero(df["domain"].to_numpy() == domain)
        is_test[rng.choice(idx, size=len(idx) // 5, replace=False)] = True
    return Splits(
        train=df[~is_test].reset_index(drop=True), test=df[is_test].reset_index(drop=True)
    )


# ---------------------------------------------------------------------- local files
def _read_split(directory: Path, names: tuple[str, ...], label_column: str = "label",
                root: Path | None = None) -> tuple[pd.DataFrame, Path] | None:
    """The first of ``names`` with a known extension in ``directory``, read; None if none.
    ``root``: the dataset folder (default ``directory``), which the file must resolve inside
    (:func:`inside_dataset`)."""
    for name in names:
        for ext, reader in _READERS.items():
            path = directory / f"{name}{ext}"
            if path.is_file():
                inside_dataset(path, directory if root is None else root)
                return _read_file(lambda p: reader(p, label_column), path), path
    return None


def inside_dataset(path: Path, root: Path) -> Path:
    """``path`` resolved, refused in one line when that lies outside the dataset folder ``root``.

    ``dataset=`` names a folder, and only files in it are read: a ``train.csv`` (or a domain
    folder, or ``task.toml``) that is a symlink to a file elsewhere would have any readable
    file parsed and trained on, unseen. Records readers refuse the same
    (:func:`fedtext.records.reader.file_problem`). A link inside the folder is fine."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise ConfigError(f"{path}: resolves outside the dataset folder {root.resolve()} (to {resolved}): not read")
    return resolved


def _read_file(reader, path: Path) -> pd.DataFrame:
    """``reader(path)``, with every way a data file can be unreadable as one line."""
    try:
        return reader(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: the file is empty (need a header line: text, label)") from None
    except UnicodeDecodeError:
        data = path.read_bytes()
        try:  # pandas reports offsets within a chunk: find the file offset
            data.decode("utf-8")
            where = ""
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            where = f" (line {line}, byte {exc.start}: {data[exc.start:exc.start + 1]!r})"
        raise ConfigError(f"{path}: not UTF-8 text{where}; re-encode it as UTF-8") from None
    except (pd.errors.ParserError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{path}: cannot be parsed ({first[:200]})") from None


def normalise(df: pd.DataFrame, domain: str, source: str, text_column: str = "text",
              label_column: str = "label") -> pd.DataFrame:
    """One split as read -> columns ``text``, ``label``, ``domain`` (local files and hub
    datasets alike).

    ``text_column`` / ``label_column`` name the columns to read (one line naming the
    columns present when one is missing). Labels stay integers (``int64``; a float such as
    0.4 or a negative number is refused) or, when no label reads as a number, label
    names (``str``, stripped); a column mixing numbers and names is refused.

    Texts: a missing one (null in JSONL or Parquet, ``None`` in a hub split) is the empty
    text, not the word ``None``. A split whose texts are all empty or whitespace is refused
    in one line naming ``source`` (it trained silently on nothing). A split where only
    some are empty keeps them, with one warning: each is a labelled row the data holds,
    and dropping rows would change every partition and count the user did not ask to
    change; a model sees only its template and prompt for them.
    """
    missing = [c for c in (text_column, label_column) if c not in df.columns]
    if missing:
        keys = " / ".join(k for k, c in (("text-column", text_column), ("label-column", label_column)) if c in missing)
        raise ConfigError(f"{source}: missing column(s) {missing}; it has {[str(c) for c in df.columns]} "
                          f"(set {keys} to the one to read)")
    if len(df) == 0:
        raise ConfigError(f"{source}: a header but no rows")
    texts = df[text_column]
    texts = texts.where(texts.notna(), "").astype(str)
    empty = texts.str.strip() == ""
    if empty.all():
        raise ConfigError(f"{source}: every text in column '{text_column}' is empty or whitespace ({len(df)} rows): "
                          "nothing to learn from (set text-column to the column that holds the texts)")
    if empty.any():
        log.warning("fedtext: %s: %d of %d texts are empty (first: row %d); they are kept as empty texts",
                    source, int(empty.sum()), len(df), int(np.flatnonzero(empty.to_numpy())[0]))
    out = pd.DataFrame({
        "text": texts.to_numpy(),
        "label": _labels(df[label_column], source),
        "domain": df["domain"].astype(str).to_numpy() if "domain" in df.columns else domain,
    })
    return out


def _labels(col: pd.Series, source: str) -> np.ndarray:
    """A label column -> ``int64`` labels, or ``object`` label names (see :func:`normalise`)."""
    values = col.tolist()
    absent = col.isna().to_numpy() | np.array([isinstance(v, str) and not v.strip() for v in values], dtype=bool)
    if absent.any():
        row = int(np.flatnonzero(absent)[0])
        raise ConfigError(f"{source}: row {row} has no label ({values[row]!r})")
    numeric = pd.to_numeric(col, errors="coerce")
    if numeric.isna().all() and all(isinstance(v, str) for v in values):  # label names
        return np.array([v.strip() for v in values], dtype=object)
    # a float label (0.4, 1.6) would be truncated by astype(int) to another class: refuse it
    bad = numeric.isna() | (numeric != np.floor(numeric))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        mixed = " among numbers (label names: every label a name)" if numeric.notna().any() and numeric.isna().any() else ""
        raise ConfigError(f"{source}: labels must be integers 0..C-1; row {row} has {values[row]!r}{mixed}")
    labels = numeric.astype(np.int64).to_numpy()
    if (labels < 0).any():
        raise ConfigError(f"{source}: negative labels found; labels must be integers 0..C-1")
    return labels


_normalise = normalise  # the name before issue 37


def _check_kinds(train: pd.DataFrame, test: pd.DataFrame, source: str) -> None:
    """Both splits (and every domain) hold integer labels, or both label names."""
    names = [not pd.api.types.is_integer_dtype(df["label"]) for df in (train, test)]
    mixed = any(is_names and not all(isinstance(v, str) for v in df["label"])  # domains of both kinds, concatenated
                for is_names, df in zip(names, (train, test)))
    if len(set(names)) > 1 or mixed:
        raise ConfigError(f"{source}: some files have integer labels and others label names; use one kind")


def load_local(directory: Path, text_column: str = "text", label_column: str = "label") -> Splits:
    """Load ``train``/``test`` files from ``directory`` or from its domain sub-dirs (every
    file resolving inside ``directory``: :func:`inside_dataset`)."""
    train = _read_split(directory, ("train",), label_column)
    if train is not None:
        test = _read_split(directory, _TEST_NAMES, label_column)
        if test is None:
            raise ConfigError(f"{directory}: found train.* but no test.*, dev.* or validation.*")
        splits = Splits(
            normalise(train[0], directory.name, str(train[1]), text_column, label_column),
            normalise(test[0], directory.name, str(test[1]), text_column, label_column),
        )
        _check_kinds(splits.train, splits.test, str(directory))
        return splits
    trains, tests = [], []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        tr, te = _read_split(sub, ("train",), label_column, directory), _read_split(sub, _TEST_NAMES, label_column,
                                                                                     directory)
        if tr is not None and te is not None:
            trains.append(normalise(tr[0], sub.name, str(tr[1]), text_column, label_column))
            tests.append(normalise(te[0], sub.name, str(te[1]), text_column, label_column))
    if not trains:
        raise ConfigError(
            f"{directory}: no train.{{tsv,csv,jsonl,parquet}} with test/dev file, "
            "neither directly nor in domain sub-directories"
        )
    splits = Splits(pd.concat(trains, ignore_index=True), pd.concat(tests, ignore_index=True))
    _check_kinds(splits.train, splits.test, str(directory))
    return splits


_HUB_TEXT_COLUMNS = ("text", "sentence", "content", "review")  # tried in turn for text-column=text


def load_hub(name: str, text_column: str = "text", label_column: str = "label") -> Splits:
    """Load a Hugging Face hub dataset (online only) into the common shape, through the
    same :func:`normalise` as local files; a ``ClassLabel`` column's names come along."""
    import datasets

    try:
        dd = datasets.load_dataset(name)
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot load", say why
        raise ConfigError(
            f"cannot load dataset '{name}' from the Hugging Face hub ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); offline? point dataset= at a "
            "local directory (docs/data.md)"
        ) from None
    return hub_splits(name, {split: dd[split] for split in dd}, text_column, label_column)


def hub_splits(name: str, dd: dict[str, Any], text_column: str = "text", label_column: str = "label") -> Splits:
    """A hub dataset's splits (``datasets.Dataset`` objects by split name) -> :class:`Splits`:
    ``train`` and the first of test/dev/validation whose labels are given (GLUE's test
    split has -1 everywhere)."""
    if "train" not in dd:
        raise ConfigError(f"hub dataset '{name}' has no train split (it has {', '.join(dd)})")
    columns = list(dd["train"].column_names)
    if label_column not in columns:
        raise ConfigError(f"hub dataset '{name}': missing column(s) ['{label_column}']; it has {columns} "
                          "(set label-column to the one to read)")

    def labelled_split(split: str) -> bool:
        labels = dd[split][label_column] if label_column in dd[split].column_names else []
        return len(labels) > 0 and not any(isinstance(v, (int, np.integer)) and v < 0 for v in labels)

    test_name = next((s for s in _TEST_NAMES if s in dd and labelled_split(s)), None)
    if test_name is None:
        raise ConfigError(f"hub dataset '{name}' has no labelled train and test/validation splits")
    if text_column == "text":
        text_column = next((c for c in _HUB_TEXT_COLUMNS if c in columns), "text")
    frames = [normalise(dd[split].to_pandas(), name, f"hub dataset '{name}' ({split})", text_column, label_column)
              for split in ("train", test_name)]
    _check_kinds(*frames, f"hub dataset '{name}'")
    feature = getattr(dd["train"], "features", {}).get(label_column)
    names = tuple(str(n) for n in getattr(feature, "names", None) or ())
    return Splits(*frames, names=names)


@functools.lru_cache(maxsize=4)
def load_splits(dataset: str, text_column: str = "text", label_column: str = "label") -> Splits:
    """Load ``demo``, a local directory or a hub dataset (cached per process), labels as
    the data has them (:func:`labelled` maps them to a task's ids)."""
    if dataset == "demo":
        return make_demo()
    if looks_like_path(dataset):
        path = Path(dataset).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"dataset path '{dataset}' does not exist (resolved to {path})")
        return load_local(path, text_column, label_column)
    return load_hub(dataset, text_column, label_column)


def warn_about_texts(cfg: RunConfig) -> None:
    """One warning, with its counts, for each of two ways a dataset's texts run silently wrong.

    * The test split repeats training texts: the accuracy it measures then includes
      recall of what was trained on (the Blitzer Amazon folders' ``test.tsv`` holds nearly
      every ``train.tsv`` review). Counted as test rows whose exact text is a train text.
    * The text column holds no text: every text is a number, or one of the label values
      (``text-column`` naming a column of ids, scores or a copy of the labels). The model
      would train on digits or read its answer. A text column that *is* the label column
      is refused at config time (:class:`fedtext.common.config.RunConfig`); another column holding
      the same values can be deliberate (a toy task), so it is a warning. A column of the
      label *names* is refused before this runs, when the data is labelled
      (:func:`check_texts_are_not_label_names`).

    Called once per run, by the server (:func:`fedtext.server_app.build`), on the data as
    read (labels as the file has them). The ``demo`` set is generated here and skipped:
    its template sentences repeat by construction.
    """
    if cfg.dataset == "demo":
        return
    splits = load_splits(cfg.dataset, cfg.text_column, cfg.label_column)
    where = f"dataset '{cfg.dataset}'"
    texts = pd.concat([splits.train["text"], splits.test["text"]], ignore_index=True).str.strip()
    labels = {str(v).strip() for df in (splits.train, splits.test) for v in df["label"].unique()}
    kind = ("are label values", "read its answer") if texts.isin(labels).all() else (
        ("are numbers", "train on digits") if pd.to_numeric(texts, errors="coerce").notna().all() else None)
    if kind is not None:  # then its few values repeat between the splits by themselves: no second warning
        log.warning("fedtext: %s: all %d texts of text-column '%s' %s (%d distinct): the model would %s; set "
                    "text-column to the column that holds the texts", where, len(texts), cfg.text_column, kind[0],
                    texts.nunique(), kind[1])
        return
    repeated = splits.test["text"].isin(set(splits.train["text"]))
    if repeated.any():
        log.warning("fedtext: %s: %d of %d test texts (%d distinct) also appear in the train split; the test "
                    "accuracy counts texts the model trained on", where, int(repeated.sum()), len(splits.test),
                    splits.test["text"][repeated].nunique())


# ------------------------------------------------------------------ labels and task
SORTED_LABELS = "the train split's labels (sorted)"  # where label names come from when nothing names them
@dataclass(frozen=True)
class Labelled:
    """A run's data and task: ``splits`` with labels 0..C-1 and the ``task`` they belong
    to. ``label_names``: the names in id order that the data's labels were read by (a
    string label in the data is the id of its name here); ``source``: where they came from."""

    task: Task
    splits: Splits
    label_names: tuple[str, ...]
    source: str


def data_key(cfg: RunConfig) -> tuple[str, ...]:
    """The run-config keys that decide the labelled data (a cache key)."""
    return (cfg.dataset, cfg.task, cfg.text_column, cfg.label_column, cfg.label_names, cfg.label_descriptions)


def labelled(cfg: RunConfig) -> Labelled:
    """The run's task and its data with labels 0..C-1 (cached per process; every error one
    ``ConfigError`` line). See :func:`label_data` for the rules."""
    return _labelled(*data_key(cfg))


@functools.lru_cache(maxsize=4)
def _labelled(dataset: str, task: str, text_column: str, label_column: str, label_names: str,
              label_descriptions: str) -> Labelled:
    cfg = RunConfig(dataset=dataset, task=task, text_column=text_column, label_column=label_column,
                    label_names=label_names, label_descriptions=label_descriptions)
    splits = load_splits(dataset, text_column, label_column)
    path = cfg.dataset_path
    task_file = None
    if path is not None and (path / TASK_FILE).is_file():
        try:
            task_file = read_task_file(inside_dataset(path / TASK_FILE, path))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    default_name = path.name if path is not None else dataset
    out = label_data(splits, task, cfg.label_name_list, cfg.label_description_list, task_file,
                     dataset=dataset, default_name=default_name)
    check_texts_are_not_label_names(splits, out.label_names, dataset, text_column, label_column)
    return out


LABEL_NAME_SAMPLE = 1000  # texts compared with the label names: a seeded sample, cheap on a 120,000-row split
# the share of them equal to a label name that refuses the data: real texts are almost never exactly a label
# name (the shared sst2: 2 of its 68,221 texts; ag_news, amazon: none), a column of label names nearly always is
LABEL_NAME_SHARE = 0.9


def check_texts_are_not_label_names(splits: Splits, names: tuple[str, ...], dataset: str, text_column: str,
                                    label_column: str) -> None:
    """Refuse, in one line, a text column that holds the label *names* (``pos``, ``neg``) while
    the label column holds the labels: the model would read its answer, and the labels being
    integers hid it from :func:`warn_about_texts`'s check of label values. Texts are compared
    stripped and case-folded; at least :data:`LABEL_NAME_SHARE` of a seeded sample of
    :data:`LABEL_NAME_SAMPLE` texts (train and test) being names refuses the data."""
    texts = pd.concat([splits.train["text"], splits.test["text"]], ignore_index=True)
    if len(texts) > LABEL_NAME_SAMPLE:
        texts = texts.sample(LABEL_NAME_SAMPLE, random_state=0)
    folded = {str(n).strip().casefold() for n in names}
    hits = int(texts.astype(str).str.strip().str.casefold().isin(folded).sum())
    if hits >= LABEL_NAME_SHARE * len(texts):
        raise ConfigError(f"dataset '{dataset}': {hits} of {len(texts)} texts (sampled) of text-column '{text_column}' "
                          f"are label names ({_short(names)}), the classes label-column '{label_column}' holds: the "
                          "model would read its answer; set text-column to the column that holds the texts")


def label_data(splits: Splits, task: str, label_names: tuple[str, ...] = (), descriptions: tuple[str, ...] = (),
               task_file: TaskFile | None = None, dataset: str = "", default_name: str = "custom") -> Labelled:
    """Resolve the task of ``splits`` and map their labels to its ids.

    The label names (id order) come from the first of: ``label_names`` (run-config
    ``label-names``), the task file's ``labels``, the built-in task (``task=<name>``, or
    the one ``task=auto`` guesses from the dataset's name when neither of the first two
    is given), the hub's ``ClassLabel`` names, the sorted distinct string labels of the
    train split. With a built-in task the names only read the data's labels (as many as
    the task has classes); otherwise the task is built from them (:func:`custom_task`),
    with the task file's verbalizer, descriptions (or ``descriptions``) and template.

    String labels map to their name's position; integer labels stay. The labels of train
    and test together must be exactly the task's classes, else one ``ConfigError`` line
    (a 3-class dataset with ``task=ag_news``, a label past the last class, a label-names
    or task file that names other classes than the data has).
    """
    base: Task | None = None
    if task != "auto":
        base = TASKS[task]
    elif not label_names and task_file is None:  # a folder with its own task file is not a built-in one
        try:
            base = resolve_task("auto", dataset)
        except ValueError:
            base = None
    if label_names:
        names, source = tuple(label_names), "label-names"
    elif task_file and task_file.labels:
        names, source = task_file.labels, task_file.path
    elif base is not None:
        names, source = base.labels, f"task {base.name}"
    elif splits.names:
        names, source = splits.names, f"the hub's label names of '{dataset}'"
    elif splits.string_labels:
        names, source = tuple(sorted(set(splits.train["label"]))), SORTED_LABELS
    else:
        raise ConfigError(
            f"cannot guess the task of dataset '{dataset}': its labels are integers without names; set "
            f"label-names=<name of 0>,<name of 1>,..., add a {TASK_FILE} to the folder (docs/own-data.md), or set "
            f"task= one of: {', '.join(sorted(TASKS))}"
        )
    if base is not None:
        extra = list(task_file.task_fields) if task_file else []
        if descriptions:
            extra.append("label-descriptions")
        if extra:
            raise ConfigError(f"task={base.name} brings its own verbalizer, descriptions and template; "
                              f"{', '.join(extra)} ({task_file.path if task_file else 'run-config'}) would be "
                              "ignored: set task=auto to build the task from them")
        if len(names) != base.num_classes:
            raise ConfigError(f"{source} gives {len(names)} label names ({', '.join(names)}) but task {base.name} "
                              f"has {base.num_classes} classes ({', '.join(base.labels)})")
        resolved = base
    else:
        tf = task_file or TaskFile(path="")
        for key, given in (("verbalizer", tf.verbalizer), ("descriptions", descriptions or tf.descriptions)):
            if given and len(given) != len(names):
                where = "label-descriptions" if key == "descriptions" and descriptions else f"{tf.path}: {key}"
                raise ConfigError(f"{where} gives {len(given)} entries for the {len(names)} label names "
                                  f"({', '.join(names)}) from {source}")
        resolved = custom_task(tf.name or default_name, names, tf.verbalizer, descriptions or tf.descriptions,
                               tf.template)
    named = {"label-names": "label-names", f"task {resolved.name}": source, SORTED_LABELS: "the train split",
             (task_file.path if task_file else None): TASK_FILE}.get(source, "the hub's label names")
    what = named if named.startswith("task ") else f"{source} (task {resolved.name})"
    hint = ("set task=auto and give the names by label-names= or a task.toml (docs/own-data.md)"
            if base is not None else "fix the names, or the data's labels")
    if source == SORTED_LABELS:
        hint = "the test split has labels the train split lacks; name every class by label-names= or a task.toml"
    if splits.string_labels:
        index = {name: i for i, name in enumerate(names)}
        present = sorted(set(splits.train["label"]) | set(splits.test["label"]))
        if set(present) != set(names):
            raise ConfigError(f"dataset '{dataset}': its labels do not fit {what}: the data has {len(present)} "
                              f"classes ({_short(present)}), {named} has {len(names)} ({_short(names)}); {hint}")
        splits = Splits(*(df.assign(label=df["label"].map(index).astype(np.int64)) for df in (splits.train,
                                                                                              splits.test)))
    else:
        present = sorted(set(splits.train["label"].tolist()) | set(splits.test["label"].tolist()))
        if set(present) != set(range(len(names))):
            raise ConfigError(f"dataset '{dataset}': its labels do not fit {what}: the data has {len(present)} "
                              f"classes (labels {_short(present)}), {named} has {len(names)} "
                              f"(0..{len(names) - 1}: {_short(names)}); {hint}")
        if splits.names:
            splits = Splits(splits.train, splits.test)
    return Labelled(task=resolved, splits=splits, label_names=tuple(names), source=source)


def _short(items: Any, limit: int = 8) -> str:
    """``a, b, c`` (the first ``limit`` and how many more)."""
    items = [str(x) for x in items]
    more = f", ... ({len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


# ---------------------------------------------------------------------- partitions
def _partitioner(cfg: RunConfig, num_partitions: int, num_rows: int):
    from flwr_datasets.partitioner import (DirichletPartitioner, IidPartitioner, NaturalIdPartitioner,
                                           PathologicalPartitioner)

    from fedtext.learning.partitioners import ClientDirichletPartitioner

    builders = {
        "iid": lambda: IidPartitioner(num_partitions=num_partitions),
        # min_partition_size: flwr-datasets resamples until every client has at least
        # this many rows; keep it feasible on small data (demo: 960 train rows).
        "dirichlet": lambda: DirichletPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            alpha=cfg.alpha,
            min_partition_size=max(1, min(10, num_rows // (4 * num_partitions))),
            self_balancing=False,
            seed=cfg.seed,
        ),
        # Cross-device label skew (Hsu et al. 2019): client i's label mix ~ Dir(alpha), every
        # client the same size; `dirichlet` cannot cut 3,000 clients of SST-2 (see the module).
        "dirichlet-client": lambda: ClientDirichletPartitioner(
            num_partitions=num_partitions, partition_by="label", alpha=float(cfg.alpha), seed=cfg.seed),
        # alpha -> 0 limit of the Dirichlet label skew (FedDRS §5.1): client i holds only
        # label i mod C, a label's rows split evenly among its clients; with as many
        # clients as labels every label is on exactly one client.
        "label": lambda: PathologicalPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            num_classes_per_partition=1,
            class_assignment_mode="deterministic",
            seed=cfg.seed,
        ),
        "domain": lambda: NaturalIdPartitioner(partition_by="domain"),
    }
    return builders[cfg.partition]()


@functools.lru_cache(maxsize=2)
def _partitioned(data: tuple[str, ...], partition: str, alpha: float, seed: int, num_partitions: int):
    """Build the partitioner once per process (partitions are computed lazily, once);
    ``data``: :func:`data_key` of the run."""
    import datasets

    dataset = data[0]
    cfg = RunConfig(dataset=dataset, partition=partition, alpha=alpha, seed=seed)
    splits = _labelled(*data).splits
    if partition == "domain" and num_partitions != len(splits.domains):
        raise ConfigError(
            f"partition=domain needs one client per domain: {len(splits.domains)} domains "
            f"({', '.join(splits.domains)}) but {num_partitions} clients"
        )
    # iid shards contiguously: shuffle first so that sorted files (domains one after
    # another) do not become one domain per client.
    ds = datasets.Dataset.from_pandas(splits.train, preserve_index=False).shuffle(seed=seed)
    partitioner = _partitioner(cfg, num_partitions, len(ds))
    partitioner.dataset = ds
    # Draw every partition now: flwr-datasets draws lazily on the first load and, when a
    # Dirichlet draw misses its minimum size in 10 attempts, raises but keeps its advanced
    # RNG, so a later load in the same process would silently get *another* partition
    # than a client in a fresh process. Drawing here makes the failure the same everywhere
    # (the cache keeps no half-drawn partitioner) and says what to change.
    try:
        partitioner.load_partition(0)
    except ValueError as exc:
        raise ConfigError(
            f"partition={partition} alpha={alpha} seed={seed}: flwr-datasets could not split "
            f"{len(ds)} rows into {num_partitions} clients ({exc}); try another seed, a larger "
            "alpha or fewer clients" + (", or partition=dirichlet-client (every client the same size)"
                                        if partition == "dirichlet" else "")
        ) from None
    return partitioner


def partition_train(cfg: RunConfig, partition_id: int, num_partitions: int) -> pd.DataFrame:
    """Rows of the train split that belong to client ``partition_id``."""
    if not 0 <= partition_id < num_partitions:
        raise ConfigError(f"partition-id {partition_id} outside 0..{num_partitions - 1}")
    partitioner = _partitioned(data_key(cfg), cfg.partition, cfg.alpha, cfg.seed, num_partitions)
    return partitioner.load_partition(partition_id).to_pandas()


def partition_sizes(cfg: RunConfig, num_partitions: int) -> list[int]:
    """Train rows of every client ``0..num_partitions-1`` (the server's feasibility check
    and ``num_examples`` bound; raises ``ConfigError`` where the cut is impossible)."""
    partitioner = _partitioned(data_key(cfg), cfg.partition, cfg.alpha, cfg.seed, num_partitions)
    return [_rows(partitioner, pid) for pid in range(num_partitions)]


def _rows(partitioner: Any, partition_id: int) -> int:
    """Rows of one partition; 0 where flwr-datasets cannot make it (an iid shard past
    the end of the data raises ``IndexError``)."""
    try:
        return partitioner.load_partition(partition_id).num_rows
    except (IndexError, ValueError):
        return 0


def sample_shots(df: pd.DataFrame, shots_per_class: int, rng: np.random.Generator) -> np.ndarray:
    """Positions of ``shots_per_class`` rows per label (all rows of a rarer label).

    Under label skew (Dirichlet) a client may hold fewer than ``k`` examples of a
    class, or none: it then gets what it has, as in the papers' non-IID few-shot setup.
    """
    if shots_per_class == 0:
        return np.arange(len(df))
    labels = df["label"].to_numpy()
    picked = [
        rng.permutation(np.flatnonzero(labels == c))[:shots_per_class] for c in np.unique(labels)
    ]
    return np.sort(np.concatenate(picked)) if picked else np.arange(0)


def client_data(cfg: RunConfig, partition_id: int, num_partitions: int) -> ClientData:
    """Local test split, few-shot labelled train split and unlabelled rest of a client.

    The test split takes ``client-test-size`` rows but at most a fifth of the
    partition, so that small partitions keep data to train on.
    """
    part = partition_train(cfg, partition_id, num_partitions)
    rng = np.random.default_rng([cfg.seed, partition_id, 0xDA7A])
    order = rng.permutation(len(part))
    n_test = min(cfg.client_test_size, len(part) // 5)
    test = part.iloc[order[:n_test]].reset_index(drop=True)
    pool = part.iloc[order[n_test:]].reset_index(drop=True)
    shots = sample_shots(pool, cfg.shots_per_class, rng)
    rest = np.setdiff1d(np.arange(len(pool)), shots)
    return ClientData(
        train=pool.iloc[shots].reset_index(drop=True),
        test=test,
        unlabeled=pool.iloc[rest].reset_index(drop=True),
        partition_id=partition_id,
    )


def server_test(cfg: RunConfig) -> pd.DataFrame:
    """The global test split the server evaluates on (``eval-size`` rows, seeded)."""
    test = labelled(cfg).splits.test
    if cfg.eval_size and cfg.eval_size < len(test):
        rng = np.random.default_rng([cfg.seed, 0x7E57])
        test = test.iloc[np.sort(rng.choice(len(test), cfg.eval_size, replace=False))]
    return test.reset_index(drop=True)
