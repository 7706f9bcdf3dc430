"""Scoring: prompts and texts -> class logits through the head, in memory-bounded encoder
calls; evaluation and per-prompt losses.

:func:`score` evaluates P candidate prompts in one batched forward (CMA-ES populations,
search candidates) and counts model queries (one query = one sequence through the
encoder). Prompts may also be per input (``[P,B,T,D]``, FedDPG's generated prompts) or
absent (``None``: no prompt, fine-tuning methods). The memory budget that sizes its encoder
calls is the caller's (a client passes its run's ``max-client-memory-mb``), never the
backbone's: one backbone serves every client and strategy of a process, whatever run they
belong to. The head (a :data:`fedtext.backbone.heads.HEADS` class, :func:`head_kind`) turns the
encoder's output into logits.

The functions take the backbone they score on (``host``, a
:class:`fedtext.backbone.Backbone`) and reach the encoder and the chunk size through its
methods (``host.logits``, ``host.chunk_tokens``), so that a test or a probe can watch them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor

from fedtext.backbone.injections import SPLIT_OFFSETS
from fedtext.backbone.tokens import EncodedBatch, length_buckets
from fedtext.common.config import ConfigError
from fedtext.backbone.heads import HEADS, Head
from fedtext.common.progress import Progress, track
from fedtext.backbone.prompts import SplitPrompt

if TYPE_CHECKING:
    from transformers import PretrainedConfig

MAX_TOKENS_PER_CHUNK = 32_768  # tokens per encoder call in score() without a memory budget
# Inference activation memory per token, as a multiple of 4 bytes x (D + D_ff + H.L): the
# live tensors of one layer (hidden, QKV, FFN intermediate, attention scores) plus torch's
# allocator slack. 3.5 fits all-MiniLM-L6-v2 measured here (peak RSS above the loaded
# model at 4k-64k tokens per call, L = 84: 20-42 KB per token; `simulations.bench`).
ACTIVATION_FACTOR = 3.5
SCORING_FIXED_MB = 160  # what a first scoring call adds regardless of chunk size (threads, allocator)
BUCKET_ROWS = 4  # texts per length group in population scoring (length_buckets)

PromptSource = np.ndarray | SplitPrompt | None | Callable[[EncodedBatch], np.ndarray]


class ScoringHost(Protocol):
    """What scoring reads of its backbone (:class:`fedtext.backbone.Backbone` is one)."""

    dim: int
    device: torch.device
    head_impl: Head

    def hidden_states(self, prompts: Tensor | None, batch: EncodedBatch,
                      injected: Mapping[str, Tensor] | None = None) -> tuple[Tensor, Tensor, int]: ...

    def logits(self, prompts: Tensor | None, batch: EncodedBatch, pool_prompt: bool = True,
               injected: Mapping[str, Tensor] | None = None) -> Tensor: ...

    def chunk_tokens(self, seq_len: int, budget_mb: int) -> int: ...

    def score(self, prompts: Any, batch: EncodedBatch, *, budget_mb: int = 0) -> Tensor: ...


def head_kind(name: str) -> type[Head]:
    """The head class a run-config ``head`` names (one-line error for another name)."""
    kind = HEADS.get(name)
    if kind is None:
        raise ConfigError(f"head must be one of {', '.join(HEADS)}, got {name!r}")
    return kind


def logits(host: ScoringHost, prompts: Tensor | None, batch: EncodedBatch, pool_prompt: bool = True,
           injected: Mapping[str, Tensor] | None = None) -> Tensor:
    """Logits ``[P, B, C]`` on one batch in one encoder call (``host.hidden_states``; the
    head in float32). ``pool_prompt=False`` leaves the prompt positions out of the pooled
    heads' mean (deep prompts, whose positions only carry keys and values: fedptuning-v2).
    """
    b = len(batch)
    hidden, att, t = host.hidden_states(prompts, batch, injected)
    p = hidden.shape[0] // b
    pool_att = att if pool_prompt or not t else torch.cat([att[:, :1], att.new_zeros(p * b, t), att[:, 1 + t:]], 1)
    mask_pos = None if batch.mask_pos is None else batch.mask_pos.to(host.device)
    out = host.head_impl.logits(host, hidden, pool_att, mask_pos, t).reshape(p, b, -1)
    return out.cpu()  # labels, losses and numpy live on the CPU (a no-op there)


def score(host: ScoringHost, prompts: Tensor | np.ndarray | SplitPrompt | None, batch: EncodedBatch,
          budget_mb: int = 0) -> Tensor:
    """Logits ``[P, B, C]`` of P candidate prompts, without gradients.

    Candidates are stacked into the batch dimension so that the whole population goes
    through the encoder in as few calls as possible, in chunks of ``host.chunk_tokens``
    tokens (activation memory stays bounded). A population (P > 1) over texts of mixed
    lengths is scored per :func:`length_buckets` group of ``BUCKET_ROWS`` texts, so that
    the encoder spends its time on text, not on padding (``simulations.bench``); P = 1
    (evaluation) keeps the batch whole.

    Parameters
    ----------
    host
        The backbone.
    prompts
        ``[P, T, D]`` input embeddings, per-input ``[P, B, T, D]``, a
        :class:`fedtext.backbone.prompts.SplitPrompt` of two ``[P, T, D]`` (input embeddings and
        offsets added after the embedding layer: BBT's injection,
        :data:`fedtext.backbone.injections.SPLIT_OFFSETS`), or ``None`` (no prompt, P = 1).
    batch
        The texts.
    budget_mb
        The caller's memory budget in MB (its run's ``max-client-memory-mb``; 0: none),
        which sizes the chunks. The caller's, not the backbone's: the process's backbone
        is shared by every client and strategy in it, of whatever run.
    """
    if prompts is None:
        with torch.inference_mode():
            return host.logits(None, batch)
    offsets = None
    if isinstance(prompts, SplitPrompt):
        prompts, offsets = prompts
        offsets = torch.as_tensor(np.require(offsets, np.float32, "W"))
    # "W": a copy where the array is read-only (Flower's received arrays are), which torch
    # would otherwise wrap with a non-writable-tensor warning
    prompts = torch.as_tensor(np.require(prompts, np.float32, "W"))
    dim = host.dim
    if prompts.ndim not in (3, 4) or prompts.shape[-1] != dim or (
        prompts.ndim == 4 and prompts.shape[1] != len(batch)
    ):
        raise ValueError(f"prompts must be [P, T, {dim}] or [P, {len(batch)}, T, {dim}], "
                         f"got {tuple(prompts.shape)}")
    if offsets is not None and (prompts.ndim != 3 or offsets.shape != prompts.shape):
        raise ValueError(f"a split prompt's two parts must both be [P, T, {dim}], got "
                         f"{tuple(prompts.shape)} and {tuple(offsets.shape)}")
    groups = length_buckets(batch, BUCKET_ROWS) if len(prompts) > 1 else None
    pieces = [(prompts, batch)] if groups is None else [
        (prompts if prompts.ndim == 3 else prompts[:, rows], batch.take(rows).trimmed()) for rows in groups]
    sizes = [chunk_rows(host, p, b, budget_mb) for p, b in pieces]
    calls = sum(-(-len(p) // size) for (p, _), size in zip(pieces, sizes, strict=True))
    with Progress(f"scoring {len(prompts)} prompts on {len(batch)} texts", calls, "encoder calls") as bar:
        parts = [score_chunks(host, p, b, size, bar, offsets) for (p, b), size in zip(pieces, sizes, strict=True)]
    if groups is None:
        return parts[0]
    out = parts[0].new_empty(len(prompts), len(batch), parts[0].shape[-1])
    for rows, part in zip(groups, parts, strict=True):
        out[:, torch.as_tensor(rows)] = part
    return out


def chunk_rows(host: ScoringHost, prompts: Tensor, batch: EncodedBatch, budget_mb: int) -> int:
    """Prompts per encoder call for ``batch``: ``host.chunk_tokens`` tokens per call."""
    seq = batch.input_ids.shape[1] + prompts.shape[-2]
    return max(1, host.chunk_tokens(seq, budget_mb) // (len(batch) * seq))


def score_chunks(host: ScoringHost, prompts: Tensor, batch: EncodedBatch, chunk: int, bar: Progress,
                 offsets: Tensor | None = None) -> Tensor:
    """:func:`score` of ``prompts`` (and their ``offsets``) on one batch, ``chunk`` prompts
    per encoder call."""
    out = []
    with torch.inference_mode():
        for i in range(0, len(prompts), chunk):
            injected = None if offsets is None else {SPLIT_OFFSETS: offsets[i : i + chunk]}
            out.append(host.logits(prompts[i : i + chunk], batch, injected=injected))
            bar.advance()
        return torch.cat(out)


def activation_bytes_per_token(config: PretrainedConfig, seq_len: int) -> float:
    """Inference activation bytes per token of a model of ``config`` at sequence length
    ``seq_len``: ``ACTIVATION_FACTOR * 4 * (D + D_ff + A * H * L)`` with A the ``[B, H, L, L]``
    maps a forward holds per layer (:attr:`fedtext.backbone.architectures.Architecture.attention_maps`:
    1, the attention scores; MPNet 2, its relative-position bias beside them). MiniLM, L=84: 41 KB.

    An upper bound on both backbones here (fresh process, one scoring call on 32 SST-2 dev texts
    with an 8-vector prompt, L = 52, peak RSS above the loaded model; 2026-11-29): all-MiniLM-L6-v2
    11.4 KB per token at 3.3k tokens per call and 5.6 KB at 15k (bound: 34.8 KB); all-mpnet-base-v2
    26.6 and 12.1 KB (bound: 69.6 KB), 2.2x MiniLM's where D and D_ff alone say 1.75x.
    """
    from fedtext.backbone.architectures import ARCHITECTURES

    c = config
    arch = ARCHITECTURES.get(getattr(c, "model_type", ""))
    maps = arch.attention_maps if arch is not None else 1
    width = c.hidden_size + getattr(c, "intermediate_size", 4 * c.hidden_size) + maps * c.num_attention_heads * seq_len
    return ACTIVATION_FACTOR * 4.0 * width


def chunk_tokens(config: PretrainedConfig, loaded_rss_mb: float, seq_len: int, budget_mb: int) -> int:
    """Tokens per encoder call in :func:`score` under a memory budget of ``budget_mb``.

    Without a budget (0), ``MAX_TOKENS_PER_CHUNK``. With one (the scoring client's
    ``max-client-memory-mb``): what fits in the budget minus the process's resident memory
    once the model was loaded (``loaded_rss_mb``) and ``SCORING_FIXED_MB``, at
    :func:`activation_bytes_per_token`; never less than one sequence, never more than
    ``MAX_TOKENS_PER_CHUNK`` (e.g. budget 900 MB, 520 MB loaded, L=84: (900 - 520 - 160)
    MiB / 40,992 B = 5,627 tokens = 66 sequences per call). Not the resident memory
    *now*: what an earlier call freed stays resident in torch's allocator and is reused by
    the next call of the same size, so counting it again would shrink the chunks of every
    later call for no memory saved (measured: +77% time at an unchanged peak).
    """
    if not budget_mb:
        return MAX_TOKENS_PER_CHUNK
    free_mb = budget_mb - loaded_rss_mb - SCORING_FIXED_MB
    tokens = int(free_mb * 2**20 / activation_bytes_per_token(config, seq_len))
    return int(min(MAX_TOKENS_PER_CHUNK, max(seq_len, tokens)))


def evaluate(host: ScoringHost, prompt: PromptSource, batches: Sequence[EncodedBatch]) -> tuple[float, float]:
    """Mean cross-entropy and accuracy over pre-encoded batches.

    ``prompt``: one ``[T, D]`` prompt for every input (or a :class:`SplitPrompt` of two),
    ``None`` (no prompt), or a function of the batch returning ``[T, D]`` or per-input
    ``[B, T, D]`` prompts.
    """
    loss, correct, n = 0.0, 0, 0
    for batch in track(batches, "evaluation", unit="batches"):
        p = prompt(batch) if callable(prompt) else prompt
        # One prompt is one encoder call per batch under any budget: no budget to pass.
        one = None if p is None else SplitPrompt(*(np.asarray(x)[None] for x in p)) \
            if isinstance(p, SplitPrompt) else np.asarray(p)[None]
        out = host.score(one, batch)[0]
        loss += float(torch.nn.functional.cross_entropy(out, batch.labels, reduction="sum"))
        correct += int((out.argmax(-1) == batch.labels).sum())
        n += len(batch)
    return loss / max(n, 1), correct / max(n, 1)


def losses(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy per prompt: ``[P, B, C]`` logits -> ``[P]`` mean losses."""
    p, b, c = logits.shape
    ce = torch.nn.functional.cross_entropy(logits.reshape(p * b, c), labels.repeat(p), reduction="none")
    return ce.reshape(p, b).mean(1)
