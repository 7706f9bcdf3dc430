"""FedKSeed: federated full-parameter zeroth-order tuning with K shared seeds.

Qin, Chen, Qian, Ding, Li, Deng, "Federated Full-Parameter Tuning of Billion-Sized Language
Models with Communication Cost under 18 Kilobytes", ICML 2024 (arXiv 2312.06353); the
authors' code: alibaba/FederatedScope, branch ``FedKSeed``. The paper's text is not in
``../shared/papers``, so this module cites it by section and algorithm, not by equation
number.

The method (§3 of the paper, its Algorithm 1), as fedtext runs it:

* **K candidate seeds** ``s_1..s_K`` (``fedkseed.seeds``), derived from the run seed on
  every node alike (:func:`fedtext.methods.fedkseed.model.candidate_seeds`); the seeds are
  never sent.
* **A local step** (MeZO's two-point zeroth-order estimate, the paper's ZOO step): pick
  ``k`` uniformly from the K seeds (FedKSeed; FedKSeed-Pro's probability-differentiated
  sampling is not implemented), draw ``z ~ N(0, I_d)`` from ``s_k`` over every trainable
  weight (d = every encoder weight, and the ``linear`` head when the run uses it), and on
  one mini-batch B::

      g = (L(w + eps z; B) - L(w - eps z; B)) / (2 eps)        (two forwards)
      w <- w - lr * g * z

* **Upload**: the client's scalar gradients summed per seed, ``G[k] = sum of g over its
  steps that drew k`` (K float32). Its whole local update is then
  ``-lr * sum_i g_i z_{k_i} = -lr * sum_k G[k] z_k``.
* **Server**: the example-weighted mean of the clients' G is the round's step in seed
  space; it adds it to the accumulator ``A`` (``A_t = A_{t-1} + sum_c (n_c / n) G_c``), and
  the global model is::

      w_t = w_0 - lr * sum_k A_t[k] z_k

  with ``w_0`` the pretrained weights (and the seeded head). That linear form is why one
  K-vector of scalars stands for a full-parameter model: the mean of the clients' updates
  ``-lr sum_k G_c[k] z_k`` is ``-lr sum_k (mean_c G_c[k]) z_k``.
* **Download**: ``A`` itself (K float32). Every client and the server rebuild ``w_t`` by
  *replaying* A from ``w_0`` (:func:`fedtext.methods.fedkseed.model.replay`): z_k for each
  k with ``A[k] != 0``, in increasing k, each tensor in the backbone's parameter order,
  from ``torch.Generator().manual_seed(s_k)`` on the CPU in float32: the same numbers on
  every node. The paper's clients instead download the (seed, scalar) history they missed
  and step forward from their last model; replaying the accumulator from ``w_0`` is the
  same model (up to float rounding) for a client that has never trained before, which is
  the case for fedtext's stateless simulated clients.

Bytes per client-round, each way: one float32 ``[K]`` array, ``4 K + 128`` B (K = 64: 384 B;
the paper's K = 4096: 16,512 B, its "under 18 KB"). The alternative upload, one
``(seed index, g)`` pair per local step (int32 + float32, two arrays), is ``8 S + 256`` B:
smaller only when ``S < (4 K - 128) / 8`` steps (K = 64: S < 16); at the defaults (K = 64,
S = 32: 512 B against 384 B) the per-seed sums are smaller, and they are also what the
paper's server keeps.

Cost of a replay: one draw of d normals per seed in use (MiniLM-L6: d = 22.7 M, about
0.1 s per seed on one CPU core; MPNet-base: d = 109.5 M, 0.46 s), at most K draws whatever the
number of rounds. That bounds K on a CPU: K = 64 replays in 6 s (MPNet-base: 30 s); the
paper's K = 4096 would take ten minutes per replay here (see docs/papers/fedkseed.md). The
clients a process hosts one after another (a Ray actor's, a SuperNode's) download the same A
within a round and the next round's fits download the A its evaluation did, so a process
keeps its last replay (:data:`fedtext.methods.fedkseed.model.REPLAYED`, one network's
weights) and copies it instead of replaying: one replay where a T1 round made six.
"""
