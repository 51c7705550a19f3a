"""The service's ranker gives exactly rank_with_distances's top-k: same rows, distances and
tie order, for one query and a batch, one thread and two, and layouts whose code is not a
whole number of words."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.ranking.exact import integer_weights, pack_codes, rank_with_distances
from shdh.ranking.service_ranker import Ranker

LAYOUTS = [
    ([21, 21, 22], [1 / 2, 1 / 3, 1 / 6]),  # SHDH's 64 bits on 4 levels: weights 3/2/1
    ([5, 7], [1.0, 1.0]),  # 12 bits, plain Hamming
    ([30, 40, 27], [4.0, 2.0, 1.0]),  # 97 bits: two words, three planes
    ([3, 9, 11, 100], [7 / 8, 5 / 8, 3 / 8, 1 / 8]),  # 123 bits, odd weights
    ([600], [1.0]),  # wide: distances need uint16
]


def codes(rng: np.random.Generator, n: int, n_bits: int, distinct: int) -> np.ndarray:
    """n packed codes drawn from `distinct` prototypes with a few bits flipped: many ties."""
    protos = rng.choice([-1, 1], size=(distinct, n_bits))
    rows = protos[rng.integers(0, distinct, n)]
    flips = rng.random(rows.shape) < 0.02
    return pack_codes(np.where(flips, -rows, rows).astype(np.int8))


@pytest.mark.parametrize(("sizes", "weights"), LAYOUTS)
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize(("n", "k"), [(1, 1), (5, 10), (3000, 1), (3000, 100), (5000, 4999)])
def test_ranker_equals_rank_with_distances(sizes, weights, workers, n, k):
    rng = np.random.default_rng(n * 31 + k)
    n_bits = sum(sizes)
    db = codes(rng, n, n_bits, distinct=max(1, n // 50))
    queries = np.concatenate([db[:3], codes(rng, 4, n_bits, 2)])
    int_weights = integer_weights(weights)
    ranker = Ranker(db, sizes, int_weights, workers=workers)
    for batch in (queries[:1], queries):
        rows, dist = ranker.rank(batch, k)
        want_rows, want_dist = rank_with_distances(batch, db, sizes, int_weights, top_n=k)
        np.testing.assert_array_equal(rows, want_rows)
        np.testing.assert_array_equal(dist, want_dist)


@pytest.mark.parametrize(
    ("n", "cpus", "want"),
    [
        (100_000, 8, 1),  # under two threads' worth of items: one thread
        (131_072, 8, 2),
        (1_000_000, 1, 1),  # a pod limited to one CPU gets no second thread
        (1_000_000, 4, 4),
        (1_000_000, 64, 15),  # each thread keeps at least 65,536 items
    ],
)
def test_default_threads_follow_the_cpu_limit_and_the_database_size(monkeypatch, n, cpus, want):
    monkeypatch.setattr("shdh.ranking.service_ranker.available_cpus", lambda: cpus)
    db = np.zeros((n, 1), dtype=np.uint8)
    assert Ranker(db, [8], [1]).workers == want
