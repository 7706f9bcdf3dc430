"""FedDRS's server distillation (eq. (8)): KL from the ensemble of client models to the
student.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from fedtext.backbone import Backbone
from fedtext.backbone.devices import Precision, accumulated_step


@dataclass
class Teaching:
    """One teacher's distillation data: its inputs (pseudo sequences ``[N, L+2, D]`` or
    encoded text) and its softmax outputs on them ``[N, C]`` (fixed while the student
    learns)."""

    inputs: object
    probs: Tensor


def kl_to_student(student_logits: Tensor, teacher_probs: Tensor) -> Tensor:
    """KL(p_teacher || σ(student)), mean over samples (eqs. 2, 5 and 8)."""
    return torch.nn.functional.kl_div(torch.log_softmax(student_logits, -1), teacher_probs, reduction="batchmean")


def distill_steps(student: Backbone, params: Sequence[torch.nn.Parameter], teachings: Sequence[Teaching],
                  logits: Callable[[Backbone, object], Tensor], steps: int, lr: float, *,
                  precision: Precision) -> tuple[float, float]:
    """``steps`` AdamW steps (lr η*) on ``Σ_k KL(teacher_k || student)`` over every
    teacher's data (eq. 8; FedDF: one ensemble "teacher" per batch of auxiliary text, eq. 2),
    updating ``params`` only. Returns the loss before the first and after the last step.

    Each step back-propagates one teacher's term at a time and steps once on the accumulated
    gradients (:func:`fedtext.backbone.devices.accumulated_step`): the gradient of the sum is the sum of
    the gradients, so the step is eq. (8)'s, while only one teacher's student graph is held at
    once. One backward over the whole sum held every teacher's activations together: at
    MPNet-base's shape FedDRS's server peaked at 17.4 GB in round 1 (docs/papers/feddrs.md)."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    terms = [functools.partial(_term, student, t, logits) for t in teachings]
    first = None
    scaler = precision.loss_scaler()  # the student's; scales the loss under fp16 only (fedtext.backbone.devices)
    for _ in range(steps):
        value = accumulated_step(terms, opt, scaler)
        first = value if first is None else first
    with torch.no_grad():
        return first, float(sum(term() for term in terms))


def _term(student: Backbone, teaching: Teaching, logits: Callable[[Backbone, object], Tensor]) -> Tensor:
    """One teacher's term of eq. (8): KL(teacher || student) on the teacher's data."""
    return kl_to_student(logits(student, teaching.inputs), teaching.probs)
