"""Multi-label items end to end: (N, K, M) ancestor sets, where s^k_ij = 1 iff the level-k sets
intersect (Eq. 1 generalised), through similarity, S artifact, pair labels, metrics, codes files,
`shdh metrics`, the deep losses, one training step and the tree / smatrix steps.

Every quantity is checked against a plain double loop over Python sets, and sets with M = 1
against the (N, K) matrix results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from shdh.cli import main as cli_main
from shdh.core import similarity
from shdh.core.codes_file import Codes, load_codes, save_codes
from shdh.core.hierarchy import LabelTree
from shdh.core.level_weights import integer_layer_weights, layer_weights
from shdh.core.metrics import evaluate
from shdh.core.smatrix import SMatrix, build_smatrix
from shdh.core.tree_fields import TreeError
from shdh.data.dataset import LABEL_SEP, Dataset, save_dataset
from shdh.data.splits import make_split, save_split
from shdh.hashers.dpsh import DPSH, dpsh_loss
from shdh.hashers.shdh import SHDH, shdh_loss, shdh_objective
from shdh.hashers.supervision import PairSimilarity
from shdh.ranking.exact import pack_codes
from shdh.steps import smatrix as smatrix_step
from shdh.steps import tree as tree_step
from shdh.steps.prepare import SPLIT_FILE
from shdh.training.loop import train
from shdh.training.loop_settings import LoopSettings, TrainConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# K = 4. "bottoms", "bag" and "tops" can end a label above the deepest level.
TREE = LabelTree.from_nested(
    {
        "clothes": {"tops": {"tshirt": {}, "shirt": {}}, "bottoms": {}},
        "goods": {"shoes": {"sandal": {}, "boot": {}}, "bag": {}},
    }
)


# --- data and brute-force references ------------------------------------------------------------


def _random_tree(rng: np.random.Generator) -> LabelTree:
    while True:
        n = int(rng.integers(8, 30))
        parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
        tree = LabelTree(tuple(f"n{i}" for i in range(n)), tuple(parents))
        if tree.height >= 3:
            return tree


def _random_labels(rng: np.random.Generator, tree: LabelTree, n: int) -> list[str]:
    """n items, each with 1..4 label paths ending anywhere below the root (so at mixed depths)."""
    nodes = np.arange(1, tree.n_nodes)
    return [
        LABEL_SEP.join(tree.path(int(x)) for x in rng.choice(nodes, int(rng.integers(1, 5))))
        for _ in range(n)
    ]


def _shuffle_slots(rng: np.random.Generator, sets: np.ndarray) -> np.ndarray:
    """The same sets with their slots permuted per cell and an extra all-padding slot: the
    functions must not rely on sorted cells or padding at the end."""
    padded = np.concatenate([sets, np.full(sets.shape[:2] + (1,), -1, sets.dtype)], axis=2)
    slots = np.broadcast_to(np.arange(padded.shape[2]), padded.shape)
    return np.take_along_axis(padded, rng.permuted(slots, axis=2), axis=2)


def _as_sets(anc: np.ndarray) -> list[list[set[int]]]:
    """Per item, per level, the Python set of node ids (-1 dropped); matrices count as M = 1."""
    cells = anc[:, :, None] if anc.ndim == 2 else anc
    return [[{int(x) for x in cell if x != -1} for cell in item] for item in cells]


def _brute_levels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eq. 1 generalised, as plainly as possible: s^k_ij = 1 iff the level-k sets intersect."""
    sa, sb = _as_sets(a), _as_sets(b)
    K = a.shape[1]
    out = np.zeros((len(sa), len(sb), K), dtype=bool)
    for i in range(len(sa)):
        for j in range(len(sb)):
            for k in range(1, K):
                out[i, j, k] = bool(sa[i][k] & sb[j][k])
    return out


def _brute_finest(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The documented "same finest label": the node sets at each item's deepest level meet."""

    def deepest(item: list[set[int]]) -> set[int]:
        return next((cell for cell in reversed(item) if cell), set())

    sa, sb = _as_sets(a), _as_sets(b)
    return np.array([[bool(deepest(x) & deepest(y)) for y in sb] for x in sa])


def _eq2(K: int) -> np.ndarray:
    return np.array([0.0] + [2 * (K + 1 - k) / (K * (K - 1)) for k in range(2, K + 1)])


# --- hierarchy: ancestor sets of labels ----------------------------------------------------------


def test_ancestor_sets_of_labels_by_hand() -> None:
    tree = LabelTree.from_paths(["a/b/c", "a/b/d", "a/e", "f/g"])
    node = tree.node_id
    sets = tree.ancestor_sets_of_labels(["a/b/d|a/b/c", "f/g", "a/e|a/b/c|f|a/e", "a/e"])
    assert sets.dtype == np.int32 and sets.shape == (4, 4, 2)
    root, a, f = 0, node("a"), node("f")
    b, e, g, c, d = node("a/b"), node("a/e"), node("f/g"), node("a/b/c"), node("a/b/d")
    expected = [
        [[root, -1], [a, -1], [b, -1], sorted([c, d])],
        [[root, -1], [f, -1], [g, -1], [-1, -1]],
        [[root, -1], sorted([a, f]), sorted([b, e]), [c, -1]],  # "a/e" twice counts once
        [[root, -1], [a, -1], [e, -1], [-1, -1]],
    ]
    np.testing.assert_array_equal(sets, expected)


def test_ancestor_sets_of_single_labels_are_the_matrix() -> None:
    labels = ["tshirt", "clothes/bottoms", "goods/shoes/boot", "goods/bag", "clothes/tops"]
    sets = TREE.ancestor_sets_of_labels(labels)
    assert sets.shape == (5, 4, 1)
    np.testing.assert_array_equal(sets[:, :, 0], TREE.ancestors_of_labels(labels))
    assert TREE.ancestor_sets_of_labels([]).shape == (0, 4, 1)


def test_ancestor_sets_errors_name_position_and_path() -> None:
    with pytest.raises(TreeError, match=r"label at position 1: path 'goods/hat': .*not in"):
        TREE.ancestor_sets_of_labels(["tshirt", "goods/bag|goods/hat"])
    with pytest.raises(TreeError, match=r"label at position 0: path '': "):
        TREE.ancestor_sets_of_labels(["tshirt||goods/bag"])
    with pytest.raises(TreeError, match="label at position 2: must be a string"):
        TREE.ancestor_sets_of_labels(["tshirt", "bag", 7])  # type: ignore[list-item]
    with pytest.raises(TreeError, match="separator"):
        TREE.ancestor_sets_of_labels(["tshirt"], sep="/")


# --- similarity: level matches, shared levels, gain, Eq. 3 ---------------------------------------


def test_block_functions_match_brute_force_on_sets() -> None:
    rng = np.random.default_rng(0)
    for _ in range(12):
        tree = _random_tree(rng)
        sets = _shuffle_slots(rng, tree.ancestor_sets_of_labels(_random_labels(rng, tree, 40)))
        a, b = sets[:15], sets[15:]
        K = tree.height
        u, w = layer_weights(K), integer_layer_weights(K)
        s_k = _brute_levels(a, b)
        np.testing.assert_array_equal(similarity.level_similarity(a, b), s_k)
        r = similarity.shared_levels(a, b)
        assert r.dtype == np.int8
        np.testing.assert_array_equal(r, s_k.sum(axis=2))
        np.testing.assert_array_equal(similarity.integer_gain(a, b, w), (s_k * w).sum(axis=2))
        g = similarity.gain(a, b, u)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, (s_k * u).sum(axis=2), atol=1e-6)
        s = similarity.similarity(a, b, u)
        np.testing.assert_allclose(s, 2 * (s_k * u).sum(axis=2) - 1, atol=1e-6)
        full = _brute_levels(sets, sets)
        np.testing.assert_allclose(
            similarity.dense_similarity(sets, u), 2 * (full * u).sum(axis=2) - 1, atol=1e-6
        )
        for k, match in similarity.iter_level_matches(a, b):
            np.testing.assert_array_equal(match, s_k[:, :, k])
        # A matrix on one side and sets on the other.
        single = tree.ancestors(rng.choice(np.arange(1, tree.n_nodes), size=7))
        np.testing.assert_array_equal(
            similarity.level_similarity(single, b), _brute_levels(single, b)
        )


def test_sets_intersect_by_hand_and_in_chunks(monkeypatch) -> None:
    a = np.array([[3, -1, 5], [-1, -1, -1], [7, 3, -1]])
    b = np.array([[5, 9], [-1, 3], [-1, -1], [8, 1]])
    expected = [[1, 1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]]
    np.testing.assert_array_equal(similarity.sets_intersect(a, b), np.array(expected, dtype=bool))
    monkeypatch.setattr(similarity, "_CHUNK_CELLS", 4)  # one row of a per product block
    np.testing.assert_array_equal(similarity.sets_intersect(a, b), np.array(expected, dtype=bool))
    assert similarity.sets_intersect(a[:0], b).shape == (0, 4)
    assert not similarity.sets_intersect(np.full((2, 2), -1), np.full((3, 1), -1)).any()


def test_sets_with_one_slot_give_the_matrix_results() -> None:
    rng = np.random.default_rng(1)
    for _ in range(5):
        tree = _random_tree(rng)
        anc = tree.ancestors(rng.choice(np.arange(1, tree.n_nodes), size=30))
        sets = anc[:, :, None]
        u, w = layer_weights(tree.height), integer_layer_weights(tree.height)
        for fn, args in [
            (similarity.level_similarity, ()),
            (similarity.shared_levels, ()),
            (similarity.integer_gain, (w,)),
            (similarity.gain, (u,)),
            (similarity.similarity, (u,)),
            (similarity.finest_match, ()),
        ]:
            expected = fn(anc[:12], anc[12:], *args)
            got = fn(sets[:12], sets[12:], *args)
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)
            np.testing.assert_array_equal(fn(sets[:12], anc[12:], *args), expected)


def test_missing_deeper_levels_never_match() -> None:
    """Two items labelled only above level 4 have no level-4 node: no match there, although both
    level-4 cells are all -1; their shared level-2 and level-3 nodes do match."""
    sets = TREE.ancestor_sets_of_labels(["clothes/bottoms|goods/bag", "goods/bag", "clothes/tops"])
    assert (sets[:, 3] == -1).all()
    s_k = similarity.level_similarity(sets, sets)
    np.testing.assert_array_equal(s_k[:, :, 3], np.zeros((3, 3), dtype=bool))
    np.testing.assert_array_equal(
        similarity.shared_levels(sets, sets), [[2, 2, 1], [2, 2, 0], [1, 0, 2]]
    )
    empty = np.full((1, 4, 2), -1)
    assert similarity.shared_levels(empty, empty)[0, 0] == 0
    assert not similarity.finest_match(empty, empty)[0, 0]


def test_set_matches_are_nested_so_s_is_a_function_of_shared_levels() -> None:
    rng = np.random.default_rng(2)
    for _ in range(5):
        tree = _random_tree(rng)
        sets = tree.ancestor_sets_of_labels(_random_labels(rng, tree, 50))
        s_k = similarity.level_similarity(sets, sets)[:, :, 1:]
        assert not (s_k[:, :, 1:] & ~s_k[:, :, :-1]).any()  # a match implies all above
        u = layer_weights(tree.height)
        np.testing.assert_allclose(
            similarity.similarity_by_shared(u)[similarity.shared_levels(sets, sets)],
            similarity.similarity(sets, sets, u),
            atol=1e-6,
        )


# --- the S artifact -----------------------------------------------------------------------------


def test_smatrix_with_sets_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    tree = _random_tree(rng)
    sets = tree.ancestor_sets_of_labels(_random_labels(rng, tree, 80))
    u = layer_weights(tree.height)
    s = build_smatrix(sets, u, sample_size=25, seed=4, pool=np.arange(10, 80))
    assert s.ancestors.shape == sets.shape and s.ancestors.dtype == np.int32
    idx = s.sample_idx
    np.testing.assert_array_equal(s.sample_shared, similarity.shared_levels(sets[idx], sets[idx]))
    np.testing.assert_allclose(
        s.sample_similarity(), similarity.similarity(sets[idx], sets[idx], u), atol=1e-6
    )
    path = tmp_path / "smatrix.npz"
    s.save(path)
    t = SMatrix.load(path)
    for key in ("ancestors", "weights", "int_weights", "s_by_shared", "sample_idx"):
        a, b = getattr(s, key), getattr(t, key)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    rows, cols = np.array([5, 0, 79]), slice(20, 30)
    np.testing.assert_array_equal(
        t.block(rows, cols), similarity.similarity(sets[rows], sets[20:30], u)
    )
    np.testing.assert_array_equal(t.shared_block(rows, cols), s.shared_block(rows, cols))
    bad = tmp_path / "bad.npz"
    data = {k: getattr(s, k) for k in ("weights", "int_weights", "s_by_shared", "sample_idx")}
    np.savez(
        bad,
        format=np.array("shdh-smatrix/1"),
        ancestors=sets[:, :, :0],
        sample_shared=s.sample_shared,
        **data,
    )
    with pytest.raises(ValueError, match=r"bad.npz: key 'ancestors' has shape .*M >= 1"):
        SMatrix.load(bad)
    np.savez(
        bad,
        format=np.array("shdh-smatrix/1"),
        ancestors=sets[None],
        sample_shared=s.sample_shared,
        **data,
    )
    with pytest.raises(ValueError, match=r"bad.npz: key 'ancestors' must be a 2-D or 3-D int32"):
        SMatrix.load(bad)


# --- pair labels of the supervised baselines ----------------------------------------------------


def test_pair_similarity_on_sets_matches_brute_force() -> None:
    rng = np.random.default_rng(5)
    labels = _random_labels(rng, TREE, 40)
    sets = _shuffle_slots(rng, TREE.ancestor_sets_of_labels(labels))
    u = layer_weights(4)
    rows, cols = np.arange(0, 40, 3), np.array([39, 2, 2, 0, 17])
    a, b = sets[rows], sets[cols]
    label = PairSimilarity(sets, u, "label").block(rows, cols)
    np.testing.assert_array_equal(label, np.where(_brute_finest(a, b), 1.0, -1.0))
    hier = PairSimilarity(sets, u, "hierarchical").block(rows, cols)
    np.testing.assert_allclose(hier, 2 * (_brute_levels(a, b) * u).sum(axis=2) - 1, atol=1e-6)
    sub = PairSimilarity(sets, u, "label").subset(rows)
    assert sub.n_items == len(rows) and sub.ancestors.ndim == 3


def test_finest_label_of_sets_by_hand() -> None:
    """Deepest sets meet: tshirt|bag vs tshirt; not bag vs tshirt|bag (bag is above their
    deepest level), as "bottoms" never equals "tshirt" for single labels."""
    sets = TREE.ancestor_sets_of_labels(["tshirt|goods/bag", "tshirt", "goods/bag", "bag|bottoms"])
    np.testing.assert_array_equal(
        similarity.finest_match(sets, sets),
        [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]],
    )


def test_pair_similarity_refuses_bad_shapes() -> None:
    with pytest.raises(ValueError, match="do not match 4 level weights"):
        PairSimilarity(np.zeros((3, 4, 2, 1), dtype=np.int32), layer_weights(4), "label")
    with pytest.raises(ValueError, match="do not match 4 level weights"):
        PairSimilarity(np.zeros((3, 3, 2), dtype=np.int32), layer_weights(4), "label")


# --- metrics -----------------------------------------------------------------------------------


def _codes_at_distances(distances: list[int], n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """A query code of all -1 and database codes with the first d bits flipped."""
    q = -np.ones((1, n_bits), dtype=np.int8)
    db = -np.ones((len(distances), n_bits), dtype=np.int8)
    for row, d in enumerate(distances):
        db[row, :d] = 1
    return pack_codes(q), pack_codes(db)


def test_metrics_toy_multilabel_case_by_hand() -> None:
    """K = 3: root; A {a1, a2}; B {b1}. The query holds a1 and b1.

    item  labels    level-2  level-3   r  g = u2 s2 + u3 s3   Hamming distance
    x0    a1        {A}      {a1}      2  1                   1
    x1    a2        {A}      {a2}      1  2/3                 0
    x2    b1|a2     {A, B}   {a2, b1}  2  1                   2
    x3    B         {B}      {}        1  2/3                 3
    Ranking x1, x0, x2, x3 gives r = (1, 2, 2, 1)."""
    tree = LabelTree.from_paths(["A/a1", "A/a2", "B/b1"])
    q_anc = tree.ancestor_sets_of_labels(["A/a1|B/b1"])
    db_anc = tree.ancestor_sets_of_labels(["A/a1", "A/a2", "B/b1|A/a2", "B"])
    q_codes, db_codes = _codes_at_distances([1, 0, 2, 3], 4)
    result, curves = evaluate(
        q_codes, db_codes, q_anc, db_anc, [4], [1.0], n=3, wr_ns=(2, 4), curve_max=4
    )
    dcg = 1 + 2 / math.log2(3) + 2 / 2
    ideal = 2 + 2 / math.log2(3) + 1 / 2  # r sorted (2, 2, 1, 1), top 3
    assert result["acg@3"] == pytest.approx(5 / 3)
    assert result["dcg@3"] == pytest.approx(dcg)
    assert result["ndcg@3"] == pytest.approx(dcg / ideal)
    assert result["ndcg_list@3"] == pytest.approx(dcg / ideal)  # the list holds (1, 2, 2)
    assert result["wr@2"] == pytest.approx((2 / 3 + 1) / (10 / 3))
    assert result["wr@4"] == pytest.approx(1.0)
    np.testing.assert_allclose(curves.wr_at_n, np.array([2 / 3, 5 / 3, 8 / 3, 10 / 3]) / (10 / 3))
    by_radius = np.array([2 / 3, 5 / 3, 8 / 3, 10 / 3, 10 / 3]) / (10 / 3)  # distances 0..4
    np.testing.assert_allclose(curves.wr_at_radius, by_radius)


def test_metrics_of_one_slot_sets_equal_the_matrix_metrics() -> None:
    rng = np.random.default_rng(6)
    q_anc = TREE.ancestors(rng.choice(np.arange(1, TREE.n_nodes), size=7))
    db_anc = TREE.ancestors(rng.choice(np.arange(1, TREE.n_nodes), size=50))
    q = pack_codes(np.where(rng.random((7, 12)) < 0.5, -1, 1).astype(np.int8))
    db = pack_codes(np.where(rng.random((50, 12)) < 0.5, -1, 1).astype(np.int8))
    args = ([6, 6], [2 / 3, 1 / 3])
    kw = {"n": 10, "wr_ns": (5, 20), "curve_max": 30}
    expected, exp_curves = evaluate(q, db, q_anc, db_anc, *args, **kw)
    for qa, da in [(q_anc[:, :, None], db_anc[:, :, None]), (q_anc, db_anc[:, :, None])]:
        got, curves = evaluate(q, db, qa, da, *args, **kw)
        assert got == expected
        np.testing.assert_array_equal(curves.wr_at_radius, exp_curves.wr_at_radius)


# --- codes files and `shdh metrics` -------------------------------------------------------------


def _brute_metrics(c: Codes, n: int) -> dict[str, float]:
    """docs/method.md's metrics written out: weighted Hamming (integer weights 2 : 1), ties by row,
    relevance and gain from Python sets, the whole database for WR."""
    bits_q = np.unpackbits(c.query_codes, axis=1)[:, : c.n_bits].astype(int)
    bits_db = np.unpackbits(c.db_codes, axis=1)[:, : c.n_bits].astype(int)
    seg = np.repeat([2, 1], c.segment_sizes)
    s_k = _brute_levels(c.query_ancestors, c.db_ancestors)
    u = _eq2(c.query_ancestors.shape[1])
    n_db = len(bits_db)
    sums = dict.fromkeys(["acg", "dcg", "ndcg", "ndcg_list", "wr100", "wr1000", "wr5000"], 0.0)
    peers = dict.fromkeys(["map@1000", "map@all", "mahp@2500"], 0.0)

    def finest(sets: np.ndarray) -> set[int]:  # the labels at the deepest level with one
        levels = [{int(x) for x in level if x >= 0} for level in sets]
        return next((nodes for nodes in reversed(levels) if nodes), set())

    for i in range(len(bits_q)):
        dist = [int(((bits_q[i] != bits_db[j]) * seg).sum()) for j in range(n_db)]
        order = sorted(range(n_db), key=lambda j: (dist[j], j))
        rel = [int(s_k[i, j].sum()) for j in order]
        gain = [float((s_k[i, j] * u).sum()) for j in order]
        top = rel[:n]

        def dcg(values: list[int]) -> float:
            return sum(r / math.log2(p + 2) for p, r in enumerate(values))

        sums["acg"] += sum(top) / len(top)
        sums["dcg"] += dcg(top)
        ideal_db, ideal_list = dcg(sorted(rel, reverse=True)[:n]), dcg(sorted(top, reverse=True))
        sums["ndcg"] += dcg(top) / ideal_db if ideal_db > 0 else 0.0
        sums["ndcg_list"] += dcg(top) / ideal_list if ideal_list > 0 else 0.0
        for m in (100, 1000, 5000):
            sums[f"wr{m}"] += sum(gain[:m]) / sum(gain) if sum(gain) > 0 else 0.0
        hits, precisions = 0, []  # the whole database is under 1,000: @1000 and @all agree
        for rank, j in enumerate(order, start=1):
            if finest(c.query_ancestors[i]) & finest(c.db_ancestors[j]):
                hits += 1
                precisions.append(hits / rank)
        ap = sum(precisions) / hits if hits else 0.0
        peers["map@1000"] += ap
        peers["map@all"] += ap
        best = sorted(rel, reverse=True)
        hp = [sum(rel[:k]) / sum(best[:k]) if sum(best[:k]) else 0.0 for k in range(1, n_db + 1)]
        peers["mahp@2500"] += (sum(hp) - (hp[0] + hp[-1]) / 2) / n_db if best[0] else 0.0
    out = {f"{k}@{n}": v / len(bits_q) for k, v in sums.items() if not k.startswith("wr")}
    out.update({f"wr@{m}": sums[f"wr{m}"] / len(bits_q) for m in (100, 1000, 5000)})
    out.update({k: v / len(bits_q) for k, v in peers.items()})
    return out


def test_shdh_metrics_scores_a_multilabel_codes_file(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(7)
    tree = _random_tree(rng)
    q_anc = tree.ancestor_sets_of_labels(_random_labels(rng, tree, 6))
    db_anc = _shuffle_slots(rng, tree.ancestor_sets_of_labels(_random_labels(rng, tree, 120)))
    n_bits = 11
    signs = np.array([-1, 1], dtype=np.int8)
    codes = Codes(
        query_codes=pack_codes(rng.choice(signs, size=(6, n_bits))),
        db_codes=pack_codes(rng.choice(signs, size=(120, n_bits))),
        n_bits=n_bits,
        segment_sizes=np.array([4, 7]),
        segment_weights=np.array([2 / 3, 1 / 3]),
        query_ancestors=q_anc,
        db_ancestors=db_anc,
        query_ids=np.arange(6),
        db_ids=np.arange(100, 220),
    )
    path = tmp_path / "multi.npz"
    save_codes(path, codes)
    loaded = load_codes(path)
    assert loaded.db_ancestors.shape == db_anc.shape and loaded.db_ancestors.dtype == np.int32
    assert cli_main(["metrics", str(path), "--n", "15"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expected = _brute_metrics(loaded, 15)
    assert printed.keys() == expected.keys()
    for key, value in expected.items():
        assert printed[key] == pytest.approx(value, abs=1e-9), key


def test_codes_file_refuses_bad_ancestor_sets(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    sets = TREE.ancestor_sets_of_labels(_random_labels(rng, TREE, 4))
    base = Codes(
        query_codes=pack_codes(np.ones((4, 8), dtype=np.int8)),
        db_codes=pack_codes(np.ones((4, 8), dtype=np.int8)),
        n_bits=8,
        segment_sizes=np.array([8]),
        segment_weights=np.array([1.0]),
        query_ancestors=sets,
        db_ancestors=sets,
        query_ids=np.arange(4),
        db_ids=np.arange(4),
    )
    cases = [
        ({"db_ancestors": sets[:, :, :0]}, "key 'db_ancestors' has shape (4, 4, 0)"),
        ({"db_ancestors": sets[:, :3]}, "has K = 4 levels but 'db_ancestors' has 3"),
        ({"query_ancestors": sets.astype(float)}, "key 'query_ancestors' must be an integer"),
        ({"db_ancestors": sets - 5}, "key 'db_ancestors' holds ids outside"),
        ({"db_ancestors": sets[:3]}, "key 'db_ancestors' has 3 rows but 'db_codes' has 4"),
    ]
    for changes, message in cases:
        with pytest.raises(ValueError, match="bad.npz") as info:
            save_codes(tmp_path / "bad.npz", Codes(**(vars(base) | changes)))
        assert message in str(info.value)
    assert not (tmp_path / "bad.npz").exists()


# --- deep losses and training --------------------------------------------------------------------


def _brute_shdh(z, sets, sizes, levels, u, bank_z=None, bank_sets=None) -> float:
    """Default SHDH loss (E1 "levels", E2 "balance", alpha 1, reduction "sum") pair by pair."""
    h = np.tanh(z)
    hp, ap = h, sets
    if bank_z is not None:
        hp, ap = np.concatenate([h, np.tanh(bank_z)]), np.concatenate([sets, bank_sets])
    s_k = _brute_levels(sets, ap)
    starts = np.cumsum([0] + sizes)
    total = 0.0
    for i in range(len(h)):
        for j in range(len(hp)):
            if j == i:
                continue
            for s, k in enumerate(levels):
                a, b = starts[s], starts[s + 1]
                rho = float(h[i, a:b] @ hp[j, a:b]) / (b - a)
                total += u[k - 1] * (rho - (1.0 if s_k[i, j, k - 1] else -1.0)) ** 2
    e2 = sum(
        u[k - 1] * float((h[:, starts[s] : starts[s + 1]].mean(0) ** 2).sum()) / sizes[s]
        for s, k in enumerate(levels)
    )
    return total / len(h) + e2


def test_shdh_loss_on_sets_matches_brute_force() -> None:
    rng = np.random.default_rng(9)
    sets = TREE.ancestor_sets_of_labels(_random_labels(rng, TREE, 9))
    z = rng.normal(scale=1.5, size=(9, 12))
    sizes, levels, u = [4, 4, 4], [2, 3, 4], list(layer_weights(4))
    kw = {"segment_sizes": sizes, "segment_levels": levels, "layer_weights": u}
    loss, _ = shdh_loss(torch.from_numpy(z[:6]), torch.from_numpy(sets[:6]), **kw)
    assert float(loss) == pytest.approx(_brute_shdh(z[:6], sets[:6], sizes, levels, u), rel=1e-9)
    loss, _ = shdh_loss(
        torch.from_numpy(z[:6]),
        torch.from_numpy(sets[:6]),
        bank_z=torch.from_numpy(z[6:]),
        bank_anc=torch.from_numpy(sets[6:]),
        **kw,
    )
    brute = _brute_shdh(z[:6], sets[:6], sizes, levels, u, z[6:], sets[6:])
    assert float(loss) == pytest.approx(brute, rel=1e-9)
    with pytest.raises(ValueError, match="bank_anc must be"):
        shdh_loss(
            torch.from_numpy(z[:6]),
            torch.from_numpy(sets[:6]),
            bank_z=torch.from_numpy(z[6:]),
            bank_anc=torch.from_numpy(sets[6:, :, :1]),
            **kw,
        )
    with pytest.raises(ValueError, match="anc has K = 3 levels, not the tree.s 4"):
        shdh_loss(torch.from_numpy(z[:6]), torch.from_numpy(sets[:6, :3]), **kw)


@pytest.mark.parametrize("e1", ["levels", "matrix"])
def test_losses_of_one_slot_sets_equal_the_matrix_losses(e1: str) -> None:
    rng = np.random.default_rng(10)
    anc = TREE.ancestors(rng.choice(np.arange(1, TREE.n_nodes), size=10))
    z = torch.from_numpy(rng.normal(size=(10, 12)))
    kw = {"segment_sizes": [4, 4, 4], "segment_levels": [2, 3, 4], "e1": e1}
    kw["layer_weights"] = list(layer_weights(4))
    flat, sets = torch.from_numpy(anc), torch.from_numpy(anc[:, :, None])
    expected, _ = shdh_loss(z[:7], flat[:7], bank_z=z[7:], bank_anc=flat[7:], **kw)
    got, _ = shdh_loss(z[:7], sets[:7], bank_z=z[7:], bank_anc=sets[7:], **kw)
    assert float(got) == pytest.approx(float(expected), rel=1e-12)
    expected, _ = dpsh_loss(z[:7], flat[:7], bank_z=z[7:], bank_anc=flat[7:])
    got, _ = dpsh_loss(z[:7], sets[:7], bank_z=z[7:], bank_anc=sets[7:])
    assert float(got) == pytest.approx(float(expected), rel=1e-12)


def test_dpsh_loss_on_sets_matches_brute_force() -> None:
    rng = np.random.default_rng(11)
    sets = TREE.ancestor_sets_of_labels(_random_labels(rng, TREE, 8))
    z = rng.normal(size=(8, 6))
    same = _brute_finest(sets, sets)
    likelihood = quantisation = 0.0
    for i in range(8):
        for j in range(8):
            if i != j:
                theta = float(z[i] @ z[j]) / 2
                likelihood += math.log1p(math.exp(theta)) - same[i, j] * theta
        quantisation += float(((np.where(z[i] > 0, 1.0, -1.0) - z[i]) ** 2).sum())
    loss, parts = dpsh_loss(torch.from_numpy(z), torch.from_numpy(sets), eta=3.0)
    assert float(parts["e1"]) == pytest.approx(likelihood / 8, rel=1e-9)
    assert float(loss) == pytest.approx((likelihood + 3.0 * quantisation) / 8, rel=1e-9)
    with pytest.raises(ValueError, match="no node"):
        dpsh_loss(torch.from_numpy(z[:2]), torch.full((2, 4, 2), -1))


def _multilabel_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8x8 images, each the sum of a pattern per label, with the labels' ancestor sets."""
    rng = np.random.default_rng(seed)
    leaves = [TREE.path(x) for x in TREE.leaves]
    patterns = rng.normal(size=(len(leaves), 8, 8))
    labels, images = [], []
    for _ in range(n):
        picked = rng.choice(len(leaves), size=int(rng.integers(1, 3)), replace=False)
        labels.append(LABEL_SEP.join(leaves[p] for p in picked))
        x = patterns[picked].sum(0) + 0.3 * rng.normal(size=(8, 8))
        images.append(np.clip(128 + 40 * x, 0, 255).astype(np.uint8))
    return np.stack(images), TREE.ancestor_sets_of_labels(labels)


@pytest.mark.parametrize("memory_bank", [False, True])
def test_shdh_training_steps_on_sets(tmp_path: Path, memory_bank: bool) -> None:
    images, sets = _multilabel_images(40, seed=12)
    assert sets.shape[2] == 2
    config = TrainConfig(
        n_bits=12,
        width=1 / 16,
        image_size=8,
        batch_size=16,
        device="cpu",
        epochs=2,
        memory_bank=memory_bank,
    )
    u = list(layer_weights(4))
    loss = shdh_objective([4, 4, 4], [2, 3, 4], u)
    result = train(
        config,
        images,
        sets,
        np.arange(40),
        tmp_path,
        progress=None,
        segment_sizes=[4, 4, 4],
        segment_levels=[2, 3, 4],
        layer_weights=u,
        objective=loss,
    )
    assert len(result.history) == 2
    assert all(math.isfinite(e["loss"]) and e["e1"] > 0 for e in result.history)
    assert result.checkpoint_path.is_file()
    with pytest.raises(ValueError, match=r"ancestors must be an \(N, K\) int array"):
        train(
            config,
            images,
            sets[:, :, :, None],
            np.arange(40),
            tmp_path / "x",
            progress=None,
            segment_sizes=[4, 4, 4],
            segment_levels=[2, 3, 4],
            layer_weights=u,
            objective=loss,
        )


@pytest.mark.parametrize("cls", [SHDH, DPSH])
def test_deep_hashers_fit_on_sets(cls) -> None:
    images, sets = _multilabel_images(32, seed=13)
    loop = LoopSettings(width=1 / 16, image_size=8, batch_size=16, device="cpu", epochs=1)
    hasher = cls(n_bits=12, loop=loop)
    hasher.fit(images, PairSimilarity(sets, layer_weights(4), cls.supervision))
    codes = hasher.encode(images[:5])
    assert codes.shape == (5, 12) and set(np.unique(codes)) <= {-1, 1}


# --- pipeline steps: tree and smatrix ------------------------------------------------------------


def _prepared(tmp_path: Path, labels: list[str]) -> Path:
    n = len(labels)
    ds = Dataset(
        images=np.zeros((n, 4, 4), dtype=np.uint8),
        labels=np.array(labels),
        ids=np.arange(n, dtype=np.int64),
        name="toy",
    )
    prepared = tmp_path / "prepared"
    save_dataset(ds, prepared / "dataset")
    save_split(make_split(n, query_fraction=0.25, seed=0), prepared / SPLIT_FILE)
    return prepared


def _saved(tmp_path: Path) -> Path:
    TREE.save(tmp_path / "tree.json")
    return tmp_path / "tree.json"


def test_tree_and_smatrix_steps_write_sets_for_multilabel_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(14)
    labels = _random_labels(rng, TREE, 40)
    labels[0] = "tshirt"  # single labels mix with multi-labels
    prepared = _prepared(tmp_path, labels)
    tree_step.tree(prepared, tmp_path / "tree", source=str(_saved(tmp_path)))
    tree, anc = tree_step.load_tree(tmp_path / "tree")
    np.testing.assert_array_equal(anc, TREE.ancestor_sets_of_labels(labels))
    assert anc.ndim == 3 and tree == TREE
    smatrix_step.smatrix(
        tmp_path / "tree", tmp_path / "s.npz", prepared_dir=prepared, sample_size=12
    )
    s = SMatrix.load(tmp_path / "s.npz")
    np.testing.assert_array_equal(s.ancestors, anc)
    idx = s.sample_idx
    np.testing.assert_array_equal(s.sample_shared, _brute_levels(anc[idx], anc[idx]).sum(2))


def test_tree_step_writes_a_matrix_for_single_labels(tmp_path: Path) -> None:
    labels = ["tshirt", "goods/bag", "clothes/bottoms", "boot"]
    prepared = _prepared(tmp_path, labels)
    tree_step.tree(prepared, tmp_path / "tree", source=str(_saved(tmp_path)))
    _, anc = tree_step.load_tree(tmp_path / "tree")
    np.testing.assert_array_equal(anc, TREE.ancestors_of_labels(labels))


def test_load_tree_refuses_bad_ancestors(tmp_path: Path) -> None:
    tree_dir = tmp_path / "tree"
    tree_dir.mkdir()
    TREE.save(tree_dir / tree_step.TREE_FILE)
    path = tree_dir / tree_step.ANCESTORS_FILE
    good = TREE.ancestor_sets_of_labels(["tshirt|bag", "boot"])
    cases = [
        (good[:, :3], r"shape \(2, 3, 2\), expected \(N, 4\) or \(N, 4, M\)"),
        (good[:, :, :0], r"shape \(2, 4, 0\)"),
        (good[None], r"shape \(1, 2, 4, 2\)"),
        (good.astype(np.float32), "dtype float32, expected integers"),
        (good + TREE.n_nodes, f"ids outside -1..{TREE.n_nodes - 1}"),
    ]
    for bad, message in cases:
        np.save(path, bad)
        with pytest.raises(ValueError, match=message) as info:
            tree_step.load_tree(tree_dir)
        assert str(path) in str(info.value)
    np.save(path, good)
    assert tree_step.load_tree(tree_dir)[1].shape == (2, 4, 2)
