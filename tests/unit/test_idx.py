"""IDX reading and writing: exact bytes, every dtype code, and each kind of damaged file."""

import gzip
import os

import numpy as np
import pytest

from shdh.data import idx
from shdh.data.idx import DataFormatError, read_idx, write_idx


def _header(code: int, *dims: int) -> bytes:
    return bytes([0, 0, code, len(dims)]) + b"".join(d.to_bytes(4, "big") for d in dims)


def test_write_idx_matches_upstream_layout_byte_for_byte(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = write_idx(tmp_path / "images-idx3-ubyte", images, gzip_compress=False)
    assert path.read_bytes() == _header(0x08, 2, 3, 4) + bytes(range(24))


def test_multibyte_types_are_big_endian(tmp_path):
    path = write_idx(tmp_path / "s", np.array([1, 256, -2], dtype=np.int16), gzip_compress=False)
    assert path.read_bytes() == _header(0x0B, 3) + b"\x00\x01\x01\x00\xff\xfe"


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64, ">i4", "<f8"]
)
@pytest.mark.parametrize("compress", [True, False])
def test_round_trip(tmp_path, dtype, compress):
    rng = np.random.default_rng(3)
    array = (rng.standard_normal((3, 5, 2)) * 100).astype(dtype)
    path = write_idx(tmp_path / "a.idx", array, gzip_compress=compress)
    back = read_idx(path)
    assert back.dtype == np.dtype(dtype).newbyteorder("=")
    assert back.dtype.isnative
    np.testing.assert_array_equal(back, array)
    back[0, 0, 0] = 1  # the result is an ordinary writable array
    assert path.read_bytes()[:2] == (b"\x1f\x8b" if compress else b"\x00\x00")


def test_gzip_output_is_deterministic_and_plain_gzip(tmp_path):
    array = np.arange(100, dtype=np.uint8)
    a = write_idx(tmp_path / "a.gz", array).read_bytes()
    b = write_idx(tmp_path / "b.gz", array).read_bytes()
    assert a == b
    assert gzip.decompress(a) == _header(0x08, 100) + array.tobytes()


def test_compression_is_detected_from_content_not_suffix(tmp_path):
    array = np.arange(10, dtype=np.uint8)
    plain_named_gz = write_idx(tmp_path / "x.gz", array, gzip_compress=False)
    gz_named_plain = write_idx(tmp_path / "y", array, gzip_compress=True)
    np.testing.assert_array_equal(read_idx(plain_named_gz), array)
    np.testing.assert_array_equal(read_idx(gz_named_plain), array)


def test_write_rejects_unsupported_dtype_and_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="uint16"):
        write_idx(tmp_path / "u16", np.zeros(3, dtype=np.uint16))
    with pytest.raises(ValueError, match="dimensions"):
        write_idx(tmp_path / "scalar", np.uint8(3))
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_previous_file_and_no_temporary(tmp_path, monkeypatch):
    path = write_idx(tmp_path / "a.gz", np.arange(5, dtype=np.uint8))
    before = path.read_bytes()

    def broken_write(self, data):
        raise OSError("disk full")

    monkeypatch.setattr(gzip.GzipFile, "write", broken_write)
    with pytest.raises(OSError, match="disk full"):
        write_idx(path, np.arange(7, dtype=np.uint8))
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["a.gz"]


def _gz(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(gzip.compress(data, mtime=0))
    return path


def test_truncated_gzip(tmp_path):
    good = gzip.compress(_header(0x08, 1000) + bytes(1000), mtime=0)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(DataFormatError, match=r"train-images-idx3-ubyte\.gz: truncated gzip"):
        read_idx(path)


def test_corrupt_gzip_body(tmp_path):
    data = bytearray(gzip.compress(np.random.default_rng(0).bytes(5000), mtime=0))
    data[-8:-4] = bytes(b ^ 0xFF for b in data[-8:-4])  # damage the CRC32 trailer
    path = tmp_path / "labels.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match=r"labels\.gz: corrupt gzip"):
        read_idx(path)


def test_bad_magic(tmp_path):
    path = _gz(tmp_path, "x.gz", b"\x01\x02\x08\x01" + (3).to_bytes(4, "big") + bytes(3))
    with pytest.raises(DataFormatError, match=r"x\.gz: bad magic 01020801"):
        read_idx(path)


def test_bad_dtype_code(tmp_path):
    path = _gz(tmp_path, "x.gz", _header(0x07, 3) + bytes(3))
    with pytest.raises(DataFormatError, match=r"x\.gz: bad dtype code 0x07"):
        read_idx(path)


def test_zero_dimensions(tmp_path):
    path = _gz(tmp_path, "x.gz", b"\x00\x00\x08\x00")
    with pytest.raises(DataFormatError, match=r"x\.gz: .*zero dimensions"):
        read_idx(path)


@pytest.mark.parametrize("data", [b"", b"\x00\x00", b"\x00\x00\x08\x03\x00\x00\x00\x02"])
def test_truncated_header(tmp_path, data):
    path = tmp_path / "h"
    path.write_bytes(data)
    with pytest.raises(DataFormatError, match=r"h: truncated header"):
        read_idx(path)


def test_short_payload(tmp_path):
    path = _gz(tmp_path, "train-images-idx3-ubyte.gz", _header(0x08, 60, 28, 28) + bytes(1000))
    with pytest.raises(
        DataFormatError,
        match=r"train-images-idx3-ubyte\.gz: truncated payload: expected 47040 bytes, got 1000",
    ):
        read_idx(path)


def test_short_payload_counts_item_size(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(_header(0x0D, 4) + bytes(15))  # 4 float32 need 16 bytes
    with pytest.raises(DataFormatError, match="expected 16 bytes, got 15"):
        read_idx(path)


def test_long_payload(tmp_path):
    path = tmp_path / "l"
    path.write_bytes(_header(0x08, 4) + bytes(5))
    with pytest.raises(DataFormatError, match=r"l: trailing data: expected 4 payload bytes, got 5"):
        read_idx(path)


def test_error_is_a_value_error():
    assert issubclass(idx.DataFormatError, ValueError)
