"""KSH, supervised hashing with kernels (Liu, Wang, Ji, Jiang & Chang, CVPR 2012), and KSH+H.

Each bit is h_k(x) = sgn(a_k^T kbar(x)), with kbar(x) the zero-mean RBF kernel values of x against
m anchors. KSH fits code inner products to the pair labels, min ||H H^T - L S||_F^2 on l labelled
items, i.e. max sum_k y_k^T R_{k-1} y_k with y_k = sgn(K a_k) and the residual
R_k = R_{k-1} - y_k y_k^T, R_0 = L S. Bits are learned greedily, one at a time on the residual:
  1. spectral start: the top generalised eigenvector of K^T R K a = lam K^T K a (the relaxation
     sgn(x) ~ x), scaled so that a^T K^T K a = l;
  2. smooth refinement: maximise phi(K a)^T R phi(K a) with phi(x) = 2/(1 + e^-x) - 1 by
     accelerated gradient with a backtracking step (as the authors' OptProjectionFast does);
  3. keep the refined a only if its *discrete* objective y^T R y beats the spectral one.
Defaults follow the authors' demo: m = 300 random anchors, l = 2,000 random labelled items, RBF
bandwidth 2 sigma with sigma the mean squared distance to the anchors, kernel values centred by
their mean over all training items, at most 500 gradient steps per bit.

KSH+H (this paper's variant) is the same code fed the hierarchical s_ij of Eq. 3 instead of the
+-1 same-label s_ij: the classes differ only in their `supervision` attribute.

Speed: R is never formed densely. Items with identical rows of S (the same leaf, for tree
labels) form groups, so L S y costs O(l + g^2) for g groups, and the learned bits add
Y (Y^T y): a gradient step costs two l x m products instead of an l x l one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.hashers.base import Hasher
from shdh.hashers.method_settings import KSHSettings
from shdh.hashers.validation import check_features, check_int

# Doublings of the step's curvature estimate tried before a smooth refinement gives up.
_MAX_BACKTRACKS = 50
# Relative ridge on K^T K so the generalised eigenproblem stays definite when kernel columns are
# (nearly) collinear, e.g. duplicate anchors.
_GRAM_RIDGE = 1e-8


class KSH(Hasher):
    """Kernel hash functions fitted greedily, bit by bit, to L * S on a labelled sample."""

    supervision = "label"

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        n_anchors: int = KSHSettings.n_anchors,
        n_labelled: int = KSHSettings.n_labelled,
        n_iter: int = KSHSettings.n_iter,
        tol: float = KSHSettings.tol,
    ) -> None:
        super().__init__(n_bits=n_bits, seed=seed)
        self.n_anchors = n_anchors
        self.n_labelled = n_labelled
        self.n_iter = n_iter
        self.tol = tol

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        X = check_features(X, self.name)
        m = check_int(self.name, "n_anchors", self.n_anchors, 1)
        n_labelled = check_int(self.name, "n_labelled", self.n_labelled, 1)
        n_iter = check_int(self.name, "n_iter", self.n_iter, 0)
        if not (isinstance(self.tol, int | float) and self.tol >= 0):
            raise ValueError(f"{self.name}: tol must be a number >= 0, got {self.tol!r}")
        n = len(X)
        if n < m:
            raise ValueError(
                f"{self.name}: {n} training items are too few for n_anchors={m} anchors "
                "(the anchors are sampled from the training items)"
            )
        l_items = min(n_labelled, n)
        if l_items < m:
            raise ValueError(
                f"{self.name}: {l_items} labelled samples (n_labelled={n_labelled}, "
                f"{n} training items) are fewer than n_anchors={m}; K^T K is then singular, "
                "so KSH needs at least as many labelled samples as anchors"
            )
        rng = self._rng()
        anchor_idx = np.sort(rng.choice(n, size=m, replace=False))
        labelled = np.sort(rng.choice(n, size=l_items, replace=False))
        anchors = X[anchor_idx].astype(np.float64)
        sq = _sq_distances(X, anchors)
        sigma = float(sq.mean())  # the authors' bandwidth: mean squared distance to the anchors
        if sigma <= 0:
            raise ValueError(f"{self.name}: all training items are identical; no kernel to learn")
        k_all = np.exp(np.multiply(sq, -0.5 / sigma, out=sq), out=sq)  # in place: N x m once
        kernel_mean = k_all.mean(axis=0)
        K = k_all[labelled] - kernel_mean  # (l, m), zero-mean kernel features
        del sq, k_all
        s0 = np.asarray(pairs.block(labelled, labelled), dtype=np.float64)  # (l, l) in [-1, 1]
        self.anchors_ = anchors  # (m, d)
        self.sigma_ = np.float64(sigma)
        self.kernel_mean_ = kernel_mean  # (m,)
        self.projections_ = learn_projections(K, s0, self.n_bits, n_iter, float(self.tol))

    def _encode(self, X: np.ndarray) -> np.ndarray:
        X = check_features(X, self.name, self.anchors_.shape[1])
        K = np.exp(-_sq_distances(X, self.anchors_) / (2.0 * float(self.sigma_)))
        return (K - self.kernel_mean_) @ self.projections_

    def _after_load(self) -> None:
        _check_state(self)


class KSHH(KSH):
    """KSH+H: KSH fitted to the hierarchical s_ij of Eq. 3; nothing else changes."""

    supervision = "hierarchical"


# --- the greedy bit-wise optimisation ------------------------------------------------------------


class Residual:
    """R = scale * S0 - Y Y^T as an operator on vectors, without an l x l matrix.

    Items whose rows of S0 are identical form one group (a leaf of the label tree), so
    S0 = P M P^T with P the l x g membership matrix and M the g x g group similarity. For
    multi-label data g may approach l; the product is still exact, only slower.
    """

    def __init__(self, s0: np.ndarray, scale: float, n_bits: int) -> None:
        s0 = np.asarray(s0, dtype=np.float64)
        if s0.ndim != 2 or s0.shape[0] != s0.shape[1] or not np.array_equal(s0, s0.T):
            raise ValueError(f"pair labels must be a symmetric (l, l) block, got {s0.shape}")
        self.group, first = _identical_rows(s0)  # (l,) group of each item, (g,) representatives
        self.n_groups = len(first)
        self.block = scale * s0[np.ix_(first, first)]  # (g, g): scale * s between representatives
        self.bits = np.zeros((n_bits, s0.shape[0]))  # (L, l) learned y_k, filled top to bottom
        self.n_learned = 0

    def group_sums(self, x: np.ndarray) -> np.ndarray:
        """P^T x: x (l,) or (l, c) summed over each group."""
        out = np.zeros((self.n_groups, *x.shape[1:]))
        np.add.at(out, self.group, x)
        return out

    def matvec(self, y: np.ndarray) -> np.ndarray:
        """R y for y (l,): scale * P M P^T y - Y Y^T y."""
        summed = np.bincount(self.group, weights=y, minlength=self.n_groups)
        learned = self.bits[: self.n_learned]  # (k, l), contiguous
        coeffs = np.einsum("kl,l->k", learned, y)  # einsum: see refine()
        return (self.block @ summed)[self.group] - np.einsum("kl,k->l", learned, coeffs)

    def value(self, y: np.ndarray) -> float:
        return float(y @ self.matvec(y))

    def add_bit(self, y: np.ndarray) -> None:
        """R_k = R_{k-1} - y_k y_k^T."""
        self.bits[self.n_learned] = y
        self.n_learned += 1


def smooth_sign(x: np.ndarray) -> np.ndarray:
    """phi(x) = 2 / (1 + exp(-x)) - 1, written as tanh(x / 2) so it cannot overflow."""
    return np.tanh(0.5 * x)


def spectral_start(kt_r_k: np.ndarray, kt_k: np.ndarray, n_labelled: int) -> np.ndarray:
    """Top generalised eigenvector of (K^T R K, K^T K), scaled to a^T K^T K a = l.

    Its sign is fixed (largest-magnitude entry positive) so codes do not depend on LAPACK.
    """
    m = kt_k.shape[0]
    ridge = _GRAM_RIDGE * np.trace(kt_k) / m * np.eye(m)
    import scipy.linalg  # lazy: the hashers import with numpy alone (a bare GPU machine)

    _, vec = scipy.linalg.eigh(kt_r_k, kt_k + ridge, subset_by_index=[m - 1, m - 1])
    a = vec[:, 0]
    a = a if a[np.argmax(np.abs(a))] > 0 else -a
    return a * np.sqrt(n_labelled / (a @ kt_k @ a))


def refine(
    K: np.ndarray, residual: Residual, a0: np.ndarray, n_iter: int, tol: float
) -> tuple[np.ndarray, np.ndarray]:
    """Minimise f(a) = -phi(K a)^T R phi(K a) by accelerated gradient with backtracking.

    grad f = -K^T [(R phi) * (1 - phi^2)] (phi' = (1 - phi^2) / 2). A step of length 1/b from the
    extrapolated point v is accepted once f drops below the quadratic bound
    f(v) - ||grad||^2 / (2b); b only grows, as in the authors' code. K a is linear in a, so the
    trial points reuse K v and K grad instead of new l x m products; those two products per step
    are the whole cost, so they run in float32 (3x faster; the rounding of z = K a is far below
    anything that moves a sign, and every f is still summed in float64), and through np.einsum,
    which computes them in the calling thread: for products this small, BLAS's hand-offs between
    threads cost more than the arithmetic, 3-5x more on a busy 2-core machine.
    Returns (a, f per accepted step, starting with f(a0)).
    """
    l_items = K.shape[0]
    k32 = K.astype(np.float32)
    a_prev, a = a0, a0
    z_prev = z = K @ a0
    y = smooth_sign(z)
    costs = [-residual.value(y)]
    t_prev, t, curvature = 0.0, 1.0, 1.0
    for _ in range(n_iter):
        alpha = (t_prev - 1.0) / t
        v, zv = a + alpha * (a - a_prev), z + alpha * (z - z_prev)
        yv = smooth_sign(zv)
        r_yv = residual.matvec(yv)
        fv = -float(yv @ r_yv)
        weights = (r_yv * (1.0 - yv * yv)).astype(np.float32)
        grad = -np.einsum("ij,i->j", k32, weights).astype(np.float64)  # K^T w
        k_grad = np.einsum("ij,j->i", k32, grad.astype(np.float32)).astype(np.float64)
        grad_sq = float(grad @ grad)
        for j in range(_MAX_BACKTRACKS + 1):
            b = curvature * 2.0**j
            y_trial = smooth_sign(zv - k_grad / b)
            f_trial = -residual.value(y_trial)
            if f_trial <= fv - grad_sq / (2.0 * b):
                break
        else:
            break  # no step decreases f: a is (numerically) stationary
        curvature = b
        a_prev, a = a, v - grad / b
        z_prev, z = z, zv - k_grad / b
        t_prev, t = t, (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        costs.append(f_trial)
        if abs(costs[-1] - costs[-2]) / l_items <= tol:
            break
    return a, np.asarray(costs)


def sign(x: np.ndarray) -> np.ndarray:
    """sgn with sgn(0) = -1 (docs/method.md), as float64 for the products with R."""
    return np.where(x > 0, 1.0, -1.0)


def learn_projections(
    K: np.ndarray, s0: np.ndarray, n_bits: int, n_iter: int, tol: float
) -> np.ndarray:
    """The greedy loop: for k = 1..L, fit bit k to R_{k-1} = L S - sum_{t<k} y_t y_t^T. (m, L)."""
    l_items, m = K.shape
    residual = Residual(s0, float(n_bits), n_bits)
    kt_k = K.T @ K
    # K^T R_0 K = L (P^T K)^T M (P^T K); each bit then subtracts (K^T y)(K^T y)^T.
    group_k = residual.group_sums(K)  # (g, m)
    kt_r_k = group_k.T @ residual.block @ group_k
    projections = np.zeros((m, n_bits))
    for k in range(n_bits):
        a = spectral_start(kt_r_k, kt_k, l_items)
        y = sign(K @ a)
        a_smooth, _ = refine(K, residual, a, n_iter, tol)
        y_smooth = sign(K @ a_smooth)
        if residual.value(y_smooth) > residual.value(y):  # keep the better *discrete* bit
            a, y = a_smooth, y_smooth
        projections[:, k] = a
        residual.add_bit(y)
        kt_y = K.T @ y
        kt_r_k -= np.outer(kt_y, kt_y)
    return projections


# --- small helpers -------------------------------------------------------------------------------


def _identical_rows(s0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, first row of each group) for the identical rows of a square matrix.

    Rows are matched by one random projection (np.unique on l x l rows is seconds; this is
    milliseconds), then the grouping is checked against s0 itself; in the (practically
    impossible) case of a collision every row becomes its own group, which is exact too.
    """
    probe = np.random.default_rng(0).standard_normal(s0.shape[1])  # private, fixed: no global RNG
    _, first, group = np.unique(s0 @ probe, return_index=True, return_inverse=True)
    if not np.array_equal(s0[np.ix_(first, first)][np.ix_(group, group)], s0):
        return np.arange(len(s0)), np.arange(len(s0))
    return group.reshape(-1), first


def _sq_distances(X: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """||x - a||^2 for every row of X and every anchor, (N, m) float64, clipped at 0."""
    X = X.astype(np.float64, copy=False)
    sq = (X * X).sum(axis=1)[:, None] + (anchors * anchors).sum(axis=1)[None, :]
    sq -= 2.0 * (X @ anchors.T)
    return np.maximum(sq, 0.0, out=sq)


def _check_state(hasher: Any) -> None:
    """A saved state must hold every array, in the shapes params.json implies."""
    for key in ("anchors_", "sigma_", "kernel_mean_", "projections_"):
        if not hasattr(hasher, key):
            raise ValueError(f"{hasher.name}: saved state lacks the array '{key}'")
    m = hasher.anchors_.shape[0]
    if hasher.projections_.shape != (m, hasher.n_bits) or hasher.kernel_mean_.shape != (m,):
        raise ValueError(
            f"{hasher.name}: saved 'projections_' has shape {hasher.projections_.shape}, but "
            f"n_bits={hasher.n_bits} with {m} anchors needs ({m}, {hasher.n_bits})"
        )
