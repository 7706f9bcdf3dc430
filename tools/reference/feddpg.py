"""FedDPG against the authors' code: gotobcn8/FedDPG (``model/feddpg.py``,
``utils/aggregation_utils.py``, ``federated/client.py``, ``federated/unlearning.py``).

The authors' class ``FedDPG(model_name, num_labels, prompt_length)`` loads its PLM with
``AutoModel.from_pretrained(model_name)``; here it is built on the offline backbone's folder
(all-MiniLM-L6-v2, D = 384), so both sides read the same word embeddings. Its generator has
h = 10 hidden units (hard-coded); fedtext's checks use ``feddpg.hidden = 10``.

Checks:

``generator_p<P>``
    G on given ē with identical weights: the authors' ``prompt_generator`` against
    :class:`fedtext.methods.feddpg.model.FedDPGModel`'s G loaded with the same four arrays
    (in :meth:`FedDPGModel.global_specs` order, which is the authors' state-dict order).
``mean_embedding_padded`` / ``mean_embedding_tokens``
    ē of real SST-2 and AG News texts: what the authors' ``forward`` feeds G (captured by a
    hook) on the texts tokenised as their ``data/glue.py`` does (``padding='max_length'``,
    ``max_length=128``), against :func:`fedtext.methods.feddpg.model.mean_embedding` on
    fedtext's own encoding, with ``feddpg.mean-embedding = padded`` (agrees) and the
    default ``tokens`` (a departure: the mean over the text's tokens, eq. 2, not over the
    128 padded positions).
``prompts_padded`` / ``prompts_tokens``
    The |P| prompt vectors the authors' ``forward`` puts in front of the text (captured at
    the encoder's ``inputs_embeds``) against :meth:`FedDPGModel.prompts` on the same texts
    with the same seeded G, under each ``mean-embedding``.
``server_mean_k<K>``
    ``aggregate_model_states`` (the authors' server: the plain mean of the clients' G)
    against :meth:`strategies.feddpg.FedDPG.aggregate` on K uploads with unequal example
    counts (a weighted mean would differ).
``unlearn_loss_examples_*`` / ``unlearn_loss_sets_*``
    Eq. (5) on identical logits: the loss ``client_unlearn`` computes (one cross-entropy
    over the client's data with the forgotten labels replaced in place; read off its
    progress bar, a stand-in here) against :func:`fedtext.methods.feddpg.unlearning.unlearning_loss`
    with λ = 1, ``examples`` (agrees) and the default ``sets`` (a departure, written down).
``unlearn_labels_client_subset``
    The labels ``client_unlearn`` trains on when the client's data set is a ``Subset`` of
    the training set, as the authors' ``prepare_data`` builds it: it matches the forgotten
    *client-local* indices against the examples' *data-set-wide* ``index``, so it relabels
    other examples than the forgotten ones (or none). fedtext relabels the forgotten
    examples (a departure: the paper's rule, which the code means to apply).
``relabel_support_c<C>`` / ``relabel_draws_c4``
    §3.3's relabelling: the authors' ``fu_round0810`` draws ``random.choice`` among the
    labels other than the true one; fedtext's :func:`relabel` adds a shift drawn uniformly
    from 1..C-1 modulo C. The draws differ; compared is the distribution: the exact
    probability of each (true, new) pair from the candidates each side draws among (a
    recording stand-in for the random source), and the frequencies of 20,000 seeded draws.

``python -m tools.reference.feddpg --repo <gotobcn8/FedDPG checkout>``; the authors' side
needs torch and transformers (fedtext's venv has both), and the offline backbone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from tools.reference import common

REPO = "gotobcn8/FedDPG"
MODEL_FILE = "model/feddpg.py"
AGG_FILE = "utils/aggregation_utils.py"
CLIENT_FILE = "federated/client.py"
UNLEARN_FILE = "federated/unlearning.py"
FILES = [MODEL_FILE, AGG_FILE, CLIENT_FILE, UNLEARN_FILE]

MODEL = "all-MiniLM-L6-v2"  # the offline backbone; the authors' default is roberta-base
MAX_LENGTH = 64  # fedtext's text truncation in these checks (the tests' backbone); the texts are shorter
AUTHORS_MAX_LENGTH = 128  # data/glue.py, data/agnews.py: padding='max_length', max_length=128
HIDDEN = 10  # the authors' G: Linear(D, 10) - ReLU - Linear(10, D |P|)
TOL = 1e-5  # float32 on both sides

# Real texts (../shared/data: the first three of SST-2 dev and of AG News test with at most 60
# word pieces, so neither side truncates them).
TEXTS_FROM = {"sst2": "sst2/dev.tsv", "ag_news": "ag_news/test.tsv"}

GENERATOR_CASES = {f"generator_p{p}": dict(prompts=p, hidden=HIDDEN, rows=3, seed=10 + p) for p in (1, 5, 10)}
SERVER_CASES = {"server_mean_k3": dict(prompts=10, hidden=HIDDEN, num_examples=[8, 40, 200], seed=3),
                "server_mean_k5": dict(prompts=5, hidden=HIDDEN, num_examples=[1, 2, 3, 500, 64], seed=5)}
LOSS_CASES = {"c4_n20": dict(n=20, classes=4, forget=4, seed=1),
              "c2_n13": dict(n=13, classes=2, forget=3, seed=2),
              "c5_n50": dict(n=50, classes=5, forget=10, seed=3)}
SUBSET_CASE = dict(n_full=400, clients=10, client=3, fraction=0.2, classes=4, seed=7)
SUPPORT_CLASSES = (2, 4, 10)
DRAWS_CASE = dict(classes=4, draws=20_000, seed=42)


# ------------------------------------------------------------------ shared inputs
def model_path() -> str:
    from fedtext.backbone import resolve_model_path

    return resolve_model_path(MODEL)


def backbone() -> Any:
    """The offline backbone as the unit tests build it (``tests/conftest.py``): one per process."""
    from fedtext.backbone import get_backbone

    return get_backbone(MODEL, "similarity", "demo", MAX_LENGTH)


def real_texts() -> list[str]:
    """Three SST-2 and three AG News texts of at most 60 word pieces (read once, stored in the fixture)."""
    import pandas as pd

    bb = backbone()
    out = []
    for rel in TEXTS_FROM.values():
        df = pd.read_csv(common.ROOT.parent / "shared" / "data" / rel, sep="\t", quoting=3)
        short = [t for t in df["text"].head(200) if len(bb.tokenizer(t, add_special_tokens=False)["input_ids"]) <= 60]
        out += short[:3]
    return out


def generator_arrays(prompts: int, hidden: int, dim: int, seed: int) -> list[np.ndarray]:
    """G's four tensors, float32, seeded, at PyTorch's default init scale, in state-dict order."""
    rng = np.random.default_rng([seed, 0xD96])
    b1, b2 = 1 / np.sqrt(dim), 1 / np.sqrt(hidden)
    return [rng.uniform(-b1, b1, (hidden, dim)).astype(np.float32), rng.uniform(-b1, b1, hidden).astype(np.float32),
            rng.uniform(-b2, b2, (prompts * dim, hidden)).astype(np.float32),
            rng.uniform(-b2, b2, prompts * dim).astype(np.float32)]


def e_bars(case: dict[str, Any], dim: int) -> np.ndarray:
    """Seeded inputs ē ``[rows, D]`` at a word embedding's scale."""
    return (0.05 * np.random.default_rng([case["seed"], 1]).standard_normal((case["rows"], dim))).astype(np.float32)


def probes(n: int) -> np.ndarray:
    """Four fixed vectors ``[4, n]``: a long vector v is kept as its first 8 entries, ``P v`` and ``|v|``."""
    return np.random.default_rng([n, 0xC]).standard_normal((4, n))


def summary(x: Any) -> dict[str, Any]:
    """Each row of ``x`` (``[..., n]``, flattened to rows) as head, probe products and norm."""
    x = np.asarray(x, dtype=np.float64)
    x = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x[None]
    return {"head": x[:, :8], "probes": x @ probes(x.shape[1]).T, "norm": np.linalg.norm(x, axis=1)}


def logits_of(case: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(logits ``[n, C]`` float32, true labels, forgotten indices, their relabels) of a loss case."""
    rng = np.random.default_rng([case["seed"], 0x105])
    n, c = case["n"], case["classes"]
    logits = (2 * rng.standard_normal((n, c))).astype(np.float32)
    labels = rng.integers(0, c, n)
    forget = np.sort(rng.choice(n, case["forget"], replace=False))
    relabels = (labels[forget] + rng.integers(1, c, len(forget))) % c
    return logits, labels, forget, relabels


# ------------------------------------------------------------------ loading the authors' files
class Logger:
    def info(self, *a: Any, **k: Any) -> None:
        pass


class Bar:
    """Stand-in for ``tqdm``: iterates, and keeps what ``set_postfix`` was told (the loss)."""

    postfix: list[dict[str, float]] = []

    def __init__(self, iterable: Any, **kw: Any) -> None:
        self.iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable)

    def set_postfix(self, d: dict[str, float]) -> None:
        Bar.postfix.append(dict(d))


def load_model(repo: Path) -> Any:
    return common.load(repo / MODEL_FILE, "authors_feddpg_model")


def load_client(repo: Path) -> Any:
    return common.load(repo / CLIENT_FILE, "authors_feddpg_client", {"tqdm": common.stub("tqdm", tqdm=Bar)})


def load_unlearning(repo: Path, client_unlearn: Any, initialize_model: Any) -> Any:
    s = common.stub
    stubs = {"federated": s("federated"), "federated.client": s("federated.client", client_unlearn=client_unlearn),
             "utils": s("utils"), "utils.data_utils": s("utils.data_utils", prepare_data=None),
             "utils.model_utils": s("utils.model_utils", initialize_model=initialize_model)}
    return common.load(repo / UNLEARN_FILE, "authors_feddpg_unlearning", stubs)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # autocast('cuda') / GradScaler on a CPU: disabled, with a warning
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


# ------------------------------------------------------------------ the authors' side
def authors_generator(repo: Path, case: dict[str, Any]) -> Any:
    import torch

    mod = load_model(repo)
    model = mod.FedDPG(model_name=model_path(), num_labels=2, prompt_length=case["prompts"])
    dim = model.model.config.hidden_size
    state = dict(zip(model.prompt_generator.state_dict(), generator_arrays(case["prompts"], case["hidden"], dim,
                                                                          case["seed"]), strict=True))
    model.prompt_generator.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    with torch.no_grad():
        out = model.prompt_generator(torch.as_tensor(e_bars(case, dim)))
    return summary(out.numpy())


def authors_forward(repo: Path, texts: list[str], prompts: int, seed: int) -> dict[str, Any]:
    """The authors' ``forward`` on ``texts`` tokenised as ``data/glue.py`` does: ē (G's input)
    and the prompt vectors the encoder receives before the text."""
    import torch

    mod = load_model(repo)
    model = mod.FedDPG(model_name=model_path(), num_labels=2, prompt_length=prompts)
    dim = model.model.config.hidden_size
    state = dict(zip(model.prompt_generator.state_dict(), generator_arrays(prompts, HIDDEN, dim, seed), strict=True))
    model.prompt_generator.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
    # data/glue.py's tokenizer.encode_plus(...) with these arguments; transformers 5 calls it tokenizer(...)
    enc = [model.tokenizer(t, add_special_tokens=True, max_length=AUTHORS_MAX_LENGTH, return_token_type_ids=False,
                           padding="max_length", truncation=True, return_attention_mask=True, return_tensors="pt")
           for t in texts]
    ids = torch.cat([e["input_ids"] for e in enc])
    mask = torch.cat([e["attention_mask"] for e in enc])
    seen: dict[str, Any] = {}
    h1 = model.prompt_generator.register_forward_pre_hook(lambda _m, args: seen.update(e_bar=args[0].clone()))
    h2 = model.model.register_forward_pre_hook(
        lambda _m, _a, kw: seen.update(embeds=kw["inputs_embeds"].clone()), with_kwargs=True)
    model.eval()
    with torch.no_grad():
        model(ids, mask)
    h1.remove()
    h2.remove()
    text_embeds = model.model.embeddings.word_embeddings(ids)
    assert torch.equal(seen["embeds"][:, prompts:], text_embeds)  # [P; e(x)]: the prompt before the first token
    prompts_in = seen["embeds"][:, :prompts].reshape(len(texts), -1)  # per text: its |P| D values
    return {"e_bar": summary(seen["e_bar"].numpy()), "prompts": summary(prompts_in.numpy())}


def authors_server(repo: Path, case: dict[str, Any]) -> Any:
    import torch

    mod = common.load(repo / AGG_FILE, "authors_feddpg_aggregation")
    names = ["0.weight", "0.bias", "2.weight", "2.bias"]
    states = []
    for k in range(len(case["num_examples"])):
        arrays = generator_arrays(case["prompts"], case["hidden"], 384, case["seed"] * 100 + k)
        states.append({"prompt_generator": {n: torch.as_tensor(a) for n, a in zip(names, arrays, strict=True)},
                       "classifier": {"0.weight": torch.zeros(10, 384)}})  # the code averages its head too
    agg = mod.aggregate_model_states(states)["prompt_generator"]
    return [summary(agg[n].numpy().reshape(-1)) for n in names]


class LogitTable:
    """A stand-in model for ``client_unlearn``: row ``input_ids[:, 0]`` of a fixed logit table
    (so the loss is the cross-entropy of given logits); records the rows and labels it saw."""

    def __new__(cls, logits: np.ndarray) -> Any:
        import torch

        class Table(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.table = torch.nn.Parameter(torch.as_tensor(logits))
                self.prompt_generator = torch.nn.Linear(1, 1)
                self.classifier = torch.nn.Linear(1, 1)

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                return self.table[input_ids[:, 0]]

        return Table()


def run_client_unlearn(repo: Path, logits: np.ndarray, items: list[dict[str, Any]], relabel_at: list[int],
                       relabels: list[int]) -> tuple[float, dict[int, int]]:
    """``client_unlearn`` for one full-batch epoch on ``items`` (a data set; ``input_ids`` = the
    row of ``logits``): the loss it reports and the label each row was trained on."""
    import torch

    mod = load_client(repo)
    trained: dict[int, int] = {}
    ce = torch.nn.functional.cross_entropy
    last: list[Any] = []

    def recording_ce(outputs: Any, labels: Any, *a: Any, **k: Any) -> Any:
        last.append(labels.clone())
        return ce(outputs, labels, *a, **k)

    model = LogitTable(logits)
    rows: list[Any] = []
    model.register_forward_pre_hook(lambda _m, args: rows.append(args[0][:, 0].clone()))
    args = SimpleNamespace(batch_size=len(items), learning_rate=1e-3, local_epochs=1)
    Bar.postfix = []
    torch.manual_seed(0)  # the DataLoader shuffles (shuffle=True): the same order, the same float sum, every run
    torch.nn.functional.cross_entropy = recording_ce
    try:
        with quiet():
            mod.client_unlearn(Logger(), model, items, args, "cpu", relabel_at, torch.tensor(relabels))
    finally:
        torch.nn.functional.cross_entropy = ce
    for r, y in zip(rows[0].tolist(), last[0].tolist(), strict=True):
        trained[int(r)] = int(y)
    return float(Bar.postfix[0]["loss"]), trained


def authors_loss(repo: Path, case: dict[str, Any]) -> float:
    """The loss ``client_unlearn`` reports, on a data set whose ``index`` is the client-local one."""
    import torch

    logits, labels, forget, relabels = logits_of(case)
    items = [{"input_ids": torch.tensor([i]), "attention_mask": torch.tensor([1]),
              "label": torch.tensor(int(labels[i])), "index": i} for i in range(case["n"])]
    loss, trained = run_client_unlearn(repo, logits, items, forget.tolist(), relabels.tolist())
    want = labels.copy()
    want[forget] = relabels
    assert [trained[i] for i in range(case["n"])] == want.tolist()  # the in-place relabelling hit every forgotten row
    return loss


def subset_inputs(case: dict[str, Any]) -> dict[str, Any]:
    """The IID client split of ``prepare_data`` (a seeded permutation cut in equal parts), the
    client's forgotten local indices (``random.sample`` there) and their relabels."""
    rng = np.random.default_rng([case["seed"], 0x5B])
    n_full, m = case["n_full"], case["clients"]
    labels = rng.integers(0, case["classes"], n_full)
    perm = rng.permutation(n_full)
    size = n_full // m
    members = perm[case["client"] * size : (case["client"] + 1) * size]  # data-set-wide indices, client order
    forget = np.sort(rng.choice(size, int(size * case["fraction"]), replace=False))  # int(): num_unlearn
    relabels = (labels[members[forget]] + rng.integers(1, case["classes"], len(forget))) % case["classes"]
    return {"labels": labels, "members": members, "forget": forget, "relabels": relabels}


def authors_subset(repo: Path, case: dict[str, Any]) -> list[int]:
    """The labels ``client_unlearn`` trains the client's examples on (client order), the client's
    data being ``Subset(full, members)`` whose items carry their data-set-wide ``index``."""
    import torch
    from torch.utils.data import Subset

    s = subset_inputs(case)

    class Full(torch.utils.data.Dataset):  # GLUEDataset.__getitem__: 'index': idx, the data-set-wide index
        def __len__(self) -> int:
            return case["n_full"]

        def __getitem__(self, idx: int) -> dict[str, Any]:
            return {"input_ids": torch.tensor([idx]), "attention_mask": torch.tensor([1]),
                    "label": torch.tensor(int(s["labels"][idx])), "index": idx}

    logits = np.zeros((case["n_full"], case["classes"]), np.float32)
    _, trained = run_client_unlearn(repo, logits, Subset(Full(), s["members"].tolist()), s["forget"].tolist(),
                                    s["relabels"].tolist())
    return [trained[int(g)] for g in s["members"]]


def authors_support(repo: Path, classes: int) -> list[list[float]]:
    """P(new = j | true = y) of ``fu_round0810``'s relabelling, exactly: ``random.choice`` picks
    uniformly among the list it is given; a stand-in records that list."""
    import torch

    candidates: list[list[int]] = []

    def choice(seq: list[int]) -> int:
        candidates.append(list(seq))
        return seq[0]

    mod = load_unlearning(repo, lambda **kw: {}, lambda args: SimpleNamespace(load_state=lambda s: None,
                                                                              to=lambda d: None))
    mod.random = SimpleNamespace(choice=choice)
    data = {0: [{"label": torch.tensor(y)} for y in range(classes)]}
    args = SimpleNamespace(unlearning_client_id=0, num_labels=classes, device="cpu")
    mod.fu_round0810(args, Logger(), SimpleNamespace(state_dict=lambda: {}), data, list(range(classes)))
    p = np.zeros((classes, classes))
    for y, cands in enumerate(candidates):
        p[y, cands] = 1 / len(cands)
    return p.tolist()


def authors_draws(repo: Path, case: dict[str, Any]) -> list[list[float]]:
    """Frequencies of (true, new) over ``draws`` relabels by ``fu_round0810`` (``random.seed``)."""
    import random

    import torch

    c, n = case["classes"], case["draws"]
    got: dict[str, Any] = {}
    mod = load_unlearning(repo, lambda **kw: got.update(kw) or {},
                          lambda args: SimpleNamespace(load_state=lambda s: None, to=lambda d: None))
    labels = np.arange(n) % c
    data = {0: [{"label": torch.tensor(int(y))} for y in labels]}
    random.seed(case["seed"])
    mod.fu_round0810(SimpleNamespace(unlearning_client_id=0, num_labels=c, device="cpu"), Logger(),
                     SimpleNamespace(state_dict=lambda: {}), data, list(range(n)))
    return frequencies(labels, got["relabeled_labels"].numpy(), c)


def frequencies(true: np.ndarray, new: np.ndarray, classes: int) -> list[list[float]]:
    f = np.zeros((classes, classes))
    np.add.at(f, (true, new), 1)
    return (f / f.sum(1, keepdims=True)).tolist()


# ------------------------------------------------------------------ fedtext's side
def feddpg_model(prompts: int, mean_embedding: str = "tokens") -> Any:
    from fedtext.methods.feddpg.model import FedDPGModel
    from fedtext.common.registry import make_config

    cfg = make_config("feddpg", max_length=MAX_LENGTH, hidden=HIDDEN, prompts=prompts, mean_embedding=mean_embedding)
    return FedDPGModel(cfg, backbone())


def ours_generator(inputs: dict[str, Any]) -> Any:
    import torch

    model = feddpg_model(inputs["prompts"])
    dim = model.backbone.dim
    gen = model.load(generator_arrays(inputs["prompts"], inputs["hidden"], dim, inputs["seed"]))
    with torch.no_grad():
        return summary(gen(torch.as_tensor(e_bars(inputs, dim))).numpy())


def ours_mean_embedding(inputs: dict[str, Any]) -> Any:
    from fedtext.methods.feddpg.config import PADDED_LENGTH
    from fedtext.methods.feddpg.model import mean_embedding

    bb = backbone()
    batch = bb.encode(inputs["texts"], [0] * len(inputs["texts"]))
    pad_to = PADDED_LENGTH if inputs["mean_embedding"] == "padded" else 0
    return summary(mean_embedding(bb, batch, pad_to).detach().numpy())


def ours_prompts(inputs: dict[str, Any]) -> Any:
    import torch

    model = feddpg_model(inputs["prompts"], inputs["mean_embedding"])
    model.load(generator_arrays(inputs["prompts"], HIDDEN, model.backbone.dim, inputs["seed"]))
    batch = model.backbone.encode(inputs["texts"], [0] * len(inputs["texts"]))
    with torch.no_grad():
        return summary(model.prompts(batch).reshape(len(batch), -1).numpy())  # per text: its |P| D values


def ours_server(inputs: dict[str, Any]) -> Any:
    from strategies.feddpg import FedDPG

    uploads = []
    for k, n in enumerate(inputs["num_examples"]):
        arrays = generator_arrays(inputs["prompts"], inputs["hidden"], 384, inputs["seed"] * 100 + k)
        uploads.append(SimpleNamespace(array_list=lambda a=arrays: a, num_examples=n, partition_id=k, metrics={}))
    # eq. (1)'s mean as the server steps with server-optimizer=fedavg and aggregator=mean (the
    # defaults): the mean itself, through the strategy's own combine
    from fedtext.server.release import ReleaseStep
    from fedtext.server.strategy import FedTextStrategy

    cfg = SimpleNamespace(aggregator="mean", update_clip=0.0, secagg=False, dp="none")
    strategy = SimpleNamespace(is_unlearn_round=lambda r: False, server_update=lambda r, mean: mean, cfg=cfg,
                               global_arrays=[], release_step=ReleaseStep(cfg, None))
    strategy.combine = lambda ups, weights: FedTextStrategy.combine(strategy, ups, weights)
    arrays, _ = FedDPG.aggregate(strategy, 1, uploads)
    return [summary(a.reshape(-1)) for a in arrays]


def ours_loss(inputs: dict[str, Any]) -> float:
    import torch

    from fedtext.methods.feddpg.unlearning import unlearning_loss

    logits, labels, forget, relabels = logits_of(inputs)
    keep = np.setdiff1d(np.arange(inputs["n"]), forget)
    t = torch.as_tensor
    return float(unlearning_loss(t(logits[keep]), t(labels[keep]), t(logits[forget]), t(relabels), 1.0,
                                 inputs["weighting"]))


def ours_subset(inputs: dict[str, Any]) -> list[int]:
    """The labels fedtext's :func:`unlearn` trains the client's examples on: the forgotten ones
    relabelled (here with the same relabels), the others their own."""
    s = subset_inputs(inputs)
    y = s["labels"][s["members"]].copy()
    y[s["forget"]] = s["relabels"]
    return y.tolist()


class RecordingRng:
    """Stand-in for a ``numpy`` Generator: ``integers(low, high, size)`` records its range and
    returns ``value`` everywhere."""

    def __init__(self, value: int = 0) -> None:
        self.value, self.ranges = value, []

    def integers(self, low: int, high: int, size: Any = None) -> np.ndarray:
        self.ranges.append((low, high))
        return np.full(size, self.value if self.value else low)


def ours_support(inputs: dict[str, Any]) -> list[list[float]]:
    """P(new = j | true = y) of :func:`relabel`, exactly: ``Generator.integers(low, high)`` is
    uniform on low..high-1; each value of that range is fed in turn."""
    from fedtext.methods.feddpg.unlearning import relabel

    c = inputs["classes"]
    y = np.arange(c)
    rec = RecordingRng()
    relabel(y, c, rec)
    ((low, high),) = rec.ranges
    p = np.zeros((c, c))
    for s in range(low, high):
        p[y, relabel(y, c, RecordingRng(s))] += 1 / (high - low)
    return p.tolist()


def ours_draws(inputs: dict[str, Any]) -> list[list[float]]:
    from fedtext.methods.feddpg.unlearning import relabel

    c, n = inputs["classes"], inputs["draws"]
    labels = np.arange(n) % c
    return frequencies(labels, relabel(labels, c, np.random.default_rng(inputs["seed"])), c)


# ------------------------------------------------------------------ the checks
def text_case(mean: str) -> dict[str, Any]:
    return {"texts": TEXTS, "prompts": 10, "seed": 99, "mean_embedding": mean}


TEXTS: list[str] = []  # filled by main() from ../shared/data; the fixture keeps them


OURS = {**{n: ours_generator for n in GENERATOR_CASES},
        "mean_embedding_padded": ours_mean_embedding, "mean_embedding_tokens": ours_mean_embedding,
        "prompts_padded": ours_prompts, "prompts_tokens": ours_prompts,
        **{n: ours_server for n in SERVER_CASES},
        **{f"unlearn_loss_{w}_{n}": ours_loss for n in LOSS_CASES for w in ("examples", "sets")},
        "unlearn_labels_client_subset": ours_subset,
        **{f"relabel_support_c{c}": ours_support for c in SUPPORT_CLASSES},
        "relabel_draws_c4": ours_draws}


def authors(repo: Path) -> dict[str, Any]:
    out: dict[str, Any] = {n: authors_generator(repo, c) for n, c in GENERATOR_CASES.items()}
    fwd = authors_forward(repo, TEXTS, 10, 99)
    out["e_bar"], out["prompts"] = fwd["e_bar"], fwd["prompts"]
    out.update({n: authors_server(repo, c) for n, c in SERVER_CASES.items()})
    out.update({f"loss_{n}": authors_loss(repo, c) for n, c in LOSS_CASES.items()})
    out["subset"] = authors_subset(repo, SUBSET_CASE)
    out.update({f"support_{c}": authors_support(repo, c) for c in SUPPORT_CLASSES})
    out["draws"] = authors_draws(repo, DRAWS_CASE)
    return out


def main() -> None:
    args = common.parser("feddpg", REPO).parse_args()
    TEXTS[:] = real_texts()
    theirs = common.authors_side(args, "feddpg", authors)
    checks: dict[str, Any] = {}
    model = "fedtext/methods/feddpg/model.py"
    for name, case in GENERATOR_CASES.items():
        checks[name] = common.check(
            f"G(ē), |P|={case['prompts']}, h={case['hidden']}, D=384", MODEL_FILE, f"{model} (FedDPGModel.load, G)",
            case, theirs[name], ours_generator(case), TOL,
            note="prompt_generator with fedtext's four arrays loaded in global_specs order; per output row: first 8 "
                 "values, 4 probe products, norm")
    pad = text_case("padded")
    checks["mean_embedding_padded"] = common.check(
        "ē of 6 real texts (SST-2, AG News), feddpg.mean-embedding=padded", MODEL_FILE,
        f"{model} (mean_embedding, pad_to=128)", pad, theirs["e_bar"], ours_mean_embedding(pad), TOL,
        note="authors: inputs_embeds.mean(dim=1) over the 128 positions of data/glue.py's padding='max_length'")
    tok = text_case("tokens")
    checks["mean_embedding_tokens"] = common.check(
        "ē of 6 real texts (SST-2, AG News), feddpg.mean-embedding=tokens (default)", MODEL_FILE,
        f"{model} (mean_embedding)", tok, theirs["e_bar"], ours_mean_embedding(tok), TOL,
        departs="ē over the text's n tokens (eq. 2), not over 128 padded positions; "
                "mean-embedding=padded is the code's",
        note="MiniLM's [PAD] embedding is a trained vector (norm 0.77): over 128 positions it dominates ē "
             "(docs/papers/feddpg.md)")
    checks["prompts_padded"] = common.check(
        "the |P|=10 prompt vectors in front of 6 real texts, mean-embedding=padded", MODEL_FILE,
        f"{model} (FedDPGModel.prompts)", pad, theirs["prompts"], ours_prompts(pad), TOL,
        note="authors: inputs_embeds[:, :P] of the encoder call in FedDPG.forward (the prompt goes before the first "
             "token there, after [CLS] in fedtext); seeded G, h=10")
    checks["prompts_tokens"] = common.check(
        "the |P|=10 prompt vectors in front of 6 real texts, mean-embedding=tokens (default)", MODEL_FILE,
        f"{model} (FedDPGModel.prompts)", tok, theirs["prompts"], ours_prompts(tok), TOL,
        departs="G's input ē is the mean over the text's tokens (mean-embedding=tokens)",
        note="the same G on the two ē")
    for name, case in SERVER_CASES.items():
        checks[name] = common.check(
            f"server mean of {len(case['num_examples'])} clients' G, examples {case['num_examples']}", AGG_FILE,
            "strategies/feddpg.py (FedDPG.aggregate)", case, theirs[name], ours_server(case), TOL,
            note="aggregate_model_states: torch.mean over the stacked clients, whatever their sizes (eq. 1); "
                 "per tensor: first 8 values, 4 probe products, norm")
    unl = "fedtext/methods/feddpg/unlearning.py (unlearning_loss)"
    for n, case in LOSS_CASES.items():
        ex = {**case, "weighting": "examples"}
        checks[f"unlearn_loss_examples_{n}"] = common.check(
            f"eq. (5) at λ=1, n={case['n']}, C={case['classes']}, {case['forget']} relabelled, unlearn-loss=examples",
            CLIENT_FILE, unl, ex, theirs[f"loss_{n}"], ours_loss(ex), 1e-6,
            note="client_unlearn's loss (progress-bar value) on a stand-in model of fixed logits, one full batch")
        sets = {**case, "weighting": "sets"}
        checks[f"unlearn_loss_sets_{n}"] = common.check(
            f"eq. (5) at λ=1, n={case['n']}, C={case['classes']}, {case['forget']} relabelled, unlearn-loss=sets",
            CLIENT_FILE, unl, sets, theirs[f"loss_{n}"], ours_loss(sets), 1e-6,
            departs="unlearn-loss=sets (default): λ on the relabelled set's mean, eq. (5) as written; "
                    "examples is the code's",
            note="mean CE(retained) + mean CE(relabelled) against one CE over all examples")
    checks["unlearn_labels_client_subset"] = common.check(
        "labels client_unlearn trains an IID client's examples on (400 examples, 10 clients, 8 forgotten)",
        CLIENT_FILE, "fedtext/methods/feddpg/unlearning.py (unlearn)", SUBSET_CASE, theirs["subset"],
        ours_subset(SUBSET_CASE), 0.0,
        departs="fedtext relabels the forgotten examples; the code matches their client-local indices against the "
                "data-set-wide 'index' of a Subset's items",
        note="client_unlearn: labels[batch['index'] == relabeled_idx] = ...; relabeled_idx from "
             "random.sample(range(len(client_dataset))), batch['index'] from GLUEDataset.__getitem__ (the full "
             "set's index): it relabels the client's examples whose full-set index happens to be a forgotten "
             "local index, with another example's relabel")
    for c in SUPPORT_CLASSES:
        case = {"classes": c}
        checks[f"relabel_support_c{c}"] = common.check(
            f"P(new label | true label), C={c}", UNLEARN_FILE, "fedtext/methods/feddpg/unlearning.py (relabel)",
            case, theirs[f"support_{c}"], ours_support(case), 1e-12,
            note="exact: random.choice(labels other than the true one) against (y + U{1..C-1}) mod C; the diagonal "
                 "(the true class) is 0 on both sides")
    checks["relabel_draws_c4"] = common.check(
        "frequencies of (true, new) over 20,000 seeded relabels, C=4", UNLEARN_FILE,
        "fedtext/methods/feddpg/unlearning.py (relabel)", DRAWS_CASE, theirs["draws"], ours_draws(DRAWS_CASE), 0.04,
        note="different random sources (random.seed vs numpy default_rng): tolerance 0.04 is 4.2 standard "
             "deviations of the difference of two frequencies of 1/3 over 5,000 draws each (0.0094)")
    common.write(args.out, "feddpg", REPO, common.commit_of(args.repo), FILES, checks,
                 packages=("torch", "transformers", "numpy"), authors_python=args.authors_python)


if __name__ == "__main__":
    main()
