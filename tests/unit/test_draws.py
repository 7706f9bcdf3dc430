"""Every seeded random draw: afresh where the paper draws afresh, fixed where it must stay.

A draw shared across rounds or clients where the paper draws anew (one CMA-ES seed for
every round, one perturbation mask for every client) changes no equation and no count, so
the unit tests of the equations cannot see it (issue 44, part 3). Each test here calls the
real client or server code up to the draw, catches what the draw is seeded with (a spy in
place of the function that receives the generator, stopping the round there), and checks
that two rounds and two clients get different draws and the same round and client the same
one, or that a draw that must stay fixed does.

Drawn afresh per client and round (a new seed from ``(run seed, partition id, round)``):

* ``fedtext/client/numpy_client.py`` ``client_seed``: the seed every client-round draw below derives from;
* the local CMA-ES of ``bbt-fed`` and ``fedbpt`` (``clients/bbt_fed.py``, ``clients/fedbpt.py``:
  pycma's seed; FedBPT Alg. 1 and BBT sample new candidates every iteration);
* FedBPT's perturbation masks M and random tokens X̂ (``fedtext/methods/fedbpt/perturb.py``,
  called by ``clients/fedbpt.py``; Alg. 1 lines 12-13, new at every local iteration too:
  ``tests/unit/test_fedbpt.py``);
* FedDLS's local search (``clients/feddls.py``, Alg. 3's random choices);
* FedKSeed's seed index of each local step (``clients/fedkseed.py``, Algorithm 1: a new
  uniform draw from the K seeds at every step, not one per round) and its mini-batches;
* mini-batch order of the gradient clients (``fedtext/client/numpy_client.py`` ``minibatches``: new rows at
  every step, a new permutation at every pass over the shots; called by
  ``clients/fedprompt.py``, ``fedptuning_v2.py``, ``feddpg.py``, ``fedavg.py``, ``feddrs.py``,
  ``fes.py``) and their dropout masks (``torch.manual_seed`` in ``clients/fedavg.py`` and
  ``clients/fes.py``);
* FeS's pseudo-label picks (``fedtext/methods/fes/labels.py`` ``pick_class_quota``, seeded in
  ``clients/fes.py`` ``pseudo_label``; the authors' ``RandomState(seed)`` per round);
* FedDPGu's relabels (``fedtext/methods/feddpg/unlearning.py`` ``relabel``, seeded by
  ``unlearn_seed`` = the client's per-round seed; §3.3 draws a random other label);
* BBT post-tuning's CMA-ES (``fedtext/client/numpy_client.py`` ``post_tune``: per client, apart from every
  training round).

Drawn afresh per round on the server:

* client sampling (``fedtext/server/sampling.py``: ``default_rng([seed, round, salt])``, the training
  draw, FeS's labelling draw (``LABEL_SALT``) and the evaluation draw each their own stream;
  FedDRS Alg. 1 "select active clients uniformly at random", FeS §4.1);
* FedDRS's pseudo-embeddings and pseudo labels (``fedtext/methods/feddrs/samplers.py``,
  seeded per ``[seed, round, iteration]`` in ``strategies/feddrs.py``; each teacher continues
  the iteration's generator, so each teacher gets its own samples).

Fixed for the whole run (the same on the server and on every client, whatever the round):

* BBT's projection A and p0 (``fedtext/backbone/prompts.py`` ``projection``, ``fedtext/backbone/tokens.py``
  ``draw_tokens``; FedBPT Alg. 1 line 1: "initialize the projection matrix A and
  distribute it", rebuilt from the run seed on both sides, never sent), post-tuning's A too;
* FedDPG's G at round 0 (``fedtext/methods/feddpg/model.py`` ``initial_arrays``);
* a client's data: its test split, shots and unlabelled rest (``fedtext/learning/data.py``
  ``client_data``) and the server's test sample (``server_test``);
* a FeS client's gold/unlabelled split (``fedtext/methods/fes/labels.py`` ``split_pool``);
* a FedDPGu client's forget split (``unlearning.py`` ``forget_split``: drawn from (seed,
  client), never from the round, so that no later round trains on the forgotten rows);
* not tested here, fixed by construction: FedDF's auxiliary texts (``strategies/feddf.py``,
  ``[seed, 0xA0C5]`` once per run), the reference FedBPT server's pycma seed
  (``strategies/fedbpt.py``, ``[seed, 0xFEDB]``), a linear head's initialisation
  (``fedtext/learning/model.py``, ``[seed, 0x11EAD]``); and the seeded fault injection of
  ``fedtext/node/node.py`` (per client, round and message kind, a testing aid).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedtext.client.numpy_client import client_seed
from fedtext.node.node import client_class
from fedtext.learning.data import client_data, server_test
from fedtext.common.registry import make_config
from fedtext.common.tasks import TASKS

SMALL = dict(prompt_length=2, max_length=64, shots_per_class=4, client_test_size=4, eval_size=20)
CASES = ((0, 1), (0, 2), (1, 1), (1, 2))  # (partition id, round)


class Stop(Exception):
    """Raised by a spy once it has what it came for: the rest of the round is not needed."""


def upcoming(rng: np.random.Generator, n: int = 6) -> tuple[float, ...]:
    """What ``rng`` would draw next, without advancing it."""
    return tuple(copy.deepcopy(rng).random(n).tolist())


def assert_afresh(draw) -> None:
    """``draw(partition id, round)``: four different draws for two clients and two rounds,
    and the same one again for the same client and round."""
    got = {case: draw(*case) for case in CASES}
    assert len(set(got.values())) == len(CASES), got
    assert draw(*CASES[0]) == got[CASES[0]]


# ------------------------------------------------------------------ the seed itself
def test_client_seed_is_one_per_run_seed_client_and_round():
    cfg = make_config("fedprompt")
    seeds = {(p, r): client_seed(cfg, p, r) for p in range(4) for r in range(1, 5)}
    assert len(set(seeds.values())) == len(seeds)
    assert all(0 < s < 2**31 for s in seeds.values())  # pycma: 0 means "seed from the clock"
    assert client_seed(cfg, 2, 3) == seeds[2, 3]
    other = make_config("fedprompt", seed=1)
    assert all(client_seed(other, p, r) != s for (p, r), s in seeds.items())


# ------------------------------------------------------------------ black-box clients
@pytest.mark.parametrize("method", ["bbt-fed", "fedbpt"])
def test_local_cma_es_is_seeded_afresh_per_client_and_round(method, backbone, monkeypatch):
    cfg = make_config(method, intrinsic_dim=4, popsize=4, local_steps=1, **SMALL)
    module = client_class(method).__module__

    def spy(*args, seed, **kwargs):
        raise Stop(seed)

    monkeypatch.setattr(f"{module}.WhitenedCMA", spy)

    def draw(pid, rnd):
        client = client_class(method)(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        with pytest.raises(Stop) as stop:
            client.train(client.model.initial_arrays(), {"server_round": rnd})
        return stop.value.args[0]

    assert_afresh(draw)
    assert draw(1, 2) == client_seed(cfg, 1, 2)


def test_fedbpt_perturbation_masks_are_drawn_afresh_per_client_and_round(backbone, monkeypatch):
    """The first iteration's mask and random tokens, applied to one common batch so that
    the clients' own shots do not make them differ."""
    from fedtext.methods.fedbpt import perturb as perturb_module

    cfg = make_config("fedbpt", intrinsic_dim=4, popsize=4, local_steps=1, keep_rate=0.5, **SMALL)
    common = backbone.encode(["one two three four five six seven eight nine ten"] * 2, [0, 1])
    real = perturb_module.perturb

    def spy(bb, batch, keep_rate, rng):
        raise Stop(tuple(real(bb, common, keep_rate, copy.deepcopy(rng)).input_ids.flatten().tolist()))

    monkeypatch.setattr("clients.fedbpt.perturb", spy)

    def draw(pid, rnd):
        client = client_class("fedbpt")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        with pytest.raises(Stop) as stop:
            client.train(client.model.initial_arrays(), {"server_round": rnd})
        return stop.value.args[0]

    assert_afresh(draw)
    assert draw(0, 1) != tuple(common.input_ids.flatten().tolist())  # something was replaced


def test_feddls_local_search_is_seeded_afresh_per_client_and_round(backbone, monkeypatch):
    cfg = make_config("feddls", compression="full", steps=1, **SMALL)

    def spy(p, loss, candidates, vocab, steps, rng):
        raise Stop(upcoming(rng))

    monkeypatch.setattr("clients.feddls.local_search", spy)

    def draw(pid, rnd):
        client = client_class("feddls")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        with pytest.raises(Stop) as stop:
            client.train([], {"server_round": rnd})
        return stop.value.args[0]

    assert_afresh(draw)


def test_post_tuning_is_seeded_per_client_apart_from_every_round_and_keeps_one_A(backbone, monkeypatch):
    """BBT post-tuning (FedDLS App. B): a CMA-ES seed per client that no training round
    uses, in a subspace A that every client shares."""
    import fedtext.learning.blackbox
    import fedtext.client.numpy_client

    cfg = make_config("fedprompt", post_tune_steps=1, post_tune_dim=4, **SMALL)
    real = fedtext.client.numpy_client.projection
    seen = []

    def spy(*args, seed, **kwargs):
        raise Stop(seed)

    monkeypatch.setattr(fedtext.learning.blackbox, "WhitenedCMA", spy)
    monkeypatch.setattr(fedtext.client.numpy_client, "projection", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    seeds = []
    for pid in (0, 1):
        client = client_class("fedprompt")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        with pytest.raises(Stop) as stop:
            client.post_tune(client.model.initial_arrays()[0])
        seeds.append(stop.value.args[0])
    assert seeds[0] != seeds[1]
    assert not set(seeds) & {client_seed(cfg, p, r) for p in (0, 1) for r in range(0, 1000)}
    np.testing.assert_array_equal(seen[0], seen[1])


def test_fedkseed_seed_indices_are_drawn_afresh_per_local_step_client_and_round(backbone, monkeypatch):
    """Each of a client's S zeroth-order steps draws its own seed index (Algorithm 1, line
    "sample a seed s from the K"): one index for the whole round, or the same indices again
    next round, would still give a valid G of the right shape, so the tests of G's sums
    cannot see it."""
    from fedtext.methods.fedkseed.model import FedKSeedModel

    cfg = make_config("fedkseed", seeds=64, local_steps=8, batch_size=2, **SMALL)
    steps, model = [], FedKSeedModel(cfg, backbone)

    def spy(params, seed, eps, lr, loss):
        steps.append(model.seeds.index(seed))
        return 0.0, 0.5

    monkeypatch.setattr("clients.fedkseed.zo_step", spy)

    def draw(pid, rnd):
        client = client_class("fedkseed")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        steps.clear()
        client.train(client.model.initial_arrays(), {"server_round": rnd})
        return tuple(steps)

    assert_afresh(draw)
    # eight steps, eight different indices of the 64 here (one draw reused for the round gives one)
    assert len(draw(0, 1)) == 8 and len(set(draw(0, 1))) == 8, draw(0, 1)


def test_minibatches_take_new_rows_every_step_and_reshuffle_every_pass():
    """``minibatches``: within a pass every step takes rows no earlier step of the pass took;
    the next pass is a new permutation, not the first one again (a reused order would give
    every pass the same batches in the same order)."""
    from fedtext.client.numpy_client import minibatches

    class Rows:  # an EncodedBatch's len and take: a batch is the tuple of its row indices
        def __len__(self) -> int:
            return n

        def take(self, idx: np.ndarray) -> tuple[int, ...]:
            return tuple(int(i) for i in idx)

    n, size = 12, 3
    got = list(minibatches(Rows(), size, 3 * n // size, np.random.default_rng(0)))
    assert all(len(b) == size for b in got)
    passes = [got[k:k + n // size] for k in range(0, len(got), n // size)]
    for p in passes:  # each pass: every row exactly once
        assert sorted(i for b in p for i in b) == list(range(n))
    assert len({tuple(p) for p in passes}) == 3  # three passes, three orders


# ------------------------------------------------------------------ gradient clients
def _stub_load(client, monkeypatch) -> None:
    """The client's model.load returns a one-weight stand-in: no trainable copy of the
    encoder is made, the round stops at its first draw anyway."""
    net = SimpleNamespace(named_trainable=lambda: [("w", torch.nn.Parameter(torch.zeros(1)))],
                          encoder=SimpleNamespace(train=lambda: None, eval=lambda: None))
    monkeypatch.setattr(client.model, "load", lambda arrays, *a, **k: net)


@pytest.mark.parametrize("method", ["fedprompt", "fedptuning-v2", "feddpg", "fedavg", "feddrs", "fes"])
def test_minibatch_order_is_drawn_afresh_per_client_and_round(method, backbone, monkeypatch):
    extra = {"head": "similarity"} if method in ("fedavg", "feddrs") else {}
    cfg = make_config(method, **extra, **SMALL)
    module = client_class(method).__module__
    if method == "feddrs":
        module = "clients.fedavg"  # FedDRSClient trains as FedAvgClient
    seen = {}
    real_seed = torch.manual_seed

    def spy(batch, size, steps, rng):
        raise Stop(upcoming(rng))

    monkeypatch.setattr(f"{module}.minibatches", spy)
    monkeypatch.setattr(torch, "manual_seed", lambda s: seen.update(torch=s) or real_seed(s))

    def draw(pid, rnd):
        client = client_class(method)(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        if method in ("fedavg", "feddrs", "fes"):
            _stub_load(client, monkeypatch)
            arrays = None
        else:
            arrays = client.model.initial_arrays()
        seen.clear()
        with pytest.raises(Stop) as stop:
            client.train(arrays, {"server_round": rnd, "train": 1, "label": 0})
        return stop.value.args[0]

    assert_afresh(draw)
    if method in ("fedavg", "feddrs"):  # dropout masks: torch seeded afresh too (before the batches)
        torches = {}
        for case in CASES:
            draw(*case)
            torches[case] = seen["torch"]
        assert len(set(torches.values())) == len(CASES)


def test_fes_dropout_seed_is_drawn_afresh_per_client_and_round(backbone, monkeypatch):
    cfg = make_config("fes", **SMALL)

    def spy(s):
        raise Stop(s)

    def draw(pid, rnd):
        client = client_class("fes")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        _stub_load(client, monkeypatch)
        with monkeypatch.context() as m:
            m.setattr(torch, "manual_seed", spy)
            with pytest.raises(Stop) as stop:
                client.train(None, {"server_round": rnd, "train": 1, "label": 0})
        return stop.value.args[0]

    assert_afresh(draw)


def test_fes_pseudo_label_picks_are_drawn_afresh_per_client_and_round(backbone, monkeypatch):
    """``pseudo-pick=class-quota`` draws its texts ∝ confidence (the authors' pet/ipet.py,
    a new RandomState every round); the draw must not repeat across rounds or clients."""
    from fedtext.methods.fes.labels import PSEUDO_PICKS

    cfg = make_config("fedfsl", pseudo_pick="class-quota", unlabeled_size=16, **SMALL)

    def spy(probs, target, rng):
        raise Stop(upcoming(rng))

    monkeypatch.setitem(PSEUDO_PICKS, "class-quota", spy)

    def draw(pid, rnd):
        client = client_class("fedfsl")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        monkeypatch.setattr(client, "predict", lambda net, ids: (np.full((len(ids), 2), 0.5), 1))
        with pytest.raises(Stop) as stop:
            client.pseudo_label(None, {"server_round": rnd, "label_count": 4})
        return stop.value.args[0]

    assert_afresh(draw)


def test_feddpg_relabels_are_drawn_afresh_and_the_forget_split_stays_fixed(backbone, monkeypatch):
    """FedDPGu (§3.3): each unlearning draws its random other labels anew (per client and
    round), but the rows a client forgets are one fixed set of that client, whatever the
    round it is asked in."""
    import clients.feddpg
    import fedtext.methods.feddpg.unlearning as unlearning

    cfg = make_config("feddpg", hidden=2, prompts=1, **SMALL)
    forgets = {}
    real_unlearn = clients.feddpg.unlearn

    def unlearn_spy(model, arrays, batch, forget, seed):
        forgets["last"] = tuple(forget.tolist())
        return real_unlearn(model, arrays, batch, forget, seed)

    def relabel_spy(labels, num_classes, rng):
        raise Stop(upcoming(rng))

    monkeypatch.setattr(clients.feddpg, "unlearn", unlearn_spy)
    monkeypatch.setattr(unlearning, "relabel", relabel_spy)
    by_case = {}

    def draw(pid, rnd):
        client = client_class("feddpg")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        with pytest.raises(Stop) as stop:
            client.train(client.model.initial_arrays(), {"server_round": rnd, "unlearn": 1})
        by_case[pid, rnd] = forgets["last"]
        return stop.value.args[0]

    assert_afresh(draw)
    assert by_case[0, 1] == by_case[0, 2] and by_case[1, 1] == by_case[1, 2]  # fixed per client
    assert len(by_case[0, 1]) == round(0.2 * 8)  # forget-fraction of the 2 x 4 shots


# ------------------------------------------------------------------ the server's draws
def test_client_sampling_is_drawn_afresh_per_round_and_stream():
    from fedtext.methods.fes.labels import LABEL_SALT
    from fedtext.server.sampling import TRAIN_SALT, ClientSampler

    sampler = ClientSampler(make_config("fedavg", clients_per_round=3), lambda sizes: None)
    pool = list(range(10))
    train = {r: sampler.draw(pool, 3, r, TRAIN_SALT) for r in range(1, 5)}
    assert len({tuple(v) for v in train.values()}) == 4
    assert sampler.draw(pool, 3, 2, TRAIN_SALT) == train[2]
    assert all(sampler.draw(pool, 3, r, LABEL_SALT) != train[r] for r in (1, 2))  # FeS G_label: its own stream
    other = ClientSampler(make_config("fedavg", clients_per_round=3, seed=1), lambda sizes: None)
    assert other.draw(pool, 3, 1, TRAIN_SALT) != train[1]


def test_evaluation_sampling_is_drawn_afresh_per_round():
    from fedtext.server.sampling import ClientSampler

    sampler = ClientSampler(make_config("fedavg", clients_per_eval=3), lambda sizes: None)
    proxies = {str(i): SimpleNamespace(cid=f"node{i}") for i in range(10)}
    for pid, proxy in proxies.items():
        sampler.learn(proxy, int(pid))
    manager = SimpleNamespace(all=lambda: {p.cid: p for p in proxies.values()})
    picked = {r: [p.cid for p in sampler.sample_eval(r, manager)] for r in range(1, 5)}
    assert all(len(v) == 3 for v in picked.values()) and len({tuple(v) for v in picked.values()}) == 4
    assert [p.cid for p in sampler.sample_eval(3, manager)] == picked[3]


def test_feddrs_pseudo_embeddings_are_drawn_afresh_per_round_iteration_and_teacher(monkeypatch):
    """Alg. 1: every round's I iterations sample new pseudo-embeddings for every teacher;
    the same round again draws the same (seeded by [seed, round, iteration])."""
    from fedtext.methods.feddrs import samplers
    from fedtext.server.validation import Upload
    from strategies.feddrs import FedDRS

    cfg = make_config("feddrs", head="similarity", num_server_rounds=3, sampling="random", sample_batch=2,
                      sample_length=3, iterations=2, **SMALL)
    strat = FedDRS(cfg, TASKS["demo"])
    calls = []
    real = samplers.random_embeddings

    def spy(net, n, length, noise, rng):
        out = real(net, n, length, noise, rng)
        calls.append(tuple(out.flatten()[:8].tolist()))
        return out

    monkeypatch.setattr("strategies.feddrs.random_embeddings", spy)
    # what the teachers say and the student's steps do not change what is drawn: stand-ins
    monkeypatch.setattr("strategies.feddrs.distill_steps", lambda *a, **k: (1.0, 0.5))
    monkeypatch.setattr(strat.teacher, "load", lambda arrays: None)
    monkeypatch.setattr("strategies.feddrs.EmbeddingsNet",
                        lambda net: SimpleNamespace(embeds_logits=lambda x: torch.zeros(len(x), 2)))
    base = strat.model.initial_arrays()
    names = [s.name for s in strat.model.upload_specs()]
    uploads = [Upload(None, str(pid), 5, dict(zip(names, [*base, np.asarray([2, 2], np.float32)], strict=True)), {})
               for pid in range(2)]
    for rnd in (1, 2, 1):
        strat.rounds.begin(rnd)
        strat.aggregate(rnd, uploads)
    # per round: iteration 0 teachers 0, 1, then iteration 1 teachers 0, 1
    first, second, again = calls[:4], calls[4:8], calls[8:]
    assert len(set(first + second)) == 8  # every teacher, iteration and round its own samples
    assert again == first


# ------------------------------------------------------------------ draws that stay fixed
@pytest.mark.parametrize("method", ["bbt-fed", "fedbpt"])
def test_projection_and_p0_are_the_same_on_the_server_and_every_client(method, backbone):
    from fedtext.server_app import strategy_class

    cfg = make_config(method, intrinsic_dim=4, popsize=4, **SMALL)
    server = strategy_class(method)(cfg, TASKS["demo"]).model
    for pid in (0, 1, 0):  # Flower builds a new client every round: the same A again
        client = client_class(method)(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone).model
        np.testing.assert_array_equal(client.A, server.A)
        np.testing.assert_array_equal(np.asarray(client.p0), np.asarray(server.p0))
    other = strategy_class(method)(make_config(method, intrinsic_dim=4, popsize=4, seed=1, **SMALL), TASKS["demo"])
    assert not np.array_equal(other.model.A, server.A)  # drawn from the run seed


def test_feddpg_initial_generator_is_one_per_run(backbone):
    from fedtext.methods.feddpg.model import FedDPGModel

    cfg = make_config("feddpg", hidden=2, prompts=1, **SMALL)
    a, b = FedDPGModel(cfg, backbone).initial_arrays(), FedDPGModel(cfg, backbone).initial_arrays()
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    c = FedDPGModel(make_config("feddpg", hidden=2, prompts=1, seed=1, **SMALL), backbone).initial_arrays()
    assert not np.array_equal(a[0], c[0])


def test_a_clients_data_and_the_servers_test_sample_stay_fixed():
    cfg = make_config("fedprompt", **SMALL)
    for pid in (0, 1):
        a, b = client_data(cfg, pid, 2), client_data(cfg, pid, 2)
        for part in ("train", "test", "unlabeled"):
            assert getattr(a, part).equals(getattr(b, part)), (pid, part)
    assert server_test(cfg).equals(server_test(cfg))


def test_fes_gold_and_unlabelled_split_stays_fixed_across_rounds(backbone):
    """Gold labels sit on fixed texts of the labelled clients (Table 1's skewed placement):
    Flower builds a new client for every message, and it must find the same gold texts."""
    cfg = make_config("fes", gold_labels=8, labelled_clients=2, unlabeled_size=16, **SMALL)
    for pid in (0, 1):
        first = client_class("fes")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        later = client_class("fes")(cfg, TASKS["demo"], client_data(cfg, pid, 2), backbone)
        assert list(first.gold["text"]) == list(later.gold["text"]) and len(first.gold) == 4
        assert list(first.unlabeled["text"]) == list(later.unlabeled["text"])
