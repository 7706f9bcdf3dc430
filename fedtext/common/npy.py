"""One parser for NPY headers, numpy only (no Flower: analysis scripts read checkpoints without it).

fedtext reads ``.npy`` bytes itself in two places, where ``np.load`` would copy or accept too much:
uploads viewed in place (:func:`fedtext.common.comm.view`) and checkpoint members checked against
their length (:mod:`fedtext.server.checkpoint`). Both take the header from here.
"""

from __future__ import annotations

import io
import math
import tokenize

import numpy as np


def npy_header(blob: bytes, max_header_size: int = 10_000) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """The header of one NPY blob: ``(shape, fortran_order, dtype, data_offset)``.

    The one NPY parser of fedtext's readers that do not go through ``np.load`` (uploads read as
    views in :func:`fedtext.common.comm.view`, checkpoint members in
    :mod:`fedtext.server.checkpoint`). Every refusal is a ``ValueError`` (the callers turn it into
    their one-line reason): an unknown format version, a header longer than ``max_header_size``
    (numpy's own default cap), cut short or not a header dict (numpy's parser raises
    ``TokenError``, ``SyntaxError``, ``RecursionError`` or ``TypeError`` for those: all caught
    here), object dtypes (no pickle anywhere), zero-size dtypes (``V0``: no data to view), and a
    shape that is not a tuple of non-negative ints (numpy lets ``True`` through as an int).

    Version 3.0 differs from 2.0 only in its header's text encoding (utf-8, for non-latin-1 field
    names): numpy's public reader decodes both as latin-1, so a 3.0 header is read only when it
    is ASCII, where the two encodings agree; numpy writes 3.0 only for such field names, which
    fedtext's arrays never have.
    """
    stream = io.BytesIO(blob)  # CPython shares an initial bytes buffer until written: no copy
    try:
        version = np.lib.format.read_magic(stream)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError(f"NPY format version {version} not supported")
        if version == (3, 0) and not blob[12:12 + int.from_bytes(blob[8:12], "little")].isascii():
            raise ValueError("an NPY 3.0 header with non-ASCII field names is not read here")
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(stream, max_header_size=max_header_size)
    except (TypeError, SyntaxError, EOFError, RecursionError, tokenize.TokenError) as exc:
        raise ValueError(f"not an NPY header ({type(exc).__name__}: {exc})"[:300]) from None
    if dtype.hasobject:
        raise ValueError("object arrays are not accepted (nothing here unpickles)")
    if dtype.itemsize == 0:
        raise ValueError(f"a zero-size dtype ({dtype}) holds no data")
    if not all(type(d) is int for d in shape):
        raise ValueError(f"the shape must be a tuple of ints, not {shape!r}"[:300])
    if any(d < 0 for d in shape):  # frombuffer's count=-1 would read every byte left and reshape would fit it
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    return shape, fortran, dtype, stream.tell()


def data_bytes(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """Bytes the array's data takes: an exact Python int (no int64 overflow for a lying shape)."""
    return math.prod(shape) * dtype.itemsize
