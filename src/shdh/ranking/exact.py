"""Bit packing, weighted Hamming distance (paper Eq. 4) and exact, deterministic ranking.

Codes are stored packed (`np.packbits` of bit = +1, big-endian within a byte) because that is
8x smaller than int8 and lets one XOR + popcount compare 64 bits at once.

Eq. 4 is read as docs/method.md says: D(q, x) = sum_k u_k * popcount((q xor x) & mask_k) over
the code's segments. The float layer weights are replaced by proportional integers (K+1-k for
SHDH), so every distance is an exact small integer: ties are real ties, not rounding noise, and
are broken by ascending database index (the split step shuffles the database once, so that order
is neutral).

Speed: the database is viewed as uint64 words and the weights are split into bit planes,
D = sum_p 2^p * popcount((q xor x) & M_p), where M_p covers the segments whose integer weight has
bit p set. Weights (3, 2, 1) need two masked popcounts, not three; plain Hamming needs one. The
popcount loops are compiled (exact_kernel.py, numba), because numpy would make one pass over
memory per word and plane and its popcount is not vectorised.

Three ways to the top n, all exact and giving the same order:
- `rank` / `rank_with_distances` with n well below N: the fused kernel, which never stores the
  distance matrix (faster than faiss's IndexBinaryFlat, docs/benchmarks.md);
- n near N: every distance of a query chunk, then a counting sort cut at n (distances are small
  integers);
- otherwise on a stored chunk: the fused kernel's heap scan, reading the stored distances.
The evaluation ranks every item for every query and takes its metrics from that pass
(shdh.core.metric_kernel), through `iter_query_chunks`: the checked words, chunk by chunk.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import numpy as np

_T = TypeVar("_T")

# Query-chunk x database cells whose distances are held at once (16 Mi cells, 16-32 MiB).
_CHUNK_CELLS = 1 << 24
# When n is this close to N (n * ratio >= N), one radix argsort of whole rows beats selection.
_FULL_SORT_RATIO = 64
# ... and then, below this largest distance, a counting sort (a histogram per row) does it.
_COUNTING_MAX_DISTANCE = 1 << 16
# The fused top-n kernel serves n * _FUSED_RATIO < N; nearer N its heap churns and the stored
# rows' selection (a counting sort) is as good.
_FUSED_RATIO = 64
# Queries per task of the fused kernel: enough to amortise a task, small enough that the tasks
# share out evenly over the workers.
_FUSED_CHUNK = 32
# Database items the top-n kernels score or scan per pass for one query: 8,192 uint64 distances
# (64 KiB) plus the tile's words stay in L2 while the top-n test reads them back.
_TILE = 8192


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """Pack {-1, +1} codes (N, L) into uint8 (N, ceil(L/8)); bit 1 means +1, padding bits are 0."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] == 0:
        raise ValueError(f"codes must be a 2-D (N, L) array with L >= 1, got shape {codes.shape}")
    bad = (codes != 1) & (codes != -1)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(
            f"codes must hold only -1 and +1; found {codes[row, col]!r} at row {row}, bit {col}"
        )
    return np.packbits(codes > 0, axis=1)


def unpack_codes(packed: np.ndarray, n_bits: int) -> np.ndarray:
    """Inverse of `pack_codes`: int8 {-1, +1} codes (N, n_bits)."""
    packed = check_packed("packed", packed)
    check_n_bits(packed, n_bits, "packed")
    bits = np.unpackbits(packed, axis=1, count=n_bits)
    return bits.astype(np.int8) * 2 - 1


def segment_masks(segment_sizes: Sequence[int]) -> np.ndarray:
    """(S, ceil(L/8)) uint8 masks over the packed layout, one per consecutive segment."""
    sizes = _check_sizes(segment_sizes)
    total = int(sizes.sum())
    bits = np.zeros((len(sizes), total), dtype=bool)
    ends = np.cumsum(sizes)
    for s, (start, stop) in enumerate(zip(ends - sizes, ends, strict=True)):
        bits[s, start:stop] = True
    return np.packbits(bits, axis=1)


def integer_weights(weights: Sequence[float], *, max_denominator: int = 1000) -> np.ndarray:
    """Smallest non-negative integers proportional to float segment weights, e.g. (1/2, 1/3, 1/6)
    -> (3, 2, 1); exact integer distances need them. Raises if a weight is not (close to) a
    fraction with denominator <= max_denominator."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"segment weights must be a non-empty 1-D sequence, got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError(f"segment weights must be finite, >= 0 and not all 0, got {w.tolist()}")
    fractions = []
    for x in w.tolist():
        f = Fraction(x).limit_denominator(max_denominator)
        # rel_tol admits weights that went through float32 (1/3 -> 0.33333334, 6e-8 off).
        if not math.isclose(float(f), x, rel_tol=1e-7, abs_tol=1e-12):
            raise ValueError(
                f"segment weight {x!r} is not a fraction with denominator <= {max_denominator}; "
                "exact integer distances need rational weights"
            )
        fractions.append(f)
    denominator = math.lcm(*(f.denominator for f in fractions))
    ints = [f.numerator * (denominator // f.denominator) for f in fractions]
    common = math.gcd(*ints)
    return np.array([i // common for i in ints], dtype=np.int64)


def weighted_hamming(
    q_packed: np.ndarray,
    db_packed: np.ndarray,
    segment_sizes: Sequence[int],
    int_weights: Sequence[int],
    *,
    chunk: int | None = None,
) -> np.ndarray:
    """Integer-scaled weighted Hamming distances (Q, N) int32 (Eq. 4)."""
    q, db, layout = _prepare(q_packed, db_packed, segment_sizes, int_weights)
    step = _chunk_size(chunk, db.shape[1])
    out = np.empty((q.shape[0], db.shape[1]), dtype=np.int32)
    for start in range(0, q.shape[0], step):
        out[start : start + step] = _distances(q[start : start + step], db, layout)
    return out


def hamming(q_packed: np.ndarray, db_packed: np.ndarray) -> np.ndarray:
    """Plain Hamming distances (Q, N) int32: one segment of weight 1 over every packed bit
    (padding bits are 0 in both, so they never count)."""
    width = check_packed("q_packed", q_packed).shape[1]
    return weighted_hamming(q_packed, db_packed, [8 * width], [1])


def iter_query_chunks(
    q_packed: np.ndarray,
    db_packed: np.ndarray,
    segment_sizes: Sequence[int],
    int_weights: Sequence[int],
    work: Callable[[int, np.ndarray, np.ndarray, DistanceLayout], _T],
    *,
    chunk: int | None = None,
    workers: int = 1,
) -> Iterator[_T]:
    """work(start, q_words, db_t, layout) for chunks of queries, yielded in query order: the
    checked codes as uint64 words (the chunk's queries (Qc, W), the database word-major (W, N))
    and the distance layout, for a caller with its own compiled pass over them (the evaluation's
    one pass per query, shdh.core.metric_kernel). chunk is the number of queries per chunk
    (default: about 16 Mi distance cells); workers > 1 runs chunks in threads (work must release
    the GIL to gain), at most 2 * workers chunks ahead. The inputs are checked at the call, the
    chunks computed lazily."""
    q, db, layout = _prepare(q_packed, db_packed, segment_sizes, int_weights)
    _top_count(None, workers, db.shape[1])  # checks workers
    step = _chunk_size(chunk, db.shape[1])

    def run(start: int) -> _T:
        return work(start, q[start : start + step], db, layout)

    return _in_order(run, range(0, q.shape[0], step), workers)


def rank_with_distances(
    q_packed: np.ndarray,
    db_packed: np.ndarray,
    segment_sizes: Sequence[int],
    int_weights: Sequence[int],
    *,
    top_n: int | None = None,
    chunk: int | None = None,
    workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """(indices, distances), both (Q, n) int64, ascending distance then database index.

    A top_n well below N goes through the fused kernel, which stores no distance matrix; larger
    ones through stored distances. Both give the same result."""
    q, db, layout, n = _prepare_ranking(
        q_packed, db_packed, segment_sizes, int_weights, top_n, workers
    )
    n_db = db.shape[1]
    if n * _FUSED_RATIO < n_db:
        return _rank_fused(q, db, layout, n, chunk, workers)
    parts = list(_iter_chunks(q, db, layout, n, _chunk_size(chunk, n_db), workers))
    if not parts:  # no queries
        return np.empty((0, n), np.int64), np.empty((0, n), np.int64)
    indices, distances = zip(*parts, strict=True)
    return np.concatenate(indices), np.concatenate(distances)


# --- the checks and the distance layout, shared with the search index (shdh.ranking.search_index*)
# -----------


@dataclass(frozen=True)
class DistanceLayout:
    """How to compute D from uint64 words: plane p adds popcount(xor & plane_masks[p, w])
    << plane_shifts[p] for each word w; dtype is the smallest unsigned type that holds
    max_distance."""

    max_distance: int
    dtype: type[np.unsignedinteger]
    plane_masks: np.ndarray  # (P, W) uint64
    plane_shifts: np.ndarray  # (P,) int64


def check_packed(name: str, packed: np.ndarray) -> np.ndarray:
    """`packed` as an array, or an error naming `name`: ranking reads codes only in this form."""
    packed = np.asarray(packed)
    if packed.dtype != np.uint8 or packed.ndim != 2 or packed.shape[1] == 0:
        raise ValueError(
            f"{name} must be packed codes, a 2-D uint8 (N, ceil(L/8)) array, "
            f"got {packed.dtype} with shape {packed.shape}"
        )
    return packed


def check_n_bits(packed: np.ndarray, n_bits: int, name: str) -> None:
    """Packed codes of exactly n_bits, their padding bits zero (a set padding bit would add to
    every distance)."""
    if isinstance(n_bits, bool) or not isinstance(n_bits, int | np.integer) or n_bits < 1:
        raise ValueError(f"n_bits must be a positive int, got {n_bits!r}")
    if packed.shape[1] != -(-n_bits // 8):
        raise ValueError(
            f"{name} has {packed.shape[1]} bytes per code but {n_bits} bits need {-(-n_bits // 8)}"
        )
    pad = 8 * packed.shape[1] - n_bits
    if pad and packed.shape[0] and np.any(packed[:, -1] & np.uint8((1 << pad) - 1)):
        raise ValueError(f"{name} has bits set past bit {n_bits} (padding must be 0)")


def _check_sizes(segment_sizes: Sequence[int]) -> np.ndarray:
    sizes = np.asarray(segment_sizes)
    if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer):
        raise ValueError(f"segment_sizes must be a non-empty 1-D list of ints, got {sizes!r}")
    if np.any(sizes < 1):
        raise ValueError(f"segment_sizes must all be >= 1, got {sizes.tolist()}")
    return sizes.astype(np.int64)


def distance_layout(
    segment_sizes: Sequence[int], int_weights: Sequence[int], n_bytes: int
) -> DistanceLayout:
    """The bit planes of the weighted Hamming distance (Eq. 4) for codes of n_bytes bytes, the
    segments' integer weights checked: computed once per database, used for every query."""
    sizes = _check_sizes(segment_sizes)
    weights = np.asarray(int_weights)
    if weights.shape != sizes.shape:
        raise ValueError(
            f"int_weights has {weights.size} entries but segment_sizes has {sizes.size}"
        )
    if not np.issubdtype(weights.dtype, np.integer):
        if not np.all(np.isfinite(weights)) or np.any(weights != np.round(weights)):
            raise ValueError(
                f"int_weights must be integers (see integer_weights), got {weights.tolist()}"
            )
    weights = weights.astype(np.int64)
    if np.any(weights < 0) or not np.any(weights > 0):
        raise ValueError(f"int_weights must be >= 0 and not all 0, got {weights.tolist()}")
    n_bits = int(sizes.sum())
    if -(-n_bits // 8) != n_bytes:
        raise ValueError(
            f"segment_sizes sum to {n_bits} bits, which pack into {-(-n_bits // 8)} bytes, "
            f"but the codes have {n_bytes} bytes"
        )
    masks = _words(segment_masks(sizes))  # (S, W)
    shifts = np.arange(int(weights.max()).bit_length(), dtype=np.int64)
    planes = np.zeros((shifts.size, masks.shape[1]), dtype=np.uint64)
    for shift in shifts:
        in_plane = ((weights >> shift) & 1).astype(bool)
        planes[shift] = np.bitwise_or.reduce(masks[in_plane], axis=0)  # (W,), 0 if no segment
    max_distance = int((sizes * weights).sum())
    dtype = next(t for t in (np.uint8, np.uint16, np.uint32) if max_distance <= np.iinfo(t).max)
    return DistanceLayout(max_distance, dtype, planes, shifts)


def _words(packed: np.ndarray) -> np.ndarray:
    """View packed rows as native uint64 words, zero-padding each row to a multiple of 8 bytes.
    Masks go through the same view, so the byte order inside a word never matters."""
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def _prepare(
    q_packed: np.ndarray,
    db_packed: np.ndarray,
    segment_sizes: Sequence[int],
    int_weights: Sequence[int],
) -> tuple[np.ndarray, np.ndarray, DistanceLayout]:
    q = check_packed("q_packed", q_packed)
    db = check_packed("db_packed", db_packed)
    if q.shape[1] != db.shape[1]:
        raise ValueError(
            f"q_packed has {q.shape[1]} bytes per code but db_packed has {db.shape[1]}"
        )
    layout = distance_layout(segment_sizes, int_weights, q.shape[1])
    n_bits = int(np.sum(segment_sizes))
    check_n_bits(q, n_bits, "q_packed")
    check_n_bits(db, n_bits, "db_packed")
    # Database word-major (W, N) so each word's column is contiguous for the XOR.
    return _words(q), np.ascontiguousarray(_words(db).T), layout


def _prepare_ranking(
    q_packed: np.ndarray,
    db_packed: np.ndarray,
    segment_sizes: Sequence[int],
    int_weights: Sequence[int],
    top_n: int | None,
    workers: int,
) -> tuple[np.ndarray, np.ndarray, DistanceLayout, int]:
    """What both ranking paths start from: the checked codes, the layout and how many to keep."""
    q, db, layout = _prepare(q_packed, db_packed, segment_sizes, int_weights)
    return q, db, layout, _top_count(top_n, workers, db.shape[1])


def _top_count(top_n: int | None, workers: int, n_db: int) -> int:
    """The n of a top-n request (None: the whole database), checking top_n and workers."""
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int | np.integer)):
        raise TypeError(f"top_n must be an int or None, got {top_n!r}")
    if top_n is not None and top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    return n_db if top_n is None else min(int(top_n), n_db)


def _chunk_size(chunk: int | None, n_db: int) -> int:
    if chunk is None:
        return max(1, min(1024, _CHUNK_CELLS // max(n_db, 1)))
    if isinstance(chunk, bool) or not isinstance(chunk, int | np.integer) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    return int(chunk)


def _distances(q: np.ndarray, db_t: np.ndarray, layout: DistanceLayout) -> np.ndarray:
    """Eq. 4 for a query chunk: q (Qc, W) words, db_t (W, N) words -> (Qc, N) layout.dtype."""
    out = np.empty((q.shape[0], db_t.shape[1]), dtype=layout.dtype)
    _kernels().all_distances(q, db_t, layout.plane_masks, layout.plane_shifts, out)
    return out


def _kernels():
    """shdh.ranking.exact_kernel, imported on first use: numba adds ~0.5 s to an import that most
    CLI commands never need."""
    from shdh.ranking import exact_kernel

    return exact_kernel


def _iter_chunks(
    q: np.ndarray, db_t: np.ndarray, layout: DistanceLayout, n: int, step: int, workers: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The stored-distance ranking, chunk by chunk: every distance, then the exact top n."""

    def work(start: int) -> tuple[np.ndarray, np.ndarray]:
        return _select_top(_distances(q[start : start + step], db_t, layout), n)

    return _in_order(work, range(0, q.shape[0], step), workers)


def _rank_fused(
    q: np.ndarray, db_t: np.ndarray, layout: DistanceLayout, n: int, chunk: int | None, workers: int
) -> tuple[np.ndarray, np.ndarray]:
    """Top n per query by the compiled kernel, query chunks spread over worker threads (the
    kernel releases the GIL); each chunk writes its own rows of one key array."""
    n_db = db_t.shape[1]
    step = _FUSED_CHUNK if chunk is None else _chunk_size(chunk, n_db)
    keys = np.empty((q.shape[0], n), dtype=np.int64)
    top_n_keys = _kernels().top_n_keys

    def work(start: int) -> None:
        rows = slice(start, start + step)
        top_n_keys(q[rows], db_t, layout.plane_masks, layout.plane_shifts, _TILE, keys[rows])

    for _ in _in_order(work, range(0, q.shape[0], step), workers):
        pass  # each task has filled its rows of keys
    return keys % n_db, keys // n_db


def _in_order(work: Callable[[int], _T], starts: range, workers: int) -> Iterator[_T]:
    """Run work over the chunk starts and yield results in order; with threads, at most
    2 * workers chunks are computed ahead so memory stays bounded."""
    if workers == 1:
        for start in starts:
            yield work(start)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[_T]] = deque()
        for start in starts:
            pending.append(pool.submit(work, start))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _select_top(dist: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-n per row of dist (Qc, N) by the unique key (distance, index) -> int64 indices
    and distances (Qc, n).

    n near N: a counting sort of whole rows (an argsort when distances are too wide for a
    histogram). Otherwise the compiled heap scan, which looks again only at items strictly
    closer than a row's current n-th (equal ones have larger indices), so most of a row is one
    vectorised comparison."""
    n_q, n_db = dist.shape
    if n * _FULL_SORT_RATIO >= n_db:
        width = int(dist.max()) + 1 if dist.size else 1
        if width <= _COUNTING_MAX_DISTANCE:
            order = np.empty((n_q, n), dtype=np.int64)
            distances = np.empty((n_q, n), dtype=np.int64)
            _kernels().top_n_by_counting(dist, n, width, order, distances)
            return order, distances
        # wide weighted distances: a histogram would be huge; radix-sort whole rows
        order = np.argsort(dist, axis=1, kind="stable")[:, :n]
        return order, np.take_along_axis(dist, order, axis=1).astype(np.int64)
    keys = np.empty((n_q, n), dtype=np.int64)
    _kernels().top_n_of_rows(dist, _TILE, keys)
    return keys % n_db, keys // n_db
