"""What a fedtext run prints of Flower's and Ray's own output (docs/flower.md, "Output").

By default a run prints fedtext's lines only: one per round (``fedtext round 2/3 | ...``),
the run's start (``fedtext: run records -> ...``, ``fedtext: method=...``), progress lines of
long steps and every warning or error. Run-config ``verbose=true`` brings Flower's own lines
back (``[ROUND n]``, ``configure_fit: ...``, the ``[SUMMARY]`` history block, ...).

What is silenced, where, and why it cannot be earlier:

* **Flower's INFO lines** (``[INIT]``, ``[ROUND n]``, ``configure_fit``/``aggregate_fit``/
  ``configure_evaluate``/``aggregate_evaluate`` counts, ``initial parameters (loss, other
  metrics)``, ``fit progress``, the ``[SUMMARY]`` history): :class:`QuietFlower` on Flower's
  logger, in every process that runs fedtext's code: the ServerApp (``server_fn``) and each
  ClientApp process (``client_fn``). Flower's warnings and errors still print, except the three
  routine warnings of :data:`QUIET_WARNINGS`. fedtext's round line and the round record hold
  what those lines said, with names.
* **"Manually terminating ClientAppActor"** (a WARNING each Ray actor logs when Flower ends the
  simulation: routine shutdown, not a problem): dropped by :class:`QuietFlower` in the actor.
  An actor that never ran a client (more actors than sampled clients) never loaded fedtext's
  code and may still say it.
* **Ray's FutureWarning** ("Tip: In future versions of Ray, Ray will no longer override
  accelerator visible devices env var if num_gpus=0"): a ``warnings`` filter set when
  ``fedtext.client_app`` is imported. Flower's simulation process loads the ClientApp before it
  starts Ray (``flwr/server/superlink/fleet/vce/vce_api.py``, ``start_vce``), so the filter is
  in place when ``ray.init`` warns. The filter only hides the tip: Ray's behaviour (hiding GPUs
  from ``num_gpus=0`` actors) is kept, so ``flwr run`` clients do not grab a GPU Flower did not
  give them. ``python -m simulations.simulate`` opts in to the future behaviour instead
  (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0``, docs/flower.md).
* **"Since flwr 1.32, default simulated SuperNodes changed from 10 to 2."** and the other lines
  before the app is loaded (``Starting local SuperLink``, ``Successfully started run``,
  ``Starting Flower Simulation``, ``Federation ... (2 simulated SuperNodes)``, ``Successfully
  installed fedtext to ...``): the ``flwr`` CLI and Flower's simulation process print them
  before any fedtext code runs (the simulation process logs the warning unconditionally,
  ``flwr/simulation/app.py``, and uploads its log every 0.2 s), so no app can silence them;
  :data:`FLOWER_STARTUP` lists them (the ``flwr run`` system test allows exactly these).
  ``QuietFlower`` drops the warning too where it comes later (in-process runs).
"""

from __future__ import annotations

import logging
import re
import warnings

#: Flower WARNING lines that :class:`QuietFlower` drops by default (routine, nothing to act on)
QUIET_WARNINGS = (
    "Manually terminating ",  # Flower's Ray actors at the end of every simulation
    "default simulated SuperNodes changed",  # Flower 1.32's notice, printed on every simulation
    "The `run_simulation` function is deprecated",  # simulations.simulate calls it on purpose
)

#: the message of Ray's FutureWarning at every ``ray.init`` (ray/_private/worker.py), a regex prefix
RAY_TIP = r"Tip: In future versions of Ray, Ray will no longer override accelerator visible devices"

#: lines of a default ``flwr run . --stream`` printed before fedtext's code is loaded (module
#: doc): the ``flwr`` CLI's and Flower's simulation process's start-up, as regexes of the line
#: with Flower's level prefix (``INFO :      ``) and colour codes removed
FLOWER_STARTUP = (
    r"Flower configuration not found\. Created default configuration at .*",  # a fresh FLWR_HOME
    r"Starting local SuperLink on [\d.]+:\d+\.\.\.",
    r"Using SuperLink: local \([\d.]+:\d+\)",
    r"Successfully started run \d+",
    r"Starting logstream for run_id `\d+`",
    r"Starting Flower Simulation",
    r"Since flwr 1\.32, default simulated SuperNodes changed from 10 to 2\.",
    r"Federation `[^`]+` \(\d+ simulated SuperNodes\)",
    r"To change federation size, use the following command:",
    r"flwr federation simulation-config \S+ <superlink> --num-supernodes <N>",
    r"Successfully installed [\w.-]+ to .*\.",
)


class QuietFlower(logging.Filter):
    """Flower's log records a default fedtext run does not print (module doc): every record
    below WARNING, and the routine warnings of :data:`QUIET_WARNINGS`. Errors always pass.

    fedtext's own lines go to the ``fedtext`` logger (:func:`fedtext.common.progress.setup_logging`
    routes it through Flower's handlers, not through Flower's logger), so this filter, on
    Flower's logger, never sees them.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if record.levelno < logging.WARNING:
            return False
        text = record.getMessage()
        return not any(q in text for q in QUIET_WARNINGS)


def quiet_flower(verbose: bool = False) -> None:
    """Install :class:`QuietFlower` on Flower's logger (once per process), or, with
    ``verbose`` (run-config ``verbose=true``), remove it: Flower's lines print as Flower
    prints them."""
    from flwr.common.logger import FLOWER_LOGGER

    mine = [f for f in FLOWER_LOGGER.filters if isinstance(f, QuietFlower)]
    if verbose:
        for f in mine:
            FLOWER_LOGGER.removeFilter(f)
    elif not mine:
        FLOWER_LOGGER.addFilter(QuietFlower())


def quiet_ray_tip() -> None:
    """Hide Ray's accelerator FutureWarning (module doc); Ray's behaviour is unchanged."""
    warnings.filterwarnings("ignore", message=RAY_TIP, category=FutureWarning)


def strip_flower_prefix(line: str) -> str:
    """A console line without colour codes, Ray's ``(ClientAppActor pid=N)`` prefix and
    Flower's level prefix (``INFO :      ``), for matching against :data:`FLOWER_STARTUP`."""
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    line = re.sub(r"^\(\w+ pid=\d+(?:, ip=[\d.]+)?\)\s*", "", line)
    return re.sub(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*:\s*", "", line).strip()
