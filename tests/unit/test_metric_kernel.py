"""The evaluation's one ranking pass per query (shdh.core.metric_kernel) against the per-metric
functions it replaced: the same numbers to the last bit, on codes with many ties, single- and
multi-label, narrow and wide distances, over several chunks and threads; and its pieces (numpy's
summation order, the distinct rows, the query chunks) on their own."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.core import metric_kernel
from shdh.core.level_weights import layer_weights
from shdh.core.metrics import (
    _recall_by_radius,
    acg,
    database_ideal,
    dcg,
    evaluate,
    list_ideal,
    ndcg,
    weighted_recall_curve,
)
from shdh.core.peer_metrics import average_hierarchical_precision, average_precision
from shdh.core.relevance import distinct_rows, relevance_and_gain, relevance_counts
from shdh.core.similarity import finest_match
from shdh.ranking.exact import (
    integer_weights,
    iter_query_chunks,
    pack_codes,
    rank_with_distances,
    weighted_hamming,
)

# A K = 4 tree as Fashion-MNIST-H's: 2 superclasses, 4 groups, 8 leaves; node ids by level.
LEAVES = np.array([[0, 1 + leaf // 4, 3 + leaf // 2, 7 + leaf] for leaf in range(8)])


def clustered_case(seed: int, n_q: int, n_db: int, bits: int, *, sets: bool = False):
    """Codes near a prototype per leaf, with few bits so that distances tie a lot, and blocks of
    identical database codes; ancestors (N, 4), or sets (N, 4, 3) of one or two leaves' paths
    with padding slots."""
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, 8, n_q + n_db)
    anc = LEAVES[leaf]
    if sets:
        other = LEAVES[rng.integers(0, 8, n_q + n_db)]
        other[rng.random(n_q + n_db) < 0.5, 1:] = -1  # half the items hold one label only
        anc = np.stack([anc, other, np.full_like(anc, -1)], axis=2)
    prototypes = rng.choice(np.array([-1, 1], dtype=np.int8), size=(8, bits))
    codes = np.where(rng.random((n_q + n_db, bits)) < 0.3, -prototypes[leaf], prototypes[leaf])
    codes[n_q + 10 : n_q + 60] = codes[n_q + 5]  # exact ties in a block
    packed = pack_codes(codes.astype(np.int8))
    return packed[:n_q], packed[n_q:], anc[:n_q], anc[n_q:]


SETTINGS = {
    "n": 50,
    "wr_ns": (50, 700),
    "curve_max": 1500,
    "radius_queries": 20,
    "map_depths": (300, None),
    "mahp_depths": (400,),
}


def reference_evaluate(q, db, q_anc, db_anc, sizes, weights, *, chunk, **settings):
    """What evaluate computed before its one pass: the whole database ranked and stored, then each
    metric's numpy function over the gathered lists, summed chunk by chunk in query order."""
    n_q, n_db, n_levels = len(q_anc), len(db_anc), q_anc.shape[1]
    int_w = integer_weights(weights)
    order, _ = rank_with_distances(q, db, sizes, int_w)  # (Q, N): every item, in rank order
    distances = weighted_hamming(q, db, sizes, int_w)
    rows_u, row_of, row_count = np.unique(db_anc, axis=0, return_inverse=True, return_counts=True)
    if db_anc.ndim == 3:
        rows_u = rows_u[:, :, (rows_u >= 0).any(axis=(0, 1))]
    row_of = row_of.reshape(-1)
    n, max_radius = min(settings["n"], n_db), int((np.asarray(sizes) * int_w).sum())
    wr = {m: min(m, n_db) for m in settings["wr_ns"]}
    curve_len = min(settings["curve_max"], n_db)
    maps = {f"map@{d or 'all'}": min(d or n_db, n_db) for d in settings["map_depths"]}
    mahps = {f"mahp@{d}": min(d, n_db) for d in settings["mahp_depths"]}
    sums = dict.fromkeys(["acg", "dcg", "ndcg", "ndcg_list", *wr, *maps, *mahps], 0.0)
    curve_sum, radius_sum = np.zeros(curve_len), np.zeros(max_radius + 1)
    for start in range(0, n_q, chunk):
        qa = q_anc[start : start + chunk]
        rel_u, gain_u = relevance_and_gain(qa, rows_u, layer_weights(n_levels))
        counts, total = relevance_counts(rel_u, row_count, n_levels), gain_u @ row_count
        queries, picked = np.arange(len(qa))[:, None], row_of[order[start : start + chunk]]
        rel = rel_u[queries, picked[:, :n]]
        sums["acg"] += acg(rel).sum()
        sums["dcg"] += dcg(rel).sum()
        sums["ndcg"] += ndcg(rel, database_ideal(counts, n)).sum()
        sums["ndcg_list"] += ndcg(rel, list_ideal(rel)).sum()
        curve = weighted_recall_curve(
            gain_u[queries, picked[:, : max(curve_len, *wr.values())]], total
        )
        for m, d in wr.items():
            sums[m] += curve[:, d - 1].sum()
        curve_sum += curve[:, :curve_len].sum(axis=0)
        sampled = max(0, min(len(qa), settings["radius_queries"] - start))
        if sampled:
            radius_sum += _recall_by_radius(
                distances[start : start + sampled],
                row_of,
                gain_u[:sampled],
                total[:sampled],
                max_radius,
            )
        relevant = finest_match(qa, rows_u)[queries, picked]
        for name, d in maps.items():
            sums[name] += average_precision(relevant[:, :d]).sum()
        for name, d in mahps.items():
            ideal = database_ideal(counts, d)
            sums[name] += average_hierarchical_precision(rel_u[queries, picked[:, :d]], ideal).sum()
    result = {
        (f"{k}@{settings['n']}" if k in ("acg", "dcg", "ndcg", "ndcg_list") else k): v
        for k, v in sums.items()
    }
    result = {(f"wr@{k}" if isinstance(k, int) else k): float(v / n_q) for k, v in result.items()}
    return result, curve_sum / n_q, radius_sum / min(n_q, settings["radius_queries"])


CASES = [
    # (sizes, segment weights): SHDH's three weighted segments, plain Hamming, and weights whose
    # exact integers make distances too wide for a histogram (the stable argsort instead)
    ([4, 4, 4], (1 / 2, 1 / 3, 1 / 6)),
    ([12], (1.0,)),
    ([6, 6], (999 / 1000, 1 / 997)),
]


@pytest.mark.parametrize("sets", [False, True], ids=["single-label", "multi-label"])
@pytest.mark.parametrize(("sizes", "weights"), CASES, ids=["weighted", "plain", "wide"])
def test_one_pass_gives_the_per_metric_functions_numbers_to_the_last_bit(sizes, weights, sets):
    q, db, q_anc, db_anc = clustered_case(3, 45, 3000, sum(sizes), sets=sets)
    wide = int((np.asarray(sizes) * integer_weights(weights)).sum()) >= 1 << 16
    # a radius curve millions of units wide is the same sum over every item: one query of it
    settings = {**SETTINGS, "radius_queries": 1 if wide else SETTINGS["radius_queries"]}
    expected, curve, by_radius = reference_evaluate(
        q, db, q_anc, db_anc, sizes, weights, chunk=16, **settings
    )
    result, curves = evaluate(q, db, q_anc, db_anc, sizes, weights, chunk=16, workers=2, **settings)
    assert result == expected  # every metric, exactly
    np.testing.assert_array_equal(curves.wr_at_n, curve)
    np.testing.assert_array_equal(curves.wr_at_radius, by_radius)


def test_one_pass_with_depths_beyond_the_database_and_one_chunk():
    """Depths cut at N, mAP@300 equal to mAP@all, the radius curve over every query."""
    q, db, q_anc, db_anc = clustered_case(5, 30, 250, 10)
    settings = {
        **SETTINGS,
        "map_depths": (None, 300),
        "mahp_depths": (400, 7),
        "radius_queries": 30,
    }
    expected, curve, by_radius = reference_evaluate(
        q, db, q_anc, db_anc, [10], (1.0,), chunk=30, **settings
    )
    result, curves = evaluate(q, db, q_anc, db_anc, [10], (1.0,), **settings)
    assert result == expected
    assert result["map@all"] == result["map@300"]
    np.testing.assert_array_equal(curves.wr_at_n, curve)
    np.testing.assert_array_equal(curves.wr_at_radius, by_radius)


def test_pairwise_sum_is_numpys_sum_along_a_row():
    rng = np.random.default_rng(0)
    for n in [*range(0, 300), 1000, 4099, 8192, 8193, 70001]:  # leaves, halves and their edges
        values = rng.random(n) * (rng.random(n) < 0.3)  # zeros, as between relevant ranks
        rows = np.tile(values, (2, 1))
        assert 0.0 + metric_kernel.pairwise_sum(values, n) == rows.sum(axis=1)[1], n
        where = np.flatnonzero(values)
        sparse = metric_kernel.sparse_pairwise_sum(where, values[where], len(where), n)
        assert 0.0 + sparse == rows.sum(axis=1)[0], n


def test_distinct_rows_are_numpys_unique_rows():
    rng = np.random.default_rng(2)
    matrix = LEAVES[rng.integers(0, 8, 5000)]
    matrix[:10, 2:] = -1  # items labelled above the leaves
    sets = np.stack([matrix, np.roll(matrix, 7, axis=0), np.full_like(matrix, -1)], axis=2)
    wide = rng.integers(-1, 2**40, size=(300, 4))  # too wide for one int64 key: np.unique
    for anc in (matrix, sets, wide):
        rows_u, row_of, row_count = np.unique(anc, axis=0, return_inverse=True, return_counts=True)
        if anc.ndim == 3:
            rows_u = rows_u[:, :, (rows_u >= 0).any(axis=(0, 1))]
        got = distinct_rows(anc)
        np.testing.assert_array_equal(got[0], rows_u)
        np.testing.assert_array_equal(got[1], row_of.reshape(-1))
        np.testing.assert_array_equal(got[2], row_count)
        assert got[0].dtype == rows_u.dtype


def test_query_chunks_come_in_order_with_the_checked_words():
    q, db, _, _ = clustered_case(1, 10, 40, 13)
    seen = list(
        iter_query_chunks(
            q,
            db,
            [13],
            [1],
            lambda start, words, db_t, layout: (start, words.shape, db_t.shape),
            chunk=4,
            workers=3,
        )
    )
    assert seen == [(0, (4, 1), (1, 40)), (4, (4, 1), (1, 40)), (8, (2, 1), (1, 40))]
    with pytest.raises(ValueError, match="workers must be >= 1"):
        iter_query_chunks(q, db, [13], [1], lambda *a: None, workers=0)
