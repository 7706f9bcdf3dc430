"""How close fedtext runs to this machine's compute limit: one command, one table.

    python -m simulations.bench                    # parts 1 and 2 (about 7 minutes on 2 cores)
    python -m simulations.bench --precisions       # only part 4: fp32 against bf16 (about 8 minutes)
    python -m simulations.bench --model roberta-large  # only part 1, at the papers' backbone's shape
    python -m simulations.bench --model all-mpnet-base-v2  # only part 1, on the base-size checkpoint

Prints markdown tables headed by the machine and date:

1. **Hardware and backbone.** fp32 GEMM GFLOP/s (2048 x 2048 matmuls); the encoder's FLOPs
   per token, 2 x non-embedding parameters + 4 x layers x L x D for attention (Kaplan et
   al. 2020's count; MiniLM: 2 x 10.8 M + 4 x 6 x 40 x 384 = 22.0 MFLOP at L = 40), and
   the GEMM-derived peak = GEMM FLOP/s / FLOPs per token. Useful (non-pad) tokens/s of a
   plain forward over SST-2 dev sentences (batch 32, length-sorted dynamic padding) and of
   batched prompt scoring (P = 20 prompts x B = 32 texts, T = 8 prompt vectors, which
   count as useful tokens), each as a share of that peak; forward+backward of a local step
   on 16 texts, a soft prompt through the frozen encoder (2x the forward's FLOPs: activation
   gradients) and every weight trained (3x: weight gradients too); scoring again at 2k-32k
   tokens per encoder call (the chunk a memory budget picks).
2. **Clients.** Per method, in a fresh process each (so that peak RSS is the client's
   own): seconds of one local round (``fit`` at the method's defaults on SST-2, 8 shots
   per class, after one warm-up round); resident memory as the round starts and its peak
   during the round (the kernel's high-water mark reset before it, so that loading the
   model and data does not hide it); the process's peak. The gradient-free methods again
   with ``max-client-memory-mb`` set to fedprompt's in-round peak
   (:meth:`fedtext.backbone.Backbone.chunk_tokens`), and the throughput they lose.
3. **Flower + Ray** is a study of the one runner since issue 70: ``python -m simulations.compare
   simulations/experiments/ray_overhead.toml`` (:mod:`simulations.studies.ray_overhead`).
4. **Precisions** (``--precisions``): fp32 against bf16 on this CPU (:func:`precision_tables`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch

SST2 = "../shared/data/sst2"
METHODS_BENCHED = ("fedprompt", "bbt-fed", "fedbpt", "feddls", "fedavg")
GRADIENT_FREE = ("bbt-fed", "fedbpt", "feddls")
CHUNK_SWEEP = (2048, 4096, 8192, 16384, 32768)


# ------------------------------------------------------------------ 1. hardware
def synchronize(device: str) -> None:
    """Wait for the device's queued kernels (CUDA runs them asynchronously: a timer read
    without this measures the launch, not the work); nothing on a CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def gemm_gflops(sizes: tuple[int, ...] = (1024, 2048), repeats: int = 10, precision: str = "fp32",
                device: str = "cpu") -> float:
    """Best matmul rate over ``repeats`` n x n x n products per size (2 n^3 FLOPs each),
    in ``precision``'s dtype on ``device``. The best, not the mean: the peak is what the
    hardware can do, and a shared machine only ever makes single measurements slower."""
    from fedtext.backbone.devices import DTYPES

    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, dtype=DTYPES[precision], device=device) for _ in range(2))
        a @ b  # warm-up
        synchronize(device)
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            synchronize(device)
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
    return best


def flops_per_token(encoder: torch.nn.Module, seq_len: float) -> float:
    """2 x non-embedding parameters + 4 x layers x L x D (QK^T and AV)."""
    c = encoder.config
    emb = sum(p.numel() for n, p in encoder.named_parameters() if "embeddings" in n)
    params = sum(p.numel() for p in encoder.parameters()) - emb
    return 2.0 * params + 4.0 * c.num_hidden_layers * seq_len * c.hidden_size


def backbone_rates(n_texts: int = 256, p: int = 20, b: int = 32, t: int = 8, precision: str = "fp32",
                   sweep_chunks: bool = True, device: str = "cpu", model: str = "all-MiniLM-L6-v2",
                   repeats: int = 3) -> dict[str, float]:
    """Useful tokens/s of a plain forward and of batched scoring on SST-2 dev texts, the
    encoder ``model`` (a checkpoint, or a shape of fedtext/backbone/shapes.py with random
    weights: the rate is the shape's) on ``device`` computing in ``precision``
    (fedtext.backbone.devices: autocast, float32 logits); the best of ``repeats`` after a warm-up."""
    import fedtext.backbone.scoring as scoring
    from fedtext.backbone import SHAPES, get_backbone
    from fedtext.learning.data import load_splits

    weights = "random" if model in SHAPES else "pretrained"
    bb = get_backbone(model, "similarity", "sst2", 128, device, precision, weights)
    texts = list(load_splits(SST2).test["text"][:n_texts])
    batches = bb.batches(texts, [0] * len(texts), batch_size=32)
    useful = sum(int(x.attention_mask.sum()) for x in batches)

    def plain() -> None:
        with torch.inference_mode(), bb.precision.autocast():
            for x in batches:
                bb.encoder(input_ids=x.input_ids.to(bb.device), attention_mask=x.attention_mask.to(bb.device))
        synchronize(device)

    def best_seconds(fn, repeats: int = repeats) -> float:  # best of a few, as for the GEMM
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    plain_rate = useful / best_seconds(plain)
    batch = bb.encode(texts[:b], [0] * b)
    prompts = np.stack([bb.initial_prompt(t, s) for s in range(p)])
    score_useful = p * (int(batch.attention_mask.sum()) + b * t)
    score_rate = score_useful / best_seconds(lambda: bb.score(prompts, batch))
    mean_len = useful / len(texts)
    # Forward + backward on 16 texts (a local step): a soft prompt trains through the frozen encoder
    # (fedprompt: the backward computes activation gradients only, about one more forward's FLOPs), and
    # every weight trains (fedavg: weight gradients too, about two more)
    step = bb.encode(texts[:16], [0] * 16)
    step_useful = int(step.attention_mask.sum())

    # the encoder's own work: its last hidden states into a scalar (no head, no label vectors)
    def prompt_step() -> None:
        prompt = torch.as_tensor(bb.initial_prompt(t, 0)).requires_grad_(True)
        bb.hidden_states(prompt[None], step)[0].square().mean().backward()
        synchronize(device)

    full = bb.trainable_copy("all")

    def full_step() -> None:
        full.net.encoder.zero_grad(set_to_none=True)
        full.hidden_states(None, step)[0].square().mean().backward()
        synchronize(device)

    prompt_rate = (step_useful + 16 * t) / best_seconds(prompt_step)
    full_rate = step_useful / best_seconds(full_step)
    sweep = {}
    # Tokens per encoder call (what max-client-memory-mb sets), through MAX_TOKENS_PER_CHUNK:
    # the chunk of a score() without a budget.
    for tokens in CHUNK_SWEEP if sweep_chunks else ():
        scoring.MAX_TOKENS_PER_CHUNK, saved = tokens, scoring.MAX_TOKENS_PER_CHUNK
        try:
            sweep[tokens] = score_useful / best_seconds(lambda: bb.score(prompts, batch), repeats=2)
        finally:
            scoring.MAX_TOKENS_PER_CHUNK = saved
    step_len = step_useful / 16
    return {"plain_tps": plain_rate, "score_tps": score_rate, "mean_len": mean_len, "sweep": sweep,
            "prompt_step_tps": prompt_rate, "full_step_tps": full_rate,
            "flops_per_token": flops_per_token(bb.encoder, mean_len),
            "flops_per_token_scored": flops_per_token(bb.encoder, mean_len + t),
            "flops_per_token_prompt_step": 2 * flops_per_token(bb.encoder, step_len + t),
            "flops_per_token_full_step": 3 * flops_per_token(bb.encoder, step_len)}


# ------------------------------------------------------------------- 2. clients
def high_water_mb() -> float:
    """This process's peak resident memory since the last ``clear_refs`` reset
    (``VmHWM``, MiB; Linux)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024.0


def client_round(method: str, budget_mb: int, precision: str = "fp32", rounds: int = 1,
                 device: str = "cpu") -> dict[str, float]:
    """One warm-up and ``rounds`` timed local rounds of ``method``'s client (this process)
    on ``device`` at the method's defaults on SST-2 (:func:`timed_client_round`)."""
    from fedtext.common.registry import make_config

    cfg = make_config(method, dataset=SST2, max_client_memory_mb=budget_mb, device=device, precision=precision)
    return timed_client_round(cfg, rounds)


def timed_client_round(cfg, rounds: int = 1, warm_up: bool = True, partition: int = 0,
                       partitions: int = 10) -> dict[str, float]:
    """``rounds`` timed local rounds of ``cfg``'s client (this process), after one warm-up
    round unless ``warm_up`` is false: the fastest round's seconds (a shared machine only
    makes a round slower), the peak of them all (resident memory; on a GPU also the GPU
    memory torch allocated), the values sent each way and the sequences the client pushed
    through the backbone (``queries``). The server's strategy only makes round 1's download
    and is gone before the rounds, so that the memory is the client's."""
    import gc

    from fedtext.node.node import client_class
    from fedtext.learning.data import client_data, labelled
    from fedtext.records.probes import current_rss_mb, peak_rss_mb
    from fedtext.server_app import strategy_class

    task = labelled(cfg).task
    strategy = strategy_class(cfg.method)(cfg, task)
    strategy.global_arrays = strategy.initial_arrays()
    arrays, extra = strategy.download(1, SimpleNamespace(cid="bench"), "fit")  # what round 1 sends
    config = {**strategy.fit_config(1), **extra}
    del strategy
    gc.collect()
    client = client_class(cfg.method)(cfg, task, client_data(cfg, partition, partitions))
    if warm_up:
        client.fit(arrays, config)  # FedDLS: now holds version 0
    # Reset the kernel's high-water mark (Linux >= 4.0), so that the round's own peak is
    # measured, not the process's (which loading the model and data may set).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    if client.backbone.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(client.backbone.device)
    start_mb = current_rss_mb()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        upload, _, metrics = client.fit(arrays, config)
        times.append(time.perf_counter() - t0)
    fit_s = min(times)  # fit() returns numpy arrays: the GPU work is done when it returns
    # the client's own GPU probe (FedTextClient.gpu_memory), a peak since the reset above
    gpu = {"round_peak_gpu_mb": metrics["peak_gpu_mb"]} if "peak_gpu_mb" in metrics else {}
    return {"fit_s": fit_s, "peak_rss_mb": peak_rss_mb(), "round_start_mb": start_mb,
            "round_peak_mb": high_water_mb(), "queries": metrics["queries"],
            "values_down": int(sum(np.asarray(a).size for a in arrays)),
            "values_up": int(sum(np.asarray(a).size for a in upload)),
            "weights_total": int(sum(p.numel() for p in client.backbone.encoder.parameters())), **gpu}


def client_in_subprocess(method: str, budget_mb: int = 0, precision: str = "fp32", rounds: int = 1,
                         device: str = "cpu") -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "simulations.bench", "--client", method, "--budget", str(budget_mb),
                          "--precision", precision, "--rounds", str(rounds), "--device", device],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------ 4. precisions
PRECISION_METHODS = ("bbt-fed", "fedbpt", "feddls", "fedprompt", "fedavg")  # 3 gradient-free, 2 back-prop


def header(device: str = "cpu") -> str:
    """The line every table is headed by: date, machine, CPU, the device the bench ran on
    (a GPU by its name), torch and its threads."""
    from fedtext.backbone.devices import cpu_has_bf16

    dev = torch.device(device)
    where = (f"device {device} ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else
             f"device cpu (bf16 instructions: {'yes' if cpu_has_bf16() else 'no'})")
    return (f"# fedtext bench: {_dt.date.today()} | {platform.node()} | {os.cpu_count()} CPUs | "
            f"{platform.processor() or platform.machine()} | {where} | torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads\n")


def precision_tables(precisions: tuple[str, ...] = ("fp32", "bf16"), passes: int = 2, device: str = "cpu") -> None:
    """fp32 against bf16 on this CPU, as ratios within one run: GEMM peak in each dtype,
    useful tokens/s of a plain forward and of batched scoring and their share of that
    dtype's GEMM-derived peak (best of ``passes`` interleaved passes, each a best of 3),
    then per method of :data:`PRECISION_METHODS`, in a fresh process each, the fastest of
    3 local rounds after a warm-up (seconds, model queries, the rounds' peak RSS)."""
    rates: dict[str, dict[str, float]] = {}
    for _ in range(passes):  # interleaved: a slow moment of a shared machine hits both
        for prec in precisions:
            r = backbone_rates(precision=prec, sweep_chunks=False, device=device)
            r["gemm"] = gemm_gflops(precision=prec, device=device)
            old = rates.get(prec)
            rates[prec] = r if old is None else {k: max(old[k], r[k]) if k in ("plain_tps", "score_tps", "gemm")
                                                 else r[k] for k in r}
    base = rates[precisions[0]]
    print("| encoder (MiniLM-L6, SST-2 dev) | " + " | ".join(precisions) + " | ratio |")
    print("| --- |" + " --- |" * (len(precisions) + 1))
    for key, label in (("gemm", "GEMM 2048^3, GFLOP/s"), ("plain_tps", "plain forward, useful tokens/s"),
                       ("score_tps", "batched scoring P=20 x B=32, useful tokens/s")):
        cells = " | ".join(f"{rates[p][key]:,.0f}" for p in precisions)
        print(f"| {label} | {cells} | {rates[precisions[-1]][key] / base[key]:.2f}x |")
    for key, fkey, label in (("plain_tps", "flops_per_token", "plain forward, share of the dtype's GEMM peak"),
                             ("score_tps", "flops_per_token_scored", "scoring, share of the dtype's GEMM peak")):
        cells = " | ".join(f"{rates[p][key] * rates[p][fkey] / (rates[p]['gemm'] * 1e9):.0%}" for p in precisions)
        print(f"| {label} | {cells} | |")
    print(flush=True)
    print("| client, local round (SST-2, defaults; best of 3) | " + " | ".join(
        f"{p} s | {p} queries | {p} round peak RSS" for p in precisions) + " | time ratio | peak ratio |")
    print("| --- |" + " --- |" * (3 * len(precisions) + 2))
    for m in PRECISION_METHODS:
        rows = {p: client_in_subprocess(m, 0, p, rounds=3, device=device) for p in precisions}
        cells = " | ".join(f"{rows[p]['fit_s']:.2f} | {rows[p]['queries']:,} | {rows[p]['round_peak_mb']:,.0f} MB"
                           for p in precisions)
        first, last = rows[precisions[0]], rows[precisions[-1]]
        print(f"| {m} | {cells} | {first['fit_s'] / last['fit_s']:.2f}x | "
              f"{last['round_peak_mb'] / first['round_peak_mb']:.2f} |", flush=True)


# ----------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--client", help=argparse.SUPPRESS)  # internal: one client round, prints JSON
    ap.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)  # internal, with --client
    ap.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)  # internal, with --client
    ap.add_argument("--precisions", action="store_true", help="only the fp32-vs-bf16 tables (part 4): the "
                    "encoder, GEMM peaks and one local round per method, in each precision")
    ap.add_argument("--device", default="cpu", help="with --precisions: cpu, cuda or cuda:N (the GPU rows of "
                    "docs/performance.md: --precisions --device cuda)")
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="part 1 only, on this backbone: a checkpoint or "
                    "a shape (roberta-large: the papers' scale, random weights), one repeat, no chunk sweep")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.client:
        print(json.dumps(client_round(args.client, args.budget, args.precision, args.rounds, args.device)))
        return 0
    if args.precisions:
        from fedtext.common.config import DEVICE_PATTERN, ConfigError
        from fedtext.backbone.devices import Precision

        try:
            if args.device == "auto" or not DEVICE_PATTERN.fullmatch(args.device):
                raise ConfigError(f"--device must be cpu, cuda or cuda:N, got {args.device!r}")
            Precision.of(args.device, "bf16")  # the device, and bf16 on it, before anything is measured
        except ConfigError as exc:
            print(f"fedtext: configuration error: {exc}", file=sys.stderr)
            return 2
        print(header(args.device))
        precision_tables(device=args.device)
        return 0

    print(header())
    gflops = gemm_gflops()
    shape = args.model != "all-MiniLM-L6-v2"
    r = backbone_rates(model=args.model, sweep_chunks=not shape, repeats=1 if shape else 3)
    gflops = max(gflops, gemm_gflops())  # again after: the better of two measurements
    peak = gflops * 1e9 / r["flops_per_token"]
    peak_scored = gflops * 1e9 / r["flops_per_token_scored"]
    print("| measure | value | share of GEMM-derived peak |\n| --- | --- | --- |")
    print(f"| fp32 GEMM (2048^3) | {gflops:,.0f} GFLOP/s | |")
    print(f"| {args.model} encoder FLOPs per token (L = {r['mean_len']:.0f}) | {r['flops_per_token'] / 1e6:.1f} M | |")
    print(f"| GEMM-derived peak | {peak:,.0f} tokens/s | 100% |")
    print(f"| plain forward, SST-2 dev, batch 32 | {r['plain_tps']:,.0f} useful tokens/s | {r['plain_tps'] / peak:.0%} |")
    print(f"| batched scoring, P=20 x B=32, T=8 | {r['score_tps']:,.0f} useful tokens/s | "
          f"{r['score_tps'] / peak_scored:.0%} |")
    print(f"| scoring / plain forward | {r['score_tps'] / r['plain_tps']:.2f}x | |")
    for name, key, times in (("forward+backward, soft prompt through the frozen encoder, batch 16", "prompt_step", 2),
                             ("forward+backward, every weight trains, batch 16", "full_step", 3)):
        step_peak = gflops * 1e9 / r[f"flops_per_token_{key}"]
        print(f"| {name} ({times}x the forward's FLOPs) | {r[f'{key}_tps']:,.0f} useful tokens/s | "
              f"{r[f'{key}_tps'] / step_peak:.0%} |")
    for tokens, tps in r["sweep"].items():
        print(f"| scoring at {tokens:,} tokens per encoder call | {tps:,.0f} useful tokens/s | {tps / peak_scored:.0%} |")
    print(flush=True)
    if shape:
        return 0

    rows = {m: client_in_subprocess(m) for m in METHODS_BENCHED}
    budget = int(rows["fedprompt"]["round_peak_mb"])
    for m in GRADIENT_FREE:
        rows[f"{m}, max-client-memory-mb={budget}"] = client_in_subprocess(m, budget)
    print("| client (SST-2, defaults, 16 shots) | seconds per local round | model queries | "
          "RSS at round start | peak RSS in the round | process peak RSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, x in rows.items():
        base = rows.get(name.split(",")[0]) if "," in name else None
        loss = f" ({x['fit_s'] / base['fit_s'] - 1:+.0%} time)" if base else ""
        print(f"| {name} | {x['fit_s']:.2f} s{loss} | {x['queries']:,} | {x['round_start_mb']:,.0f} MB | "
              f"{x['round_peak_mb']:,.0f} MB | {x['peak_rss_mb']:,.0f} MB |")
    print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
