"""ClientApp: what Flower loads (``clientapp = "fedtext.client_app:app"``), kept light.

In Flower's deployment engine every message starts a new ``flwr-clientapp`` process that
imports this module (Flower 1.42 recreates the ClientApp per message; only ``Context.state``
persists). So this module imports Flower and the standard library only: torch, transformers
and the data loaders (:mod:`fedtext.node.node`) are imported on a message's first need of them.

Two ways a message is answered:

* **by the SuperNode's node service** (:mod:`fedtext.node.service`), when the node config
  names one (``node-service='<socket>'``, which ``python -m fedtext.node.service --
  flower-supernode ...`` adds): :func:`fedtext.node.service.node_service_mod` hands the
  message and context to that long-lived process, which holds the backbone and the node's
  data across messages, and returns its reply; this process never imports torch.
* **here**, otherwise (the simulation engine, a SuperNode started without the service, or a
  service that does not answer): Flower's legacy handler calls ``client_fn``, which imports
  :mod:`fedtext.node.node` and builds a :class:`fedtext.node.node.Node`.

With ``secagg=true`` (:mod:`fedtext.server.secagg`), :func:`secagg_mod` first runs Flower's SecAgg+
client side: the protocol's key and share messages are answered there, and the fit it wraps
goes either way above; its reply leaves masked.

Both run the same :class:`fedtext.node.node.Node` on the same message and context, so the run's
records are the same either way but for the timings (tests/unit/test_node_service.py).

Outermost of all, :func:`fedtext.common.packing.packing_mod` unpacks a message whose small arrays
the ServerApp's grid joined into one (one object on the wire instead of one per array) and marks
the reply, packing it in kind; nothing inside sees a packed message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Message
from flwr.app.message_type import MessageType
from flwr.client import Client, ClientApp
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Context, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE
from flwr.compat.common import recorddict_compat as compat

from fedtext.common.packing import packing_mod
from fedtext.node.service import node_service_mod
from fedtext.common.quiet import quiet_ray_tip

# Flower's simulation process imports this module before it starts Ray: Ray's FutureWarning
# at ray.init is filtered from here (fedtext.common.quiet; Ray's behaviour unchanged)
quiet_ray_tip()


def secagg_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower's ``secaggplus_mod`` for the messages of a SecAgg+ round (``secagg=true``,
    :mod:`fedtext.server.secagg`: a train message carrying the protocol's record); every other message
    passes untouched. Flower 1.42's mod takes every train message as one of the protocol's and
    fails a plain fit instruction (``KeyError: 'secaggplus_configs'``), so it cannot stand in the
    ClientApp's mods alone."""
    if msg.metadata.message_type == MessageType.TRAIN and RECORD_KEY_CONFIGS in msg.content.config_records:
        return secaggplus_mod(msg, context, lambda m, c: within_clip_range(call_next(m, c), c))
    return call_next(msg, context)


def within_clip_range(reply: Message, context: Context) -> Message:
    """The fit reply SecAgg+ is about to mask, refused when masking would change it: Flower clips
    every value of ``n_k / max_weight · x_k`` to ``±secagg-clip-range`` before quantising, silently
    (a whole model's weights, or FedKSeed's gradient sums, can exceed the default 8). The client
    fails the round instead, with a reason the server records as its drop; the operator raises
    ``secagg-clip-range``. Nothing else leaves: the check runs before the reply is masked."""
    import numpy as np  # Flower's own dependency; the arrays are NumPy already

    state = context.state.config_records.get(RECORD_KEY_STATE)
    if reply.has_error() or state is None or not reply.content.array_records:
        return reply
    fitres = compat.recorddict_to_fitres(reply.content, keep_input=True)
    clip, weight = float(state["clipping_range"]), float(state["max_weight"])
    scale = fitres.num_examples / weight if weight > 0 else 1.0
    largest = max((float(np.max(np.abs(a))) for a in parameters_to_ndarrays(fitres.parameters) if a.size), default=0.0)
    if largest * scale > clip:
        raise ValueError(f"SecAgg+ would clip this upload: its largest |value| {largest:.4g} x weight "
                         f"{scale:.3g} exceeds secagg-clip-range={clip:g}; raise secagg-clip-range")
    return reply


def make_client_app(overrides: Mapping[str, Any] | None = None) -> ClientApp:
    """A ClientApp whose run-config is Flower's, updated with ``overrides``; its messages go to
    the node config's ``node-service`` when it names one
    (:func:`fedtext.node.service.node_service_mod`).

    Parameters
    ----------
    overrides
        Run-config keys that replace Flower's (``simulations.simulate`` passes its own).
    """

    def client_fn(context: Context) -> Client:
        from fedtext.node.node import (
            make_client,  # torch and transformers: only where a client is built
        )
        from fedtext.common.progress import setup_logging

        setup_logging()  # the client's progress lines (fedtext.common.progress) reach Flower's console
        return make_client({**context.run_config, **(overrides or {})}, context.node_config, context.state,
                           context.run_id)

    # the first mod is the outermost: a packed message is unpacked before anything reads it and its
    # reply packed last (fedtext.common.packing); SecAgg+ masks the reply of the fit that the node
    # service (or client_fn) ran
    return ClientApp(client_fn=client_fn, mods=[packing_mod, secagg_mod, node_service_mod])


app = make_client_app()
