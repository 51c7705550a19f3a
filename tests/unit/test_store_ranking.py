"""Eq. 4 as a plain Hamming distance (shdh.ranking.repeated_bits), and the exact top k from a
store that returns its ties in any order (shdh.ranking.tie_closure), against the offline
ranking."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.ranking.exact import hamming, pack_codes, rank_with_distances, weighted_hamming
from shdh.ranking.repeated_bits import MAX_REPEATED_BITS, repeated_bits
from shdh.ranking.tie_closure import CandidatePool


@pytest.mark.parametrize(
    ("sizes", "weights"),
    [((21, 21, 22), (3, 2, 1)), ((6, 5, 5), (3, 2, 1)), ((8, 8), (1, 1)), ((5, 7, 3), (4, 0, 2))],
)
def test_the_hamming_distance_of_repeated_codes_is_the_weighted_distance(sizes, weights):
    rng = np.random.default_rng(0)
    n_bits = sum(sizes)
    q = pack_codes(rng.choice(np.array([-1, 1], np.int8), (40, n_bits)))
    db = pack_codes(rng.choice(np.array([-1, 1], np.int8), (300, n_bits)))
    repeat = repeated_bits(sizes, weights)
    used = sum(s * w for s, w in zip(sizes, weights, strict=True))
    assert repeat.n_bits % 8 == 0 and used <= repeat.n_bits < used + 8
    expanded = repeat.expand(db)
    assert expanded.shape == (300, repeat.n_bits // 8)
    np.testing.assert_array_equal(
        hamming(repeat.expand(q), expanded), weighted_hamming(q, db, sizes, weights)
    )


def test_a_repetition_longer_than_milvus_takes_is_refused():
    with pytest.raises(ValueError, match=f"a BINARY_VECTOR holds at most {MAX_REPEATED_BITS}"):
        repeated_bits([4096, 4096], [40, 30])
    with pytest.raises(ValueError, match="codes has 2 bytes per code but 24 bits need 3"):
        repeated_bits([8, 16], [2, 1]).expand(np.zeros((1, 2), np.uint8))


class TiedStore:
    """An exhaustive store that returns the `limit` nearest items of those it is asked about,
    and among equal distances the items of the highest rows first (the worst order for the
    offline tie rule)."""

    def __init__(self, distances: np.ndarray, rows: np.ndarray) -> None:
        self.distances, self.rows, self.calls = distances, rows, 0

    def search(self, limit: int, max_row: int | None = None) -> tuple[np.ndarray, ...]:
        self.calls += 1
        asked = np.flatnonzero(self.rows <= (self.rows.max() if max_row is None else max_row))
        order = asked[np.lexsort((-self.rows[asked], self.distances[asked]))][:limit]
        return order, self.rows[order], self.distances[order]


@pytest.mark.parametrize("k", [1, 5, 50])
def test_the_pool_closes_ties_to_the_offline_order(k):
    """Many items share each distance (12-bit codes, 4,000 items): the first answer is cut in
    the middle of a tie, and the rounds restricted to row <= R give the offline ranking's top k,
    whose order is ascending distance, then row."""
    rng = np.random.default_rng(1)
    db = pack_codes(rng.choice(np.array([-1, 1], np.int8), (4000, 12)))
    queries = pack_codes(rng.choice(np.array([-1, 1], np.int8), (30, 12)))
    rows = np.arange(4000) * 3 + 7  # rows need not be positions
    expected, _ = rank_with_distances(queries, db, [12], [1], top_n=k)
    for q, want in zip(queries, expected, strict=True):
        store = TiedStore(hamming(q[None], db)[0].astype(np.int64), rows)
        pool = CandidatePool(k)
        found = store.search(2 * k + 16)
        pool.add(*found)
        bound = pool.open_tie(found[2], 2 * k + 16)
        while bound is not None:
            found = store.search(max(8 * k, 256), bound)
            pool.add(*found)
            bound = pool.open_tie(found[2], max(8 * k, 256))
        np.testing.assert_array_equal(pool.ids[pool.order()], want)
        assert store.calls < 8
