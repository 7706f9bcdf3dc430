"""What a SuperNode's machine holds around its clients: who builds the client for a
message, and the long-lived side that keeps it warm.

* :mod:`~fedtext.node.node`: ``client_fn`` -> a :class:`Node` that builds the method's
  client on demand from the node config (``partition-id``, ``num-partitions``);
* :mod:`~fedtext.node.state`: the journal of a node's fedtext state across messages and
  restarts; :mod:`~fedtext.node.memory`: the memory guard (a node's limit, checked before
  a client is built);
* :mod:`~fedtext.node.service`: the long-lived node service that answers the ClientApp's
  messages with the backbone and data held across them;
* :mod:`~fedtext.node.warm_exec`: warm ClientApp processes handed Flower's tasks;
  :mod:`~fedtext.node.supernode`: ``flower-supernode`` started with them.

May import: :mod:`fedtext.common`, :mod:`fedtext.learning`, :mod:`fedtext.trust`,
:mod:`fedtext.client`, :mod:`fedtext.backbone`, :mod:`fedtext.records`, and the method
clients (``clients/``, through the registry's strings). Never the server's code.
"""


def __getattr__(name: str) -> object:
    """``from fedtext.node import Node`` (deprecated: ``fedtext.node.node``)."""
    from fedtext import forward

    return forward(__name__, name)
