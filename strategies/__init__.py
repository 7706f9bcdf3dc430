"""Server side of every method: one Flower Strategy per module, each citing its paper and
stating what its client must do. A method's config names its strategy as a
``"strategies.<module>:<Class>"`` string (:mod:`fedtext.common.registry`); import a strategy from
its own module."""
