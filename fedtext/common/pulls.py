"""Flower's object pulls retried after 0.05 s instead of 1 s, in the processes fedtext starts.

Why. Flower 1.42 hands a message to whoever asks for it (the ServerApp asking the SuperLink for a
reply, a SuperNode asking for an instruction) as soon as the message is registered, before its
objects are all pushed: the pushes follow at once, within tens of milliseconds. ``pull_objects``
(``flwr/supercore/inflatable/inflatable_utils.py``) asks for each object, and one not there yet
makes it wait ``PULL_INITIAL_BACKOFF`` = 1 s (±20 %) before it asks again, doubling up to 10 s.
fedtext's ServerApp asks for replies every ≤ 0.1 s (:mod:`fedtext.server.grid`) and its
SuperNodes poll every 0.1 s after a reply (:mod:`fedtext.node.supernode`), so an ask often lands
in those milliseconds. Measured with ``FLWR_LOG_LEVEL=DEBUG`` (fedprompt's demo service row,
2026-11-30): the ServerApp got a fit reply 9 ms after its SuperNode registered it, asked for its
objects 4 ms later, 5 ms before the first of them arrived, and asked again 0.9 s later. With this
module the demo's overhead column is 0.6 s a round in each short method, where it moved between 0.5
and 3.4 s (docs/performance.md, "Pulls retried after 0.05 s").

What. :func:`quick_pulls` rebinds a Flower module's own name ``pull_objects`` to Flower's
function with ``initial_backoff`` = :data:`FIRST_RETRY_S`: an object not there yet is asked for
again after 0.05, 0.1, 0.2, 0.4 s, ... up to Flower's cap, with Flower's limits on tries and time
unchanged (a few more small requests when an object is late, none otherwise). The modules:
the ServerApp's deployment grid (``flwr.superlink.grid.http_grid``, :data:`SERVER_PULLS`) and the
SuperNode's loop (``flwr.supernode.start_client_internal``, :data:`NODE_PULLS`). A ClientApp's
pulls (``run_clientapp``, through ``inflatable_utils``' own ``pull_objects``) keep Flower's 1 s: a
woken SuperExec starts its task once the message is whole (:mod:`fedtext.node.warm_exec`); a
polling one can start it mid-pull, rarely, and that ClientApp then waits the 1 s.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType

FIRST_RETRY_S = 0.05  # seconds before an object not there yet is asked for again (Flower: 1 s, then doubling)
SERVER_PULLS = "flwr.superlink.grid.http_grid"  # HttpGrid.pull_messages: the ServerApp's replies
NODE_PULLS = "flwr.supernode.start_client_internal"  # _pull_and_store_message: a SuperNode's instructions
# an empty pull (a SuperNode's for instructions, the ServerApp's for replies) that took this long was held by fedtext's
# SuperLink (fedtext.server.superlink, HOLD_S = 2 s) until its hold ran out: the asker asks again at once instead of
# sleeping. Flower's own SuperLink answers an empty pull in milliseconds (5-50 ms measured here)
HELD_S = 1.0


def flowers_pull_objects():
    """Flower's own ``pull_objects``."""
    from flwr.supercore.inflatable.inflatable_utils import pull_objects

    return pull_objects


def pull_contract_problems(module: ModuleType) -> list[str]:
    """What ``module`` no longer does that :func:`quick_pulls` relies on: call ``pull_objects`` by its
    module-level name, that name bound to Flower's function (or to :func:`quick_pulls`' wrapper of it)."""
    name = module.__name__
    bound = getattr(module, "pull_objects", None)
    if bound is None:
        return [f"{name} has no module-level pull_objects"]
    problems = []
    if getattr(bound, "func", bound) is not flowers_pull_objects():
        problems.append(f"{name}.pull_objects is not Flower's inflatable_utils.pull_objects")
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):  # no source to read (a compiled or built module)
        source = ""
    if "pull_objects(" not in source:
        problems.append(f"{name} does not call pull_objects (in source this process can read)")
    if "initial_backoff" not in inspect.signature(flowers_pull_objects()).parameters:
        problems.append("Flower's pull_objects takes no initial_backoff")
    return problems


def quick_pulls(module_name: str, first_retry_s: float = FIRST_RETRY_S) -> list[str]:
    """Rebind ``module_name``'s ``pull_objects`` to Flower's with ``initial_backoff=first_retry_s``
    (this process only; once: a second call rebinds Flower's function again, not the wrapper).
    Returns the contract problems (:func:`pull_contract_problems`) that stopped it; [] when done."""
    module = importlib.import_module(module_name)
    problems = pull_contract_problems(module)
    if not problems:
        module.pull_objects = functools.partial(flowers_pull_objects(), initial_backoff=first_retry_s)
    return problems
