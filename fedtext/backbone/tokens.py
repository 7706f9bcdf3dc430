"""Tokenising and batching: texts -> padded token ids (:class:`EncodedBatch`).

Every row is ``[CLS] prefix text suffix [SEP] pad...``: the head says what goes around the
text (``prefix_ids``, ``suffix_ids``: a cloze head's template; nothing for the others) and
where its ``[MASK]`` is (:meth:`fedtext.backbone.heads.Head.mask_positions`). A prompt's T vectors
are not tokens: the encoder part inserts them after ``[CLS]`` (:mod:`fedtext.backbone.encoder`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from fedtext.backbone.heads import Head


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


class Tokens:
    """A tokenizer with its cache of each text's ids, truncated to ``max_length`` tokens.

    One per process backbone, shared by its trainable copies (it holds token ids only).
    ``cls_id``/``sep_id`` open and close every row (RoBERTa-style tokenizers name them
    bos/eos), ``pad_id`` fills it.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.cache: dict[str, list[int]] = {}
        self.cls_id, self.sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
        if self.cls_id is None:  # RoBERTa-style tokenizers name them bos/eos
            self.cls_id, self.sep_id = tokenizer.bos_token_id, tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.natural: np.ndarray | None = None  # natural_ids, once asked

    def ids(self, text: str) -> list[int]:
        """The text's token ids without special tokens, truncated to ``max_length`` (cached)."""
        ids = self.cache.get(text)
        if ids is None:
            ids = self.tokenizer(text, add_special_tokens=False, truncation=True, max_length=self.max_length)[
                "input_ids"
            ]
            self.cache[text] = ids
        return ids

    def encode(self, texts: Sequence[str], labels: Sequence[int], head: Head) -> EncodedBatch:
        """Tokenize (cached per text) and pad texts into one batch.

        Layout per row: ``[CLS] prefix text suffix [SEP] pad...`` (``head``'s prefix and
        suffix); the text is truncated to ``max_length`` tokens *before* the template, so
        ``[MASK]`` always survives.
        """
        rows = [[self.cls_id, *head.prefix_ids, *self.ids(t), *head.suffix_ids, self.sep_id] for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            att[i, : len(r)] = 1
        return EncodedBatch(ids, att, torch.as_tensor(np.asarray(labels), dtype=torch.long), head.mask_positions(ids))

    def batches(self, texts: Sequence[str], labels: Sequence[int], head: Head,
                batch_size: int = 64) -> list[EncodedBatch]:
        """Length-sorted batches (dynamic padding): similar lengths share a batch."""
        lengths = np.array([len(self.ids(t)) for t in texts])
        order = np.argsort(lengths, kind="stable")
        texts, labels = [texts[i] for i in order], [labels[i] for i in order]
        return [
            self.encode(texts[i : i + batch_size], labels[i : i + batch_size], head)
            for i in range(0, len(texts), batch_size)
        ]

    def natural_ids(self, vocab_size: int) -> np.ndarray:
        """Ids below ``vocab_size`` (the embedding matrix's rows) of ordinary word tokens: no
        specials, no ``[unused]``, alphabetic (computed once). Only the tokenizer's own ids
        count: a shape's stand-in tokenizer may have fewer than its embedding has rows
        (fedtext/backbone/shapes.py: RoBERTa's 50,265 rows, WordPiece's 30,522 ids)."""
        if self.natural is None:
            special = set(self.tokenizer.all_special_ids)
            vocab = self.tokenizer.convert_ids_to_tokens(list(range(min(vocab_size, len(self.tokenizer)))))
            ok = [
                i
                for i, t in enumerate(vocab)
                if i not in special and t.lstrip("Ġ▁#").isalpha() and not t.startswith("[")
            ]
            self.natural = np.array(ok, dtype=np.int64)
        return self.natural


def draw_tokens(natural: np.ndarray, length: int, seed: int) -> np.ndarray:
    """``length`` distinct natural token ids drawn with ``seed``: the tokens whose embeddings
    are p0 (BBT starts from embeddings of randomly sampled vocabulary tokens; so do we)."""
    rng = np.random.default_rng([seed, 0x9A0])
    return rng.choice(natural, size=length, replace=False)
