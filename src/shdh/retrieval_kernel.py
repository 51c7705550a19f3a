"""The compiled top-n kernel behind `retrieval.rank`: XOR, popcount and selection in one pass.

Why compiled: the numpy ranking (retrieval._distances + _select_top) must write every distance to
memory and read it back, about 3 bytes of traffic per (query, item) pair, and pays one ufunc call
per word, plane and block. Fusing the weighted popcount (Eq. 4, bit-plane form: D = sum_p 2^p *
popcount((q xor x) & M_p)) with the top-n test keeps a database tile in cache for one query at a
time and never stores the full distance matrix; it is what lets exact ranking outrun faiss's
IndexBinaryFlat on the same cores (docs/benchmarks.md).

Exactness and ties: every distance is an exact integer, each query keeps a max-heap of keys
D * N + index, and items are visited in ascending index, so an item can only enter when its
distance is strictly below the heap's largest (an equal distance with a larger index loses). The
result is the same unique (distance, index) order as the numpy path's, item for item.

The kernel releases the GIL (nogil): retrieval runs query chunks on a thread pool, as it does for
the numpy path, rather than through numba's own threading layer, so it nests safely inside
PyTorch's and faiss's thread pools. Compiled once per machine and cached beside this file.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

_NO_KEY = np.iinfo(np.int64).max  # an empty heap slot: larger than every real key


@intrinsic
def _popcount(typingctx, word):
    """LLVM's ctpop on a uint64: one POPCNT instruction, or a vector popcount in a loop."""
    if word != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.uint64(types.uint64), codegen


@numba.njit(nogil=True, cache=True, boundscheck=False)
def top_n_keys(q, db_t, plane_masks, plane_shifts, n, tile, keys):
    """Fill keys (Qc, n) int64 with each query's n best keys D * N + index, ascending.

    q (Qc, W) and db_t (W, N) are uint64 words (the database word-major, so one word of a tile
    is contiguous); plane_masks (P, W) uint64 and plane_shifts (P,) int64 are the weight planes;
    tile is the number of database items scored per pass for one query. Requires 1 <= n <= N."""
    n_q, n_words = q.shape
    n_db = db_t.shape[1]
    n_planes = plane_masks.shape[0]
    keys[:, :] = _NO_KEY
    bound = np.full(n_q, _NO_KEY, dtype=np.int64)  # each query's current n-th distance
    dist = np.empty(tile, dtype=np.uint64)
    for start in range(0, n_db, tile):
        width = min(n_db, start + tile) - start
        for i in range(n_q):
            dist[:width] = 0
            for w in range(n_words):
                qw = q[i, w]
                column = db_t[w, start : start + width]
                for p in range(n_planes):
                    mask = plane_masks[p, w]
                    if mask == 0:
                        continue
                    shift = np.uint64(plane_shifts[p])
                    for j in range(width):  # vectorised by LLVM: xor, and, popcount, shift, add
                        dist[j] += _popcount((qw ^ column[j]) & mask) << shift
            tau = bound[i]
            below = 0
            for j in range(width):  # vectorised count; most tiles have no candidate at all
                below += np.int64(dist[j]) < tau
            if below == 0:
                continue
            heap = keys[i]
            for j in range(width):
                d = np.int64(dist[j])
                if d < tau:
                    tau = _replace_largest(heap, d * n_db + (start + j), n_db)
            bound[i] = tau
    for i in range(n_q):
        keys[i].sort()


@numba.njit(nogil=True, cache=True, inline="always")
def _replace_largest(heap, key, n_db):
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
    return heap[0] if heap[0] == _NO_KEY else heap[0] // n_db
