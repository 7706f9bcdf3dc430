"""Data loading, partitions and few-shot sampling."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from fedtext.common.config import ConfigError, RunConfig
from fedtext.learning.data import client_data, load_local, make_demo, partition_train, sample_shots


def test_demo_is_deterministic_multi_domain_and_labelled(demo):
    again = make_demo()
    pd.testing.assert_frame_equal(demo.train, again.train)
    assert demo.domains == ["books", "electronics", "movies", "restaurants"]
    assert len(demo.train) == 960 and len(demo.test) == 240
    assert set(demo.train["label"]) == {0, 1}
    assert demo.train.groupby("domain").size().min() >= 200


@pytest.mark.parametrize("partition", ["iid", "dirichlet"])
def test_partition_sizes_add_up(partition):
    cfg = RunConfig(partition=partition, alpha=0.5, seed=1)
    parts = [partition_train(cfg, i, 5) for i in range(5)]
    assert sum(len(p) for p in parts) == 960
    texts = pd.concat(parts)["text"]
    assert texts.index.size == 960  # every row in exactly one partition


def _label_concentration(alpha: float) -> float:
    cfg = RunConfig(partition="dirichlet", alpha=alpha, seed=0)
    parts = [partition_train(cfg, i, 4) for i in range(4)]
    return float(np.mean([p["label"].value_counts(normalize=True).max() for p in parts]))


def test_small_alpha_concentrates_labels():
    skewed, balanced = _label_concentration(0.05), _label_concentration(100.0)
    assert skewed > 0.85 > balanced
    assert balanced < 0.65


def test_an_impossible_dirichlet_draw_fails_the_same_way_every_time():
    """flwr-datasets gives up after 10 draws that leave a client under its minimum size;
    the error is clear and repeats (no half-drawn partitioner stays cached to hand a
    later caller a different partition)."""
    cfg = RunConfig(partition="dirichlet", alpha=0.01, seed=0)
    for _ in range(2):
        with pytest.raises(ConfigError, match="partition=dirichlet alpha=0.01 seed=0: flwr-datasets could not "
                                              "split 960 rows into 10 clients .*try another seed.*"
                                              r"or partition=dirichlet-client \(every client the same size\)$"):
            partition_train(cfg, 0, 10)


def test_dirichlet_client_gives_equal_clients_every_row_once_and_skews_by_alpha():
    """partition=dirichlet-client (Hsu et al. 2019): sizes num_rows // N, the first
    num_rows % N one more; each row on one client; small alpha concentrates a client's labels."""
    def cut(alpha: float, seed: int = 0, n: int = 7) -> list[pd.DataFrame]:
        cfg = RunConfig(partition="dirichlet-client", alpha=alpha, seed=seed)
        return [partition_train(cfg, i, n) for i in range(n)]

    parts = cut(0.5)
    assert [len(p) for p in parts] == [138] + [137] * 6  # 960 = 7 x 137 + 1
    rows = sorted(map(tuple, pd.concat(parts)[["text", "label", "domain"]].to_numpy().tolist()))
    assert rows == sorted(map(tuple, make_demo().train[["text", "label", "domain"]].to_numpy().tolist()))
    skew = [np.mean([p["label"].value_counts(normalize=True).max() for p in cut(a)]) for a in (0.05, 100.0)]
    assert skew[0] > 0.85 > 0.65 > skew[1]
    texts = [p["text"].tolist() for p in parts]
    assert [p["text"].tolist() for p in cut(0.5)] == texts  # the seed decides
    assert [p["text"].tolist() for p in cut(0.5, seed=1)] != texts


def test_dirichlet_client_cuts_a_population_the_label_split_cannot():
    """At ~10 rows a client, `dirichlet` (each label's rows split by Dir(alpha)) leaves clients
    under its minimum size on every draw; `dirichlet-client` gives each client its share."""
    with pytest.raises(ConfigError, match="partition=dirichlet alpha=0.5 seed=0: flwr-datasets could not"):
        partition_train(RunConfig(partition="dirichlet", alpha=0.5, seed=0), 0, 96)
    cfg = RunConfig(partition="dirichlet-client", alpha=0.5, seed=0)
    assert {len(partition_train(cfg, i, 96)) for i in (0, 95)} == {10}


def test_domain_partition_gives_one_client_per_domain():
    cfg = RunConfig(partition="domain")
    domains = [set(partition_train(cfg, i, 4)["domain"]) for i in range(4)]
    assert all(len(d) == 1 for d in domains)
    assert set.union(*domains) == {"books", "electronics", "movies", "restaurants"}
    with pytest.raises(ConfigError, match="one client per domain: 4 domains"):
        partition_train(cfg, 0, 3)


def test_few_shot_sampling_and_local_test_split():
    cfg = RunConfig(shots_per_class=5, client_test_size=16)
    data = client_data(cfg, 1, 4)
    assert data.train["label"].value_counts().to_dict() == {0: 5, 1: 5}
    assert len(data.test) == 16
    assert len(data.train) + len(data.test) + len(data.unlabeled) == len(partition_train(cfg, 1, 4))
    assert not set(data.train["text"]) & set(data.test["text"]) - set(data.unlabeled["text"])


def test_rare_class_gets_what_it_has():
    df = pd.DataFrame({"text": list("abcdefg"), "label": [0, 0, 0, 0, 0, 1, 1]})
    picked = sample_shots(df, 3, np.random.default_rng(0))
    assert sorted(df.iloc[picked]["label"]) == [0, 0, 0, 1, 1]


def test_local_directory_formats_and_domains(tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    pd.DataFrame({"text": ["good", "bad"], "label": [1, 0]}).to_csv(flat / "train.csv", index=False)
    pd.DataFrame({"text": ["fine"], "label": [1]}).to_json(flat / "dev.jsonl", orient="records", lines=True)
    splits = load_local(flat)
    assert list(splits.train["text"]) == ["good", "bad"] and list(splits.test["label"]) == [1]
    nested = tmp_path / "nested"
    for dom in ("a", "b"):
        (nested / dom).mkdir(parents=True)
        (nested / dom / "train.tsv").write_text("text\tlabel\nx \"quoted\"\t1\ny\t0\n")
        (nested / dom / "test.tsv").write_text("text\tlabel\nz\t1\n")
    splits = load_local(nested)
    assert splits.domains == ["a", "b"] and len(splits.train) == 4
    assert 'x "quoted"' in set(splits.train["text"])


def test_local_directory_errors(tmp_path):
    with pytest.raises(ConfigError, match="no train"):
        load_local(tmp_path)
    pd.DataFrame({"sentence": ["x"], "label": [0]}).to_csv(tmp_path / "train.csv", index=False)
    pd.DataFrame({"sentence": ["x"], "label": [0]}).to_csv(tmp_path / "test.csv", index=False)
    with pytest.raises(ConfigError, match=r"missing column\(s\) \['text'\]"):
        load_local(tmp_path)


def _write(path, texts, labels) -> None:
    """A split file (``.csv`` or ``.jsonl``) with these texts (None: a null) and labels."""
    frame = pd.DataFrame({"text": texts, "label": labels})
    if path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_csv(path, index=False)


@pytest.mark.parametrize("where, texts", [
    ("train.csv", ["", "  ", "\t"]),  # empty and whitespace
    ("train.jsonl", [None, None, ""]),  # nulls are empty texts, not the word "None"
    ("test.csv", ["", " ", ""]),  # the test split alike: nothing to evaluate on
    ("b/train.csv", ["", "", " "]),  # one domain of a folder of domains
])
def test_a_split_whose_texts_are_all_empty_is_refused_naming_its_file(tmp_path, where, texts):
    """Issue 45 item 6: a training split of empty (or whitespace-only) texts loaded and
    trained silently on nothing."""
    fine = ["good", "bad", "fine"]
    root = tmp_path / "data"
    for domain in ("a", "b") if "/" in where else ("",):
        (root / domain).mkdir(parents=True, exist_ok=True)
        for split in ("train", "test"):
            name = f"{domain}/{split}".lstrip("/")
            chosen = where if where.startswith(name + ".") else f"{name}.csv"
            _write(root / chosen, texts if chosen == where else fine, [0, 1, 0])
    with pytest.raises(ConfigError) as err:
        load_local(root)
    assert str(err.value) == (f"{root / where}: every text in column 'text' is empty or whitespace (3 rows): nothing "
                              "to learn from (set text-column to the column that holds the texts)")


def test_a_split_where_some_texts_are_empty_keeps_them_as_empty_texts_with_one_warning(tmp_path, caplog):
    """The choice for *some* empty texts: kept (each is a labelled row the data holds;
    dropping rows would change every partition), as the empty text (a null used to become
    the word "None"), with one warning that counts them."""
    _write(tmp_path / "train.jsonl", ["good", "", None, "bad"], [1, 0, 1, 0])
    _write(tmp_path / "test.csv", ["fine", "poor"], [1, 0])
    with caplog.at_level("WARNING", logger="fedtext"):
        splits = load_local(tmp_path)
    assert splits.train["text"].tolist() == ["good", "", "", "bad"] and splits.train["label"].tolist() == [1, 0, 1, 0]
    assert [r.getMessage() for r in caplog.records] == [
        f"fedtext: {tmp_path / 'train.jsonl'}: 2 of 4 texts are empty (first: row 1); they are kept as empty texts"]


@pytest.mark.parametrize("labels,row,shown", [([0, 0.4, 1.6], 1, "0.4"), ([1, 0, "pos"], 2, "'pos'"),
                                            ([1.0, 0.0, 2.5], 2, "2.5")])
def test_a_label_that_is_not_an_integer_is_one_line_not_truncated(tmp_path, labels, row, shown):
    """Issue 35: labels 0.4 / 1.6 were truncated to 0 / 1 (another class) by astype(int)."""
    pd.DataFrame({"text": ["a", "b", "c"], "label": labels}).to_csv(tmp_path / "train.csv", index=False)
    pd.DataFrame({"text": ["d"], "label": [1]}).to_csv(tmp_path / "test.csv", index=False)
    with pytest.raises(ConfigError, match=rf"labels must be integers 0..C-1; row {row} has {re.escape(shown)}"):
        load_local(tmp_path)


def test_integer_labels_written_as_floats_still_load(tmp_path):
    pd.DataFrame({"text": ["a", "b"], "label": [1.0, 0.0]}).to_csv(tmp_path / "train.csv", index=False)
    pd.DataFrame({"text": ["d"], "label": [1]}).to_csv(tmp_path / "test.csv", index=False)
    splits = load_local(tmp_path)
    assert splits.train["label"].tolist() == [1, 0] and splits.train["label"].dtype == "int64"


def test_hub_name_offline_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from fedtext.learning.data import load_hub

    with pytest.raises(ConfigError) as err:
        load_hub("no-such-user/no-such-dataset-fedtext")
    assert "cannot load dataset 'no-such-user/no-such-dataset-fedtext'" in str(err.value)
    assert "\n" not in str(err.value)


# ------------------------------------------------ issue 58: data that ran silently wrong
def _folder(root, train, test, text_column="text", **columns):
    """A dataset folder: ``train.csv`` and ``test.csv`` of (text, label) rows, plus ``columns``
    (name -> (train values, test values))."""
    root.mkdir(parents=True, exist_ok=True)
    for name, rows, i in (("train", train, 0), ("test", test, 1)):
        frame = pd.DataFrame({text_column: [t for t, _ in rows], "label": [y for _, y in rows]})
        for column, values in columns.items():
            frame[column] = values[i]
        frame.to_csv(root / f"{name}.csv", index=False)
    return root


TRAIN = [(f"review {i} was {'good' if i % 2 else 'bad'}", i % 2) for i in range(20)]


def test_a_test_split_that_repeats_train_texts_warns_once_with_counts(tmp_path, caplog):
    """Issue 58: a test split made of training texts ran without a word (the shared Amazon
    folders' test.tsv holds nearly all of train.tsv)."""
    from fedtext.learning.data import warn_about_texts

    test = [TRAIN[3], TRAIN[3], TRAIN[4], ("a new review", 1), ("another one", 0)]  # 3 rows, 2 distinct texts
    root = _folder(tmp_path / "leaky", TRAIN, test)
    with caplog.at_level("WARNING", logger="fedtext"):
        warn_about_texts(RunConfig(dataset=str(root)))
    assert [r.getMessage() for r in caplog.records] == [
        f"fedtext: dataset '{root}': 3 of 5 test texts (2 distinct) also appear in the train split; the test "
        "accuracy counts texts the model trained on"]
    caplog.clear()
    clean = _folder(tmp_path / "clean", TRAIN, [("a new review", 1), ("another one", 0)])
    with caplog.at_level("WARNING", logger="fedtext"):
        warn_about_texts(RunConfig(dataset=str(clean)))
        warn_about_texts(RunConfig())  # the generated demo repeats template sentences by construction: no word
    assert caplog.records == []


@pytest.mark.parametrize("column, values, what", [
    ("copy", ([y for _, y in TRAIN], [1, 0]), "are label values (2 distinct): the model would read its answer"),
    ("id", (list(range(20)), [20, 21]), "are numbers (22 distinct): the model would train on digits"),
])
def test_a_text_column_of_labels_or_numbers_warns_once_with_counts(tmp_path, caplog, column, values, what):
    """Issue 58: text-column naming a column of label digits (or ids) trained on them as texts."""
    from fedtext.learning.data import warn_about_texts

    root = _folder(tmp_path / column, TRAIN, [("a new review", 1), ("another one", 0)], **{column: values})
    with caplog.at_level("WARNING", logger="fedtext"):
        warn_about_texts(RunConfig(dataset=str(root), text_column=column))
    assert [r.getMessage() for r in caplog.records] == [
        f"fedtext: dataset '{root}': all 22 texts of text-column '{column}' {what}; set text-column to the column "
        "that holds the texts"]


def test_a_text_column_that_is_the_label_column_is_refused_at_config_time():
    """Issue 58: text-column='label' trained on the label digits as texts."""
    with pytest.raises(ConfigError) as err:
        RunConfig(text_column="label")
    assert str(err.value) == ("text-column='label' is the label column itself; set text-column to the column that "
                              "holds the texts")
    with pytest.raises(ConfigError, match="^text-column='y' is the label column itself"):
        RunConfig(text_column="y", label_column="y")


@pytest.mark.parametrize("linked", ["train.csv", "test.csv", "domain", "task.toml"])
def test_a_data_file_linked_outside_the_dataset_folder_is_refused(tmp_path, linked):
    """Issue 58: a train.csv symlinked to a file outside the dataset folder was read and
    parsed; records readers already refuse such links. A link inside the folder is read."""
    from fedtext.learning.data import _labelled

    outside = _folder(tmp_path / "outside", TRAIN, [("a new review", 1), ("another one", 0)])
    (outside / "task.toml").write_text('labels = ["bad", "good"]\n')
    root = tmp_path / "data"
    if linked == "domain":
        _folder(root / "a", TRAIN, [("x", 1), ("y", 0)])
        (root / "b").symlink_to(outside)
        target = root / "b" / "train.csv"
    else:
        _folder(root, TRAIN, [("x", 1), ("y", 0)])
        (root / linked).unlink(missing_ok=True)
        (root / linked).symlink_to(outside / linked)
        target = root / linked
    with pytest.raises(ConfigError) as err:
        if linked == "task.toml":
            _labelled(str(root), "auto", "text", "label", "", "")
        else:
            load_local(root)
    assert str(err.value) == (f"{target}: resolves outside the dataset folder {root} (to {outside / target.name}): "
                              "not read")


def test_a_data_file_linked_inside_the_dataset_folder_is_read(tmp_path):
    root = _folder(tmp_path / "data", TRAIN, [("x", 1), ("y", 0)])
    (root / "raw").mkdir()
    (root / "train.csv").rename(root / "raw" / "train.csv")
    (root / "train.csv").symlink_to(root / "raw" / "train.csv")
    assert len(load_local(root).train) == 20


def test_a_text_column_of_label_names_is_refused_in_one_line_naming_the_columns(tmp_path):
    """Issue 69: label names ('pos', 'neg') in the text column while the label column holds the
    integers ran silently (the label-value warning compares the integers). Compared stripped and
    case-folded, on a sample; 90 % names refuses, a few one-word texts that are names do not."""
    from fedtext.learning.data import labelled

    verdicts = [f"{' POS' if y else 'neg '}" for _, y in TRAIN]
    root = _folder(tmp_path / "names", TRAIN, [("a new review", 1), ("another one", 0)],
                   verdict=(verdicts, ["pos", "neg"]))
    with pytest.raises(ConfigError) as err:
        labelled(RunConfig(dataset=str(root), text_column="verdict", label_names="neg,pos"))
    assert str(err.value) == (f"dataset '{root}': 22 of 22 texts (sampled) of text-column 'verdict' are label names "
                              "(neg, pos), the classes label-column 'label' holds: the model would read its answer; "
                              "set text-column to the column that holds the texts")
    assert len(labelled(RunConfig(dataset=str(root), label_names="neg,pos")).splits.train) == 20  # text: the reviews
    # 2 of 22 texts a label name (a one-word review): kept
    few = _folder(tmp_path / "few", [("pos", 1), ("neg", 0), *TRAIN[2:]], [("a new review", 1), ("another one", 0)])
    assert len(labelled(RunConfig(dataset=str(few), label_names="neg,pos")).splits.train) == 20


def test_the_label_name_check_reads_a_sample_of_a_large_split(tmp_path):
    """Cheap on a large split: a seeded sample of 1,000 of its 3,002 texts is compared; 95 % of
    them names ('pos') is refused."""
    from fedtext.learning.data import LABEL_NAME_SAMPLE, labelled

    train = [("pos" if i % 20 else f"review {i}", i % 2) for i in range(3000)]
    root = _folder(tmp_path / "big", train, [("a new review", 1), ("another one", 0)])
    with pytest.raises(ConfigError, match=rf"^dataset '.*': \d+ of {LABEL_NAME_SAMPLE} texts \(sampled\) of "
                                          r"text-column 'text' are label names \(neg, pos\)"):
        labelled(RunConfig(dataset=str(root), label_names="neg,pos"))
