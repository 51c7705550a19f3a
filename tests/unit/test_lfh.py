"""LFH's own behaviour: the codes it learns for the training items, the Newton-like row update
against brute force, and its own bad settings. The common contract (codes, seeds, save/load,
pair labels, bad features) is test_hashers_contract.py's."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from shdh.core.level_weights import layer_weights
from shdh.core.metrics import evaluate
from shdh.hashers.lfh import (
    LFH,
    _standardiser,
    log_likelihood,
    pca_start,
    stochastic_step,
    update_rows,
)
from shdh.hashers.supervision import PairSimilarity
from shdh.ranking.exact import pack_codes
from tests.unit.toys import train_and_queries

N_BITS = 8


@pytest.fixture(scope="module")
def data():
    return train_and_queries()  # database/training, queries


@pytest.fixture(scope="module")
def pairs(data):
    return PairSimilarity(data[1], layer_weights(3), "label")


@pytest.fixture(scope="module")
def fitted(data, pairs):
    return LFH(n_bits=N_BITS, seed=3).fit(data[0], pairs)


# --- the training codes ------------------------------------------------------------------------


def _acg(q_codes: np.ndarray, db_codes: np.ndarray, q_anc, db_anc) -> float:
    q, db, plain = pack_codes(q_codes), pack_codes(db_codes), ([q_codes.shape[1]], [1.0])
    result, _ = evaluate(q, db, q_anc, db_anc, *plain, n=50, wr_ns=(50,), curve_max=50)
    return result["acg@50"]


def test_training_codes_retrieve_better_than_random_codes(data, fitted):
    """The authors' database codes, sgn(U), as a database for the out-of-sample query codes."""
    X, anc, Xq, aq = data
    assert fitted.train_codes_.shape == (len(X), N_BITS)
    assert fitted.train_codes_.dtype == np.int8 and set(np.unique(fitted.train_codes_)) == {-1, 1}
    rng = np.random.default_rng(0)
    random_db = np.where(rng.random((len(X), N_BITS)) < 0.5, 1, -1)
    random_q = np.where(rng.random((len(Xq), N_BITS)) < 0.5, 1, -1)
    chance = _acg(random_q, random_db, aq, anc)
    assert _acg(fitted.encode(Xq), fitted.train_codes_, aq, anc) > chance + 0.5  # ACG@50 in [0, 2]


def test_training_codes_follow_the_labels(data, fitted):
    """s = same fine label, mapped from PairSimilarity's +-1 to LFH's {1, 0}: items of one leaf
    must end up with far closer codes than items of different leaves."""
    leaf = data[1][:, 2]
    inner = fitted.train_codes_.astype(float) @ fitted.train_codes_.T / N_BITS
    same = leaf[:, None] == leaf[None, :]
    assert inner[same].mean() > 0.8 and inner[same].mean() > inner[~same].mean() + 0.5


# --- the stochastic learning step, against brute force --------------------------------------------


def _problem(seed: int = 0, n: int = 60, n_bits: int = 4, n_cols: int = 7):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    U = 1.5 * rng.standard_normal((n, n_bits))
    cols = rng.choice(n, n_cols, replace=False)
    s_block = np.where(labels[:, None] == labels[cols][None, :], 1.0, -1.0)
    return U, cols, s_block


def _row_objective(u: np.ndarray, u_cols: np.ndarray, s01: np.ndarray, prior: float) -> float:
    """sum_{j in C} 2 (s_ij Theta_ij - log(1 + e^Theta_ij)) - ||u||^2 / (2 prior), by loops."""
    total = 0.0
    for u_j, s in zip(u_cols, s01, strict=True):
        theta = 0.5 * float(u @ u_j)
        total += 2.0 * (s * theta - np.log1p(np.exp(theta)))
    return total - float(u @ u) / (2.0 * prior)


def test_vectorised_update_equals_the_row_by_row_order():
    """Each row's step reads only the (fixed) sampled rows, so doing all rows at once is the
    strict row-by-row order of the paper. Row by row here, with the update written out."""
    U, cols, s_block = _problem()
    prior = 30.0 / U.shape[1]
    result = stochastic_step(U.copy(), cols, s_block, prior)
    expected = U.copy()
    u_cols = U[cols]
    hessian = -u_cols.T @ u_cols / 8.0 - np.eye(U.shape[1]) / prior
    for i in range(len(U)):  # in order; each update sees the rows updated before it
        if i in cols:
            continue
        s01 = (s_block[i] > 0).astype(float)
        grad = sum(
            (s - expit(0.5 * expected[i] @ expected[j])) * expected[j]
            for s, j in zip(s01, cols, strict=True)
        )
        grad = grad - expected[i] / prior
        expected[i] = expected[i] - np.linalg.solve(hessian, grad)
    np.testing.assert_allclose(result, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(result[cols], U[cols])  # sampled rows wait


def test_each_row_step_cannot_lower_its_objective():
    """H bounds the Hessian from below (sigmoid' <= 1/4), so the step maximises a minorant."""
    for seed in range(5):
        U, cols, s_block = _problem(seed=seed)
        prior = 30.0 / U.shape[1]
        s01 = s_block > 0
        new = update_rows(U, U[cols], s01, prior)
        for i in range(len(U)):
            before = _row_objective(U[i], U[cols], s01[i], prior)
            after = _row_objective(new[i], U[cols], s01[i], prior)
            assert after >= before - 1e-9


def test_log_likelihood_matches_brute_force():
    U, _, _ = _problem(n=9)
    rng = np.random.default_rng(1)
    s01 = rng.random((9, 9)) < 0.5
    s01 = s01 | s01.T
    expected = sum(
        s01[i, j] * 0.5 * (U[i] @ U[j]) - np.log1p(np.exp(0.5 * (U[i] @ U[j])))
        for i in range(9)
        for j in range(9)
        if i != j
    )
    assert log_likelihood(U, s01) == pytest.approx(expected)


def test_the_likelihood_rises_over_the_fit(data, pairs):
    """Replays fit's loop (same seed, so the same sampled columns: its codes must match the fit)
    and follows the full log-likelihood of S, which each stochastic step sees only in part.

    32 columns per iteration, so that each step sees every leaf of the toy tree: with the
    authors' n_sampled = n_bits = 8 here the likelihood swings from step to step (see
    docs/method.md); at 32-64 bits on real data the default is 32-64 columns."""
    X = data[0]
    n, n_sampled = len(X), 32
    model = LFH(n_bits=N_BITS, seed=3, n_sampled=n_sampled).fit(X, pairs)
    mean, scale = _standardiser(X)
    Xs = (X - mean) / scale
    U = pca_start(Xs, Xs.T @ Xs, N_BITS)
    s_full = pairs.block(np.arange(n), np.arange(n))
    rng = np.random.default_rng(model.seed)
    history = [log_likelihood(U, s_full > 0)]
    for _ in range(model.n_iter):
        cols = rng.choice(n, size=n_sampled, replace=False)
        U = stochastic_step(U, cols, s_full[:, cols], model.beta / N_BITS)
        history.append(log_likelihood(U, s_full > 0))
    np.testing.assert_array_equal(np.where(U > 0, 1, -1), model.train_codes_)
    history = np.asarray(history) / (n * (n - 1))  # mean per pair
    assert history[-1] > 0.1 * history[0]  # a tenth of the PCA start's misfit
    assert np.all(history[10:] > 0.3 * history[0])  # and it stays there
    assert np.ptp(history[-10:]) < 0.05 * abs(history[0])  # converged


def test_pca_start_uses_the_top_principal_directions():
    rng = np.random.default_rng(0)
    Xs = rng.standard_normal((200, 6)) * np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.5])
    Xs -= Xs.mean(axis=0)
    U = pca_start(Xs, Xs.T @ Xs, 3)
    variances = np.linalg.eigvalsh(Xs.T @ Xs)[::-1][:3]
    np.testing.assert_allclose((U * U).sum(axis=0), variances, rtol=1e-10)
    np.testing.assert_array_equal(pca_start(Xs, Xs.T @ Xs, 8), Xs[:, [0, 1, 2, 3, 4, 5, 0, 1]])


# --- bad inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("n_iter", -1), ("beta", 0.0), ("lam", -1.0), ("n_sampled", 0), ("n_sampled", 400)],
)
def test_bad_hyper_parameters(data, pairs, field, value):
    with pytest.raises(ValueError, match=field):
        LFH(n_bits=N_BITS, **{field: value}).fit(data[0], pairs)
