"""Batched multi-prompt scoring vs. one plain forward over the same sequences.

    python -m simulations.bench_score            # P=20 prompts x B=32 SST-2-like texts

``Backbone.score(prompts[P,T,D], batch)`` splices P prompts into B texts and runs the
P*B sequences through the encoder. The reference is the model's own forward on
``input_ids`` of the same P*B sequences (T extra real tokens in place of the prompt,
same padding), i.e. what the hardware can do on that many sequences. Prints
sentences/s of both and their ratio (issue 2 asks for >= 80 %).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from fedtext.backbone import get_backbone
from fedtext.learning.data import make_demo


def bench(p: int, b: int, t: int, repeats: int) -> tuple[float, float]:
    bb = get_backbone("all-MiniLM-L6-v2", "similarity", "demo", 128)
    texts = list(make_demo().test["text"][:b])
    batch = bb.encode(texts, [0] * b)
    prompts = np.stack([bb.initial_prompt(t, s) for s in range(p)])
    # Plain reference: the same P*B sequences as ids (T real tokens where the prompt goes).
    filler = torch.as_tensor(bb.natural_token_ids()[:t])
    ids = torch.cat([batch.input_ids[:, :1], filler.expand(b, t), batch.input_ids[:, 1:]], 1).repeat(p, 1)
    att = torch.cat([torch.ones(b, t, dtype=torch.long), batch.attention_mask], 1).repeat(p, 1)

    def plain() -> None:
        with torch.inference_mode():
            bb.encoder(input_ids=ids, attention_mask=att)

    def scored() -> None:
        bb.score(prompts, batch)

    rates = {}
    for name, fn in (("plain", plain), ("score", scored), ("plain", plain), ("score", scored)):
        fn()  # warm-up
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        rates[name] = max(rates.get(name, 0.0), p * b * repeats / (time.perf_counter() - t0))
    return rates["plain"], rates["score"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=20, help="P candidate prompts (CMA-ES popsize)")
    ap.add_argument("--batch", type=int, default=32, help="B texts")
    ap.add_argument("--prompt-length", type=int, default=8, help="T prompt vectors")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    plain, scored = bench(args.prompts, args.batch, args.prompt_length, args.repeats)
    print(f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}, P={args.prompts} B={args.batch} T={args.prompt_length}")
    print(f"plain forward : {plain:8.1f} sentences/s")
    print(f"batched score : {scored:8.1f} sentences/s")
    print(f"ratio         : {scored / plain:8.1%}")


if __name__ == "__main__":
    main()
