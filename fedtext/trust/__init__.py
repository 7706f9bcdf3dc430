"""The trust mechanisms that both sides apply to an update: differential privacy and
robust aggregation.

* :mod:`~fedtext.trust.privacy`: client-level DP (central on the server, local on the
  client), fixed and adaptive clipping, Poisson sampling rates, the RDP and PLD accountants;
* :mod:`~fedtext.trust.robust`: how the server combines a round's valid uploads (mean,
  median, trimmed mean, Krum; FLAME's update clipping);
* :mod:`~fedtext.trust.clipping`: the one norm and clip of an update both use, in float64
  (DP's clip to C, FLAME's bound, and :func:`~fedtext.trust.clipping.along`, which the
  client-side attacks reuse).

The server's own share of trust (validating every upload, SecAgg+'s unmasking, and the one
release step that applies these mechanisms to a round's uploads) runs only in the ServerApp and
lives in :mod:`fedtext.server` (:mod:`~fedtext.server.validation`, :mod:`~fedtext.server.secagg`,
:mod:`~fedtext.server.release`).

May import: :mod:`fedtext.common` only: a client (local DP, attacks) and the server
(central DP, robust aggregation) both import it.
"""
