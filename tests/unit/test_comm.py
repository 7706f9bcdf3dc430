"""Wire bytes and upload validation."""

from __future__ import annotations

import numpy as np
import pytest

from fedtext.common import comm
@pytest.mark.parametrize(
    "array",
    [
        np.zeros(100, np.float32),
        np.ones((8, 384), np.float32),
        np.arange(50, dtype=np.uint16),
        np.ones((5, 50), np.float16),
    ],
)
def test_recorded_bytes_equal_serialized_payload(array):
    params = comm.encode([array])
    assert comm.payload_bytes(params) == array.nbytes + comm.NPY_HEADER_BYTES
    assert comm.payload_bytes(params) == comm.expected_bytes([array])
    back = comm.decode(params)[0]
    assert back.dtype == array.dtype and np.array_equal(back, array)


def test_bytes_of_several_arrays_add_up():
    arrays = [np.zeros(100, np.float32), np.zeros(4, np.uint16)]
    assert comm.payload_bytes(comm.encode(arrays)) == 400 + 8 + 2 * 128


def test_check_arrays_reasons():
    spec = [comm.ArraySpec("ids", (3,), "uint16", low=0, high=10)]
    assert comm.check_arrays([np.array([1, 2, 3], np.uint16)], spec) is None
    assert "expected 1 arrays" in comm.check_arrays([], spec)
    assert "dtype int64" in comm.check_arrays([np.array([1, 2, 3])], spec)
    assert "shape (2,)" in comm.check_arrays([np.array([1, 2], np.uint16)], spec)
    assert "above 10" in comm.check_arrays([np.array([1, 2, 11], np.uint16)], spec)
    fspec = [comm.ArraySpec("z", (2,), "float32")]
    assert "1 non-finite" in comm.check_arrays([np.array([np.nan, 1], np.float32)], fspec)
    assert "2 non-finite" in comm.check_arrays([np.array([np.inf, -np.inf], np.float32)], fspec)
