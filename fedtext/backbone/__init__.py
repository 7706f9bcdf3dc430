"""Frozen pretrained encoder + soft-prompt injection, with one classification head.

The input of every method is ``[CLS] p_1..p_T x_1..x_L [SEP]``: T soft-prompt vectors
inserted after ``[CLS]`` through ``inputs_embeds`` (eq. (1) of FedDLS: Temp = [p; e(X);
e(It was [MASK])]). A head turns the encoder output into class logits: ``similarity``,
``tied``, ``mlm``, ``linear`` or ``cls``, each a class of :mod:`fedtext.backbone.heads`
(``Backbone.head`` is its name, ``Backbone.head_impl`` the object).

``Backbone.score(prompts[P,T,D], batch, budget_mb=...) -> logits[P,B,C]`` evaluates P
candidate prompts in one batched forward (CMA-ES populations, search candidates) and
counts model queries (one query = one sequence through the encoder).

Weights. :func:`get_backbone` loads one *frozen* backbone per process (a Ray actor
hosts many simulated clients, so it must never change). A method that trains
weights asks for :meth:`Backbone.trainable_copy`: a backbone whose trainable tensors
are its own deep copies while the frozen ones stay shared with the process backbone.
``weights=random`` builds the model's architecture (or a shipped shape, ``tiny-bert``)
with seeded random weights instead: plumbing and cost runs, never an accuracy result.

The package, by responsibility (:class:`Backbone` is a thin facade over the parts):

* :mod:`~fedtext.backbone.tokens`: tokenising and batching (:class:`EncodedBatch`,
  :func:`length_buckets`, the token cache, special and natural token ids);
* :mod:`~fedtext.backbone.loading` and :mod:`~fedtext.backbone.shapes`: the tokenizer and
  encoder of a model name, pretrained or seeded random weights, shipped architectures;
* :mod:`~fedtext.backbone.checkpoints`: checkpoints installed in parts from the package
  registry (``all-mpnet-base-v2``), assembled once and verified against pinned hashes;
* :mod:`~fedtext.backbone.architectures`: what methods need of an encoder (its layers, key and
  value projections, linear maps by role, adapter sites, position limit), per family;
* :mod:`~fedtext.backbone.encoder`: the encoder network, its trainable sets and copies,
  its forward with the prompt inserted, and the label vectors;
* :mod:`~fedtext.backbone.injections`: where per-prompt values enter the encoder besides
  the prompt's input embeddings (BBT's ``embedding-output``), a registry as
  :data:`fedtext.backbone.heads.HEADS` is for heads;
* :mod:`~fedtext.backbone.scoring`: logits through the head, memory-bounded population
  scoring, evaluation, per-prompt losses;
* :mod:`~fedtext.backbone.facade`: :class:`Backbone` and the process's cached backbones;
* :mod:`~fedtext.backbone.heads`: the classification heads (:data:`HEADS`);
  :mod:`~fedtext.backbone.prompts`: soft prompts and BBT's projection ``p = p0 + A z``,
  rebuilt from the seed on both sides; :mod:`~fedtext.backbone.devices`: where the encoder
  runs and in which dtype (:class:`Precision`; bf16 only where the CPU has it).

Runs wherever a model does: the ServerApp's evaluation and every client. May import
:mod:`fedtext.common` and :mod:`fedtext.records` only.
"""

from fedtext.backbone.encoder import QueryCounter, suspended_hooks, trainable_predicate
from fedtext.backbone.facade import Backbone, backbone_for, get_backbone
from fedtext.backbone.injections import INJECTIONS, Injection
from fedtext.backbone.loading import check_model, resolve_model_path
from fedtext.backbone.scoring import PromptSource, losses
from fedtext.backbone.shapes import SHAPES, Shape
from fedtext.backbone.tokens import EncodedBatch, length_buckets

__all__ = [
    "INJECTIONS", "SHAPES", "Backbone", "EncodedBatch", "Injection", "PromptSource", "QueryCounter", "Shape",
    "backbone_for", "check_model", "get_backbone", "length_buckets", "losses", "resolve_model_path",
    "suspended_hooks", "trainable_predicate",
]
