"""FedDRS and FedDF: server-side distillation after FedAvg, without text or with auxiliary text.

FedDRS (``../shared/papers/002_dcf03d4234fa6404.txt``, §4, Alg. 1): clients fine-tune
the whole task model as ``fedavg`` does; the server averages every weight, then
distils the *task parameters* ω^f (everything but the word-embedding matrix ω^emb,
which stays the clients' average, §4) from the round's client models (teachers ω_k)
into the averaged model (student ω_S). No text is involved: the inputs are
pseudo-embeddings θ ``[N, L, D]`` fed to the encoder *below* its word-embedding lookup
(:meth:`fedtext.methods.feddrs.model.EmbeddingsNet.embeds_logits`), drawn three ways (§4, Fig. 2):

* **random** (θ^rd): per position, a random mix of two rows of the averaged embedding
  matrix plus Gaussian noise with the matrix's per-dimension spread
  (:func:`random_embeddings`);
* **target** (θ^tr, eq. 6): start from random samples and descend
  ``L_tar = Σ_k CE(σ(f(θ_k; ω_k)), γ_k)`` so that teacher k outputs the random pseudo
  labels γ_k (:func:`target_samples`);
* **adversarial** (θ^ad, eq. 7): descend
  ``L_adv = Σ_k CE(f(θ_k; ω_k), γ_k) - λ·CE(f(θ_k; ω_S), γ_k)``: teacher agrees with γ,
  the student does not (:func:`adversarial_samples`).

Distillation (eq. 8): ``L = Σ_k KL(σ(f(θ_k; ω_k)) || σ(f(θ_k; ω_S)))``, each teacher on
its own samples (all kinds), minimised over ω^f (:func:`distill_steps`). Alg. 1 runs
I iterations (sample, then distil) per round and I* iterations with a stronger λ as
post-processing after the last round.

FedDF (Lin et al. 2020, the paper's data-based baseline, eq. 2): the same averaged
student, distilled toward the *ensemble* ``σ((1/K) Σ_k f(x; ω_k))`` on unlabelled
auxiliary text from another source (the paper: BookCorpus; here ``feddf.aux-dataset``,
e.g. SST-2 sentences for an AG News federation), with the same student-step budget.

Choices where the paper is silent or where this machine forces a scale (written
down, as docs/methods.md repeats):

* **ω^emb** is the word-embedding matrix only: it is what a pseudo-embedding replaces.
  Position/type embeddings and the embedding LayerNorm act on θ, so they are task
  parameters and are distilled. The ``linear`` head is part of ω^f (ω^lm).
* **The student's start** is FedAvg's example-weighted mean (§4: "starting with the
  model obtained after FedAvg"; Alg. 1 line 11 writes the uniform 1/M mean; with
  equally sized clients the two agree), so FedDRS with no distillation *is* ``fedavg``.
* **Sequence layout**: a pseudo sequence is ``[CLS] θ_1..θ_L [SEP]`` with the real
  [CLS]/[SEP] embeddings (every real input has them); only θ is sampled and optimised.
* **γ_k**: drawn from client k's label distribution, which the client uploads as
  ``label_counts`` [C] (the paper's "label distribution information", §5.2; 4·C +
  128 B); ``label-prior=uniform`` draws from the uniform distribution instead.
* **Sampling update**: plain gradient descent with step β on θ (Alg. 1 lines 13-14),
  ``sample-steps`` steps per sampling. Paper: 100 steps of β = 0.1 on a 64×64×768
  batch; here 5 steps of β = 2 (the same β × steps = 10) on 8 sequences of 32
  positions of D = 384 per teacher and sampler: 0.4 s per teacher for target
  sampling on this machine's 2 cores, moving θ by 12% of its norm and the teacher's
  CE to γ from 1.37 to 0.86 (β = 0.1 × 10 steps moved θ by 0.7%, CE 1.39 to 1.37).
* **Distillation**: ``distill-steps`` = 4 AdamW steps at η* = 1e-4 per iteration, each
  on all of the iteration's samples (Alg. 1 line 15 is one step; the paper used
  Adafactor at η* = 1e-5 on RoBERTa-base). With AdamW, 4 steps at 1e-5 move the
  student by about 4e-5 per weight and changed nothing measurable (AG News, α -> 0,
  seed 0, one round: 0.515 FedAvg, 0.520 FedDRS); at 1e-4 the same round gave 0.820.
  Dropout is off in teachers and student (eval mode).
* **Post-processing** (Alg. 1 line 8): at the last round the server runs I*
  iterations with λ* (``post-lam``; the paper says only "increasing λ") on that
  round's client models (the clients it has; every client's latest model would mean
  keeping K models on the server).
* **Variants** (Table 1): ``sampling=adversarial`` is AdOnly; ``post-only=true`` is
  PostOnly (plain FedAvg until the last round, then post-processing).

Modules: ``config.py`` (keys of FedDRS and FedDF, no torch), ``model.py`` (the model, and
``EmbeddingsNet``: the encoder below its word-embedding lookup), ``samplers.py`` (eqs. (6)-(7)),
``distill.py`` (eq. (8)); the Flower side: ``strategies/feddrs.py``, ``strategies/feddf.py``,
``clients/feddrs.py``, ``clients/feddf.py``.
"""
