"""FedDLS (../shared/papers/000_332a35b1d96e4ed4.txt, §4, App. E).

Global array: p' float32 ``[T, D]`` (the server's; what travels down is a codec's
compressed update, see :mod:`fedtext.methods.feddls.codecs`). Upload: ``ids`` uint16 ``[T]``,
the chosen natural-token id or :data:`fedtext.methods.feddls.codecs.SENTINEL` per position,
``2 T + 128`` B (T=50: 228 B).

Modules: ``config.py`` (keys, no torch), ``model.py`` (the prompt, token-id uploads), ``codecs.py``
(LASSO eqs. (8)-(11), PCA, quantisation); the Flower side: ``strategies/feddls.py``,
``clients/feddls.py``.
"""
