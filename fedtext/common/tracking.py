"""Experiment trackers: TensorBoard, Weights & Biases, MLflow, fed from the run record.

``tracker=tensorboard`` (or ``wandb``, ``mlflow``, or several, comma-separated) sends
what :class:`fedtext.records.RunRecorder` writes to ``rounds.jsonl`` and
``summary.json`` to that tool as well; off by default (``tracker=""``). Nothing is
computed for a tracker but running byte totals: it gets the same round record, so its
charts and the run folder agree.

* Per round (step = the round number, 0 = the initial model): every field of the round
  record that is a finite number, under a ``group/name`` tag (:data:`TAGS`:
  ``accuracy/global``, ``accuracy/client_mean``, ``loss/train``, ``bytes/up``,
  ``time/round_time_s``, ``memory/server_rss_mb``, ...; TensorBoard and W&B show one
  section per group), each numeric ``method_metrics`` entry as ``method/<name>``
  (:func:`round_scalars`), and the running totals ``bytes/cum_up``, ``bytes/cum_down``,
  ``bytes/cum_total`` (:class:`Trackers`).
* TensorBoard only, a second tag set against communication: the ``accuracy/*`` and
  ``loss/*`` tags again as ``vs_bytes/<tag>`` with step = cumulative bytes up + down
  (TensorBoard's x-axis is the step; W&B and MLflow can plot against ``bytes/cum_total``).
* At the start: the run-config (W&B config, MLflow params, TensorBoard text).
* At the end: the summary (its numbers as ``summary/<name>``, its status).

Where each writes (docs/tracking.md):

* ``tensorboard``: event files in the run folder itself, ``<run-dir>/events.out.tfevents.*``,
  so ``tensorboard --logdir runs/`` names each run by its folder, the run id;
* ``wandb``: a W&B run named after the run id, project ``$WANDB_PROJECT`` or
  ``fedtext``, local files in ``<run-dir>/wandb/``; ``WANDB_MODE=offline`` keeps it
  local (``wandb sync`` uploads it later);
* ``mlflow``: an MLflow run named after the run id in experiment
  ``$MLFLOW_EXPERIMENT_NAME`` or ``fedtext``, at ``$MLFLOW_TRACKING_URI`` or
  ``sqlite:///<output-dir>/mlflow.db``.

Each tracker is an optional extra (``pip install -e ".[tensorboard]"``); a tracker whose
package is missing is a one-line :class:`fedtext.common.config.ConfigError` before training
(:func:`check_installed`). A tracker that fails later (a full disk, a lost MLflow
server) logs one warning and is dropped; the run goes on (:class:`Trackers`).

Adding a tracker: a :class:`Tracker` subclass with ``name``, ``module`` and ``extra``,
decorated with :func:`register`, and its extra in pyproject.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from fedtext.common.errors import ConfigError  # not fedtext.common.config's name: config imports this module

log = logging.getLogger("fedtext")

NONE = ("", "none")  # tracker values that turn tracking off


class Tracker:
    """One experiment tracker's run. Subclasses start it in ``__init__`` (may raise: the
    tracker is then left out, with a warning) and override the three hooks.

    ``name`` is the ``tracker=`` value, ``module`` the package it imports, ``extra``
    the pyproject extra that installs it.
    """

    name: ClassVar[str] = ""
    module: ClassVar[str] = ""
    extra: ClassVar[str] = ""

    def __init__(self, run_dir: Path, run_id: str, config: Mapping[str, Any]) -> None:
        self.run_dir, self.run_id, self.config = Path(run_dir), run_id, dict(config)

    def log_round(self, step: int, scalars: Mapping[str, float]) -> None:
        """One round's scalars at ``step`` (the round number)."""

    def finish(self, summary: Mapping[str, Any]) -> None:
        """The run's summary (``summary.json``); the tracker's run ends."""


TRACKERS: dict[str, type[Tracker]] = {}


def register(cls: type[Tracker]) -> type[Tracker]:
    """Class decorator: ``TRACKERS[cls.name] = cls``."""
    TRACKERS[cls.name] = cls
    return cls


# ------------------------------------------------------------------ config
def parse(value: str) -> tuple[str, ...]:
    """The tracker names of a ``tracker=`` value: ``""``/``"none"`` -> ``()``,
    ``"tensorboard, mlflow"`` -> ``("tensorboard", "mlflow")`` (duplicates once).

    Raises ``ConfigError`` (one line) for a name not in :data:`TRACKERS`.
    """
    names: list[str] = []
    for part in str(value).split(","):
        name = part.strip().lower()
        if name in NONE:
            continue
        if name not in TRACKERS:
            raise ConfigError(f"unknown tracker '{name}'; choose from: {', '.join(TRACKERS)} "
                              f"(comma-separated for several, \"\" = none)")
        if name not in names:
            names.append(name)
    return tuple(names)


def check_installed(names: Sequence[str]) -> None:
    """Raise ``ConfigError`` (one line) naming the pip extra of the first tracker whose
    package is not installed (looked up, not imported)."""
    for name in names:
        cls = TRACKERS[name]
        if importlib.util.find_spec(cls.module) is None:
            raise ConfigError(f"tracker={name} needs the {cls.module} package, which is not installed: "
                              f"pip install -e \".[{cls.extra}]\" (or pip install 'fedtext[{cls.extra}]')")


# ------------------------------------------------------------------ records
def finite(v: Any) -> float | None:
    """``v`` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


# A round field's tag in the trackers: ``group/name``, the convention by which TensorBoard
# (and W&B) put charts into one section per group, so accuracy, loss, bytes, time and
# memory sit together instead of in one alphabetical list of 30 names. Every numeric field
# of fedtext.records.ROUND_FIELDS has one (tests/unit/test_tracking.py checks); a field
# this table does not know yet (a newer writer's) goes to other/<field>, never lost.
TAG_GROUPS: dict[str, dict[str, str]] = {
    "accuracy": {"global_accuracy": "global", "client_accuracy_mean": "client_mean",
                 "client_accuracy_std": "client_std"},
    "loss": {"global_loss": "global", "train_loss": "train"},
    "bytes": {"bytes_up": "up", "bytes_down": "down", "bytes_up_per_client": "up_per_client",
              "bytes_down_per_client": "down_per_client", "eval_bytes_down": "eval_down", "resync_bytes": "resync"},
    "queries": {"model_queries": "model", "server_queries": "server"},
    "clients": {"num_clients": "aggregated", "clients_evaluated": "evaluated", "client_failures": "failed"},
    "time": {f: f for f in ("round_time_s", "wall_time_s", "sim_time_s", "client_fit_s", "client_fit_s_max",
                            "client_eval_s", "client_load_s", "server_eval_s", "busy_s", "startup_s", "overhead_s")},
    "memory": {f: f for f in ("client_peak_rss_mb", "client_peak_gpu_mb", "server_rss_mb")},
}
TAGS: dict[str, str] = {field: f"{group}/{name}" for group, names in TAG_GROUPS.items() for field, name in names.items()}
OTHER = "other"  # the group of a numeric field TAGS does not name
METHOD = "method"  # the group of a method's own metrics (method_metrics)
CUMULATIVE = {"bytes/cum_up": "bytes_up", "bytes/cum_down": "bytes_down"}  # running totals Trackers adds
CUM_TOTAL = "bytes/cum_total"  # up + down: the dashboard's x = cumulative bytes (simulations.dashboard_data)
BYTES_STEP_GROUPS = ("accuracy", "loss")  # TensorBoard logs these again with step = CUM_TOTAL ...
BYTES_STEP_PREFIX = "vs_bytes"  # ... as vs_bytes/<tag> (one more section)


def tag_of(field: str) -> str:
    """The tracker tag of a round field: :data:`TAGS`, else ``other/<field>``."""
    return TAGS.get(field, f"{OTHER}/{field}")


def round_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of a ``rounds.jsonl`` record: its finite numeric fields under their
    tags (:func:`tag_of`; ``round`` itself is the step, not a scalar) and
    ``method/<name>`` for each finite numeric method metric, grouped in :data:`TAG_GROUPS`
    order (the order a tracker first sees them), then a DP run's ``privacy/<name>`` for each
    finite number of its privacy entry (``privacy/epsilon``: the ε spent so far). ``None``
    (not measured this round; ε without noise: no bound) is left out."""
    values = {tag_of(k): x for k, v in record.items() if k != "round" and (x := finite(v)) is not None}
    order = {group: i for i, group in enumerate(TAG_GROUPS)}
    out = dict(sorted(values.items(), key=lambda kv: order.get(kv[0].split("/", 1)[0], len(order))))
    metrics = record.get("method_metrics")
    if isinstance(metrics, Mapping):
        out.update({f"{METHOD}/{k}": x for k, v in metrics.items() if (x := finite(v)) is not None})
    entry = record.get("privacy")
    if isinstance(entry, Mapping):
        out.update({f"privacy/{k}": x for k, v in entry.items() if (x := finite(v)) is not None})
    return out


def summary_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """``summary/<name>`` for each finite number of a ``summary.json`` (but ``seed``, which
    names the run)."""
    return {f"summary/{k}": x for k, v in summary.items() if k != "seed" and (x := finite(v)) is not None}


class Trackers:
    """The trackers of one run, each kept apart: one that fails to start, log or finish
    logs one warning (naming it and the error) and is dropped; the run goes on.

    Parameters
    ----------
    names
        Tracker names (:func:`parse`); their packages are checked by :func:`check_installed`
        before this is built.
    run_dir, run_id, config
        The run folder, its id and the run-config written to ``config.json``.
    previous
        The rounds already recorded (a resumed run's kept rounds): not sent again, but
        counted in the running byte totals, so ``bytes/cum_*`` go on where they stopped.
    """

    def __init__(self, names: Sequence[str], run_dir: Path, run_id: str, config: Mapping[str, Any],
                 previous: Sequence[Mapping[str, Any]] = ()) -> None:
        self.active: list[Tracker] = []
        # running totals, as the dashboard's bytes axes add them: every round's fit uploads
        # and downloads (round 0 sends none; eval_bytes_down, a measurement, is not counted)
        self.totals = dict.fromkeys(CUMULATIVE, 0.0)
        for record in previous:
            self._count(record)
        self.failed: dict[str, str] = {}  # name -> the error that dropped it
        for name in names:
            try:
                self.active.append(TRACKERS[name](Path(run_dir), run_id, config))
            except Exception as exc:  # noqa: BLE001 - a tracker must not stop the run
                self._drop(name, "start", exc)

    def __bool__(self) -> bool:
        return bool(self.active)

    def _drop(self, name: str, phase: str, exc: BaseException) -> None:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        self.failed[name] = f"{type(exc).__name__}: {first}"
        log.warning("fedtext: tracker %s failed to %s (%s); the run goes on without it", name, phase,
                    self.failed[name])

    def _each(self, phase: str, call) -> None:
        for tracker in list(self.active):
            try:
                call(tracker)
            except Exception as exc:  # noqa: BLE001
                self.active.remove(tracker)
                self._drop(tracker.name, phase, exc)

    def _count(self, record: Mapping[str, Any]) -> None:
        for tag, field in CUMULATIVE.items():
            self.totals[tag] += finite(record.get(field)) or 0.0

    def log_round(self, record: Mapping[str, Any]) -> None:
        """Send one ``rounds.jsonl`` record (:func:`round_scalars`) and the running byte
        totals (``bytes/cum_up``, ``bytes/cum_down``, :data:`CUM_TOTAL` = their sum) to
        every tracker."""
        self._count(record)
        if not self.active:
            return
        step, scalars = int(record.get("round", 0)), round_scalars(record)
        scalars.update(self.totals)
        scalars[CUM_TOTAL] = sum(self.totals.values())
        self._each("log a round", lambda t: t.log_round(step, scalars))

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Send the summary and end every tracker's run (once)."""
        self._each("finish", lambda t: t.finish(summary))
        self.active = []


def _text(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str, sort_keys=True)


# ---------------------------------------------------------------- trackers
@register
class TensorBoardTracker(Tracker):
    """Event files in the run folder itself (torch's ``SummaryWriter``), flushed every
    round so that ``tensorboard --logdir runs/`` shows a run as it goes.

    TensorBoard names a run by the folder holding its event files, relative to
    ``--logdir``: written into ``<run-dir>/`` (not a ``tensorboard/`` folder inside it,
    which made every run ``<run-id>/tensorboard``) the run shows as ``<run-id>``. Besides
    the round tags (step = round), the ``accuracy/*`` and ``loss/*`` tags go again as
    ``vs_bytes/<tag>`` with step = cumulative bytes up + down (:data:`CUM_TOTAL`):
    TensorBoard's only x-axes are the step and the time, and these papers compare
    accuracy against communication.
    """

    name, module, extra = "tensorboard", "tensorboard", "tensorboard"

    def __init__(self, run_dir: Path, run_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(run_dir, run_id, config)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(self.run_dir))
        self.writer.add_text("config", f"```\n{_text(self.config)}\n```", 0)
        self.writer.flush()
        self.last_step = 0

    def log_round(self, step: int, scalars: Mapping[str, float]) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        if CUM_TOTAL in scalars:  # a step is an integer: bytes are whole
            by_bytes = int(scalars[CUM_TOTAL])
            for tag, value in scalars.items():
                if tag.split("/", 1)[0] in BYTES_STEP_GROUPS:
                    self.writer.add_scalar(f"{BYTES_STEP_PREFIX}/{tag}", value, by_bytes)
        self.writer.flush()
        self.last_step = step

    def finish(self, summary: Mapping[str, Any]) -> None:
        step = int(finite(summary.get("rounds_done")) or self.last_step)
        for tag, value in summary_scalars(summary).items():
            self.writer.add_scalar(tag, value, step)
        self.writer.add_text("summary", f"```\n{_text(summary)}\n```", step)
        self.writer.close()


@register
class WandbTracker(Tracker):
    """A W&B run: config = the run-config, ``run.log`` per round, summary at the end.

    Online mode needs a W&B login (``wandb login`` or ``WANDB_API_KEY``); without one
    the tracker is left out with a warning instead of W&B's interactive prompt blocking
    the server. ``WANDB_MODE=offline`` writes the run under ``<run-dir>/wandb/`` only.
    """

    name, module, extra = "wandb", "wandb", "wandb"

    def __init__(self, run_dir: Path, run_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(run_dir, run_id, config)
        import wandb

        mode = os.environ.get("WANDB_MODE", "online").lower()
        if mode not in ("offline", "disabled", "dryrun") and not wandb.login(prompt=False, verify=False):
            raise RuntimeError("no W&B login (run `wandb login`, set WANDB_API_KEY, or WANDB_MODE=offline)")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "fedtext"), name=run_id, dir=str(self.run_dir),
            config=self.config, reinit="create_new",  # several runs in one process stay apart
            settings=wandb.Settings(console="off", silent=True),  # leave Flower's console alone
        )

    def log_round(self, step: int, scalars: Mapping[str, float]) -> None:
        self.run.log(dict(scalars), step=step)

    def finish(self, summary: Mapping[str, Any]) -> None:
        self.run.summary.update({k: v for k, v in summary.items() if v is not None})
        self.run.finish(exit_code=0 if summary.get("status") == "finished" else 1)


def mlflow_uri(run_dir: Path) -> str:
    """Where MLflow runs go: ``$MLFLOW_TRACKING_URI``, else a SQLite store beside the runs,
    ``sqlite:///<output-dir>/mlflow.db`` (MLflow 3 refuses a new ``./mlruns`` file store)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(run_dir).resolve().parent / 'mlflow.db'}"


_MLFLOW_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")


@register
class MLflowTracker(Tracker):
    """An MLflow run (through ``MlflowClient``: no global active run): params = the
    run-config, metrics per round, the summary's numbers as ``summary/<name>`` and its
    status as the run's status (``FINISHED`` / ``FAILED``) and tag ``fedtext.status``."""

    name, module, extra = "mlflow", "mlflow", "mlflow"
    BATCH = 100  # params per log_batch call (MLflow's limit)

    def __init__(self, run_dir: Path, run_id: str, config: Mapping[str, Any]) -> None:
        super().__init__(run_dir, run_id, config)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=mlflow_uri(self.run_dir))
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "fedtext")
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        self.mlflow_run = self.client.create_run(experiment_id, run_name=run_id,
                                                 tags={"fedtext.run_dir": str(self.run_dir)})
        self.id = self.mlflow_run.info.run_id
        params = [Param(_MLFLOW_KEY.sub("_", k), str(v)[:6000]) for k, v in sorted(self.config.items())]
        for i in range(0, len(params), self.BATCH):
            self.client.log_batch(self.id, params=params[i : i + self.BATCH])
        self.last_step = 0

    def _metrics(self, scalars: Mapping[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(_MLFLOW_KEY.sub("_", k), v, now, step) for k, v in scalars.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.id, metrics=metrics[i : i + 1000])

    def log_round(self, step: int, scalars: Mapping[str, float]) -> None:
        self._metrics(scalars, step)
        self.last_step = step

    def finish(self, summary: Mapping[str, Any]) -> None:
        step = int(finite(summary.get("rounds_done")) or self.last_step)
        self._metrics(summary_scalars(summary), step)
        status = str(summary.get("status"))
        self.client.set_tag(self.id, "fedtext.status", status)
        if summary.get("error"):
            self.client.set_tag(self.id, "fedtext.error", str(summary["error"])[:5000])
        self.client.set_terminated(self.id, status="FINISHED" if status == "finished" else "FAILED")
