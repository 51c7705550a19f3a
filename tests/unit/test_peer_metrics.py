"""The peers' metrics (shdh.core.peer_metrics): mAP@R and mAHP@R on hand-computed lists, and
inside `evaluate` against a direct implementation that ranks each query with Python loops."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.core.metrics import evaluate
from shdh.core.peer_metrics import average_hierarchical_precision, average_precision
from shdh.ranking.exact import pack_codes
from tests.unit.test_metrics import make_case


def test_average_precision_hand_computed() -> None:
    relevant = np.array([[1, 0, 1, 0], [0, 0, 0, 0], [0, 1, 1, 1]], dtype=bool)
    # (1/1 + 2/3) / 2; nothing relevant: 0; (1/2 + 2/3 + 3/4) / 3
    expected = [(1 + 2 / 3) / 2, 0.0, (1 / 2 + 2 / 3 + 3 / 4) / 3]
    np.testing.assert_allclose(average_precision(relevant), expected)


def test_average_precision_divides_by_the_relevant_items_found_in_the_top_r() -> None:
    """DeepHash-pytorch's convention: one relevant item at rank 1 of the top 2 is AP 1, however
    many relevant items lie beyond the cut."""
    assert average_precision(np.array([[True, False]]))[0] == 1.0


def test_average_hierarchical_precision_hand_computed() -> None:
    rel = np.array([[1, 2, 0], [2, 2, 1], [0, 0, 0]])
    ideal = np.array([[2, 2, 1], [2, 2, 1], [0, 0, 0]])
    # HP = 1/2, 3/4, 3/5: (1/2 + 3/4 + 3/5 - (1/2 + 3/5) / 2) / 3; a perfect list: (3 - 1) / 3
    first = (0.5 + 0.75 + 0.6 - (0.5 + 0.6) / 2) / 3
    np.testing.assert_allclose(average_hierarchical_precision(rel, ideal), [first, 2 / 3, 0.0])


def test_the_peer_metrics_refuse_what_is_no_ranked_list() -> None:
    with pytest.raises(ValueError, match="relevant must be a 2-D"):
        average_precision(np.array([True, False]))
    with pytest.raises(ValueError, match="rel has shape"):
        average_hierarchical_precision(np.ones((2, 3)), np.ones((2, 4)))


def direct_peer_metrics(q, db, q_anc, db_anc, int_w, sizes, map_rs, mahp_rs) -> dict[str, float]:
    """Each query's ranking (distance, then index) and each metric from its definition."""
    bit_w = np.repeat(int_w, sizes)
    n_db = len(db)
    out = {f"map@{'all' if r is None else r}": 0.0 for r in map_rs}
    out.update({f"mahp@{r}": 0.0 for r in mahp_rs})
    for i in range(len(q)):
        d = [int(((q[i] != db[j]) * bit_w).sum()) for j in range(n_db)]
        order = sorted(range(n_db), key=lambda j, d=d: (d[j], j))
        leaf = [int(db_anc[j][-1]) for j in order]
        shared = [
            sum(1 for k in range(1, q_anc.shape[1]) if q_anc[i][k] == db_anc[j][k]) for j in order
        ]
        for r in map_rs:
            top = leaf[: n_db if r is None else r]
            hits, precisions = 0, []
            for rank, node in enumerate(top, start=1):
                if node == q_anc[i][-1]:
                    hits += 1
                    precisions.append(hits / rank)
            out[f"map@{'all' if r is None else r}"] += sum(precisions) / hits if hits else 0.0
        best = sorted(shared, reverse=True)
        for r in mahp_rs:
            hp = [
                sum(shared[:k]) / sum(best[:k]) if sum(best[:k]) else 0.0 for k in range(1, r + 1)
            ]
            out[f"mahp@{r}"] += (sum(hp) - (hp[0] + hp[-1]) / 2) / r if best[0] else 0.0
    return {k: v / len(q) for k, v in out.items()}


@pytest.mark.parametrize(
    ("sizes", "weights", "int_w"), [([7, 6], (2 / 3, 1 / 3), [2, 1]), ([13], (1.0,), [1])]
)
def test_evaluate_scores_the_peer_metrics_as_defined(sizes, weights, int_w) -> None:
    q, db, q_anc, db_anc = make_case(3)
    q_anc = q_anc.copy()
    q_anc[0, 1:] = -1  # a query that matches nothing scores 0 on both
    result, _ = evaluate(
        pack_codes(q),
        pack_codes(db),
        q_anc,
        db_anc,
        sizes,
        weights,
        n=10,
        wr_ns=(10,),
        curve_max=20,
        chunk=4,
        map_depths=(7, None),
        mahp_depths=(12,),
    )
    expected = direct_peer_metrics(q, db, q_anc, db_anc, int_w, sizes, (7, None), (12,))
    assert {"map@7", "map@all", "mahp@12"} <= set(result)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-12), key
    assert 0 < result["map@all"] < 1 and 0 < result["mahp@12"] < 1


def test_without_peer_depths_evaluate_gives_the_papers_metrics_alone() -> None:
    q, db, q_anc, db_anc = make_case(3)
    result, _ = evaluate(pack_codes(q), pack_codes(db), q_anc, db_anc, [13], (1.0,), n=10)
    assert not any(key.startswith(("map@", "mahp@")) for key in result)
    with pytest.raises(ValueError, match="mahp_depths must hold positive ints"):
        evaluate(pack_codes(q), pack_codes(db), q_anc, db_anc, [13], (1.0,), mahp_depths=(0,))
