"""FeS and its baselines (Cai et al., MobiCom '23, ``../shared/papers/001_*``): configs,
the model, and the three designs as pure functions both sides use.

Setting (§2.3, §4.1): ``gold-labels`` labelled texts in all (64) held by the first
``labelled-clients`` clients (partition ids ``0..L-1``, the skewed placement of
Table 1); every client holds ``unlabeled-size`` unlabelled texts of its partition. The
placement is a function of the run config, so server and clients agree on it without
a message (:func:`split_pool`).

Methods (Table 3):

* ``fedcls``: head-based (the checkpoint's ``cls`` head: pooler on ``[CLS]`` + a fresh
  linear layer, one learning rate; ``head=linear`` + ``head-lr``: mean-pooled, faster
  head), gold labels only, full fine-tuning.
  With ``fedcls.oracle=true`` every pool text is labelled: the "Full-set (oracle)"
  reference of Table 1, on the same clients and texts.
* ``fedfsl``: prompt-based + pseudo labels, static pacing (each labelling client keeps
  its ``static-labels`` most confident pseudo labels, every round, ``static-clients``
  labelling clients), the whole model trains and travels.
* ``fedfsl-bias``: ``fedfsl`` tuning only the biases (BitFit).
* ``fes``: curriculum pacing chosen by AUG-E (§3.1, eq. (1), Alg. 1), representational
  filtering (§3.2, eq. (2)), depth/capacity co-planning (§3.3). Ablations:
  ``fes.pacing=static``, ``fes.filter=false``, ``fes.frozen-layers=0 fes.bias-layers=0``.

Prompt-based = a frozen PLM's own classifier over a task description: the offline
backbone (all-MiniLM-L6-v2) has no MLM head, so "prompt" here is the project's
``similarity`` head (cosine of the pooled encoding with encoded label descriptions,
``fedtext.common.tasks``), or the cloze template + verbalizer of the ``tied`` head; with an
MLM checkpoint ``head=mlm`` is PET's pattern/verbalizer pair exactly (§2.2).

Where the paper is silent, or the authors' code (UbiquitousLearning/FeS) differs:

* Confidence and choice (§2.3 "the data with the top k highest confidence (logits) are
  added"): by default (``pseudo-pick=top-k``) the ``k`` texts with the largest softmax
  maximum, each labelled with its argmax (:func:`pick_top_k`). The authors' code
  (``pet/ipet.py``, ``generate_ipet_train_set``) does not rank: it splits the count into
  per-class quotas and, within each predicted class, *draws* texts without replacement
  with probability proportional to their softmax maximum; ``pseudo-pick=class-quota`` is
  that rule (:func:`pick_class_quota`; quotas ``int(n_c * (target / N))`` in floats, as
  theirs, and their draws given their ``RandomState``). Their quotas follow the class counts of the
  labels the client's unlabelled examples carry (``train_data=unlabeled_data`` in
  ``pet/modeling.py``): the *true* labels the first time (which a client cannot know),
  the previous labelling's predictions afterwards (written into the same objects); ours
  follow the current predictions.
* Gold labels and the count (§2.3 is silent): by default a client's gold labels come on
  top of its pseudo-label count; the authors' ``pet/modeling.py`` counts them toward it
  (``num_new_examples = augmented_point - len(train_data)``): ``gold-in-target=true``
  (:func:`pseudo_target`).
* Schedule and curriculum (§3.1 "k ... linear increase"; the authors' ``train_fedpet``):
  ``n`` clients label in rounds ``r = 1 + f, 1 + 2f, ...`` (their ``gen > 0 and gen % f ==
  0`` with ``gen = r - 1``), never in round 1, which trains on the gold labels only, each
  with the global model it is sent, the one after ``r - 1`` rounds (their ``g{gen-1}``
  aggregate); a client labelled in round ``r`` keeps ``floor(|U| * k/100 * (r-1)/f)``
  pseudo labels (its most confident ones under ``top-k``), re-labelling all earlier ones
  (§2.3): their ``augmented_point``. Until 2026-11-25 fedtext labelled in rounds ``f, 2f,
  ...`` keeping ``|U| k/100 r/f`` (with ``f = 1`` first with the untrained model); that
  schedule is gone, not an option. Static pacing labels every round from round 2 on and
  keeps ``static-labels`` (the paper's "100 pseudo labels per selected client per
  round"; the code keeps min(100, |U|) in total, which is what we do). Round 1 belongs to
  no AUG-E trial window (nothing labels in it), so every window holds a labelling round.
* Filtering: eq. (2) exactly, ``score(u) = sum_{x in E(u)} rho^-|V(x) ∩ L|`` (``fes.vote=eq2``);
  the code (``fed/selective_annotating.py``, ``fast_votek`` from vote-k) also skips voters x
  that are themselves selected, never picks a text nobody votes for, and breaks ties by vote
  count, then first vote, rather than id: ``fes.vote=votek`` (:func:`votek_filter`, their
  picks exactly). It uses a 12-layer
  paraphrase-mpnet proxy with k=150 neighbours, rho=10 and a 10 % keep ratio; we use
  the process's own frozen MiniLM as the proxy and scale k to the pools here. Both keep
  ``int(N * ratio)`` texts (:func:`keep_count`; none, and no labels, below one). The
  authors subtract the mean embedding of the client's texts before the cosine k-NN
  (``calculate_sentence_transformer_embedding(mean=True)``); we do not by default
  (§3.2 says "cosine similarity between the embedding vectors"): ``centre-proxy=true``.
* The configurator (Alg. 1) is not in the authors' code (their pace was swept offline
  with ``sweep_aug.py``); here it runs online as Alg. 1 says, trials one after another.
* Co-planning: the paper freezes bottom layers, tunes biases of middle ones and fully
  tunes the top ones; its AG News plan (§3.3: RoBERTa-large's layers 0-15 frozen, the
  biases of 16-23 tuned, no full layer; §4.4: "up to 66.7 %" frozen, "up to 33.3 %" at
  reduced capacity) is our default scaled to 6 layers: 4 frozen, 2 bias-only, 0 full;
  embeddings follow layer 0's capacity, the pooler (read by fedcls's ``cls`` head only)
  trains only under the full plan (so ``frozen=0, bias=0`` is full fine-tuning as fedavg,
  ``frozen=0, bias=-1`` BitFit).

Measured against the authors' code by ``tools/reference/fes.py`` (fixture
``tests/unit/reference/fes.json``; what agrees and what departs: ``docs/papers/fes.md``).

Modules: ``config.py`` (keys of FeS and its three baselines, no torch), ``model.py`` (which layers
train), ``labels.py`` (gold shots, pseudo-label picks), ``filter.py`` (eq. (2), vote-k), ``pacing.py``
(AUG-E and the Pacer), ``plan.py`` (the depth search); the Flower side: ``strategies/fes.py``,
``clients/fes.py``; scripts: ``simulations/papers/fes/``.
"""
