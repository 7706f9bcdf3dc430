"""FedBPT against the authors' code: NVIDIA/NVFlare ``research/fed-bpt`` (``src/global_es.py``,
``src/fedbpt_train.py``), as the authors ran it (``requirements.txt``: ``cma==3.4.0``).

Checks:

``server_rounds_d<d>``
    The authors' server, ``GlobalES.run`` itself, driven for several rounds: the NVFlare base
    class it inherits (``FedAvg``) and ``FLModel`` are stand-ins that hand it the uploads of
    :func:`uploads` (seeded, computed from the state it sends) and record what it sends back.
    Compared per round with :class:`fedtext.methods.fedbpt.cmaes.ReferenceServerES` on the
    same uploads: sigma' (its ``Check sigma before`` log line), pycma's sigma after ``tell``,
    the sigma sent to clients, the mean, the evolution paths and C (whole for small d; for
    d = 500 its diagonal and its product with three fixed vectors). d = 500 is the paper's
    dimension, where cma >= 4 would pick TPA step-size adaptation unless told CSA.
``local_cmaes_d<d>``
    A client's local CMA-ES at C = I (round 1): the authors' ``global_es._copy_light(inopts=
    {seed, maxiter, popsize, CMA_mu: None})`` and ``ask``/``tell`` loop until ``stop()``
    (``fedbpt_train.py``; restated here, it is a loop of pycma calls, not a function), on a
    fixed quadratic fitness; against :class:`fedtext.learning.blackbox.WhitenedCMA` with pycma's
    default weights (``server-step=reference``): the I step sizes, the final mean and C.

Run it in a virtual environment with the authors' ``cma==3.4.0`` (``pip install cma==3.4.0
numpy``; nothing else of fedtext's is needed to produce the authors' side):
``python -m tools.reference.fedbpt --repo <NVFlare checkout>``. fedtext's side needs fedtext
(the harness imports it in the same interpreter; run ``pip install -e .`` there too, then
``pip install cma==3.4.0``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tools.reference import common

REPO = "NVIDIA/NVFlare"
SERVER_FILE = "research/fed-bpt/src/global_es.py"
CLIENT_FILE = "research/fed-bpt/src/fedbpt_train.py"
TOL = 1e-9  # float64 on both sides, the same pycma calls

# The cases: dimension, clients per round m, rounds, local population, local iterations.
SERVER_CASES = {"server_rounds_d10": dict(d=10, m=4, rounds=4, popsize=6, iters=4, sigma0=1.0, seed=42),
                "server_rounds_d500": dict(d=500, m=5, rounds=5, popsize=5, iters=8, sigma0=1.0, seed=1234)}
LOCAL_CASES = {"local_cmaes_d10": dict(d=10, popsize=6, iters=4, sigma0=1.0, seed=42),
               "local_cmaes_d500": dict(d=500, popsize=5, iters=8, sigma0=1.0, seed=1234)}


# ------------------------------------------------------------------ shared inputs
def uploads(case: dict[str, Any], rnd: int, mean: np.ndarray, sigma: float) -> list[dict[str, Any]]:
    """The m clients' uploads in round ``rnd`` (0-based) for a server at (mean, sigma): seeded
    client means around the mean, their fitness on a fixed quadratic, and I local step sizes
    around sigma (what ``fedbpt_train.py`` sends: ``solutions``, ``fitnesses``,
    ``local_sigmas``, ``local_cma_mu``)."""
    d, m, iters = case["d"], case["m"], case["iters"]
    target = np.random.default_rng([case["seed"], 7]).standard_normal(d)
    out = []
    for k in range(m):
        rng = np.random.default_rng([case["seed"], rnd, k])
        z = mean + sigma * 0.3 * rng.standard_normal(d)
        f = float(np.sum((z - target) ** 2) / d)
        sig = sigma * np.exp(np.cumsum(0.05 * rng.standard_normal(iters)) - 0.02 * np.arange(iters))
        out.append({"solutions": [z], "fitnesses": [f], "local_sigmas": [float(s) for s in sig],
                    "local_cma_mu": case["popsize"] // 2})
    return out


SMALL = 20  # vectors and matrices of up to this dimension are kept whole, larger ones summarised


def probes(d: int) -> np.ndarray:
    """Four fixed vectors ``[4, d]`` that summarise a large vector v by ``P v`` and C by ``P C P^T``
    (any change of v or C moves them)."""
    return np.random.default_rng([d, 0xC]).standard_normal((4, d))


def vector(v: Any, d: int) -> Any:
    """``v`` whole (d <= SMALL), or its first 8 entries and its 4 probe products."""
    v = np.asarray(v, dtype=np.float64)
    return v.tolist() if d <= SMALL else {"head": v[:8].tolist(), "probes": (probes(d) @ v).tolist()}


def state(es: Any, d: int) -> dict[str, Any]:
    """What a pycma server holds after a round: mean, sigma, paths and C (whole, or summarised)."""
    C = np.asarray(es.sm.C, dtype=np.float64)
    P = probes(d)
    cov = C.tolist() if d <= SMALL else {"diag": vector(np.diag(C), d), "PCP": (P @ C @ P.T).tolist()}
    return {"mean": vector(es.mean, d), "sigma": float(es.sigma), "p_c": vector(es.pc, d),
            "p_sigma": vector(getattr(es.adapt_sigma, "ps", np.zeros(d)), d),  # pycma makes it at the first tell
            "C": cov}


# ------------------------------------------------------------------ the authors' side
def authors_server(repo: Path, case: dict[str, Any]) -> dict[str, Any]:
    """``GlobalES.run`` for ``case['rounds']`` rounds on :func:`uploads`; per round the values
    its log lines print and the state it sends next."""
    log: list[str] = []
    sent: list[Any] = []

    class FLModel:  # nvflare.app_common.abstract.fl_model.FLModel: a container
        def __init__(self, params: dict | None = None, current_round: int | None = None, **kw: Any) -> None:
            self.params, self.current_round = params, current_round

    class FedAvg:  # nvflare.app_common.workflows.fedavg.FedAvg: what GlobalES.run calls of it
        def __init__(self, num_clients: int, num_rounds: int) -> None:
            self.num_clients, self.num_rounds, self.start_round = num_clients, num_rounds, 0

        def info(self, msg: str) -> None:
            log.append(str(msg))

        def sample_clients(self, n: int) -> list[int]:
            return list(range(n))

        def send_model_and_wait(self, targets: list[int], data: FLModel) -> list[Any]:
            es = data.params["global_es"]
            sent.append(state(es, case["d"]))
            return [FLModel(params=p) for p in uploads(case, data.current_round, np.asarray(es.mean), es.sigma)]

    s = common.stub
    stubs = {"nvflare": s("nvflare"), "nvflare.app_common": s("nvflare.app_common"),
             "nvflare.app_common.abstract": s("nvflare.app_common.abstract"),
             "nvflare.app_common.abstract.fl_model": s("nvflare.app_common.abstract.fl_model", FLModel=FLModel),
             "nvflare.app_common.workflows": s("nvflare.app_common.workflows"),
             "nvflare.app_common.workflows.fedavg": s("nvflare.app_common.workflows.fedavg", FedAvg=FedAvg)}
    mod = common.load(repo / SERVER_FILE, "authors_global_es", stubs)
    server = mod.GlobalES(case["m"], case["rounds"] + 1, frac=1, sigma=case["sigma0"], intrinsic_dim=case["d"],
                          seed=case["seed"])
    server.run()  # rounds + 1 sends: the last one carries the state after `rounds` steps

    def values(prefix: str) -> list[float]:
        return [float(line.split(":")[1]) for line in log if line.startswith(prefix)]

    before, after = values("Check sigma before"), values("Check sigma after")
    return {"sigma_prime": before[: case["rounds"]], "sigma_after": after[: case["rounds"]],
            "sent": sent[1 : case["rounds"] + 1]}


def authors_local(repo: Path, case: dict[str, Any]) -> dict[str, Any]:
    """The local loop of ``fedbpt_train.py`` from a fresh global ES (mean 0, sigma0, C = I):
    ``_copy_light`` with the client's options, ``ask``/``tell`` until ``stop()``."""
    import cma

    if not (repo / CLIENT_FILE).is_file():
        raise SystemExit(f"{repo / CLIENT_FILE} not found")
    m = 10
    global_es = cma.CMAEvolutionStrategy(case["d"] * [0], case["sigma0"],
                                         inopts={"seed": case["seed"], "popsize": m, "maxiter": 200, "verbose": -1,
                                                 "CMA_mu": m})
    local_es = global_es._copy_light(inopts={"seed": case["seed"], "maxiter": case["iters"],
                                             "popsize": case["popsize"], "CMA_mu": None})
    sigmas = []
    while not local_es.stop():
        sigmas.append(float(local_es.sigma))
        solutions = local_es.ask()
        local_es.tell(solutions, [quadratic(case, x) for x in solutions])
    return {"sigmas": sigmas, **state(local_es, case["d"])}


def quadratic(case: dict[str, Any], x: np.ndarray) -> float:
    """The local fitness: a fixed ill-conditioned quadratic (so that ranks, weights and C matter)."""
    d = case["d"]
    rng = np.random.default_rng([case["seed"], 11])
    c, w = rng.standard_normal(d), np.exp(rng.uniform(-2, 2, d))
    return float(np.sum(w * (np.asarray(x) - c) ** 2))


# ------------------------------------------------------------------ fedtext's side
def ours_server(inputs: dict[str, Any]) -> dict[str, Any]:
    """:class:`ReferenceServerES` on the same uploads, with sigma' from :func:`reference_sigma_prime`."""
    from fedtext.methods.fedbpt.cmaes import ReferenceServerES, reference_sigma_prime

    case = inputs
    es = ReferenceServerES(case["d"], case["sigma0"], case["m"], case["seed"])
    out: dict[str, list] = {"sigma_prime": [], "sigma_after": [], "sent": []}
    for rnd in range(case["rounds"]):
        ups = uploads(case, rnd, es.mean, es.sigma_local)
        sp = reference_sigma_prime([np.asarray(u["local_sigmas"]) for u in ups], case["popsize"])
        after = es.tell(np.stack([u["solutions"][0] for u in ups]), [u["fitnesses"][0] for u in ups], sp)
        out["sigma_prime"].append(sp)
        out["sigma_after"].append(after)
        out["sent"].append(state(es.es, case["d"]))
    return out


def ours_local(inputs: dict[str, Any]) -> dict[str, Any]:
    """:class:`WhitenedCMA` from N(0, sigma0^2 I) with pycma's default weights, I iterations."""
    from fedtext.learning.blackbox import WhitenedCMA

    case = inputs
    es = WhitenedCMA(np.zeros(case["d"]), case["sigma0"], None, case["popsize"], case["seed"], equal_weights=False)
    sigmas = []
    for _ in range(case["iters"]):
        sigmas.append(es.sigma)
        es.tell([quadratic(case, x) for x in es.ask()])
    return {"sigmas": sigmas, **state(es.es, case["d"])}


OURS = {**{name: ours_server for name in SERVER_CASES}, **{name: ours_local for name in LOCAL_CASES}}


def authors(repo: Path) -> dict[str, Any]:
    """Every case's result from the authors' code (in the interpreter that has their cma)."""
    return {**{n: authors_server(repo, c) for n, c in SERVER_CASES.items()},
            **{n: authors_local(repo, c) for n, c in LOCAL_CASES.items()}}


def main() -> None:
    args = common.parser("fedbpt", REPO).parse_args()
    theirs = common.authors_side(args, "fedbpt", authors)
    checks = {}
    for name, case in SERVER_CASES.items():
        checks[name] = common.check(
            f"server step, {case['rounds']} rounds, d={case['d']}, m={case['m']}", SERVER_FILE,
            "fedtext/methods/fedbpt/cmaes.py (ReferenceServerES)", case, theirs[name], ours_server(case), TOL,
            note="sigma', pycma sigma after tell, sigma sent, mean, p_sigma, p_c, C per round")
    for name, case in LOCAL_CASES.items():
        checks[name] = common.check(
            f"local CMA-ES at C=I, d={case['d']}, lambda={case['popsize']}, I={case['iters']}", CLIENT_FILE,
            "fedtext/learning/blackbox.py (WhitenedCMA)", case, theirs[name], ours_local(case), TOL,
            note="the I step sizes, final mean, paths and C")
    common.write(args.out, "fedbpt", REPO, common.commit_of(args.repo), [SERVER_FILE, CLIENT_FILE], checks,
                 packages=("cma", "numpy"), authors_python=args.authors_python)


if __name__ == "__main__":
    main()
