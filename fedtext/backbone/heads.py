"""Classification heads: how a backbone's encoder output becomes class logits.

One class per head kind, registered in :data:`HEADS` under the run-config's ``head``
names (:data:`fedtext.common.config.HEADS`). :class:`fedtext.backbone.Backbone` builds the one
its ``head`` names and asks it what differs between heads: which checkpoint class to
load (:meth:`Head.load`, or :meth:`Head.build` with random weights), whether a trainable ``Linear(D, C)`` sits on top
(:attr:`Head.has_linear`), what the input carries around the text (``prefix_ids``,
``suffix_ids``, :meth:`Head.mask_positions`) and the logits (:meth:`Head.logits`).

* ``similarity``: ``scale * cos(mean_pool(H), u_c)`` with ``u_c`` the pooled encoding of
  the label description of class ``c`` (no prompt). The natural zero-shot classifier
  of a sentence encoder such as the offline default all-MiniLM-L6-v2.
* ``tied``: ``H[MASK] . e(verbalizer)^T`` (eq. (2) of FedDLS), input embeddings as
  output layer, so it works for any encoder.
* ``mlm``: the checkpoint's masked-LM head at ``[MASK]``, restricted to the verbalizer
  tokens (RoBERTa/BERT MLM checkpoints only).
* ``linear``: a trainable ``Linear(D, C)`` on ``mean_pool(H)`` (``head.weight``,
  ``head.bias``), for methods that fine-tune (``fedavg``, FedDRS, FeS).
* ``cls``: the checkpoint's sequence-classification head, as
  ``AutoModelForSequenceClassification`` builds it for a BERT encoder: the pretrained
  pooler ``tanh(W_p H[CLS] + b_p)`` (``pooler.dense.*``, trains with the encoder) and a
  fresh ``Linear(D, C)`` (``head.*``) on it. "Vanilla" fine-tuning (FeS's FedCLS; the
  authors' code runs PET's ``sequence_classifier`` wrapper). Dropout is off, as
  everywhere here (the encoder stays in eval mode).

The cloze heads (``tied``, ``mlm``) read the hidden state at ``[MASK]``, so their input
is the task's template around the text; the others read ``[CLS] text [SEP]``.

A head object holds only what it computed once from the tokenizer and the task (template
and verbalizer token ids); the weights it reads (encoder, embeddings, linear layer, label
vectors) are its backbone's, passed to every call, so a backbone and its trainable
copies share one head object while each reads its own weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol

import torch
from torch import Tensor

from fedtext.common.config import ConfigError
from fedtext.common.tasks import Task

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

SIMILARITY_SCALE = 20.0  # logit scale of the similarity head (cosine in [-1, 1] -> +-20)


class HeadHost(Protocol):
    """What a head reads of its backbone (:class:`fedtext.backbone.Backbone` is one).

    Declared here rather than typed as ``Backbone`` because the backbone module imports
    this one, and the project has no import cycles (tests/unit/test_imports.py).
    """

    name: str  # the model name, for error messages
    task: Task
    tokenizer: PreTrainedTokenizerBase
    encoder: PreTrainedModel
    mlm: PreTrainedModel | None  # the masked-LM model around the encoder (head=mlm), else None
    embeddings: torch.nn.Module  # e(.): the input embedding layer, weight [V, D]
    linear: torch.nn.Linear | None  # the trainable Linear(D, C) of a head with has_linear

    @property
    def label_vectors(self) -> Tensor:
        """``u_c``: unit-norm pooled encodings of the label descriptions ``[C, D]``."""
        ...


def mean_pool(hidden: Tensor, att: Tensor) -> Tensor:
    """Mean of the hidden states over attended positions (sentence-transformers pooling)."""
    w = att.unsqueeze(-1).to(hidden.dtype)
    return (hidden * w).sum(1) / w.sum(1).clamp(min=1e-9)


class Head:
    """Base of the heads: a plain input ``[CLS] text [SEP]`` on the checkpoint's encoder.

    Parameters
    ----------
    host
        The backbone this head is built for (checked: it can carry the head).
    tokens
        The backbone's tokeniser of a text into ids, cached and truncated to its
        ``max_length`` (what the text itself goes through), for the template.
    """

    name: ClassVar[str]
    has_linear: ClassVar[bool] = False  # a trainable Linear(D, C) on top, named head.weight/head.bias

    def __init__(self, host: HeadHost, tokens: Callable[[str], list[int]]) -> None:
        self.prefix_ids: list[int] = []  # ids between [CLS] and the text: none without a template
        self.suffix_ids: list[int] = []  # ids between the text and [SEP]

    @staticmethod
    def load(path: str, model: str) -> tuple[PreTrainedModel | None, PreTrainedModel]:
        """``(masked-LM model or None, encoder)`` from the checkpoint at ``path`` (named
        ``model`` in messages): the bare encoder, unless the head needs more of it."""
        from transformers import AutoModel

        return None, AutoModel.from_pretrained(path)

    @staticmethod
    def build(config: PretrainedConfig) -> tuple[PreTrainedModel | None, PreTrainedModel]:
        """What :meth:`load` loads, built from a configuration with fresh random weights
        (``weights=random``; the caller seeds torch's generator)."""
        from transformers import AutoModel

        return None, AutoModel.from_config(config)

    def mask_positions(self, ids: Tensor) -> Tensor | None:
        """The index of ``[MASK]`` per row of token ids ``[B, L]``, or ``None`` for a head
        that reads no ``[MASK]``."""
        return None

    def logits(self, host: HeadHost, hidden: Tensor, att: Tensor, mask_pos: Tensor | None,
               prompt_len: int) -> Tensor:
        """Logits ``[N, C]`` of N = P x B sequences (P prompts each in front of the same B
        texts, prompt-major) from the encoder output ``hidden`` ``[N, T+L, D]``.

        ``att`` ``[N, T+L]``: the positions a pooled head averages; ``mask_pos`` ``[B]``:
        each text's ``[MASK]`` index without the prompt; ``prompt_len``: T, the prompt
        vectors inserted after ``[CLS]``.
        """
        raise NotImplementedError


class PooledHead(Head):
    """A head on the mean-pooled encoding; the only kind that can classify pseudo-embeddings,
    which have no ``[MASK]`` position (:meth:`fedtext.methods.feddrs.model.EmbeddingsNet.embeds_logits`)."""

    def logits(self, host: HeadHost, hidden: Tensor, att: Tensor, mask_pos: Tensor | None,
               prompt_len: int) -> Tensor:
        return self.pooled_logits(host, hidden, att)

    def pooled_logits(self, host: HeadHost, hidden: Tensor, att: Tensor) -> Tensor:
        """Logits ``[N, C]`` from the encoder output ``[N, L, D]``, mean-pooled over ``att``."""
        raise NotImplementedError


class SimilarityHead(PooledHead):
    """``scale * cos(mean_pool(H), u_c)`` against the label vectors (frozen, zero-shot)."""

    name = "similarity"

    def pooled_logits(self, host: HeadHost, hidden: Tensor, att: Tensor) -> Tensor:
        pooled = mean_pool(hidden, att)
        return SIMILARITY_SCALE * torch.nn.functional.normalize(pooled, dim=-1) @ host.label_vectors.T


class LinearHead(PooledHead):
    """A trainable ``Linear(D, C)`` on the mean-pooled encoding."""

    name = "linear"
    has_linear = True

    def pooled_logits(self, host: HeadHost, hidden: Tensor, att: Tensor) -> Tensor:
        return host.linear(mean_pool(hidden, att))


class ClsHead(Head):
    """The checkpoint's pooler on ``[CLS]`` and a trainable ``Linear(D, C)`` on it."""

    name = "cls"
    has_linear = True

    def __init__(self, host: HeadHost, tokens: Callable[[str], list[int]]) -> None:
        super().__init__(host, tokens)
        if getattr(host.encoder, "pooler", None) is None:
            raise ConfigError(f"head=cls needs an encoder with a pooler ([CLS] dense + tanh); '{host.name}' has none")

    def logits(self, host: HeadHost, hidden: Tensor, att: Tensor, mask_pos: Tensor | None,
               prompt_len: int) -> Tensor:
        return host.linear(host.encoder.pooler(hidden))  # [CLS] stays at position 0, ahead of any prompt


class ClozeHead(Head):
    """A head that reads ``[MASK]``: the input is ``[CLS] prefix text suffix [SEP]``, the
    task's template with the text in it, and the classes are its verbalizer words."""

    def __init__(self, host: HeadHost, tokens: Callable[[str], list[int]]) -> None:
        super().__init__(host, tokens)
        tok = host.tokenizer
        if tok.mask_token_id is None:
            raise ConfigError(f"head={self.name} needs a tokenizer with a mask token; '{host.name}' has none")
        self.mask_id: int = tok.mask_token_id
        prefix, suffix = host.task.template.split("{text}")
        self.prefix_ids = tokens(prefix.format(mask=tok.mask_token).strip())
        self.suffix_ids = tokens(suffix.format(mask=tok.mask_token).strip())
        # First sub-token of each verbalizer word (leading space for BPE vocabularies).
        ids = [tok(" " + w, add_special_tokens=False)["input_ids"][0] for w in host.task.verbalizer]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"verbalizer words {host.task.verbalizer} share a first token")
        self.verbalizer_ids = torch.tensor(ids, dtype=torch.long)

    def mask_positions(self, ids: Tensor) -> Tensor:
        return (ids == self.mask_id).float().argmax(dim=1)

    def logits(self, host: HeadHost, hidden: Tensor, att: Tensor, mask_pos: Tensor | None,
               prompt_len: int) -> Tensor:
        n = len(hidden)
        pos = (mask_pos + prompt_len).repeat(n // len(mask_pos))  # [N]: the B positions, once per prompt
        return self.mask_logits(host, hidden[torch.arange(n), pos])

    def mask_logits(self, host: HeadHost, h_mask: Tensor) -> Tensor:
        """Logits ``[N, C]`` from the hidden states at ``[MASK]`` ``[N, D]``."""
        raise NotImplementedError


class TiedHead(ClozeHead):
    """``H[MASK] . e(verbalizer)^T``: the input embeddings as output layer."""

    name = "tied"

    def mask_logits(self, host: HeadHost, h_mask: Tensor) -> Tensor:
        return h_mask @ host.embeddings.weight[self.verbalizer_ids].T


class MlmHead(ClozeHead):
    """The checkpoint's masked-LM head at ``[MASK]``, at the verbalizer tokens only."""

    name = "mlm"

    @staticmethod
    def load(path: str, model: str) -> tuple[PreTrainedModel | None, PreTrainedModel]:
        from transformers import AutoModelForMaskedLM

        mlm, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True)
        if any("lm_head" in k or "cls.predictions" in k for k in info["missing_keys"]):
            raise ConfigError(
                f"head=mlm needs a checkpoint with a masked-LM head; '{model}' has none "
                "(use head=similarity or head=tied)"
            )
        return mlm, mlm.base_model

    @staticmethod
    def build(config: PretrainedConfig) -> tuple[PreTrainedModel | None, PreTrainedModel]:
        from transformers import AutoModelForMaskedLM

        mlm = AutoModelForMaskedLM.from_config(config)
        return mlm, mlm.base_model

    def mask_logits(self, host: HeadHost, h_mask: Tensor) -> Tensor:
        return host.mlm.get_output_embeddings()(self.transform(host.mlm, h_mask))[:, self.verbalizer_ids]

    @staticmethod
    def transform(mlm: PreTrainedModel, h: Tensor) -> Tensor:
        """The MLM head's dense+norm transform before the decoder (BERT / RoBERTa)."""
        head = getattr(mlm, "cls", None)
        if head is not None:  # BERT: cls.predictions.transform
            return head.predictions.transform(h)
        lm = mlm.lm_head  # RoBERTa: dense -> gelu -> layer_norm
        return lm.layer_norm(torch.nn.functional.gelu(lm.dense(h)))


# Head name (run-config ``head``, :data:`fedtext.common.config.HEADS`, same order) -> its class.
HEADS: dict[str, type[Head]] = {
    head.name: head for head in (SimilarityHead, TiedHead, MlmHead, LinearHead, ClsHead)
}
POOLED_HEADS = tuple(name for name, head in HEADS.items() if issubclass(head, PooledHead))
