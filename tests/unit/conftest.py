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
    from fedtext.common.registry import make_config
    from fedtext.common.tasks import TASKS
    from strategies.fedbpt import FedBPT

    cfg = make_config("fedbpt", intrinsic_dim=request.module.D, local_steps=request.module.STEPS, popsize=4,
                      prompt_length=2, max_length=64)
    strat = FedBPT(cfg, TASKS["demo"])
    strat.global_arrays = strat.initial_arrays()
    strat.rounds.begin(1)
    return strat


@pytest.fixture()
def feddls_server():
    """FedDLS's server at its initial prompt p'_0 and the start of round 1 on the demo task:
    ``feddls_server(**fields)`` returns the strategy, ``fields`` the run-config fields of
    ``make_config("feddls", ...)`` (e.g. ``prompt_length``, ``compression``)."""
    from fedtext.common.registry import make_config
    from fedtext.common.tasks import TASKS
    from strategies.feddls import FedDLS

    def make(**fields) -> FedDLS:
        strat = FedDLS(make_config("feddls", **fields), TASKS["demo"])
        strat.global_arrays = [strat.initial_arrays()[0]]
        strat.rounds.begin(1)
        return strat

    return make


@pytest.fixture()
def feddls_upload():
    """A FedDLS client's upload as the server receives it: ``feddls_upload(pid, ids, n=8)``
    returns ``(proxy, FitRes)`` carrying the uint16 token ids (``SENTINEL``: position
    unchanged), ``n`` examples and the client's ``partition_id``, at p' version 0."""
    from types import SimpleNamespace

    import numpy as np
    from flwr.common import Code, FitRes, Status

    from fedtext.common import comm
    def make(pid: int, ids, n: int = 8):
        return (SimpleNamespace(cid=f"node{pid}"),
                FitRes(Status(Code.OK, ""), comm.encode([np.asarray(ids, np.uint16)]), n,
                       {"partition_id": pid, "dls_version": 0}))

    return make
