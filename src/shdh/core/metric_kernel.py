"""The compiled loop behind shdh.core.metrics: each query's whole database ranked once, exactly,
and every ranked-list metric taken from that one pass.

Why: mAP@all ranks the whole database, so a query's ranked list is N items long. Stored, as the
evaluation once did, that is a (queries, N) int64 order and its distances per chunk, gathered
again into relevance flags, precisions and gains in numpy: a dozen passes over 130 MB for every
266 queries at N = 63,000, nine tenths of a code set's scoring. Here, per query:
- Eq. 4 for every item (shdh.ranking.exact_kernel.row_distances, the ranking's own loop);
- a stable counting sort of the small integer distances (`rank_items`; ties in ascending
  database index, the ranking's rule), which drops each item at its rank in one int32 array the
  pass reuses: the first items' distinct ancestor rows in rank order (all that ACG, DCG, NDCG,
  WR and mAHP read), and the ranks of the items relevant to mAP, ascending. Distances too wide
  for a histogram (far-fetched segment weights) take a stable argsort instead;
- the WR@n curve and WR@m (`score_gains`), mAHP@R (`score_hierarchical_precision`), mAP@R
  (`score_average_precision`); and for the queries the WR-by-radius figure samples, their items
  counted by (distance, distinct row).

Every float is the one the per-metric numpy functions (shdh.core.metrics, shdh.core.peer_metrics)
compute from the stored ranking, to the last bit: running sums go in np.cumsum's order (one
after the other), a chunk's curve is summed over its queries in order as np.sum(axis=0) does,
and sums along a list follow np.sum's pairwise order (`pairwise_sum`). So moving the metrics
here did not move any of them by a last digit (tests/unit/test_metric_kernel.py).

The kernels release the GIL (nogil): shdh.core.metrics runs query chunks on its own threads
(shdh.ranking.exact.iter_query_chunks), as the ranking does. Compiled on first use and cached on
disk; no function here calls itself (numba's cache loads a self-recursive function into a crash).
"""

from __future__ import annotations

import numba
import numpy as np

from shdh.ranking.exact_kernel import row_distances

# Distances below this many values are ranked by a counting sort (a histogram per query); wider
# ones, which only far-fetched segment weights make, by a stable argsort of the row.
COUNTING_WIDTH = 1 << 16
# numpy's pairwise summation: the running sums of a leaf, and a leaf's largest size.
_UNROLL = 8
_LEAF = 128
# Halving a 64-bit length down to a leaf takes fewer steps than this.
_STACK = 64
# rank_items keeps an item's row (U < 2**30 distinct rows) and its relevance flag in one int32.
_FLAG = 30
_ROW = (1 << _FLAG) - 1


@numba.njit(nogil=True, cache=True, boundscheck=False)
def rank_and_score(q, db_t, layout, row_of, tables, depths, out):
    """Rank the database for each query of a chunk and write its metrics' terms.

    q (Qc, W) and db_t (W, N): uint64 words; layout = (plane_masks, plane_shifts, width) as
    shdh.ranking.exact_kernel.all_distances takes them, width the largest distance + 1; row_of
    (N,) int32: each item's distinct ancestor row (U of them).
    tables, per query and distinct row: (relevant (Qc, U) bool: shares the query's finest
    label, rel (Qc, U) int64: shared levels, gain (Qc, U) float64, total (Qc,) float64: the
    query's gain over the database, rel_counts (Qc, K) int64: its items with relevance 0..K-1).
    depths: (wr (m,), mahp (h,), map (d,) ascending) int64 depths, all <= N.
    out: (top_rows (Qc, n) int64: the rows of the first n items; curve (G,) float64: the chunk's
    WR@1..G summed over its queries (added to); wr (Qc, m), ahp (Qc, h), ap (Qc, d) float64;
    radius (Qr, width * U) int64: item counts by (distance, row) of the first Qr queries (added
    to); distances (Qs, N): the first Qs queries' distances)."""
    plane_masks, plane_shifts, width = layout
    relevant, rel, gain, total, rel_counts = tables
    wr_depths, mahp_depths, map_depths = depths
    top_rows, curve, wr, ahp, ap, radius, distances = out
    n_db, n_rows = db_t.shape[1], relevant.shape[1]
    longest = max(top_rows.shape[1], curve.shape[0], _largest(wr_depths), _largest(mahp_depths))
    dist = np.empty(n_db, dtype=distances.dtype)
    ranked = np.empty(longest, dtype=np.int64)  # the row of the item at each rank
    counting = (np.empty(min(width, COUNTING_WIDTH), dtype=np.int64), np.empty(n_db, np.int32))
    relevant_ranks = np.empty(n_db + 1, dtype=np.int64)  # ranks of the relevant items, ascending
    scratch = np.empty(max(longest, n_db), dtype=np.float64)
    for i in range(q.shape[0]):
        row_distances(q[i], db_t, 0, n_db, plane_masks, plane_shifts, dist)
        if i < distances.shape[0]:
            distances[i, :] = dist
        if i < radius.shape[0]:
            for j in range(n_db):
                radius[i, dist[j] * n_rows + row_of[j]] += 1
        if width <= COUNTING_WIDTH:
            found = rank_items(dist, row_of, relevant[i], counting, ranked, relevant_ranks)
        else:
            found = rank_items_by_sorting(dist, row_of, relevant[i], ranked, relevant_ranks)
        top_rows[i, :] = ranked[: top_rows.shape[1]]
        score_gains(ranked, gain[i], total[i], wr_depths, curve, wr[i], scratch)
        score_hierarchical_precision(ranked, rel[i], rel_counts[i], mahp_depths, scratch, ahp[i])
        score_average_precision(relevant_ranks, found, map_depths, scratch, ap[i])


@numba.njit(nogil=True, cache=True, inline="always")
def _largest(depths):
    return depths.max() if depths.shape[0] else 0


@numba.njit(nogil=True, cache=True, boundscheck=False)
def rank_items(dist, row_of, relevant_row, scratch, ranked, relevant_ranks):
    """Rank the items (ascending distance, then index) by a stable counting sort: ranked[p] gets
    the row of the item at rank p < len(ranked), relevant_ranks the ranks of the items whose row
    is relevant, ascending; returns how many there are.

    A histogram of the distances gives where each distance's items start; one pass in index
    order then drops every item at its rank (equal distances keep index order), as its row with
    the relevance flag in a spare bit; the top rows and the relevant ranks are then read off in
    rank order, without a branch. (A branch per item on "in the top?" or "relevant?", whose
    answers follow no pattern in index order, cost more than the rest of the ranking.)
    scratch = (starts (width,) int64, placed (N,) int32)."""
    starts, placed = scratch
    n = dist.shape[0]
    starts[:] = 0
    for j in range(n):
        starts[dist[j]] += 1
    first = 0
    for v in range(starts.shape[0]):  # the histogram made where each distance starts
        count = starts[v]
        starts[v] = first
        first += count
    for j in range(n):  # in index order: equal distances keep it
        v, row = dist[j], row_of[j]
        rank = starts[v]
        starts[v] = rank + 1
        placed[rank] = row | (np.int32(relevant_row[row]) << _FLAG)
    for p in range(ranked.shape[0]):
        ranked[p] = placed[p] & _ROW
    found = 0
    for p in range(n):
        relevant_ranks[found] = p  # kept only where the flag counts it
        found += (placed[p] >> _FLAG) & 1
    return found


@numba.njit(nogil=True, cache=True, boundscheck=False)
def rank_items_by_sorting(dist, row_of, relevant_row, ranked, relevant_ranks):
    """rank_items for distances too wide for a histogram: a stable argsort of the row."""
    order = np.argsort(dist, kind="mergesort")  # stable: ties in index order
    found = 0
    for rank in range(dist.shape[0]):
        row = row_of[order[rank]]
        if rank < ranked.shape[0]:
            ranked[rank] = row
        if relevant_row[row]:
            relevant_ranks[found] = rank
            found += 1
    return found


@numba.njit(nogil=True, cache=True, boundscheck=False)
def score_gains(ranked, gain_of_row, total, depths, curve, wr, running):
    """WR@(p+1) = (sum of the first p+1 gains) / total (0 when total is 0), as
    shdh.core.metrics.weighted_recall_curve computes it (np.cumsum's order, then one division):
    added to curve (G,) for p < G, and written to wr[t] for p + 1 = depths[t]. running is
    scratch."""
    last = max(curve.shape[0], _largest(depths))
    acc = 0.0
    for p in range(last):
        acc += gain_of_row[ranked[p]]
        running[p] = acc / total if total > 0 else 0.0
    for p in range(curve.shape[0]):
        curve[p] += running[p]
    for t in range(depths.shape[0]):
        wr[t] = running[depths[t] - 1]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def score_hierarchical_precision(ranked, rel_of_row, rel_counts, depths, hp, out):
    """out[t] = AHP@depths[t] as shdh.core.peer_metrics.average_hierarchical_precision computes
    it: HP@k = (sum of the first k relevances) / (the same of the database's best k, from
    rel_counts as shdh.core.metrics.database_ideal builds it), 0 where that is 0; then the
    trapezoid (sum - (HP@1 + HP@R) / 2) / R. hp is scratch."""
    n_levels = rel_counts.shape[0]
    at_least = np.zeros(n_levels, dtype=np.int64)  # at_least[r]: items with relevance >= r
    for r in range(n_levels - 1, 0, -1):
        at_least[r] = rel_counts[r] + (at_least[r + 1] if r + 1 < n_levels else 0)
    for t in range(depths.shape[0]):
        depth = depths[t]
        got, best = 0.0, 0.0
        for k in range(depth):
            got += rel_of_row[ranked[k]]
            ideal = 0
            for r in range(1, n_levels):
                ideal += at_least[r] > k
            best += ideal
            hp[k] = got / best if best > 0 else 0.0
        total = 0.0 + pairwise_sum(hp, depth)
        out[t] = (total - (hp[0] + hp[depth - 1]) / 2.0) / depth


@numba.njit(nogil=True, cache=True, boundscheck=False)
def score_average_precision(relevant_ranks, found, depths, precision, out):
    """out[t] = AP@depths[t] (depths ascending) as shdh.core.peer_metrics.average_precision
    computes it: over the first R ranks, the precision hits / rank at each relevant one, summed
    with zeros at the others, over the hits; 0 with none. relevant_ranks[:found], ascending, are
    the relevant items' 0-based ranks; precision is scratch."""
    hits = 0
    for t in range(depths.shape[0]):
        depth = depths[t]
        while hits < found and relevant_ranks[hits] < depth:
            precision[hits] = (hits + 1) / (relevant_ranks[hits] + 1)
            hits += 1
        total = 0.0 + sparse_pairwise_sum(relevant_ranks, precision, hits, depth)
        out[t] = total / np.float64(hits) if hits > 0 else 0.0


@numba.njit(nogil=True, cache=True, boundscheck=False)
def pairwise_sum(a, n):
    """a[:n] summed in numpy's order (its pairwise summation, what np.sum does along a row)."""
    return sparse_pairwise_sum(np.arange(n), a, n, n)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def sparse_pairwise_sum(positions, values, count, n):
    """The sum of an n-long array that holds values[k] at positions[k] (k < count, ascending) and
    zeros elsewhere, in numpy's pairwise order: halves of a multiple of 8 down to leaves of at
    most 128 values (`_leaf_sum`), each half's sum added to the other's. Adding a zero is exact,
    so a half without a value is skipped as the 0.0 it sums to: the work follows the values."""
    starts = np.empty(_STACK, dtype=np.int64)
    sizes = np.empty(_STACK, dtype=np.int64)
    visits = np.zeros(_STACK, dtype=np.int64)  # 0: go left, 1: go right, 2: add the halves
    sums = np.empty(_STACK, dtype=np.float64)  # the sums of the halves done, in order
    lanes = np.empty(_UNROLL, dtype=np.float64)
    starts[0], sizes[0] = 0, n
    top, done, nxt = 0, 0, 0
    while top >= 0:
        lo, size = starts[top], sizes[top]
        if visits[top] == 2:  # both halves summed
            done -= 1
            sums[done - 1] = sums[done - 1] + sums[done]
            top -= 1
            continue
        empty = nxt >= count or positions[nxt] >= lo + size
        if visits[top] == 0 and (empty or size <= _LEAF):
            sums[done] = 0.0
            if not empty:
                sums[done], nxt = _leaf_sum(positions, values, nxt, count, lo, size, lanes)
            done += 1
            top -= 1
            continue
        visits[top] += 1
        half = size // 2 - (size // 2) % _UNROLL
        right = visits[top] == 2
        top += 1
        starts[top] = lo + half if right else lo
        sizes[top] = size - half if right else half
        visits[top] = 0
    return sums[0]


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _leaf_sum(positions, values, nxt, count, lo, n, lanes):
    """numpy's pairwise sum of a leaf [lo, lo + n), n <= 128, over the values from nxt on that
    fall in it: 8 running sums (position mod 8) over the first multiple of 8, added pairwise,
    then the rest one by one (fewer than 8 in all: one running sum). Returns (sum, next)."""
    end = lo + n
    whole = lo + n - n % _UNROLL if n >= _UNROLL else lo
    lanes[:] = 0.0
    while nxt < count and positions[nxt] < whole:
        lanes[(positions[nxt] - lo) % _UNROLL] += values[nxt]
        nxt += 1
    res = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + (
        (lanes[4] + lanes[5]) + (lanes[6] + lanes[7])
    )
    while nxt < count and positions[nxt] < end:
        res += values[nxt]
        nxt += 1
    return res, nxt
