"""Differential checks of fedtext against the authors' own code.

One module per paper (``fedbpt``, ``bbt``, ``fes``, ``feddpg``, ``feddls``). Each takes the
path of a checkout of the authors' public repository (the user fetches it; nothing of the
authors' code is copied into fedtext), loads the functions that compute the paper's core
step from that checkout, runs them and fedtext's counterpart on the same seeded inputs,
and writes both into a fixture, ``tests/unit/reference/<paper>.json``::

    python -m tools.reference.fedbpt --repo ~/src/NVFlare          # research/fed-bpt inside
    python -m tools.reference.bbt --repo ~/src/Black-Box-Tuning
    python -m tools.reference.fes --repo ~/src/FeS
    python -m tools.reference.feddpg --repo ~/src/FedDPG
    python -m tools.reference.feddls                               # no public code: the paper
    python -m tools.reference.table                                # docs/testing.md's table

A fixture holds, per check, the inputs (or the seeds that make them), the authors'
outputs and the largest difference fedtext had from them when it was written. The unit
tests (``tests/unit/test_reference.py``) recompute fedtext's side of every check from the
fixture alone, without the authors' code, and compare: a change in fedtext that moves it
away from the authors' numbers fails there. Each module's ``OURS`` maps a check's name to
the function that computes fedtext's side; the harness and the tests call the same one.
"""
