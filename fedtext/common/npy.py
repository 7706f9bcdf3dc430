"""One parser for NPY headers, numpy only (no Flower: analysis scripts read checkpoints without it).

fedtext reads ``.npy`` bytes itself in two places, where ``np.load`` would copy or accept too much:
uploads viewed in place (:func:`fedtext.common.comm.view`) and checkpoint members checked against
their length (:mod:`fedtext.server.checkpoint`). Both take the header from here.
"""

from __future__ import annotations

import io

import numpy as np


def npy_header(blob: bytes, max_header_size: int = 10_000) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """The header of one NPY blob: ``(shape, fortran_order, dtype, data_offset)``.

    The one NPY parser of fedtext's readers that do not go through ``np.load`` (uploads read as
    views in :func:`fedtext.common.comm.view`, checkpoint members in
    :mod:`fedtext.server.checkpoint`). Refuses, with
    ``ValueError``, what ``np.load(allow_pickle=False)`` refuses: an unknown format version,
    object dtypes (no pickle anywhere), negative dimensions, a header longer than
    ``max_header_size`` (numpy's own default cap) or cut short.
    """
    stream = io.BytesIO(blob)  # CPython shares an initial bytes buffer until written: no copy
    try:
        version = np.lib.format.read_magic(stream)
        # 3.0 differs from 2.0 only in its header's text encoding (utf-8 field names); np.load reads all three
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0,
                       (3, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f"NPY format version {version} not supported")
        shape, fortran, dtype = read_header(stream, max_header_size=max_header_size)
    except (TypeError, SyntaxError, EOFError) as exc:  # numpy's own errors for a mangled header dict
        raise ValueError(f"not an NPY header ({exc})") from None
    if dtype.hasobject:
        raise ValueError("object arrays are not accepted (no pickle on the wire)")
    if any(d < 0 for d in shape):  # frombuffer's count=-1 would read every byte left and reshape would fit it
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    return shape, fortran, dtype, stream.tell()
