"""Few-shot clients (FeS, Cai et al. MobiCom '23): ``fes``, ``fedfsl``, ``fedfsl-bias``, ``fedcls``.

One client class does all four; what differs is config (:mod:`fedtext.methods.fes`):
the trained weights (co-planning), whether and how it pseudo-labels, and the head.

A fit message carries ``train`` and ``label`` (0/1) and, when labelling, either
``pace`` (``"f-n-k"``: keep ``Pace.target`` pseudo labels, ``|U| k/100 (r-1)/f`` in round
``r``) or ``label_count`` (static). The server asks for labels in rounds ``1 + f``,
``1 + 2f``, ... only (:meth:`fedtext.methods.fes.pacing.Pace.labels_round`), so the
model a client labels with has trained ``r - 1 >= f`` rounds, as the authors'.
A client first pseudo-labels (§2.3: the downloaded global model infers on its filtered
unlabelled texts, the most confident become labels, or, with ``pseudo-pick=class-quota``,
per-class quotas drawn by confidence; earlier ones are re-labelled, not kept), then
trains one local epoch on gold + pseudo labels. A labelling-only client uploads
nothing (an empty result, the server does not aggregate it).

What survives between rounds lives in ``context.state`` (``self.state``), because
Flower builds a new client object for every message: the pseudo labels (text ids
into this client's unlabelled pool and labels) and, computed once, the ids the
representational filter kept. A client that sits rounds out keeps them, and a resumed
run's clients get them back from the node-state journal (:mod:`fedtext.node.state`).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
from flwr.app import ConfigRecord
from flwr.common import NDArrays, Scalar

from fedtext.backbone import EncodedBatch
from fedtext.client.numpy_client import FedTextClient, client_seed, minibatches
from fedtext.backbone.heads import mean_pool
from fedtext.methods.fes.filter import VOTES, keep_count, knn_sets
from fedtext.methods.fes.labels import PSEUDO_PICK_SALT, PSEUDO_PICKS, pseudo_target, split_pool
from fedtext.methods.fes.model import FewShotModel
from fedtext.methods.fes.pacing import parse_paces


class FewShotClient(FedTextClient):
    """Gold labels on clients ``0..L-1``, unlabelled texts everywhere, pseudo labels in state:
    the client of ``fes`` (filtered candidates, curriculum pace from the server, co-planned
    weights), ``fedfsl`` (every unlabelled text a candidate, static pace, whole model),
    ``fedfsl-bias`` (``fedfsl`` with only the biases trained) and ``fedcls`` (gold labels
    only, never sent ``label=1``; head-based, whole model)."""

    model: FewShotModel
    STATE_KEY = "fes"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        pool = pd.concat([self.data.train, self.data.unlabeled], ignore_index=True)
        gold, unlabeled = split_pool(self.mcfg, self.cfg.seed, self.partition_id, len(pool))
        self.gold = pool.iloc[gold].reset_index(drop=True)
        self.unlabeled = pool.iloc[unlabeled].reset_index(drop=True)
        self.train_batch = self.backbone.encode(list(self.gold["text"]), list(self.gold["label"])) \
            if len(self.gold) else self.train_batch.take(np.arange(0))

    # ------------------------------------------------------------------ state
    def stored(self) -> dict[str, list[int]]:
        """This node's pseudo labels (``ids`` into the unlabelled pool, ``labels``) and
        filter choice (``kept``; absent until first computed)."""
        if self.STATE_KEY not in self.state:
            return {"ids": [], "labels": []}
        rec = self.state[self.STATE_KEY]
        return {k: [int(x) for x in rec[k]] for k in rec.keys()}

    def store(self, **values: list[int]) -> None:
        self.state[self.STATE_KEY] = ConfigRecord({**self.stored(), **{k: list(map(int, v)) for k, v in values.items()}})

    # -------------------------------------------------------------- filtering
    def candidates(self) -> tuple[np.ndarray, float]:
        """Ids of the unlabelled texts that may be pseudo-labelled, and the seconds spent
        filtering now (§3.2; once per client: the kept ids are stored). The filter keeps
        ``int(N * keep-ratio)`` of the ``N`` texts (:func:`keep_count`, the authors' count;
        none below one text: the client then labels nothing), chosen by eq. (2) or the
        authors' vote-k (``fes.vote``)."""
        n = len(self.unlabeled)
        if not getattr(self.mcfg, "filter", False) or n == 0:
            return np.arange(n), 0.0
        stored = self.stored()
        if "kept" in stored:
            return np.asarray(stored["kept"], dtype=int), 0.0
        t0 = time.time()
        emb = self.proxy_embeddings(list(self.unlabeled["text"]))
        keep = keep_count(n, self.mcfg.keep_ratio)
        neighbours = knn_sets(emb, self.mcfg.neighbours, centre=self.mcfg.centre_proxy)
        kept = VOTES[self.mcfg.vote](neighbours, keep, self.mcfg.rho)
        self.store(kept=sorted(kept))
        return np.asarray(sorted(kept), dtype=int), time.time() - t0

    def proxy_embeddings(self, texts: list[str], batch: int = 64) -> np.ndarray:
        """Mean-pooled sentence embeddings of the process's frozen backbone (the proxy
        model of §3.2: all-MiniLM-L6-v2 is a Sentence-BERT), ``[N, D]``."""
        out = []
        with torch.no_grad():
            chunks = self.backbone.encode(texts, [0] * len(texts)).chunks(batch)
            for b in self.progress(chunks, "filter embeddings", -(-len(texts) // batch), "batches"):
                bb, att = self.backbone, b.attention_mask.to(self.backbone.device)
                with bb.precision.autocast():
                    h = bb.encoder(input_ids=b.input_ids.to(bb.device), attention_mask=att).last_hidden_state
                out.append(mean_pool(h.float(), att).cpu().numpy())
                self.backbone.counter.n += len(b)
        return np.concatenate(out)

    # ---------------------------------------------------------- pseudo labels
    def pseudo_label(self, net, config: dict[str, Scalar]) -> dict[str, Scalar]:
        """Run the global model on the candidate texts and choose pseudo labels (§2.3):
        ``pseudo-pick`` (:data:`PSEUDO_PICKS`) picks ``target`` of them (less the gold
        labels under ``gold-in-target``), replacing every earlier pseudo label."""
        ids, filter_s = self.candidates()
        server_round = int(config.get("server_round", 0))
        if "pace" in config:
            target = parse_paces(str(config["pace"]))[0].target(len(ids), server_round)
        else:
            target = min(len(ids), int(config.get("label_count", 0)))
        target = pseudo_target(target, len(self.gold), self.mcfg.gold_in_target)
        t0 = time.time()
        probs, batches = self.predict(net, ids)
        infer_s = time.time() - t0
        rng = np.random.default_rng([self.cfg.seed, self.partition_id, server_round, PSEUDO_PICK_SALT])
        rows, labels = PSEUDO_PICKS[self.mcfg.pseudo_pick](probs, target, rng)
        chosen = ids[rows]
        self.store(ids=chosen.tolist(), labels=labels.tolist())
        metrics: dict[str, Scalar] = {
            "pseudo_labels": len(chosen),
            "labelled_candidates": len(ids),
            "infer_batches": batches,
            "infer_s_per_batch": infer_s / batches if batches else 0.0,
            "filter_s": filter_s,
        }
        if len(chosen):  # diagnostic only (a benchmark knows the true labels; nothing trains on them)
            truth = self.unlabeled["label"].to_numpy()[chosen]
            metrics["pseudo_label_accuracy"] = float((truth == labels).mean())  # in [0, 1]; none to score: absent
        return metrics

    def predict(self, net, ids: np.ndarray) -> tuple[np.ndarray, int]:
        """Softmax of the global model on unlabelled texts ``ids`` (``infer-batch`` per forward)."""
        if len(ids) == 0:
            return np.zeros((0, self.task.num_classes)), 0
        texts = list(self.unlabeled["text"].iloc[ids])
        out = []
        with net.fixed_weights():
            chunks = self.backbone.encode(texts, [0] * len(texts)).chunks(self.mcfg.infer_batch)
            total = -(-len(texts) // self.mcfg.infer_batch)  # pragma: no mutate (progress line only)
            for b in self.progress(chunks, "pseudo-labelling", total, "batches"):  # pragma: no mutate
                out.append(torch.softmax(net.forward(None, b), -1).numpy())
        return np.concatenate(out), len(out)

    # --------------------------------------------------------------- training
    def labelled_set(self) -> tuple[list[str], list[int], int]:
        """Gold + pseudo-labelled texts and labels, and how many are pseudo."""
        st = self.stored()
        texts = list(self.gold["text"]) + list(self.unlabeled["text"].iloc[st["ids"]])
        return texts, list(self.gold["label"]) + st["labels"], len(st["ids"])

    def optimizer(self, net) -> torch.optim.Optimizer:
        """AdamW: ``lr`` for fully tuned weights, ``bias-lr`` for bias-only layers,
        the config's ``head_rate`` for a fresh head (fedcls)."""
        groups: dict[float, list] = {}
        for name, p in net.named_trainable():
            lr = (self.mcfg.head_rate if name.startswith("head.")
                  else self.mcfg.bias_lr if self.model.is_bias_only(name) else self.mcfg.lr)
            groups.setdefault(lr, []).append(p)
        return torch.optim.AdamW([{"params": ps, "lr": lr} for lr, ps in groups.items()])

    def local_epochs(self, net, batch: EncodedBatch, seed: int) -> tuple[float, int, float]:
        """``local-epochs`` passes over ``batch`` in shuffled mini-batches (capped at
        ``max-local-steps``); (mean loss, steps, seconds)."""
        size = self.mcfg.batch_size
        n = self.mcfg.local_epochs * -(-len(batch) // size)  # ceil(len / size) steps per epoch
        if self.mcfg.max_local_steps:
            n = min(n, self.mcfg.max_local_steps)
        steps = [b.trimmed() for b in minibatches(batch, size, n, np.random.default_rng(seed))]
        torch.manual_seed(seed)  # dropout masks
        t0 = time.time()
        net.encoder.train()
        try:
            loss = self.gradient_steps(steps, lambda b: net.forward(None, b), self.optimizer(net))
        finally:
            net.encoder.eval()
        return loss, len(steps), time.time() - t0

    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        net = self.model.load(arrays)
        metrics: dict[str, Scalar] = {"trained": 0, "labelled": int(config.get("label", 0))}
        if metrics["labelled"]:
            metrics.update(self.pseudo_label(net, config))
        texts, labels, n_pseudo = self.labelled_set()
        metrics.update(num_gold=len(self.gold), num_pseudo=n_pseudo, num_labels=len(texts))
        if not int(config.get("train", 1)) or not texts:
            self.fit_metrics = metrics
            return [], 0, 0.0
        seed = client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0)))
        loss, steps, seconds = self.local_epochs(net, self.backbone.encode(texts, labels), seed)
        metrics.update(trained=1, train_batches=steps, train_s_per_batch=seconds / max(steps, 1))
        self.fit_metrics = metrics
        return net.trainable_arrays(), len(texts), loss
