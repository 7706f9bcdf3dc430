"""What a method learns and from what, on both sides: the Model, the data, CMA-ES.

The server evaluates the global model and each client trains it, on the same pieces:

* :mod:`~fedtext.learning.model`: the :class:`Model` shared by server and client, with
  named ArraySpecs (what a round sends, up and down);
* :mod:`~fedtext.learning.data`: datasets, partitions, shots, the server's test split;
* :mod:`~fedtext.learning.blackbox`: CMA-ES started from any ``N(z, sigma^2 C)`` (the
  black-box clients' local search, bbt-fed and FedBPT; FedBPT's method module reads it too).

The encoder these run through, its heads, soft prompts and dtype, is :mod:`fedtext.backbone`.

May import: :mod:`fedtext.common`, :mod:`fedtext.backbone`, :mod:`fedtext.records`.
Never the server's, a client's or a node's code.
"""
