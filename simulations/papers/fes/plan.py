"""FeS §3.3's offline co-planning search: which layers to freeze, tune by bias, tune fully.

    python -m simulations.papers.fes.plan --dataset ../shared/data/ag_news --tolerance 0.01

The paper decides the plan "offline on cloud" with "a FedFSL simulator that uses binary
search", fed a public dataset of similar difficulty, the pretrained model and the
device's training time and bandwidth. Here: the top ``--full-layers`` layers train
fully, the frozen depth ``f`` is searched (:func:`fedtext.methods.fes.plan.search_depth`),
every layer between is bias-only. ``accuracy_of(f)`` fine-tunes that plan centrally on
``--gold`` labelled texts of the proxy dataset (``--epochs`` epochs of mini-batch 4,
the few-shot clients' optimiser: ``lr`` full, ``bias-lr`` bias-only) and tests it on
``--eval-size`` texts; the search keeps the deepest freeze within ``--tolerance`` of the
shallowest (f = 0). Each probed plan also gets its per-round device estimate: measured
seconds per training batch x steps + its bytes both ways at ``--bandwidth-mbps``.
Prints one line per probed plan and the chosen ``fes.frozen-layers`` / ``fes.bias-layers``.

Which texts the plans are tested on (``--eval-on``, :data:`EVAL_SETS`):

* ``heldout`` (default): ``--eval-size`` texts of the dataset's *train* split that are not
  among the search's own gold texts (seeded): disjoint from every test text any run
  reports, whatever its seed or ``eval-size``, so the plan is not chosen on the texts it
  is then scored on (``results/fes_ag_news/fes_plan.txt``).
* ``test``: the server's test texts, :func:`fedtext.learning.data.server_test` with ``--seed`` and
  ``--eval-size``. With ``--seed S --eval-size 200`` these are *exactly* the 200 texts
  that the runs of seed S with ``eval-size=200`` report accuracy on: how the plan of the
  committed ``fes-searched`` runs was chosen (``results/fes_ag_news/fes_plan-test-texts.txt``),
  kept to reproduce it.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch

from fedtext.backbone import backbone_for
from fedtext.learning.data import labelled, server_test
from fedtext.methods.fes.model import num_layers
from fedtext.methods.fes.plan import search_depth
from fedtext.common.registry import METHODS, make_config


def heldout_rows(n_train: int, gold_rows: np.ndarray, size: int, seed: int) -> np.ndarray:
    """``size`` rows (sorted) of a train split of ``n_train`` rows, none of ``gold_rows``, seeded."""
    rest = np.setdiff1d(np.arange(n_train), gold_rows)
    rng = np.random.default_rng([seed, 0x4E1D])
    return np.sort(rng.choice(rest, size=min(size, len(rest)), replace=False))


# --eval-on: (base config, train split, the search's gold rows, seed) -> the texts plans are tested on
EVAL_SETS: dict[str, Callable[..., pd.DataFrame]] = {
    "test": lambda cfg, train, gold_rows, seed: server_test(cfg),
    "heldout": lambda cfg, train, gold_rows, seed: train.iloc[
        heldout_rows(len(train), gold_rows, cfg.eval_size or len(train), seed)].reset_index(drop=True),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="demo", help="public proxy dataset (a data folder or demo)")
    ap.add_argument("--full-layers", type=int, default=0, help="top layers trained fully (the paper's AG News plan: 0)")
    ap.add_argument("--tolerance", type=float, default=0.01, help="accuracy the search may give up")
    ap.add_argument("--gold", type=int, default=64, help="labelled proxy texts")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--eval-size", type=int, default=200)
    ap.add_argument("--eval-on", choices=tuple(EVAL_SETS), default="heldout",
                    help="heldout (default): train-split texts outside the search's gold set, disjoint from every "
                         "test text; test: the server's test texts (the reported ones for the same seed and eval-size)")
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--bandwidth-mbps", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    base = dict(dataset=args.dataset, max_length=args.max_length, eval_size=args.eval_size, seed=args.seed)
    cfg0 = make_config("fes", **base)
    task = labelled(cfg0).task
    backbone = backbone_for(cfg0, task)
    layers = num_layers(backbone)
    train = labelled(cfg0).splits.train
    rows = np.random.default_rng([args.seed, 0x91A]).choice(len(train), size=min(args.gold, len(train)), replace=False)
    gold = backbone.encode(list(train["text"].iloc[rows]), list(train["label"].iloc[rows]))
    test = EVAL_SETS[args.eval_on](cfg0, train, rows, args.seed)
    test_batches = backbone.batches(list(test["text"]), list(test["label"]))
    top = max(0, min(args.full_layers, layers))
    results: dict[int, float] = {}

    def accuracy_of(frozen: int) -> float:
        if frozen in results:
            return results[frozen]
        cfg = make_config("fes", **base, frozen_layers=frozen, bias_layers=layers - top - frozen)
        model = METHODS["fes"].model_class()(cfg, backbone)
        net = model.network
        groups: dict[float, list] = {}
        for name, p in net.named_trainable():
            groups.setdefault(cfg.method_config.bias_lr if model.is_bias_only(name) else cfg.method_config.lr,
                              []).append(p)
        opt = torch.optim.AdamW([{"params": ps, "lr": lr} for lr, ps in groups.items()])
        rng = np.random.default_rng(args.seed)
        torch.manual_seed(args.seed)
        steps, t0 = 0, time.time()
        net.encoder.train()
        for _ in range(args.epochs):
            order = rng.permutation(len(gold))
            for i in range(0, len(order), 4):
                b = gold.take(order[i : i + 4]).trimmed()
                loss = torch.nn.functional.cross_entropy(net.forward(None, b), b.labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
        net.encoder.eval()
        per_batch = (time.time() - t0) / max(steps, 1)
        _, acc = model.evaluate(net.trainable_arrays(), test_batches)
        nbytes = 4 * model.trainable_parameters()
        round_s = per_batch * len(range(0, len(gold), 4)) + 2 * nbytes / (args.bandwidth_mbps * 1e6)
        print(f"frozen {frozen} | bias-only {layers - top - frozen} | full {top} | acc {acc:.3f} | "
              f"{model.trainable_parameters():,} weights | ~{round_s:.1f} s per client-round "
              f"({per_batch:.3f} s/batch, {nbytes / 1e6:.2f} MB each way)", flush=True)
        results[frozen] = acc
        return acc

    best = search_depth(accuracy_of, 0, layers - max(top, 1), args.tolerance)  # something must train
    print(f"chosen: fes.frozen-layers={best} fes.bias-layers={layers - top - best} "
          f"(top {top} full; accuracy {results[best]:.3f} vs {results[0]:.3f} at frozen 0)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
