"""LabelTree construction and validation, ancestor matrices, Eq. 2 weights and segment layouts."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from shdh.core import level_weights
from shdh.core.hierarchy import LabelTree
from shdh.core.tree_fields import TreeError

# ---- Eq. 2 layer weights -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("K", "expected"),
    [
        (3, [0, Fraction(2, 3), Fraction(1, 3)]),
        (4, [0, Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]),
        (7, [Fraction(x, 42) for x in (0, 12, 10, 8, 6, 4, 2)]),
    ],
)
def test_layer_weights_hand_computed(K: int, expected: list[Fraction]) -> None:
    u = level_weights.layer_weights(K)
    assert u.dtype == np.float64 and u.shape == (K,)
    np.testing.assert_allclose(u, [float(x) for x in expected], rtol=0, atol=1e-15)
    assert u.sum() == pytest.approx(1.0, abs=1e-15)
    w = level_weights.integer_layer_weights(K)
    assert w.dtype == np.int64
    assert w.tolist() == [int(x * level_weights.weight_scale(K)) for x in expected]
    np.testing.assert_allclose(w / level_weights.weight_scale(K), u, rtol=0, atol=1e-15)


def test_weight_scale_and_height_errors() -> None:
    assert [level_weights.weight_scale(K) for K in (2, 3, 4, 7)] == [1, 3, 6, 21]
    assert level_weights.layer_weights(2).tolist() == [0.0, 1.0]
    for bad in (1, 0, -3):
        with pytest.raises(ValueError, match="K must be >= 2"):
            level_weights.layer_weights(bad)
    with pytest.raises(ValueError, match="integer"):
        level_weights.integer_layer_weights(3.0)  # type: ignore[arg-type]


# ---- segments ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_bits", "K", "layout", "expected"),
    [
        (32, 3, "levels", [16, 16]),
        (33, 3, "levels", [16, 17]),
        (32, 3, "paper", [10, 10, 12]),
        (48, 4, "levels", [16, 16, 16]),
        (64, 4, "levels", [21, 21, 22]),
        (64, 4, "paper", [16, 16, 16, 16]),
        (50, 4, "paper", [12, 12, 12, 14]),
        (64, 7, "levels", [10, 10, 10, 10, 10, 14]),
        (64, 7, "paper", [9, 9, 9, 9, 9, 9, 10]),
        (6, 7, "levels", [1, 1, 1, 1, 1, 1]),
        (7, 7, "paper", [1] * 7),
    ],
)
def test_segment_sizes(n_bits: int, K: int, layout: str, expected: list[int]) -> None:
    sizes = level_weights.segment_sizes(n_bits, K, layout)
    assert sizes == expected
    assert sum(sizes) == n_bits


def test_segment_sizes_default_is_levels() -> None:
    assert level_weights.segment_sizes(64, 4) == [21, 21, 22]
    assert level_weights.LAYOUTS == ("levels", "paper")


@pytest.mark.parametrize(
    ("n_bits", "K", "layout"),
    [(1, 3, "levels"), (5, 7, "levels"), (2, 3, "paper"), (6, 7, "paper")],
)
def test_segment_sizes_too_few_bits(n_bits: int, K: int, layout: str) -> None:
    with pytest.raises(ValueError) as err:
        level_weights.segment_sizes(n_bits, K, layout)
    msg = str(err.value)
    assert f"n_bits={n_bits}" in msg and f"K={K}" in msg and layout in msg


def test_unknown_layout_lists_choices() -> None:
    for fn in (
        lambda: level_weights.segment_sizes(32, 3, "flat"),
        lambda: level_weights.segment_levels(3, "flat"),
        lambda: level_weights.segment_weights(3, "flat"),
        lambda: level_weights.segment_integer_weights(3, "flat"),
    ):
        with pytest.raises(ValueError, match="'flat'.*levels, paper"):
            fn()


def test_segment_levels_and_weights() -> None:
    assert level_weights.segment_levels(4, "levels") == [2, 3, 4]
    assert level_weights.segment_levels(4, "paper") == [1, 2, 3, 4]
    np.testing.assert_allclose(level_weights.segment_weights(4, "levels"), [1 / 2, 1 / 3, 1 / 6])
    np.testing.assert_allclose(level_weights.segment_weights(4, "paper"), [0, 1 / 2, 1 / 3, 1 / 6])
    assert level_weights.segment_integer_weights(4, "levels").tolist() == [3, 2, 1]
    assert level_weights.segment_integer_weights(4, "paper").tolist() == [0, 3, 2, 1]
    assert level_weights.segment_integer_weights(3, "levels").dtype == np.int64
    assert level_weights.segment_weights(3).dtype == np.float64


# ---- construction --------------------------------------------------------------------------

TABLE = {
    "root": None,
    "Clothes": "root",
    "Goods": "root",
    "Tops": "Clothes",
    "Shoes": "Goods",
    "Shirt": "Tops",
    "Sandal": "Shoes",
    "Bag": "Goods",  # a leaf at level 3 while the others are at level 4
}


def test_from_parents_structure() -> None:
    tree = LabelTree.from_parents(TABLE)
    assert tree.names[0] == "root" and tree.parents[0] == -1
    assert tree.height == 4
    assert tree.n_nodes == 8
    # breadth first: levels are contiguous and non-decreasing
    assert tree.levels.tolist() == sorted(tree.levels.tolist())
    assert tree.level(tree.node_id("Bag")) == 3
    assert tree.path(tree.node_id("Sandal")) == "Goods/Shoes/Sandal"
    assert tree.path(0) == ""
    leaves = {tree.names[i] for i in tree.leaves}
    assert leaves == {"Shirt", "Sandal", "Bag"}
    assert list(tree.leaves) == sorted(tree.leaves)
    kids = tree.children(tree.node_id("Goods"))
    assert [tree.names[i] for i in kids] == ["Shoes", "Bag"]
    assert tree.children(tree.node_id("Bag")) == ()
    # pairs give the same tree as the mapping, and a repeated identical pair is harmless
    pairs = list(TABLE.items()) + [("Shirt", "Tops")]
    assert LabelTree.from_parents(pairs) == tree


def test_from_parents_two_parents_names_node() -> None:
    pairs = [("r", None), ("a", "r"), ("b", "r"), ("x", "a"), ("x", "b")]
    with pytest.raises(TreeError, match="'x' has two parents: 'a' and 'b'"):
        LabelTree.from_parents(pairs)


def test_from_parents_root_count() -> None:
    with pytest.raises(TreeError, match=r"exactly one root.*\['r', 's'\]"):
        LabelTree.from_parents({"r": None, "s": None, "a": "r"})
    with pytest.raises(TreeError, match="exactly one root.*found none"):
        LabelTree.from_parents({"a": "b", "b": "a"})


def test_from_parents_undefined_parent_names_it() -> None:
    with pytest.raises(TreeError, match="'a' has parent 'ghost', which is never defined"):
        LabelTree.from_parents({"r": None, "a": "ghost"})


def test_from_parents_cycle_names_node() -> None:
    table = {"r": None, "a": "r", "x": "y", "y": "z", "z": "x"}
    with pytest.raises(TreeError, match="cycle.*'x'") as err:
        LabelTree.from_parents(table)
    assert "'x' -> 'y' -> 'z' -> 'x'" in str(err.value)


def test_from_parents_bad_entries() -> None:
    with pytest.raises(TreeError, match="pairs"):
        LabelTree.from_parents([("a", None, 3)])  # type: ignore[list-item]
    with pytest.raises(TreeError, match="must be strings"):
        LabelTree.from_parents([(1, None)])  # type: ignore[list-item]


def test_constructor_validation() -> None:
    with pytest.raises(TreeError, match="cycle.*'b'"):
        LabelTree(("r", "a", "b", "c"), (-1, 0, 3, 2))
    with pytest.raises(TreeError, match="root 'r' must be node 0"):
        LabelTree(("a", "r"), (1, -1))
    with pytest.raises(TreeError, match="exactly one root"):
        LabelTree(("r", "s"), (-1, -1))
    with pytest.raises(TreeError, match="node 1 'a': invalid parent 5"):
        LabelTree(("r", "a"), (-1, 5))
    with pytest.raises(TreeError, match="node 1 'a': invalid parent 1"):
        LabelTree(("r", "a"), (-1, 1))
    with pytest.raises(TreeError, match="'a/b'.*'/'"):
        LabelTree(("r", "a/b"), (-1, 0))
    with pytest.raises(TreeError, match="non-empty string"):
        LabelTree(("r", ""), (-1, 0))
    with pytest.raises(TreeError, match="2 entries but parents has 1"):
        LabelTree(("r", "a"), (-1,))
    with pytest.raises(TreeError, match="at least a root"):
        LabelTree((), ())
    # lists are accepted and stored as tuples, so trees stay hashable and comparable
    tree = LabelTree(["r", "a"], [-1, 0])  # type: ignore[arg-type]
    assert tree.names == ("r", "a") and tree.parents == (-1, 0)
    assert hash(tree) == hash(LabelTree(("r", "a"), (-1, 0)))


def test_names_repeat_under_different_parents_and_paths_identify_nodes() -> None:
    tree = LabelTree.from_paths(["warm/red/circle", "warm/red/square", "cool/blue/circle"])
    circles = [i for i, name in enumerate(tree.names) if name == "circle"]
    assert len(circles) == 2 and all(tree.level(i) == 4 for i in circles)
    assert {tree.path(i) for i in circles} == {"warm/red/circle", "cool/blue/circle"}
    rows = tree.ancestors_of_labels(["warm/red/circle", "cool/blue/circle"])
    assert rows[0, 3] != rows[1, 3] and rows[0, 1] != rows[1, 1]
    with pytest.raises(TreeError, match="'circle' is ambiguous.*'warm/red/circle'"):
        tree.node_id("circle")
    assert tree.node_id("square") == tree.node_id("warm/red/square")  # unique: a name will do
    # the same holds for nested dicts and for the names/parents form
    nested = LabelTree.from_nested({"a": {"x": None}, "b": ["x"]})
    assert nested.names.count("x") == 2
    assert LabelTree.from_dict(tree.to_dict()) == tree
    # only siblings must differ: their paths would be equal
    with pytest.raises(TreeError, match="node 'a/d' appears twice"):
        LabelTree.from_nested({"a": ["d", "d"]})
    with pytest.raises(TreeError, match="node 'a' appears twice"):
        LabelTree(("r", "a", "a"), (-1, 0, 0))
    # a full path wins over a name: "x" is the level-2 node's path
    tree = LabelTree.from_paths(["x/a/x"])
    assert tree.level(tree.node_id("x")) == 2
    assert tree.level(tree.node_id("x/a/x")) == 4


def test_a_missing_label_is_shown_as_plain_text() -> None:
    tree = LabelTree.from_paths(["warm/red/circle"])
    labels = np.array(["warm/red/circle", "warm/yellow/triangle"])
    with pytest.raises(TreeError) as err:
        tree.ancestors_of_labels(labels)
    assert "label path 'warm/yellow/triangle' is not in the tree" in str(err.value)
    assert "np.str_" not in str(err.value)


def test_a_tree_file_may_list_label_paths(tmp_path) -> None:
    path = tmp_path / "tree.json"
    path.write_text(
        '{"format": "shdh-label-tree/1", "root": "shapes",'
        ' "paths": ["warm/red/circle", "cool/blue/circle", "cool/blue/square"]}'
    )
    tree = LabelTree.load(path)
    assert tree.names[0] == "shapes" and tree.height == 4 and len(tree.leaves) == 3
    path.write_text('{"format": "shdh-label-tree/1", "paths": ["a//b"]}')
    with pytest.raises(TreeError, match=f"^{path}: field 'paths': .*empty component"):
        LabelTree.load(path)
    path.write_text('{"format": "shdh-label-tree/1", "paths": ["a"], "names": ["r"]}')
    with pytest.raises(TreeError, match="either 'paths' or 'names'"):
        LabelTree.load(path)


def test_from_nested_leaf_forms() -> None:
    tree = LabelTree.from_nested(
        {"A": {"a1": None, "a2": {}, "a3": []}, "B": ["b1", "b2"], "C": None}, root="top"
    )
    assert tree.names[0] == "top"
    assert tree.height == 3
    assert [tree.names[i] for i in tree.leaves] == ["C", "a1", "a2", "a3", "b1", "b2"]
    assert tree.level(tree.node_id("C")) == 2
    with pytest.raises(TreeError, match="'A/a1'.*got int"):
        LabelTree.from_nested({"A": {"a1": 3}})
    with pytest.raises(TreeError, match="'A'.*leaf names"):
        LabelTree.from_nested({"A": ["ok", {"b": None}]})
    with pytest.raises(TreeError, match="mapping"):
        LabelTree.from_nested(["a"])  # type: ignore[arg-type]


def test_from_paths() -> None:
    tree = LabelTree.from_paths(["Clothes/Tops/Shirt", "Clothes/Tops", "Goods/Bag"])
    assert tree.height == 4
    assert tree.path(tree.node_id("Shirt")) == "Clothes/Tops/Shirt"
    other = LabelTree.from_paths(["Clothes.Tops.Shirt", "Goods.Bag"], sep=".", root="R")
    assert other.names[0] == "R"
    assert other.path(other.node_id("Shirt")) == "Clothes/Tops/Shirt"
    for bad in (["a//b"], [""], ["/a"]):
        with pytest.raises(TreeError, match="empty component"):
            LabelTree.from_paths(bad)


def test_node_id_lookup_and_errors() -> None:
    tree = LabelTree.from_parents(TABLE)
    assert tree.node_id("Goods/Shoes/Sandal") == tree.node_id("Sandal")
    assert tree.node_id("root") == 0
    with pytest.raises(TreeError, match="label path 'Foo/Bar' is not in the tree"):
        tree.node_id("Foo/Bar")
    with pytest.raises(TreeError, match="label path 'Shoes/Sandal' is not in the tree"):
        tree.node_id("Shoes/Sandal")  # a partial path is not a path
    with pytest.raises(TreeError, match="node id 99"):
        tree.path(99)


# ---- ancestors -----------------------------------------------------------------------------


def test_ancestors_with_shallow_leaves() -> None:
    tree = LabelTree.from_parents(TABLE)
    nid = tree.node_id
    row = tree.ancestor_row(nid("Bag"))
    assert row.dtype == np.int32
    assert row.tolist() == [0, nid("Goods"), nid("Bag"), -1]
    assert tree.ancestor_row(0).tolist() == [0, -1, -1, -1]
    anc = tree.ancestors_of_labels(["Shirt", "Goods/Bag", "Sandal", "Shirt"])
    assert anc.shape == (4, 4) and anc.dtype == np.int32
    assert anc.tolist() == [
        [0, nid("Clothes"), nid("Tops"), nid("Shirt")],
        [0, nid("Goods"), nid("Bag"), -1],
        [0, nid("Goods"), nid("Shoes"), nid("Sandal")],
        [0, nid("Clothes"), nid("Tops"), nid("Shirt")],
    ]
    np.testing.assert_array_equal(tree.ancestors(np.array([nid("Bag")])), anc[1:2])
    assert tree.ancestors([]).shape == (0, 4)


def test_ancestor_errors_name_label_and_position() -> None:
    tree = LabelTree.from_parents(TABLE)
    with pytest.raises(TreeError, match="position 2: label path 'Goods/Hat' is not in the tree"):
        tree.ancestors_of_labels(["Shirt", "Bag", "Goods/Hat"])
    with pytest.raises(TreeError, match="node id 8 at position 1"):
        tree.ancestors(np.array([0, 8]))
    with pytest.raises(TreeError, match="node id -1 at position 0"):
        tree.ancestors(np.array([-1]))
    with pytest.raises(TreeError, match="integers"):
        tree.ancestors(np.array([0.5]))
    with pytest.raises(TreeError, match="1-D"):
        tree.ancestors(np.zeros((2, 2), dtype=int))


def _random_tree(rng: np.random.Generator, n: int) -> LabelTree:
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    return LabelTree(tuple(f"n{i}" for i in range(n)), tuple(parents))


def test_ancestors_match_parent_walk_on_random_trees() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        tree = _random_tree(rng, int(rng.integers(2, 40)))
        nodes = np.arange(tree.n_nodes)
        anc = tree.ancestors(nodes)
        assert anc.shape == (tree.n_nodes, tree.height)
        for node in nodes:
            chain = [int(node)]
            while tree.parents[chain[-1]] != -1:
                chain.append(tree.parents[chain[-1]])
            expected = chain[::-1] + [-1] * (tree.height - len(chain))
            assert anc[node].tolist() == expected
            assert tree.level(int(node)) == len(chain)
        assert tree.height == max(tree.levels)
        assert set(tree.leaves) == set(range(tree.n_nodes)) - set(tree.parents)


def test_layer_weights_methods() -> None:
    tree = LabelTree.from_parents(TABLE)
    np.testing.assert_allclose(tree.layer_weights(), level_weights.layer_weights(4))
    assert tree.integer_layer_weights().tolist() == [0, 3, 2, 1]


def test_levels_are_read_only() -> None:
    tree = LabelTree.from_parents(TABLE)
    with pytest.raises(ValueError):
        tree.levels[0] = 5
    row = tree.ancestor_row(1)
    row[0] = 7  # a copy: the cached table is untouched
    assert tree.ancestor_row(1)[0] == 0


# ---- serialisation -------------------------------------------------------------------------


def test_json_round_trip(tmp_path) -> None:
    tree = LabelTree.from_parents(TABLE)
    data = tree.to_dict()
    assert data["format"] == "shdh-label-tree/1"
    assert LabelTree.from_dict(json.loads(json.dumps(data))) == tree
    path = tmp_path / "tree.json"
    tree.save(path)
    assert LabelTree.load(path) == tree
    assert [p.name for p in tmp_path.iterdir()] == ["tree.json"]  # no temporary left behind


def test_load_errors_name_file_and_field(tmp_path) -> None:
    path = tmp_path / "t.json"
    good = LabelTree.from_parents(TABLE).to_dict()
    cases = {
        "format": ({**good, "format": "other/1"}, "field 'format'"),
        "names": ({**good, "names": [1, 2]}, "field 'names'"),
        "parents": ({**good, "parents": ["a"]}, "field 'parents'"),
        "missing": ({"format": good["format"], "names": good["names"]}, "missing field 'parents'"),
        "cycle": ({**good, "parents": [-1, 2, 1, 0, 0, 0, 0, 0]}, "cycle"),
        "array": ([1, 2], "JSON object"),
    }
    for data, needle in cases.values():
        path.write_text(json.dumps(data))
        with pytest.raises(TreeError) as err:
            LabelTree.load(path)
        assert str(path) in str(err.value) and needle in str(err.value)
    path.write_text("{not json")
    with pytest.raises(TreeError, match="not valid JSON"):
        LabelTree.load(path)
    with pytest.raises(TreeError, match="missing.json.*cannot read"):
        LabelTree.load(tmp_path / "missing.json")
    path.write_bytes(b"\x93NUMPY\x01\x00")  # a binary file given as the tree source
    with pytest.raises(TreeError, match=f"{path}: cannot read label tree as UTF-8 JSON"):
        LabelTree.load(path)


def test_the_tree_files_of_docs_own_data_load() -> None:
    from tests.conftest import REPO

    text = (REPO / "docs" / "own-data.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```json\n")[1:]]
    trees = [LabelTree.from_dict(json.loads(b), source="own-data.md") for b in blocks]
    assert len(trees) == 2 and all(t.height == 4 for t in trees)
    assert trees[1].names.count("circle") == 2
    assert {trees[1].path(i) for i in trees[1].leaves} == {
        f"{c}/{s}" for c in ("cool/blue", "warm/red") for s in ("circle", "square")
    }
