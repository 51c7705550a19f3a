"""The exact top k from the candidates of a store that ranks by distance alone, with the
offline ranking's tie rule: ascending distance, then ascending database row.

Why: a vector database (Milvus) returns the `limit` nearest items, but among items at the
same distance it returns any of them, in any order. When the last candidate returned is at
the k-th best distance D, items at D beyond the limit may have lower rows than those returned,
and the answer would differ from the in-process index's. The pool knows when this can happen
and what to ask next: the store is searched again for the items with row <= R, where R is the
row the answer's last place would have if no better-placed item were missing. That search
either comes back whole (fewer than its limit, or ending beyond D: every item at D with
row <= R is then in the pool, so the top k is exact) or with a smaller R, which shrinks the
tie quickly (R falls by about the limit over k each round).

An exhaustive search (Milvus's BIN_FLAT) makes the answer exact; an approximate one
(BIN_IVF_FLAT) gives its own candidates in the same order.
"""

from __future__ import annotations

import numpy as np


class CandidatePool:
    """The items a query has been given so far by one or more searches (each item once),
    kept to rank the first `k` by (distance, row)."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        self.k = k
        self.ids = np.empty(0, np.int64)
        self.rows = np.empty(0, np.int64)
        self.distances = np.empty(0, np.int64)

    def add(self, ids: np.ndarray, rows: np.ndarray, distances: np.ndarray) -> None:
        """Candidates of one search; an item already in the pool is kept once."""
        ids, rows, distances = (np.asarray(a, np.int64).reshape(-1) for a in (ids, rows, distances))
        new = ~np.isin(ids, self.ids)
        self.ids = np.concatenate([self.ids, ids[new]])
        self.rows = np.concatenate([self.rows, rows[new]])
        self.distances = np.concatenate([self.distances, distances[new]])

    def order(self) -> np.ndarray:
        """Positions in the pool of the first min(k, size) items: ascending distance, then
        row (then id: two items never share a row, unless written by two writers at once)."""
        return np.lexsort((self.ids, self.rows, self.distances))[: self.k]

    def open_tie(self, found: np.ndarray, limit: int) -> int | None:
        """After a search that returned the distances `found` with at most `limit` results:
        None when the pool's top k is settled, else the row bound R of the next search
        (row <= R). Settled: the pool holds under k items, or the search returned fewer than
        its limit (it returned every item it was asked about), or it reached beyond the k-th
        distance D (it returned every item at D it was asked about)."""
        found = np.asarray(found, np.int64)
        if len(self.ids) < self.k or len(found) < limit:
            return None
        top = self.order()
        tie = self.distances[top[-1]]
        if found.max() > tie:
            return None
        better = int(np.count_nonzero(self.distances < tie))
        rows_at_tie = np.sort(self.rows[self.distances == tie])
        return int(rows_at_tie[self.k - better - 1])
