"""LFH, supervised hashing with latent factor models (Zhang, Zhang, Li & Guo, SIGIR 2014).

LFH treats each item's relaxed code u_i (a row of U, N x L) as a latent factor and the pair
labels s_ij in {0, 1} (1: same fine label) as Bernoulli draws with
    p(s_ij = 1 | U) = sigmoid(Theta_ij),  Theta_ij = u_i^T u_j / 2,
under a Gaussian prior u_i ~ N(0, beta' I). U is the MAP estimate; the codes are sgn(U), and new
items get sgn(x W) from a ridge regression of U on the features.

The MAP is found by the paper's stochastic learning strategy, as the authors' code runs it: each
of n_iter iterations samples n_sampled columns C (default L, the authors' choice) and moves every
row i outside C by one Newton-like step on its terms with the sampled columns,
    u_i <- u_i - H^{-1} g_i,
    g_i = sum_{j in C} (s_ij - sigmoid(Theta_ij)) u_j - u_i / beta',
    H   = -(1/8) sum_{j in C} u_j u_j^T - I / beta'.
(s_ij and s_ji are both in S, hence the factor 2 over one pair's gradient, 1/2 u_j.)
H is a lower bound of the Hessian (sigmoid' <= 1/4), so each step maximises a quadratic minorant
and cannot lower the row's objective; it is the same for every row, so one L x L solve serves all.
A row's step reads only the sampled rows U_C, which stay fixed during the iteration, so updating
all rows outside C at once is exactly the row-by-row order, not an approximation.

Scales follow the authors' code: features standardised per dimension, U initialised by PCA,
prior variance beta' = beta / L, ridge lam * N / d.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.hashers.base import Hasher
from shdh.hashers.method_settings import LFHSettings
from shdh.hashers.validation import check_features, check_int


class LFH(Hasher):
    """Latent factor hashing on same-fine-label pairs; linear out-of-sample encoding."""

    supervision = "label"

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        n_iter: int = LFHSettings.n_iter,
        beta: float = LFHSettings.beta,
        lam: float = LFHSettings.lam,
        n_sampled: int | None = LFHSettings.n_sampled,
    ) -> None:
        super().__init__(n_bits=n_bits, seed=seed)
        self.n_iter = n_iter
        self.beta = beta
        self.lam = lam
        self.n_sampled = n_sampled

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        X = check_features(X, self.name)
        n_iter = check_int(self.name, "n_iter", self.n_iter, 0)
        for field in ("beta", "lam"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{self.name}: {field} must be a number > 0, got {value!r}")
        n, d = X.shape
        n_sampled = self.n_bits if self.n_sampled is None else self.n_sampled
        n_sampled = check_int(self.name, "n_sampled", n_sampled, 1)
        if n_sampled >= n:
            raise ValueError(
                f"{self.name}: n_sampled={n_sampled} columns leave no row to update among "
                f"{n} training items; use fewer sampled columns"
            )
        self.mean_, self.scale_ = _standardiser(X)
        Xs = (X - self.mean_) / self.scale_  # (N, d) float64
        gram = Xs.T @ Xs  # (d, d), shared by the PCA start and the regression
        U = pca_start(Xs, gram, self.n_bits)
        rng = self._rng()
        prior = float(self.beta) / self.n_bits
        every_row = np.arange(n)
        for _ in range(n_iter):
            cols = rng.choice(n, size=n_sampled, replace=False)
            U = stochastic_step(U, cols, pairs.block(every_row, cols), prior)
        # Ridge regression U ~ Xs W + offset (Xs is centred, so the offset is U's mean).
        self.offset_ = U.mean(axis=0)
        ridge = float(self.lam) * n / d * np.eye(d)
        self.projection_ = np.linalg.solve(gram + ridge, Xs.T @ (U - self.offset_))  # (d, L)
        # sgn(U): the codes the authors give the training (database) items; encode() gives the
        # out-of-sample codes sgn(x W) that the shared protocol uses for every item.
        self.train_codes_ = np.where(U > 0, 1, -1).astype(np.int8)

    def _encode(self, X: np.ndarray) -> np.ndarray:
        X = check_features(X, self.name, self.mean_.shape[0])
        return ((X - self.mean_) / self.scale_) @ self.projection_ + self.offset_

    def _after_load(self) -> None:
        for key in ("mean_", "scale_", "offset_", "projection_", "train_codes_"):
            if not hasattr(self, key):
                raise ValueError(f"{self.name}: saved state lacks the array '{key}'")
        d = self.mean_.shape[0]
        if self.projection_.shape != (d, self.n_bits) or self.offset_.shape != (self.n_bits,):
            raise ValueError(
                f"{self.name}: saved 'projection_' has shape {self.projection_.shape}, but "
                f"n_bits={self.n_bits} with {d} features needs ({d}, {self.n_bits})"
            )


def stochastic_step(
    U: np.ndarray, cols: np.ndarray, s_block: np.ndarray, prior: float
) -> np.ndarray:
    """One iteration: every row outside the sampled columns `cols` steps against them.

    s_block (N, C) holds the pair labels s_ij of every item against the sampled ones, +1 for the
    same fine label and -1 otherwise (PairSimilarity's "label" mode), mapped here to LFH's
    {1, 0}. The sampled rows keep their values this time, as in the authors' code.
    """
    u_cols = U[cols]
    U = update_rows(U, u_cols, s_block > 0, prior)
    U[cols] = u_cols
    return U


def update_rows(
    u_rows: np.ndarray, u_cols: np.ndarray, s01: np.ndarray, prior: float
) -> np.ndarray:
    """One Newton-like step for every row of u_rows (R, L) against the sampled rows u_cols (C, L).

    s01 (R, C) holds s_ij in {0, 1}; prior is the prior variance beta'. Returns the new rows.
    """
    n_bits = u_cols.shape[1]
    theta = 0.5 * (u_rows @ u_cols.T)  # (R, C)
    from scipy.special import expit  # lazy: the hashers import with numpy alone

    grad = (s01 - expit(theta)) @ u_cols - u_rows / prior  # (R, L)
    neg_hessian = u_cols.T @ u_cols / 8.0 + np.eye(n_bits) / prior  # (L, L), positive definite
    return u_rows + grad @ np.linalg.inv(neg_hessian)  # one L x L inverse serves every row


def log_likelihood(U: np.ndarray, s01: np.ndarray) -> float:
    """sum_{i != j} s_ij Theta_ij - log(1 + e^Theta_ij): the fit of U to a full (small) S."""
    theta = 0.5 * (U @ U.T)
    terms = s01 * theta - np.logaddexp(0.0, theta)
    return float(terms.sum() - np.trace(terms))


def pca_start(Xs: np.ndarray, gram: np.ndarray, n_bits: int) -> np.ndarray:
    """U0: the centred features on their top n_bits principal directions (authors' start).

    With fewer feature dimensions than bits the columns repeat cyclically, as in their code.
    Eigenvector signs are fixed (largest-magnitude entry positive) so U0 does not depend on
    the LAPACK build.
    """
    d = Xs.shape[1]
    if d <= n_bits:
        return Xs[:, np.arange(n_bits) % d].copy()
    _, vectors = np.linalg.eigh(gram)  # ascending eigenvalues
    top = vectors[:, ::-1][:, :n_bits]
    pivot = np.argmax(np.abs(top), axis=0)
    top = top * np.where(top[pivot, np.arange(n_bits)] < 0, -1.0, 1.0)
    return Xs @ top


def _standardiser(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and std; constant dimensions keep scale 1 (they stay 0)."""
    mean = X.mean(axis=0, dtype=np.float64)
    std = X.std(axis=0, dtype=np.float64)
    return mean, np.where(std > 0, std, 1.0)
