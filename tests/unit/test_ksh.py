"""KSH and KSH+H's own behaviour: the kernel anchors, what separates KSH+H from KSH, the greedy
bit-wise optimisation, and their own bad settings. The common contract (codes, seeds, save/load,
pair labels, bad features) is test_hashers_contract.py's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shdh.core.level_weights import layer_weights
from shdh.hashers.ksh import (
    KSH,
    KSHH,
    Residual,
    learn_projections,
    refine,
    sign,
    smooth_sign,
    spectral_start,
)
from shdh.hashers.supervision import PairSimilarity
from tests.unit.toys import toy_tree_data, train_and_queries

SMALL = {"n_bits": 8, "n_anchors": 30, "n_labelled": 150, "n_iter": 100}


TRAIN_X, TRAIN_ANC, _, _ = train_and_queries()
LABEL_PAIRS = PairSimilarity(TRAIN_ANC, layer_weights(3), "label")


@pytest.fixture(scope="module")
def fitted() -> KSH:
    return KSH(seed=3, **SMALL).fit(TRAIN_X, LABEL_PAIRS)


# --- the kernel ------------------------------------------------------------------------------


def test_anchors_are_training_items_drawn_by_the_seed(fitted):
    X = TRAIN_X
    assert fitted.projections_.shape == (30, 8) and fitted.anchors_.shape == (30, 16)
    rows = {x.tobytes() for x in X.astype(np.float64)}
    assert all(anchor.tobytes() in rows for anchor in fitted.anchors_)
    other = KSH(seed=4, **SMALL).fit(X, LABEL_PAIRS)
    assert not np.array_equal(other.anchors_, fitted.anchors_)


# --- KSH+H differs from KSH exactly in the similarity it is given -------------------------------


def test_ksh_plus_h_equals_ksh_when_the_two_similarities_coincide():
    """K = 2 (root + leaves): Eq. 3 gives s = +1 for the same leaf and -1 otherwise, i.e. the
    +-1 label similarity, so the two classes must learn the very same hash functions."""
    X, anc3 = toy_tree_data(300, seed=1)
    anc2 = anc3[:, [0, 2]]
    weights = layer_weights(2)
    label, hier = (
        PairSimilarity(anc2, weights, "label"),
        PairSimilarity(anc2, weights, "hierarchical"),
    )
    rows = np.arange(300)
    np.testing.assert_array_equal(label.block(rows, rows), hier.block(rows, rows))
    plain = KSH(seed=5, **SMALL).fit(X, label)
    with_h = KSHH(seed=5, **SMALL).fit(X, hier)
    np.testing.assert_array_equal(plain.projections_, with_h.projections_)
    np.testing.assert_array_equal(plain.encode(X), with_h.encode(X))


def test_ksh_plus_h_differs_from_ksh_on_a_three_level_tree():
    X, anc = toy_tree_data(300, seed=1)
    weights = layer_weights(3)
    plain = KSH(seed=5, **SMALL).fit(X, PairSimilarity(anc, weights, "label"))
    with_h = KSHH(seed=5, **SMALL).fit(X, PairSimilarity(anc, weights, "hierarchical"))
    np.testing.assert_array_equal(plain.anchors_, with_h.anchors_)  # same sample, same kernel
    assert not np.array_equal(plain.encode(X), with_h.encode(X))


# --- the optimisation, against brute force -------------------------------------------------------


def _labels_s0(labels: np.ndarray) -> np.ndarray:
    return np.where(labels[:, None] == labels[None, :], 1.0, -1.0)


@pytest.mark.parametrize("grouped", [True, False])
def test_residual_matches_the_dense_matrix(grouped):
    rng = np.random.default_rng(0)
    if grouped:
        s0 = _labels_s0(rng.integers(0, 4, 50))
    else:  # no two rows alike: every item is its own group
        s0 = rng.standard_normal((50, 50))
        s0 = s0 + s0.T
    residual = Residual(s0, 6.0, n_bits=3)
    assert residual.n_groups == (len(np.unique(s0, axis=0)))
    bits = np.where(rng.random((2, 50)) < 0.5, 1.0, -1.0)
    for b in bits:
        residual.add_bit(b)
    dense = 6.0 * s0 - bits.T @ bits
    y = rng.standard_normal(50)
    np.testing.assert_allclose(residual.matvec(y), dense @ y, rtol=1e-12, atol=1e-9)
    assert residual.value(y) == pytest.approx(y @ dense @ y)


def test_residual_rejects_an_asymmetric_block():
    with pytest.raises(ValueError, match="symmetric"):
        Residual(np.arange(9.0).reshape(3, 3), 1.0, 1)


def test_smooth_sign_is_the_papers_phi():
    x = np.array([-800.0, -3.0, 0.0, 0.5, 800.0])
    expected = np.array([-1.0, 2 / (1 + np.exp(3.0)) - 1, 0.0, 2 / (1 + np.exp(-0.5)) - 1, 1.0])
    np.testing.assert_allclose(smooth_sign(x), expected, atol=1e-15)
    np.testing.assert_array_equal(sign(np.array([-1.0, 0.0, 2.0])), [-1.0, -1.0, 1.0])


def _kernel_problem(seed: int = 0, n: int = 80, m: int = 12):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    K = 2.0 * rng.standard_normal((3, m))[labels] + rng.standard_normal((n, m))
    return K - K.mean(axis=0), _labels_s0(labels), labels


def test_spectral_start_maximises_the_rayleigh_quotient():
    K, s0, _ = _kernel_problem()
    R = 4.0 * s0
    ktk, ktrk = K.T @ K, K.T @ R @ K
    a = spectral_start(ktrk, ktk, len(K))
    assert a @ ktk @ a == pytest.approx(len(K))  # the reference's scale a^T K^T K a = l
    # brute force: whiten with the Cholesky factor, then the plain symmetric eigenproblem
    chol = np.linalg.cholesky(ktk)
    inv = np.linalg.inv(chol)
    top = np.linalg.eigvalsh(inv @ ktrk @ inv.T)[-1]
    assert (a @ ktrk @ a) / (a @ ktk @ a) == pytest.approx(top, rel=1e-6)
    assert np.allclose(ktrk @ a, top * (ktk @ a), rtol=1e-5, atol=1e-6 * np.abs(ktrk).max())


def test_refine_lowers_the_smooth_cost_and_reports_it_truly():
    K, s0, _ = _kernel_problem()
    residual = Residual(s0, 4.0, n_bits=4)
    dense = 4.0 * s0
    a0 = spectral_start(K.T @ dense @ K, K.T @ K, len(K))
    a, costs = refine(K, residual, a0, n_iter=200, tol=0.0)
    phi0, phi = smooth_sign(K @ a0), smooth_sign(K @ a)
    assert costs[0] == pytest.approx(-phi0 @ dense @ phi0)
    assert costs[-1] == pytest.approx(-phi @ dense @ phi, rel=1e-5)  # z tracked in float32
    assert costs[-1] < costs[0]


def test_each_greedy_bit_is_at_least_as_good_as_its_spectral_start():
    """Replays the greedy loop: bit k's discrete gain y^T R_{k-1} y is never below the spectral
    start's, because the refined solution is kept only when it is better."""
    K, s0, labels = _kernel_problem(seed=2)
    n_bits = 4
    A = learn_projections(K, s0, n_bits, n_iter=50, tol=1e-2)
    R = n_bits * s0
    for k in range(n_bits):
        a_spec = spectral_start(K.T @ R @ K, K.T @ K, len(K))
        y_spec, y = sign(K @ a_spec), sign(K @ A[:, k])
        assert y @ R @ y >= y_spec @ R @ y_spec
        R = R - np.outer(y, y)
    # and the greedy codes fit L*S within 5% of the best codes constant per class (brute force
    # over all 16^3 choices of one 4-bit word per class)
    Y = sign(K @ A)
    words = np.array(list(itertools.product([-1.0, 1.0], repeat=n_bits)))
    best = min(
        np.linalg.norm(words[list(c)][labels] @ words[list(c)][labels].T - n_bits * s0)
        for c in itertools.product(range(len(words)), repeat=3)
    )
    assert np.linalg.norm(Y @ Y.T - n_bits * s0) <= 1.05 * best


# --- bad inputs ----------------------------------------------------------------------------------


def test_too_few_training_items_for_the_anchors():
    X, anc = TRAIN_X[:20], TRAIN_ANC[:20]
    with pytest.raises(ValueError, match=r"20 training items.*n_anchors=30"):
        KSH(**SMALL).fit(X, PairSimilarity(anc, layer_weights(3), "label"))


def test_too_few_labelled_samples_for_the_anchors():
    params = {**SMALL, "n_labelled": 25}
    with pytest.raises(ValueError, match=r"25 labelled samples.*n_anchors=30"):
        KSH(**params).fit(TRAIN_X, LABEL_PAIRS)


@pytest.mark.parametrize(
    ("field", "value"), [("n_anchors", 0), ("n_labelled", 1.5), ("n_iter", -1), ("tol", -0.1)]
)
def test_bad_hyper_parameters(field, value):
    with pytest.raises(ValueError, match=field):
        KSH(**{**SMALL, field: value}).fit(TRAIN_X, LABEL_PAIRS)
