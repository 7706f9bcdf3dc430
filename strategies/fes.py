"""FeS (Cai et al., "Federated Few-Shot Learning for Mobile NLP", MobiCom '23) and its
baselines FedCLS, FedFSL, FedFSL-BIAS (Table 3); config, model and the designs'
math: :mod:`fedtext.methods.fes`.

One strategy, :class:`FewShotStrategy`, serves all four methods (``fes``, ``fedfsl``,
``fedfsl-bias``, ``fedcls``): what differs is their config (pacing, filtering, head,
trained layers), whose ``strategy`` string names this class.

Server (Alg. 1, ``Pacing``): every round it draws two client groups separately,

* ``G_train``: ``clients-per-round`` clients among those holding gold or pseudo labels
  (clients ``0..L-1`` from the start; a client joins once it reports labels);
* ``G_label`` (labelling rounds of the pace: rounds ``1 + f``, ``1 + 2f``, ..., never
  round 1, as the authors' ``gen > 0 and gen % f == 0``; static pacing: every round from
  round 2 on): ``n`` participants;

sends each the global model with ``train``/``label`` flags, and aggregates the trained
uploads with FedAvg weighted by labelled examples (gold + pseudo, as the authors'
code). Labelling-only clients answer with an empty result, which is not an upload.

Pacing: ``fes`` asks its :class:`fedtext.methods.fes.pacing.Pacer` (AUG-E search and
switching, eq. (1); round 1, a gold-label round, is in no trial window); ``fedfsl``/``fedfsl-bias``
(and ``fes.pacing=static``) label on ``static-clients`` clients every round from round 2
on, each keeping ``static-labels``; ``fedcls`` never labels. A client labels with the
global model it is sent, the one after ``r - 1`` rounds (the authors' ``g{gen-1}``
aggregate). The pace of each round, every AUG-E a trial or window measured, and the
search/switch events go to the round's ``method_metrics`` (a static pace is recorded as
``pace_f=1, pace_n=static-clients, pace_k=1``: its count is ``static-labels``, not a k %).

Client must: split its pool with :func:`fedtext.methods.fes.labels.split_pool`, pseudo-label
when told (keeping ``Pace.target`` or ``label_count`` of its (filtered) unlabelled
texts), keep its pseudo labels in ``context.state``, train one local epoch on gold +
pseudo labels and upload the co-planned weights (:class:`FewShotModel`), reporting
its measured seconds per inference and training batch (``infer_s_per_batch``,
``train_s_per_batch``) and ``num_labels``.

Bytes per client-round, each way: the trained tensors only, ``4 * #weights + 128 *
#tensors`` (all-MiniLM-L6-v2: fes default plan, the biases of layers 4-5, 8,448 weights
in 16 tensors = 35,840 B; fedfsl the whole encoder, 90,866,048 B; fedfsl-bias 25,728 biases in 49
tensors, 109,184 B); bytes up per client-round count the clients that trained.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
from flwr.common import FitRes, Scalar
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedtext.server import sampling
from fedtext.common.config import ConfigError
from fedtext.methods.fes.labels import LABEL_SALT, gold_count
from fedtext.methods.fes.pacing import Pace, Pacer, parse_paces
from fedtext.server.sampling import TRAIN_SALT
from fedtext.server.strategy import FedTextStrategy
from fedtext.server.validation import Upload

log = logging.getLogger("fedtext")


class FewShotStrategy(FedTextStrategy):
    """Two client groups per round (train / label), FedAvg of the trained uploads: the
    server of ``fes`` (curriculum pacing by AUG-E §3.1, filtered pseudo labelling §3.2,
    co-planned depth/capacity §3.3) and of its Table 3 baselines ``fedfsl`` (pseudo labels
    at a static pace, full model), ``fedfsl-bias`` (``fedfsl`` tuning biases only) and
    ``fedcls`` (head-based fine-tuning on the gold labels only)."""

    checkpoint_attrs: ClassVar[tuple[str, ...]] = ("labelled", "pacer")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        mc = self.mcfg
        self.labelled: set[str] = set()  # partition ids known to hold labels
        self.pacer: Pacer | None = None
        if mc.pacing_mode == "curriculum":
            if self.cfg.eval_every != 1:
                raise ConfigError(f"{mc.key('pacing')}=curriculum needs eval-every=1 (AUG-E reads the server's "
                                  f"accuracy after every round), got eval-every={self.cfg.eval_every}")
            self.pacer = Pacer(parse_paces(mc.paces), mc.trial_rounds, mc.candidates, mc.threshold, mc.eta, mc.theta)
        self.roles: dict[str, tuple[int, int]] = {}  # cid -> (train, label) this round

    # ------------------------------------------------------------ pacing
    def round_pace(self) -> Pace | None:
        """This round's pace: the pacer's, static ``<1, static-clients, ->``, or none."""
        mode = self.mcfg.pacing_mode
        if mode == "curriculum":
            return self.pacer.pace()
        if mode == "static":
            return Pace(1, self.mcfg.static_clients, 1.0)
        return None

    def initially_labelled(self, pid: str) -> bool:
        """Gold holders (clients ``0..L-1``; every client under ``oracle``)."""
        return self.mcfg.oracle or (pid.isdigit() and gold_count(self.mcfg, int(pid)) > 0)

    def check_sizes(self, sizes: list[int]) -> None:
        """``gold-labels`` must fit: client k < L holds gold_count(k) of its pool (its
        partition less the local test split, :func:`fedtext.learning.data.client_data`); a larger
        count was capped silently, so the run had fewer gold labels than it said
        (``oracle`` labels every pool text whatever the count)."""
        if self.mcfg.oracle:
            return
        for pid, rows in enumerate(sizes):
            pool = rows - min(self.cfg.client_test_size, rows // 5)
            if gold_count(self.mcfg, pid) > pool:
                raise ConfigError(
                    f"{self.mcfg.key('gold_labels')}={self.mcfg.gold_labels} puts {gold_count(self.mcfg, pid)} gold "
                    f"labels on client {pid}, which has {pool} texts to label (lower it, or raise "
                    f"{self.mcfg.key('labelled_clients')})")

    # ------------------------------------------------------------ sampling
    def sample_clients(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        """``G_train`` among labelled participants, ``G_label`` among all participants
        (labelling rounds only), drawn separately
        (:meth:`fedtext.server.sampling.ClientSampler.draw`, two salts)."""
        client_manager.wait_for(max(1, self.cfg.clients_per_round), timeout=sampling.CONNECT_TIMEOUT_S)
        participants = self.sampler.clients(client_manager, participants_only=True)
        pid = {p.cid: self.sampler.info(p)["partition_id"] for p in participants}
        with_labels = [p for p in participants if pid[p.cid] in self.labelled or self.initially_labelled(pid[p.cid])]
        n_train = min(self.cfg.clients_per_round or len(with_labels), len(with_labels))
        train = self.sampler.draw(with_labels, n_train, server_round, TRAIN_SALT)
        pace = self.round_pace()
        label: list[ClientProxy] = []
        if pace is not None and pace.labels_round(server_round):
            label = self.sampler.draw(participants, min(pace.n, len(participants)), server_round, LABEL_SALT)
        self.roles = {p.cid: (int(p in train), int(p in label)) for p in {*train, *label}}
        self.record.method_metrics.update(self.pace_metrics(pace, len(train), len(label)))
        return sorted({*train, *label}, key=lambda p: self.sampler.info(p)["order"])

    def pace_metrics(self, pace: Pace | None, n_train: int, n_label: int) -> dict[str, float]:
        out = {"train_clients": float(n_train), "label_clients": float(n_label)}
        if pace is not None:
            out.update(pace_f=float(pace.f), pace_n=float(pace.n), pace_k=float(pace.k))
        return out

    def download(self, server_round: int, proxy: ClientProxy, purpose: str):
        if purpose != "fit":
            return self.global_arrays, {}
        train, label = self.roles.get(proxy.cid, (1, 0))
        extra: dict[str, Scalar] = {"train": train, "label": label}
        if label:
            if self.mcfg.pacing_mode == "curriculum":
                extra["pace"] = str(self.pacer.pace())
            else:
                extra["label_count"] = self.mcfg.static_labels
        return self.global_arrays, extra

    # ------------------------------------------------------------ results
    def validate(self, results: list[tuple[ClientProxy, FitRes]], failures: list[Any]) -> list[Upload]:
        """Note who holds labels and the measured latencies; labelling-only results
        (``trained=0``, no arrays) are reports, not uploads. Every metric read here has
        passed its declaration (:data:`fedtext.methods.fes.config.TRAIN_METRICS`), and a
        client is known by its node's partition, not by what its reply says."""
        trained = []
        pseudo_acc = []
        for proxy, res in results:
            m = res.metrics
            pid = self.sampler.info_if_known(proxy.cid)
            if int(m.get("num_labels", 0)) > 0:
                self.labelled.add(pid)
            if self.pacer is not None:
                self.pacer.latency(m.get("infer_s_per_batch"), m.get("train_s_per_batch"))
            if "pseudo_label_accuracy" in m:  # a client that chose no label has none to score
                pseudo_acc.append(float(m["pseudo_label_accuracy"]))
            if self.is_upload(res):
                trained.append((proxy, res))
        r = self.record
        r.method_metrics["labelled_clients"] = float(len(self.labelled))  # that reported labels so far
        r.method_metrics["pseudo_labels"] = float(sum(int(res.metrics.get("num_pseudo", 0)) for _, res in results))
        if pseudo_acc:
            r.method_metrics["pseudo_label_accuracy"] = float(np.mean(pseudo_acc))
        return super().validate(trained, failures)

    def is_upload(self, res: FitRes) -> bool:
        """A labelling-only client (``trained=0``) uploads nothing: bytes up per
        client-round count the clients that trained."""
        return bool(int(res.metrics.get("trained", 1)))

    def aggregate(self, server_round: int, uploads: list[Upload]):
        arrays, metrics = super().aggregate(server_round, uploads)
        return arrays, {**self.record.method_metrics, **metrics}

    def evaluate(self, server_round: int, parameters):
        """Server evaluation, then the pacer's window bookkeeping (Alg. 1 lines 6-8, 15-16)."""
        out = super().evaluate(server_round, parameters)
        if self.pacer is not None and out is not None:
            acc = float(out[1]["accuracy"])
            if server_round == 0:
                self.pacer.start(acc)  # a resumed pacer keeps its window
            else:
                events = self.pacer.observe(acc, server_round)
                self.record.method_metrics.update(events)
                if events:
                    log.info("fes round %d: %s (pace now %s, candidates %s)", server_round, events,
                             self.pacer.pace(), [str(p) for p in self.pacer.candidates])
        return out
