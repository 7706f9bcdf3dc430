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

Clients are cut from the train split by flwr-datasets partitioners (``iid``,
``dirichlet`` on the label, ``domain`` = one client per natural domain). Inside its
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

from fedtext.config import ConfigError, RunConfig, looks_like_path

log = logging.getLogger("fedtext")

def _read_tsv(path: Path) -> pd.DataFrame:
    """A TSV as GLUE writes it: quotes are text (``QUOTE_NONE``), except that a file
    whose labels only parse with quoted fields (texts with tabs or newlines inside
    quotes) is read that way."""
    df = pd.read_csv(path, sep="\t", quoting=3, keep_default_na=False)
    if "label" in df.columns and not _integer_like(df["label"]):
        quoted = pd.read_csv(path, sep="\t", keep_default_na=False)
        if "label" in quoted.columns and _integer_like(quoted["label"]):
            log.info("fedtext: %s has quoted fields with tabs or newlines; read with quoting", path)
            return quoted
    return df


def _integer_like(col: pd.Series) -> bool:
    return bool(pd.to_numeric(col, errors="coerce").notna().all())


_READERS = {
    ".tsv": _read_tsv,
    ".csv": lambda p: pd.read_csv(p, keep_default_na=False),
    ".jsonl": lambda p: pd.read_json(p, lines=True),
    ".parquet": pd.read_parquet,
}
_TEST_NAMES = ("test", "dev", "validation")


@dataclass(frozen=True)
class Splits:
    """A dataset's train and test splits (columns ``text``, ``label``, ``domain``)."""

    train: pd.DataFrame
    test: pd.DataFrame

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
def _read_split(directory: Path, names: tuple[str, ...]) -> pd.DataFrame | None:
    for name in names:
        for ext, reader in _READERS.items():
            path = directory / f"{name}{ext}"
            if path.is_file():
                df = _read_file(reader, path)
                missing = {"text", "label"} - set(df.columns)
                if missing:
                    raise ConfigError(f"{path}: missing column(s) {sorted(missing)}; need text, label")
                if len(df) == 0:
                    raise ConfigError(f"{path}: a header but no rows")
                return df
    return None


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


def _normalise(df: pd.DataFrame, domain: str, source: str) -> pd.DataFrame:
    df = df.copy()
    if "domain" not in df.columns:
        df["domain"] = domain
    df["text"] = df["text"].astype(str)
    numeric = pd.to_numeric(df["label"], errors="coerce")
    # a float label (0.4, 1.6) would be truncated by astype(int) to another class: refuse it
    bad = numeric.isna() | (numeric != np.floor(numeric))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ConfigError(f"{source}: labels must be integers 0..C-1; row {row} has {df['label'].tolist()[row]!r}")
    df["label"] = numeric.astype(np.int64)
    if (df["label"] < 0).any():
        raise ConfigError(f"{source}: negative labels found; labels must be integers 0..C-1")
    df["domain"] = df["domain"].astype(str)
    return df[["text", "label", "domain"]].reset_index(drop=True)


def load_local(directory: Path) -> Splits:
    """Load ``train``/``test`` files from ``directory`` or from its domain sub-dirs."""
    train = _read_split(directory, ("train",))
    if train is not None:
        test = _read_split(directory, _TEST_NAMES)
        if test is None:
            raise ConfigError(f"{directory}: found train.* but no test.*, dev.* or validation.*")
        return Splits(
            _normalise(train, directory.name, str(directory)),
            _normalise(test, directory.name, str(directory)),
        )
    trains, tests = [], []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        tr, te = _read_split(sub, ("train",)), _read_split(sub, _TEST_NAMES)
        if tr is not None and te is not None:
            trains.append(_normalise(tr, sub.name, str(sub)))
            tests.append(_normalise(te, sub.name, str(sub)))
    if not trains:
        raise ConfigError(
            f"{directory}: no train.{{tsv,csv,jsonl,parquet}} with test/dev file, "
            "neither directly nor in domain sub-directories"
        )
    return Splits(pd.concat(trains, ignore_index=True), pd.concat(tests, ignore_index=True))


def load_hub(name: str) -> Splits:
    """Load a Hugging Face hub dataset (online only) into the common shape."""
    import datasets

    try:
        dd = datasets.load_dataset(name)
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot load", say why
        raise ConfigError(
            f"cannot load dataset '{name}' from the Hugging Face hub ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:160] if str(exc) else ''}); offline? point dataset= at a "
            "local directory (README: Local data)"
        ) from None
    test_name = next((s for s in _TEST_NAMES if s in dd and min(dd[s]["label"]) >= 0), None)
    if "train" not in dd or test_name is None:
        raise ConfigError(f"hub dataset '{name}' has no labelled train and test/validation splits")
    frames = []
    for split in ("train", test_name):
        df = dd[split].to_pandas()
        text_col = next((c for c in ("text", "sentence", "content", "review") if c in df), None)
        if text_col is None:
            raise ConfigError(f"hub dataset '{name}': no text column among {list(df.columns)}")
        frames.append(_normalise(df.rename(columns={text_col: "text"}), name, name))
    return Splits(*frames)


@functools.lru_cache(maxsize=4)
def load_splits(dataset: str) -> Splits:
    """Load ``demo``, a local directory or a hub dataset (cached per process)."""
    if dataset == "demo":
        return make_demo()
    if looks_like_path(dataset):
        path = Path(dataset).expanduser().resolve()
        if not path.is_dir():
            raise ConfigError(f"dataset path '{dataset}' does not exist (resolved to {path})")
        return load_local(path)
    return load_hub(dataset)


# ---------------------------------------------------------------------- partitions
def _partitioner(cfg: RunConfig, num_partitions: int, num_rows: int):
    from flwr_datasets.partitioner import (DirichletPartitioner, IidPartitioner, NaturalIdPartitioner,
                                           PathologicalPartitioner)

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
def _partitioned(dataset: str, partition: str, alpha: float, seed: int, num_partitions: int):
    """Build the partitioner once per process (partitions are computed lazily, once)."""
    import datasets

    cfg = RunConfig(dataset=dataset, partition=partition, alpha=alpha, seed=seed)
    splits = load_splits(dataset)
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
            "alpha or fewer clients"
        ) from None
    return partitioner


def partition_train(cfg: RunConfig, partition_id: int, num_partitions: int) -> pd.DataFrame:
    """Rows of the train split that belong to client ``partition_id``."""
    if not 0 <= partition_id < num_partitions:
        raise ConfigError(f"partition-id {partition_id} outside 0..{num_partitions - 1}")
    partitioner = _partitioned(cfg.dataset, cfg.partition, cfg.alpha, cfg.seed, num_partitions)
    return partitioner.load_partition(partition_id).to_pandas()


def partition_sizes(cfg: RunConfig, num_partitions: int) -> list[int]:
    """Train rows of every client ``0..num_partitions-1`` (the server's feasibility check
    and ``num_examples`` bound; raises ``ConfigError`` where the cut is impossible)."""
    partitioner = _partitioned(cfg.dataset, cfg.partition, cfg.alpha, cfg.seed, num_partitions)
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
    test = load_splits(cfg.dataset).test
    if cfg.eval_size and cfg.eval_size < len(test):
        rng = np.random.default_rng([cfg.seed, 0x7E57])
        test = test.iloc[np.sort(rng.choice(len(test), cfg.eval_size, replace=False))]
    return test.reset_index(drop=True)
