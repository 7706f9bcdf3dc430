"""What runs in the ServerApp (on the SuperLink's machine, or the simulation's driver).

* :mod:`~fedtext.server.strategy`: :class:`FedTextStrategy`, the Flower Strategy every
  method's strategy (``strategies/``) extends through a small hook set;
* :mod:`~fedtext.server.sampling`: which clients train and evaluate each round (fixed-size
  or Poisson cohorts, seeded);
* :mod:`~fedtext.server.validation`: every client result checked before aggregation, bad
  ones dropped with a logged reason; :mod:`~fedtext.server.secagg`: SecAgg+'s server side;
* :mod:`~fedtext.server.release`: the one step between validation and a method's aggregation
  (SecAgg+'s mean, central DP's clip-and-noise, ``update-clip``, the aggregator's rule);
* :mod:`~fedtext.server.round_log`: a round's record (bytes up and down, queries, memory,
  times); :mod:`~fedtext.server.server_opt`: server optimisers (FedOpt);
* :mod:`~fedtext.server.checkpoint`: the server's state after each round (``resume=``);
* :mod:`~fedtext.server.grid`: Flower's deployment grid with replies pulled as they come.

The ServerApp itself, what Flower loads, is :mod:`fedtext.server_app`.

May import: :mod:`fedtext.common`, :mod:`fedtext.learning`, :mod:`fedtext.trust`,
:mod:`fedtext.backbone`, :mod:`fedtext.records`. Never a client's or a node's code.
"""
