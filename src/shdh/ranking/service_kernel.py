"""The compiled top-k behind the search service: one pass over a byte-major copy of the
database for a batch of queries, distances kept in the narrowest unsigned type that holds them.

Why not `shdh.ranking.exact_kernel.top_n_keys` as it is: that kernel scores uint64 words, and AVX2
has no 64-bit popcount, so LLVM counts each word's bytes with a table shuffle and then sums
them into the word's lane: four codes to a register, and the sums cost as much as the counts.
Here the database is stored byte-major, (n_bytes, N) uint8: byte b of every code is one
contiguous row, so 32 codes' byte b fill a register, the byte popcount is the whole count, and
the weighted sum stays in uint8 (or uint16) lanes. That halves the scoring of 1M x 64-bit codes
(docs/benchmarks.md, "Search service"); the byte rows also need no compile-time shape, so the
kernel is compiled once and cached on disk instead of once per (words, planes) at every start.

The rest is the fused kernel's: Eq. 4 by bit planes, D = sum_p 2^p * popcount((q xor x) & M_p)
summed byte by byte, a max-heap of keys D * N + row per query (the heap code is
retrieval_kernel's), rows visited in ascending order and an item let in only when its distance
is strictly below the heap's largest, so the result is the unique (distance, row) order of
`shdh.ranking.exact.rank_with_distances`.

A tile of the database is scored for every query of the batch before the next tile is read, so a
batch reads the codes from memory once (concurrent requests are batched for this, see
shdh.serving.batching). `top_k_range` covers rows [lo, hi) only: the service splits a batch's
database over its threads and merges the parts' keys (`merge_keys`).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from shdh.ranking.exact_kernel import NO_KEY, replace_largest


@intrinsic
def _add_plane(typingctx, acc, q_byte, db_byte, mask, shift):
    """acc + (popcount((q_byte ^ db_byte) & mask) << shift), computed in acc's width.

    Why an intrinsic: numba widens uint8 arithmetic to 64-bit integers, and the widening stops
    LLVM from packing 32 bytes to a register; here every step stays in the narrow type."""
    narrow = (types.uint8, types.uint16, types.uint32)
    if acc not in narrow or (q_byte, db_byte, mask) != (types.uint8,) * 3:
        return None
    if not isinstance(shift, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        total, q, x, m, s = args
        count = builder.ctpop(builder.and_(builder.xor(q, x), m))
        if total.type.width > 8:
            count = builder.zext(count, total.type)
        return builder.add(total, builder.shl(count, builder.trunc(s, total.type)))

    return acc(acc, types.uint8, types.uint8, types.uint8, shift), codegen


@numba.njit(nogil=True, cache=True, boundscheck=False)
def top_k_range(q, db_t, plane_masks, plane_shifts, lo, hi, dist, keys):
    """Fill keys (Qc, k) int64 with each query's k best keys D * N + row among rows [lo, hi),
    ascending (NO_KEY where hi - lo < k).

    q (Qc, B) and db_t (B, N) uint8, the database byte-major; plane_masks (P, B) uint8 and
    plane_shifts (P,) int64 the weight planes by byte; dist (tile,) a scratch buffer whose
    unsigned dtype holds the largest distance plus one (its length is the tile);
    N = db_t.shape[1] is the key's base."""
    n_q, n_bytes = q.shape
    n_db = db_t.shape[1]
    n_planes = plane_masks.shape[0]
    tile = dist.shape[0]
    limit = np.iinfo(dist.dtype).max  # > every distance: "no bound yet"
    keys[:, :] = NO_KEY
    bound = np.full(n_q, limit, dtype=np.int64)  # each query's current k-th distance
    for start in range(lo, hi, tile):
        width = min(hi, start + tile) - start
        scores = dist[:width]
        for i in range(n_q):
            scores[:] = 0
            for b in range(n_bytes):
                column = db_t[b, start : start + width]
                q_byte = q[i, b]
                for p in range(n_planes):
                    mask = plane_masks[p, b]
                    if mask == 0:
                        continue
                    shift = plane_shifts[p]
                    for j in range(width):  # vectorised: 32 codes (16 for uint16) a step
                        scores[j] = _add_plane(scores[j], q_byte, column[j], mask, shift)
            bound[i] = _offer(keys[i], dist, width, start, bound[i], limit, n_db)
    for i in range(n_q):
        keys[i].sort()


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _offer(heap, dist, width, start, bound, limit, n_db):
    """Put row start + j, j < width, into the max-heap of keys when dist[j] is strictly below
    the bound (the heap's largest distance); return the new bound. The tile's smallest distance
    first, a min over dist's narrow lanes: most tiles have no candidate at all."""
    tau = dist.dtype.type(bound)
    smallest = tau
    for j in range(width):
        smallest = min(smallest, dist[j])
    if smallest == tau:
        return bound
    for j in range(width):
        if dist[j] < tau:
            largest = replace_largest(heap, np.int64(dist[j]) * n_db + start + j, n_db)
            tau = dist.dtype.type(min(largest, limit))
    return np.int64(tau)


@numba.njit(nogil=True, cache=True)
def merge_keys(parts, keys):
    """keys (Qc, k): the k smallest of each query's keys over parts (S, Qc, k), each part's
    rows ascending; keys are unique (a row is in one part), so the merge is exact."""
    n_parts, n_q, k = parts.shape
    pos = np.zeros(n_parts, dtype=np.int64)
    for i in range(n_q):
        pos[:] = 0
        for out in range(k):
            best = 0
            for s in range(1, n_parts):
                if parts[s, i, pos[s]] < parts[best, i, pos[best]]:
                    best = s
            keys[i, out] = parts[best, i, pos[best]]
            pos[best] += 1
