"""FedDPG: a dynamic prompt generator G, and FedDPGu's unlearning.

FedDPG (Shakeri et al., ``../shared/papers/004_03995fac2178d15f.txt``, §3.2): a two-layer
MLP G maps the mean input embedding ē = (1/n) Σ_i e_i of a text (d_e) to |P|·d_e
values, reshaped to |P| prompt vectors (eq. 2) and prepended to the text's embeddings,
z = [P; x] (eq. 3). The PLM stays frozen; only G trains (back-propagation through the
frozen encoder) and travels, and the server takes the uniform mean of the clients' G
(eq. 1, every selected client counts equally).

Global arrays = upload = G's four tensors, float32, named as the module names them::

    generator.0.weight [h, D]   generator.0.bias [h]
    generator.2.weight [|P|·D, h]   generator.2.bias [|P|·D]

(h = ``feddpg.hidden``, |P| = ``feddpg.prompts``; D = 384, h = 20, |P| = 10:
7,700 + 80,640 = 88,340 weights = 353,360 B + 4 NPY headers = 353,872 B each way).

Choices where the paper is silent, and where the authors' code (gotobcn8/FedDPG,
``model/feddpg.py``, ``federated/``) departs from it:

* **activation**: ReLU between the two layers (the paper says "two-layer MLP"; the
  code uses ReLU).
* **ē**: the mean word embedding over the n tokens of the text as the tokenizer
  gives them ([CLS] and [SEP] included, padding excluded), the paper's 1/n Σ
  (``mean-embedding = tokens``). The code pads every text to 128 positions and averages
  all of them, [PAD]'s embedding included (``mean-embedding = padded``); with MiniLM's
  trained [PAD] vector that makes the texts' ē nearly alike (``docs/papers/feddpg.md``).
* **where P goes**: after [CLS], like every prompt method here (the code prepends it
  before ``<s>`` and classifies from the ``<s>`` state after the prompt); with the
  similarity head, which pools every position, the order does not matter beyond
  the position embeddings.
* **what trains**: the paper trains G only (§3.2.2, "only G"). The code also trains
  and averages a classification head ``Linear(D,10)-Tanh-Linear(10,C)``. Here the head
  is the project's frozen prompt-style head (``similarity``: cosine to the encoded
  label descriptions; ``tied``/``mlm`` for cloze checkpoints), so nothing but G trains.
* **hidden size / |P|**: defaults h = 20, |P| = 10, which give Table 1's parameter
  count with RoBERTa-base (G 176,660 + the code's head 7,712 ≈ 185K). The code's
  default is h = 10.
* **input** (§4.2.2, Fig. 2): ``prompt-text`` = [P; x] (the method), ``text`` = x alone
  (G bypassed: with a frozen PLM and a frozen head nothing trains, so this is the
  zero-shot reference), ``prompt`` = P alone ([CLS] P [SEP]: the text reaches the PLM
  only through ē).

FedDPGu (§3.3): the client asking to forget relabels each forgotten example to a
random label different from its own, trains G_c with eq. (5),
ℓ(retained) + λ·ℓ(relabelled), and uploads G_c^u; the server replaces the global G
with it (no averaging). The paper gives neither λ nor how long the client trains. The
authors' code (``federated/client.py``, ``client_unlearn``) runs ``local_epochs``
mini-batch epochs of one cross-entropy over the client's data with the forgotten labels
replaced in place (each relabelled example weighs as much as a retained one) under a
linearly decaying AdamW rate; here ``unlearn-steps`` full-batch steps at ``unlearn-lr``
of ``unlearn-optimizer`` (AdamW as the code, or plain gradient steps: the paper names no
optimizer), and ``unlearn-loss`` picks the weighting (``sets``, the default: λ on the
relabelled set's mean; ``examples``: λ per example, the code's at λ = 1; see
:func:`unlearning_loss`). :func:`forget_split`, :func:`relabel` and :func:`unlearn` are
the one implementation, used by the client in the ``unlearn-round`` scenario and by
:func:`simulations.papers.feddpg.unlearning.unlearn_run` on a finished run's checkpoint.

Modules: ``config.py`` (keys, no torch), ``model.py`` (the generator G, eqs. (2)-(3)),
``unlearning.py`` (FedDPGu, eq. (5)); the Flower side: ``strategies/feddpg.py``,
``clients/feddpg.py``; script: ``simulations/papers/feddpg/unlearning.py``.
"""
