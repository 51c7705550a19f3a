"""Exact weighted-Hamming top-k over a fixed database for the search service: the ranking of
`shdh.ranking.exact.rank_with_distances` (ascending distance, then ascending row, on the same
integer weights), on the compiled kernel of shdh.ranking.service_kernel.

What differs from calling rank_with_distances per request: the database is held byte-major
(the kernel's layout, one copy: the ranker is where the service keeps its codes), the weight
planes and the distance dtype are prepared once, not per query; distances are kept in the
narrowest unsigned type; and the database is split over `workers` threads (the kernel releases
the GIL), each scoring its rows for every query of the batch, their keys then merged: two
threads on two cores halve a single query's latency, and a batch's. By default there is a
thread per CPU the process may keep busy (the pod's CPU limit, not the node's cores: more
threads than the CFS quota allows would spend each period throttled), and no thread gets
fewer than _PART_MIN items.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from shdh.ranking import service_kernel
from shdh.ranking.exact import distance_layout
from shdh.runtime.cpu_quota import available_cpus

# Items scored per pass for one query: 1 KiB of uint8 distances stays in L1 beside the codes.
_TILE = 1024
# Rows transposed at a time into the byte-major copy: a memory-mapped source is read in pieces.
_COPY_ROWS = 1 << 20
# A thread's smallest share of the database: 65,536 items score in about 30 us on one core, the
# order of handing work to a thread, so a smaller share would cost more than it saves.
_PART_MIN = 1 << 16


class Ranker:
    """top-k of packed queries against `packed` (N, n_bytes) uint8, copied byte-major (the
    source may be memory-mapped and dropped afterwards: `codes` gives rows back)."""

    def __init__(
        self,
        packed: np.ndarray,
        segment_sizes: Sequence[int],
        int_weights: Sequence[int],
        workers: int | None = None,
    ) -> None:
        layout = distance_layout(segment_sizes, int_weights, packed.shape[1])
        self.n_items, n_bytes = packed.shape
        self._db_t = np.empty((n_bytes, self.n_items), dtype=np.uint8)
        for start in range(0, self.n_items, _COPY_ROWS):
            self._db_t[:, start : start + _COPY_ROWS] = packed[start : start + _COPY_ROWS].T
        # the word masks viewed as bytes are the packed bytes' masks (the words are views of
        # the packed bytes, so the byte order within a word cancels out)
        self._masks = np.ascontiguousarray(layout.plane_masks.view(np.uint8)[:, :n_bytes])
        self._shifts = layout.plane_shifts
        # the kernel's "no bound yet" is the dtype's largest value: above every distance
        self._dtype = np.min_scalar_type(layout.max_distance + 1)
        if workers is None:
            workers = max(1, min(available_cpus(), self.n_items // _PART_MIN))
        self.workers = workers
        self._pool = ThreadPoolExecutor(self.workers - 1) if self.workers > 1 else None

    @property
    def codes(self) -> np.ndarray:
        """The packed codes (N, n_bytes), a read-only view of the byte-major copy."""
        view = self._db_t.T
        view.flags.writeable = False
        return view

    def rank(self, q_packed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(rows, distances), both (Q, min(k, N)) int64: ascending distance, then row."""
        q = np.ascontiguousarray(q_packed, dtype=np.uint8)
        k = min(k, self.n_items)
        bounds = np.linspace(0, self.n_items, self.workers + 1).astype(np.int64)
        parts = np.empty((self.workers, len(q), k), dtype=np.int64)

        def part(s: int) -> None:
            dist = np.empty(_TILE, dtype=self._dtype)
            service_kernel.top_k_range(
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
        service_kernel.merge_keys(parts, keys)
        return keys % self.n_items, keys // self.n_items
