"""The error a user can act on, in a leaf module (it imports nothing of fedtext's).

:class:`ConfigError` lives here so that the modules :mod:`fedtext.common.config` itself imports
to validate a run-config (:mod:`fedtext.common.tracking`) can raise it without importing
:mod:`fedtext.common.config` back (``tests/unit/test_imports.py`` checks the import graph has no
circle). Import it from :mod:`fedtext.common.config`, which is where it belongs to a reader.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A run-config value is invalid. The message is one line a user can act on."""
