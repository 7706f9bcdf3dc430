"""Each method's contract between its strategy and its client: its config dataclass
(``[tool.flwr.app.config.<method>]``) and its :class:`fedtext.model.Model`.

One module per method; ``fedtext.registry.METHODS`` pairs each with its strategy
(``strategies/``) and client (``clients/``).
"""
