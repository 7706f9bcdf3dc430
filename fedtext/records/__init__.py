"""Run records: ``<output-dir>/<run-id>/{config.json, rounds.jsonl, summary.json}``.

The compare runner and the dashboard read nothing but these files, so every method
shows up in comparisons without code changes there.

* ``config.json``: the run-config, the resolved task, the machine, the start time and
  the run's ``provenance`` (:func:`provenance`: git commit and dirty flag of the code, or
  the Flower app bundle (FAB) it was installed from, and ``code_origin`` saying which;
  package versions, Flower's run id, SuperNodes launched and connected). Records from
  before a field existed lack it; readers show it as unknown.
* ``rounds.jsonl``: one JSON object per round, appended and flushed as the round ends
  (round 0 = the initial global model). Fields: see :data:`ROUND_FIELDS`.
* ``summary.json``: written when the run ends, with ``status`` ``finished`` or
  ``failed`` (and ``error``: the exception, ``terminated by SIGTERM``, ...).
* ``heartbeat``: the epoch time the server last showed it was alive, rewritten every
  few seconds while the run is open. A run without ``summary.json`` whose heartbeat is
  older than its ``stale-after-s`` is ``stale`` (its server was killed with SIGKILL, or
  the SuperLink died), not ``running`` forever: :func:`run_status`.
* ``checkpoint.npz``: the server's state after the last finished round (``fedtext.server_app``: ``resume=<run-id>`` continues from it).
* ``run.log``: the ``fedtext`` logger's lines while the run is open (round lines,
  warnings, progress lines), appended from when the recorder opens the run (or
  reopens it on resume) until it finishes (:class:`RunLogHandler`).
* ``events.out.tfevents.*`` (TensorBoard), ``wandb/``: the files of the experiment
  trackers ``tracker=`` names (:mod:`fedtext.common.tracking`), fed from the same round records
  and summary.

The package's modules, one job each: :mod:`~fedtext.records.schema` (the round record),
:mod:`~fedtext.records.probes` (process, machine and provenance probes),
:mod:`~fedtext.records.writer` (:class:`RunRecorder`), :mod:`~fedtext.records.signals`
(runs ended by a signal) and :mod:`~fedtext.records.reader` (decoding, validation,
loading, status, summaries). Every public name is re-exported here, imported on first use
(:func:`__getattr__`): a process that needs one module (a warm ClientApp process's shim imports
:mod:`~fedtext.records.probes` for every message it answers) does not import the others, whose
writer alone brings in the run-config and trackers (~50 ms a message, measured with
``python -X importtime``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# each submodule -> the public names it defines, re-exported here (one list: __all__ and __getattr__ read it)
EXPORTS: dict[str, tuple[str, ...]] = {
    "schema": ("DROP_REASON_BYTES", "ROUND_FIELDS", "ROUND_LINE_MAX", "RoundRecord", "busy_seconds", "short_reason"),
    "probes": ("CODE_ORIGINS", "FAB_FIELDS", "GIT_TIMEOUT_S", "LAUNCH_FIELDS", "PROVENANCE_PACKAGES", "code_origin",
               "current_rss_mb", "distribution_version", "fab_fields", "fedtext_version", "git_state", "launch_fields",
               "machine", "package_versions", "peak_rss_mb", "provenance"),
    "writer": ("RUN_LOG_FILE", "RunLogHandler", "RunRecorder", "open_recorders", "run_folder_name"),
    "signals": ("exit_reason", "finish_open_runs", "install_signal_handlers", "signal_reason"),
    "reader": ("CONFIG_FIELDS", "DEFAULT_STALE_AFTER_S", "FINISHED", "HEARTBEAT_FILE", "MAX_JSON_DEPTH",
               "SUMMARY_LISTS", "SUMMARY_NUMBERS", "SUMMARY_TEXT", "SUMMARY_TOTALS", "RecordError", "check_config",
               "check_summary",
               "configured_rounds", "decode_json", "file_problem", "finite_number", "finite_record", "fits_a_record",
               "load_run", "parse_round_line", "participant_accuracy", "privacy_spent", "progress_line", "read_config",
               "read_heartbeat", "read_rounds", "read_summary", "read_text", "record_lines", "round_line", "run_status",
               "runs_since", "runs_under", "spent_text", "summarize"),
}
_HOME = {name: module for module, names in EXPORTS.items() for name in names}
__all__ = list(_HOME)

if TYPE_CHECKING:  # what a type checker and an editor see: the same names, imported eagerly
    from fedtext.records.probes import (  # noqa: F401
        CODE_ORIGINS, FAB_FIELDS, GIT_TIMEOUT_S, LAUNCH_FIELDS, PROVENANCE_PACKAGES, code_origin, current_rss_mb,
        distribution_version, fab_fields, fedtext_version, git_state, launch_fields, machine, package_versions,
        peak_rss_mb, provenance,
    )
    from fedtext.records.reader import (  # noqa: F401
        CONFIG_FIELDS, DEFAULT_STALE_AFTER_S, FINISHED, HEARTBEAT_FILE, MAX_JSON_DEPTH, SUMMARY_LISTS,
        SUMMARY_NUMBERS, SUMMARY_TEXT, SUMMARY_TOTALS, RecordError, check_config, check_summary, configured_rounds,
        decode_json, file_problem, finite_number, finite_record, fits_a_record, load_run, parse_round_line,
        participant_accuracy, privacy_spent, progress_line, read_config, read_heartbeat, read_rounds, read_summary,
        read_text, record_lines, round_line, run_status, runs_since, runs_under, spent_text, summarize,
    )
    from fedtext.records.schema import (  # noqa: F401
        DROP_REASON_BYTES, ROUND_FIELDS, ROUND_LINE_MAX, RoundRecord, busy_seconds, short_reason,
    )
    from fedtext.records.signals import (  # noqa: F401
        exit_reason, finish_open_runs, install_signal_handlers, signal_reason,
    )
    from fedtext.records.writer import (  # noqa: F401
        RUN_LOG_FILE, RunLogHandler, RunRecorder, open_recorders, run_folder_name,
    )


def __getattr__(name: str) -> Any:
    """A re-exported name (:data:`EXPORTS`), or a submodule, imported on first use and kept here (PEP 562)."""
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    elif name in EXPORTS:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
