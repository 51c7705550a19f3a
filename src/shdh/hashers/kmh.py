"""KMH, K-means hashing (He, Wen & Sun, CVPR 2013): an unsupervised quantisation baseline.

A code is the index of a k-means cell, and the Hamming distance between two indices should
approximate the Euclidean distance between the two cells' codewords. In each of M = n_bits / b
subspaces, 2^b codewords c_i are learnt with the affinity-preserving k-means objective

    E = (1/n) sum_x ||x - c_i(x)||^2 + lam sum_{i,j} (n_i n_j / n^2) (||c_i - c_j|| - d_h(i, j))^2

where i(x) is x's nearest codeword, n_i the size of cell i and d_h(i, j) = s * sqrt(h(i, j)) the
Hamming-based distance (h the Hamming distance between the b-bit indices, s a per-subspace
scale; here d_h is the Euclidean distance between the scaled +-s codes, 2 s sqrt(h)). Index i
always carries the b-bit code of i: the codewords start as s * (+-1)^b on the subspace's top b
principal axes (PCA hashing), where that distance holds exactly, and the affinity term keeps it
approximately true while k-means moves the codewords towards the data.

Product space as in the authors' code: PCA on all dimensions (d rounded down to a multiple of
M), then the principal directions are dealt to the M subspaces so that the products of their
eigenvalues are balanced (the parametric solution of optimised product quantisation, Ge et al.
2013). Each subspace's coordinates are then already its own principal axes, sorted.

Optimiser: 50 iterations alternate an assignment step (nearest codeword) and a codeword step
that updates c_1..c_k in turn, each minimising E with the others fixed. The authors minimise
each codeword's term with a quasi-Newton solver (fminunc); we take a few majorise-minimise
steps instead: bounding -||c - c_i|| by -(c - c_i).u_i (u_i the unit vector from c_i to the
current c) gives a quadratic whose minimiser is closed-form, and every step lowers E.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.hashers.base import Hasher
from shdh.hashers.itq import pca
from shdh.hashers.method_settings import KMHSettings
from shdh.hashers.validation import check_features, check_int, require_state

# Majorise-minimise steps per codeword per iteration (the authors run fminunc to convergence;
# MM converges linearly, and 10 steps move each codeword to within a small fraction of the
# optimum at a cost that is negligible next to the assignment step).
MM_STEPS = 10
# Rows handled at once in the assignment step and in encode.
_CHUNK = 16384
# Largest bits per subspace: 2^b codewords and a 2^b x 2^b affinity matrix per subspace.
MAX_BITS_PER_SUBSPACE = 8


def index_codes(b: int) -> np.ndarray:
    """(2^b, b) int8 {-1,+1}: row i is the b-bit code of index i, most significant bit first."""
    bits = (np.arange(2**b)[:, None] >> np.arange(b - 1, -1, -1)[None, :]) & 1
    return (2 * bits - 1).astype(np.int8)


def balanced_partition(eigenvalues: np.ndarray, n_subspaces: int) -> np.ndarray:
    """(M, D/M) indices into the descending eigenvalues: the subspaces' principal directions.

    Greedy: each direction, largest first, goes to the non-full subspace whose log-eigenvalue
    sum is smallest so far (lowest index on ties), which balances the eigenvalue products and
    so the subspaces' quantisation distortion. Rows stay sorted by descending eigenvalue.
    """
    n_dims = len(eigenvalues)
    size = n_dims // n_subspaces
    score = np.log(np.asarray(eigenvalues, dtype=np.float64) + 1e-20)
    score = score - score.min() + 1.0  # all positive, as a running sum must grow
    totals = np.zeros(n_subspaces)
    members: list[list[int]] = [[] for _ in range(n_subspaces)]
    for dim in range(n_subspaces * size):
        open_ = np.array([len(m) < size for m in members])
        target = int(np.argmin(np.where(open_, totals, np.inf)))
        members[target].append(dim)
        totals[target] += score[dim]
    return np.array(members, dtype=np.int64)


def assign(Z: np.ndarray, codewords: np.ndarray) -> np.ndarray:
    """(M, N) index of each item's nearest codeword per subspace; Z (M, N, ds), codewords
    (M, k, ds). Distances in Z's dtype (float32 in `fit`); ties go to the lower index."""
    M, n, _ = Z.shape
    cells = np.empty((M, n), dtype=np.int64)
    for m in range(M):
        c = codewords[m].astype(Z.dtype)
        half_norms = 0.5 * (c * c).sum(axis=1)
        for start in range(0, n, _CHUNK):
            z = Z[m, start : start + _CHUNK]
            cells[m, start : start + _CHUNK] = np.argmin(half_norms - z @ c.T, axis=1)
    return cells


def cell_stats(
    Z: np.ndarray,
    cells: np.ndarray,
    k: int,
    previous: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(counts (M, k), sums (M, k, ds)) float64 of the items in each cell.

    Given `previous` = (the old cells, their sums), only the items that changed cell are
    moved between sums: after the first few iterations that is a small fraction of N. Sums
    are gathered with one boolean mask per cell (a one-hot matrix product has an N-long inner
    dimension, which multi-threaded BLAS handles badly on a busy machine).
    """
    M, _, ds = Z.shape
    counts = np.stack([np.bincount(cells[m], minlength=k) for m in range(M)]).astype(np.float64)
    sums = np.zeros((M, k, ds)) if previous is None else previous[1].copy()
    for m in range(M):
        if previous is None:
            sums[m] = _cell_sums(Z[m], cells[m], k)
            continue
        moved = np.flatnonzero(cells[m] != previous[0][m])
        z = Z[m, moved]
        sums[m] += _cell_sums(z, cells[m, moved], k) - _cell_sums(z, previous[0][m, moved], k)
    return counts, sums


def _cell_sums(z: np.ndarray, cell: np.ndarray, k: int) -> np.ndarray:
    return np.stack([z[cell == j].sum(axis=0, dtype=np.float64) for j in range(k)])


def objective(
    counts: np.ndarray,
    sums: np.ndarray,
    sq_norm: np.ndarray,
    codewords: np.ndarray,
    d_h: np.ndarray,
    lam: float,
) -> np.ndarray:
    """E per subspace (M,) for fixed cells, from the cell statistics alone.

    E_quan = (sum ||x||^2 - 2 sum_i s_i.c_i + sum_i n_i ||c_i||^2) / n with s_i the cell sums;
    E_aff = sum_{i,j} p_i p_j (||c_i - c_j|| - d_h(i, j))^2 with p_i = n_i / n.
    """
    n = counts.sum(axis=1)
    quan = (
        sq_norm
        - 2.0 * (sums * codewords).sum(axis=(1, 2))
        + (counts * (codewords**2).sum(axis=2)).sum(axis=1)
    ) / n
    p = counts / n[:, None]
    dist = np.linalg.norm(codewords[:, :, None, :] - codewords[:, None, :, :], axis=3)
    aff = (p[:, :, None] * p[:, None, :] * (dist - d_h) ** 2).sum(axis=(1, 2))
    return quan + lam * aff


def update_codewords(
    codewords: np.ndarray,
    counts: np.ndarray,
    sums: np.ndarray,
    d_h: np.ndarray,
    lam: float,
    steps: int = MM_STEPS,
) -> np.ndarray:
    """The codeword step: c_1..c_k in turn, each by `steps` majorise-minimise steps on E.

    Divided by p_j, c_j's part of E is ||c - m_j||^2 + 2 lam sum_{i != j} p_i (||c - c_i|| -
    d_ij)^2 (m_j its cell mean; the 2 because c_j appears in both (i, j) and (j, i)). With
    u_i = (c0 - c_i) / ||c0 - c_i|| (0 where c0 = c_i), Cauchy-Schwarz gives -||c - c_i|| <=
    -(c - c_i).u_i with equality at c0, and the bound's minimiser is
        c = (m_j + 2 lam sum_i p_i (c_i + d_ij u_i)) / (1 + 2 lam sum_i p_i).
    An empty cell has no term in E, so its codeword stays where it is.
    """
    C = codewords.copy()
    n = counts.sum(axis=1, keepdims=True)
    p = counts / n  # (M, k)
    k = C.shape[1]
    for j in range(k):
        filled = counts[:, j] > 0
        if not filled.any():
            continue
        mean_j = sums[:, j] / np.maximum(counts[:, j], 1.0)[:, None]
        w = 2.0 * lam * p
        w[:, j] = 0.0
        denominator = (1.0 + w.sum(axis=1))[:, None]
        d_j = d_h[:, :, j, None]
        for _ in range(steps):
            diff = C[:, j : j + 1, :] - C  # (M, k, ds): c0 - c_i
            dist = np.sqrt((diff * diff).sum(axis=2, keepdims=True))
            unit = diff / np.where(dist > 0, dist, np.inf)  # 0 where c0 = c_i
            new = (mean_j + np.einsum("mk,mkd->md", w, C + d_j * unit)) / denominator
            C[:, j] = np.where(filled[:, None], new, C[:, j])
    return C


class KMH(Hasher):
    """Unsupervised: product-space affinity-preserving k-means, b bits per subspace."""

    supervision = None

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        bits_per_subspace: int = KMHSettings.bits_per_subspace,
        lam: float = KMHSettings.lam,
        n_iter: int = KMHSettings.n_iter,
    ) -> None:
        super().__init__(n_bits=n_bits, seed=seed)
        self.bits_per_subspace = bits_per_subspace
        self.lam = lam
        self.n_iter = n_iter

    @classmethod
    def supports(
        cls, n_bits: int, bits_per_subspace: int = KMHSettings.bits_per_subspace, **_: Any
    ) -> bool:
        """Whether n_bits splits into whole b-bit subspaces (b = 4: 32, 48 and 64 do, 30 not)."""
        return _splits(n_bits, bits_per_subspace)

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        # The seed is unused: PCA-hashing initialisation and nearest-codeword ties make KMH
        # deterministic; it is kept for the common contract.
        n_subspaces = _check_split(self.n_bits, self.bits_per_subspace)
        b = int(self.bits_per_subspace)
        n_iter = check_int(self.name, "n_iter", self.n_iter, 0)
        lam = _check_lam(self.lam)
        X = check_features(X, self.name, min_items=2)
        d = X.shape[1]
        if d < self.n_bits:
            raise ValueError(
                f"{self.name}: {n_subspaces} subspaces of {b} bits need at least {self.n_bits} "
                f"feature dimensions (>= b per subspace), got d={d}"
            )

        mean, eigenvalues, vectors = pca(X)
        size = d // n_subspaces
        dims = balanced_partition(eigenvalues[: n_subspaces * size], n_subspaces)
        self.mean_ = mean
        self.components_ = np.ascontiguousarray(vectors[:, dims.reshape(-1)])  # (d, M * ds)
        Z = self._project(X)  # (M, N, ds)

        self.scale_, codewords, d_h = initial_codewords(Z, b, size)
        self.codewords_, self.objective_ = optimise(Z, codewords, d_h, float(lam), n_iter)

    def _project(self, X: np.ndarray) -> np.ndarray:
        """(M, N, ds) float32 subspace coordinates of (x - mean).

        float32 halves the memory traffic of the 50 assignment passes; a cell boundary moved
        by rounding changes nothing measurable, and sums and the objective stay float64."""
        Y = np.empty((len(X), self.components_.shape[1]), dtype=np.float32)
        for start in range(0, len(X), _CHUNK):
            rows = slice(start, start + _CHUNK)
            Y[rows] = (X[rows] - self.mean_) @ self.components_
        M = int(self.n_bits) // int(self.bits_per_subspace)
        return np.ascontiguousarray(Y.reshape(len(X), M, -1).transpose(1, 0, 2))

    def _encode(self, X: np.ndarray) -> np.ndarray:
        X = check_features(X, self.name, n_features=len(self.mean_))
        codes = index_codes(int(self.bits_per_subspace))
        parts = []
        for start in range(0, len(X), _CHUNK):
            cells = assign(self._project(X[start : start + _CHUNK]), self.codewords_)  # (M, n)
            parts.append(codes[cells].transpose(1, 0, 2).reshape(cells.shape[1], -1))
        return np.concatenate(parts, axis=0)

    def _after_load(self) -> None:
        _check_state(self)


def initial_codewords(Z: np.ndarray, b: int, size: int) -> tuple[np.ndarray, ...]:
    """(scale (M,), codewords (M, 2^b, size), d_h (M, k, k)): the PCA-hashing start, +-s on the
    top b axes with s the mean |coordinate| there, and the Hamming-based distances it fixes."""
    codes = index_codes(b).astype(np.float64)
    scale = np.abs(Z[:, :, :b]).mean(axis=(1, 2), dtype=np.float64)
    codewords = np.zeros((Z.shape[0], 2**b, size))
    codewords[:, :, :b] = scale[:, None, None] * codes
    gap = np.linalg.norm(codes[:, None, :] - codes[None, :, :], axis=2)  # 2 sqrt(h)
    return scale, codewords, scale[:, None, None] * gap


def optimise(
    Z: np.ndarray, codewords: np.ndarray, d_h: np.ndarray, lam: float, n_iter: int
) -> tuple[np.ndarray, np.ndarray]:
    """(codewords, E after each iteration): n_iter alternations of the assignment step and the
    codeword step, the cell sums carried over from one iteration to the next."""
    sq_norm = np.einsum("mnd,mnd->m", Z, Z, dtype=np.float64)
    history = np.empty(n_iter)
    cells = sums = None
    for it in range(n_iter):
        new_cells = assign(Z, codewords)
        previous = None if cells is None else (cells, sums)
        counts, sums = cell_stats(Z, new_cells, codewords.shape[1], previous)
        cells = new_cells
        codewords = update_codewords(codewords, counts, sums, d_h, lam)
        history[it] = objective(counts, sums, sq_norm, codewords, d_h, lam).sum()
    return codewords, history


def _check_lam(lam: Any) -> Any:
    real = isinstance(lam, int | float | np.floating) and not isinstance(lam, bool)
    if not (real and np.isfinite(lam) and lam >= 0):
        raise ValueError(f"kmh: lam must be a finite number >= 0, got {lam!r}")
    return lam


def _splits(n_bits: Any, b: Any) -> bool:
    try:
        _check_split(n_bits, b)
    except ValueError:
        return False
    return True


def _check_split(n_bits: Any, b: Any) -> int:
    """The number of subspaces M = n_bits / b, or a ValueError naming both."""
    n_bits = check_int("kmh", "n_bits", n_bits, 1)
    b = check_int("kmh", "bits_per_subspace", b, 1)
    if b > MAX_BITS_PER_SUBSPACE:
        raise ValueError(
            f"kmh: bits_per_subspace must be <= {MAX_BITS_PER_SUBSPACE} (2^b codewords per "
            f"subspace), got {b}"
        )
    if n_bits % b:
        raise ValueError(
            f"KMH cannot split {n_bits} bits into {b}-bit subspaces: n_bits must be a multiple "
            f"of bits_per_subspace={b}"
        )
    return n_bits // b


def _check_state(hasher: Any) -> None:
    """A saved state whose shapes disagree with params.json would encode with the wrong length."""
    require_state(hasher, ("mean_", "components_", "scale_", "codewords_", "objective_"))
    M = _check_split(hasher.n_bits, hasher.bits_per_subspace)
    C, P = hasher.codewords_, hasher.components_
    fits = C.ndim == 3 and C.shape[:2] == (M, 2**hasher.bits_per_subspace)
    if not (fits and P.shape == (len(hasher.mean_), M * C.shape[-1])):
        raise ValueError(
            f"{hasher.name}: saved codewords {C.shape} and components {P.shape} do not fit "
            f"n_bits={hasher.n_bits}, bits_per_subspace={hasher.bits_per_subspace}"
        )
