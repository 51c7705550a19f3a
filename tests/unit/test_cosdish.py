"""COSDISH and COSDISH+H's own behaviour: what separates the two, the code-learning solver step by
step against brute force, the out-of-sample regression, and their own bad settings and saved
state. The common contract (codes, seeds, save/load, pair labels, bad features) is
test_hashers_contract.py's."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from shdh.core.level_weights import layer_weights
from shdh.hashers.cosdish import (
    COSDISH,
    COSDISHH,
    balance_block,
    bit_bqp,
    bqp_objective,
    fit_ridge,
    flip_descent,
    learn_codes,
    sampled_objective,
    solve_bqp,
    update_sampled,
    update_unsampled,
)
from shdh.hashers.supervision import PairSimilarity

GROUPS, PER_GROUP, DIM = 3, 2, 16


def toy(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian clusters per leaf of a K=3 tree (root; 3 groups; 2 leaves each): leaves of one
    group sit closer to each other than to other groups. Returns (X float32, ancestors)."""
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, GROUPS * PER_GROUP, n)
    group = leaf // PER_GROUP
    centres = np.random.default_rng(100)
    group_c = centres.normal(size=(GROUPS, DIM)) * 3.0
    leaf_c = centres.normal(size=(GROUPS * PER_GROUP, DIM)) * 1.5
    X = group_c[group] + leaf_c[leaf] + rng.normal(size=(n, DIM)) * 0.6
    anc = np.stack([np.zeros(n, dtype=int), 1 + group, 1 + GROUPS + leaf], axis=1)
    return X.astype(np.float32), anc.astype(np.int32)


def pairs_for(cls: type[COSDISH], anc: np.ndarray) -> PairSimilarity:
    return PairSimilarity(anc, layer_weights(anc.shape[1]), cls.supervision)


@pytest.fixture(scope="module")
def train() -> tuple[np.ndarray, np.ndarray]:
    return toy(300, 0)


def test_defaults_are_the_papers():
    assert COSDISH(n_bits=12, seed=3).get_params() == {
        "n_bits": 12,
        "seed": 3,
        "n_outer": 10,  # T_sto
        "n_alternations": 3,  # T_alt
        "n_sampled": None,  # |Omega| = n_bits
        "ridge": 1.0,
        "balance": True,
    }


# --- COSDISH+H is COSDISH with other pair labels --------------------------------------------


def test_plus_h_differs_only_in_class_attributes():
    own = set(vars(COSDISHH)) - {"__module__", "__doc__", "__qualname__", "__firstlineno__"}
    own -= {"__static_attributes__"}
    assert own == {"supervision"}
    # The names come from the catalogue entries, one per class.
    assert (COSDISH.name, COSDISHH.name) == ("cosdish", "cosdish+h")


def test_plus_h_equals_plain_when_the_two_similarities_coincide():
    """K=2 (root + leaves): Eq. 3 gives +1 same leaf, -1 otherwise, exactly the label mode."""
    X, anc3 = toy(300, 2)
    anc2 = anc3[:, [0, 2]]
    plain, hier = pairs_for(COSDISH, anc2), pairs_for(COSDISHH, anc2)
    rows = np.arange(len(X))
    np.testing.assert_array_equal(plain.block(rows, rows), hier.block(rows, rows))
    a = COSDISH(n_bits=8, seed=5).fit(X, plain).encode(X)
    b = COSDISHH(n_bits=8, seed=5).fit(X, hier).encode(X)
    np.testing.assert_array_equal(a, b)


def test_plus_h_differs_from_plain_on_a_deeper_tree():
    X, anc = toy(300, 2)
    a = COSDISH(n_bits=8, seed=5).fit(X, pairs_for(COSDISH, anc)).encode(X)
    b = COSDISHH(n_bits=8, seed=5).fit(X, pairs_for(COSDISHH, anc)).encode(X)
    assert not np.array_equal(a, b)


# --- code learning, step by step ------------------------------------------------------------


def random_problem(seed: int, n_g: int = 9, m: int = 5, q: int = 3):
    """Real-valued S blocks (as COSDISH+H gets them) and random codes."""
    rng = np.random.default_rng(seed)
    s_go = rng.choice([-1.0, 1 / 3, 1.0], size=(n_g, m))
    s_oo = rng.choice([-1.0, 1 / 3, 1.0], size=(m, m))
    s_oo = np.triu(s_oo, 1) + np.triu(s_oo, 1).T + np.eye(m)
    b_o = rng.choice([-1.0, 1.0], size=(m, q))
    b_g = rng.choice([-1.0, 1.0], size=(n_g, q))
    return s_go, s_oo, b_o, b_g


@pytest.mark.parametrize("seed", range(3))
def test_bit_bqp_matches_the_sampled_objective_for_every_bit_value(seed):
    """F(B_O with column k = b) - (b^T Q b + p^T b) is the same constant for all 2^m b."""
    s_go, s_oo, b_o, b_g = random_problem(seed)
    q = b_o.shape[1]
    for k in range(q):
        Q, p = bit_bqp(k, b_o, b_o @ b_o.T, q * s_oo, q * s_go.T @ b_g, b_g.T @ b_g)
        assert np.allclose(Q, Q.T) and np.all(np.diag(Q) == 0)
        gaps = []
        for bits in itertools.product([-1.0, 1.0], repeat=b_o.shape[0]):
            b = np.array(bits)
            trial = b_o.copy()
            trial[:, k] = b
            gaps.append(sampled_objective(trial, b_g, s_go, s_oo, q) - bqp_objective(Q, p, b))
        assert np.ptp(gaps) < 1e-9


def all_signs(n: int) -> np.ndarray:
    return np.array(list(itertools.product([-1.0, 1.0], repeat=n)))


def brute_force(Q: np.ndarray, p: np.ndarray) -> np.ndarray:
    bs = all_signs(len(p))
    return np.einsum("bi,ij,bj->b", bs, Q, bs) + bs @ p


def random_bqp(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    A = rng.normal(size=(n, n))
    Q = (A + A.T) / 2
    np.fill_diagonal(Q, 0.0)
    return Q, rng.normal(size=n) * rng.choice([0.0, 1.0, 5.0])


def test_solve_bqp_never_worse_than_its_start():
    rng = np.random.default_rng(0)
    for _ in range(50):
        Q, p = random_bqp(rng, 10)
        values = brute_force(Q, p)
        starts = [rng.choice([-1.0, 1.0], 10), all_signs(10)[np.argmin(values)]]
        for start in starts:
            b = solve_bqp(Q, p, start.copy())
            assert set(np.unique(b)) <= {-1.0, 1.0}
            assert bqp_objective(Q, p, b) <= bqp_objective(Q, p, start) + 1e-9
        # started at the optimum, it stays there
        assert bqp_objective(Q, p, b) == pytest.approx(values.min())


def test_solve_bqp_finds_a_planted_optimum_that_random_signs_miss():
    """Q = -b* b*^T + noise, p pulling towards b*: the optimum is b* (checked by brute force)."""
    rng = np.random.default_rng(1)
    n = 12
    planted = rng.choice([-1.0, 1.0], n)
    Q = -np.outer(planted, planted) + 0.3 * rng.normal(size=(n, n))
    Q = (Q + Q.T) / 2
    np.fill_diagonal(Q, 0.0)
    p = -0.5 * planted
    values = brute_force(Q, p)
    assert np.array_equal(all_signs(n)[np.argmin(values)], planted)
    start = -planted.copy()
    start[:3] *= -1  # a poor start: 9 of 12 signs wrong
    b = solve_bqp(Q, p, start)
    np.testing.assert_array_equal(b, planted)
    random_values = [bqp_objective(Q, p, rng.choice([-1.0, 1.0], n)) for _ in range(200)]
    assert bqp_objective(Q, p, b) < min(random_values)


def test_flip_descent_ends_in_a_single_flip_local_minimum():
    rng = np.random.default_rng(2)
    for _ in range(20):
        Q, p = random_bqp(rng, 9)
        start = rng.choice([-1.0, 1.0], 9)
        b = flip_descent(Q, p, start.copy())
        f = bqp_objective(Q, p, b)
        assert f <= bqp_objective(Q, p, start)
        for i in range(9):
            flipped = b.copy()
            flipped[i] *= -1
            assert bqp_objective(Q, p, flipped) >= f - 1e-9


def test_update_sampled_never_increases_the_sampled_objective():
    for seed in range(5):
        s_go, s_oo, b_o, b_g = random_problem(seed, n_g=30, m=8, q=6)
        before = sampled_objective(b_o, b_g, s_go, s_oo, 6)
        new = update_sampled(b_o, b_g, s_go, s_oo, 6)
        assert sampled_objective(new, b_g, s_go, s_oo, 6) <= before + 1e-9


def test_update_unsampled_is_the_sign_of_s_times_b_and_keeps_ties():
    s_go = np.array([[1.0, 1.0, -1.0], [1.0, -1.0, 0.0], [-1.0, -1.0, -1.0], [1 / 3, 1 / 3, 1 / 3]])
    b_o = np.array([[1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    old = np.array([[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]])
    # S B_O = [[1, -1], [0, 2], [-3, -1], [1, 1/3]]: the 0 keeps the old bit (+1)
    expected = np.array([[1.0, -1.0], [1.0, 1.0], [-1.0, -1.0], [1.0, 1.0]])
    np.testing.assert_array_equal(update_unsampled(s_go, b_o, old), expected)
    # float32 rounding of 1/3 (3 x 1/3 - 1 is not exactly 0) still counts as a tie
    s32 = np.array([[1 / 3, 1 / 3, 1 / 3, -1.0]], dtype=np.float32).astype(np.float64)
    tie = update_unsampled(s32, np.ones((4, 1)), np.array([[-1.0]]))
    np.testing.assert_array_equal(tie, [[-1.0]])


def test_balance_block_weighs_both_signs_equally():
    s_go = np.array([[1.0, -1.0], [-1.0, -1.0]])
    s_oo = np.array([[1.0, -1.0], [-1.0, 1.0]])
    # positive mass 3, negative mass 5: negatives become -3/5
    g, o = balance_block(s_go, s_oo)
    np.testing.assert_allclose(g, [[1.0, -0.6], [-0.6, -0.6]])
    np.testing.assert_allclose(o, [[1.0, -0.6], [-0.6, 1.0]])
    assert g[g > 0].sum() + o[o > 0].sum() == pytest.approx(-(g[g < 0].sum() + o[o < 0].sum()))
    only_negative = -np.ones((2, 2))
    g, o = balance_block(only_negative, only_negative)
    np.testing.assert_array_equal(g, only_negative)


class RecordingPairs(PairSimilarity):
    """PairSimilarity that remembers the shape of every block it was asked for."""

    def block(self, rows, cols):
        self.shapes.append((len(rows), len(cols)))
        return super().block(rows, cols)


def test_learn_codes_only_reads_sampled_columns():
    X, anc = toy(200, 3)
    pairs = RecordingPairs(anc, layer_weights(3), "label")
    object.__setattr__(pairs, "shapes", [])
    codes = learn_codes(
        pairs, n_bits=6, n_sampled=7, n_outer=4, n_alternations=2, rng=np.random.default_rng(0)
    )
    assert codes.shape == (200, 6) and codes.dtype == np.int8
    assert pairs.shapes == [(193, 7), (7, 7)] * 4


# --- out-of-sample regression ---------------------------------------------------------------


def test_fit_ridge_matches_the_normal_equations_and_streams_chunks():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(37, 5)) * [1.0, 3.0, 0.1, 2.0, 1.0] + [5.0, 0.0, -2.0, 1.0, 0.0]
    X[:, 4] = 7.0  # a constant dimension must not blow up
    B = np.where(rng.random((37, 3)) < 0.4, -1, 1).astype(np.int8)
    mean, scale, W, c = fit_ridge(X.astype(np.float32), B, ridge=2.0, chunk=8)
    assert np.all(np.isfinite(W)) and np.allclose(W[4], 0.0)
    # brute force: [Z 1] [W; c] = B with the ridge penalty on W only
    Z = (X[:, :4] - X[:, :4].mean(0)) / X[:, :4].std(0)
    A = np.hstack([Z, np.ones((37, 1))])
    penalty = np.diag([2.0] * 4 + [0.0])
    solution = np.linalg.solve(A.T @ A + penalty, A.T @ B)
    np.testing.assert_allclose(W[:4], solution[:4], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, solution[4], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean[:4], X[:, :4].mean(0), rtol=1e-5)


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, message",
    [
        ({"n_outer": 0}, "n_outer must be an integer >= 1"),
        ({"n_alternations": 1.5}, "n_alternations must be an integer >= 1"),
        ({"n_sampled": 0}, "n_sampled must be an integer >= 1"),
        ({"n_sampled": 301}, "n_sampled=301 columns cannot be sampled from 300 items"),
        ({"ridge": 0.0}, "ridge must be a finite number > 0"),
        ({"ridge": float("nan")}, "ridge must be a finite number > 0"),
        ({"balance": "yes"}, "balance must be True or False"),
    ],
)
def test_bad_hyper_parameters_are_refused(params, message, train):
    X, anc = train
    with pytest.raises(ValueError, match=message):
        COSDISH(**{"n_bits": 8, **params}).fit(X, pairs_for(COSDISH, anc))


def test_a_saved_state_names_the_array_that_does_not_fit(train, tmp_path):
    X, anc = train
    COSDISH(n_bits=12, n_outer=2).fit(X, pairs_for(COSDISH, anc)).save(tmp_path / "m")
    params = tmp_path / "m" / "params.json"
    meta = json.loads(params.read_text())
    meta["params"]["n_bits"] = 32
    params.write_text(json.dumps(meta))
    with pytest.raises(
        ValueError, match="'weights_' has shape \\(16, 12\\), expected \\(16, 32\\)"
    ):
        COSDISH.load(tmp_path / "m")
