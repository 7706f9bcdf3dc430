"""What every fedtext process shares: the run-config, its registry, and the plumbing.

Runs in the ServerApp, in every ClientApp, in the SuperNode's node service and in the
simulations and dashboard alike. Holds no model and no data:

* :mod:`~fedtext.common.config`: the run-config read once into frozen, self-validating
  dataclasses (:class:`RunConfig`), and :mod:`~fedtext.common.errors` its one-line error;
* :mod:`~fedtext.common.registry`: the methods' config classes (the methods fill it; the
  core never imports a method), :mod:`~fedtext.common.components`: ``"module:Class"``
  strings resolved;
* :mod:`~fedtext.common.tasks`: a classification task (labels, verbalizers, templates);
* :mod:`~fedtext.common.comm`: the named arrays a message carries (:class:`ArraySpec`) and
  their bytes, and the one NPY header parser (shared with the checkpoint reader);
  :mod:`~fedtext.common.metrics`: metric specs and bounds;
* :mod:`~fedtext.common.tracking`, :mod:`~fedtext.common.progress`,
  :mod:`~fedtext.common.quiet`: experiment trackers, logging and progress, and the
  silencing of third-party chatter.

May import: :mod:`fedtext.common` only (and the standard library, numpy, Flower). Every
other folder may import it (``tests/unit/test_imports.py`` keeps the lanes).
"""
