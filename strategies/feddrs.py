"""FedDRS: FedAvg, then text-free distillation of the task parameters from pseudo-embeddings.

"Text-free federated transformers knowledge distillation without GAN"
(``../shared/papers/002_dcf03d4234fa6404.txt``, §4, eqs. 5-8, Alg. 1); config, model,
samplers and the distillation loss: :mod:`fedtext.methods.feddrs`.

Client must: fine-tune the whole model exactly as ``fedavg`` does and upload every
tensor plus ``label_counts`` [C] (its examples per label).

Server, each round (:meth:`DistillStrategy.aggregate`): the example-weighted mean of
every weight (the student's start; ω^emb stays exactly that mean), then
``feddrs.iterations`` times (I, Alg. 1 lines 12-16): for each of the round's client
models (teacher k) draw ``feddrs.sample-batch`` pseudo sequences per sampler in
``feddrs.sampling`` (random, target eq. 6, adversarial eq. 7 with λ), note the
teacher's softmax on them, and take ``feddrs.distill-steps`` AdamW steps on eq. (8)
over the task parameters ω^f. After the last round: ``feddrs.post-iterations``
iterations (I*) with λ* = ``feddrs.post-lam`` instead (post-processing, Alg. 1 line 8).
Bytes per client-round: the whole model each way (as ``fedavg``), plus the 4·C + 128 B
of ``label_counts`` up. Server distillation seconds and the server's peak resident
memory go into every round's ``method_metrics`` (``server_distill_s``,
``server_peak_rss_mb``), apart from the clients' costs.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fedtext.backbone import Backbone
from fedtext.common.config import RunConfig
from fedtext.methods.feddrs.distill import Teaching, distill_steps
from fedtext.methods.feddrs.model import EmbeddingsNet
from fedtext.methods.feddrs.samplers import (
    adversarial_samples,
    pseudo_labels,
    random_embeddings,
    sequence_ends,
    target_samples,
    word_embedding_name,
    wrap,
)
from fedtext.common.progress import Progress
from fedtext.records.probes import peak_rss_mb
from fedtext.records.writer import RunRecorder
from fedtext.trust.robust import weighted_mean
from fedtext.server.strategy import Evaluator
from fedtext.common.tasks import Task
from fedtext.server.validation import Upload
from strategies.fedavg import FedAvgStrategy


class DistillStrategy(FedAvgStrategy):
    """FedAvg, then a server-side distillation of the averaged model (the student) from
    the round's client models (the teachers); FedDRS and FedDF override :meth:`distill`.

    The server holds two networks besides its frozen backbone: the student (the
    model's own trainable copy) and one teacher, into which each client's weights are
    loaded in turn (K teachers never sit in memory at once).
    """

    def __init__(self, cfg: RunConfig, task: Task, evaluator: Evaluator | None = None,
                 recorder: RunRecorder | None = None) -> None:
        super().__init__(cfg, task, evaluator, recorder)
        self.teacher = type(self.model)(cfg, self.backbone)

    def client_model(self, upload: Upload) -> list[np.ndarray]:
        """A client's model weights (its upload without extras such as ``label_counts``)."""
        return [upload.arrays[s.name] for s in self.model.global_specs()]

    def budget(self, server_round: int) -> tuple[int, bool]:
        """(iterations this round, post-processing?): I per round (0 with ``post-only``),
        I* after the last round."""
        if server_round == self.cfg.num_server_rounds:
            return self.mcfg.post_iterations, True
        return (0 if self.mcfg.post_only else self.mcfg.iterations), False

    def aggregate(self, server_round: int, uploads: list[Upload]) -> tuple[list[np.ndarray], dict[str, float]]:
        models = [self.client_model(u) for u in uploads]
        average = weighted_mean(models, [u.num_examples for u in uploads])
        iterations, post = self.budget(server_round)
        if iterations == 0:
            return average, {}
        t0 = time.time()
        student = self.model.load(average)
        kl_before, kl_after = self.distill(server_round, student, models, uploads, iterations, post)
        t1 = time.time()
        self.record.intervals.append((t0, t1))  # the server was busy: the round's time accounting sees it
        return student.trainable_arrays(), {
            "distill_kl_before": kl_before, "distill_kl_after": kl_after, "distill_iterations": iterations,
            "post_processing": int(post), "server_distill_s": t1 - t0, "server_peak_rss_mb": peak_rss_mb()}

    def distill(self, server_round: int, student: Backbone, models: list[list[np.ndarray]], uploads: list[Upload],
                iterations: int, post: bool) -> tuple[float, float]:
        """Distil the teachers ``models`` into ``student`` in place; returns the
        distillation loss before the first and after the last student step."""
        raise NotImplementedError

    def progress(self, server_round: int, post: bool, total: int, unit: str) -> Progress:
        """The progress line of a round's distillation (:mod:`fedtext.common.progress`)."""
        stage = "post-processing" if post else f"round {server_round}"
        return Progress(f"{self.cfg.method} server distillation, {stage}", total, unit)


class FedDRS(DistillStrategy):
    """FedDRS (Alg. 1): distil ω^f from pseudo-embeddings sampled per teacher.

    Each iteration: for every teacher k, the samplers of ``feddrs.sampling`` each
    draw ``sample-batch`` sequences from random starts (θ^rd as drawn, θ^tr by eq. 6,
    θ^ad by eq. 7 against the current student); the teacher's softmax on all of them
    is fixed; then ``distill-steps`` AdamW steps on eq. (8). Seeded by
    ``[seed, round, iteration]``.
    """

    def distill(self, server_round, student, models, uploads, iterations, post):
        mc = self.mcfg
        lam = mc.post_lam if post else mc.lam
        emb = word_embedding_name(student)
        params = [p for n, p in student.named_trainable() if n != emb]  # ω^f: all but ω^emb
        ends = sequence_ends(student)
        student_net = EmbeddingsNet(student)  # f(θ; ω_S): the student below its word-embedding lookup
        n, classes = mc.sample_batch, self.task.num_classes
        kl = []  # (before, after) of each iteration's distillation
        # one part per teacher sampled and one per iteration's student steps
        with self.progress(server_round, post, iterations * (len(models) + 1), "parts") as bar:  # pragma: no mutate
            for it in range(iterations):
                rng = np.random.default_rng([self.cfg.seed, server_round, it, 0xD125])
                teachings = []
                for arrays, upload in zip(models, uploads, strict=True):
                    teacher = EmbeddingsNet(self.teacher.load(arrays))
                    counts = upload.arrays["label_counts"] if mc.label_prior == "client" else None
                    thetas = []
                    for kind in mc.samplers:
                        theta = random_embeddings(student, n, mc.sample_length, mc.noise, rng)
                        if kind == "target":
                            theta = target_samples(teacher, ends, theta, pseudo_labels(counts, n, classes, rng),
                                                   mc.sample_steps, mc.beta)
                        elif kind == "adversarial":
                            theta = adversarial_samples(teacher, student_net, ends, theta,
                                                        pseudo_labels(counts, n, classes, rng), lam,
                                                        mc.sample_steps, mc.beta)
                        thetas.append(theta)
                    x = wrap(ends, torch.cat(thetas))
                    with torch.no_grad():
                        teachings.append(Teaching(x, torch.softmax(teacher.embeds_logits(x), -1)))
                    bar.advance()  # pragma: no mutate
                kl.append(distill_steps(student, params, teachings,
                                        lambda net, x: EmbeddingsNet(net).embeds_logits(x),
                                        mc.distill_steps, mc.distill_lr, precision=student.precision))
                bar.advance()  # pragma: no mutate
        return kl[0][0], kl[-1][1]
