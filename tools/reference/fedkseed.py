"""FedKSeed against the authors' code: alibaba/FederatedScope, branch ``FedKSeed``
(``optimizers/mezo_optimizer.py``, ``client.py``, ``server.py``, ``main.py``'s defaults).

Both sides run on the same tiny BERT classifier (``transformers.BertForSequenceClassification``
from a 2-layer, hidden-8 config, float32, on the CPU, in eval mode as the authors' client puts
it): its weights are seeded numpy draws loaded into every parameter, so the authors' side and
fedtext's start from the same w_0. It is a Hugging Face model, as the authors' ``zo_forward``
needs (``self.model(**batch)`` returning ``.logits`` and ``.loss``, the mean cross-entropy
over the batch); fedtext's side scores the same model with fedtext's client loss
(``cross_entropy(logits, labels)``, :mod:`clients.fedkseed`). The candidate seeds are the
authors' (``np.random.seed(42); np.random.randint(1, 100000000000, K)``, as ``main.py`` draws
them after ``setup_seed``), given to both sides; the seed each step draws is the authors'
(``np.random.choice`` over the candidates, global numpy state) and fedtext's side is told
the same index.

Checks:

``directions``
    z for three seeds: the authors' ``_zo_perturb_parameters(1)`` with ``zo_eps = 1`` on a
    copy of the model whose weights are all zero (so the weights become z:
    ``torch.manual_seed(s)`` then ``torch.normal(0, 1, size)`` per parameter in
    ``named_parameters()`` order) against :func:`fedtext.methods.fedkseed.model.directions`
    (``torch.Generator().manual_seed(s)`` then ``torch.randn`` per tensor), per tensor.
``zo_step``
    One ``MeZOFramework.zo_step`` (MeZO's two-point estimate, ``w <- w - lr g z``) against
    :func:`fedtext.methods.fedkseed.model.zo_step` on the same weights, seed, batch, eps and lr:
    the scalar g and every weight after the step.
``local_seed_pool``
    ``Client.local_train_with_seed_pool`` (``local_step = 10`` batches, K = 6 candidate seeds,
    so seeds repeat): its ``local_seed_pool`` (g summed per seed) and the client's weights
    after, against 10 :func:`zo_step` calls on the same seeds and batches and
    :func:`fedtext.methods.fedkseed.model.seed_sums`.
``aggregate_<case>``
    ``Server.aggregate_seed_pool`` over two clients onto a nonzero seed pool, against
    :func:`fedtext.methods.fedkseed.model.accumulate` with fedtext's weights (examples). The
    authors weight by ``len(train_loader)``, the client's number of *batches*
    (``equal_weight`` off, the default): the two agree when every client's examples are a
    multiple of the batch size or the batch size is 1 (the authors' default) -- the T1
    harness (32 shots per client, batch 16: 2 batches each, equal weights either way) is such
    a case -- and depart when a client has a partial last batch.
``replay``
    ``Server.update_global_model_by_seed_pool`` (w_0 copied, then ``zo_update(seed, grad)``
    for every seed with a nonzero scalar, ``weight_decay = 0``, the default) against
    :func:`fedtext.methods.fedkseed.model.replay`, every weight.
``replay_weight_decay``
    The same with ``weight_decay = 0.01`` (not the authors' default): their ``zo_update``
    also subtracts ``lr * wd * w`` from every tensor whose name holds neither ``bias`` nor
    ``layer_norm``/``layernorm`` (BERT's ``LayerNorm`` weights *are* decayed: the match is
    case-sensitive). fedtext has no weight decay: a departure at a non-default setting.
``round``
    One whole round: two clients train from w_0 (the authors' ``Client``), the server
    aggregates and rebuilds the global model (``aggregate_seed_pool``,
    ``update_global_model_by_seed_pool``), against fedtext's ``zo_step`` x S per client,
    ``seed_sums``, ``accumulate``, ``replay``: the global weights.

Not checked here (written down on docs/papers/fedkseed.md): the candidate seeds themselves
(fedtext derives its own from the run seed by ``SeedSequence``; theirs depend on numpy's
global state after the data loading), the ``grad_clip`` skip (off by default), the
learning-rate decay (their server refuses any), float16 weights and CUDA draws.

``python -m tools.reference.fedkseed --repo <alibaba/FederatedScope checkout at branch FedKSeed>``;
the authors' side needs torch and transformers (fedtext's venv has both; ``rouge``, their
evaluation metric, is stood in for, as is ``tqdm``).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from tools.reference import common

REPO = "alibaba/FederatedScope"
COMMIT = "d7e074874116c64bc316d785490da55498f4f5da"  # branch FedKSeed (the checkout may be an unpacked archive)
MEZO_FILE = "optimizers/mezo_optimizer.py"
CLIENT_FILE = "client.py"
SERVER_FILE = "server.py"
MAIN_FILE = "main.py"
FILES = [MEZO_FILE, CLIENT_FILE, SERVER_FILE, MAIN_FILE]

# the same generator and the same draws; the check's summaries (float64 probe products and norms) follow
# the CPU's BLAS summation order: 1.8e-15 on an AVX-512 CPU from the fixture written on another
TOL_EXACT = 1e-12
TOL_G = 5e-4  # g = (L+ - L-) / (2 eps): one float32 ulp of a loss near 1 (1.2e-7) is 1.2e-4 of g at eps = 5e-4;
#               the perturbed weights round differently on the two sides (theirs w + (eps z) in two ops, fedtext's
#               add_(z, alpha=eps)), so the losses may differ by an ulp or two. A step moves a weight by
#               lr g z ~ 1e-3: a flipped sign or a dropped factor is far outside
TOL_AGG = 1e-6  # float64 sums of float32-exact values on their side, float32 on fedtext's
TOL_W = 5e-5  # weights, each tensor as its first 8 entries, 4 probe products and its norm (sums over up to 128
#               float32 entries of |w| < 1, whose ulps and the g above move by ~1e-7 each)

CONFIG = dict(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
              max_position_embeddings=16, type_vocab_size=2, num_labels=3, hidden_dropout_prob=0.1,
              attention_probs_dropout_prob=0.1)  # dropout on: eval mode must switch it off on both sides
AUTHORS = dict(seed=42, lr=1e-3, zo_eps=5e-4, weight_decay=0.0, grad_clip=-100.0, lr_decay=1.0,
               equal_weight=False, batch_or_epoch="batch", bias_sampling=False)  # main.py's defaults
K = 6  # candidate seeds (main.py: 4096): few, so that 10 steps repeat seeds
STEPS = 10  # local steps (main.py: 200)
BATCH = 4  # examples per batch (main.py: 1)
LENGTH = 7  # tokens per example


# ------------------------------------------------------------------ shared inputs
def candidate_seeds(k: int, seed: int) -> list[int]:
    """The authors' candidate seeds, drawn as ``main.py`` draws them (``setup_seed(seed)`` then
    ``np.random.randint(1, 100000000000, K)``; their data loading and client sampling draw
    from the same state in between, which is left out here)."""
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        return [int(s) for s in np.random.randint(1, 100000000000, k)]
    finally:
        np.random.set_state(state)


def tiny_model(weight_seed: int) -> Any:
    """The tiny BERT classifier of ``CONFIG``, float32, eval mode, every parameter a seeded
    N(0, 0.2^2) draw (in ``named_parameters()`` order; LayerNorm weights 1 + that)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)  # the constructor's own init is overwritten below
    model = BertForSequenceClassification(BertConfig(**CONFIG)).float().eval()
    rng = np.random.default_rng([weight_seed, 0xF5EED])
    with torch.no_grad():
        for name, p in model.named_parameters():
            w = 0.2 * rng.standard_normal(tuple(p.shape))
            p.copy_(torch.as_tensor(w + (1.0 if "LayerNorm.weight" in name else 0.0), dtype=torch.float32))
    return model


def batches(n: int, seed: int) -> list[dict[str, list[list[int]]]]:
    """``n`` seeded batches of ``BATCH`` x ``LENGTH`` token ids, with padding and labels."""
    rng = np.random.default_rng([seed, 0xBA7C])
    out = []
    for _ in range(n):
        ids = rng.integers(1, CONFIG["vocab_size"], (BATCH, LENGTH))
        lengths = rng.integers(3, LENGTH + 1, BATCH)
        mask = (np.arange(LENGTH)[None] < lengths[:, None]).astype(np.int64)
        out.append({"input_ids": (ids * mask).tolist(), "attention_mask": mask.tolist(),
                    "labels": rng.integers(0, CONFIG["num_labels"], BATCH).tolist()})
    return out


def tensors(batch: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}


def probes(n: int) -> np.ndarray:
    """Four fixed vectors ``[4, n]``."""
    return np.random.default_rng([n, 0xC]).standard_normal((4, n))


def summary(model: Any) -> list[dict[str, Any]]:
    """Every parameter (``named_parameters()`` order) as its first 8 entries, 4 fixed probe
    products and its norm, in float64 of the float32 values."""
    out = []
    for _, p in model.named_parameters():
        x = p.detach().double().numpy().reshape(-1)
        out.append({"head": x[:8], "probes": probes(x.size) @ x, "norm": np.linalg.norm(x)})
    return out


def client_cases() -> list[dict[str, Any]]:
    """Two clients' local data: batches of their own and, for the weighting, example counts."""
    return [{"batches": batches(STEPS, 1), "np_seed": 7}, {"batches": batches(STEPS, 2), "np_seed": 8}]


AGG_CASES = {
    # (examples, batch size) per client: batches = ceil(examples / batch size)
    "batch1": dict(examples=[3, 9], batch_size=1, note="the authors' default batch size 1: batches = examples"),
    "harness": dict(examples=[32, 32], batch_size=16, note="the T1 harness: 32 shots per client, batch 16"),
    "partial": dict(examples=[20, 9], batch_size=4, note="a partial last batch: 5 and 3 batches, 20 and 9 examples"),
}


def pool_inputs(seed: int) -> dict[str, Any]:
    """A nonzero prior seed pool and two clients' per-seed sums, float32-exact values."""
    rng = np.random.default_rng([seed, 0xA66])
    f = lambda *s: rng.standard_normal(s).astype(np.float32).astype(np.float64).tolist()  # noqa: E731
    prior = f(K)
    prior[2] = 0.0
    return {"prior": prior, "uploads": [f(K), f(K)]}


def replay_inputs() -> dict[str, Any]:
    rng = np.random.default_rng([3, 0x7E9])
    a = rng.standard_normal(K).astype(np.float32).astype(np.float64)
    a[1] = 0.0  # a seed never drawn: skipped by both
    return {"weight_seed": 5, "seeds": candidate_seeds(K, AUTHORS["seed"]), "a": a.tolist(), "lr": AUTHORS["lr"]}


# ------------------------------------------------------------------ the authors' side
@contextlib.contextmanager
def quiet() -> Iterator[None]:
    with contextlib.redirect_stdout(None):  # their constructors print('FedKSeed')
        yield


class _Bar:  # tqdm's progress bar, as the authors' loops use it
    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def update(self, *a: Any) -> None:
        pass

    def set_description(self, *a: Any) -> None:
        pass


def authors_modules(repo: Path) -> SimpleNamespace:
    """``optimizers/mezo_optimizer.py``, ``client.py`` and ``server.py`` of the checkout, with
    stand-ins for what the checked functions do not use (FedKSeed-Pro's optimizer, their
    Rouge metric, the default-token enum, the progress bar)."""
    s = common.stub
    mezo = common.load(repo / MEZO_FILE, "authors_fedkseed_mezo")
    base = {"optimizers": s("optimizers"), "optimizers.mezo_optimizer": mezo,
            "optimizers.mezo_bias_optimizer": s("optimizers.mezo_bias_optimizer", MeZOBiasOptimizer=None)}
    client = common.load(repo / CLIENT_FILE, "authors_fedkseed_client", base)
    server = common.load(repo / SERVER_FILE, "authors_fedkseed_server",
                         {**base, "evaluations": s("evaluations"), "utils_data": s("utils_data"),
                          "utils_data.default_tokens": s("utils_data.default_tokens", DefaultToken=None)})
    client.tqdm = server.tqdm = _Bar  # silent progress bars (transformers imports the real tqdm)
    return SimpleNamespace(mezo=mezo, client=client, server=server)


def args(**over: Any) -> SimpleNamespace:
    return SimpleNamespace(**{**AUTHORS, "local_step": STEPS, "device": 0, **over})


def authors_client(mods: SimpleNamespace, model: Any, case: dict[str, Any], seeds: list[int],
                   a: SimpleNamespace) -> dict[str, Any]:
    """``Client.local_train_with_seed_pool`` on the CPU (its device set after construction),
    recording the seed and g of every step (a subclass of their ``MeZOFramework`` that calls it)."""
    import torch

    steps: list[tuple[int, float]] = []

    class Recording(mods.mezo.MeZOFramework):
        def zo_step(self, batch: Any, local_seed_pool: Any = None) -> Any:
            out = super().zo_step(batch, local_seed_pool)
            steps.append((int(self.zo_random_seed), float(self.projected_grad)))
            return out

    loader = [tensors(b) for b in case["batches"]]
    c = mods.client.Client(0, a, np.asarray(seeds, dtype=np.int64), loader)
    c.device = torch.device("cpu")
    np.random.seed(case["np_seed"])
    with quiet(), _framework(mods.client, Recording):
        c.local_train_with_seed_pool(model, cur_round=1)
    return {"pool": [c.local_seed_pool[s] for s in np.asarray(seeds, dtype=np.int64)],
            "picks": [seeds.index(s) for s, _ in steps], "g": [g for _, g in steps], "client": c}


@contextlib.contextmanager
def _framework(module: Any, cls: type) -> Iterator[None]:
    saved = module.MeZOFramework
    module.MeZOFramework = cls
    try:
        yield
    finally:
        module.MeZOFramework = saved


def authors_server(mods: SimpleNamespace, seeds: list[int], a: SimpleNamespace, w0: Any = None) -> Any:
    """A ``Server`` without its constructor (it loads a causal LM from the hub): the attributes
    the checked methods read, on the CPU."""
    import torch

    srv = mods.server.Server.__new__(mods.server.Server)
    srv.args, srv.candidate_seeds = a, np.asarray(seeds, dtype=np.int64)
    srv.seed_pool = {s: 0.0 for s in srv.candidate_seeds}
    srv.device, srv.model_w0 = torch.device("cpu"), w0
    return srv


def authors(repo: Path) -> dict[str, Any]:
    import torch

    mods = authors_modules(repo)
    seeds = candidate_seeds(K, AUTHORS["seed"])
    out: dict[str, Any] = {"seeds": seeds}

    # z per parameter: the weights of a zeroed model perturbed once with eps = 1
    zs = {}
    for i, s in enumerate(seeds[:3]):
        model = tiny_model(1)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        with quiet():
            fw = mods.mezo.MeZOFramework(model, args(zo_eps=1.0), AUTHORS["lr"], np.asarray(seeds))
        fw.zo_random_seed = np.int64(s)
        fw._zo_perturb_parameters(scaling_factor=1)
        zs[f"seed{i}"] = summary(model)
    out["directions"] = zs

    # one zo_step
    model = tiny_model(1)
    with quiet():
        fw = mods.mezo.MeZOFramework(model, args(), AUTHORS["lr"], np.asarray(seeds, dtype=np.int64))
    np.random.seed(3)
    with torch.inference_mode():
        fw.zo_step(tensors(batches(1, 0)[0]))
    out["zo_step"] = {"pick": seeds.index(int(fw.zo_random_seed)),
                      "expected": {"g": float(fw.projected_grad), "weights": summary(model)}}

    # a client's local seed pool
    model = tiny_model(1)
    cl = authors_client(mods, model, client_cases()[0], seeds, args())
    out["local_seed_pool"] = {"picks": cl["picks"],
                              "expected": {"g": cl["g"], "pool": cl["pool"], "weights": summary(model)}}

    # the server's weighting
    out["aggregate"] = {}
    for name, case in AGG_CASES.items():
        pool = pool_inputs(len(out["aggregate"]))
        srv = authors_server(mods, seeds, args())
        srv.seed_pool = {s: v for s, v in zip(srv.candidate_seeds, pool["prior"], strict=True)}
        clients = [SimpleNamespace(local_seed_pool=dict(zip(srv.candidate_seeds, g, strict=True)),
                                   train_loader=[None] * math.ceil(n / case["batch_size"]), clear_model=lambda: None)
                   for g, n in zip(pool["uploads"], case["examples"], strict=True)]
        srv.aggregate_seed_pool(clients)
        out["aggregate"][name] = [float(srv.seed_pool[s]) for s in srv.candidate_seeds]

    # the replay, weight decay 0 (default) and 0.01
    rp = replay_inputs()
    out["replay"] = {}
    for wd in (0.0, 0.01):
        srv = authors_server(mods, seeds, args(weight_decay=wd), tiny_model(rp["weight_seed"]))
        srv.seed_pool = {s: v for s, v in zip(srv.candidate_seeds, rp["a"], strict=True)}
        with quiet():
            srv.update_global_model_by_seed_pool()
        out["replay"][str(wd)] = summary(srv.model)

    # one round: two clients, aggregation, the server's new model
    w0 = tiny_model(1)
    srv = authors_server(mods, seeds, args(), w0)
    srv.model = copy.deepcopy(w0)
    trained = [authors_client(mods, copy.deepcopy(srv.model), case, seeds, args()) for case in client_cases()]
    srv.aggregate_seed_pool([t["client"] for t in trained])
    with quiet():
        srv.update_global_model_by_seed_pool()
    out["round"] = {"picks": [t["picks"] for t in trained], "expected": summary(srv.model)}
    return out


# ------------------------------------------------------------------ fedtext's side
def _params(model: Any) -> list[Any]:
    return [p for _, p in model.named_parameters() if p.requires_grad]


def _loss(model: Any, batch: dict[str, Any]) -> Any:
    """fedtext's client loss on the tiny model (clients/fedkseed.py: cross-entropy of the logits)."""
    import torch

    t = tensors(batch)

    def loss() -> float:
        with torch.no_grad():
            logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"]).logits
            return float(torch.nn.functional.cross_entropy(logits, t["labels"]))

    return loss


def _train(model: Any, inputs: dict[str, Any], picks: list[int], batch_list: list[dict[str, Any]]) -> list[float]:
    from fedtext.methods.fedkseed.model import zo_step

    params = _params(model)
    return [zo_step(params, inputs["seeds"][k], inputs["eps"], inputs["lr"], _loss(model, b))[0]
            for k, b in zip(picks, batch_list, strict=True)]


def ours_directions(inputs: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """:func:`directions` for each seed, written into a copy of the model (``named_parameters`` order)."""
    import torch

    from fedtext.methods.fedkseed.model import directions

    out = {}
    for i, s in enumerate(inputs["seeds"]):
        model = tiny_model(inputs["weight_seed"])
        with torch.no_grad():
            for p, z in zip(_params(model), directions(_params(model), s), strict=True):
                p.copy_(z)
        out[f"seed{i}"] = summary(model)
    return out


def ours_zo_step(inputs: dict[str, Any]) -> dict[str, Any]:
    """One :func:`zo_step` from the same weights on the same seed and batch."""
    model = tiny_model(inputs["weight_seed"])
    g = _train(model, inputs, [inputs["pick"]], [inputs["batch"]])
    return {"g": g[0], "weights": summary(model)}


def ours_local_seed_pool(inputs: dict[str, Any]) -> dict[str, Any]:
    """S :func:`zo_step` calls on the authors' picks, then :func:`seed_sums`."""
    from fedtext.methods.fedkseed.model import seed_sums

    model = tiny_model(inputs["weight_seed"])
    g = _train(model, inputs, inputs["picks"], inputs["batches"])
    return {"g": g, "pool": seed_sums(inputs["picks"], g, len(inputs["seeds"])), "weights": summary(model)}


def ours_aggregate(inputs: dict[str, Any]) -> list[float]:
    """:func:`accumulate` with fedtext's weights, the clients' example counts."""
    from fedtext.methods.fedkseed.model import accumulate

    return accumulate(np.asarray(inputs["prior"], np.float32), [np.asarray(g, np.float32) for g in inputs["uploads"]],
                      inputs["examples"]).tolist()


def ours_replay(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`replay` of A from w_0 into a copy of the model."""
    from fedtext.methods.fedkseed.model import replay

    w0 = [p.detach().clone() for p in _params(tiny_model(inputs["weight_seed"]))]
    model = tiny_model(inputs["weight_seed"])
    replay(_params(model), w0, np.asarray(inputs["a"], np.float32), inputs["seeds"], inputs["lr"])
    return summary(model)


def ours_round(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """Each client's :func:`zo_step` x S from w_0 and :func:`seed_sums`; :func:`accumulate`
    onto A = 0 with their example counts; :func:`replay` from w_0."""
    from fedtext.methods.fedkseed.model import accumulate, seed_sums

    k = len(inputs["seeds"])
    uploads = []
    for picks, bl in zip(inputs["picks"], inputs["batches"], strict=True):
        g = _train(tiny_model(inputs["weight_seed"]), inputs, picks, bl)
        uploads.append(seed_sums(picks, g, k))
    a = accumulate(np.zeros(k, np.float32), uploads, inputs["examples"])
    return ours_replay({**inputs, "a": a.tolist()})


OURS = {"directions": ours_directions, "zo_step": ours_zo_step, "local_seed_pool": ours_local_seed_pool,
        **{f"aggregate_{n}": ours_aggregate for n in AGG_CASES}, "replay": ours_replay,
        "replay_weight_decay": ours_replay, "round": ours_round}


def main() -> None:
    p = common.parser("fedkseed", REPO)
    cli = p.parse_args()
    theirs = common.authors_side(cli, "fedkseed", authors)
    seeds = theirs["seeds"]
    base = {"seeds": seeds, "weight_seed": 1, "eps": AUTHORS["zo_eps"], "lr": AUTHORS["lr"]}
    mf = "fedtext/methods/fedkseed/model.py"
    checks: dict[str, Any] = {}

    inputs = {"seeds": seeds[:3], "weight_seed": 1}
    checks["directions"] = common.check(
        f"z per parameter, 3 seeds, tiny BERT ({len(list(tiny_model(1).parameters()))} tensors, d=1,779)",
        MEZO_FILE + " (MeZOFramework._zo_perturb_parameters)",
        f"{mf} (directions)", inputs, theirs["directions"], ours_directions(inputs), TOL_EXACT,
        note="torch.manual_seed(s) + torch.normal(0, 1, size) per parameter equals "
             "torch.Generator().manual_seed(s) + torch.randn per tensor (CPU, float32), in named_parameters order")

    st = theirs["zo_step"]
    inputs = {**base, "pick": st["pick"], "batch": batches(1, 0)[0]}
    checks["zo_step"] = common.check(
        f"one zo_step, eps={AUTHORS['zo_eps']}, lr={AUTHORS['lr']}: g and every weight",
        MEZO_FILE + " (MeZOFramework.zo_step, zo_update)", f"{mf} (zo_step)", inputs, st["expected"],
        ours_zo_step(inputs), TOL_G,
        note="float32; g within float32 rounding of the two losses (equal here); the weights differ by rounding: "
             "theirs go back to w by +eps z before w - lr (g z), fedtext's move once by (eps - lr g) z")

    lp = theirs["local_seed_pool"]
    cases = client_cases()
    inputs = {**base, "picks": lp["picks"], "batches": cases[0]["batches"]}
    checks["local_seed_pool"] = common.check(
        f"client: {STEPS} steps over K={K} seeds, g per step, g summed per seed, weights",
        CLIENT_FILE + " (Client.local_train_with_seed_pool)", f"{mf} (zo_step, seed_sums)", inputs, lp["expected"],
        ours_local_seed_pool(inputs), TOL_G, note=f"picks {lp['picks']} (seeds repeat)")

    for i, (name, case) in enumerate(AGG_CASES.items()):
        pool = pool_inputs(i)
        inputs = {"prior": pool["prior"], "uploads": pool["uploads"], "examples": case["examples"],
                  "batch_size": case["batch_size"]}
        nb = [math.ceil(n / case["batch_size"]) for n in case["examples"]]
        departs = "" if name != "partial" else ("fedtext weights by examples (20/29, 9/29), the authors by "
                                                 "batches (5/8, 3/8); equal when no client has a partial batch")
        checks[f"aggregate_{name}"] = common.check(
            f"server: 2 clients, examples {case['examples']}, batch {case['batch_size']} ({nb} batches)",
            SERVER_FILE + " (Server.aggregate_seed_pool)", "fedtext/methods/fedkseed/model.py (accumulate)",
            inputs, theirs["aggregate"][name], ours_aggregate(inputs), TOL_AGG, note=case["note"], departs=departs)

    rp = replay_inputs()
    checks["replay"] = common.check(
        f"server: replay of A (K={K}, one zero) from w_0, weight_decay=0", SERVER_FILE +
        " (Server.update_global_model_by_seed_pool)", f"{mf} (replay)", rp, theirs["replay"]["0.0"],
        ours_replay(rp), TOL_W, note="seeds with A[k] = 0 skipped by both; candidate order")
    checks["replay_weight_decay"] = common.check(
        "server: the same replay with weight_decay=0.01 (not the default)", SERVER_FILE +
        " (Server.update_global_model_by_seed_pool)", f"{mf} (replay)", {**rp, "weight_decay": 0.01},
        theirs["replay"]["0.01"], ours_replay(rp), TOL_W,
        departs="fedtext has no weight decay (the authors' default is 0)",
        note="theirs decays every tensor named without bias/layer_norm/layernorm, BERT's LayerNorm weights included")

    rd = theirs["round"]
    inputs = {**base, "picks": rd["picks"], "batches": [c["batches"] for c in cases],
              "examples": [STEPS * BATCH] * len(cases)}
    checks["round"] = common.check(
        f"one round: 2 clients x {STEPS} steps, aggregate, replay: the global weights",
        f"{CLIENT_FILE}, {SERVER_FILE}", f"{mf}, clients/fedkseed.py, strategies/fedkseed.py", inputs,
        rd["expected"], ours_round(inputs), TOL_W,
        note=f"both clients {STEPS} batches of {BATCH}: the authors' batch weights equal fedtext's example weights")
    common.write(cli.out, "fedkseed", REPO, common.commit_of(cli.repo) or COMMIT, FILES, checks,
                 packages=("torch", "transformers", "numpy"), authors_python=cli.authors_python)


if __name__ == "__main__":
    main()
