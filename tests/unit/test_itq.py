"""ITQ's own behaviour: each step against a brute-force or library solution, and agreement with
faiss's ITQ. The common contract (codes, seeds, save/load, bad input) is
test_hashers_contract.py's."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes

from shdh.core.metrics import evaluate
from shdh.hashers.itq import ITQ, itq_rotation, pca, random_rotation
from shdh.hashers.validation import check_features
from shdh.ranking.exact import pack_codes
from tests.unit.toys import toy_hierarchy


def acg100(codes: np.ndarray, anc: np.ndarray, n_queries: int = 200) -> float:
    """ACG@100 of the first n_queries items against the rest, plain Hamming ranking."""
    q, db = slice(0, n_queries), slice(n_queries, None)
    L = codes.shape[1]
    result, _ = evaluate(pack_codes(codes[q]), pack_codes(codes[db]), anc[q], anc[db], [L], [1.0])
    return result["acg@100"]


TOY_X, TOY_ANC = toy_hierarchy()  # K = 4: root, 4 x 3 x 3 leaves, 64-D


@pytest.fixture(scope="module")
def fitted() -> ITQ:
    return ITQ(n_bits=16, seed=3).fit(TOY_X)


def test_defaults_are_the_original_codes() -> None:
    assert ITQ(n_bits=8).get_params() == {"n_bits": 8, "seed": 0, "n_iter": 50}


# --- the algorithm against brute force --------------------------------------------------------


def test_pca_matches_svd_of_centred_data() -> None:
    X = TOY_X.astype(np.float64)
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


def test_rotation_step_solves_orthogonal_procrustes() -> None:
    X = TOY_X.astype(np.float64)
    V = (X - X.mean(axis=0))[:, :6]
    R0 = random_rotation(6, np.random.default_rng(5))
    R1, _ = itq_rotation(V, 1, np.random.default_rng(5))
    expected, _ = orthogonal_procrustes(V, np.where(V @ R0 > 0, 1.0, -1.0))
    np.testing.assert_allclose(R1, expected, atol=1e-5)  # V^T B is formed in float32
    np.testing.assert_allclose(R1.T @ R1, np.eye(6), atol=1e-12)


def test_quantization_loss_never_increases(fitted) -> None:
    losses = fitted.quantization_loss_
    assert losses.shape == (51,)
    assert np.all(np.diff(losses) <= 1e-6 * losses[0])  # float32 products
    assert losses[-1] < losses[0]


def test_codes_are_signs_of_rotated_pca(fitted) -> None:
    X = TOY_X.astype(np.float64)
    R = pca(X)[2][:, :16].T @ fitted.projection_  # W^T (W R) = R
    np.testing.assert_allclose(R @ R.T, np.eye(16), atol=1e-8)
    expected = np.where((X - X.mean(axis=0)) @ fitted.projection_ > 0, 1, -1)
    np.testing.assert_array_equal(fitted.encode(X), expected)


def test_agrees_with_faiss_itq_on_acg() -> None:
    """The issue's check: our ITQ and faiss's ITQ (PCA to L, then ITQ, then sign) on the same
    features and bits give ACG@100 within 5% of each other.

    faiss L2-normalises the centred vectors, and its rotation update is R = V^T U^T where the
    orthogonal Procrustes solution (ours, checked above against scipy) is V U^T for
    B^T X = U S V^T; so its codes differ and, at few bits on toy data, land up to ~10% lower.
    At 32 bits on this toy set both settle; on 1,000 real Fashion-MNIST queries (raw pixels)
    the two agree within 4% at 16, 32 and 64 bits."""
    import faiss  # a test-only dependency (faiss-cpu)

    X, anc = TOY_X, TOY_ANC
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


def test_more_bits_than_dimensions_is_refused() -> None:
    with pytest.raises(ValueError, match="n_bits=9 exceeds the feature dimension d=8"):
        ITQ(n_bits=9).fit(np.random.default_rng(0).standard_normal((50, 8)))


def test_a_pca_needs_two_items() -> None:
    with pytest.raises(ValueError, match="itq: fitting needs at least 2 items, got 1"):
        ITQ(n_bits=2).fit(np.ones((1, 4)))


def test_a_negative_iteration_count_is_refused() -> None:
    with pytest.raises(ValueError, match="itq: n_iter must be an integer >= 0, got -1"):
        ITQ(n_bits=4, n_iter=-1).fit(np.random.default_rng(0).standard_normal((20, 8)))


def test_check_features_keeps_integer_pixels() -> None:
    pixels = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert check_features(pixels, "itq") is pixels
