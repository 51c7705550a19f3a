"""The compiled loops behind shdh.ranking.exact: weighted popcounts (Eq. 4) and exact top-n.

Why compiled: numpy makes one pass over memory per word and weight plane (XOR, AND, popcount,
shift, add, each a ufunc call writing a temporary), and its popcount is scalar. Here LLVM
vectorises the bit-plane form D = sum_p 2^p * popcount((q xor x) & M_p) (AVX2 where the CPU has
it) and each distance is written once:
- top_n_keys: the distances of a database tile for one query, the top-n test and a max-heap
  insert fused, so the distance matrix is never stored (what lets exact ranking outrun faiss's
  IndexBinaryFlat on the same cores, docs/benchmarks.md);
- all_distances: the whole (queries x items) matrix, for evaluation's radius curves;
- top_n_of_rows: the same heap scan over stored rows, when n is well below N;
- top_n_by_counting: the top n of each stored row when n is near N, by a counting sort;
- row_distances: one query's distances, the loop all of them share (and the evaluation's one
  pass, shdh.core.metric_kernel).

Exactness and ties: every distance is an exact integer. top_n_keys and top_n_of_rows keep a
max-heap of keys D * N + index per query and visit items in ascending index, so an item enters
only when its distance is strictly below the heap's largest (an equal distance with a larger
index loses); the counting sort is stable. All give the unique (distance, index) order.

The kernels release the GIL (nogil): retrieval runs query chunks on its own thread pool rather
than through numba's threading layer, so they nest safely inside PyTorch's and faiss's thread
pools. Each is compiled on first use and cached on disk (beside this file, or NUMBA_CACHE_DIR).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

NO_KEY = np.iinfo(np.int64).max  # an empty heap slot: larger than every real key


@intrinsic
def _popcount(typingctx, word):
    """LLVM's ctpop on a uint64: one POPCNT instruction, or a vector popcount in a loop."""
    if word != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


@numba.njit(nogil=True, cache=True, boundscheck=False)
def top_n_keys(q, db_t, plane_masks, plane_shifts, tile, keys):
    """Fill keys (Qc, n) int64 with each query's n best keys D * N + index, ascending.

    q (Qc, W) and db_t (W, N) are uint64 words (the database word-major, so one word of a tile
    is contiguous); plane_masks (P, W) uint64 and plane_shifts (P,) int64 are the weight planes;
    tile is the number of database items scored per pass for one query; n = keys.shape[1],
    1 <= n <= N."""
    n_q = q.shape[0]
    n_db = db_t.shape[1]
    keys[:, :] = NO_KEY
    bound = np.full(n_q, NO_KEY, dtype=np.int64)  # each query's current n-th distance
    dist = np.empty(tile, dtype=np.uint64)
    for start in range(0, n_db, tile):
        width = min(n_db, start + tile) - start
        for i in range(n_q):
            row_distances(q[i], db_t, start, width, plane_masks, plane_shifts, dist)
            bound[i] = _offer(keys[i], dist, 0, width, start, bound[i], n_db)
    for i in range(n_q):
        keys[i].sort()


@numba.njit(nogil=True, cache=True, boundscheck=False)
def top_n_of_rows(dist, tile, keys):
    """Fill keys (Qc, n) int64 with the n best keys D * N + index of each stored row of dist
    (Qc, N), ascending: the heap scan of top_n_keys over distances already computed (evaluation
    stores them for the radius curves); n = keys.shape[1], 1 <= n <= N."""
    n_q, n_db = dist.shape
    keys[:, :] = NO_KEY
    for i in range(n_q):
        tau = NO_KEY
        for start in range(0, n_db, tile):
            tau = _offer(keys[i], dist[i], start, min(n_db, start + tile), 0, tau, n_db)
        keys[i].sort()


@numba.njit(nogil=True, cache=True, boundscheck=False)
def all_distances(q, db_t, plane_masks, plane_shifts, out):
    """Fill out (Qc, N), an unsigned integer array wide enough for the largest distance, with
    Eq. 4 for every (query, item) pair; the same words and planes as top_n_keys."""
    for i in range(q.shape[0]):
        row_distances(q[i], db_t, 0, db_t.shape[1], plane_masks, plane_shifts, out[i])


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def row_distances(q_row, db_t, start, width, plane_masks, plane_shifts, out):
    """out[j] = Eq. 4 between one query's words and item start + j, for j < width.

    Inlined into each caller (shdh.core.metric_kernel's too), so LLVM vectorises the inner loop
    for the caller's output type."""
    out[:width] = 0
    for w in range(q_row.shape[0]):
        qw = q_row[w]
        column = db_t[w, start : start + width]
        for p in range(plane_masks.shape[0]):
            mask = plane_masks[p, w]
            if mask == 0:
                continue
            shift = np.uint64(plane_shifts[p])
            for j in range(width):  # vectorised by LLVM: xor, and, popcount, shift, add
                out[j] += _popcount((qw ^ column[j]) & mask) << shift


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _offer(heap, dist, lo, hi, offset, tau, n_db):
    """Put every item offset + j, lo <= j < hi, with dist[j] strictly below tau into the
    max-heap of keys, and return the new bound (the heap's largest distance). A vectorised count
    goes first: most tiles have no candidate at all."""
    below = 0
    for j in range(lo, hi):
        below += np.int64(dist[j]) < tau
    if below == 0:
        return tau
    for j in range(lo, hi):
        d = np.int64(dist[j])
        if d < tau:
            tau = replace_largest(heap, d * n_db + (offset + j), n_db)
    return tau


@numba.njit(nogil=True, cache=True, inline="always")
def replace_largest(heap, key, n_db):
    """Put key in place of the max-heap's root, sift it down, and return the new largest
    distance (or the empty-slot bound while the heap is not yet full)."""
    n = heap.shape[0]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and heap[child + 1] > heap[child]:
            child += 1
        if heap[child] <= key:
            break
        heap[pos] = heap[child]
        pos = child
    heap[pos] = key
    return heap[0] if heap[0] == NO_KEY else heap[0] // n_db


@numba.njit(nogil=True, cache=True, boundscheck=False)
def top_n_by_counting(dist, n, width, order, distances):
    """Per row of dist (Qc, N) ints in [0, width): the n items of smallest (distance, index)
    into order (Qc, n) int64, their distances into distances (Qc, n) int64.

    A stable counting sort cut at n: a histogram gives where each distance value starts in the
    sorted row, one pass in index order then drops every item into place (ties stay in index
    order) and skips those beyond the n-th distance or that land at n or beyond. O(N + largest
    distance) per row."""
    n_q, n_db = dist.shape
    start = np.empty(width, dtype=np.int64)
    for i in range(n_q):
        row = dist[i]
        start[:] = 0
        for j in range(n_db):
            start[row[j]] += 1
        total = 0
        tau = width - 1  # the n-th smallest distance: nothing beyond it is placed
        for v in range(width):
            count = start[v]
            start[v] = total
            total += count
            if total >= n:
                tau = v
                break
        for j in range(n_db):
            v = row[j]
            if v <= tau:
                pos = start[v]
                if pos < n:
                    order[i, pos] = j
                    distances[i, pos] = v
                start[v] = pos + 1
