"""Bit packing, weighted Hamming (Eq. 4) and ranking, checked against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.ranking import exact
from shdh.ranking.exact import (
    hamming,
    integer_weights,
    iter_query_chunks,
    pack_codes,
    rank_with_distances,
    segment_masks,
    unpack_codes,
    weighted_hamming,
)


def rank(*args, **options) -> np.ndarray:
    """The ranking's database indices alone."""
    return rank_with_distances(*args, **options)[0]


def random_codes(rng: np.random.Generator, n: int, n_bits: int) -> np.ndarray:
    return rng.choice(np.array([-1, 1], dtype=np.int8), size=(n, n_bits))


def brute_distances(q: np.ndarray, db: np.ndarray, sizes: list[int], weights: list[int]):
    """Per-pair Python loop over bits: the definition, nothing clever."""
    bit_weight = [w for size, w in zip(sizes, weights, strict=True) for _ in range(size)]
    out = np.zeros((len(q), len(db)), dtype=np.int64)
    for i, a in enumerate(q.tolist()):
        for j, b in enumerate(db.tolist()):
            out[i, j] = sum(w for x, y, w in zip(a, b, bit_weight, strict=True) if x != y)
    return out


def brute_ranking(distances: np.ndarray) -> np.ndarray:
    n_db = distances.shape[1]
    return np.array([sorted(range(n_db), key=lambda j, row=row: (row[j], j)) for row in distances])


@pytest.fixture(params=["stored", "stored-scan", "fused"])
def ranking_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a ranking test through each implementation, on small databases: stored distances with
    whole-row selection (the counting sort), stored distances with the heap scan over several
    tiles, and the fused kernel with several tiles and query chunks."""
    if request.param == "fused":
        monkeypatch.setattr(exact, "_FUSED_RATIO", 1)
        monkeypatch.setattr(exact, "_TILE", 16)
        monkeypatch.setattr(exact, "_FUSED_CHUNK", 2)
    else:
        monkeypatch.setattr(exact, "_FUSED_RATIO", 1 << 60)
    if request.param == "stored-scan":
        monkeypatch.setattr(exact, "_TILE", 16)
        monkeypatch.setattr(exact, "_FULL_SORT_RATIO", 1)
    return request.param


# --- packing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_bits", [1, 7, 8, 13, 64, 65, 130])
def test_pack_unpack_round_trip(n_bits: int) -> None:
    codes = random_codes(np.random.default_rng(n_bits), 20, n_bits)
    packed = pack_codes(codes)
    assert packed.dtype == np.uint8
    assert packed.shape == (20, -(-n_bits // 8))
    unpacked = unpack_codes(packed, n_bits)
    assert unpacked.dtype == np.int8
    np.testing.assert_array_equal(unpacked, codes)


def test_pack_bit_order_is_big_endian_and_one_means_plus_one() -> None:
    codes = np.array([[1, -1, -1, -1, -1, -1, -1, 1, 1]], dtype=np.int8)
    np.testing.assert_array_equal(pack_codes(codes), [[0b10000001, 0b10000000]])


@pytest.mark.parametrize(
    "codes",
    [np.array([[1, 0, -1]]), np.array([[1, 2]]), np.array([[1.0, np.nan]]), np.array([1, -1])],
)
def test_pack_rejects_values_other_than_plus_minus_one(codes: np.ndarray) -> None:
    with pytest.raises(ValueError, match="codes"):
        pack_codes(codes)


def test_unpack_rejects_bad_input() -> None:
    packed = pack_codes(np.ones((2, 13), dtype=np.int8))
    with pytest.raises(ValueError, match="bytes per code"):
        unpack_codes(packed, 17)
    with pytest.raises(ValueError, match="padding"):
        unpack_codes(np.array([[0xFF, 0xFF]], dtype=np.uint8), 13)
    with pytest.raises(ValueError, match="uint8"):
        unpack_codes(packed.astype(np.int64), 13)
    with pytest.raises(ValueError, match="n_bits"):
        unpack_codes(packed, 0)


def test_segment_masks_cover_each_segment_in_packed_layout() -> None:
    masks = segment_masks([5, 5, 3])
    np.testing.assert_array_equal(
        masks, [[0b11111000, 0b00000000], [0b00000111, 0b11000000], [0b00000000, 0b00111000]]
    )
    with pytest.raises(ValueError, match="segment_sizes"):
        segment_masks([5, 0])
    with pytest.raises(ValueError, match="segment_sizes"):
        segment_masks([])


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ((1 / 2, 1 / 3, 1 / 6), [3, 2, 1]),
        ((2 / 3, 1 / 3), [2, 1]),
        ((0.0, 2 / 3, 1 / 3), [0, 2, 1]),
        ((1.0,), [1]),
        ((0.3, 0.2, 0.1), [3, 2, 1]),
        (np.array([1 / 2, 1 / 3, 1 / 6], dtype=np.float32), [3, 2, 1]),
    ],
)
def test_integer_weights_are_smallest_proportional_integers(weights, expected) -> None:
    result = integer_weights(weights)
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize(
    "weights", [(np.sqrt(2),), (0.5, 0.12345), (0.5, -0.5), (0.0, 0.0), (), (np.inf,)]
)
def test_integer_weights_rejects_unusable_weights(weights) -> None:
    with pytest.raises(ValueError, match="weight"):
        integer_weights(weights)


# --- distances -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "weights"),
    [
        ([5, 5, 3], [3, 2, 1]),  # unequal segments inside two bytes
        ([13], [1]),  # plain Hamming
        ([21, 21, 22], [3, 2, 1]),  # one full uint64 word
        ([40, 50, 40], [5, 3, 1]),  # three words, distances above 255 (uint16 path)
        ([16, 16, 16], [0, 2, 1]),  # a zero-weight root segment (paper layout)
    ],
)
def test_weighted_hamming_matches_brute_force(sizes: list[int], weights: list[int]) -> None:
    rng = np.random.default_rng(sum(sizes))
    q = random_codes(rng, 7, sum(sizes))
    db = random_codes(rng, 31, sum(sizes))
    expected = brute_distances(q, db, sizes, weights)
    result = weighted_hamming(pack_codes(q), pack_codes(db), sizes, weights)
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, expected)
    chunked = weighted_hamming(pack_codes(q), pack_codes(db), sizes, weights, chunk=3)
    np.testing.assert_array_equal(chunked, expected)


def test_weighted_hamming_over_a_database_longer_than_a_vector_loop() -> None:
    rng = np.random.default_rng(5)
    q, db = random_codes(rng, 3, 24), random_codes(rng, 2501, 24)  # odd length: loop remainder
    expected = brute_distances(q, db, [12, 12], [2, 1])
    np.testing.assert_array_equal(
        weighted_hamming(pack_codes(q), pack_codes(db), [12, 12], [2, 1]), expected
    )


def test_distances_beyond_uint16_are_computed_and_ranked_exactly() -> None:
    """Weights (2001, 1) over 70 + 60 bits: uint32 distances, and rows too wide for the counting
    sort (distances above 65,535), so whole rows are radix-sorted."""
    rng = np.random.default_rng(6)
    codes = random_codes(rng, 300, 130)
    codes[50:60] = codes[1]  # ties
    sizes, weights = [70, 60], [2001, 1]
    expected = brute_distances(codes[:2], codes, sizes, weights)
    assert expected.max() > np.iinfo(np.uint16).max
    q, db = pack_codes(codes[:2]), pack_codes(codes)
    np.testing.assert_array_equal(weighted_hamming(q, db, sizes, weights), expected)
    np.testing.assert_array_equal(rank(q, db, sizes, weights), brute_ranking(expected))


def test_hamming_is_the_one_segment_case() -> None:
    rng = np.random.default_rng(3)
    q, db = random_codes(rng, 4, 19), random_codes(rng, 9, 19)
    expected = brute_distances(q, db, [19], [1])
    np.testing.assert_array_equal(hamming(pack_codes(q), pack_codes(db)), expected)


def test_distance_inputs_are_validated() -> None:
    q = pack_codes(np.ones((2, 13), dtype=np.int8))
    db = pack_codes(np.ones((3, 16), dtype=np.int8))
    with pytest.raises(ValueError, match="bytes per code"):
        weighted_hamming(q, pack_codes(np.ones((3, 24), dtype=np.int8)), [13], [1])
    with pytest.raises(ValueError, match="sum to 20 bits"):
        weighted_hamming(q, q, [10, 10], [1, 1])
    with pytest.raises(ValueError, match="2 entries but segment_sizes has 3"):
        weighted_hamming(q, q, [5, 5, 3], [2, 1])
    with pytest.raises(ValueError, match="integers"):
        weighted_hamming(q, q, [5, 5, 3], [0.5, 1 / 3, 1 / 6])
    with pytest.raises(ValueError, match="not all 0"):
        weighted_hamming(q, q, [13], [0])
    with pytest.raises(ValueError, match="padding"):
        weighted_hamming(q, db[:, :2] | np.uint8(1), [13], [1])
    with pytest.raises(ValueError, match="uint8"):
        weighted_hamming(q.astype(np.int16), q, [13], [1])


# --- ranking -------------------------------------------------------------------------------------


def test_rank_matches_brute_force_order(ranking_path: str) -> None:
    rng = np.random.default_rng(11)
    sizes, weights = [5, 5, 3], [3, 2, 1]
    q, db = random_codes(rng, 6, 13), random_codes(rng, 80, 13)
    db[10:20] = db[3]  # plenty of exact ties
    expected_d = brute_distances(q, db, sizes, weights)
    expected = brute_ranking(expected_d)
    for top_n in (1, 5, 17, 80, None):
        idx, dist = rank_with_distances(pack_codes(q), pack_codes(db), sizes, weights, top_n=top_n)
        n = 80 if top_n is None else top_n
        assert idx.dtype == np.int64 and idx.shape == (6, n)
        np.testing.assert_array_equal(idx, expected[:, :n])
        np.testing.assert_array_equal(dist, np.take_along_axis(expected_d, expected[:, :n], 1))


def test_rank_breaks_ties_by_ascending_index(ranking_path: str) -> None:
    db = np.ones((50, 16), dtype=np.int8)
    db[[7, 30], 0] = -1  # two items one bit further away
    q = np.ones((2, 16), dtype=np.int8)
    expected = [i for i in range(50) if i not in (7, 30)] + [7, 30]
    full = rank(pack_codes(q), pack_codes(db), [16], [1])
    np.testing.assert_array_equal(full, [expected, expected])
    top = rank(pack_codes(q), pack_codes(db), [16], [1], top_n=10)
    np.testing.assert_array_equal(top, [expected[:10], expected[:10]])


def test_top_n_is_the_prefix_of_the_full_ranking(ranking_path: str) -> None:
    rng = np.random.default_rng(2)
    q, db = pack_codes(random_codes(rng, 9, 20)), pack_codes(random_codes(rng, 300, 20))
    full = rank(q, db, [10, 10], [2, 1])
    for top_n in (1, 3, 64, 299, 300, 1000):
        top = rank(q, db, [10, 10], [2, 1], top_n=top_n)
        np.testing.assert_array_equal(top, full[:, : min(top_n, 300)])


def test_rank_does_not_depend_on_chunk_or_workers(ranking_path: str) -> None:
    rng = np.random.default_rng(4)
    q, db = pack_codes(random_codes(rng, 23, 16)), pack_codes(random_codes(rng, 200, 16))
    reference = rank(q, db, [8, 8], [2, 1], top_n=12)
    for chunk, workers in [(1, 1), (5, 2), (7, 3), (None, 2)]:
        result = rank(q, db, [8, 8], [2, 1], top_n=12, chunk=chunk, workers=workers)
        np.testing.assert_array_equal(result, reference)


@pytest.mark.parametrize(
    ("n_bits", "sizes", "weights"),
    [(64, [64], [1]), (64, [21, 21, 22], [3, 2, 1]), (130, [40, 50, 40], [4, 0, 1])],
)
def test_fused_kernel_gives_the_stored_distance_ranking_at_its_default_sizes(
    n_bits: int, sizes: list[int], weights: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database larger than one default tile, codes of one and of three words (with padding),
    and weights with an empty bit plane (4 = 100b, 1 = 001b) and a zero-weight segment."""
    rng = np.random.default_rng(n_bits + len(sizes))
    db = random_codes(rng, 20_000, n_bits)
    db[8_150:8_450] = db[17]  # ties across the first tile boundary (8,192)
    q = pack_codes(np.concatenate([db[[17, 9_000]], random_codes(rng, 37, n_bits)]))
    db = pack_codes(db)
    fused = rank_with_distances(q, db, sizes, weights, top_n=100, workers=2)
    monkeypatch.setattr(exact, "_FUSED_RATIO", 1 << 60)
    stored = rank_with_distances(q, db, sizes, weights, top_n=100)
    np.testing.assert_array_equal(fused[0], stored[0])
    np.testing.assert_array_equal(fused[1], stored[1])
    np.testing.assert_array_equal(fused[0][0], [17, *range(8_150, 8_249)])
    assert not fused[1][0].any()


def test_query_chunks_hold_the_words_every_distance_is_computed_from() -> None:
    rng = np.random.default_rng(8)
    q, db = random_codes(rng, 10, 12), random_codes(rng, 30, 12)

    def distances(start, words, db_t, layout):
        return start, exact._distances(words, db_t, layout)

    parts = list(iter_query_chunks(pack_codes(q), pack_codes(db), [12], [1], distances, chunk=4))
    assert [start for start, _ in parts] == [0, 4, 8]
    all_d = np.concatenate([d for _, d in parts]).astype(np.int64)
    np.testing.assert_array_equal(all_d, brute_distances(q, db, [12], [1]))


def test_rank_with_no_queries_returns_empty() -> None:
    db = pack_codes(np.ones((5, 8), dtype=np.int8))
    idx, dist = rank_with_distances(db[:0], db, [8], [1], top_n=3)
    assert idx.shape == (0, 3) and dist.shape == (0, 3)


def test_rank_rejects_bad_arguments() -> None:
    db = pack_codes(np.ones((5, 8), dtype=np.int8))
    with pytest.raises(ValueError, match="top_n"):
        rank(db, db, [8], [1], top_n=0)
    with pytest.raises(TypeError, match="top_n"):
        rank(db, db, [8], [1], top_n=2.5)
    with pytest.raises(ValueError, match="chunk"):
        rank(db, db, [8], [1], chunk=0)
    with pytest.raises(ValueError, match="workers"):
        rank(db, db, [8], [1], workers=0)
    with pytest.raises(ValueError, match="segment_sizes sum to 9 bits"):
        iter_query_chunks(db, db, [9], [1], print)  # checked at the call, before any iteration
