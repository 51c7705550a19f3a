"""ITQ: the contract, each step against a brute-force or library solution, retrieval on a toy
hierarchy, and agreement with faiss's ITQ."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes

from shdh.hashers import get_hasher_class
from shdh.hashers.itq import ITQ, itq_rotation, pca, random_rotation
from shdh.hashers.validation import check_features
from shdh.metrics import evaluate
from shdh.retrieval import pack_codes


def toy_hierarchy(
    branch: tuple[int, int, int] = (4, 3, 3), n_per_leaf: int = 40, d: int = 64, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian clusters, one per leaf of a three-level tree (K = 4 with the root): a leaf's
    centre adds a coarse, a middle and a leaf offset of shrinking size, so leaves that share
    ancestors lie close. Returns (features float32, ancestor rows (N, 4)) in shuffled order."""
    rng = np.random.default_rng(seed)
    a, b, c = branch
    leaves = np.arange(a * b * c)
    offsets = [
        rng.standard_normal((m, d)) * s for m, s in ((a, 3.0), (a * b, 2.0), (a * b * c, 1.0))
    ]
    centres = offsets[0][leaves // (b * c)] + offsets[1][leaves // c] + offsets[2]
    label = np.repeat(leaves, n_per_leaf)
    X = centres[label] + rng.standard_normal((len(label), d))
    anc = np.stack(
        [np.zeros_like(label), 1 + label // (b * c), 1 + a + label // c, 1 + a + a * b + label],
        axis=1,
    )
    order = rng.permutation(len(label))
    return X[order].astype(np.float32), anc[order]


def acg100(codes: np.ndarray, anc: np.ndarray, n_queries: int = 200) -> float:
    """ACG@100 of the first n_queries items against the rest, plain Hamming ranking."""
    q, db = slice(0, n_queries), slice(n_queries, None)
    L = codes.shape[1]
    result, _ = evaluate(pack_codes(codes[q]), pack_codes(codes[db]), anc[q], anc[db], [L], [1.0])
    return result["acg@100"]


@pytest.fixture(scope="module")
def toy() -> tuple[np.ndarray, np.ndarray]:
    return toy_hierarchy()


@pytest.fixture(scope="module")
def fitted(toy) -> ITQ:
    return ITQ(n_bits=16, seed=3).fit(toy[0])


# --- the contract -------------------------------------------------------------------------------


def test_registry_and_params() -> None:
    assert get_hasher_class("itq") is ITQ
    h = ITQ(n_bits=8, seed=1)
    assert h.get_params() == {"n_bits": 8, "seed": 1, "n_iter": 50}
    assert h.supervision is None and not h.is_fitted()


def test_codes_shape_and_values(toy, fitted) -> None:
    codes = fitted.encode(toy[0][:50])
    assert codes.shape == (50, 16) and codes.dtype == np.int8
    assert set(np.unique(codes)) == {-1, 1}
    assert fitted.segment_sizes() == [16] and fitted.segment_weights() == [1.0]


def test_deterministic_under_seed(toy, fitted) -> None:
    again = ITQ(n_bits=16, seed=3).fit(toy[0])
    np.testing.assert_array_equal(again.encode(toy[0]), fitted.encode(toy[0]))
    other = ITQ(n_bits=16, seed=4).fit(toy[0])
    assert not np.allclose(other.projection_, fitted.projection_)  # the random start matters


def test_load_refuses_other_method_and_mismatched_bits(tmp_path, fitted) -> None:
    from shdh.hashers.kmh import KMH

    fitted.save(tmp_path / "m")
    with pytest.raises(ValueError, match="holds method 'itq'"):
        KMH.load(tmp_path / "m")
    meta_path = tmp_path / "m" / "params.json"
    meta = json.loads(meta_path.read_text())
    meta["params"]["n_bits"] = 32
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="n_bits=32"):
        ITQ.load(tmp_path / "m")


def test_load_refuses_incomplete_state(tmp_path, fitted) -> None:
    fitted.save(tmp_path / "m")
    state = dict(np.load(tmp_path / "m" / "state.npz"))
    del state["projection_"]
    np.savez(tmp_path / "m" / "state.npz", **state)
    with pytest.raises(ValueError, match=r"saved state lacks the arrays \['projection_'\]"):
        ITQ.load(tmp_path / "m")


def test_beats_random_codes_on_toy_hierarchy(toy, fitted) -> None:
    X, anc = toy
    ours = acg100(fitted.encode(X), anc)
    rng = np.random.default_rng(0)
    random = acg100(np.where(rng.random((len(X), 16)) < 0.5, 1, -1).astype(np.int8), anc)
    assert ours > random + 1.5, (ours, random)  # random codes share about 0.4 levels


# --- the algorithm against brute force --------------------------------------------------------


def test_pca_matches_svd_of_centred_data(toy) -> None:
    X = toy[0].astype(np.float64)
    mean, values, vectors = pca(X)
    np.testing.assert_allclose(mean, X.mean(axis=0))
    _, s, vt = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(values, s**2 / (len(X) - 1), rtol=1e-8, atol=1e-10)
    top = vectors[:, :8]
    np.testing.assert_allclose(top @ top.T, vt[:8].T @ vt[:8], atol=1e-8)  # same subspace
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(X.shape[1]), atol=1e-10)


def test_random_rotation_is_orthogonal() -> None:
    R = random_rotation(7, np.random.default_rng(0))
    np.testing.assert_allclose(R.T @ R, np.eye(7), atol=1e-12)


def test_rotation_step_solves_orthogonal_procrustes(toy) -> None:
    X = toy[0].astype(np.float64)
    V = (X - X.mean(axis=0))[:, :6]
    R0 = random_rotation(6, np.random.default_rng(5))
    R1, _ = itq_rotation(V, 1, np.random.default_rng(5))
    expected, _ = orthogonal_procrustes(V, np.where(V @ R0 > 0, 1.0, -1.0))
    np.testing.assert_allclose(R1, expected, atol=1e-5)  # V^T B is formed in float32
    np.testing.assert_allclose(R1.T @ R1, np.eye(6), atol=1e-12)


def test_quantization_loss_never_increases(toy, fitted) -> None:
    losses = fitted.quantization_loss_
    assert losses.shape == (51,)
    assert np.all(np.diff(losses) <= 1e-6 * losses[0])  # float32 products
    assert losses[-1] < losses[0]


def test_codes_are_signs_of_rotated_pca(toy, fitted) -> None:
    X = toy[0].astype(np.float64)
    R = pca(X)[2][:, :16].T @ fitted.projection_  # W^T (W R) = R
    np.testing.assert_allclose(R @ R.T, np.eye(16), atol=1e-8)
    expected = np.where((X - X.mean(axis=0)) @ fitted.projection_ > 0, 1, -1)
    np.testing.assert_array_equal(fitted.encode(X), expected)


def test_agrees_with_faiss_itq_on_acg(toy) -> None:
    """The issue's check: our ITQ and faiss's ITQ (PCA to L, then ITQ, then sign) on the same
    features and bits give ACG@100 within 5% of each other.

    faiss L2-normalises the centred vectors, and its rotation update is R = V^T U^T where the
    orthogonal Procrustes solution (ours, checked above against scipy) is V U^T for
    B^T X = U S V^T; so its codes differ and, at few bits on toy data, land up to ~10% lower.
    At 32 bits on this toy set both settle; on 1,000 real Fashion-MNIST queries (raw pixels)
    the two agree within 4% at 16, 32 and 64 bits."""
    import faiss  # a test-only dependency (faiss-cpu)

    X, anc = toy
    L = 32
    ours = acg100(ITQ(n_bits=L, seed=0).fit(X).encode(X), anc)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # OpenMP threads only slow a problem this small down
    try:
        itq = faiss.ITQTransform(X.shape[1], L, True)
        itq.train(np.ascontiguousarray(X))
        projected = itq.apply(X)
    finally:
        faiss.omp_set_num_threads(threads)
    theirs = acg100(np.where(projected > 0, 1, -1).astype(np.int8), anc)
    assert abs(ours - theirs) <= 0.05 * theirs, (ours, theirs)


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "kind"), [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_non_finite_features_are_refused(toy, fitted, value, kind) -> None:
    X = toy[0][:40].copy()
    X[7, 3] = value
    with pytest.raises(
        ValueError, match=rf"itq: features X contain {kind} \(first at row 7, column 3"
    ):
        ITQ(n_bits=4).fit(X)
    with pytest.raises(ValueError, match=kind):
        fitted.encode(X)


def test_more_bits_than_dimensions_is_refused() -> None:
    with pytest.raises(ValueError, match="n_bits=9 exceeds the feature dimension d=8"):
        ITQ(n_bits=9).fit(np.random.default_rng(0).standard_normal((50, 8)))


@pytest.mark.parametrize(
    ("X", "message"),
    [
        (np.zeros(10), "2-D"),
        (np.zeros((0, 4)), "non-empty"),
        (np.array([["a", "b"]]), "real numbers"),
        (np.ones((1, 4)), "at least 2 items"),
    ],
)
def test_malformed_features_are_refused(X, message) -> None:
    with pytest.raises(ValueError, match=message):
        ITQ(n_bits=2).fit(X)


def test_wrong_dimension_at_encode_is_refused(fitted) -> None:
    with pytest.raises(ValueError, match="have 63 dimensions, the model was fitted on 64"):
        fitted.encode(np.zeros((3, 63)))


@pytest.mark.parametrize(
    ("params", "message"),
    [({"n_bits": 0}, "n_bits must be >= 1"), ({"n_bits": 4, "n_iter": -1}, "n_iter")],
)
def test_bad_parameters_are_refused(params, message) -> None:
    with pytest.raises(ValueError, match=message):
        ITQ(**params).fit(np.random.default_rng(0).standard_normal((20, 8)))


def test_check_features_keeps_integer_pixels() -> None:
    pixels = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert check_features(pixels, "itq") is pixels
