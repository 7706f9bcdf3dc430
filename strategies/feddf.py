"""FedDF: FedAvg, then ensemble distillation on unlabelled auxiliary text.

Lin et al. (2020), the data-based baseline of FedDRS (``../shared/papers/002_dcf03d4234fa6404.txt``
§2, §5.1, eq. 2); config: :mod:`fedtext.methods.feddrs` (``FedDFConfig``).

Client must: fine-tune the whole model exactly as ``fedavg`` does (it is
``FedAvgClient``) and upload every tensor.

Server: the example-weighted mean of every weight (the student), then
``feddf.iterations`` x ``feddf.distill-steps`` AdamW steps (I* x steps after the last
round, as FedDRS's budget) on ``KL(σ((1/K) Σ_k f(x; ω_k)) || σ(f(x; ω_S)))`` over the
``feddf.aux-size`` auxiliary texts (drawn once, seeded, from ``feddf.aux-dataset``'s
train split; their labels are never read). Every weight of the student learns,
embeddings included (FedDF distils the whole model). Bytes: the whole model each way.
"""

from __future__ import annotations

import numpy as np
import torch

from fedtext.common.config import RunConfig
from fedtext.learning.data import load_splits
from fedtext.methods.feddrs.distill import Teaching, distill_steps
from fedtext.records.writer import RunRecorder
from fedtext.server.strategy import Evaluator
from fedtext.common.tasks import Task
from strategies.feddrs import DistillStrategy


class FedDF(DistillStrategy):
    """Ensemble distillation (eq. 2) on ``feddf.aux-size`` auxiliary texts."""

    def __init__(self, cfg: RunConfig, task: Task, evaluator: Evaluator | None = None,
                 recorder: RunRecorder | None = None) -> None:
        super().__init__(cfg, task, evaluator, recorder)
        texts = list(load_splits(self.mcfg.aux_dataset).train["text"])
        rng = np.random.default_rng([cfg.seed, 0xA0C5])
        picked = rng.choice(len(texts), size=min(self.mcfg.aux_size, len(texts)), replace=False)
        aux = [texts[i] for i in np.sort(picked)]
        self.aux = self.backbone.batches(aux, [0] * len(aux), self.mcfg.aux_batch)  # labels unused

    def distill(self, server_round, student, models, uploads, iterations, post):
        # one part per teacher's pass over the aux texts, one for the student's steps
        with self.progress(server_round, post, len(models) + 1, "parts") as bar:
            with torch.no_grad():  # the ensemble's logits on each aux batch: (1/K) sum_k f(x; w_k)
                ensemble = [torch.zeros(len(b), self.task.num_classes) for b in self.aux]
                for arrays in models:
                    teacher = self.teacher.load(arrays)
                    for total, batch in zip(ensemble, self.aux, strict=True):
                        total += teacher.forward(None, batch) / len(models)
                    bar.advance()
            teachings = [Teaching(b, torch.softmax(z, -1)) for b, z in zip(self.aux, ensemble, strict=True)]
            params = [p for _, p in student.named_trainable()]
            kl = distill_steps(student, params, teachings, lambda net, b: net.forward(None, b),
                               iterations * self.mcfg.distill_steps, self.mcfg.distill_lr,
                               precision=student.precision)
            bar.advance()
        return kl
