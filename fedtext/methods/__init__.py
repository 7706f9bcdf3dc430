"""Each method's contract between its strategy and its client: its config dataclass
(``[tool.flwr.app.config.<method>]``) and its :class:`fedtext.learning.model.Model`.

One module per method. Its config class names the method's strategy (``strategies/``)
and client (``clients/``) as ``"module:Class"`` strings, and ``fedtext.common.registry.CONFIGS``
lists the config classes; nothing here imports a strategy or a client.
"""
