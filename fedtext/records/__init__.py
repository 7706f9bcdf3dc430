"""Run records (being split by job into this package's modules)."""

from fedtext.records.reader import *  # noqa: F401,F403
