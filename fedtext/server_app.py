"""ServerApp: run-config -> RunConfig (validated once) -> the strategy the method's config names.

The method's config (``fedtext.common.registry.METHODS[method]``) names its strategy as a
``"strategies.<module>:<Class>"`` string; this module resolves it (:func:`strategy_class`),
the one core module besides the ClientApp that imports a plug-in.

Everything that can be wrong with a run (method, numbers, data path, model, task,
partition vs. number of clients) is checked here, before the first round, and
reported as one line (``fedtext: configuration error: ...``). A run that cannot start
still leaves a record, ``failed`` with that line, in ``output-dir``: ``flwr run`` (Flower
1.41) exits 0 whatever the ServerApp did, so the record is where a run's fate is read
(``python -m simulations.status``).

``resume=<run-id>`` continues the run ``<output-dir>/<run-id>`` from its last checkpoint
(:mod:`fedtext.server.checkpoint`) in the same folder: same run-config (only
``num-server-rounds`` may grow), rounds after the checkpoint are redone.
"""

from __future__ import annotations

import json
import logging
import tempfile
import timeit
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flwr.common import Context
from flwr.server import Grid, Server, ServerApp, ServerAppComponents, ServerConfig, SimpleClientManager
from flwr.server.history import History

from fedtext.common import comm

from fedtext.server import checkpoint, secagg
from fedtext.common.components import resolve
from fedtext.common.config import DERIVED_KEYS, ConfigError, RunConfig
from fedtext.learning.data import labelled, warn_about_texts
from fedtext.server.grid import ReplyPollingGrid
from fedtext.backbone.architectures import max_tokens
from fedtext.learning.model import PromptModel
from fedtext.common.progress import setup_logging
from fedtext.common.quiet import quiet_flower, quiet_ray_tip
from fedtext.records.probes import fab_fields
from fedtext.records.reader import read_config
from fedtext.records.signals import exit_reason, install_signal_handlers
from fedtext.records.writer import RunRecorder, run_folder_name
from fedtext.common.registry import METHODS
from fedtext.server.sampling import wait_for_nodes
from fedtext.server.strategy import Evaluator, FedTextStrategy
from fedtext.common.tracking import check_installed

log = logging.getLogger("fedtext")
quiet_ray_tip()  # in case this module loads first; fedtext.client_app's import is the one before ray.init


def strategy_class(method: str) -> type[FedTextStrategy]:
    """The strategy class of a registered method (its config's ``strategy`` string, imported).

    Parameters
    ----------
    method
        A key of :data:`fedtext.common.registry.METHODS`.

    Returns
    -------
    type[FedTextStrategy]
        The class, e.g. ``strategies.fedavg.FedAvgStrategy`` for ``"fedavg"``.
    """
    return resolve(METHODS[method].strategy)


class RecordingServer(Server):
    """Flower's Server, marking the run record ``failed`` if training raises, and
    starting after the checkpoint's round when the strategy was restored from one."""

    def __init__(self, *, recorder: RunRecorder, **kwargs) -> None:
        super().__init__(**kwargs)
        self.recorder = recorder
        self.grid: Grid | None = None  # the run's grid (FabAwareServerApp sets it): secagg=true's rounds use it

    def fit_round(self, server_round: int, timeout: float | None):
        """Flower's fit round, or with ``secagg=true`` the same round through Flower's SecAgg+
        workflow on the run's grid (:func:`fedtext.server.secagg.fit_round`; each stage waits at most
        ``round-timeout-s``). Everything around the fit round (round 0, the evaluations, resume,
        the record's ``failed``/``finished``) is this server's in both cases."""
        if not self.strategy.cfg.secagg:
            result = super().fit_round(server_round, timeout)
            if result is None and self.strategy.poisson_release() and not self.strategy.sampled_this_round:
                # Flower cancels a round that sampled nobody ("configure_fit: no clients selected"); a
                # Poisson round under central DP still releases its noise (FedTextStrategy.poisson_release)
                parameters, metrics = self.strategy.aggregate_fit(server_round, [], [])
                return parameters, metrics, ([], [])
            return result
        if self.grid is None:
            raise ConfigError("secagg=true runs through Flower's grid (flwr run, python -m simulations.simulate); "
                              "this runner has none")
        return secagg.fit_round(self, self.grid, server_round)

    def fit(self, num_rounds: int, timeout: float | None):
        try:
            # Flower's client manager asks the grid for the nodes: those connected as training starts
            self.recorder.note_launch(nodes_at_start=self._client_manager.num_available())
            if self.strategy.resumed_round:
                return self._fit_from(self.strategy.resumed_round + 1, num_rounds, timeout)
            return super().fit(num_rounds, timeout)
        except ConfigError as exc:
            log.error("fedtext: configuration error: %s", exc)
            self.recorder.finish("failed", error=str(exc))
            raise
        except BaseException as exc:
            self.recorder.finish("failed", error=exit_reason(exc))
            raise

    def _fit_from(self, first: int, num_rounds: int, timeout: float | None) -> tuple[History, float]:
        """Flower's ``Server.fit`` round loop (flwr/server/server.py ``fit``, the
        ``for current_round in range(1, num_rounds + 1)`` block, Flower 1.41-1.42), started
        at round ``first`` instead of 1.

        Why it repeats Flower: ``Server.fit`` always starts at round 1 and first calls
        ``_get_initial_parameters`` and evaluates round 0; a resumed run must do neither
        (its global arrays, strategy state and round counter come from the checkpoint, and
        round 0 is already in its record). What it leaves out of Flower's loop: the
        ``[ROUND n]`` and ``fit progress`` log lines (fedtext logs its own round line) and
        the ``History`` entries other than the centralized loss (fedtext's record is the
        run's history; ``History`` is returned only because ``fit``'s signature has it).
        What it adds: the wait for ``clients-per-round`` clients that
        ``initialize_parameters`` would have done."""
        strategy = self.strategy
        if strategy.cfg.clients_asked:  # as initialize_parameters would
            wait_for_nodes(self._client_manager, strategy.cfg.clients_asked)
            strategy.cfg.check_num_clients(self._client_manager.num_available())
        self.parameters = comm.encode(strategy.global_arrays)
        history, start = History(), timeit.default_timer()
        for current_round in range(first, num_rounds + 1):
            res_fit = self.fit_round(server_round=current_round, timeout=timeout)
            if res_fit is not None and res_fit[0]:
                self.parameters = res_fit[0]
            res_cen = strategy.evaluate(current_round, parameters=self.parameters)
            if res_cen is not None:
                history.add_loss_centralized(server_round=current_round, loss=res_cen[0])
            self.evaluate_round(server_round=current_round, timeout=timeout)
        return history, timeit.default_timer() - start


def build(cfg: RunConfig, launch: Mapping[str, Any] | None = None) -> tuple[RecordingServer, ServerConfig]:
    """Load data and model, make the strategy and the server (raises ``ConfigError``);
    ``launch`` (:data:`fedtext.records.LAUNCH_FIELDS`) goes into the run's provenance."""
    check_output_dir(cfg.output_dir)  # before data and model load: a bad path costs no minutes
    check_installed(cfg.trackers)  # tracker=wandb without wandb installed: one line, now
    # the task and the labels 0..C-1 (string labels mapped by name); the data's classes must be the task's
    data = labelled(cfg)
    warn_about_texts(cfg)  # a test split that repeats train texts, a text column of numbers or labels
    task, splits = data.task, data.splits
    if splits.train["label"].nunique() < 2:
        log.warning("fedtext: the training data has a single class (%s): every method will learn a constant",
                    splits.train["label"].iloc[0])
    if cfg.post_tune_steps and not issubclass(cfg.method_config.model_class(), PromptModel):
        raise ConfigError(f"post-tune-steps tunes a prompt; method {cfg.method} has none (set post-tune-steps=0)")
    for name in sorted(cfg.holdout_set - {x for x in cfg.holdout_set if x.isdigit()}):
        if name not in splits.domains:
            raise ConfigError(
                f"holdout '{name}' is neither a partition id nor a domain of the dataset "
                f"(domains: {', '.join(splits.domains)})"
            )
        if cfg.partition != "domain":
            raise ConfigError(f"holdout by domain name ('{name}') needs partition=domain")
    evaluator = Evaluator(cfg, task)
    check_prompt_fits(cfg, evaluator.backbone)
    model = cfg.method_config.model_class()(cfg, evaluator.backbone)
    trainable = model.trainable_parameters()
    # resolved-labels: a JSON list as text (the run-config holds single values; a name may hold a comma)
    config = {**cfg.to_run_config(), "resolved-task": task.name,
              "resolved-labels": json.dumps(list(data.label_names)), "trainable-parameters": int(trainable)}
    limits = strategy_class(cfg.method).checkpoint_limits(cfg, model)
    ckpt = resume_checkpoint(cfg, config, limits) if cfg.resume else None
    recorder = RunRecorder(cfg.output_dir, config, run_id=cfg.resume or None, resume=bool(cfg.resume),
                           keep_rounds=ckpt.round if ckpt else None, launch=launch, trackers=cfg.trackers)
    log.info(
        "fedtext: method=%s dataset=%s (%d train / %d test, server evaluates %d) task=%s model=%s%s head=%s",
        cfg.method, cfg.dataset_path or cfg.dataset, len(splits.train), len(splits.test),
        evaluator.num_examples, task.name, cfg.model, "" if cfg.weights == "pretrained" else f" weights={cfg.weights}",
        cfg.resolved_head,
    )
    if cfg.weights == "random":
        log.warning("fedtext: weights=random: seeded random weights of %s's architecture, for plumbing and cost "
                    "runs; bytes, memory and time are real, accuracy is not a result", cfg.model)
    if data.source != f"task {task.name}":
        log.info("fedtext: %d classes, label ids 0..%d = %s (names from %s)", task.num_classes, task.num_classes - 1,
                 ", ".join(data.label_names), data.source)
    strategy = strategy_class(cfg.method)(cfg, task, evaluator, recorder)
    if ckpt is not None:
        strategy.restore(ckpt)
    server = RecordingServer(recorder=recorder, client_manager=SimpleClientManager(), strategy=strategy)
    return server, ServerConfig(num_rounds=cfg.num_server_rounds, round_timeout=cfg.round_timeout_s or None)


def check_output_dir(output_dir: str) -> None:
    """``output-dir`` must be a folder fedtext can create and write in (one line if not).
    Tried by making it and a file in it; what the try made is removed again, so a run
    refused later for another reason leaves nothing behind."""
    root = Path(output_dir).expanduser().absolute()
    made = [d for d in (root, *root.parents) if not d.exists()]  # deepest first
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".fedtext-write-check-"):
            pass
    except OSError as exc:
        raise ConfigError(f"output-dir={output_dir}: cannot write run records there "
                          f"({exc.strerror or type(exc).__name__})") from None
    finally:
        for d in made:
            try:
                d.rmdir()
            except OSError:  # never made, or no longer empty
                pass


def check_prompt_fits(cfg: RunConfig, backbone: Any) -> None:
    """A soft prompt of ``prompt-length`` natural tokens must exist, and every sequence must fit
    the model's positions (else numpy/torch fail deep inside): ``[CLS]``, the positions the
    method inserts after it (:meth:`fedtext.learning.model.Model.inserted_positions`: a prompt, P-tuning
    v2's placeholders, FedDPG's generated vectors), the head's template, ``max-length`` text tokens
    and ``[SEP]``, within the tokens the encoder's position table holds
    (:func:`fedtext.backbone.architectures.max_tokens`: BERT's 512; RoBERTa's and MPNet's 514
    positions start after the padding index, 512 tokens)."""
    model = cfg.method_config.model_class()
    if model.natural_prompt:
        natural = len(backbone.natural_token_ids())
        if cfg.prompt_length > natural:
            raise ConfigError(f"prompt-length={cfg.prompt_length} exceeds the {natural} natural vocabulary tokens "
                              f"of {cfg.model} that initialise a prompt")
    limit = max_tokens(backbone.encoder)
    head = backbone.head_impl
    special = 2 + len(head.prefix_ids) + len(head.suffix_ids)  # [CLS], [SEP] and the template around the text
    key, inserted = model.inserted_positions(cfg)
    if limit and inserted + cfg.max_length + special > limit:
        what = f"{key}={inserted} + " if inserted else ""
        raise ConfigError(f"{what}max-length={cfg.max_length} + {special} special and template tokens exceeds the "
                          f"{limit} positions of {cfg.model}; lower {'one of them' if inserted else 'max-length'}")


RESUMABLE_CHANGES = checkpoint.RESUMABLE_CHANGES  # keys a resumed run may change


def resume_checkpoint(cfg: RunConfig, config: dict[str, Any], limits: checkpoint.Limits,
                      read: Callable[..., checkpoint.Checkpoint] = checkpoint.load) -> checkpoint.Checkpoint:
    """The checkpoint ``resume=`` names, after checking, before anything is loaded from it,
    that the run folder lies inside ``output-dir`` and that the run-config matches the run's.

    :func:`fedtext.server.checkpoint.load` then refuses, before anything is decompressed past
    ``limits`` (the run's model's: ``FedTextStrategy.checkpoint_limits``) or unpickled, a
    checkpoint whose signature does not verify or that belongs to another run: its run id
    must be the folder's, its method ``cfg.method``, its config hash that of the run-config
    in ``config.json`` (which the resuming run-config was just compared with). ``read``:
    :func:`fedtext.server.checkpoint.load`, or its ``peek`` for the same checks without the
    arrays and state (a runner's check before it starts the resume)."""
    out = Path(cfg.output_dir).expanduser().resolve()
    run_dir = out / cfg.resume
    if not run_dir.resolve().is_relative_to(out) or run_dir.resolve() == out:
        raise ConfigError(f"resume='{cfg.resume}' resolves to {run_dir.resolve()}, not a run folder inside "
                          f"output-dir {out}: refused")
    # the records reader's checks (bounded in size, JSON, a run-config object of single values): a garbled or huge
    # config.json is one line saying why, not read whole, not "no run record"
    meta, problem = read_config(run_dir / "config.json", out)
    if problem:
        raise ConfigError(f"resume='{cfg.resume}': {run_dir / 'config.json'} is not a run's config record ({problem})")
    if meta is None:
        raise ConfigError(f"resume='{cfg.resume}': no run record at {run_dir} (run ids are folder names "
                          f"under output-dir)")
    stored = meta["config"]
    # a run recorded before a key existed ran with its default; a derived key it lacks is not compared
    before = {**RunConfig().to_run_config(), **{k: config.get(k) for k in DERIVED_KEYS}}
    changed = sorted(k for k in set(stored) | set(config)
                     if k not in RESUMABLE_CHANGES and stored.get(k, before.get(k)) != config.get(k))
    if changed:
        diffs = ", ".join(f"{k}={config.get(k)!r} (run: {stored.get(k, before.get(k))!r})" for k in changed[:5])
        raise ConfigError(f"resume='{cfg.resume}' must use the run's own config; these differ: {diffs}")
    binding = checkpoint.Binding(run_dir.name, cfg.method, checkpoint.config_hash(stored))
    try:
        ckpt = read(run_dir, binding, limits)
    except FileNotFoundError:
        raise ConfigError(f"resume='{cfg.resume}': {run_dir} has no checkpoint (it never finished a round)") from None
    except checkpoint.CheckpointError as exc:
        raise ConfigError(f"resume='{cfg.resume}': {exc}") from None
    except (ValueError, OSError, EOFError) as exc:
        raise ConfigError(f"resume='{cfg.resume}': unreadable checkpoint ({exc})") from None
    if ckpt.round >= cfg.num_server_rounds:
        raise ConfigError(f"resume='{cfg.resume}': the run already did {ckpt.round} rounds; "
                          f"set num-server-rounds above {ckpt.round} to continue it")
    if read is checkpoint.load:
        log.info("fedtext: resuming %s after round %d of %d", cfg.resume, ckpt.round, cfg.num_server_rounds)
    return ckpt


def record_config_error(run_config: Mapping[str, Any], error: str, launch: Mapping[str, Any] | None = None) -> None:
    """Leave a ``failed`` run record for a run that could not start (best effort).

    The record's folder is named by the start time and the method (the default method
    when the run-config names none: the one the run would have used), then the dataset,
    seed and run-name the run-config holds (:func:`fedtext.records.run_folder_name`): a
    refused run-config often lacks them, and a folder ``<stamp>-None-None-sNone`` said
    nothing and sorted as the newest run in ``simulations.status``.

    Parameters
    ----------
    run_config
        Flower's run-config with the overrides, as the refused start got it.
    error
        The one-line configuration error.
    launch
        :data:`fedtext.records.LAUNCH_FIELDS` known to the caller.
    """
    try:
        out = str(run_config.get("output-dir") or RunConfig.output_dir)
        config = {k: v for k, v in run_config.items() if isinstance(v, (str, int, float, bool))}
        name = run_folder_name({**config, "method": config.get("method") or RunConfig.method})
        RunRecorder(out, config, run_id=name, launch=launch).finish("failed", error=f"configuration error: {error}")
    except Exception:  # noqa: BLE001 - the error itself is already logged
        log.debug("could not write a record of the configuration error", exc_info=True)


class FabAwareServerApp(ServerApp):
    """Flower's ``ServerApp`` of a ``server_fn`` that also learns which app bundle (FAB)
    Flower ran: ``server_fn`` gets a ``Context``, which carries the run id but not the FAB;
    Flower hands the FAB's id, version and hash to the grid (``grid.run``). They are kept
    in :attr:`fab` (:func:`fedtext.records.fab_fields`) before ``server_fn`` is called,
    for the run's provenance. The grid it runs on asks for replies every ≤ 0.1 s instead of
    Flower's 3 s (:class:`fedtext.server.grid.ReplyPollingGrid`)."""

    def __init__(self, server_fn: Callable[[Context], ServerAppComponents]) -> None:
        super().__init__(server_fn=server_fn)
        self.fab: dict[str, str | None] = {}
        self.grid: Grid | None = None  # the run's grid, for secagg=true's rounds (RecordingServer.fit_round)

    def __call__(self, grid: Grid, context: Context) -> None:
        try:
            self.fab = fab_fields(grid.run)
        except Exception:  # noqa: BLE001 - a grid without a run (a test's) must not stop the run
            self.fab = {}
        self.grid = ReplyPollingGrid(grid)  # replies pulled as they come (fedtext.server.grid)
        super().__call__(self.grid, context)


def make_server_app(overrides: Mapping[str, Any] | None = None,
                    num_supernodes: int | None = None) -> FabAwareServerApp:
    """A ServerApp whose run-config is Flower's, updated with ``overrides``.

    ``flwr run`` uses :data:`app` (no overrides); the compare runner and the tests
    call Flower's ``run_simulation`` (which passes an empty run-config) with the
    overrides they need, and ``num_supernodes``, the simulated clients they launch
    (recorded in the run's provenance with Flower's run id and the FAB Flower ran, where
    there is one; None: not known here).
    """

    def server_fn(context: Context) -> ServerAppComponents:
        setup_logging()
        quiet_flower()  # Flower's own lines (fedtext.common.quiet); verbose=true brings them back below
        install_signal_handlers()  # SIGTERM -> "failed: terminated by SIGTERM" in the record
        run_config = {**context.run_config, **(overrides or {})}
        # a string: Flower's 64-bit run ids lose digits as JSON numbers in JavaScript readers
        launch = {"flower_run_id": str(context.run_id), "num_supernodes": num_supernodes, **server_app.fab}
        try:
            cfg = RunConfig.from_run_config(run_config, METHODS)
            quiet_flower(cfg.verbose)
            server, config = build(cfg, launch)
            server.grid = server_app.grid  # secagg=true's fit rounds run Flower's SecAgg+ workflow on it
        except ConfigError as exc:
            log.error("fedtext: configuration error: %s", exc)
            record_config_error(run_config, str(exc), launch)
            raise
        return ServerAppComponents(server=server, config=config)

    server_app = FabAwareServerApp(server_fn)
    return server_app


app = make_server_app()
