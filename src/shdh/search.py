"""Exact top-k search over a database of hash codes, ranked as the offline evaluation ranks.

An index folder holds two files: index.npz (the packed database codes, the items' ids, their
ancestor rows and the ids' sorted order) and index.json (the segment layout, the float level
weights of Eq. 2 and what made the index: method, dataset, encoder). A query is ranked as
`shdh.retrieval.rank_with_distances` ranks (shdh.search_rank) on the integer form of the
weights, so hits, distances and ties (ascending distance, then ascending database row) are
exactly the offline ranking's; the distance handed back is the integer distance divided by the
weights' integer scale, the weighted Hamming distance of Eq. 4.

Memory: the packed codes (every query scans them) are held once, byte-major, by the ranking
(read from the memory-mapped file into that copy, so there is never a second copy in memory);
the item ids, as int32 where they fit (every query reads k of them at random), are read into
memory. The ancestors and the id lookup are memory-mapped from index.npz (written uncompressed,
so each is a plain array at an offset of the file): an id query touches its hits' ancestor rows
and a binary search's few pages of the sorted ids. So the service holds 1.5x the packed codes at
64 bits, not the six times that ids, ancestors and an id lookup held in memory take
(docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from shdh.atomic import atomic_dir
from shdh.retrieval import check_n_bits, check_packed, integer_weights, pack_codes
from shdh.search_rank import Ranker

INDEX_ARRAYS = "index.npz"
INDEX_RECORD = "index.json"
FORMAT = "shdh-search-index/2"
# /1 had no sorted ids: its lookup is built in memory at load, as it was
READABLE_FORMATS = ("shdh-search-index/1", FORMAT)
ENCODER_FIELDS = ("name", "version", "alias", "run_id")
# index.json's fields; write_index fills format, bits, n_items, segment_sizes, weights,
# arrays_sha256 and (unless given) created, so a caller's record holds method, dataset and
# encoder. arrays_sha256 ties the record to its arrays: the two files are replaced one after the
# other where they are copied (an object store has no folder rename), and a reader that comes
# between must refuse the pair rather than serve new codes under the old encoder's name.
RECORD_FIELDS = (
    "format",
    "method",
    "bits",
    "dataset",
    "encoder",
    "created",
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


@dataclass(frozen=True)
class Hit:
    item_id: int
    distance: float
    shared_level: int


class SearchIndex:
    """A loaded, checked index; `search_codes` and `search_ids` answer top-k queries.
    `item_ids` is held as int32 where the ids fit (see the module's docstring, "Memory")."""

    def __init__(
        self,
        packed: np.ndarray,
        item_ids: np.ndarray,
        ancestors: np.ndarray,
        record: Mapping[str, Any],
        folder: str | os.PathLike[str] = "index",
        lookup: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Check the arrays and the record; errors name folder's two files. lookup: the
        (sorted_ids, id_order) an index file holds, already checked when it was written (its
        digest binds it); without it the lookup is built and checked here."""
        record_file, arrays_file = Path(folder, INDEX_RECORD), Path(folder, INDEX_ARRAYS)
        self.record = dict(record)
        self.segment_sizes, self.weights = _layout(self.record, record_file)
        self.n_bits = int(sum(self.segment_sizes))
        packed, self.item_ids, self.ancestors = _checked_arrays(
            {"packed": packed, "item_ids": item_ids, "ancestors": ancestors},
            self.n_bits,
            arrays_file,
        )
        _check_counts(self.record, len(self.item_ids), self.n_bits, record_file)
        self._int_weights = integer_weights(self.weights)
        self._scale = _distance_scale(self.weights, self._int_weights)
        self._ranker = Ranker(packed, self.segment_sizes, self._int_weights)
        self.packed = self._ranker.codes  # (N, n_bytes): a read-only view of the ranking's copy
        self._sorted_ids, self._id_order = _id_lookup(self.item_ids, lookup, arrays_file)
        self.item_ids = _narrowed(self.item_ids)  # int32 where the ids fit

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> SearchIndex:
        """Read and check an index folder written by `write_index`."""
        folder = Path(folder)
        record = _read_record(folder / INDEX_RECORD)
        arrays = _read_arrays(folder / INDEX_ARRAYS, with_lookup=record["format"] == FORMAT)
        lookup = arrays.pop("sorted_ids", None), arrays.pop("id_order", None)
        index = cls(
            **arrays, record=record, folder=folder, lookup=None if lookup[0] is None else lookup
        )
        _check_digest(folder, record)
        index.rank_codes(index.packed[:1], 1)  # loads the kernel now, not on a first query
        return index

    def search_codes(self, codes: np.ndarray, k: int) -> list[list[Hit]]:
        """Top k for each query code. codes: (Q, n_bits) in {-1, +1} or {0, 1} (any numeric
        dtype), or packed (Q, n_bytes) uint8 as `shdh.retrieval.pack_codes` writes them: a uint8
        array as wide as the packed codes is taken as packed. shared_level is 0 (no labels)."""
        rows, distances = self.rank_codes(as_packed(codes, self.n_bits, "query codes"), k)
        return [_hits(*self.hit_arrays(r, d)) for r, d in zip(rows, distances, strict=True)]

    def search_ids(self, item_ids: Sequence[int], k: int) -> list[list[Hit]]:
        """Top k for each database item's own code (the item itself comes first or tied first,
        at distance 0), with the deepest level each hit shares with it."""
        query_rows = self.rows_of(item_ids)
        ranked = zip(query_rows, *self.rank_codes(self.packed[query_rows], k), strict=True)
        return [_hits(*self.hit_arrays(r, d, self.ancestors[q])) for q, r, d in ranked]

    def rows_of(self, item_ids: Sequence[int]) -> np.ndarray:
        """The database rows of item ids; an unknown id raises KeyError naming it."""
        return self._id_order[_positions(self._sorted_ids, item_ids)]

    def rank_codes(self, q_packed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, integer distances), both (Q, min(k, N)) int64, of packed queries: the order
        of `shdh.retrieval.rank_with_distances` (ascending distance, then row)."""
        check_n_bits(check_packed("query codes", q_packed), self.n_bits, "query codes")
        return self._ranker.rank(np.asarray(q_packed), _checked_k(k))

    def hit_arrays(
        self, rows: np.ndarray, distances: np.ndarray, query_anc: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One query's hits as arrays: item ids, Eq. 4's float distances and the deepest level
        each shares with the query's ancestors (0 without them)."""
        levels = (
            np.zeros(len(rows), np.int64)
            if query_anc is None
            else shared_level(query_anc, self.ancestors[rows])
        )
        numerator, denominator = self._scale  # one correctly rounded division:
        return self.item_ids[rows], distances * denominator / numerator, levels


def _hits(ids: np.ndarray, distances: np.ndarray, levels: np.ndarray) -> list[Hit]:
    return [Hit(int(i), float(d), int(s)) for i, d, s in zip(ids, distances, levels, strict=True)]


def _positions(sorted_ids: np.ndarray, item_ids: Sequence[int]) -> np.ndarray:
    """Where each of item_ids sits in sorted_ids; KeyError naming the first id not there."""
    wanted = np.asarray(item_ids).reshape(-1)
    if wanted.size and not np.issubdtype(wanted.dtype, np.integer):
        raise KeyError(f"item ids must be integers, got {wanted.tolist()!r}")
    wanted = wanted.astype(np.int64)
    pos = np.minimum(np.searchsorted(sorted_ids, wanted), len(sorted_ids) - 1)
    unknown = sorted_ids[pos] != wanted
    if unknown.any():
        raise KeyError(f"item id {int(wanted[np.argmax(unknown)])} is not in the index")
    return pos


def _checked_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return int(k)


def shared_level(query_anc: np.ndarray, item_anc: np.ndarray) -> np.ndarray:
    """(M,) the deepest level (1-based) at which each item of item_anc, (M, K) rows or (M, K, S)
    sets, has a node of the query's, query_anc (K,) or (K, S); -1 (no node: below a shallow
    leaf, or set padding) matches nothing, and 0 means not even the root is shared."""
    query = query_anc.reshape(query_anc.shape[0], -1)  # (K, Sq)
    items = item_anc.reshape(*item_anc.shape[:2], -1)  # (M, K, S)
    same = items[:, :, :, None] == query[None, :, None, :]
    shared = (same & (query >= 0)[None, :, None, :]).any(axis=(2, 3))  # (M, K)
    deepest = shared.shape[1] - np.argmax(shared[:, ::-1], axis=1)
    return np.where(shared.any(axis=1), deepest, 0)


def as_packed(codes: np.ndarray, n_bits: int, name: str = "codes") -> np.ndarray:
    """Packed (Q, ceil(n_bits/8)) uint8 codes from packed ones (checked by the ranking) or from
    (Q, n_bits) codes in {-1, +1} or {0, 1}."""
    codes = np.asarray(codes)
    n_bytes = -(-n_bits // 8)
    if codes.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (Q, bits) array, got shape {codes.shape}")
    if codes.dtype == np.uint8 and codes.shape[1] == n_bytes:
        return codes
    if codes.shape[1] != n_bits:
        raise ValueError(
            f"{name} have {codes.shape[1]} columns; the index holds {n_bits}-bit codes "
            f"({n_bits} columns of -1/+1 or 0/1, or {n_bytes} packed uint8 bytes)"
        )
    if codes.dtype == np.bool_:
        codes = codes.astype(np.int8)
    if not np.issubdtype(codes.dtype, np.number):
        raise ValueError(f"{name} must be numeric -1/+1 or 0/1 codes, got dtype {codes.dtype}")
    if np.any(codes == 0) and np.any(codes == -1):
        raise ValueError(f"{name} mix 0 and -1: give -1/+1 or 0/1 codes")
    signed = codes.astype(np.result_type(codes.dtype, np.int8))  # uint8 0/1 -> int16
    return pack_codes(np.where(signed == 0, -1, signed))


def write_index(
    folder: str | os.PathLike[str],
    *,
    codes: np.ndarray,
    item_ids: np.ndarray,
    ancestors: np.ndarray,
    segment_sizes: Sequence[int],
    weights: Sequence[float],
    record: Mapping[str, Any],
) -> Path:
    """Check and write an index folder atomically (a temporary folder, then a rename), so a
    reader sees the previous index or the new one, never a mixture. codes: (N, n_bits) in
    {-1, +1} (or packed). record: method, dataset and encoder {name, version, alias, run_id}."""
    folder = Path(folder)
    n_bits = int(sum(int(s) for s in segment_sizes))
    full = {
        **dict(record),
        "format": FORMAT,
        "bits": n_bits,
        "n_items": len(item_ids),
        "segment_sizes": [int(s) for s in segment_sizes],
        "weights": [float(w) for w in weights],
    }
    full.setdefault("created", datetime.now(UTC).isoformat(timespec="seconds"))
    index = SearchIndex(
        as_packed(codes, n_bits, "codes"),
        _integers(item_ids, np.int64),
        _integers(ancestors, np.int32),
        full,
        folder,
    )
    with atomic_dir(folder) as tmp:
        arrays = {
            "packed": index.packed,
            "item_ids": index.item_ids.astype(np.int64),
            "ancestors": index.ancestors,
            "sorted_ids": index._sorted_ids,
            "id_order": index._id_order,
        }
        np.savez(tmp / INDEX_ARRAYS, **arrays)  # uncompressed: the reader maps the arrays
        index.record["arrays_sha256"] = _sha256(tmp / INDEX_ARRAYS)
        (tmp / INDEX_RECORD).write_text(json.dumps(index.record, indent=2) + "\n")
    return folder


def _check_digest(folder: Path, record: Mapping[str, Any]) -> None:
    """The record names the digest of the arrays beside it (see RECORD_FIELDS' comment)."""
    if "arrays_sha256" not in record:
        raise IndexFileError(f"{folder / INDEX_RECORD}: field 'arrays_sha256' is missing")
    if _sha256(folder / INDEX_ARRAYS) != record["arrays_sha256"]:
        raise IndexFileError(
            f"{folder / INDEX_RECORD}: field 'arrays_sha256' is not the digest of "
            f"{INDEX_ARRAYS}: the two files belong to different indexes (one was replaced "
            "without the other)"
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _integers(values: Any, dtype: type[np.integer]) -> np.ndarray:
    """values as dtype when they are integers that fit; anything else is left for the check,
    which then names the array and its dtype."""
    a = np.asarray(values)
    if np.issubdtype(a.dtype, np.integer) and np.can_cast(a, dtype, casting="same_kind"):
        info = np.iinfo(dtype)
        if a.size == 0 or (a.min() >= info.min and a.max() <= info.max):
            return a.astype(dtype)
    return a


# --- checks ------------------------------------------------------------------------------------


def _read_record(path: Path) -> dict[str, Any]:
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


def _read_arrays(path: Path, with_lookup: bool) -> dict[str, np.ndarray]:
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


def _layout(record: Mapping[str, Any], where: Path) -> tuple[tuple[int, ...], tuple[float, ...]]:
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


def _checked_arrays(arrays: dict[str, np.ndarray], n_bits: int, where: Path) -> tuple:
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


def _narrowed(item_ids: np.ndarray) -> np.ndarray:
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


def _id_lookup(
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


def _check_counts(record: Mapping[str, Any], n_items: int, n_bits: int, where: Path) -> None:
    for field, actual in (("n_items", n_items), ("bits", n_bits)):
        if record[field] != actual:
            raise IndexFileError(
                f"{where}: field {field!r} is {record[field]!r} but the arrays hold {actual}"
            )


def _distance_scale(weights: Sequence[float], int_weights: np.ndarray) -> tuple[int, int]:
    """(numerator, denominator) of int_weights / weights, the same ratio for every segment:
    an integer distance times denominator / numerator is the float distance of Eq. 4."""
    j = int(np.argmax(int_weights > 0))
    ratio = Fraction(int(int_weights[j])) / Fraction(weights[j]).limit_denominator(1000)
    return ratio.numerator, ratio.denominator
