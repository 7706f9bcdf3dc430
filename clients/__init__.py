"""Client side of every method: one ``NumPyClient`` per module. A method's config names its
client as a ``"clients.<module>:<Class>"`` string (:mod:`fedtext.common.registry`); import a client
from its own module."""
