"""A search index's two files, index.npz and index.json: their fields, reading them back, and the
checks that name the file, the field and the problem when a folder is malformed or its two files
belong to different indexes. shdh.ranking.search_index writes them and answers queries from them.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from shdh.ranking.exact import integer_weights

INDEX_ARRAYS = "index.npz"


INDEX_RECORD = "index.json"


FORMAT = "shdh-search-index/2"


# /1 had no sorted ids: its lookup is built in memory at load, as it was
READABLE_FORMATS = ("shdh-search-index/1", FORMAT)


ENCODER_FIELDS = ("name", "version", "alias", "run_id")


# index.json's fields; write_index fills format, bits, n_items, segment_sizes, weights and
# arrays_sha256, so a caller's record holds method, dataset and encoder. No time of writing:
# the index step's folder is a DVC output, and the same codes must give the same bytes (an
# index written before this may hold one, `created`, which is read and shown as it is).
# arrays_sha256 ties the record to its arrays: the two files are replaced one after the other
# where they are copied (an object store has no folder rename), and a reader that comes
# between must refuse the pair rather than serve new codes under the old encoder's name.
RECORD_FIELDS = (
    "format",
    "method",
    "bits",
    "dataset",
    "encoder",
    "n_items",
    "segment_sizes",
    "weights",
)


# index.npz's arrays: dtype and numbers of dimensions (ancestors: (N, K) matrix rows, or the
# (N, K, M) ancestor sets of multi-label items, -1 padded).
_ARRAYS = {
    "packed": (np.uint8, (2,)),
    "item_ids": (np.int64, (1,)),
    "ancestors": (np.int32, (2, 3)),
}


# What format /2 adds: the id lookup, item_ids[id_order] == sorted_ids, ascending and distinct.
_LOOKUP = {"sorted_ids": (np.int64, (1,)), "id_order": (np.int64, (1,))}


class IndexFileError(ValueError):
    """An index folder, or the arrays given to write one, is malformed; the message names the
    file, the field and the problem."""


def check_digest(folder: Path, record: Mapping[str, Any]) -> None:
    """The record names the digest of the arrays beside it (see RECORD_FIELDS' comment)."""
    if "arrays_sha256" not in record:
        raise IndexFileError(f"{folder / INDEX_RECORD}: field 'arrays_sha256' is missing")
    if sha256(folder / INDEX_ARRAYS) != record["arrays_sha256"]:
        raise IndexFileError(
            f"{folder / INDEX_RECORD}: field 'arrays_sha256' is not the digest of "
            f"{INDEX_ARRAYS}: the two files belong to different indexes (one was replaced "
            "without the other)"
        )


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def integers(values: Any, dtype: type[np.integer]) -> np.ndarray:
    """values as dtype when they are integers that fit; anything else is left for the check,
    which then names the array and its dtype."""
    a = np.asarray(values)
    if np.issubdtype(a.dtype, np.integer) and np.can_cast(a, dtype, casting="same_kind"):
        info = np.iinfo(dtype)
        if a.size == 0 or (a.min() >= info.min and a.max() <= info.max):
            return a.astype(dtype)
    return a


def read_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise IndexFileError(f"{path}: no such file; build the index with `shdh index`") from err
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise IndexFileError(f"{path}: not a readable JSON record ({err})") from err
    if not isinstance(record, dict):
        raise IndexFileError(f"{path}: expected a JSON object, got {type(record).__name__}")
    _check_record(record, path)
    return record


def _check_record(record: Mapping[str, Any], where: Path) -> None:
    missing = [f for f in RECORD_FIELDS if f not in record]
    if missing:
        raise IndexFileError(f"{where}: field {missing[0]!r} is missing")
    if record["format"] not in READABLE_FORMATS:
        raise IndexFileError(
            f"{where}: field 'format' is {record['format']!r}, not one of {READABLE_FORMATS} "
            "(rebuild the index with this version's `shdh index`)"
        )
    encoder = record["encoder"]
    if not isinstance(encoder, dict):
        raise IndexFileError(f"{where}: field 'encoder' must be an object, got {encoder!r}")
    missing = [f for f in ENCODER_FIELDS if f not in encoder]
    if missing:
        raise IndexFileError(f"{where}: field 'encoder.{missing[0]}' is missing")


def read_arrays(path: Path, with_lookup: bool) -> dict[str, np.ndarray]:
    """The arrays of index.npz, memory-mapped (the packed codes are then copied by the ranking,
    the item ids narrowed into memory by SearchIndex)."""
    names = [*_ARRAYS, *(_LOOKUP if with_lookup else ())]
    try:
        with zipfile.ZipFile(path) as archive, path.open("rb") as raw:
            files = set(archive.namelist())
            missing = [name for name in names if f"{name}.npy" not in files]
            if missing:
                raise IndexFileError(f"{path}: array {missing[0]!r} is missing")
            arrays = {name: _member(path, archive, raw, name) for name in names}
    except FileNotFoundError as err:
        raise IndexFileError(f"{path}: no such file; build the index with `shdh index`") from err
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        if isinstance(err, IndexFileError):
            raise
        raise IndexFileError(f"{path}: not a readable .npz archive ({err})") from err
    return arrays


def _member(path: Path, archive: zipfile.ZipFile, raw: BinaryIO, name: str) -> np.ndarray:
    """One array of an .npz: mapped where it lies in the file when stored uncompressed (what
    np.savez writes), else read."""
    info = archive.getinfo(f"{name}.npy")
    if info.compress_type != zipfile.ZIP_STORED:
        with archive.open(info) as member:
            return np.lib.format.read_array(member, allow_pickle=False)
    raw.seek(info.header_offset + 26)  # the local header's name and extra field lengths
    name_length, extra_length = struct.unpack("<HH", raw.read(4))
    raw.seek(info.header_offset + 30 + name_length + extra_length)
    version = np.lib.format.read_magic(raw)
    read_header = {(1, 0): np.lib.format.read_array_header_1_0}.get(
        version, np.lib.format.read_array_header_2_0
    )
    shape, fortran, dtype = read_header(raw)
    if dtype.hasobject:
        raise ValueError(f"array {name!r} holds Python objects")
    if math.prod(shape) == 0:
        return np.empty(shape, dtype)
    order = "F" if fortran else "C"
    return np.memmap(path, dtype=dtype, mode="r", offset=raw.tell(), shape=shape, order=order)


def layout(record: Mapping[str, Any], where: Path) -> tuple[tuple[int, ...], tuple[float, ...]]:
    _check_record(record, where)
    sizes, weights = record["segment_sizes"], record["weights"]
    if (
        not isinstance(sizes, list | tuple)
        or not sizes
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes)
    ):
        raise IndexFileError(f"{where}: field 'segment_sizes' must be ints >= 1, got {sizes!r}")
    if not isinstance(weights, list | tuple) or len(weights) != len(sizes):
        raise IndexFileError(
            f"{where}: field 'weights' must hold one number per segment ({len(sizes)}), "
            f"got {weights!r}"
        )
    try:
        integer_weights(weights)
    except (ValueError, TypeError) as err:
        raise IndexFileError(f"{where}: field 'weights': {err}") from err
    return tuple(sizes), tuple(float(w) for w in weights)


def checked_arrays(arrays: dict[str, np.ndarray], n_bits: int, where: Path) -> tuple:
    for name, (dtype, ndims) in _ARRAYS.items():
        a = arrays[name]
        if a.dtype != dtype or a.ndim not in ndims:
            raise IndexFileError(
                f"{where}: array {name!r} must be {' or '.join(map(str, ndims))}-D "
                f"{np.dtype(dtype)}, got {a.ndim}-D {a.dtype} with shape {a.shape}"
            )
    packed, ids, anc = arrays["packed"], arrays["item_ids"], arrays["ancestors"]
    n_bytes = -(-n_bits // 8)
    if packed.shape[1] != n_bytes:
        raise IndexFileError(
            f"{where}: array 'packed' has {packed.shape[1]} bytes per code, but {n_bits} bits "
            f"(the segment sizes) pack into {n_bytes}"
        )
    pad = 8 * n_bytes - n_bits
    if pad and len(packed) and np.any(packed[:, -1] & np.uint8((1 << pad) - 1)):
        raise IndexFileError(f"{where}: array 'packed' has bits set past bit {n_bits}")
    if len(ids) != len(packed) or len(anc) != len(packed):
        raise IndexFileError(
            f"{where}: arrays 'packed', 'item_ids' and 'ancestors' must have one row per item, "
            f"got {len(packed)}, {len(ids)} and {len(anc)}"
        )
    if len(packed) == 0:
        raise IndexFileError(f"{where}: the index holds no items")
    return packed, ids, anc


# Items read at a time from a mapped array: 512 KB of int64, reused by the allocator.
_CHUNK = 1 << 16


def _chunks(a: np.ndarray, size: int, overlap: int = 0) -> Iterator[np.ndarray]:
    """a (1-D) in pieces of size (plus `overlap` items of the next). A mapped array is read
    from its file rather than through the map, which would leave every page of it resident."""
    for start in range(0, len(a), size):
        stop = min(len(a), start + size + overlap)
        if isinstance(a, np.memmap):
            offset = a.offset + start * a.itemsize
            yield np.fromfile(a.filename, a.dtype, stop - start, offset=offset)
        else:
            yield np.asarray(a[start:stop])


def narrowed(item_ids: np.ndarray) -> np.ndarray:
    """The ids in memory, as int32 where they fit: every query reads k of them at random, so a
    map of them would soon be resident whole, at 8 bytes an item; as int32, 4 (half the
    packed codes at 64 bits)."""
    low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    fits = all(c.min() >= low and c.max() <= high for c in _chunks(item_ids, _CHUNK))
    out = np.empty(len(item_ids), np.int32 if fits else np.int64)
    for start, chunk in zip(range(0, len(out), _CHUNK), _chunks(item_ids, _CHUNK), strict=True):
        out[start : start + len(chunk)] = chunk
    return out


def _check_distinct(sorted_ids: np.ndarray, where: Path) -> None:
    """sorted_ids strictly ascending: the item ids are distinct."""
    for ids in _chunks(sorted_ids, _CHUNK, overlap=1):
        if np.any(ids[1:] < ids[:-1]):
            raise IndexFileError(f"{where}: array 'sorted_ids' is not in ascending order")
        repeated = ids[1:] == ids[:-1]
        if repeated.any():
            raise IndexFileError(
                f"{where}: array 'item_ids' must be distinct; id "
                f"{int(ids[1:][np.argmax(repeated)])} appears more than once"
            )


def id_lookup(
    item_ids: np.ndarray, lookup: tuple[np.ndarray, np.ndarray] | None, where: Path
) -> tuple[np.ndarray, np.ndarray]:
    """(sorted_ids, id_order): the file's, checked, or built from item_ids."""
    if lookup is None:
        id_order = np.argsort(item_ids, kind="stable")
        lookup = item_ids[id_order], id_order
    arrays = dict(zip(_LOOKUP, lookup, strict=True))
    for name, (dtype, ndims) in _LOOKUP.items():
        a = arrays[name]
        if a.dtype != dtype or a.ndim not in ndims or len(a) != len(item_ids):
            raise IndexFileError(
                f"{where}: array {name!r} must be 1-D {np.dtype(dtype)} with one entry per "
                f"item ({len(item_ids)}), got {a.ndim}-D {a.dtype} with shape {a.shape}"
            )
    _check_distinct(lookup[0], where)
    return lookup


def check_counts(record: Mapping[str, Any], n_items: int, n_bits: int, where: Path) -> None:
    for field, actual in (("n_items", n_items), ("bits", n_bits)):
        if record[field] != actual:
            raise IndexFileError(
                f"{where}: field {field!r} is {record[field]!r} but the arrays hold {actual}"
            )


def distance_scale(weights: Sequence[float], int_weights: np.ndarray) -> tuple[int, int]:
    """(numerator, denominator) of int_weights / weights, the same ratio for every segment:
    an integer distance times denominator / numerator is the float distance of Eq. 4."""
    j = int(np.argmax(int_weights > 0))
    ratio = Fraction(int(int_weights[j])) / Fraction(weights[j]).limit_denominator(1000)
    return ratio.numerator, ratio.denominator
