"""FeS against the authors' code: UbiquitousLearning/FeS (``pet/modeling.py``, ``pet/ipet.py``,
``fed/selective_annotating.py``, with their ``fed/utils.py`` and ``fed/augment.py``).

Checks:

``schedule_<case>``
    The authors' round loop itself, ``train_fedpet`` (``pet/modeling.py``), run for G
    generations with stand-ins for what it does besides scheduling: training
    (``train_pet_ensemble``), inference (``evaluate``), pseudo-label files
    (``generate_fedipet_train_sets``), model loading, saving and aggregation
    (``TransformerModelWrapper.from_pretrained``, ``init_model``, ``aggregate``) and the
    proxy filter (``select_by_voting`` returns the first ``select_num`` texts; the filter is
    checked below); their client selection (``fed/utils.py``, ``fed/augment.py``) is their
    own. Recorded per generation: whether clients label (the labelling branch runs), which
    aggregate they label with (``g{gen-1}``: the model after ``gen`` rounds of training),
    the ``augmented_point`` it logs ("will annotate N data"), how many clients label, and the
    aggregate each training starts from. Compared with fedtext in round ``r = gen + 1``:
    :meth:`Pace.labels_round`, :meth:`Pace.target` on :func:`keep_count` candidates (static
    pacing: ``min(static-labels, |U|)``), ``min(n, clients)`` labelling clients, and the
    model a client is sent in round ``r``, which has trained ``r - 1`` rounds (Flower's
    FedAvg loop; that number is fedtext's by construction, not computed by a function).
    The run is the best evidence of *when* and *with which model* they label; it is
    cheap, so it is run rather than read.
``pacing_target``
    Their ``augmented_point`` expression (``pet/modeling.py``, the curriculum assignment;
    the harness asserts that the vote-k branch repeats it) taken from their source with
    ``ast`` and evaluated on a grid of (|U|, k, gen, f), gen 0 included, which the run
    never reaches: against ``Pace(f, n, k).target(|U|, gen + 1)``. Evaluating the
    expression rather than running ``train_fedpet`` 735 times gives the same numbers (the
    schedule checks run it) and covers points a run cannot.
``keep_count``
    Their ``select_num = int(len(unlabeled_data) * args.vote_k)`` (also by ``ast``) on a
    grid of (N, ratio), against :func:`keep_count`.
``votek_<case>``
    Their ``fast_votek`` on ``calculate_sentence_transformer_embedding(mean=True)`` of
    seeded embeddings (a stand-in ``SentenceTransformer`` returns them; ``vote_file=None``),
    against ``knn_sets(centre=True)`` + :func:`votek_filter` (``fes.centre-proxy=true
    fes.vote=votek``). A selection is compared as a vector over the N texts: 0 for a text
    not chosen, its place (1, 2, ...) for one chosen. Where their loop runs out of texts
    with an unchosen voter it picks chosen texts again; those repeats are dropped from their
    list (fedtext stops there). Cases: several N, k (their 150 included, and k > N),
    selection sizes (0 included), clean pairs (every vote count and score tied), and exact
    duplicate texts (a departure, below). ``eq2_<case>``: fedtext's default eq. (2) on the
    same inputs, a written-down departure.
``class_quota_<case>``
    Their ``generate_fedipet_train_sets`` (``pet/ipet.py``: per-class quotas, then
    ``_draw_examples_by_label_probability``) on seeded logits written as their logits file,
    the examples carrying the labels the current logits predict: against
    :func:`pick_class_quota` on the same softmax, given their RNG,
    ``np.random.RandomState(seed)`` (fedtext's runs seed a ``Generator`` per client and
    round instead: the rule, quotas and probabilities are theirs, the stream is not).
    Compared: the drawn rows in order, their labels, the quotas. The ``true_labels`` case
    (the labels carried are the true ones, as theirs the first time a client labels) is a
    written-down departure: quotas only.

Run it in fedtext's environment (numpy, torch, scikit-learn; ``sentence_transformers``,
``transformers`` and the authors' PET wrapper are stand-ins):
``python -m tools.reference.fes --repo <UbiquitousLearning/FeS checkout>``.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import json
import logging
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from tools.reference import common

REPO = "UbiquitousLearning/FeS"
MODELING = "pet/modeling.py"
IPET = "pet/ipet.py"
PET_UTILS = "pet/utils.py"
SELECTIVE = "fed/selective_annotating.py"
FED_UTILS = "fed/utils.py"
FED_AUGMENT = "fed/augment.py"
TOL = 0.0  # integers on both sides

# ------------------------------------------------------------------ the cases
# train_fedpet runs: G generations (rounds), pace <f, n, k>, |U| per client, vote_k (0: no filter),
# their module switch `augment` ('fixed' as committed; 'curriculum' for the unfiltered curriculum),
# clients holding gold labels (L) and clients in all (M)
SCHEDULES = {
    "schedule_f1": dict(G=6, f=1, n=2, k=10, U=40, vote_k=0.5, augment="fixed", L=2, M=4),
    "schedule_f2": dict(G=9, f=2, n=3, k=10, U=50, vote_k=0.25, augment="fixed", L=2, M=5),
    "schedule_f3_one_client": dict(G=10, f=3, n=1, k=20, U=30, vote_k=1.0, augment="fixed", L=1, M=1),
    "schedule_static": dict(G=5, f=1, n=2, k=16, U=40, vote_k=0.0, augment="fixed", L=2, M=4),
    "schedule_nofilter_f2": dict(G=7, f=2, n=2, k=12, U=25, vote_k=0.0, augment="curriculum", L=2, M=3),
    "schedule_zero_targets": dict(G=4, f=1, n=2, k=5, U=7, vote_k=0.5, augment="fixed", L=2, M=3),
}
PACING_GRID = dict(U=[0, 1, 7, 25, 40, 160, 1203], k=[1, 5, 10, 33, 60], gen=[0, 1, 2, 3, 5, 8, 13], f=[1, 2, 3])
KEEP_GRID = dict(n_max=200, ratios=[0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.5, 0.7, 1.0])
# fast_votek: N texts of dimension d, k neighbours, ratio -> select_num = int(N * ratio), kind of embeddings
VOTEK = {
    "votek_n40_k4": dict(n=40, d=8, k=4, ratio=0.1, seed=1, kind="gauss"),
    "votek_n120_k16": dict(n=120, d=16, k=16, ratio=0.25, seed=2, kind="gauss"),
    "votek_n300_k150": dict(n=300, d=32, k=150, ratio=0.1, seed=3, kind="gauss"),
    "votek_n6_k150": dict(n=6, d=4, k=150, ratio=0.5, seed=4, kind="gauss"),
    "votek_pairs_k1": dict(n=20, d=8, k=1, ratio=0.7, seed=5, kind="pairs"),
    "votek_n9_none_kept": dict(n=9, d=4, k=4, ratio=0.1, seed=6, kind="gauss"),
    "votek_duplicates": dict(n=30, d=8, k=4, ratio=0.34, seed=5, kind="duplicates"),
}
EQ2 = {"eq2_n120_k16": "votek_n120_k16", "eq2_pairs_k1": "votek_pairs_k1"}  # fedtext's default on those inputs
VOTEK_DEPARTS = {"votek_duplicates": "exact duplicate texts: their k-NN slice drops a text's duplicate, not itself"}
# class quotas: N texts, C classes, target (num_new_examples), RandomState seed; `counts`: rows predicted per class
QUOTAS = {
    "class_quota_n40": dict(n=40, c=4, target=12, seed=42),
    "class_quota_n97_c5": dict(n=97, c=5, target=31, seed=7),
    "class_quota_float_floor": dict(n=44, c=2, target=30, seed=3, counts=[22, 22]),  # 22 * (30/44) = 14.999...
    "class_quota_float_floor_3": dict(n=66, c=3, target=45, seed=4, counts=[22, 44, 0]),
    "class_quota_one_class": dict(n=49, c=3, target=1, seed=5, counts=[49, 0, 0]),  # 49 * (1/49) = 0.999...
    "class_quota_zero_target": dict(n=20, c=4, target=0, seed=6),
    "class_quota_n1": dict(n=1, c=2, target=1, seed=8),
    "class_quota_true_labels": dict(n=40, c=4, target=20, seed=9, true_labels=True),
}


# ------------------------------------------------------------------ shared inputs
def embeddings(case: dict[str, Any]) -> np.ndarray:
    """The proxy's float32 embeddings of a filter case ``[N, d]``: Gaussian; ``pairs``: N/2
    random directions, each twice with a little noise (every text's nearest neighbour is its
    partner: all vote counts and first scores tie); ``duplicates``: Gaussian with the last
    N/6 rows exact copies of the first ones."""
    n, d = case["n"], case["d"]
    rng = np.random.default_rng([case["seed"], 0xE5])
    if case["kind"] == "pairs":
        centres = rng.standard_normal((n // 2, d))
        e = np.repeat(centres, 2, axis=0) + 0.05 * rng.standard_normal((n, d))
    else:
        e = rng.standard_normal((n, d))
        if case["kind"] == "duplicates":
            e[n - n // 6:] = e[: n // 6]
    return e.astype(np.float32)


def select_num(case: dict[str, Any]) -> int:
    """Texts a filter case keeps: ``int(N * ratio)`` (their ``select_num``, fedtext's ``keep_count``)."""
    return int(case["n"] * case["ratio"])


def placement(chosen: list[int], n: int) -> list[int]:
    """A selection as a vector over the N texts: 0 for a text not chosen, else its place (1-based)."""
    out = [0] * n
    for place, u in enumerate(chosen, 1):
        out[u] = place
    return out


def logits_of(case: dict[str, Any]) -> np.ndarray:
    """Seeded logits ``[N, C]`` of a quota case; with ``counts``, rows ``0..counts[0]-1`` are
    predicted class 0, the next ``counts[1]`` class 1, ..."""
    n, c = case["n"], case["c"]
    rng = np.random.default_rng([case["seed"], 0x9A])
    x = 2.0 * rng.standard_normal((n, c))
    if "counts" in case:
        x += 20.0 * np.eye(c)[np.repeat(np.arange(c), case["counts"])]  # 7 noise sd: no row changes class
    return x


def true_labels(case: dict[str, Any]) -> np.ndarray:
    """The seeded "true" labels of the ``true_labels`` quota case."""
    return np.random.default_rng([case["seed"], 0x7E]).integers(0, case["c"], case["n"])


def softmax(x: np.ndarray) -> np.ndarray:
    """Row softmax, the formula of their ``pet.utils.softmax`` (the model's softmax on fedtext's side)."""
    y = np.exp(x - x.max(axis=1, keepdims=True))
    return y / y.sum(axis=1, keepdims=True)


# ------------------------------------------------------------------ the authors' side
@contextlib.contextmanager
def captured_logs() -> Iterator[list[str]]:
    """Their modules log at INFO on the root logger (and call ``basicConfig``): collect the
    messages instead of printing them; the root logger is restored afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    root.handlers[:] = [Keep()]
    root.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def authors_schedule(repo: Path, case: dict[str, Any]) -> dict[str, Any]:
    """``train_fedpet`` for ``case['G']`` generations with stand-ins (module docstring)."""
    s = common.stub
    loads: list[tuple[int, str]] = []  # (gen, aggregate path) of every labelling load
    trained: dict[int, set[int]] = {}  # gen -> rounds the training starts from
    gen_now = [0]

    class Wrapper:  # pet.wrapper.TransformerModelWrapper: what train_fedpet calls of it
        @staticmethod
        def from_pretrained(path: str) -> object:
            loads.append((gen_now[0], path))
            return object()

    class Example:  # pet.utils.InputExample: what train_fedpet and text_to_encode read
        def __init__(self, guid: str) -> None:
            self.guid, self.text_a, self.text_b, self.label, self.logits = guid, guid, "", None, None

        @staticmethod
        def load_examples(path: str) -> list[None]:
            return [None] * json.loads(Path(path).read_text())

    def generate_fedipet_train_sets(train_data, unlabeled_data, labels, logits_dir, output_dir, reduction,
                                    num_new_examples, **kw):
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        Path(output_dir, "train.bin").write_text(json.dumps(max(int(num_new_examples), 0)))

    def train_pet_ensemble(model_config, train_config, eval_config, pattern_ids, output_dir, *a,
                           aggregated_model_path=None, **kw):
        gen = generation(output_dir)
        gen_now[0] = gen + 1  # a labelling after this happens in the next generation
        start = 0 if aggregated_model_path is None else generation(aggregated_model_path) + 1
        trained.setdefault(gen, set()).add(start)

    base = {"pet": s("pet"), "fed": s("fed"),
            "pet.wrapper": s("pet.wrapper", TransformerModelWrapper=Wrapper, SEQUENCE_CLASSIFIER_WRAPPER="cls",
                             WrapperConfig=object)}
    with captured_logs() as lines:
        augment = common.load(repo / FED_AUGMENT, "fed.augment", base)
        utils = common.load(repo / FED_UTILS, "fed.utils", {**base, "fed.augment": augment})
        stubs = {**base, "fed.augment": augment, "fed.utils": utils,
                 "this": s("this", s=""),
                 "transformers": s("transformers", logging=SimpleNamespace(set_verbosity_error=lambda: None)),
                 "transformers.data": s("transformers.data"),
                 "transformers.data.metrics": s("transformers.data.metrics", simple_accuracy=None),
                 "pet.utils": s("pet.utils", InputExample=Example, exact_match=None, save_logits=lambda p, l: None,
                                save_predictions=None, LogitsList=None, set_seed=lambda seed: None,
                                calculate_mean_max_logits=lambda l: 0.0),
                 "pet.ipet": s("pet.ipet", generate_fedipet_train_sets=generate_fedipet_train_sets,
                               deepcopy=copy.deepcopy),
                 "fed.model": s("fed.model", aggregate=lambda models_path, sample_num_list: object()),
                 "fed.bitfit": s("fed.bitfit"),
                 "fed.selective_annotating": s("fed.selective_annotating", select_by_sorting=None,
                                               select_by_voting=lambda ex, num, out, task: ex[:num])}
        mod = common.load(repo / MODELING, "authors_modeling", stubs)
        mod.augment = case["augment"]
        mod.train_pet_ensemble = train_pet_ensemble
        mod.init_model = lambda config: SimpleNamespace(save=lambda path: None, model=None)
        mod.evaluate = lambda wrapper, data, config, label_list=None: {"logits": np.zeros((len(data), 4))}
        M, U = case["M"], case["U"]
        unlabeled = [[Example(f"c{c}-u{i}") for i in range(U)] for c in range(M)]
        with tempfile.TemporaryDirectory() as out:
            mod.train_fedpet(
                SimpleNamespace(label_list=["1", "2", "3", "4"]), None, None,
                SimpleNamespace(generations=case["G"], logits_percentage=0.25, n_most_likely=-1), None, None, None,
                pattern_ids=[1], output_dir=out, train_data=[[] for _ in range(M)], unlabeled_data=unlabeled,
                eval_data=[[Example(f"c{c}-e")] for c in range(M)], do_train=True, do_eval=False, seed=42,
                aggregated=True, augmentation=True, client_num_in_total=case["L"], all_client_num_in_total=M,
                labeled_idx=np.arange(case["L"]), aug_data_point=case["k"], conver_point=0,
                num_clients_infer=case["n"], infer_freq=case["f"],
                args=SimpleNamespace(vote_k=case["vote_k"], task_name="agnews"))
    points: dict[int, list[int]] = {}
    for line in lines:
        m = re.fullmatch(r"Gen (\d+): Client (\d+) will annotate (-?\d+) data\.", line)
        if m:
            points.setdefault(int(m.group(1)), []).append(int(m.group(3)))
    models: dict[int, set[int]] = {}
    for gen, path in loads:
        models.setdefault(gen, set()).add(generation(path) + 1)  # g{gen-1}: after gen rounds of training
    gens = sorted(points)
    assert gens == sorted(models), (gens, sorted(models))
    assert all(len(set(points[g])) == 1 and len(models[g]) == 1 for g in gens)  # every client alike
    assert sorted(trained) == list(range(case["G"])) and all(len(v) == 1 for v in trained.values())
    return {"label_rounds": [g + 1 for g in gens], "label_model_rounds": [models[g].pop() for g in gens],
            "targets": [points[g][0] for g in gens], "label_clients": [len(points[g]) for g in gens],
            "train_model_rounds": [trained[g].pop() for g in range(case["G"])]}


def generation(path: str) -> int:
    """``g`` of an output path ``.../g<g>/<client or aggregate>`` of ``train_fedpet``."""
    return int(re.fullmatch(r"g(-?\d+)", Path(path).parent.name).group(1))


def authors_expression(repo: Path, name: str, contains: str) -> tuple[ast.expr, list[int]]:
    """The right-hand side of the first assignment to ``name`` in ``train_fedpet`` whose
    source contains ``contains`` (of a conditional ``a if c else b``, its ``a``: for
    ``select_num`` the branch ``args.vote_k <= 1``), and the lines of every assignment to
    ``name`` that repeats it (as itself or as the ``a`` of a conditional)."""
    tree = ast.parse((repo / MODELING).read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "train_fedpet")
    assigns = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)), key=lambda n: n.lineno)
    expr = next(n.value for n in assigns if contains in ast.unparse(n.value))
    expr = expr.body if isinstance(expr, ast.IfExp) else expr
    same = [n.lineno for n in assigns
            if ast.dump(n.value) == ast.dump(expr)
            or (isinstance(n.value, ast.IfExp) and ast.dump(n.value.body) == ast.dump(expr))]
    return expr, same


def evaluate_expression(expr: ast.expr, names: dict[str, Any]) -> Any:
    code = compile(ast.Expression(body=expr), MODELING, "eval")
    return eval(code, {"__builtins__": {}, "min": min, "int": int, "len": len}, names)  # noqa: S307 (their expression)


def authors_pacing(repo: Path) -> dict[str, Any]:
    expr, lines = authors_expression(repo, "augmented_point", "gen")
    g = PACING_GRID
    values = [evaluate_expression(expr, {"unlabeled_data": range(U), "aug_data_point": k, "gen": gen,
                                         "infer_freq": f})
              for U in g["U"] for k in g["k"] for gen in g["gen"] for f in g["f"]]
    return {"targets": values, "lines": lines, "source": ast.unparse(expr)}


def authors_keep(repo: Path) -> dict[str, Any]:
    expr, lines = authors_expression(repo, "select_num", "vote_k")
    values = [[evaluate_expression(expr, {"unlabeled_data": range(n), "args": SimpleNamespace(vote_k=r)})
               for n in range(KEEP_GRID["n_max"] + 1)] for r in KEEP_GRID["ratios"]]
    return {"keep": values, "lines": lines, "source": ast.unparse(expr)}


def votek_module(repo: Path, table: dict[str, np.ndarray]) -> Any:
    class SentenceTransformer:  # returns the case's embeddings for its texts "t<i>"
        def __init__(self, name: str) -> None:
            self.name = name

        def encode(self, texts: list[str]) -> np.ndarray:
            return np.stack([table[t] for t in texts])

    stubs = {"sentence_transformers": common.stub("sentence_transformers", SentenceTransformer=SentenceTransformer)}
    return common.load(repo / SELECTIVE, "authors_selective_annotating", stubs)


def authors_votek(repo: Path) -> dict[str, Any]:
    table: dict[str, np.ndarray] = {}
    mod = votek_module(repo, table)
    out = {}
    for name, case in VOTEK.items():
        e = embeddings(case)
        texts = [f"t{i}" for i in range(case["n"])]
        table.clear()
        table.update(zip(texts, e, strict=True))
        emb = mod.calculate_sentence_transformer_embedding(texts, mean=True)
        chosen = mod.fast_votek(emb, select_num(case), case["k"], None)
        out[name] = {"placement": placement(list(dict.fromkeys(chosen)), case["n"]), "picks": len(chosen)}
    return out


def authors_quotas(repo: Path) -> dict[str, Any]:
    transformers = common.stub("transformers", PreTrainedTokenizer=object, GPT2Tokenizer=object)
    pet_utils = common.load(repo / PET_UTILS, "pet.utils", {"transformers": transformers})
    ipet = common.load(repo / IPET, "authors_ipet", {"pet": common.stub("pet"), "pet.utils": pet_utils})
    out = {}
    for name, case in QUOTAS.items():
        x = logits_of(case)
        labels = [str(c) for c in range(case["c"])]
        carried = true_labels(case) if case.get("true_labels") else pet_utils.softmax(x, axis=1).argmax(1)
        examples = [pet_utils.InputExample(guid=i, text_a=f"t{i}", label=labels[int(c)]) for i, c in enumerate(carried)]
        # their train.bin is a pickle of pet.utils.InputExample: `pet.utils` must import meanwhile
        with tempfile.TemporaryDirectory() as tmp, common.stand_ins({"pet": common.stub("pet", utils=pet_utils),
                                                                     "pet.utils": pet_utils}):
            logits_dir = Path(tmp, "g0")
            (logits_dir / "client0-p1").mkdir(parents=True)
            pet_utils.save_logits(str(logits_dir / "client0-p1" / "logits.txt"), x.tolist())
            ipet.generate_fedipet_train_sets(
                train_data=examples, unlabeled_data=examples, labels=labels, logits_dir=str(logits_dir),
                output_dir=str(Path(tmp, "out")), reduction="mean", num_new_examples=case["target"],
                logits_percentage=0.25, n_most_likely=-1, seed=case["seed"], aggregated=True, pattern=1)
            drawn = pet_utils.InputExample.load_examples(str(Path(tmp, "out", "train.bin")))
        rows, got = [int(ex.guid) for ex in drawn], [labels.index(ex.label) for ex in drawn]
        quotas = np.bincount(np.asarray(got, dtype=int), minlength=case["c"]).tolist()
        out[name] = {"quotas": quotas} if case.get("true_labels") else {"rows": rows, "labels": got, "quotas": quotas}
    return out


def authors(repo: Path) -> dict[str, Any]:
    """Every check's result from the authors' code."""
    with captured_logs():
        out: dict[str, Any] = {n: authors_schedule(repo, c) for n, c in SCHEDULES.items()}
        out["pacing_target"] = authors_pacing(repo)
        out["keep_count"] = authors_keep(repo)
        out.update(authors_votek(repo))
        out.update(authors_quotas(repo))
    return out


# ------------------------------------------------------------------ fedtext's side
def ours_schedule(inputs: dict[str, Any]) -> dict[str, Any]:
    """Rounds 1..G of fedtext: which label (:meth:`Pace.labels_round`), their targets, how
    many clients label, and the model a client is sent (after ``r - 1`` rounds)."""
    from fedtext.methods.fes.filter import keep_count
    from fedtext.methods.fes.pacing import Pace

    c = inputs
    static = c["augment"] == "fixed" and not c["vote_k"]  # their fixed count: fedfsl's static pacing
    pace = Pace(1, c["n"], 1.0) if static else Pace(c["f"], c["n"], c["k"])  # strategies.fes round_pace
    candidates = keep_count(c["U"], c["vote_k"]) if c["vote_k"] else c["U"]
    rounds = [r for r in range(1, c["G"] + 1) if pace.labels_round(r)]
    targets = [min(candidates, c["k"]) if static else pace.target(candidates, r) for r in rounds]
    return {"label_rounds": rounds, "label_model_rounds": [r - 1 for r in rounds], "targets": targets,
            "label_clients": [min(pace.n, c["M"]) for _ in rounds],
            "train_model_rounds": [r - 1 for r in range(1, c["G"] + 1)]}


def ours_pacing(inputs: dict[str, Any]) -> dict[str, Any]:
    from fedtext.methods.fes.pacing import Pace

    g = inputs
    return {"targets": [Pace(f, 1, k).target(U, gen + 1)
                        for U in g["U"] for k in g["k"] for gen in g["gen"] for f in g["f"]]}


def ours_keep(inputs: dict[str, Any]) -> dict[str, Any]:
    from fedtext.methods.fes.filter import keep_count

    return {"keep": [[keep_count(n, r) for n in range(inputs["n_max"] + 1)] for r in inputs["ratios"]]}


def ours_votek(inputs: dict[str, Any]) -> dict[str, Any]:
    """``knn_sets(centre=True)`` + ``fes.vote`` (``votek``, or ``eq2`` for the eq2 checks)."""
    from fedtext.methods.fes.filter import VOTES, keep_count, knn_sets

    neighbours = knn_sets(embeddings(inputs), inputs["k"], centre=True)
    return {"placement": placement(VOTES[inputs["vote"]](neighbours, keep_count(inputs["n"], inputs["ratio"]), 10.0),
                                   inputs["n"])}


def ours_quota(inputs: dict[str, Any]) -> dict[str, Any]:
    """:func:`pick_class_quota` on the softmax of the case's logits with ``RandomState(seed)``."""
    from fedtext.methods.fes.labels import pick_class_quota

    rows, labels = pick_class_quota(softmax(logits_of(inputs)), inputs["target"], np.random.RandomState(inputs["seed"]))
    quotas = np.bincount(labels, minlength=inputs["c"]).tolist()
    return {"quotas": quotas} if inputs.get("true_labels") else {"rows": rows.tolist(), "labels": labels.tolist(),
                                                                 "quotas": quotas}


OURS = {**{n: ours_schedule for n in SCHEDULES}, "pacing_target": ours_pacing, "keep_count": ours_keep,
        **{n: ours_votek for n in [*VOTEK, *EQ2]}, **{n: ours_quota for n in QUOTAS}}


def tie_steps(neighbours: np.ndarray, chosen: list[int]) -> tuple[int, int]:
    """Replaying a vote-k selection: at how many of its steps was the highest score shared
    by two texts or more (so that the tie order chose), of how many steps."""
    n = len(neighbours)
    votes = np.zeros((n, n))
    for x, vs in enumerate(neighbours):
        votes[x, vs] = 1.0
    free, times, ties = np.ones(n, dtype=bool), np.zeros(n, dtype=int), 0
    for u in chosen:
        score = np.cumsum(votes * np.where(free, [10.0 ** -int(t) for t in times], 0.0)[:, None], axis=0)[-1]
        live = free & (votes[free].sum(axis=0) > 0)
        ties += int(np.sum(score[live] == score[live].max()) > 1)
        free[u] = False
        times += votes[:, u].astype(int)
    return ties, len(chosen)


def main() -> None:
    from fedtext.methods.fes.filter import knn_sets

    args = common.parser("fes", REPO).parse_args()
    theirs = common.authors_side(args, "fes", authors)
    checks = {}
    for name, case in SCHEDULES.items():
        what = ("static pacing (their augment='fixed', no filter)" if case["augment"] == "fixed" and not case["vote_k"]
                else f"curriculum, vote_k={case['vote_k']:g}" if case["vote_k"] else "curriculum, no filter")
        checks[name] = common.check(
            f"labelling schedule, f={case['f']}, {case['G']} rounds, {what}", MODELING,
            "fedtext/methods/fes/pacing.py (Pace.labels_round, Pace.target), filter.py (keep_count)", case,
            theirs[name], ours_schedule(case), TOL,
            note="train_fedpet run with stand-ins: labelling rounds (gen + 1), the rounds the model they label "
                 "with has trained (their g{gen-1} aggregate), the augmented_point logged, labelling clients, "
                 "and the model each round's training starts from")
    pacing = theirs["pacing_target"]
    checks["pacing_target"] = common.check(
        "curriculum target augmented_point over (|U|, k, gen, f)", MODELING,
        "fedtext/methods/fes/pacing.py (Pace.target)",
        PACING_GRID, {"targets": pacing["targets"]}, ours_pacing(PACING_GRID), TOL,
        note=f"their `{pacing['source']}` (pet/modeling.py lines {pacing['lines']}) evaluated by ast; "
             "fedtext: Pace(f, n, k).target(|U|, gen + 1)")
    keep = theirs["keep_count"]
    checks["keep_count"] = common.check(
        "filter keep count select_num over (N, ratio)", MODELING, "fedtext/methods/fes/filter.py (keep_count)",
        KEEP_GRID, {"keep": keep["keep"]}, ours_keep(KEEP_GRID), TOL,
        note=f"their `{keep['source']}` (pet/modeling.py lines {keep['lines']}) evaluated by ast")
    for name, case in VOTEK.items():
        inputs = {**case, "vote": "votek"}
        want = theirs[name]
        chosen = [u for _, u in sorted((p, u) for u, p in enumerate(want["placement"]) if p)]
        ties, steps = tie_steps(knn_sets(embeddings(case), case["k"], centre=True), chosen)
        repeats = want["picks"] - len(chosen)
        checks[name] = common.check(
            f"vote-k filter, N={case['n']}, k={case['k']}, select_num={select_num(case)} ({case['kind']})", SELECTIVE,
            "fedtext/methods/fes/filter.py (knn_sets centre=True, votek_filter)", inputs,
            {"placement": want["placement"]}, ours_votek(inputs), TOL,
            note=(f"ties at the top score in {ties} of {steps} steps"
                  + (f"; their loop then picked {repeats} chosen texts again (dropped)" if repeats else "")
                  + (f"; {VOTEK_DEPARTS[name]} (numpy {np.__version__}'s argsort puts the higher id last; the "
                     "lower id's V(x) then holds k-1 texts without its duplicate)" if name in VOTEK_DEPARTS else "")),
            departs=VOTEK_DEPARTS.get(name, ""))
    for name, of in EQ2.items():
        case = VOTEK[of]
        inputs = {**case, "vote": "eq2"}
        ours = ours_votek(inputs)
        differ = sum(a != b for a, b in zip(ours["placement"], theirs[of]["placement"], strict=True))
        kept = {u for u, p in enumerate(theirs[of]["placement"]) if p}
        other = len(kept - {u for u, p in enumerate(ours["placement"]) if p})
        checks[name] = common.check(
            f"eq. (2) (fes.vote=eq2, the default) on {of}'s inputs", SELECTIVE,
            "fedtext/methods/fes/filter.py (representational_filter)", inputs, {"placement": theirs[of]["placement"]},
            ours, TOL, note=f"{differ} of {case['n']} texts placed differently, {other} of their {len(kept)} chosen "
                            "texts not chosen: chosen voters keep voting (weighted "
                            "rho^-|V(x) ∩ L|), ties go to the lowest id, unvoted texts can be chosen",
            departs="eq. (2) as the paper writes it; fes.vote=votek is the authors'")
    for name, case in QUOTAS.items():
        departs = "their quotas count the true labels the first time (fedtext: the predictions)" \
            if case.get("true_labels") else ""
        checks[name] = common.check(
            f"class-quota pick, N={case['n']}, C={case['c']}, target={case['target']}", IPET,
            "fedtext/methods/fes/labels.py (pick_class_quota)", case, theirs[name], ours_quota(case), TOL,
            note="generate_fedipet_train_sets with their RandomState(seed); rows in draw order, labels, quotas"
                 + ("; quotas only" if departs else ""), departs=departs)
    common.write(args.out, "fes", REPO, common.commit_of(args.repo),
                 [MODELING, IPET, PET_UTILS, SELECTIVE, FED_UTILS, FED_AUGMENT], checks,
                 packages=("numpy", "scikit-learn", "torch"), authors_python=args.authors_python)


if __name__ == "__main__":
    main()
