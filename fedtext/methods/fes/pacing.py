"""FeS's curriculum pacing: the paces, AUG-E and the Pacer that picks the next one."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fedtext.common.config import ConfigError


# ------------------------------------------------------------------------ pacing
@dataclass(frozen=True)
class Pace:
    """``<f, n, k>`` (§3.1): label every ``f`` rounds, on ``n`` clients, ``k`` % more each time."""

    f: int
    n: int
    k: float

    def __str__(self) -> str:
        return f"{self.f}-{self.n}-{self.k:g}"

    def labels_round(self, server_round: int) -> bool:
        """Whether ``server_round`` (1-based) is a labelling round: the authors' ``gen > 0 and
        gen % f == 0`` (``pet/modeling.py``, ``train_fedpet``) with ``gen = server_round - 1``,
        the rounds the global model a client gets in ``server_round`` has trained. Never
        round 1 (no model has trained yet; it trains on the gold labels only), then rounds
        ``1 + f``, ``1 + 2f``, ..."""
        trained = server_round - 1
        return trained > 0 and trained % self.f == 0

    def target(self, unlabeled: int, server_round: int) -> int:
        """Pseudo labels a client labelled in ``server_round`` keeps: ``|U| k/100 i/f`` with
        ``i = server_round - 1`` rounds trained, floored, at most ``|U|`` (the authors'
        ``augmented_point = min(int(len(unlabeled_data) * aug_data_point / 100 *
        gen/infer_freq), len(unlabeled_data))``, in the same float order); 0 in rounds 0 and 1."""
        trained = max(server_round - 1, 0)
        return min(unlabeled, int(math.floor(unlabeled * self.k / 100 * trained / self.f)))


def parse_paces(text: str, key: str = "fes.paces") -> list[Pace]:
    """``"1-2-10,2-4-5"`` -> paces; one clear error for anything else."""
    paces = []
    for item in text.split(","):
        parts = item.strip().split("-")
        try:
            f, n, k = int(parts[0]), int(parts[1]), float(parts[2])
            if len(parts) != 3 or f < 1 or n < 1 or k <= 0:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError(f"{key}: '{item.strip()}' is not f-n-k with integers f, n >= 1 and k > 0 "
                              "(e.g. 1-2-10)") from None
        paces.append(Pace(f, n, k))
    return paces


def aug_e(delta_acc: float, pace: Pace, l_infer: float, l_train: float, eta: float = 1.0,
          theta: float = 1.0) -> float:
    """Eq. (1): ``eta * delta_acc / (C_infer + theta * C_train)``, ``C_infer = l_i * n / f``,
    ``C_train = l_t * k``; ``l_i``, ``l_t`` are seconds per inference / training batch."""
    cost = l_infer * pace.n / pace.f + theta * l_train * pace.k
    return eta * delta_acc / cost if cost > 0 else 0.0


@dataclass
class Pacer:
    """Algorithm 1's configurator: try each pace for ``r`` rounds, keep the best (by
    AUG-E) and the top-``t`` candidates; while running, a window of ``r`` rounds whose
    AUG-E falls below ``s`` re-tries the candidates and switches to their best. A window
    lasts ``max(r, f)`` rounds, so that every pace labels at least once in its trial: no
    pace labels in round 1 (:meth:`Pace.labels_round`), so round 1 belongs to no window
    (its accuracy is where the first one starts), and any ``f`` rounds from round 2 on
    hold exactly one labelling round of a pace ``<f, n, k>``.

    The server calls :meth:`pace` when it configures a round and :meth:`observe` after
    evaluating it; latencies come from the clients' measurements (:meth:`latency`).
    Every trial result and switch is returned as an event for the run record.
    """

    initial: list[Pace]
    trial_rounds: int = 1
    top: int = 2
    threshold: float = 0.0
    eta: float = 1.0
    theta: float = 1.0
    queue: list[Pace] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    current: Pace | None = None
    searching: bool = True
    candidates: list[Pace] = field(default_factory=list)
    window_start_acc: float | None = None
    window_rounds: int = 0
    l_infer: list[float] = field(default_factory=list)
    l_train: list[float] = field(default_factory=list)
    trials: list[dict] = field(default_factory=list)  # every (pace, AUG-E) ever measured

    def __post_init__(self) -> None:
        if self.current is None:
            self.queue = list(self.initial[1:])
            self.current = self.initial[0]

    def pace(self) -> Pace:
        """The pace of the next round."""
        return self.current

    def latency(self, l_infer: float | None, l_train: float | None) -> None:
        """Note a client's measured seconds per inference / training batch."""
        if l_infer:
            self.l_infer.append(float(l_infer))
        if l_train:
            self.l_train.append(float(l_train))

    def start(self, accuracy: float) -> None:
        """The accuracy the first window starts from (round 0)."""
        if self.window_start_acc is None:
            self.window_start_acc = accuracy

    def observe(self, accuracy: float, server_round: int | None = None) -> dict[str, float]:
        """After round ``server_round``: close the window when ``r`` rounds are done; returns
        the events (``aug_e``, ``trial_done``, ``chosen``, ``switch``) as record metrics.
        After round 1, which no pace labels in, the first window starts from ``accuracy``
        instead (no event)."""
        self.start(accuracy)
        if server_round == 1:
            self.window_start_acc, self.window_rounds = accuracy, 0
            return {}
        self.window_rounds += 1
        events: dict[str, float] = {}
        # A window spans at least one labelling cycle (f rounds): a pace with f > r tried
        # for r rounds might not have labelled at all, and its AUG-E would say nothing.
        if self.window_rounds < max(self.trial_rounds, self.current.f):
            return events
        e = aug_e(accuracy - self.window_start_acc, self.current,
                  float(np.mean(self.l_infer)) if self.l_infer else 0.0,
                  float(np.mean(self.l_train)) if self.l_train else 0.0, self.eta, self.theta)
        events["aug_e"] = e
        self.trials.append({"pace": str(self.current), "aug_e": e, "searching": self.searching})
        if self.searching:
            self.scores[str(self.current)] = e
            events["trial_done"] = 1.0
            if self.queue:
                self.current = self.queue.pop(0)
            else:
                tried = sorted(self.scores, key=lambda p: -self.scores[p])
                by_name = {str(p): p for p in [*self.initial, *self.candidates]}
                self.current = by_name[tried[0]]
                self.candidates = [by_name[p] for p in tried[: self.top]]
                self.searching = False
                events["chosen"] = 1.0
        elif e < self.threshold:
            # Alg. 1 line 8: repeat the search over the top-t candidates only
            self.queue = list(self.candidates[1:])
            self.current = self.candidates[0]
            self.scores = {}
            self.searching = True
            events["switch"] = 1.0
        self.window_start_acc, self.window_rounds = accuracy, 0
        return events
