"""KMH's own behaviour: its subspace rule, each step against brute force or hand-computed cases,
and the affinity preservation it is named for. The common contract (codes, determinism,
save/load, bad input) is test_hashers_contract.py's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shdh.hashers.kmh import (
    KMH,
    assign,
    balanced_partition,
    cell_stats,
    index_codes,
    objective,
    update_codewords,
)
from tests.unit.toys import toy_hierarchy

TOY_X, _ = toy_hierarchy()  # 64-D clusters on a K = 4 tree


@pytest.fixture(scope="module")
def fitted() -> KMH:
    return KMH(n_bits=16, seed=0).fit(TOY_X)


def problem(seed: int = 0, M: int = 2, n: int = 300, ds: int = 5, b: int = 3):
    """A small subspace problem: data Z (M, n, ds), codewords near a scaled cube, d_h."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((M, n, ds)) * np.linspace(2.0, 0.5, ds)
    codes = index_codes(b).astype(np.float64)
    scale = np.full(M, 1.2)
    C = np.zeros((M, 2**b, ds))
    C[:, :, :b] = scale[:, None, None] * codes
    C += 0.3 * rng.standard_normal(C.shape)
    d_h = scale[:, None, None] * np.linalg.norm(codes[:, None] - codes[None, :], axis=2)
    return Z, C, d_h


def assign_with_stats(Z, C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cells = assign(Z, C)
    return (cells, *cell_stats(Z, cells, C.shape[1]))


def brute_objective(Z, cells, C, d_h, lam) -> np.ndarray:
    out = []
    for m in range(Z.shape[0]):
        n, k = Z.shape[1], C.shape[1]
        quan = sum(float(np.sum((Z[m, i] - C[m, cells[m, i]]) ** 2)) for i in range(n)) / n
        p = np.bincount(cells[m], minlength=k) / n
        aff = sum(
            p[i] * p[j] * (np.linalg.norm(C[m, i] - C[m, j]) - d_h[m, i, j]) ** 2
            for i in range(k)
            for j in range(k)
        )
        out.append(quan + lam * aff)
    return np.array(out)


def stats_objective(Z, cells, C, d_h, lam) -> np.ndarray:
    _, counts, sums = assign_with_stats(Z, C)  # the cells are C's nearest ones
    assert np.array_equal(assign(Z, C), cells)
    return objective(counts, sums, (Z**2).sum(axis=(1, 2)), C, d_h, lam)


# --- the subspace rule ---------------------------------------------------------------------------


def test_defaults_and_the_bit_lengths_it_supports() -> None:
    assert KMH(n_bits=32, seed=2).get_params() == {
        "n_bits": 32,
        "seed": 2,
        "bits_per_subspace": 4,
        "lam": 10.0,
        "n_iter": 50,
    }
    assert KMH.supports(32) and KMH.supports(48) and KMH.supports(64)
    assert not KMH.supports(30) and not KMH.supports(0) and not KMH.supports(32, 0)
    assert KMH.supports(30, bits_per_subspace=2) and not KMH.supports(64, bits_per_subspace=9)


def test_bit_length_that_does_not_split_is_refused(fitted, tmp_path) -> None:
    with pytest.raises(ValueError, match="KMH cannot split 30 bits into 4-bit subspaces"):
        KMH(n_bits=30).fit(TOY_X)
    fitted.save(tmp_path / "m")  # nor loaded, from parameters edited to such a length
    meta_path = tmp_path / "m" / "params.json"
    meta = json.loads(meta_path.read_text())
    meta["params"]["n_bits"] = 30
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="cannot split 30 bits"):
        KMH.load(tmp_path / "m")


# --- the algorithm against brute force and hand-computed cases --------------------------------


def test_index_codes_hand_computed() -> None:
    np.testing.assert_array_equal(index_codes(2), [[-1, -1], [-1, 1], [1, -1], [1, 1]])
    codes = index_codes(4)
    hamming = (codes[:, None, :] != codes[None, :, :]).sum(axis=2)
    xor = np.arange(16)[:, None] ^ np.arange(16)[None, :]
    np.testing.assert_array_equal(hamming, np.vectorize(lambda v: bin(v).count("1"))(xor))


def test_balanced_partition_hand_computed() -> None:
    # log-scores (shifted) 3.08, 2.39, 1.69, 1: 0 -> s0, 1 -> s1, 2 -> s1 (full), 3 -> s0;
    # eigenvalue products 8 * 1 = 4 * 2.
    np.testing.assert_array_equal(balanced_partition(np.array([8.0, 4, 2, 1]), 2), [[0, 3], [1, 2]])
    parts = balanced_partition(np.geomspace(100, 1, 12), 3)
    assert parts.shape == (3, 4) and sorted(parts.ravel()) == list(range(12))
    assert np.all(np.diff(parts, axis=1) > 0)  # each subspace sorted by descending eigenvalue


def test_assignment_and_stats_match_brute_force() -> None:
    Z, C, _ = problem()
    cells, counts, sums = assign_with_stats(Z, C)
    dist = ((Z[:, :, None, :] - C[:, None, :, :]) ** 2).sum(axis=3)
    np.testing.assert_array_equal(cells, dist.argmin(axis=2))
    for m in range(Z.shape[0]):
        for j in range(C.shape[1]):
            mine = cells[m] == j
            assert counts[m, j] == mine.sum()
            np.testing.assert_allclose(sums[m, j], Z[m, mine].sum(axis=0), atol=1e-12)


def test_incremental_stats_match_full_stats() -> None:
    Z, C, _ = problem()
    old = assign(Z, C)
    new = assign(Z, C + 0.4 * np.random.default_rng(3).standard_normal(C.shape))
    assert 0 < (new != old).mean() < 1
    counts, sums = cell_stats(Z, new, C.shape[1], previous=(old, cell_stats(Z, old, 8)[1]))
    full_counts, full_sums = cell_stats(Z, new, C.shape[1])
    np.testing.assert_array_equal(counts, full_counts)
    np.testing.assert_allclose(sums, full_sums, atol=1e-12)


def test_objective_matches_brute_force() -> None:
    Z, C, d_h = problem()
    cells = assign(Z, C)
    for lam in (0.0, 10.0):
        np.testing.assert_allclose(
            stats_objective(Z, cells, C, d_h, lam), brute_objective(Z, cells, C, d_h, lam)
        )


def test_codeword_step_lowers_the_objective_at_every_mm_step() -> None:
    """The simplified codeword step (majorise-minimise instead of fminunc) still does its job:
    with the cells fixed, each single MM step lowers E."""
    Z, C, d_h = problem(seed=1)
    _, counts, sums = assign_with_stats(Z, C)
    sq = (Z**2).sum(axis=(1, 2))
    values = [objective(counts, sums, sq, C, d_h, 10.0)]
    for _ in range(8):
        C = update_codewords(C, counts, sums, d_h, 10.0, steps=1)
        values.append(objective(counts, sums, sq, C, d_h, 10.0))
    values = np.array(values)
    assert np.all(np.diff(values, axis=0) <= 1e-12)
    assert np.all(values[-1] < values[0] * 0.99)


def test_codeword_step_reaches_the_per_codeword_minimum() -> None:
    """With enough MM steps, the last codeword updated sits at a stationary point of E with
    the others fixed: the numerical gradient vanishes (what fminunc would return)."""
    Z, C, d_h = problem(seed=2)
    _, counts, sums = assign_with_stats(Z, C)
    sq = (Z**2).sum(axis=(1, 2))
    C = update_codewords(C, counts, sums, d_h, 10.0, steps=300)
    k, eps = C.shape[1], 1e-6
    for m in range(C.shape[0]):
        grad = np.empty(C.shape[2])
        for t in range(C.shape[2]):
            up, down = C.copy(), C.copy()
            up[m, k - 1, t] += eps
            down[m, k - 1, t] -= eps
            grad[t] = (
                objective(counts, sums, sq, up, d_h, 10.0)[m]
                - objective(counts, sums, sq, down, d_h, 10.0)[m]
            ) / (2 * eps)
        assert np.abs(grad).max() < 1e-6, grad


def test_empty_cell_keeps_its_codeword() -> None:
    Z, C, d_h = problem()
    C[0, 5] = 100.0  # far from every item: nobody picks it
    _, counts, sums = assign_with_stats(Z, C)
    assert counts[0, 5] == 0
    np.testing.assert_array_equal(update_codewords(C, counts, sums, d_h, 10.0)[0, 5], C[0, 5])


def test_hamming_distance_tracks_codeword_distance() -> None:
    """Affinity preservation: with lam = 10 the codeword distances stay close to
    s * 2 sqrt(Hamming); plain k-means (lam = 0) drifts away. The toy clusters pull hard on
    the codewords, so the correlation is lower than on smooth data (about 0.99 on Gaussian
    noise)."""
    X = TOY_X
    codes = index_codes(4).astype(np.float64)
    gap = np.linalg.norm(codes[:, None] - codes[None, :], axis=2)[np.triu_indices(16, 1)]

    def correlations(lam: float) -> np.ndarray:
        h = KMH(n_bits=16, lam=lam, n_iter=20).fit(X)
        out = []
        for C in h.codewords_:
            dist = np.linalg.norm(C[:, None] - C[None, :], axis=2)[np.triu_indices(16, 1)]
            out.append(np.corrcoef(gap, dist)[0, 1])
        return np.array(out)

    kept, free = correlations(10.0), correlations(0.0)
    assert kept.min() > 0.75, kept
    assert kept.mean() > free.mean() + 0.3, (kept, free)


def test_encode_is_the_nearest_codewords_index(fitted) -> None:
    X = TOY_X[:40].astype(np.float64)
    Y = (X - fitted.mean_) @ fitted.components_
    M, k, ds = fitted.codewords_.shape
    expected = []
    for m in range(M):
        z = Y[:, m * ds : (m + 1) * ds]
        dist = ((z[:, None, :] - fitted.codewords_[m][None]) ** 2).sum(axis=2)
        expected.append(index_codes(4)[dist.argmin(axis=1)])
    np.testing.assert_array_equal(fitted.encode(X), np.concatenate(expected, axis=1))


def test_fit_state(fitted) -> None:
    assert fitted.codewords_.shape == (4, 16, 16)  # M = 16 / 4 subspaces of 64 / 4 dimensions
    P = fitted.components_
    np.testing.assert_allclose(P.T @ P, np.eye(P.shape[1]), atol=1e-10)
    assert fitted.objective_.shape == (50,) and fitted.objective_[-1] < fitted.objective_[0]
    assert np.all(fitted.scale_ > 0)


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"n_bits": 8, "bits_per_subspace": 0}, "bits_per_subspace must be an integer >= 1"),
        ({"n_bits": 18, "bits_per_subspace": 9}, "bits_per_subspace must be <= 8"),
        ({"n_bits": 8, "lam": -1.0}, "lam must be a finite number >= 0"),
        ({"n_bits": 8, "lam": float("nan")}, "lam must be a finite number >= 0"),
        ({"n_bits": 8, "lam": True}, "lam must be a finite number >= 0"),
        ({"n_bits": 8, "n_iter": -1}, "n_iter must be an integer >= 0"),
        ({"n_bits": 8.0}, "n_bits must be an integer >= 1"),
    ],
)
def test_bad_parameters_are_refused(params, message) -> None:
    with pytest.raises(ValueError, match=message):
        KMH(**params).fit(TOY_X[:50])


def test_too_few_dimensions_are_refused() -> None:
    X = np.random.default_rng(0).standard_normal((50, 12))
    with pytest.raises(ValueError, match="need at least 16 feature dimensions"):
        KMH(n_bits=16).fit(X)


def test_a_pca_needs_two_items() -> None:
    with pytest.raises(ValueError, match="kmh: fitting needs at least 2 items, got 1"):
        KMH(n_bits=4).fit(np.ones((1, 8)))
