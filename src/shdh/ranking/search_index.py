"""Exact top-k search over a database of hash codes, ranked as the offline evaluation ranks.

An index folder holds two files: index.npz (the packed database codes, the items' ids, their
ancestor rows and the ids' sorted order) and index.json (the segment layout, the float level
weights of Eq. 2 and what made the index: method, dataset, encoder). A query is ranked as
`shdh.ranking.exact.rank_with_distances` ranks (shdh.ranking.service_ranker) on the integer form of
the weights, so hits, distances and ties (ascending distance, then ascending database row) are
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

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh.ranking.exact import check_n_bits, check_packed, integer_weights, pack_codes
from shdh.ranking.index_file import (
    FORMAT,
    INDEX_ARRAYS,
    INDEX_RECORD,
    check_counts,
    check_digest,
    checked_arrays,
    distance_scale,
    id_lookup,
    integers,
    layout,
    narrowed,
    read_arrays,
    read_record,
    sha256,
)
from shdh.ranking.service_ranker import Ranker
from shdh.runtime.atomic import atomic_dir


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
        self.segment_sizes, self.weights = layout(self.record, record_file)
        self.n_bits = int(sum(self.segment_sizes))
        packed, self.item_ids, self.ancestors = checked_arrays(
            {"packed": packed, "item_ids": item_ids, "ancestors": ancestors},
            self.n_bits,
            arrays_file,
        )
        check_counts(self.record, len(self.item_ids), self.n_bits, record_file)
        self._int_weights = integer_weights(self.weights)
        self._scale = distance_scale(self.weights, self._int_weights)
        self._ranker = Ranker(packed, self.segment_sizes, self._int_weights)
        self.packed = self._ranker.codes  # (N, n_bytes): a read-only view of the ranking's copy
        self._sorted_ids, self._id_order = id_lookup(self.item_ids, lookup, arrays_file)
        self.item_ids = narrowed(self.item_ids)  # int32 where the ids fit

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> SearchIndex:
        """Read and check an index folder written by `write_index`."""
        folder = Path(folder)
        record = read_record(folder / INDEX_RECORD)
        arrays = read_arrays(folder / INDEX_ARRAYS, with_lookup=record["format"] == FORMAT)
        lookup = arrays.pop("sorted_ids", None), arrays.pop("id_order", None)
        index = cls(
            **arrays, record=record, folder=folder, lookup=None if lookup[0] is None else lookup
        )
        check_digest(folder, record)
        index.rank_codes(index.packed[:1], 1)  # loads the kernel now, not on a first query
        return index

    def search_codes(self, codes: np.ndarray, k: int) -> list[list[Hit]]:
        """Top k for each query code. codes: (Q, n_bits) in {-1, +1} or {0, 1} (any numeric
        dtype), or packed (Q, n_bytes) uint8 as `shdh.ranking.exact.pack_codes` writes them: a uint8
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
        of `shdh.ranking.exact.rank_with_distances` (ascending distance, then row)."""
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
    index = SearchIndex(
        as_packed(codes, n_bits, "codes"),
        integers(item_ids, np.int64),
        integers(ancestors, np.int32),
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
        index.record["arrays_sha256"] = sha256(tmp / INDEX_ARRAYS)
        (tmp / INDEX_RECORD).write_text(json.dumps(index.record, indent=2) + "\n")
    return folder


# --- checks ------------------------------------------------------------------------------------
