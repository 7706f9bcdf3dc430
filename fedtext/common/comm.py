"""Wire codecs, byte accounting and upload validation.

Everything a method communicates travels as a list of numpy arrays in Flower's
``Parameters`` (``ndarrays_to_parameters``: one NPY blob per array), so the bytes we
record are the bytes of the serialized payload, measured with ``len()`` on the blobs
that Flower sends, not estimated from shapes:

    bytes(array) = array.nbytes + NPY_HEADER_BYTES        (128 for 1-3 dim arrays)

``NPY_HEADER_BYTES`` is the documented per-array constant: NPY format v1 writes a
10-byte preamble plus a dict header, padded so that the data starts at a multiple of
64 bytes. Not counted: Flower's own message framing (protobuf/gRPC envelopes, the
same for every method) and the scalar ``config``/``metrics`` dicts (round number,
seeds, and the telemetry that fedtext itself adds: queries, RSS, timings).

dtypes are preserved end to end, so methods may send ``uint16`` token ids or
``float16`` values (FedDLS) and pay 2 bytes per value.
"""

from __future__ import annotations

import io
import math
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # Flower only where a payload is made: the checkpoint reader uses npy_header without it
    from flwr.common import Parameters

NPY_HEADER_BYTES = 128


def encode(arrays: Sequence[np.ndarray]) -> Parameters:
    """Serialize arrays for the wire (dtype and shape preserved)."""
    from flwr.common import ndarrays_to_parameters

    return ndarrays_to_parameters([np.ascontiguousarray(a) for a in arrays])


def decode(parameters: Parameters) -> list[np.ndarray]:
    """Inverse of :func:`encode` (writable copies)."""
    from flwr.common import parameters_to_ndarrays

    return parameters_to_ndarrays(parameters)


def view(parameters: Parameters) -> list[np.ndarray]:
    """:func:`decode` without the copy: read-only arrays over the payload's own bytes.

    Why. The server holds a round's replies whole until it has aggregated them (Flower's
    ``fit_round`` keeps its results list), so decoding each upload into a copy held a second
    model per client: at 110 M weights (438 MB a payload) and 6 clients a round, 2.6 GB more in
    the driver (FedDRS's harness at base scale, issue 67). A view of the NPY blob costs nothing;
    the server only reads uploads (validation, release, aggregation write new arrays), and a
    write into one raises ``ValueError: assignment destination is read-only`` instead of
    changing a client's payload under the round record.

    Refuses, with ``ValueError``, what ``np.load(allow_pickle=False)`` (Flower's decode) refuses:
    object dtypes, a malformed header, a blob shorter than its header says; and, stricter than
    it, zero-size dtypes and non-ASCII 3.0 headers (:func:`npy_header`).
    """
    return [_npy_view(t) for t in parameters.tensors]


def npy_header(blob: bytes, max_header_size: int = 10_000) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """The header of one NPY blob: ``(shape, fortran_order, dtype, data_offset)``.

    The one NPY parser of fedtext's readers that do not go through ``np.load`` (uploads read as
    views in :func:`view`, checkpoint members in :mod:`fedtext.server.checkpoint`). Every
    refusal is a ``ValueError`` (the callers turn it into their one-line reason): an unknown
    format version, a header longer than ``max_header_size`` (numpy's own default cap), cut
    short or not a header dict (numpy's parser raises ``TokenError``, ``SyntaxError``,
    ``RecursionError`` or ``TypeError`` for those: all caught here), object dtypes (no pickle anywhere), zero-size dtypes (``V0``: no data to view), and a
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


def _npy_view(blob: bytes) -> np.ndarray:
    shape, fortran, dtype, offset = npy_header(blob)
    if (need := data_bytes(shape, dtype)) > len(blob) - offset:  # np.load's refusal too; Python ints, no overflow
        raise ValueError(f"the blob holds {len(blob) - offset} bytes of data, its header ({dtype}, {shape}) says "
                         f"{need}"[:300])
    flat = np.frombuffer(blob, dtype=dtype, count=math.prod(shape), offset=offset)
    flat.flags.writeable = False  # read-only whatever buffer Flower hands over (bytes are; a bytearray would not be)
    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


def payload_bytes(parameters: Parameters) -> int:
    """Bytes of a serialized payload: the sum of its NPY blobs."""
    return sum(len(t) for t in parameters.tensors)


def expected_bytes(arrays: Sequence[np.ndarray]) -> int:
    """``sum(nbytes) + NPY_HEADER_BYTES`` per array: what :func:`payload_bytes` must give."""
    return sum(int(a.nbytes) + NPY_HEADER_BYTES for a in arrays)


@dataclass(frozen=True)
class ArraySpec:
    """What one uploaded array must look like; ``None`` fields are not checked."""

    name: str
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    low: float | None = None
    high: float | None = None
    finite: bool = True

    def nbytes(self) -> int:
        """Bytes of an array that fits this spec (a spec without a dtype counts 8 bytes an
        element, the widest number fedtext sends); a spec without a shape has no bound.

        Raises
        ------
        ValueError
            The spec has no shape.
        """
        if self.shape is None:
            raise ValueError(f"array spec '{self.name}' has no shape, so no size")
        itemsize = np.dtype(self.dtype).itemsize if self.dtype is not None else 8
        return int(np.prod(self.shape, dtype=np.int64)) * itemsize


def check_arrays(arrays: Sequence[np.ndarray], specs: Sequence[ArraySpec]) -> str | None:
    """Return why ``arrays`` violate ``specs`` (count, shape, dtype, finite, range), or None."""
    if len(arrays) != len(specs):
        return f"expected {len(specs)} arrays ({', '.join(s.name for s in specs)}), got {len(arrays)}"
    for a, s in zip(arrays, specs, strict=True):
        if s.dtype is not None and a.dtype != np.dtype(s.dtype):
            return f"{s.name}: dtype {a.dtype}, expected {s.dtype}"
        if s.shape is not None and tuple(a.shape) != tuple(s.shape):
            return f"{s.name}: shape {tuple(a.shape)}, expected {tuple(s.shape)}"
        if a.dtype.kind == "f" and s.finite and not np.isfinite(a).all():
            return f"{s.name}: {int((~np.isfinite(a)).sum())} non-finite values"
        if a.size and s.low is not None and a.min() < s.low:
            return f"{s.name}: value {a.min()} below {s.low}"
        if a.size and s.high is not None and a.max() > s.high:
            return f"{s.name}: value {a.max()} above {s.high}"
    return None
