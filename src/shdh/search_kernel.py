"""The compiled top-k behind the search service: one pass over the database for a batch of
queries, distances kept in the narrowest unsigned type that holds them.

Why not `shdh.retrieval_kernel.top_n_keys` as it is: it scores into uint64 and compares each
distance as an int64, four lanes to an AVX2 register; distances of at most a few hundred fit
uint8 or uint16, so the same loop here runs on 32 or 16 lanes, and the strict "below the
current k-th" test that skips most of a tile is one narrow comparison. That halves a query on
1M x 64-bit codes (docs/benchmarks.md, "Search service"). Everything else is the fused kernel's:
Eq. 4 by bit planes, D = sum_p 2^p * popcount((q xor x) & M_p), a max-heap of keys D * N + row
per query (the heap code is retrieval_kernel's), rows visited in ascending order and an item let
in only when its distance is strictly below the heap's largest, so the result is the unique
(distance, row) order of `shdh.retrieval.rank_with_distances`.

A tile of the database is scored for every query of the batch before the next tile is read, so a
batch reads the codes from memory once (concurrent requests are batched for this, see
shdh.serving.batching). `top_k_range` covers rows [lo, hi) only: the service splits a batch's
database over its threads and merges the parts' keys (`merge_keys`).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

from shdh.retrieval_kernel import _NO_KEY, _popcount, _replace_largest


@functools.cache
def top_k_range(n_words: int, n_planes: int):
    """The kernel for codes of n_words uint64 words and weights of n_planes bit planes:
    top_k_range(q, db_t, plane_masks, plane_shifts, lo, hi, dist, keys) fills keys (Qc, k) int64
    with each query's k best keys D * N + row among rows [lo, hi), ascending (_NO_KEY where
    hi - lo < k).

    q (Qc, W) and db_t (W, N) uint64 words; plane_masks (P, W) uint64, plane_shifts (P,) int64;
    dist (tile,) a scratch buffer whose unsigned dtype holds the largest distance plus one (its
    length is the tile); N = db_t.shape[1] is the key's base.

    Why one kernel per (words, planes): numba takes the two counts as compile-time constants,
    so LLVM unrolls the word and plane loops inside the loop over items and vectorises that
    loop; with run-time counts it does not (about 5x slower). Compiled on first use (about 4 s;
    `SearchIndex.load` does it), not cached on disk: numba cannot cache a closure."""

    @numba.njit(nogil=True, boundscheck=False)
    def kernel(q, db_t, plane_masks, plane_shifts, lo, hi, dist, keys):
        n_q = q.shape[0]
        n_db = db_t.shape[1]
        tile = dist.shape[0]
        limit = np.iinfo(dist.dtype).max  # > every distance: "no bound yet"
        keys[:, :] = _NO_KEY
        bound = np.full(n_q, limit, dtype=np.int64)  # each query's current k-th distance
        for start in range(lo, hi, tile):
            width = min(hi, start + tile) - start
            for i in range(n_q):
                for j in range(width):  # vectorised: xor, and, popcount, shift, add
                    acc = np.uint64(0)
                    for w in range(n_words):
                        x = q[i, w] ^ db_t[w, start + j]
                        for p in range(n_planes):
                            acc += _popcount(x & plane_masks[p, w]) << np.uint64(plane_shifts[p])
                    dist[j] = acc
                bound[i] = _offer(keys[i], dist, width, start, bound[i], limit, n_db)
        for i in range(n_q):
            keys[i].sort()

    return kernel


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
            largest = _replace_largest(heap, np.int64(dist[j]) * n_db + start + j, n_db)
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
