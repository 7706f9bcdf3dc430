"""FedDLS client: gradient-free discrete local search over vocabulary tokens (§4.2, Alg. 3)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
from flwr.app import ConfigRecord
from flwr.common import NDArrays, Scalar

from fedtext.common import comm
from fedtext.backbone import Backbone
from fedtext.client.numpy_client import FedTextClient, client_seed
from fedtext.methods.feddls.codecs import codec_for, encode_upload


@dataclass
class SearchResult:
    """Outcome of :func:`local_search`."""

    prompt: np.ndarray  # p_i [T, D]
    token_ids: np.ndarray  # [T] id placed at each position, -1 where unchanged
    losses: list[float]  # loss before step 1, then after every step (non-increasing)


def nearest_tokens(
    vec: np.ndarray, unit_vocab: np.ndarray, ids: np.ndarray, vocab: np.ndarray, k: int
) -> np.ndarray:
    """C(p^t) of eq. (7): the ``k`` ids whose embeddings have the smallest cosine
    distance to ``vec``, nearest first.

    ``unit_vocab`` are the candidate embeddings ``vocab[ids]`` scaled to unit norm. A
    candidate whose embedding *is* ``vec`` (the token already at t) is skipped: keeping
    the current value is always an option of eq. (6) and costs no query.
    """
    sims = unit_vocab @ (vec / max(float(np.linalg.norm(vec)), 1e-12))  # cos = 1 - cosine distance
    # A full sort by similarity, ties by id: exact wherever ties fall (a partial sort of the
    # k + 1 nearest picks among entries tied at its cut arbitrarily) and however many copies
    # of p^t the vocabulary holds (each is skipped and the next candidate taken). |V| log |V|
    # for |V| = 28,034 natural tokens is ~3 ms, beside K forwards of the batch per step.
    keep: list[int] = []
    for i in ids[np.lexsort((ids, -sims))]:
        if len(keep) == k:
            break
        if not np.array_equal(vocab[i], vec):
            keep.append(int(i))
    return np.array(keep, dtype=np.int64)


def local_search(
    prompt: np.ndarray,
    loss_of: Callable[[np.ndarray], np.ndarray],
    candidates_of: Callable[[np.ndarray], np.ndarray],
    vocab: np.ndarray,
    steps: int,
    rng: np.random.Generator,
) -> SearchResult:
    """Algorithm 3: ``steps`` times, pick a position t uniformly and set p^t to the
    candidate of C(p^t) with the lowest loss, or keep it if none is lower (eq. 6).

    ``loss_of`` maps ``[P, T, D]`` prompts to P mean cross-entropies (one batched
    forward); the K candidates of a step go through it together. Because the current
    value competes, the loss never increases.
    """
    p = prompt.astype(np.float32, copy=True)
    token_ids = np.full(len(p), -1, dtype=np.int64)
    loss = float(loss_of(p[None])[0])
    history = [loss]
    for _ in range(steps):
        t = int(rng.integers(len(p)))
        cands = candidates_of(p[t])
        trial = np.repeat(p[None], len(cands), axis=0)
        trial[:, t] = vocab[cands]
        cand_loss = loss_of(trial)
        j = int(np.argmin(cand_loss))
        if cand_loss[j] < loss:
            p[t], token_ids[t], loss = vocab[cands[j]], cands[j], float(cand_loss[j])
        history.append(loss)
    return SearchResult(p, token_ids, history)


@functools.lru_cache(maxsize=2)
def _unit_natural_vocab(backbone: Backbone) -> np.ndarray:
    """Natural-token embeddings scaled to unit norm (the cosine search space), once per process."""
    e = backbone.vocab_embeddings()[backbone.natural_token_ids()]
    return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)


class FedDLSClient(FedTextClient):
    """Discrete local search from the downloaded p' (Alg. 3); uploads ``uint16 [T]`` ids.

    Candidates are natural vocabulary tokens (no special or ``[unused]`` tokens): the
    prompt stays a sequence of words (§4.2, Fig. 3), and every uploaded id is one the
    server can check. The fitness is the mean cross-entropy over the client's shots.
    p' and its version live in ``context.state`` between rounds (Flower builds a new
    client object per message); :class:`fedtext.node.node.Node` journals them
    (:mod:`fedtext.node.state`), so a restarted node or a resumed run gets them back. A
    node that lost its state anyway (no journal) cannot apply a residual to a p' it no
    longer has: it fails the round with a clear error, which the server logs as a
    dropped client and answers with a resync.
    """

    STATE_KEY = "feddls"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.vocab = self.backbone.vocab_embeddings()
        self.codec = codec_for(self.mcfg, self.backbone)

    # ------------------------------------------------------------ p' and state
    def stored(self) -> tuple[int, np.ndarray]:
        """(version, p') this node holds; version 0 is the seeded initial prompt."""
        if self.STATE_KEY in self.state:
            rec = self.state[self.STATE_KEY]
            return int(rec["version"]), np.frombuffer(rec["prompt"], np.float32).reshape(rec["shape"]).copy()
        return 0, self.model.initial_arrays()[0]  # p'_0, exactly as the server makes it

    def store(self, version: int, prompt: np.ndarray) -> None:
        self.state[self.STATE_KEY] = ConfigRecord(
            {"version": version, "prompt": prompt.astype(np.float32).tobytes(), "shape": list(prompt.shape)}
        )

    def synced_prompt(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[int, np.ndarray]:
        """Apply the downloaded updates ``dls_from + 1 .. dls_to`` to the stored p' (eq. 11)."""
        version, p = self.stored()
        start, to = int(config.get("dls_from", 0)), int(config.get("dls_to", 0))
        if int(config.get("dls_absolute", 0)):  # a resync: p' itself (strategies.feddls)
            reason = comm.check_arrays(list(arrays), [comm.ArraySpec("prompt", p.shape, "float32")])
            if reason:
                raise ValueError(f"feddls absolute download: {reason}")
            return to, np.asarray(arrays[0], dtype=np.float32).copy()
        n = self.codec.num_arrays
        updates = [list(arrays[i : i + n]) for i in range(0, len(arrays), n)]
        if len(updates) != to - start:
            raise ValueError(f"feddls download: {len(updates)} updates for versions {start + 1}..{to}")
        if self.codec.incremental and version < start:
            raise RuntimeError(
                f"feddls client {self.partition_id} holds p' version {version} but was sent updates "
                f"from version {start + 1}: its node state was lost"
            )
        specs = self.codec.specs(*p.shape)
        for k, update in enumerate(updates, start=start + 1):
            reason = comm.check_arrays(update, specs)
            if reason:
                raise ValueError(f"feddls download update {k}: {reason}")
            if k > version:
                p = self.codec.decode(update, p)
        return max(version, to), p

    def global_arrays(self, arrays: NDArrays, config: dict[str, Scalar]) -> NDArrays:
        """[p'] rebuilt from the stored p' and the downloaded updates (evaluation does not
        advance the stored state)."""
        return [self.synced_prompt(arrays, config)[1]]

    # ---------------------------------------------------------------- training
    def train(self, arrays: NDArrays, config: dict[str, Scalar]) -> tuple[NDArrays, int, float]:
        mc = self.mcfg
        version, p = self.synced_prompt(arrays, config)
        self.store(version, p)
        unit, ids = _unit_natural_vocab(self.backbone), self.backbone.natural_token_ids()
        result = local_search(
            p,
            self.prompt_losses,
            lambda vec: nearest_tokens(vec, unit, ids, self.vocab, mc.candidates),
            self.vocab,
            mc.steps,
            np.random.default_rng(client_seed(self.cfg, self.partition_id, int(config.get("server_round", 0)))),
        )
        self.fit_metrics = {"dls_version": version}  # the server sends the next round's updates from here
        return [encode_upload(result.token_ids)], len(self.train_batch), result.losses[-1]
