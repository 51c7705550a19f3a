"""Metrics of docs/method.md against hand-computed cases and a brute-force evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shdh.core import metrics, relevance
from shdh.core.level_weights import layer_weights
from shdh.core.metrics import (
    acg,
    database_ideal,
    dcg,
    evaluate,
    list_ideal,
    ndcg,
    weighted_recall_at,
    weighted_recall_by_radius,
    weighted_recall_curve,
)
from shdh.ranking.exact import pack_codes

# --- hand-computed cases -------------------------------------------------------------------------


def test_layer_weights_eq2() -> None:
    np.testing.assert_allclose(layer_weights(3), [0, 2 / 3, 1 / 3])
    np.testing.assert_allclose(layer_weights(4), [0, 1 / 2, 1 / 3, 1 / 6])
    assert math.isclose(layer_weights(7).sum(), 1.0)
    with pytest.raises(ValueError, match="K must be >= 2"):
        layer_weights(1)


def test_acg_and_dcg_hand_computed() -> None:
    rel = np.array([[2, 0, 1], [0, 0, 0]])
    np.testing.assert_allclose(acg(rel), [1.0, 0.0])
    np.testing.assert_allclose(dcg(rel), [2 / 1 + 0 / math.log2(3) + 1 / 2, 0.0])


def test_dcg_with_ties_uses_position_not_value() -> None:
    np.testing.assert_allclose(dcg([[1, 1, 1]]), [1 + 1 / math.log2(3) + 1 / 2])


def test_ndcg_perfect_ranking_is_one_and_zero_ideal_scores_zero() -> None:
    rel = np.array([[2, 1, 0], [0, 0, 0], [1, 2, 0]])
    result = ndcg(rel, list_ideal(rel))
    np.testing.assert_allclose(result, [1.0, 0.0, (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))])


def test_list_ideal_sorts_descending() -> None:
    np.testing.assert_array_equal(list_ideal([[0, 2, 1, 2]]), [[2, 2, 1, 0]])


def test_database_ideal_from_relevance_counts() -> None:
    counts = np.array([[5, 1, 2], [0, 1, 1], [3, 0, 0]])  # items with r = 0, 1, 2
    np.testing.assert_array_equal(
        database_ideal(counts, 4), [[2, 2, 1, 0], [2, 1, 0, 0], [0, 0, 0, 0]]
    )
    with pytest.raises(ValueError, match="rel_counts"):
        database_ideal(np.array([[-1, 2]]), 2)


def test_list_ideal_and_database_ideal_differ_when_the_best_item_is_missed() -> None:
    retrieved = np.array([[1, 0]])  # the database also holds an item with r = 2, not retrieved
    counts = np.array([[10, 1, 1]])
    assert ndcg(retrieved, list_ideal(retrieved))[0] == pytest.approx(1.0)
    expected = 1.0 / (2 + 1 / math.log2(3))
    assert ndcg(retrieved, database_ideal(counts, 2))[0] == pytest.approx(expected)


def test_ndcg_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="shape"):
        ndcg([[1, 0]], [[1, 0, 0]])


def test_weighted_recall_hand_computed_and_zero_total() -> None:
    gains = np.array([[1.0, 0.5, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    total = np.array([4.0, 0.0])
    np.testing.assert_allclose(weighted_recall_at(gains, total, 2), [0.375, 0.0])
    np.testing.assert_allclose(
        weighted_recall_curve(gains, total), [[0.25, 0.375, 0.375, 0.5], [0, 0, 0, 0]]
    )
    with pytest.raises(ValueError, match="n must be"):
        weighted_recall_at(gains, total, 5)
    with pytest.raises(ValueError, match="total_gain"):
        weighted_recall_curve(gains, total[:1])


def test_weighted_recall_by_radius_hand_computed() -> None:
    distances = np.array([[0, 2, 2, 5]])
    gains = np.array([[1.0, 0.5, 0.0, 0.5]])
    result = weighted_recall_by_radius(distances, gains, np.array([2.0]), 5)
    np.testing.assert_allclose(result, [[0.5, 0.5, 0.75, 0.75, 0.75, 1.0]])
    with pytest.raises(ValueError, match="0..4"):
        weighted_recall_by_radius(distances, gains, np.array([2.0]), 4)


def test_missing_node_never_matches() -> None:
    q = np.array([[0, -1, -1], [0, 1, -1]])
    x = np.array([[0, -1, -1], [0, 1, -1]])
    np.testing.assert_array_equal(relevance.relevance(q, x), [0, 1])
    np.testing.assert_allclose(relevance.gain(q, x, layer_weights(3)), [0.0, 2 / 3])


# --- evaluate against brute force ----------------------------------------------------------------

# A K = 3 tree: root 0; level 2 nodes 1, 2; leaves 3..6 (3, 4 under 1; 5, 6 under 2).
LEAF_ANCESTORS = np.array([[0, 1, 3], [0, 1, 4], [0, 2, 5], [0, 2, 6]], dtype=np.int32)


def make_case(seed: int, n_q: int = 6, n_db: int = 50, n_bits: int = 13):
    rng = np.random.default_rng(seed)
    q_leaf, db_leaf = rng.integers(0, 4, n_q), rng.integers(0, 4, n_db)
    centres = rng.choice(np.array([-1, 1], dtype=np.int8), size=(4, n_bits))
    flips = rng.random((n_db, n_bits)) < 0.25
    db = np.where(flips, -centres[db_leaf], centres[db_leaf]).astype(np.int8)
    flips = rng.random((n_q, n_bits)) < 0.25
    q = np.where(flips, -centres[q_leaf], centres[q_leaf]).astype(np.int8)
    db[5:9] = db[0]  # exact ties
    return q, db, LEAF_ANCESTORS[q_leaf], LEAF_ANCESTORS[db_leaf]


def brute_evaluate(q, db, q_anc, db_anc, sizes, int_w, n, wr_ns, curve_max):
    """Every metric from its definition with Python loops over queries and items."""
    n_levels = q_anc.shape[1]
    u = [0.0] + [
        2 * (n_levels + 1 - k) / (n_levels * (n_levels - 1)) for k in range(2, 1 + n_levels)
    ]
    bit_w = np.repeat(int_w, sizes)
    n_db = len(db)

    def r(a, b):
        return sum(1 for k in range(1, n_levels) if a[k] == b[k] and a[k] != -1)

    def g(a, b):
        return sum(u[k] for k in range(1, n_levels) if a[k] == b[k] and a[k] != -1)

    sums = {"acg": 0.0, "dcg": 0.0, "ndcg": 0.0, "ndcg_list": 0.0}
    wr = dict.fromkeys(wr_ns, 0.0)
    curve = np.zeros(min(curve_max, n_db))
    max_radius = int((np.asarray(sizes) * np.asarray(int_w)).sum())
    by_radius = np.zeros(max_radius + 1)
    for i in range(len(q)):
        d = [int(((q[i] != db[j]) * bit_w).sum()) for j in range(n_db)]
        order = sorted(range(n_db), key=lambda j, d=d: (d[j], j))
        rel = [r(q_anc[i], db_anc[j]) for j in order]
        gains = [g(q_anc[i], db_anc[j]) for j in order]
        top = rel[: min(n, n_db)]
        disc = [1 / math.log2(p + 2) for p in range(len(top))]
        this_dcg = sum(x * w for x, w in zip(top, disc, strict=True))
        ideal_db = sorted(rel, reverse=True)[: len(top)]
        ideal_list = sorted(top, reverse=True)
        idcg_db = sum(x * w for x, w in zip(ideal_db, disc, strict=True))
        idcg_list = sum(x * w for x, w in zip(ideal_list, disc, strict=True))
        sums["acg"] += sum(top) / len(top)
        sums["dcg"] += this_dcg
        sums["ndcg"] += this_dcg / idcg_db if idcg_db > 0 else 0.0
        sums["ndcg_list"] += this_dcg / idcg_list if idcg_list > 0 else 0.0
        total = sum(gains)
        for m in wr_ns:
            wr[m] += sum(gains[: min(m, n_db)]) / total if total > 0 else 0.0
        for p in range(len(curve)):
            curve[p] += sum(gains[: p + 1]) / total if total > 0 else 0.0
        for radius in range(max_radius + 1):
            inside = sum(g(q_anc[i], db_anc[j]) for j in range(n_db) if d[j] <= radius)
            by_radius[radius] += inside / total if total > 0 else 0.0
    result = {f"{k}@{n}": v / len(q) for k, v in sums.items()}
    result.update({f"wr@{m}": v / len(q) for m, v in wr.items()})
    return result, curve / len(q), by_radius / len(q)


@pytest.mark.parametrize(
    ("sizes", "weights", "int_w"),
    [
        ([7, 6], (2 / 3, 1 / 3), [2, 1]),
        ([13], (1.0,), [1]),
        ([4, 5, 4], (0.0, 2 / 3, 1 / 3), [0, 2, 1]),
    ],
)
def test_evaluate_matches_brute_force(sizes, weights, int_w) -> None:
    q, db, q_anc, db_anc = make_case(1)
    q_anc = q_anc.copy()
    q_anc[0, 1:] = -1  # a query that matches nothing: IDCG = 0 and total gain = 0
    kwargs = {"n": 10, "wr_ns": (5, 10, 80), "curve_max": 30}
    result, curves = evaluate(
        pack_codes(q), pack_codes(db), q_anc, db_anc, sizes, weights, chunk=4, **kwargs
    )
    expected, curve, by_radius = brute_evaluate(q, db, q_anc, db_anc, sizes, int_w, **kwargs)
    assert (
        set(result)
        == set(expected)
        == {"acg@10", "dcg@10", "ndcg@10", "ndcg_list@10", "wr@5", "wr@10", "wr@80"}
    )
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key
        assert isinstance(result[key], float)
    np.testing.assert_allclose(curves.wr_at_n, curve, atol=1e-12)
    np.testing.assert_allclose(curves.wr_at_radius, by_radius, atol=1e-12)
    np.testing.assert_array_equal(curves.radius, np.arange(len(by_radius)))
    np.testing.assert_allclose(curves.radius_real, curves.radius * weights[-1] / int_w[-1])


def test_evaluate_without_weighted_recall_depths() -> None:
    """A run that asks for no WR@n (evaluate.wr_ns all deeper than a tiny database drop out of
    the score step) still gets its NDCG."""
    q, db, q_anc, db_anc = make_case(1)
    kwargs = {"n": 10, "wr_ns": (), "curve_max": 30}
    result, _ = evaluate(pack_codes(q), pack_codes(db), q_anc, db_anc, [13], (1.0,), **kwargs)
    expected, _, _ = brute_evaluate(q, db, q_anc, db_anc, [13], [1], **kwargs)
    assert set(result) == set(expected) == {"acg@10", "dcg@10", "ndcg@10", "ndcg_list@10"}
    assert result["ndcg@10"] == pytest.approx(expected["ndcg@10"], abs=1e-12)


def test_evaluate_curves_are_monotone_and_reach_one() -> None:
    q, db, q_anc, db_anc = make_case(2, n_db=40)
    result, curves = evaluate(
        pack_codes(q), pack_codes(db), q_anc, db_anc, [7, 6], (2 / 3, 1 / 3), n=5
    )
    # Every query shares at least level 2 with some item, so each total gain is positive.
    assert np.all(np.diff(curves.wr_at_n) >= -1e-15)
    assert len(curves.wr_at_n) == 40  # capped at N
    assert curves.wr_at_n[-1] == pytest.approx(1.0)
    assert np.all(np.diff(curves.wr_at_radius) >= -1e-15)
    assert curves.wr_at_radius[-1] == pytest.approx(1.0)
    assert curves.radius[-1] == 2 * 7 + 6
    assert result["wr@5000"] == pytest.approx(1.0)
    assert 0.0 <= result["ndcg@5"] <= result["ndcg_list@5"] + 1e-12 <= 1.0 + 1e-12


def test_evaluate_perfect_codes_give_ndcg_one() -> None:
    # Codes equal per leaf and far apart per level-2 node: the ranking is the ideal order.
    leaf_codes = np.array(
        [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, -1], [-1, -1, -1, -1, 1, 1], [-1, -1, -1, -1, -1, 1]],
        dtype=np.int8,
    )
    rng = np.random.default_rng(0)
    q_leaf, db_leaf = rng.integers(0, 4, 5), rng.integers(0, 4, 30)
    result, _ = evaluate(
        pack_codes(leaf_codes[q_leaf]),
        pack_codes(leaf_codes[db_leaf]),
        LEAF_ANCESTORS[q_leaf],
        LEAF_ANCESTORS[db_leaf],
        [6],
        (1.0,),
        n=12,
    )
    assert result["ndcg@12"] == pytest.approx(1.0)
    assert result["ndcg_list@12"] == pytest.approx(1.0)


@pytest.mark.parametrize("max_radius", [20, 1000])  # class-count path and per-item fallback
def test_radius_shares_by_row_match_per_item_definition(max_radius: int) -> None:
    rng = np.random.default_rng(6)
    distances = rng.integers(0, 21, size=(4, 40)).astype(np.uint8)
    row_of = rng.integers(0, 5, 40)
    gain_u = rng.random((4, 5))
    gain_u[1] = 0.0  # a query with no gain at all
    total = gain_u[:, row_of].sum(axis=1)
    expected = weighted_recall_by_radius(distances, gain_u[:, row_of], total, max_radius)
    result = metrics._recall_by_radius(distances, row_of, gain_u, total, max_radius)
    np.testing.assert_allclose(result, expected.sum(axis=0))


def test_evaluate_does_not_depend_on_chunk_or_workers() -> None:
    q, db, q_anc, db_anc = make_case(3, n_q=9)
    args = (pack_codes(q), pack_codes(db), q_anc, db_anc, [7, 6], (2 / 3, 1 / 3))
    reference, ref_curves = evaluate(*args, n=7)
    for chunk, workers in [(1, 1), (2, 2), (4, 3)]:
        result, curves = evaluate(*args, n=7, chunk=chunk, workers=workers)
        assert result == pytest.approx(reference, abs=1e-12)
        np.testing.assert_allclose(curves.wr_at_radius, ref_curves.wr_at_radius, atol=1e-12)


def test_radius_curve_over_the_first_queries_only() -> None:
    q, db, q_anc, db_anc = make_case(5, n_q=9)
    sizes, weights = [7, 6], (2 / 3, 1 / 3)
    full, full_curves = evaluate(pack_codes(q), pack_codes(db), q_anc, db_anc, sizes, weights, n=7)
    for m, chunk in [(4, 3), (4, None), (1, 2), (20, None)]:
        result, curves = evaluate(
            pack_codes(q),
            pack_codes(db),
            q_anc,
            db_anc,
            sizes,
            weights,
            n=7,
            chunk=chunk,
            radius_queries=m,
        )
        assert result == pytest.approx(full, abs=1e-12)  # the table metrics use every query
        _, first = evaluate(
            pack_codes(q[:m]), pack_codes(db), q_anc[:m], db_anc, sizes, weights, n=7
        )
        np.testing.assert_allclose(curves.wr_at_radius, first.wr_at_radius, atol=1e-12)
        np.testing.assert_allclose(curves.wr_at_n, full_curves.wr_at_n, atol=1e-12)
    with pytest.raises(ValueError, match="radius_queries must be >= 1"):
        evaluate(pack_codes(q), pack_codes(db), q_anc, db_anc, sizes, weights, radius_queries=0)


def test_evaluate_rejects_bad_input() -> None:
    q, db, q_anc, db_anc = make_case(4)
    qp, dp = pack_codes(q), pack_codes(db)
    with pytest.raises(ValueError, match="db_anc has 49 rows but the db codes have 50"):
        evaluate(qp, dp, q_anc, db_anc[:-1], [13], (1.0,))
    with pytest.raises(ValueError, match="K = 3 levels but db_anc has 2"):
        evaluate(qp, dp, q_anc, db_anc[:, :2], [13], (1.0,))
    with pytest.raises(ValueError, match="integer"):
        evaluate(qp, dp, q_anc.astype(float), db_anc, [13], (1.0,))
    with pytest.raises(ValueError, match="n must"):
        evaluate(qp, dp, q_anc, db_anc, [13], (1.0,), n=0)
    with pytest.raises(ValueError, match="sum to 20 bits"):
        evaluate(qp, dp, q_anc, db_anc, [10, 10], (0.5, 0.5))
    with pytest.raises(ValueError, match="at least one query"):
        evaluate(qp[:0], dp, q_anc[:0], db_anc, [13], (1.0,))
