"""Client identification and sampling: who the connected clients are, and who trains or tests.

The server learns each client's partition id, domain and number of partitions once
(:meth:`ClientSampler.identify`: all new clients at once, answered from the node config),
keeps the clients that ``holdout`` does not name (the participants), and draws
``clients-per-round`` of them with ``default_rng([seed, round, TRAIN_SALT])``. With
``client-ids=lazy`` nobody is asked: the draw is over the connected clients in node-id
order, and partition ids reach the records with the results. That saves one message per
client, which matters in Flower 1.41's simulation engine, whose in-memory state scans
every node for every pending message (10,000 clients: see docs/performance.md,
"Federation size"); the price is that simulated node ids are random, so the same seed
trains other partitions in another run. Non-participants never train; they evaluate the
global model (and post-tune it on the last round) like everyone else, which gives the
P/NP accuracies of FedDLS §5.1.

Knowing the partitions also lets the server check that they are feasible before any
client trains (:meth:`ClientSampler.check_partitions`) and bound what a client may claim
to have trained on (:meth:`ClientSampler.max_examples`). With ``client-ids=lazy`` the
server asks one node, once, for the number of partitions, and checks the same
(:meth:`ClientSampler.check_lazy`): an infeasible split is one configuration error on the
server, not a failure of every client.

Before this process's first round the server waits up to :data:`CONNECT_TIMEOUT_S` for
its nodes (:func:`wait_for_nodes`); none at all is a configuration error that names the wait.

Partition identity is the server's, not a reply's: each node id is bound to the partition
it first reports (its properties with ``client-ids=ask``, its first reply with ``lazy``),
and every record names a node by that binding (:meth:`ClientSampler.info_if_known`).
:meth:`ClientSampler.claim` checks each later report against it: a reply claiming another
partition is dropped with the reason, and a node claiming a partition another connected
node holds is refused (never drawn; its replies dropped with the reason), so one node can
neither take another's partition nor be recorded as it. A node whose holder has left
(a restarted SuperNode without a registered key comes back under a new node id) takes the
partition over, with a warning. Bindings are not checkpointed: a resumed run (new node ids
in a simulation) binds afresh.

:class:`fedtext.server.strategy.FedTextStrategy` holds one :class:`ClientSampler`
(``strategy.sampler``); a method's strategy overrides ``sample_clients`` (FeS, FedDPG) and
``check_sizes`` (FeS) on the strategy and reaches the sampler's :meth:`~ClientSampler.info`,
:meth:`~ClientSampler.clients` and :meth:`~ClientSampler.draw` through it.
"""

from __future__ import annotations

import logging
import numbers
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from flwr.common import GetPropertiesIns
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedtext.common.config import ConfigError, RunConfig
from fedtext.learning.data import client_data, labelled, partition_sizes, partition_train
from fedtext.common.metrics import MetricSpec
from fedtext.trust.privacy import sampling_rate
from fedtext.records.schema import RoundRecord

log = logging.getLogger("fedtext")

CONNECT_TIMEOUT_S = 60  # how long the first round waits for its (clients-per-round) clients to connect
# Salt of the training draw (:meth:`ClientSampler.draw`): a stream of its own beside the
# evaluation draw's (EVAL_SALT) and FeS's labelling draw's (fedtext.methods.fes.labels.LABEL_SALT).
TRAIN_SALT = 0x5A3
EVAL_SALT = 0xE7A1  # salt of the evaluation draw (:meth:`ClientSampler.sample_eval`)
PROPERTIES_TIMEOUT_S = 600  # a simulated client's first message may start a Ray actor (seconds)
PROPERTIES_WORKERS = 64  # get_properties messages in flight at once (Flower's fit fan-out uses threads too)
# The partition id a node reports (properties, and every fit and evaluate reply): a node
# config's ``partition-id`` is a whole number (fedtext.node.node.make_client)
PARTITION_ID = MetricSpec("partition_id", whole=True, low=0)
PLATFORM = re.compile(r"[A-Za-z0-9_.-]{1,32}")  # a node's reported CPU architecture (platform.machine())


def partition_name(pid: Any) -> str:
    """A reported partition id as the records write it: ``0``, ``0.0`` (a float off the
    wire) and ``"0"`` are all ``"0"``."""
    if isinstance(pid, numbers.Real) and not isinstance(pid, bool) and float(pid).is_integer():
        return str(int(pid))
    return str(pid)


def wait_for_nodes(client_manager: ClientManager, n: int) -> None:
    """Before this process's first round: wait up to :data:`CONNECT_TIMEOUT_S` for ``n``
    connected SuperNodes (Flower's ``wait_for``); none at all is a configuration error.

    A SuperLink without SuperNodes used to wait, then fail with whatever check came next
    ("holdout='' leaves no participant client to train", after the server had loaded data
    and model and evaluated round 0; FeS trained nobody every round). Fewer than ``n`` but
    some is the callers' to judge (``clients-per-round`` against the federation).

    Parameters
    ----------
    client_manager
        Flower's client manager (fed by the grid: the nodes the SuperLink knows).
    n
        The nodes to wait for (at least 1).

    Raises
    ------
    ConfigError
        ``no SuperNode connected in <CONNECT_TIMEOUT_S> s ...``.
    """
    timeout = CONNECT_TIMEOUT_S  # read at call time: tests shorten it
    client_manager.wait_for(max(1, n), timeout=timeout)
    if client_manager.num_available() == 0:
        raise ConfigError(f"no SuperNode connected in {timeout:g} s (the server's wait before round 1): start "
                          "SuperNodes against this SuperLink (flower-supernode), or set num-supernodes")


class ClientSampler:
    """Who each connected client is, and the seeded draws of the clients of a round.

    Parameters
    ----------
    cfg
        The validated run configuration (``seed``, ``client-ids``, ``holdout``,
        ``clients-per-round``, ``clients-per-eval``, the partitioning).
    check_sizes
        The method's own check of the clients' train rows, called once per number of
        partitions (the strategy's ``check_sizes`` hook, bound, so that a method's
        override is the one called).
    """

    def __init__(self, cfg: RunConfig, check_sizes: Callable[[list[int]], None]) -> None:
        self.cfg = cfg
        self.check_sizes = check_sizes
        self.client_info: dict[str, dict[str, Any]] = {}  # cid -> partition_id, domain, participant
        self.platforms: dict[str, str] = {}  # partition -> the CPU architecture its node reported (x86_64, aarch64)
        self._partition_rows: dict[tuple[int, int], int] = {}  # (partition id, partitions) -> train rows
        self._assigned: dict[tuple[int, int], int] = {}  # (partition id, partitions) -> labelled training rows
        self._lazy_asked = False  # client-ids=lazy: one node was asked for num-partitions (check_lazy)
        self.bound: dict[str, str] = {}  # node id -> the partition id it first reported (the server's word since)
        self.holder: dict[str, str] = {}  # partition id -> the node id bound to it
        self.refused: dict[str, str] = {}  # node id -> the partition it claimed while another node held it
        self.connected: set[str] | None = None  # node ids connected at the last draw (None: no draw yet)
        # the participants the last training draw was over (population): the n of central DP's q = m / n
        self.population = 0

    # ------------------------------------------------------------ identification
    def info(self, proxy: ClientProxy) -> dict[str, Any]:
        """A client's partition id, domain and participation (asked once, then cached)."""
        if proxy.cid not in self.client_info:
            if self.cfg.client_ids == "lazy":  # drawn in node-id order whatever it turns out to hold
                return {"partition_id": self.bound.get(proxy.cid, proxy.cid), "domain": None, "participant": True,
                        "order": (1, proxy.cid)}
            self.identify([proxy])
        return self.client_info.get(proxy.cid) or {"partition_id": f"node {proxy.cid}", "domain": None,
                                                   "participant": False, "order": (2, proxy.cid)}  # refused

    def identify(self, proxies: list[ClientProxy]) -> None:
        """Ask every client not seen before who it is, all at once, in parallel.

        A fedtext node answers from its node config without building the client
        (``fedtext.node.node.Node``), so this costs one small message per client,
        once per run; the domain is asked for only when ``holdout`` names domains.
        """
        new = [p for p in proxies if p.cid not in self.client_info and p.cid not in self.refused]
        if not new:
            return
        ins = GetPropertiesIns({"domain": int(self.needs_domain)})

        def ask(proxy: ClientProxy) -> dict[str, Any]:
            return self.properties(proxy, ins, "treated as a participant")

        with ThreadPoolExecutor(max_workers=min(PROPERTIES_WORKERS, len(new))) as pool:
            answers = list(pool.map(ask, new))
        # Once the federation's count is known (the nodes of the first draw agreed on it), a
        # node joining later with another count is refused, not a configuration error: one
        # node must not end a running federation. Disagreement in the first draw stays an
        # error (a misconfigured federation, before anything trained).
        established = self.num_partitions()
        for proxy, props in zip(new, answers, strict=True):
            count = props.get("num_partitions")
            if established is not None and isinstance(count, int) and count > 0 and count != established:
                self.refuse(proxy.cid, partition_name(props.get("partition_id")),
                            f"node {proxy.cid} reports num-partitions={count}, the federation's is {established}: "
                            "refused")
                continue
            pid = props.get("partition_id")
            if pid is not None and PARTITION_ID.check(pid) is not None:
                log.warning("client %s reported partition_id=%r in its properties: not a partition id; its replies "
                            "will say", proxy.cid, pid)
                pid = None
            self.learn(proxy, pid, props.get("domain") or None, props.get("num_partitions"))
            machine = props.get("platform")
            if isinstance(machine, str) and PLATFORM.fullmatch(machine) and proxy.cid in self.client_info:
                self.platforms[str(self.client_info[proxy.cid]["partition_id"])] = machine
        self.check_partitions({int(i["num_partitions"]) for i in self.client_info.values()
                               if i.get("num_partitions") is not None})

    @staticmethod
    def properties(proxy: ClientProxy, ins: GetPropertiesIns, otherwise: str) -> dict[str, Any]:
        """A node's answer to ``get_properties`` (``{}``, logged with ``otherwise``, if it fails)."""
        try:
            return dict(proxy.get_properties(ins, PROPERTIES_TIMEOUT_S, None).properties)
        except Exception as exc:  # noqa: BLE001 - a client without properties still trains
            log.warning("client %s did not report properties (%s); %s", proxy.cid, exc, otherwise)
            return {}

    def check_lazy(self, connected: list[ClientProxy]) -> None:
        """``client-ids=lazy``: the partition feasibility check of ``ask``
        (:meth:`check_partitions`), on the number of partitions one node reports.

        One message, once per run, to the node with the smallest node id; it is not
        cached as that node's identity, so the draws stay those over node ids. An
        infeasible split (a Dirichlet draw flwr-datasets cannot make, clients without rows)
        failed every client after the whole first round; it is now one configuration error
        on the server. A node that does not answer leaves the check undone (logged)."""
        if self._lazy_asked or not connected:
            return
        self._lazy_asked = True
        first = min(connected, key=lambda p: p.cid)
        props = self.properties(first, GetPropertiesIns({"domain": 0}),
                                "client-ids=lazy: the partitions are not checked on the server")
        parts = props.get("num_partitions")
        if isinstance(parts, int) and not isinstance(parts, bool) and parts > 0:
            self.check_partitions({parts})

    def learn(self, proxy: ClientProxy, pid: Any, domain: str | None = None, num_partitions: Any = None) -> None:
        """Cache who ``proxy`` is, from its properties, binding it to partition ``pid``
        (:meth:`claim`; a node refused there is not cached, so it is never drawn). ``pid``
        ``None`` (no properties): the node is named by its node id until a reply binds it."""
        parts = num_partitions if isinstance(num_partitions, int) and num_partitions > 0 else None
        if pid is not None and self.claim(proxy.cid, pid, parts) is not None:
            return  # refused (claim logged why)
        name = self.bound.get(proxy.cid, str(proxy.cid))
        self.client_info[proxy.cid] = {
            "partition_id": name,
            "num_partitions": parts,
            "domain": domain,
            "participant": self.cfg.is_participant(name, domain),
            "order": (0, int(name)) if pid is not None else (1, name),
        }

    def claim(self, cid: str, pid: Any, num_partitions: int | None = None) -> str | None:
        """Check node ``cid``'s report that it holds partition ``pid`` against the
        server's binding; bind it on its first report. Why the report is refused, or ``None``.

        With ``node-partitions`` (the operator's pins, :attr:`RunConfig.node_partition_map`)
        a node may claim only the partition it is pinned to; an unpinned node is refused.
        A bound node's report must name its partition (else the report's result is
        dropped; the node stays bound). An unbound node is refused -- never drawn, its
        results dropped -- when it claims a partition outside ``0..num-partitions-1`` (the
        nodes' agreed count, or ``num_partitions``), or one another connected node holds;
        in the second case until that holder leaves, when it may take the partition over
        (a restarted SuperNode with a new node id). A refusal is logged once per node and
        partition; the caller drops the report's result with the returned reason.
        """
        pid = partition_name(pid)
        held = self.bound.get(cid)
        if held is not None:
            return None if held == pid else f"claims partition {pid}, but node {cid} is partition {held} (its first report)"
        pins = self.cfg.node_partition_map
        if pins and pins.get(str(cid)) != pid:  # an unbound node: the operator's pin decides
            pinned = pins.get(str(cid))
            return self.refuse(cid, pid, f"node {cid} claims partition {pid}, but node-partitions pins it to "
                                         f"{pinned}: refused" if pinned is not None else
                               f"node {cid} claims partition {pid}, but node-partitions does not name it: refused")
        # the node's own count only while identifying the first draw's nodes (where nodes that
        # disagree are a configuration error, :meth:`check_partitions`); once established, the
        # federation's (:meth:`identify` refuses a later node reporting another count)
        parts = num_partitions or self.num_partitions()
        if parts is not None and (not pid.isdigit() or int(pid) >= parts):
            return self.refuse(cid, pid, f"node {cid} claims partition {pid}, outside 0..{parts - 1} "
                                         f"(num-partitions={parts}): refused")
        holder = self.holder.get(pid)
        if holder is not None:
            if self.connected is None or holder in self.connected:
                return self.refuse(cid, pid, f"node {cid} claims partition {pid}, which node {holder} holds: refused")
            log.warning("partition %s: node %s has left; node %s, reporting it, takes it over", pid, holder, cid)
            del self.bound[holder], self.holder[pid]
            self.client_info.pop(holder, None)  # if it comes back, it is asked again (and refused while cid holds pid)
        self.refused.pop(cid, None)
        self.bound[cid], self.holder[pid] = pid, cid
        if cid in self.client_info:  # known from properties without a partition id: named by it from now on
            info = self.client_info[cid]
            info.update(partition_id=pid, participant=self.cfg.is_participant(pid, info["domain"]))
        return None

    def refuse(self, cid: str, pid: str, reason: str) -> str:
        """Refuse node ``cid``'s claim of partition ``pid`` (logged once per node and
        partition): it is not drawn (:meth:`clients`) until :meth:`clients` hears it again."""
        if self.refused.get(cid) != pid:
            log.warning("%s; its results are dropped", reason)
        self.refused[cid] = pid
        return reason

    def num_partitions(self) -> int | None:
        """The federation's number of partitions, when the nodes reported one (``client-ids=ask``).
        With ``lazy`` none: the one node asked before round 1 (:meth:`check_lazy`) is not
        trusted to bound the others' claims (the smallest node id saying 1 would refuse all)."""
        counts = {i["num_partitions"] for i in self.client_info.values() if i.get("num_partitions") is not None}
        return next(iter(counts)) if len(counts) == 1 else None

    def partitions(self) -> list[int]:
        """The participant partitions of the federation: ``0..num-partitions-1`` less those
        ``holdout`` names when the nodes reported the count (``client-ids=ask``), else
        (``lazy``) the partitions the server has heard of; those never trained are listed at
        the end of the run (:meth:`fedtext.server.round_log.RoundLog.never_trained`)."""
        parts = self.num_partitions()
        ids = range(parts) if parts is not None else sorted(int(p) for p in self.holder if p.isdigit())
        domains = {self.bound[cid]: info["domain"] for cid, info in self.client_info.items() if cid in self.bound}
        return [i for i in ids if self.cfg.is_participant(i, domains.get(str(i)))]

    def info_if_known(self, cid: str | None) -> str:
        """What the records call node ``cid``: the partition it is bound to, else (no
        report yet) its node id."""
        if cid is None:
            return "?"
        if cid in self.bound:
            return self.bound[cid]
        known = self.client_info.get(cid)
        return known["partition_id"] if known else f"node {cid}"

    @property
    def needs_domain(self) -> bool:
        """Whether ``holdout`` names a domain (then clients report theirs)."""
        return any(not x.isdigit() for x in self.cfg.holdout_set)

    # ------------------------------------------------------------ partitions
    def check_partitions(self, counts: set[int]) -> None:
        """Partition feasibility, on the server, before a client trains (a ConfigError
        that fails the run in one line): the nodes agree on the number of partitions,
        and the train split cut into that many leaves every client a row (flwr-datasets'
        Dirichlet draw may be impossible, ``alpha=0.001`` on 10 rows; an iid cut of 10
        rows into 16 clients left some empty and their IndexError came back every round).
        Each count is checked once (the sizes are cached for :meth:`max_examples`)."""
        if len(counts) > 1:
            raise ConfigError(f"the nodes disagree on num-partitions: {sorted(counts)} (node configs)")
        for parts in counts:
            self.cfg.check_num_partitions(parts)  # attack-partitions within 0..parts-1
            if (0, parts) in self._partition_rows:
                continue
            sizes = partition_sizes(self.cfg, parts)
            empty = [pid for pid, n in enumerate(sizes) if n == 0]
            if empty:
                raise ConfigError(
                    f"partition={self.cfg.partition} leaves {len(empty)} of {parts} clients without training rows "
                    f"(first: partition {empty[0]}; {sum(sizes)} train rows): use fewer clients or more data")
            self.check_sizes(sizes)
            self._partition_rows.update({(pid, parts): n for pid, n in enumerate(sizes)})

    def max_examples(self, proxy: ClientProxy) -> int:
        """The most examples a client can train on: the rows of its partition when the
        server knows its partition id and the federation's number of partitions
        (``client-ids=ask``: both come with its properties; the server partitions the
        same train split the same way, :func:`fedtext.learning.data.partition_train`), else the
        whole train split (``client-ids=lazy``). FeS's pseudo labels come from the
        partition's own unlabelled rows, so gold + pseudo stays within it too."""
        key = self.known_partition(proxy)
        if key is not None:
            if key not in self._partition_rows:
                self._partition_rows[key] = len(partition_train(self.cfg, *key))
            return self._partition_rows[key]
        return len(labelled(self.cfg).splits.train)

    def assigned_examples(self, proxy: ClientProxy) -> tuple[int, str]:
        """The most examples a client's honest fit reply can claim, and what that bound is, in
        words for the drop reason.

        A client weighs its upload by its labelled training rows (``len(train_batch)``: FedAvg's
        n_k, the local dataset size): its partition, less its local test split, cut to
        ``shots-per-class`` per label (:func:`fedtext.learning.data.client_data`, seeded by the run seed
        and its partition id). The server, knowing the partition (``client-ids=ask``), makes the
        same cut and so knows n_k exactly: a claim above it is a lie, however far below the
        partition's rows (a fedprompt client that trained on 16 examples and claimed 400 of its
        480 rows held 96 % of the mean). Without a known partition (``client-ids=lazy``) the
        bound is the whole train split (:meth:`max_examples`). Cached per partition.
        """
        key = self.known_partition(proxy)
        if key is None:
            return self.max_examples(proxy), "the whole train split: the client's partition is unknown"
        if key not in self._assigned:
            self._assigned[key] = len(client_data(self.cfg, *key).train)
        shots = f"shots-per-class={self.cfg.shots_per_class} of " if self.cfg.shots_per_class else ""
        return self._assigned[key], f"the labelled training rows the server assigned it: {shots}partition {key[0]}"

    def known_partition(self, proxy: ClientProxy) -> tuple[int, int] | None:
        """``(partition id, partitions)`` of ``proxy`` when the server knows both, else ``None``.
        The server's binding only: a node named by its node id (no valid partition id reported)
        is never read as a partition."""
        pid, parts = self.bound.get(proxy.cid), self.client_info.get(proxy.cid, {}).get("num_partitions")
        if parts is not None and pid is not None and pid.isdigit() and int(pid) < int(parts):
            return int(pid), int(parts)
        return None

    # ------------------------------------------------------------ draws
    def clients(self, client_manager: ClientManager, participants_only: bool) -> list[ClientProxy]:
        """Connected clients (or only the participants) in partition-id order."""
        connected = list(client_manager.all().values())
        self.connected = {p.cid for p in connected}
        for cid, pid in list(self.refused.items()):
            if pid in self.holder and self.holder[pid] not in self.connected:  # its partition's holder left
                del self.refused[cid]  # hear it again: it may take the partition over
        if self.cfg.client_ids == "ask":
            self.identify(connected)
        else:
            self.check_lazy(connected)
        connected = [p for p in connected if p.cid not in self.refused]
        found = [p for p in connected if not participants_only or self.info(p)["participant"]]
        return sorted(found, key=lambda p: self.info(p)["order"])

    def sample_train(self, server_round: int, client_manager: ClientManager, first_round: bool,
                     record: RoundRecord) -> list[ClientProxy]:
        """``clients-per-round`` participants drawn with ``default_rng([seed, round, TRAIN_SALT])``.

        Too few participants in this process's first round (``first_round``) is a
        configuration error (``holdout`` or ``clients-per-round`` against the federation).
        Later it is a runtime fault, a node lost mid-run: the server has waited
        ``CONNECT_TIMEOUT_S`` for enough nodes, then the round goes on with the
        participants there are (none: the round trains nobody), and ``record`` notes the
        shortfall as a drop."""
        client_manager.wait_for(max(1, self.cfg.clients_per_round), timeout=CONNECT_TIMEOUT_S)
        participants = self.clients(client_manager, participants_only=True)
        self.population = max(len(self.partitions()), len(participants), self.population)
        n = self.cfg.clients_per_round or len(participants)
        if first_round and not self.cfg.clients_per_round and participants:  # every participant: n known only now
            self.cfg.check_krum(n, f"clients-per-round=0 with {n} participant clients")
        if n <= len(participants) and participants:
            if self.cfg.client_sampling == "poisson":
                return self.poisson_draw(participants, self.poisson_rate(), server_round)
            return self.draw(participants, n, server_round, TRAIN_SALT)
        connected = len(client_manager.all())
        if first_round:
            if not participants:
                raise ConfigError(f"holdout='{self.cfg.holdout}' leaves no participant client to train")
            raise ConfigError(
                f"clients-per-round={n} exceeds the {len(participants)} participant clients "
                f"({connected} connected, holdout='{self.cfg.holdout}')"
            )
        reason = f"node lost: {len(participants)} of {n} participants connected ({connected} nodes)"
        log.warning("round %d: %s; the round goes on with them", server_round, reason)
        record.drop("missing", reason)
        if self.cfg.client_sampling == "poisson":  # the absent ones were drawn at the same q and sent nothing
            return self.poisson_draw(participants, self.poisson_rate(), server_round)
        return self.draw(participants, len(participants), server_round, TRAIN_SALT)

    def poisson_rate(self) -> float:
        """q of ``client-sampling=poisson``: ``clients-per-round`` over :attr:`population`, the most
        participants the server has known (:meth:`partitions`, or with ``client-ids=lazy`` the connected
        participants: lazy's partitions are only those heard of), at most 1. A participant that has left
        keeps its q: it is drawn as often and sends nothing, so the rate the accountant composes
        (:func:`fedtext.trust.privacy.sampling_rate`, the one definition of the ratio) stays the one that ran."""
        return sampling_rate(self.cfg, self.population)

    def poisson_draw(self, pool: list[ClientProxy], q: float, server_round: int) -> list[ClientProxy]:
        """``client-sampling=poisson``: each client of ``pool`` joins on its own with probability ``q``
        (one uniform draw per client, in pool order, from ``default_rng([seed, round, TRAIN_SALT])``:
        a rerun of a seed draws the same cohort). The cohort's size is Binomial(len(pool), q), possibly 0;
        the sampled Gaussian mechanism that the accountant composes is exactly this draw (Mironov, Talwar
        and Zhang 2019, §3: each record included independently with probability q)."""
        rng = np.random.default_rng([self.cfg.seed, server_round, TRAIN_SALT])
        joins = rng.random(len(pool)) < q
        return [p for p, j in zip(pool, joins, strict=True) if j]

    def draw(self, pool: list[ClientProxy], n: int, server_round: int, salt: int) -> list[ClientProxy]:
        """``n`` clients of ``pool`` without replacement, kept in pool order, drawn with
        ``default_rng([seed, round, salt])``: a rerun of a seed draws the same clients, and
        each salt (training :data:`TRAIN_SALT`, FeS labelling
        :data:`fedtext.methods.fes.labels.LABEL_SALT`) is its own stream."""
        rng = np.random.default_rng([self.cfg.seed, server_round, salt])
        return [pool[i] for i in np.sort(rng.choice(len(pool), size=n, replace=False))]

    def sample_eval(self, server_round: int, client_manager: ClientManager) -> list[ClientProxy]:
        """The clients that test the global model this round: ``clients-per-eval`` of the
        connected clients (``RunConfig.eval_sample_size``; 0 = all), drawn with
        ``default_rng([seed, round, EVAL_SALT])``.

        Participants and non-participants are drawn separately, in proportion to their
        numbers and at least one of each group that exists, so that the P and NP
        accuracies of the record stay defined (20 clients, 5 held out, 8 per eval:
        round(8 * 15/20) = 6 participants + 2 non-participants).
        """
        everyone = self.clients(client_manager, participants_only=False)
        n = self.cfg.eval_sample_size
        if not n or n >= len(everyone):
            return everyone
        part = [p for p in everyone if self.info(p)["participant"]]
        rest = [p for p in everyone if not self.info(p)["participant"]]
        n_p = min(len(part), max(1 if part else 0, round(n * len(part) / len(everyone))))
        n_np = min(len(rest), n - n_p)
        if rest and n_np == 0:  # keep one non-participant
            n_p, n_np = n_p - 1, 1
        rng = np.random.default_rng([self.cfg.seed, server_round, EVAL_SALT])
        picked = [part[i] for i in rng.choice(len(part), size=n_p, replace=False)] + [
            rest[i] for i in rng.choice(len(rest), size=n_np, replace=False)]
        return sorted(picked, key=lambda p: self.info(p)["order"])
