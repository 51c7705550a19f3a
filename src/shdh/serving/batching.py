"""Code queries that arrive together are ranked together: one pass of the kernel over the
database for the whole batch (shdh.ranking.service_kernel) instead of one per request.

Why: a single-code query reads all the packed codes (8 MB for 1M x 64 bits) to score them, so
concurrent requests ranked one by one compete for memory bandwidth and for the two cores;
ranked as a batch, each tile of codes is read once for all of them. The batch is exact per
query: each is ranked with the batch's largest k and cut to its own, and a top-k is a prefix of
a top-K (the order, distance then row, is total).

How: requests wait on a future in the event loop; while a batch is being ranked in a worker
thread, new requests queue, and the next batch takes every waiting request on the same index
(a reload switches the index between batches, never within one).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from shdh.ranking.search_index import SearchIndex


@dataclass
class _Query:
    index: SearchIndex
    q_packed: np.ndarray  # (q, n_bytes) uint8
    k: int
    future: asyncio.Future = field(repr=False)


class CodeBatcher:
    """Ranks concurrent queries in batches of at most `max_queries` codes, one batch at a
    time (the ranking spreads a batch over the cores itself)."""

    def __init__(self, max_queries: int = 256) -> None:
        self.max_queries = max_queries
        self._waiting: list[_Query] = []
        self._busy = False

    async def rank(
        self, index: SearchIndex, q_packed: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """`index.rank_codes(q_packed, k)`, ranked with whatever else is waiting."""
        loop = asyncio.get_running_loop()
        self._waiting.append(_Query(index, q_packed, k, loop.create_future()))
        future = self._waiting[-1].future
        if not self._busy:
            self._start(loop)
        return await future

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Rank the next batch in the loop's thread pool; called with no batch running."""
        if not self._waiting:
            self._busy = False
            return
        index = self._waiting[0].index
        batch, rest, size = [], [], 0
        for query in self._waiting:
            n = len(query.q_packed)
            if query.index is index and (not batch or size + n <= self.max_queries):
                batch.append(query)
                size += n
            else:
                rest.append(query)
        self._waiting = rest
        self._busy = True
        work = loop.run_in_executor(None, _rank_batch, index, batch)
        work.add_done_callback(lambda done: self._finish(loop, batch, done))

    def _finish(self, loop: asyncio.AbstractEventLoop, batch: list[_Query], done) -> None:
        error = done.exception()
        answers = [None] * len(batch) if error else done.result()
        for query, answer in zip(batch, answers, strict=True):
            if query.future.done():  # cancelled: its client has gone
                continue
            if error is None:
                query.future.set_result(answer)
            else:
                query.future.set_exception(error)
        self._start(loop)


def _rank_batch(index: SearchIndex, batch: list[_Query]) -> list[tuple[np.ndarray, np.ndarray]]:
    rows, distances = index.rank_codes(
        np.concatenate([q.q_packed for q in batch]), max(q.k for q in batch)
    )
    answers, start = [], 0
    for query in batch:
        stop = start + len(query.q_packed)
        answers.append((rows[start:stop, : query.k], distances[start:stop, : query.k]))
        start = stop
    return answers
