""":class:`Backbone`, the one object methods hold, and the process's cached backbones.

The backbone composes its parts and adds no logic of its own: tokenising
(:class:`fedtext.backbone.tokens.Tokens`), the encoder network with its weights and
injections (:class:`fedtext.backbone.encoder.Network`), the head (a
:data:`fedtext.backbone.heads.HEADS` class) and scoring (:mod:`fedtext.backbone.scoring`); loading
is :func:`fedtext.backbone.loading.load`, device and dtype a :class:`fedtext.backbone.devices.Precision`.
A new method's head or injection is a new entry of its registry
(:data:`fedtext.backbone.heads.HEADS`, :data:`fedtext.backbone.injections.INJECTIONS`), never an
edit here (``tests/unit/test_backbone_parts.py`` keeps this class thin).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

import fedtext.backbone.scoring as scoring
from fedtext.backbone.encoder import Network, Trainable
from fedtext.backbone.injections import Injection, injection
from fedtext.backbone.loading import load
from fedtext.backbone.scoring import PromptSource
from fedtext.backbone.tokens import EncodedBatch, Tokens, draw_tokens
from fedtext.backbone.devices import CPU_FP32, Precision
from fedtext.backbone.prompts import SplitPrompt
from fedtext.records.probes import current_rss_mb
from fedtext.common.tasks import Task

if TYPE_CHECKING:
    from fedtext.common.config import RunConfig


class Part:
    """A read-only attribute of a backbone that one of its parts holds under the same name:
    ``encoder = Part("net")`` reads ``backbone.net.encoder``. Set it on the part (a trainable
    copy replaces its ``net``)."""

    def __init__(self, part: str) -> None:
        self.part, self.name = part, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.part), self.name)

    def __set__(self, obj: object, value: Any) -> None:
        raise AttributeError(f"'{self.name}' belongs to the backbone's '{self.part}': set it there")


class Backbone:
    """A frozen (or partially/fully trainable) encoder with prompt injection and heads.

    Parameters
    ----------
    model
        Model name (offline default ``all-MiniLM-L6-v2``), local path, hub id, or a shape
        of :data:`fedtext.backbone.shapes.SHAPES` (with ``weights="random"``).
    head
        A head's name, a key of :data:`fedtext.backbone.heads.HEADS` (``similarity``, ``tied``,
        ``mlm``, ``linear``, ``cls``).
    task
        The task: verbalizer, descriptions, template.
    max_length
        Tokens kept per text (the template and prompt come on top).
    trainable
        ``"none"`` (frozen, prompt methods), ``"all"`` (full fine-tuning) or a
        predicate on parameter names (partial training); see :meth:`set_trainable`.
    precision
        Device and compute dtype (:class:`fedtext.backbone.devices.Precision`, from the run's
        ``device`` and ``precision``): the weights live on the device, encoder calls run
        under its autocast, logits come back as CPU float32 (every loss, every array sent
        and the query counts are computed as on a CPU in fp32).
    weights
        ``"pretrained"`` or ``"random"`` (the run-config's ``weights``;
        :mod:`fedtext.backbone.loading`).
    """

    def __init__(self, model: str, head: str, task: Task, max_length: int = 128, trainable: Trainable = "none",
                 precision: Precision = CPU_FP32, weights: str = "pretrained") -> None:
        kind = scoring.head_kind(head)
        tokenizer, mlm, encoder = load(model, kind, weights)
        self.name, self.head, self.task, self.max_length, self.weights = model, head, task, max_length, weights
        self.precision = precision
        self.device = precision.device
        self.net = Network(mlm, encoder, task.num_classes if kind.has_linear else 0, precision, model)
        self.set_trainable(trainable)
        self.text = Tokens(tokenizer, max_length)
        # Shared by trainable copies: it holds token ids only and reads the weights it is given.
        self.head_impl = kind(self, self.text.ids)
        self.loaded_rss_mb = current_rss_mb()  # the process with the model in it, before any forward

    # the parts' state that methods and heads read (HeadHost, ScoringHost)
    tokenizer = Part("text")
    cls_id = Part("text")
    sep_id = Part("text")
    pad_id = Part("text")
    encoder = Part("net")
    mlm = Part("net")
    embeddings = Part("net")
    linear = Part("net")
    dim = Part("net")
    counter = Part("net")
    training = Part("net")

    @property
    def queries(self) -> int:
        """Sequences forwarded through the encoder by this backbone and its copies, ever."""
        return self.net.counter.n

    # ------------------------------------------------------------------ weights
    def set_trainable(self, trainable: Trainable) -> None:
        """Choose which encoder weights train.

        ``"none"``: frozen (prompt methods); ``"all"``: full fine-tuning (``fedavg``,
        FedDRS); or a predicate on parameter names for partial training, e.g. FeS's
        depth/capacity co-planning ``lambda n: "layer.5." in n or n.endswith(".bias")``.
        """
        self.net.set_trainable(trainable)

    def named_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        """Every weight by name: the encoder's (or MLM's), then ``head.weight``/``head.bias``
        of the ``linear`` or ``cls`` head."""
        return self.net.named_parameters()

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Weights that currently receive gradients."""
        return [p for _, p in self.net.named_trainable()]

    def named_trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        """``(name, weight)`` of the trainable weights, in a fixed order (the wire order)."""
        return self.net.named_trainable()

    def trainable_copy(self, trainable: Trainable) -> "Backbone":
        """A backbone that trains the weights ``trainable`` names, on its own copies.

        The weights it does not train are shared with ``self`` (the process-wide frozen
        backbone) by reference; the ones it trains are deep copies, so nothing trained here
        reaches ``self`` or another copy. Tokenizer, caches and the query counter are shared.
        """
        new = copy.copy(self)
        new.net = self.net.trainable_copy(trainable)
        return new

    @contextlib.contextmanager
    def fixed_weights(self) -> Iterator["Backbone"]:
        """Inference on a backbone that trains: no gradients, and the similarity head's
        label vectors are encoded once for the whole block instead of at every forward."""
        with self.net.fixed_weights():
            yield self

    def trainable_arrays(self) -> list[np.ndarray]:
        """The trainable weights as float32 arrays, in :meth:`named_trainable` order."""
        return self.net.trainable_arrays()

    def load_trainable(self, arrays: Sequence[np.ndarray]) -> None:
        """Overwrite the trainable weights (in :meth:`named_trainable` order) with ``arrays``."""
        self.net.load_trainable(arrays)

    def weights_changed(self) -> None:
        """Say that the encoder's weights were changed in place (FedKSeed's replay): the label
        vectors are encoded again at their next use."""
        self.net.weights_changed()

    @property
    def label_vectors(self) -> Tensor:
        """``u_c``: the unit-norm pooled encodings of the label descriptions ``[C, D]``, by the
        plain encoder (:meth:`fedtext.backbone.encoder.Network.label_vectors`)."""
        return self.net.label_vectors(lambda: self.encode(list(self.task.descriptions), [0] * self.task.num_classes))

    # -------------------------------------------------------------- tokenizing
    def encode(self, texts: Sequence[str], labels: Sequence[int]) -> EncodedBatch:
        """Tokenize (cached per text) and pad texts into one batch, laid out for the head
        (:meth:`fedtext.backbone.tokens.Tokens.encode`)."""
        return self.text.encode(texts, labels, self.head_impl)

    def batches(self, texts: Sequence[str], labels: Sequence[int], batch_size: int = 64) -> list[EncodedBatch]:
        """Length-sorted batches (dynamic padding): similar lengths share a batch."""
        return self.text.batches(texts, labels, self.head_impl, batch_size)

    def natural_token_ids(self) -> np.ndarray:
        """Ids of ordinary word tokens (no specials, no ``[unused]``, alphabetic)."""
        return self.text.natural_ids(self.net.embeddings.weight.shape[0])

    # ----------------------------------------------------------------- prompts
    def token_embeddings(self, input_ids: Tensor) -> Tensor:
        """e(ids) ``[B, L, D]``, looked up on the backbone's device and returned on the CPU:
        for a method's own small network that stays there (FedDPG's G reads the mean word
        embedding; the prompts it makes go to the device in :meth:`forward`)."""
        return self.net.token_embeddings(input_ids)

    def vocab_embeddings(self) -> np.ndarray:
        """e(V): the input embedding matrix as float32 ``[V, D]``."""
        return self.net.vocab_embeddings()

    def embedding_std(self) -> float:
        """Standard deviation of the entries of e(V) (scale for random projections): the
        population std over every float32 entry, BBT's ``np.std(embedding.reshape(-1))``."""
        return float(np.std(self.vocab_embeddings().reshape(-1)))

    def initial_prompt(self, length: int, seed: int) -> np.ndarray:
        """p0: embeddings of ``length`` natural tokens drawn with ``seed`` (``[T, D]``;
        :func:`fedtext.backbone.tokens.draw_tokens`)."""
        return self.vocab_embeddings()[draw_tokens(self.natural_token_ids(), length, seed)].copy()

    def injection(self, name: str) -> Injection:
        """The registered injection ``name`` (:data:`fedtext.backbone.injections.INJECTIONS`)
        on this backbone's encoder: a one-line error now where the encoder has no place for it."""
        return injection(name, self.net.encoder, self.name)

    # ----------------------------------------------------------------- forward
    def hidden_states(self, prompts: Tensor | None, batch: EncodedBatch,
                      injected: Mapping[str, Tensor] | None = None) -> tuple[Tensor, Tensor, int]:
        """The encoder's last hidden states ``[P*B, T+L, D]`` (float32), the attention mask
        and T, in one encoder call (:meth:`fedtext.backbone.encoder.Network.hidden_states`)."""
        return self.net.hidden_states(prompts, batch, injected)

    def logits(self, prompts: Tensor | None, batch: EncodedBatch, pool_prompt: bool = True,
               injected: Mapping[str, Tensor] | None = None) -> Tensor:
        """Logits ``[P, B, C]`` on one batch in one encoder call (:func:`fedtext.backbone.scoring.logits`)."""
        return scoring.logits(self, prompts, batch, pool_prompt, injected)

    def score(self, prompts: Tensor | np.ndarray | SplitPrompt | None, batch: EncodedBatch, *,
              budget_mb: int = 0) -> Tensor:
        """Logits ``[P, B, C]`` of P candidate prompts (``[P, T, D]``, per-input
        ``[P, B, T, D]``, a :class:`SplitPrompt` or ``None``), without gradients, in encoder
        calls sized by the caller's ``budget_mb`` (:func:`fedtext.backbone.scoring.score`)."""
        return scoring.score(self, prompts, batch, budget_mb)

    def activation_bytes_per_token(self, seq_len: int) -> float:
        """Inference activation bytes per token (:func:`fedtext.backbone.scoring.activation_bytes_per_token`)."""
        return scoring.activation_bytes_per_token(self.net.encoder.config, seq_len)

    def chunk_tokens(self, seq_len: int, budget_mb: int) -> int:
        """Tokens per encoder call in :meth:`score` under ``budget_mb``
        (:func:`fedtext.backbone.scoring.chunk_tokens`)."""
        return scoring.chunk_tokens(self.net.encoder.config, self.loaded_rss_mb, seq_len, budget_mb)

    def forward(self, prompt: Tensor | None, batch: EncodedBatch, pool_prompt: bool = True) -> Tensor:
        """Logits ``[B, C]`` with autograd, for a prompt ``[T, D]``, per-input prompts
        ``[B, T, D]`` or ``None`` (fine-tuning)."""
        return self.logits(None if prompt is None else prompt[None], batch, pool_prompt)[0]

    def evaluate(self, prompt: PromptSource, batches: Sequence[EncodedBatch]) -> tuple[float, float]:
        """Mean cross-entropy and accuracy over pre-encoded batches (:func:`fedtext.backbone.scoring.evaluate`)."""
        return scoring.evaluate(self, prompt, batches)


def backbone_for(cfg: RunConfig, task: Task) -> Backbone:
    """The process's frozen backbone for a run (its model, weights, resolved head, task, max
    length, device and precision).

    Shared with every other run of the process that uses the same ones, so it carries
    nothing of one run's own: its ``max-client-memory-mb`` goes to :meth:`Backbone.score`
    with each population (``FedTextClient.prompt_losses``).
    """
    return get_backbone(cfg.model, cfg.resolved_head, task, cfg.max_length, cfg.device, cfg.precision, cfg.weights)


def get_backbone(model: str, head: str, task: Task | str, max_length: int, device: str = "cpu",
                 precision: str = "fp32", weights: str = "pretrained") -> Backbone:
    """One frozen backbone per process (a Ray actor hosts many simulated clients), per
    model, head, task (a :class:`Task`, or a built-in task's name), max length, weights,
    device and precision (``device=cuda`` without a GPU, ``fp16`` on a CPU: one-line
    ``ConfigError``).

    Never train it: ask it for a :meth:`Backbone.trainable_copy`.
    """
    from fedtext.common.tasks import TASKS

    return _get_backbone(model, head, TASKS[task] if isinstance(task, str) else task, max_length, weights,
                         Precision.of(device, precision))


@functools.lru_cache(maxsize=2)
def _get_backbone(model: str, head: str, task: Task, max_length: int, weights: str,
                  precision: Precision) -> Backbone:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no weight-loading bars in every client process
    hf_logging.set_verbosity_error()
    return Backbone(model, head, task, max_length, precision=precision, weights=weights)

