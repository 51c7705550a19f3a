"""Exact weighted-Hamming top-k over a fixed database for the search service: the ranking of
`shdh.retrieval.rank_with_distances` (ascending distance, then ascending row, on the same
integer weights), on the compiled kernel of shdh.search_kernel.

What differs from calling rank_with_distances per request: the database's words, the weight
planes and the distance dtype are prepared once, not per query; distances are kept in the
narrowest unsigned type; and the database is split over `workers` threads (the kernel releases
the GIL), each scoring its rows for every query of the batch, their keys then merged: two
threads on two cores halve a single query's latency, and a batch's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from shdh import search_kernel
from shdh.retrieval import _layout, _words

# Items scored per pass for one query: 1 KiB of uint8 distances stays in L1 beside the codes.
_TILE = 1024
# Below this many items a query takes well under a millisecond: handing its halves to two
# threads would cost more than it saves.
_SPLIT_MIN = 1 << 17


class Ranker:
    """top-k of packed queries against `packed` (N, n_bytes) uint8, kept by reference."""

    def __init__(
        self,
        packed: np.ndarray,
        segment_sizes: Sequence[int],
        int_weights: Sequence[int],
        workers: int | None = None,
    ) -> None:
        layout = _layout(segment_sizes, int_weights, packed.shape[1])
        self.n_items = len(packed)
        words = _words(packed)  # (N, W): a view when a code is a whole number of words
        # Word-major (W, N): for W = 1 a view, else one copy (codes over 64 bits).
        self._db_t = words.reshape(1, -1) if words.shape[1] == 1 else np.ascontiguousarray(words.T)
        self._masks, self._shifts = layout.plane_masks, layout.plane_shifts
        self._dtype = next(
            t for t in (np.uint8, np.uint16, np.uint32) if layout.max_distance < np.iinfo(t).max
        )
        self._kernel = search_kernel.top_k_range(words.shape[1], len(self._shifts))
        if workers is None:
            workers = 1 if self.n_items < _SPLIT_MIN else min(2, os.cpu_count() or 1)
        self.workers = workers
        self._pool = ThreadPoolExecutor(self.workers - 1) if self.workers > 1 else None

    def rank(self, q_packed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, distances), both (Q, min(k, N)) int64: ascending distance, then row."""
        q = _words(q_packed)
        k = min(k, self.n_items)
        bounds = np.linspace(0, self.n_items, self.workers + 1).astype(np.int64)
        parts = np.empty((self.workers, len(q), k), dtype=np.int64)

        def part(s: int) -> None:
            dist = np.empty(_TILE, dtype=self._dtype)
            self._kernel(
                q, self._db_t, self._masks, self._shifts, bounds[s], bounds[s + 1], dist, parts[s]
            )

        # the calling thread takes the first part: one thread hand-off fewer (no pool for one)
        others = [self._pool.submit(part, s) for s in range(1, self.workers)]
        part(0)
        for other in others:
            other.result()
        if not others:
            return parts[0] % self.n_items, parts[0] // self.n_items
        keys = np.empty((len(q), k), dtype=np.int64)
        search_kernel.merge_keys(parts, keys)
        return keys % self.n_items, keys // self.n_items
