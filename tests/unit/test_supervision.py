"""PairSimilarity blocks against brute-force double loops, in both modes, on a tree whose leaves
sit at different depths (so ancestor rows end in -1)."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.core.hierarchy import LabelTree
from shdh.core.level_weights import layer_weights
from shdh.hashers.supervision import MODES, PairSimilarity

# K = 4; "bottoms" and "bag" are leaves above the deepest level, "tops" is an internal node that
# some items are labelled with directly.
TREE = LabelTree.from_nested(
    {
        "clothes": {"tops": {"tshirt": {}, "shirt": {}}, "bottoms": {}},
        "goods": {"shoes": {"sandal": {}, "boot": {}}, "bag": {}},
    }
)
LABELS = ["tshirt", "shirt", "bottoms", "sandal", "boot", "bag", "tops"]


def _items(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ids = np.array([TREE.node_id(label) for label in LABELS])
    return TREE.ancestors(rng.choice(ids, size=n))


def _brute_label(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """+1 iff the two items carry the same finest label (their deepest non -1 entry)."""
    out = np.empty((len(a), len(b)), dtype=np.float32)
    for i in range(len(a)):
        for j in range(len(b)):
            leaf_i = [x for x in a[i] if x != -1][-1]
            leaf_j = [x for x in b[j] if x != -1][-1]
            out[i, j] = 1.0 if leaf_i == leaf_j else -1.0
    return out


def _brute_hierarchical(a: np.ndarray, b: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Eq. 3: s_ij = 2 sum_{k>=2} u_k [i and j share their level-k node] - 1."""
    out = np.empty((len(a), len(b)), dtype=np.float64)
    for i in range(len(a)):
        for j in range(len(b)):
            shared = sum(u[k] for k in range(1, a.shape[1]) if a[i, k] != -1 and a[i, k] == b[j, k])
            out[i, j] = 2 * shared - 1
    return out


def test_the_tree_has_leaves_at_different_depths():
    anc = _items(200, seed=0)
    assert TREE.height == 4
    assert (anc[:, -1] == -1).any() and (anc[:, -1] != -1).any()


def test_label_mode_matches_brute_force():
    anc = _items(60, seed=1)
    pairs = PairSimilarity(anc, layer_weights(4), "label")
    rows, cols = np.arange(0, 60, 2), np.array([59, 3, 3, 0, 17, 42, 8])  # any order, repeats
    block = pairs.block(rows, cols)
    assert block.shape == (30, 7) and block.dtype == np.float32
    np.testing.assert_array_equal(block, _brute_label(anc[rows], anc[cols]))
    full = pairs.block(np.arange(60), np.arange(60))
    np.testing.assert_array_equal(np.diag(full), 1.0)
    np.testing.assert_array_equal(full, full.T)


def test_hierarchical_mode_matches_brute_force():
    anc = _items(60, seed=2)
    u = layer_weights(4)
    pairs = PairSimilarity(anc, u, "hierarchical")
    rows, cols = np.arange(60)[::-3], np.array([0, 1, 1, 30, 59])
    block = pairs.block(rows, cols)
    assert block.shape == (20, 5) and block.dtype == np.float32
    np.testing.assert_allclose(block, _brute_hierarchical(anc[rows], anc[cols], u), atol=1e-6)
    assert block.min() >= -1 and block.max() <= 1


def test_modes_differ_only_where_the_hierarchy_matters():
    anc = TREE.ancestors([TREE.node_id(x) for x in ["tshirt", "tshirt", "shirt", "bag", "tops"]])
    u = layer_weights(4)  # (0, 1/2, 1/3, 1/6)
    label = PairSimilarity(anc, u, "label").block(np.arange(5), np.arange(5))
    hier = PairSimilarity(anc, u, "hierarchical").block(np.arange(5), np.arange(5))
    assert label[0, 1] == 1 and hier[0, 1] == pytest.approx(1.0)  # same leaf
    assert label[0, 2] == -1 and hier[0, 2] == pytest.approx(2 * (1 / 2 + 1 / 3) - 1)  # siblings
    assert label[0, 3] == -1 and hier[0, 3] == pytest.approx(-1.0)  # different superclass
    # An item labelled with the internal node "tops" is not the same label as a t-shirt, but it
    # shares the t-shirt's first two levels.
    assert label[0, 4] == -1 and hier[0, 4] == pytest.approx(2 * (1 / 2 + 1 / 3) - 1)
    # Two items on the shallow leaf "bag" match at every level they have: 2 (1/2 + 1/3) - 1.
    bags = TREE.ancestors([TREE.node_id("bag")] * 2)
    hb = PairSimilarity(bags, u, "hierarchical").block(np.arange(2), np.arange(2))
    np.testing.assert_allclose(hb, 2 * (1 / 2 + 1 / 3) - 1, atol=1e-6)


def test_subset_and_n_items():
    anc = _items(40, seed=3)
    for mode in MODES:
        pairs = PairSimilarity(anc, layer_weights(4), mode)
        assert pairs.n_items == 40
        rows = np.array([5, 1, 33, 20])
        sub = pairs.subset(rows)
        assert sub.n_items == 4 and sub.mode == mode
        np.testing.assert_array_equal(
            sub.block(np.arange(4), np.arange(4)), pairs.block(rows, rows)
        )


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of .* got 'hier'"):
        PairSimilarity(_items(3, seed=4), layer_weights(4), "hier")


@pytest.mark.parametrize(
    ("ancestors", "weights"),
    [
        (np.zeros((5, 3), dtype=np.int32), layer_weights(4)),  # K=3 rows, 4 weights
        (np.zeros(5, dtype=np.int32), layer_weights(4)),  # not (N, K)
    ],
)
def test_mismatched_shapes_are_refused(ancestors, weights):
    with pytest.raises(ValueError, match="do not match 4 level weights"):
        PairSimilarity(ancestors, weights, "label")
