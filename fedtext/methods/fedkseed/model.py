"""FedKSeed's model and math: the seeds, a zeroth-order step, the per-seed sums, the replay.

Every function here works on a list of weight tensors in one fixed order (the backbone's
:meth:`fedtext.backbone.Backbone.named_trainable`, the wire order of ``fedavg``), so that the
server and every client draw the same z_k for the same weight. See
:mod:`fedtext.methods.fedkseed` for the derivation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedtext.backbone import Backbone
from fedtext.common.comm import ArraySpec
from fedtext.learning.model import NetworkModel

if TYPE_CHECKING:
    from fedtext.common.config import RunConfig

SEED_SALT = 0xF5EED  # keeps the candidate seeds apart from every other draw of the run seed
ACCUMULATOR = "A"  # the global array: the scalar gradients accumulated per seed, [K]
UPLOAD = "G"  # a client's upload: its scalar gradients summed per seed, [K]


def candidate_seeds(run_seed: int, k: int) -> list[int]:
    """The K candidate seeds ``s_1..s_K`` of a run (§3 of Qin et al. 2024: a finite seed pool
    shared by server and clients), 63-bit, from the run seed alone: every node computes the
    same list and none is ever sent."""
    state = np.random.SeedSequence([run_seed, SEED_SALT]).generate_state(k, dtype=np.uint64)
    return [int(s) >> 1 for s in state]  # torch.Generator.manual_seed takes < 2**63 without wrapping


def directions(params: Sequence[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """z ~ N(0, I_d) drawn from ``seed``, as one tensor per weight in ``params`` order.

    Drawn on the CPU in float32 by a generator of its own (never the global one), then moved
    to each weight's device and dtype: the same numbers on every node and device.
    """
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.device, p.dtype) for p in params]


def add_direction(params: Sequence[torch.Tensor], z: Sequence[torch.Tensor], scale: float) -> None:
    """``w <- w + scale * z``, in place, weight by weight."""
    with torch.no_grad():
        for p, zi in zip(params, z, strict=True):
            p.add_(zi, alpha=scale)


def projected_gradient(loss_plus: float, loss_minus: float, eps: float) -> float:
    """The scalar gradient along z: ``g = (L(w + eps z) - L(w - eps z)) / (2 eps)``, the
    two-point zeroth-order estimate (MeZO's, the paper's ZOO step, §2-3)."""
    return (loss_plus - loss_minus) / (2.0 * eps)


def zo_step(params: Sequence[torch.Tensor], seed: int, eps: float, lr: float,
            loss: Callable[[], float]) -> tuple[float, float]:
    """One local step of FedKSeed on ``params`` (in place): ``w <- w - lr * g * z``.

    z is drawn once from ``seed`` and kept for the step (4 d bytes: 91 MB for MiniLM-L6, in
    exchange for one draw instead of three); ``loss()`` evaluates the mini-batch's loss at
    the current weights. The weights go ``w + eps z`` (L+), ``w - eps z`` (L-), then
    ``w - lr g z``: the last move is ``(eps - lr g) z`` from ``w - eps z``.

    Returns
    -------
    tuple[float, float]
        g, and the mean of the two losses (the step's loss at w, to first order).
    """
    z = directions(params, seed)
    add_direction(params, z, eps)
    plus = loss()
    add_direction(params, z, -2.0 * eps)
    minus = loss()
    g = projected_gradient(plus, minus, eps)
    add_direction(params, z, eps - lr * g)
    return g, 0.5 * (plus + minus)


def seed_sums(indices: Sequence[int], grads: Sequence[float], k: int) -> np.ndarray:
    """A client's upload: ``G[j] = sum of g_i over the steps i that drew seed j``, float32
    ``[K]`` (its local update is ``-lr sum_j G[j] z_j``). Summed in float64."""
    out = np.zeros(k, dtype=np.float64)
    np.add.at(out, np.asarray(indices, dtype=np.int64), np.asarray(grads, dtype=np.float64))
    return out.astype(np.float32)


def accumulate(a: np.ndarray, uploads: Sequence[np.ndarray], weights: Sequence[int]) -> np.ndarray:
    """The server's step (Algorithm 1's aggregation in seed space):
    ``A_t = A_{t-1} + sum_c (n_c / n) G_c``, float32 ``[K]``.

    The example-weighted mean of the clients' per-seed sums is the mean of their updates,
    ``-lr sum_k G_c[k] z_k``, because every update is linear in G.
    """
    total = float(sum(weights))
    mean = sum((w / total) * np.asarray(g, dtype=np.float64) for g, w in zip(uploads, weights, strict=True))
    return (np.asarray(a, dtype=np.float64) + mean).astype(np.float32)


def upload_scale(g: np.ndarray) -> float | None:
    """An upload's scale: the median of ``|G[k]|`` over the seeds it drew (its non-zero entries;
    a seed no step drew is exactly 0), ``None`` when it drew none. Most entries are one step's
    ``|g|``, so this is a typical honest step's size, whatever K and the local steps."""
    drawn = np.abs(np.asarray(g, dtype=np.float64))
    drawn = drawn[drawn != 0]
    return float(np.median(drawn)) if drawn.size else None


def round_outliers(uploads: Sequence[np.ndarray], factor: float) -> list[str | None]:
    """Why each of a round's uploads is out of scale with the round, or ``None``: its largest
    ``|G[k]|`` may be at most ``factor`` times the round's scale, the **lower median over the
    uploads** of each one's :func:`upload_scale`.

    Why this statistic (issue 58): the static bound ``local-steps x grad-bound`` (32,000 per seed
    at the defaults) let ``G = 30,000`` on one seed through while honest clients sent 10.9-35.7,
    and a step's possible size has no usable bound (``|L+ - L-| / (2 eps)``: the loss is a
    cross-entropy, up to 40 + ln C on the similarity head, so 4 x 10^4 per step at eps = 5e-4).
    A median of ``|G|`` pooled over every upload's entries would not hold against a client that
    puts a value on **every** seed: honest uploads draw about 25 of K = 64 seeds (32 steps), so
    one such client out of 3 holds 64 of the ~114 non-zero entries, a majority. One scale per
    upload, then the *lower* median over uploads, holds while at most half of the uploads are
    scaled up (1 of 2 included: the smaller scale is the reference, where the mean of two would
    let the outsized one through). Its cost: clients sending tiny values can lower the
    reference and so get honest uploads dropped, a round lost but no model corrupted, and only
    when they are half the round (1 of 2, 2 of 4) or more. With fewer than 2
    uploads that drew a seed there is no round to compare with: none is dropped here (the static
    bound, :meth:`FedKSeedModel.check_upload`, still holds).

    ``factor`` (``fedkseed.round-factor``, default 100; 0: no check): honest uploads measured at
    the defaults (MiniLM-L6, the demo task, 4 clients, rounds 1-2) had per-upload scales 4.1-8.8
    and a largest ``|G[k]|`` at most 7.5x the round's scale (steps drawn as g ~ N(0, sigma^2), sigma
    4-12 across 3 clients: 25x at most in 20,000 rounds), so 100 leaves 4x to spare over that
    tail, and an upload 1,000x the honest range (~3 x 10^4) is 60x past it. An upload just under it moves the
    round's mean by at most ``factor x scale / n`` per seed.
    """
    scales = sorted(s for s in (upload_scale(g) for g in uploads) if s is not None)
    if factor == 0 or len(scales) < 2:
        return [None] * len(uploads)
    reference = scales[(len(scales) - 1) // 2]  # the lower median
    limit = factor * reference
    reasons: list[str | None] = []
    for g in uploads:
        largest = float(np.abs(g).max())  # g has the upload spec's K >= 1 entries (validated before)
        reasons.append(None if largest <= limit else (
            f"{UPLOAD}: |scalar gradient sum| {largest:.3g} exceeds fedkseed.round-factor x the round's median "
            f"upload scale = {factor:g} x {reference:.3g} = {limit:.3g}"))
    return reasons


def replay(params: Sequence[torch.Tensor], w0: Sequence[torch.Tensor], a: np.ndarray, seeds: Sequence[int],
           lr: float) -> int:
    """Rebuild ``w = w_0 - lr * sum_k A[k] z_k`` in ``params`` (in place); returns how many
    seeds were drawn.

    Deterministic and the same on every node: ``w_0`` copied, then for each k with
    ``A[k] != 0`` in increasing k, z_k drawn by :func:`directions` (per weight, in the
    parameters' order) and added with ``-lr A[k]``. One tensor's z at a time would do as well
    for the memory; the draw is per seed, so one seed's z is held at once (4 d bytes).
    """
    with torch.no_grad():
        for p, w in zip(params, w0, strict=True):
            p.copy_(w)
    used = [j for j in range(len(a)) if a[j] != 0]
    for j in used:
        add_direction(params, directions(params, seeds[j]), -lr * float(a[j]))
    return len(used)


# The last network this process replayed, by :meth:`FedKSeedModel.replay_key`: the clients a Ray
# actor or a SuperNode hosts one after another download the same A in a round (each fit, each
# evaluation, then the next round's fits: six replays a T1 round), and a replay draws d normals per
# seed in use (MPNet-base, K = 64: 30 s on one core of this CPU, against 0.1 s to copy the result).
# The copies are the replay's own tensors, so every client holds bit for bit what it would have
# replayed (tests/unit/test_fedkseed.py). One entry, cleared before the next is stored.
REPLAYED: dict[tuple, list[torch.Tensor]] = {}


class FedKSeedModel(NetworkModel):
    """Global arrays: the accumulator ``A`` ``[K]``; the network they stand for is
    ``w_0 - lr sum_k A[k] z_k`` over every trainable weight (``trainable() == "all"``: the
    encoder, and the ``linear`` head when the run has one)."""

    def update(self, sent: Sequence[np.ndarray], upload: Sequence[np.ndarray]) -> list[np.ndarray]:
        """FedKSeed's upload is already the client's contribution: its per-seed gradient sums G,
        which the server adds to A (Algorithm 1); differential privacy bounds and noises G itself."""
        return [np.asarray(u, dtype=np.float64) for u in upload]

    def apply_update(self, sent: Sequence[np.ndarray], update: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The upload carrying ``update``: G itself, float32 (inverse of :meth:`update`)."""
        return [np.asarray(d, dtype=np.float32) for d in update]

    def __init__(self, cfg: "RunConfig", backbone: Backbone) -> None:
        super().__init__(cfg, backbone)
        self.k = self.mcfg.seeds
        self.seeds = candidate_seeds(cfg.seed, self.k)
        self._loaded: np.ndarray | None = None  # the A the network holds now (None: unknown)

    def global_specs(self) -> list[ArraySpec]:
        return [ArraySpec(ACCUMULATOR, (self.k,), "float32")]

    def upload_specs(self) -> list[ArraySpec]:
        return [ArraySpec(UPLOAD, (self.k,), "float32")]

    def initial_arrays(self) -> list[np.ndarray]:
        """A_0 = 0: the pretrained model (and the seeded head)."""
        return [np.zeros(self.k, dtype=np.float32)]

    def check_upload(self, upload: dict[str, np.ndarray]) -> str | None:
        """|G[k]| <= local-steps x grad-bound: each of a client's S steps adds one g with
        |g| <= grad-bound to one entry (finite and [K] are its spec's)."""
        g = upload[UPLOAD]
        limit = self.mcfg.local_steps * self.mcfg.grad_bound
        largest = float(np.abs(g).max()) if g.size else 0.0
        if largest > limit:
            return (f"{UPLOAD}: |scalar gradient sum| {largest:.3g} exceeds fedkseed.local-steps x "
                    f"fedkseed.grad-bound = {limit:.3g}")
        return None

    def initial_weights(self) -> list[torch.Tensor]:
        """w_0 in :meth:`fedtext.backbone.Backbone.named_trainable` order: the process's frozen
        pretrained weights (shared, never written) and the seeded ``linear`` head
        (:meth:`fedtext.learning.model.NetworkModel.head_init`)."""
        frozen = dict(self.backbone.named_parameters())
        heads = self.head_init()
        return [torch.as_tensor(heads[n]) if n in heads else frozen[n].detach()
                for n, _ in self.network.named_trainable()]

    def load(self, arrays: Sequence[np.ndarray]) -> Backbone:
        """The trainable copy holding ``w_0 - lr sum_k A[k] z_k`` (:func:`replay`; skipped when
        it holds this A already, copied from :data:`REPLAYED` when this process replayed the same
        A for another client)."""
        a = np.asarray(arrays[0], dtype=np.float32)
        if self._loaded is None or not np.array_equal(a, self._loaded):
            named = self.network.named_trainable()
            params = [p for _, p in named]
            key = self.replay_key(a, named)
            cached = REPLAYED.get(key)
            if cached is None:
                replay(params, self.initial_weights(), a, self.seeds, self.mcfg.lr)
                REPLAYED.clear()  # one entry: the round's A (4 d bytes; MPNet-base: 438 MB)
                REPLAYED[key] = [p.detach().clone() for p in params]
            else:
                with torch.no_grad():
                    for p, w in zip(params, cached, strict=True):
                        p.copy_(w)
            self.network.weights_changed()  # the label vectors are encoded again
            self._loaded = a.copy()
        return self.network

    def replay_key(self, a: np.ndarray, named: Sequence[tuple[str, torch.nn.Parameter]]) -> tuple:
        """What a replayed network depends on: the backbone's weights (its name, weights and
        precision), the trainable tensors' names and shapes, the run seed (the candidate seeds and
        the seeded head), ``lr`` and A itself."""
        b = self.backbone
        return (b.name, b.weights, b.precision, self.cfg.seed, self.mcfg.seeds, self.mcfg.lr, a.tobytes(),
                tuple((n, tuple(p.shape)) for n, p in named))

    def forget(self) -> None:
        """The network's weights were changed in place (local training): the next :meth:`load`
        replays."""
        self._loaded = None
