"""IDX files (the MNIST / Fashion-MNIST container), read and written byte-exactly.

The format is a 4-byte magic ``00 00 <type code> <ndim>``, ``ndim`` big-endian uint32 sizes, then
the payload in big-endian order. It has no checksum, so a truncated or padded file would parse
into a plausible-looking array; every reader here therefore checks the payload length exactly and
reports the file and the problem instead of returning a damaged array.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from shdh.runtime.atomic import atomic_path

# Type code -> big-endian dtype, as in the format's definition.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {(dt.kind, dt.itemsize): code for code, dt in IDX_DTYPES.items()}
_GZIP_MAGIC = b"\x1f\x8b"


class DataFormatError(ValueError):
    """An input file is corrupt, truncated or not in the expected format."""


def read_idx_bytes(path: str | os.PathLike[str]) -> bytes:
    """Return the decompressed bytes of a plain or gzip-compressed IDX file.

    Compression is detected from the content (IDX starts with 00 00, gzip with 1f 8b), not the
    suffix, so a renamed file still reads. A broken gzip stream becomes a DataFormatError.
    """
    path = Path(path)
    raw = path.read_bytes()
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except EOFError as exc:
        raise DataFormatError(f"{path}: truncated gzip stream ({exc})") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise DataFormatError(f"{path}: corrupt gzip stream ({exc})") from exc


def parse_idx(data: bytes, source: str | os.PathLike[str]) -> np.ndarray:
    """Parse decompressed IDX bytes into a native-endian array; ``source`` names it in errors."""
    if len(data) < 4:
        raise DataFormatError(f"{source}: truncated header: {len(data)} bytes, need at least 4")
    if data[0] != 0 or data[1] != 0:
        raise DataFormatError(
            f"{source}: bad magic {data[:4].hex()}: an IDX file starts with bytes 00 00"
        )
    code, ndim = data[2], data[3]
    if code not in IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in IDX_DTYPES)
        raise DataFormatError(f"{source}: bad dtype code 0x{code:02X} (known: {known})")
    if ndim == 0:
        raise DataFormatError(f"{source}: bad magic {data[:4].hex()}: zero dimensions")
    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise DataFormatError(
            f"{source}: truncated header: {len(data)} bytes, need {header_len} for {ndim} dims"
        )
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    got = len(data) - header_len
    if got < expected:
        raise DataFormatError(f"{source}: truncated payload: expected {expected} bytes, got {got}")
    if got > expected:
        raise DataFormatError(
            f"{source}: trailing data: expected {expected} payload bytes, got {got}"
        )
    array = np.frombuffer(data, dtype=dtype, offset=header_len).reshape(shape)
    return array.astype(dtype.newbyteorder("="))  # copy: writable and native-endian


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a plain or .gz IDX file, checking magic, dtype code and exact payload length."""
    return parse_idx(read_idx_bytes(path), path)


def encode_idx(array: np.ndarray) -> bytes:
    """Return the IDX encoding of ``array``: magic, big-endian uint32 dims, big-endian payload."""
    array = np.asarray(array)
    code = _CODES.get((array.dtype.kind, array.dtype.itemsize))
    if code is None:
        raise ValueError(f"array: dtype {array.dtype} has no IDX type code")
    if not 1 <= array.ndim <= 255:
        raise ValueError(f"array: IDX needs 1 to 255 dimensions, got {array.ndim}")
    if max(array.shape) >= 2**32:
        raise ValueError(f"array: shape {array.shape} does not fit IDX's uint32 sizes")
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    return header + np.ascontiguousarray(array, dtype=IDX_DTYPES[code]).tobytes()


def write_idx(
    path: str | os.PathLike[str], array: np.ndarray, *, gzip_compress: bool = True
) -> Path:
    """Write ``array`` as an IDX file, gzip-compressed like the upstream distribution by default.

    The gzip header gets mtime 0 and no file name so the same array always gives the same bytes.
    """
    path = Path(path)
    data = encode_idx(array)
    with atomic_path(path) as tmp, open(tmp, "xb") as f:
        if gzip_compress:
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
                gz.write(data)
        else:
            f.write(data)
    return path
