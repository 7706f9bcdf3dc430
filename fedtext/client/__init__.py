"""What runs in a ClientApp to answer one message: the method's NumPyClient and its parts.

* :mod:`~fedtext.client.numpy_client`: :class:`FedTextClient`, the NumPyClient every
  method's client (``clients/``) extends (local training, evaluation, the costs it reports);
* :mod:`~fedtext.client.local_terms`: extra terms of the local objective (FedProx's proximal term);
* :mod:`~fedtext.client.attacks`: the lying clients of the robustness studies.

Who builds the client for a message (the node config, the journal of its state, the memory
guard, the long-lived node service) is :mod:`fedtext.node`; what Flower loads is
:mod:`fedtext.client_app`.

May import: :mod:`fedtext.common`, :mod:`fedtext.learning`, :mod:`fedtext.trust`,
:mod:`fedtext.backbone`, :mod:`fedtext.records`. Never the server's code, nor the node's.
"""


def __getattr__(name: str) -> object:
    """``from fedtext.client import FedTextClient`` (deprecated: ``fedtext.client.numpy_client``)."""
    from fedtext import forward

    return forward(__name__, name)
