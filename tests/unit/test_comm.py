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


def test_view_equals_decode_without_a_copy():
    """comm.view (the server's upload path) gives decode's arrays, read-only over the payload's bytes."""
    import io

    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros(0, np.float16), np.arange(5, dtype=np.uint16),
              np.zeros((2, 0, 3)), np.array(3.5)]
    params = comm.encode(arrays)
    fortran = io.BytesIO()  # np.save keeps Fortran order in the header: the view must read it back transposed
    np.save(fortran, np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    params.tensors.append(fortran.getvalue())
    for got, want, blob in zip(comm.view(params), comm.decode(params), params.tensors, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert not got.flags.writeable and not got.flags.owndata
        start = np.frombuffer(blob, np.uint8).__array_interface__["data"][0]
        assert got.size == 0 or start <= got.__array_interface__["data"][0] < start + len(blob)  # in the blob itself
    with pytest.raises(ValueError, match="read-only"):
        comm.view(params)[0][0, 0] = 1.0


def test_view_refuses_what_decode_refuses():
    import io

    from flwr.common import Parameters

    whole = comm.encode([np.ones(10, np.float32)]).tensors[0]
    with pytest.raises(ValueError, match="holds 36 bytes of data, its header .* says 40"):
        comm.view(Parameters([whole[:-4]], "numpy.ndarray"))  # cut short: fewer bytes than the header's shape
    pickled = io.BytesIO()
    np.save(pickled, np.array([1, None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="object arrays"):
        comm.view(Parameters([pickled.getvalue()], "numpy.ndarray"))
    with pytest.raises(ValueError):
        comm.view(Parameters([b"not an NPY blob"], "numpy.ndarray"))
    # a header with a negative dimension: np.load refuses it; frombuffer(count=-1) would read all that follows
    bad = whole.replace(b"'shape': (10,)", b"'shape': (-1,)")
    assert bad != whole
    with pytest.raises(ValueError):
        comm.decode(Parameters([bad], "numpy.ndarray"))
    with pytest.raises(ValueError, match="negative"):
        comm.view(Parameters([bad], "numpy.ndarray"))


def test_view_reads_byte_order_versions_and_trailing_bytes_as_np_load_does():
    import io

    from flwr.common import Parameters

    blobs = []
    for a, version in ((np.arange(4, dtype=">f4"), None), (np.arange(6, dtype="<i8").reshape(2, 3), (2, 0))):
        buf = io.BytesIO()
        if version is None:
            np.save(buf, a)
        else:
            np.lib.format.write_array(buf, a, version=version)
        blobs.append(buf.getvalue() + b"\x00" * 8)  # trailing bytes: np.load ignores them
    params = Parameters(blobs, "numpy.ndarray")
    for got, want in zip(comm.view(params), comm.decode(params), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
    assert comm.view(params)[0].dtype == np.dtype(">f4")



def test_npy_header_is_the_one_parser_and_refuses_what_np_load_refuses():
    """fedtext.common.comm.npy_header: the offset is where the data starts; an unknown version, a
    header past its cap and a mangled header dict are ValueErrors (the checkpoint reader turns
    them into its one-line refusal)."""
    import io

    from fedtext.common.comm import npy_header

    buf = io.BytesIO()
    np.save(buf, np.arange(6, dtype="<f4").reshape(3, 2))
    blob = buf.getvalue()
    shape, fortran, dtype, offset = npy_header(blob)
    assert (shape, fortran, dtype) == ((3, 2), False, np.dtype("<f4"))
    assert offset == len(blob) - 24 == 128  # 6 float32 after numpy's 128-byte v1 header
    with pytest.raises(ValueError, match="version"):
        npy_header(blob[:6] + b"\x04\x00" + blob[8:])
    with pytest.raises(ValueError):
        npy_header(blob, max_header_size=64)  # the header's 118 bytes of dict exceed a 64-byte cap
    mangled = blob.replace(b"'descr'", b"'dexcr'")
    with pytest.raises(ValueError):
        npy_header(mangled)


def _v1(header: str, data: bytes = b"") -> bytes:
    """An NPY 1.0 blob with ``header`` as its dict text, padded as numpy pads it."""
    import struct

    text = header.encode("latin1")
    text += b" " * ((-(10 + len(text) + 1)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


@pytest.mark.parametrize("blob", [
    _v1("{'descr': '|u1', 'fortran_order': False, 'shape': (4,", b"\0" * 4),  # cut short: numpy's TokenError
    _v1("{'descr': '|u1', 'fortran_order': False, 'shape': (True,), }", b"\0"),  # numpy takes a bool for an int
    _v1("{'descr': '|u1', 'fortran_order': False, 'shape': (" + "-" * 3000 + "1,), }", b"\0"),  # RecursionError
    _v1("{'descr': '|V0', 'fortran_order': False, 'shape': (5,), }"),  # zero-size dtype: frombuffer's own error
    _v1("{'descr': '|u1', 'fortran_order': False, 'shape': (1180591620717411303424,), }", b"\0"),  # 2**70 items
    b"\x93NU",
], ids=["cut short", "bool shape", "deep unary", "V0", "2**70", "3 bytes"])
def test_a_malformed_header_is_a_value_error_for_views_and_checkpoint_members(blob):
    """Whatever numpy's header parser raises for a malformed blob, both readers answer ValueError
    (the validator's and the checkpoint's one-line refusals), never a TokenError, TypeError,
    RecursionError or OverflowError that a resume or a round would not catch."""
    from pathlib import Path

    from flwr.common import Parameters

    from fedtext.server import checkpoint

    with pytest.raises(ValueError):
        comm.view(Parameters([blob], "numpy.ndarray"))
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint._array(Path("checkpoint.npz"), "meta", blob)


def test_a_non_ascii_v3_header_is_refused_not_misread():
    """numpy writes NPY 3.0 for a non-latin-1 field name and decodes it as utf-8; its public
    reader decodes latin-1 (field 'α' would come back as 'Î±'): such a header is refused."""
    import io

    from flwr.common import Parameters

    buf = io.BytesIO()
    np.save(buf, np.zeros(2, dtype=[("α", "<f4")]))
    assert buf.getvalue()[6:8] == b"\x03\x00"
    with pytest.raises(ValueError, match="non-ASCII"):
        comm.view(Parameters([buf.getvalue()], "numpy.ndarray"))
