"""Issue 37 item 2: any labelled text dataset (docs/own-data.md).

Other column names (``text-column``, ``label-column``), string labels mapped to ids in a
recorded order, label names and descriptions from the run-config or a ``task.toml``,
``task=auto`` building a task from them, and every mismatch between the data and the
task one ``ConfigError`` line before anything trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fedtext.common.config import ConfigError, RunConfig

LABELS = ("pos", "neg", "neu")  # sorted: neg=0, neu=1, pos=2
WORDS = {"pos": ("great", "wonderful", "excellent"), "neg": ("awful", "terrible", "dreadful"),
         "neu": ("okay", "average", "fine")}
THINGS = ("the food", "the film", "the hotel", "the phone", "the book")


def _rows(n: int, offset: int = 0) -> pd.DataFrame:
    """``n`` reviews cycling through the three string labels, in a ``sentence`` column."""
    rows = []
    for i in range(offset, offset + n):
        label = LABELS[i % 3]
        rows.append((f"{THINGS[i % 5].capitalize()} was {WORDS[label][(i // 3) % 3]} ({i}).", label))
    return pd.DataFrame(rows, columns=["sentence", "label"])


def _three_class_csv(root: Path, name: str = "reviews3", train: int = 60, test: int = 15) -> Path:
    folder = root / name
    folder.mkdir()
    _rows(train).to_csv(folder / "train.csv", index=False)
    _rows(test, offset=1000).to_csv(folder / "test.csv", index=False)
    return folder


def _int_folder(root: Path, labels: list[int], name: str = "topics") -> Path:
    folder = root / name
    folder.mkdir()
    texts = [f"text number {i}" for i in range(len(labels))]
    pd.DataFrame({"text": texts, "label": labels}).to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"text": texts[:len(set(labels))], "label": sorted(set(labels))}).to_csv(folder / "test.csv",
                                                                                          index=False)
    return folder


def _build(tmp_path: Path, **fields):
    from fedtext.common.registry import make_config
    from fedtext.server_app import build

    return build(make_config("fedprompt", output_dir=str(tmp_path / "runs"), max_length=32, eval_size=6, **fields))


def _one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_string_labels_in_a_sentence_column_run_with_task_auto(tmp_path):
    """A 3-class CSV with string labels and a ``sentence`` column: the labels map to ids in
    sorted order, task=auto builds a 3-class task from the names, and the run records the
    mapping (before: 'missing column(s) ['text']', and string labels were refused)."""
    from fedtext.learning.data import client_data, labelled
    from fedtext.common.registry import make_config

    folder = _three_class_csv(tmp_path)
    cfg = RunConfig(dataset=str(folder), text_column="sentence")
    data = labelled(cfg)
    assert data.label_names == ("neg", "neu", "pos") and data.source == "the train split's labels (sorted)"
    assert data.task.num_classes == 3 and data.task.labels == ("neg", "neu", "pos") and data.task.name == "reviews3"
    assert data.task.descriptions == ("neg", "neu", "pos") and data.task.verbalizer == ("neg", "neu", "pos")
    raw = _rows(60)
    assert data.splits.train["label"].tolist() == [{"neg": 0, "neu": 1, "pos": 2}[x] for x in raw["label"]]
    assert data.splits.train["text"].tolist() == raw["sentence"].tolist()
    assert data.splits.train["label"].dtype == "int64" and set(data.splits.test["label"]) == {0, 1, 2}
    shots = client_data(make_config("fedprompt", dataset=str(folder), text_column="sentence", shots_per_class=2),
                        0, 2).train
    assert shots["label"].value_counts().to_dict() == {0: 2, 1: 2, 2: 2}
    _build(tmp_path, dataset=str(folder), text_column="sentence")
    (config_json,) = (tmp_path / "runs").rglob("config.json")
    config = json.loads(config_json.read_text())["config"]
    assert json.loads(config["resolved-labels"]) == ["neg", "neu", "pos"] and config["resolved-task"] == "reviews3"
    assert config["text-column"] == "sentence" and config["label-column"] == "label"


def test_label_names_from_the_run_config_set_the_order_and_a_wrong_count_is_one_line(tmp_path):
    from fedtext.learning.data import labelled

    folder = _three_class_csv(tmp_path)
    data = labelled(RunConfig(dataset=str(folder), text_column="sentence", label_names="pos, neg, neu",
                              label_descriptions="A happy review.|An angry review.|A flat review."))
    assert data.label_names == ("pos", "neg", "neu") and data.source == "label-names"
    assert data.splits.train["label"].tolist()[:3] == [0, 1, 2]  # rows 0..2 are pos, neg, neu
    assert data.task.descriptions == ("A happy review.", "An angry review.", "A flat review.")
    for names, shown in (("neg,pos", "2 (neg, pos)"), ("neg,neu,pos,mixed", "4 (neg, neu, pos, mixed)")):
        with pytest.raises(ConfigError) as err:
            _build(tmp_path, dataset=str(folder), text_column="sentence", label_names=names)
        assert f"its labels do not fit label-names (task reviews3): the data has 3 classes (neg, neu, pos), " \
               f"label-names has {shown}; fix the names" in _one_line(err)
    with pytest.raises(ConfigError, match="label-descriptions gives 2 descriptions for 3 label-names"):
        RunConfig(dataset=str(folder), label_names="a,b,c", label_descriptions="x|y")
    with pytest.raises(ConfigError, match="label-names='a,,b' has an empty item"):
        RunConfig(label_names="a,,b")


@pytest.mark.parametrize("labels", [[0, 1, 2] * 4, ["World", "Sports", "Business"] * 4])
def test_a_three_class_dataset_with_task_ag_news_is_one_line(tmp_path, labels):
    """Before: a 3-class dataset ran silently with AG News's four topic labels."""
    folder = _int_folder(tmp_path, labels)
    with pytest.raises(ConfigError) as err:
        _build(tmp_path, dataset=str(folder), task="ag_news")
    message = _one_line(err)
    assert "its labels do not fit task ag_news: the data has 3 classes" in message
    assert "task ag_news has 4 (" in message and "set task=auto" in message


def test_labels_past_the_task_and_string_labels_of_a_built_in_task(tmp_path):
    from fedtext.learning.data import labelled

    with pytest.raises(ConfigError, match=r"the data has 3 classes \(labels 0, 1, 2\), task sst2 has 2 "
                                          r"\(0..1: negative, positive\)"):
        labelled(RunConfig(dataset=str(_int_folder(tmp_path, [0, 1, 2] * 3, "a")), task="sst2"))
    # string labels that are the built-in task's names map to its ids
    data = labelled(RunConfig(dataset=str(_int_folder(tmp_path, ["positive", "negative"] * 3, "b")), task="sst2"))
    assert data.task.name == "sst2" and data.splits.train["label"].tolist()[:2] == [1, 0]
    # other names need label-names (in the task's order)
    folder = _int_folder(tmp_path, ["good", "bad"] * 3, "c")
    with pytest.raises(ConfigError, match=r"the data has 2 classes \(bad, good\), task sst2 has 2 "
                                          r"\(negative, positive\)"):
        labelled(RunConfig(dataset=str(folder), task="sst2"))
    data = labelled(RunConfig(dataset=str(folder), task="sst2", label_names="bad,good"))
    assert data.task.name == "sst2" and data.splits.train["label"].tolist()[:2] == [1, 0]
    with pytest.raises(ConfigError, match=r"^label-names gives 3 label names \(bad, good, meh\) but task sst2 has 2"):
        labelled(RunConfig(dataset=str(folder), task="sst2", label_names="bad,good,meh"))


def test_a_missing_label_column_names_the_columns_present(tmp_path):
    from fedtext.learning.data import labelled

    folder = _three_class_csv(tmp_path)
    with pytest.raises(ConfigError) as err:
        labelled(RunConfig(dataset=str(folder), text_column="sentence", label_column="stars"))
    assert _one_line(err) == (f"{folder / 'train.csv'}: missing column(s) ['stars']; it has ['sentence', 'label'] "
                              "(set label-column to the one to read)")
    with pytest.raises(ConfigError, match=r"missing column\(s\) \['text'\]; it has \['sentence', 'label'\] "
                                          r"\(set text-column"):
        labelled(RunConfig(dataset=str(folder)))


TASK_TOML = '''# the task of this folder
name = "topics3"
labels = ["science", "sport", "politics"]
verbalizer = ["science", "sport", "politics"]
descriptions = ["A text about science.", "A text about sport.", "A text about politics."]
template = "{mask} topic: {text}"
'''


def test_a_task_file_names_the_classes_of_integer_labels(tmp_path):
    from fedtext.learning.data import labelled

    folder = _int_folder(tmp_path, [0, 1, 2] * 4)
    (folder / "task.toml").write_text(TASK_TOML)
    data = labelled(RunConfig(dataset=str(folder)))
    assert data.task.name == "topics3" and data.task.labels == ("science", "sport", "politics")
    assert data.task.descriptions[1] == "A text about sport." and data.task.template == "{mask} topic: {text}"
    assert data.source == str(folder / "task.toml") and data.splits.train["label"].tolist()[:3] == [0, 1, 2]
    # label-names in the run-config comes first
    assert labelled(RunConfig(dataset=str(folder), label_names="a,b,c")).label_names == ("a", "b", "c")
    # with a built-in task the file's own verbalizer/descriptions/template would be ignored: refused
    with pytest.raises(ConfigError, match=r"^task=ag_news brings its own .*verbalizer, descriptions, template \("):
        labelled(RunConfig(dataset=str(folder), task="ag_news"))


@pytest.mark.parametrize("toml, message", [
    ('labels = ["science", "sport"]\n', r"task.toml \(task topics\): the data has 3 classes \(labels 0, 1, 2\), "
                                         r"task.toml has 2 \(0..1: science, sport\)"),
    ('labels = ["a", "b", "c"]\ncolour = "red"\n', r"task.toml: unknown key\(s\) \['colour'\]"),
    ('labels = ["a", "b", "c"]\ndescriptions = ["x", "y"]\n', "task.toml: 2 descriptions for 3 labels"),
    ('labels = ["a", "b", "c"]\ntemplate = "{text}"\n', "template must contain {text} once and {mask}"),
    ('labels = ["a", "a", "c"]\n', "labels name a class twice"),
    ("labels = [", "not a readable TOML task file"),
])
def test_a_task_file_that_contradicts_the_data_or_itself_is_one_line(tmp_path, toml, message):
    folder = _int_folder(tmp_path, [0, 1, 2] * 4)
    (folder / "task.toml").write_text(toml)
    with pytest.raises(ConfigError, match=message) as err:
        _build(tmp_path, dataset=str(folder))
    _one_line(err)


def test_integer_labels_without_names_and_task_auto_is_one_line(tmp_path):
    folder = _int_folder(tmp_path, [0, 1, 2] * 4)
    with pytest.raises(ConfigError, match=r"labels are integers without names; set label-names=<name of 0>,"):
        _build(tmp_path, dataset=str(folder))


def test_mixed_or_missing_labels_are_one_line(tmp_path):
    from fedtext.learning.data import normalise

    with pytest.raises(ConfigError, match=r"^x: labels must be integers 0..C-1; row 2 has 'pos' among numbers"):
        normalise(pd.DataFrame({"text": list("abc"), "label": [1, 0, "pos"]}), "d", "x")
    with pytest.raises(ConfigError, match=r"^x: row 1 has no label \(' '\)"):
        normalise(pd.DataFrame({"text": list("ab"), "label": ["pos", " "]}), "d", "x")
    folder = tmp_path / "mixed"
    folder.mkdir()
    pd.DataFrame({"text": ["a", "b"], "label": ["pos", "neg"]}).to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"text": ["c"], "label": [1]}).to_csv(folder / "test.csv", index=False)
    from fedtext.learning.data import load_local

    with pytest.raises(ConfigError, match="some files have integer labels and others label names"):
        load_local(folder)


def test_hub_datasets_share_the_column_and_label_handling():
    """load_hub's splits go through the same normalise(): a sentence column by default, a
    text-column/label-column of one's own, string labels, ClassLabel names for task=auto."""
    import datasets

    from fedtext.learning.data import hub_splits, label_data

    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["bad", "ok", "good"])})
    dd = {"train": datasets.Dataset.from_dict({"sentence": ["a", "b", "c", "d"], "label": [0, 1, 2, 1]},
                                              features=features),
          "test": datasets.Dataset.from_dict({"sentence": ["e", "f", "g"], "label": [-1, -1, -1]}, features=features),
          "validation": datasets.Dataset.from_dict({"sentence": ["h", "i", "j"], "label": [2, 1, 0]},
                                                   features=features)}
    splits = hub_splits("someone/reviews", dd)
    assert splits.names == ("bad", "ok", "good") and splits.test["text"].tolist() == ["h", "i", "j"]
    data = label_data(splits, "auto", dataset="someone/reviews", default_name="someone/reviews")
    assert data.task.labels == ("bad", "ok", "good") and data.task.name == "someone/reviews"
    strings = {"train": datasets.Dataset.from_dict({"body": ["a", "b"], "stars": ["five", "one"]}),
               "validation": datasets.Dataset.from_dict({"body": ["c", "d"], "stars": ["one", "five"]})}
    with pytest.raises(ConfigError, match=r"missing column\(s\) \['label'\]; it has \['body', 'stars'\]"):
        hub_splits("someone/stars", strings)
    splits = hub_splits("someone/stars", strings, text_column="body", label_column="stars")
    data = label_data(splits, "auto", dataset="someone/stars")
    assert data.label_names == ("five", "one") and data.splits.test["label"].tolist() == [1, 0]


def test_a_run_recorded_before_the_new_keys_still_resumes(tmp_path):
    """A config.json without text-column & co. (recorded before issue 37) ran with their
    defaults: resume compares it so, and refuses a changed one."""
    from fedtext.server import checkpoint
    from fedtext.common.registry import make_config
    from fedtext.server_app import resume_checkpoint

    run = tmp_path / "runs" / "old-run"
    run.mkdir(parents=True)
    cfg = make_config("fedbpt", output_dir=str(tmp_path / "runs"), resume="old-run")
    config = {**cfg.to_run_config(), "resolved-task": "demo", "resolved-labels": '["negative", "positive"]'}
    old = {k: v for k, v in config.items()
           if k not in ("text-column", "label-column", "label-names", "label-descriptions", "resolved-labels")}
    (run / "config.json").write_text(json.dumps({"config": old}))
    with pytest.raises(ConfigError, match="has no checkpoint"):  # past the config comparison
        resume_checkpoint(cfg, config, checkpoint.UNBOUNDED)
    changed = make_config("fedbpt", output_dir=str(tmp_path / "runs"), resume="old-run", text_column="body")
    with pytest.raises(ConfigError, match=r"these differ: text-column='body' \(run: 'text'\)"):
        resume_checkpoint(changed, {**changed.to_run_config(), "resolved-task": "demo"}, checkpoint.UNBOUNDED)


def test_a_three_class_csv_of_ones_own_runs_end_to_end(tmp_path):
    """Issue 37 item 2 end to end, in the server's own round loop (tests/inprocess.py; through
    Flower's Ray engine until issue 55): 2 clients, 1 round, on a 3-class string-label CSV; the
    labels map to ids in a recorded order and the task is named by the folder."""
    import json

    from ..inprocess import TINY_BERT, run

    folder = _three_class_csv(tmp_path, train=90, test=30)
    run_dir, rounds = run({"method": "fedprompt", "dataset": str(folder), "text-column": "sentence",
                           "num-server-rounds": 1, "shots-per-class": 4, "client-test-size": 6, "eval-size": 30,
                           "prompt-length": 4, "max-length": 32, "fedprompt.local-steps": 2, **TINY_BERT},
                          tmp_path / "runs")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    config = json.loads((run_dir / "config.json").read_text())["config"]
    assert json.loads(config["resolved-labels"]) == ["neg", "neu", "pos"] and config["resolved-task"] == "reviews3"
    assert [r["round"] for r in rounds] == [0, 1] and rounds[-1]["num_clients"] == 2
    assert 0.0 <= rounds[-1]["global_accuracy"] <= 1.0
