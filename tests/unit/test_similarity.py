"""Eq. 1-3 on blocks against brute-force double loops, and the compact SMatrix artifact."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.core import similarity
from shdh.core.hierarchy import LabelTree
from shdh.core.level_weights import integer_layer_weights, layer_weights
from shdh.core.similarity import DenseTooLargeError
from shdh.core.smatrix import SMatrix, build_smatrix
from shdh.data import cifar100


def _random_tree(rng: np.random.Generator, n: int) -> LabelTree:
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    return LabelTree(tuple(f"n{i}" for i in range(n)), tuple(parents))


def _random_items(rng: np.random.Generator, n_items: int) -> tuple[LabelTree, np.ndarray]:
    """Items on random leaves of a random tree (leaves at mixed depths, so -1 appears)."""
    while True:
        tree = _random_tree(rng, int(rng.integers(6, 30)))
        if tree.height >= 3:
            break
    leaves = np.asarray(tree.leaves)
    return tree, tree.ancestors(rng.choice(leaves, size=n_items))


def _brute_levels(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Eq. 1 written as plainly as possible."""
    K = a.shape[1]
    out = np.zeros((len(a), len(b), K), dtype=bool)
    for i in range(len(a)):
        for j in range(len(b)):
            for k in range(1, K):
                out[i, j, k] = a[i, k] != -1 and a[i, k] == b[j, k]
    return out


def test_block_functions_match_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(15):
        tree, anc = _random_items(rng, 30)
        a, b = anc[:12], anc[12:]
        K = tree.height
        u, w = layer_weights(K), integer_layer_weights(K)
        s_k = _brute_levels(a, b)
        np.testing.assert_array_equal(similarity.level_similarity(a, b), s_k)
        r = similarity.shared_levels(a, b)
        assert r.dtype == np.int8
        np.testing.assert_array_equal(r, s_k.sum(axis=2))
        ig = similarity.integer_gain(a, b, w)
        assert ig.dtype == np.int32
        np.testing.assert_array_equal(ig, (s_k * w).sum(axis=2))
        g = similarity.gain(a, b, u)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, (s_k * u).sum(axis=2), atol=1e-6)
        s = similarity.similarity(a, b, u)
        assert s.dtype == np.float32
        np.testing.assert_allclose(s, 2 * (s_k * u).sum(axis=2) - 1, atol=1e-6)
        np.testing.assert_allclose(g, (s + 1) / 2, atol=1e-6)
        # Eq. 3 second form: sum_k u_k (2 s^k - 1)
        np.testing.assert_allclose(s, (u * (2 * s_k - 1)).sum(axis=2), atol=1e-6)
        # non-integer weights take the float path and give the same kind of answer
        v = rng.random(K)
        np.testing.assert_allclose(similarity.gain(a, b, v), (s_k * v).sum(axis=2), atol=1e-5)


def test_minus_one_never_matches() -> None:
    # two items on the same level-2 leaf of a K=3 tree, and a root-only item
    a = np.array([[0, 1, -1], [0, 1, -1], [0, -1, -1]])
    np.testing.assert_array_equal(similarity.shared_levels(a, a), [[1, 1, 0], [1, 1, 0], [0, 0, 0]])
    levels = similarity.level_similarity(a, a)
    assert not levels[:, :, 0].any()  # the root level never counts
    assert not levels[:, :, 2].any()  # -1 == -1 is not a match
    u = layer_weights(3)
    np.testing.assert_allclose(similarity.similarity(a, a, u)[0], [1 / 3, 1 / 3, -1], atol=1e-6)


def test_cifar_like_values() -> None:
    tree = cifar100.label_tree()
    anc = tree.ancestors_of_labels(["beaver", "dolphin", "beaver", "apple"])
    s = similarity.similarity(anc, anc, tree.layer_weights())
    # same class: 1; same superclass only: 2 * 2/3 - 1 = 1/3; nothing shared: -1
    np.testing.assert_allclose(s[0], [1, 1 / 3, 1, -1], atol=1e-6)
    np.testing.assert_array_equal(similarity.shared_levels(anc, anc)[0], [2, 1, 2, 0])


def test_similarity_by_shared() -> None:
    np.testing.assert_allclose(similarity.similarity_by_shared(layer_weights(3)), [-1, 1 / 3, 1])
    np.testing.assert_allclose(similarity.similarity_by_shared(layer_weights(4)), [-1, 0, 2 / 3, 1])
    rng = np.random.default_rng(1)
    for _ in range(10):
        tree, anc = _random_items(rng, 40)
        u = tree.layer_weights()
        table = similarity.similarity_by_shared(u)
        assert table.shape == (tree.height,) and table.dtype == np.float64
        s = similarity.similarity(anc, anc, u)
        np.testing.assert_allclose(table[similarity.shared_levels(anc, anc)], s, atol=1e-6)


def test_input_validation() -> None:
    a = np.zeros((2, 3), dtype=int)
    u = layer_weights(3)
    with pytest.raises(ValueError, match="K = 3 levels but anc_b has 4"):
        similarity.shared_levels(a, np.zeros((2, 4), dtype=int))
    with pytest.raises(ValueError, match=r"\(N, K\)"):
        similarity.similarity(np.zeros(3, dtype=int), a, u)
    with pytest.raises(ValueError, match="anc_a must be an integer"):
        similarity.shared_levels(a.astype(float), a)
    with pytest.raises(ValueError, match="-2"):
        similarity.shared_levels(a - 2, a)
    with pytest.raises(ValueError, match=r"weights must have shape \(3,\)"):
        similarity.gain(a, a, layer_weights(4))
    with pytest.raises(ValueError, match="finite"):
        similarity.similarity(a, a, np.array([0, np.nan, 0.5]))
    with pytest.raises(ValueError, match="int_weights must be integers"):
        similarity.integer_gain(a, a, u)


def test_empty_blocks() -> None:
    a = np.zeros((0, 3), dtype=np.int32)
    b = np.zeros((5, 3), dtype=np.int32)
    assert similarity.similarity(a, b, layer_weights(3)).shape == (0, 5)
    assert similarity.shared_levels(b, a).shape == (5, 0)


def test_dense_similarity_limit() -> None:
    u = layer_weights(3)
    anc = np.zeros((30, 3), dtype=np.int32)
    np.testing.assert_array_equal(
        similarity.dense_similarity(anc, u), similarity.similarity(anc, anc, u)
    )
    with pytest.raises(DenseTooLargeError) as err:
        similarity.dense_similarity(anc, u, max_items=29)
    assert "N=30" in str(err.value)
    big = np.zeros((54_000, 3), dtype=np.int32)  # never allocated as N x N
    with pytest.raises(DenseTooLargeError) as err:
        similarity.dense_similarity(big, u)
    msg = str(err.value)
    assert "N=54000" in msg and "11.7 GB" in msg
    assert "similarity(anc[rows], anc[cols]" in msg and "SMatrix.block(rows, cols)" in msg
    assert isinstance(err.value, ValueError)
    assert similarity.DENSE_LIMIT == 20_000


# ---- SMatrix -------------------------------------------------------------------------------


def _cifar_smatrix(n: int = 5000, sample_size: int = 2000, seed: int = 0) -> SMatrix:
    tree = cifar100.label_tree()
    rng = np.random.default_rng(7)
    anc = tree.ancestors(rng.choice(np.asarray(tree.leaves), size=n))
    return build_smatrix(anc, tree.layer_weights(), sample_size=sample_size, seed=seed)


def test_build_smatrix_sample() -> None:
    s = _cifar_smatrix()
    assert s.n_items == 5000
    assert s.sample_idx.shape == (2000,) and s.sample_idx.dtype == np.int64
    assert np.all(np.diff(s.sample_idx) > 0)  # sorted, without replacement
    assert s.sample_shared.shape == (2000, 2000) and s.sample_shared.dtype == np.int8
    idx = s.sample_idx
    np.testing.assert_array_equal(
        s.sample_shared, similarity.shared_levels(s.ancestors[idx], s.ancestors[idx])
    )
    ref = similarity.similarity(s.ancestors[idx], s.ancestors[idx], s.weights)
    np.testing.assert_allclose(s.sample_similarity(), ref, atol=1e-6)
    assert s.sample_similarity().dtype == np.float32
    assert s.int_weights.tolist() == [0, 2, 1]
    np.testing.assert_allclose(s.s_by_shared, [-1, 1 / 3, 1])
    # deterministic in the seed
    np.testing.assert_array_equal(_cifar_smatrix().sample_idx, idx)
    assert not np.array_equal(_cifar_smatrix(seed=1).sample_idx, idx)


def test_build_smatrix_sample_size_edges() -> None:
    assert _cifar_smatrix(n=50, sample_size=2000).sample_idx.tolist() == list(range(50))
    empty = _cifar_smatrix(n=50, sample_size=0)
    assert empty.sample_idx.shape == (0,) and empty.sample_shared.shape == (0, 0)
    assert empty.sample_similarity().shape == (0, 0)
    with pytest.raises(ValueError, match="sample_size must be >= 0"):
        _cifar_smatrix(n=50, sample_size=-1)


def test_build_smatrix_rejects_weights_without_integer_form() -> None:
    anc = np.zeros((4, 3), dtype=np.int32)
    with pytest.raises(ValueError, match="multiples of 1/3"):
        build_smatrix(anc, np.array([0.0, 0.55, 0.45]))


def test_smatrix_blocks() -> None:
    s = _cifar_smatrix(n=300, sample_size=10)
    rows, cols = np.array([5, 0, 17]), np.arange(100, 140)
    ref = similarity.similarity(s.ancestors[rows], s.ancestors[cols], s.weights)
    np.testing.assert_array_equal(s.block(rows, cols), ref)
    np.testing.assert_array_equal(
        s.block(slice(0, 10), slice(0, 10)),
        similarity.dense_similarity(s.ancestors[:10], s.weights),
    )
    np.testing.assert_array_equal(
        s.shared_block(rows, cols), similarity.shared_levels(s.ancestors[rows], s.ancestors[cols])
    )


def test_build_smatrix_million_items_has_no_dense_step() -> None:
    rng = np.random.default_rng(0)
    anc = rng.integers(0, 50, size=(1_000_000, 7), dtype=np.int32)
    anc[:, 0] = 0
    s = build_smatrix(anc, layer_weights(7), sample_size=2000, seed=3)
    assert s.ancestors.shape == (1_000_000, 7)
    assert s.sample_shared.shape == (2000, 2000)
    assert s.int_weights.tolist() == [0, 6, 5, 4, 3, 2, 1]


def test_smatrix_save_load_round_trip(tmp_path) -> None:
    s = _cifar_smatrix(n=400, sample_size=50)
    path = tmp_path / "smatrix.npz"
    s.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["smatrix.npz"]
    t = SMatrix.load(path)
    for key in (
        "ancestors",
        "weights",
        "int_weights",
        "s_by_shared",
        "sample_idx",
        "sample_shared",
    ):
        a, b = getattr(s, key), getattr(t, key)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    with np.load(path) as npz:
        assert str(npz["format"]) == "shdh-smatrix/1"


def _write_npz(path, s: SMatrix, **changes) -> None:
    data = {
        "format": np.array("shdh-smatrix/1"),
        **{k: getattr(s, k) for k in ("ancestors", "weights", "int_weights", "s_by_shared")},
        "sample_idx": s.sample_idx,
        "sample_shared": s.sample_shared,
    }
    data.update(changes)
    np.savez(path, **{k: v for k, v in data.items() if v is not None})


def test_smatrix_load_errors_name_file_and_key(tmp_path) -> None:
    s = _cifar_smatrix(n=100, sample_size=8)
    path = tmp_path / "bad.npz"
    cases = [
        ({"sample_shared": None}, "missing key 'sample_shared'"),
        ({"format": None}, "missing key 'format'"),
        ({"format": np.array("other/2")}, "key 'format'"),
        ({"ancestors": s.ancestors.astype(np.int64)}, "key 'ancestors'"),
        ({"weights": s.weights[:2]}, "key 'weights'"),
        ({"sample_shared": s.sample_shared[:3]}, "key 'sample_shared'"),
        ({"sample_idx": s.sample_idx + 1000}, "key 'sample_idx'"),
        ({"s_by_shared": s.s_by_shared + 0.5}, "key 's_by_shared'"),
        ({"int_weights": s.int_weights * 2}, "key 'int_weights'"),
    ]
    for changes, needle in cases:
        _write_npz(path, s, **changes)
        with pytest.raises(ValueError) as err:
            SMatrix.load(path)
        assert str(path) in str(err.value) and needle in str(err.value), err.value
    path.write_bytes(b"PK\x03\x04 this is not a zip file")
    with pytest.raises(ValueError, match="bad.npz.*cannot read"):
        SMatrix.load(path)
    np.save(tmp_path / "plain.npy", s.ancestors)
    with pytest.raises(ValueError, match="plain.npy.*cannot read.*single ndarray"):
        SMatrix.load(tmp_path / "plain.npy")
    with pytest.raises(ValueError, match="nope.npz.*cannot read"):
        SMatrix.load(tmp_path / "nope.npz")


def test_smatrix_constructor_validates() -> None:
    s = _cifar_smatrix(n=100, sample_size=8)
    with pytest.raises(ValueError, match="key 'sample_shared'"):
        SMatrix(
            ancestors=s.ancestors,
            weights=s.weights,
            int_weights=s.int_weights,
            s_by_shared=s.s_by_shared,
            sample_idx=s.sample_idx,
            sample_shared=s.sample_shared.astype(np.int32),
        )


def test_sample_is_drawn_from_the_pool_only():
    anc = np.zeros((50, 3), dtype=np.int32)
    anc[:, 1] = np.arange(50) % 2 + 1
    anc[:, 2] = np.arange(50) % 5 + 3
    pool = np.arange(10, 40)
    s = build_smatrix(anc, layer_weights(3), sample_size=20, seed=3, pool=pool)
    assert len(s.sample_idx) == 20 and set(s.sample_idx) <= set(pool.tolist())
    capped = build_smatrix(anc, layer_weights(3), sample_size=100, seed=3, pool=pool)
    np.testing.assert_array_equal(capped.sample_idx, pool)
    with pytest.raises(ValueError, match="outside"):
        build_smatrix(anc, layer_weights(3), sample_size=5, pool=np.array([0, 50]))
