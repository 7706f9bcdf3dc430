"""Fixtures of the unit tests (tests/unit: no Ray, no Flower simulation, no subprocess of
their own, no network, no browser). tests/conftest.py's fixtures (``backbone``, ``demo``)
apply here too."""

from __future__ import annotations

import pytest


@pytest.fixture()
def fedbpt(backbone, request):
    """A FedBPT strategy at the start of round 1 on the demo task (prompt length 2,
    population 4, ``max_length`` 64), for aggregate_fit on mock client results. Its
    intrinsic dimension and local steps are the requesting module's ``D`` and ``STEPS``,
    the sizes its uploads are built with."""
    from fedtext.registry import make_config
    from fedtext.tasks import TASKS
    from strategies.fedbpt import FedBPT

    cfg = make_config("fedbpt", intrinsic_dim=request.module.D, local_steps=request.module.STEPS, popsize=4,
                      prompt_length=2, max_length=64)
    strat = FedBPT(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    return strat
