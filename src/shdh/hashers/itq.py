"""ITQ, iterative quantization (Gong & Lazebnik, CVPR 2011): the paper's unsupervised baseline.

ITQ keeps PCA's variance-preserving projection but rotates it so that the sign quantisation
loses as little as possible: with V the data projected on the top-L principal directions, it
minimises ||B - V R||_F^2 over codes B in {-1,+1}^{N x L} and an orthogonal R by alternating
the two exact partial minimisers, B = sgn(V R) and R from the orthogonal Procrustes problem.
Each half-step can only lower the loss, so 50 iterations from a random orthogonal start (the
original code's default) suffice. Encoding is one matrix product: sgn((x - mean) W R).

The PCA and feature checks here are shared with KMH, which projects the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.hashers.base import Hasher
from shdh.hashers.method_settings import ITQSettings
from shdh.hashers.validation import check_features, check_int, require_state

# Rows encoded at once: bounds the float64 copy of a chunk to 16k x d values.
_ENCODE_CHUNK = 16384


def pca(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean (d,), eigenvalues (d,) descending, eigenvectors (d, d) as columns) of X's covariance.

    Each eigenvector's sign is fixed (largest-magnitude entry positive, first one on ties) so
    that the projection, and hence the codes, do not depend on the LAPACK build.
    """
    mean = X.mean(axis=0, dtype=np.float64)
    Xc = X - mean  # float64
    cov = (Xc.T @ Xc) / max(len(X) - 1, 1)
    values, vectors = np.linalg.eigh(cov)  # ascending
    values, vectors = values[::-1].clip(min=0.0), vectors[:, ::-1]
    pivot = np.argmax(np.abs(vectors), axis=0)
    signs = np.where(vectors[pivot, np.arange(vectors.shape[1])] < 0, -1.0, 1.0)
    return mean, values, np.ascontiguousarray(vectors * signs)


def random_rotation(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random orthogonal n x n matrix: the orthogonal polar factor of a Gaussian matrix."""
    u, _, vt = np.linalg.svd(rng.standard_normal((n, n)))
    return u @ vt


def itq_rotation(
    V: np.ndarray, n_iter: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The rotation R minimising ||sgn(V R) - V R||_F^2, and the loss before each update.

    B-step: B = sgn(V R) is the best code for a fixed R. R-step: for fixed B the loss is
    const - 2 tr(R^T V^T B), maximised by R = U W^T where V^T B = U S W^T (orthogonal
    Procrustes). The N x L products run in float32, and V^T is kept as its own contiguous
    copy: the N-long inner dimension of V^T B is several times slower in float64 or through a
    transposed view on a busy machine. R and its SVD stay float64. The loss is
    ||B||^2 + ||V||^2 - 2 sum |V R| (R orthogonal). Returns (R, n_iter + 1 losses, the last
    after the final R-step).
    """
    V32 = np.ascontiguousarray(V, dtype=np.float32)
    V32_t = np.ascontiguousarray(V32.T)
    const = V32.size + float(np.einsum("nl,nl->", V32, V32, dtype=np.float64))
    R = random_rotation(V.shape[1], rng)
    losses = np.empty(n_iter + 1)
    for it in range(n_iter + 1):
        VR = V32 @ R.astype(np.float32)
        losses[it] = const - 2.0 * float(np.abs(VR).sum(dtype=np.float64))
        if it == n_iter:
            break
        B = np.where(VR > 0, np.float32(1.0), np.float32(-1.0))
        u, _, wt = np.linalg.svd((V32_t @ B).astype(np.float64))
        R = u @ wt
    return R, losses


class ITQ(Hasher):
    """Unsupervised: PCA to n_bits dimensions, then the ITQ rotation; plain Hamming ranking."""

    supervision = None

    def __init__(self, *, n_bits: int, seed: int = 0, n_iter: int = ITQSettings.n_iter) -> None:
        super().__init__(n_bits=n_bits, seed=seed)
        self.n_iter = n_iter

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        n_bits = check_int(self.name, "n_bits", self.n_bits, 1)
        n_iter = check_int(self.name, "n_iter", self.n_iter, 0)
        X = check_features(X, self.name, min_items=2)
        d = X.shape[1]
        if n_bits > d:
            raise ValueError(
                f"{self.name}: n_bits={n_bits} exceeds the feature dimension d={d}; PCA cannot "
                f"give more than d directions"
            )
        mean, _, vectors = pca(X)
        W = vectors[:, :n_bits]
        R, losses = itq_rotation((X - mean) @ W, n_iter, self._rng())
        self.mean_ = mean
        self.projection_ = W @ R  # (d, n_bits): x -> (x - mean) W R
        self.quantization_loss_ = losses

    def _encode(self, X: np.ndarray) -> np.ndarray:
        X = check_features(X, self.name, n_features=len(self.mean_))
        out = np.empty((len(X), self.projection_.shape[1]), dtype=np.float64)
        for start in range(0, len(X), _ENCODE_CHUNK):
            rows = slice(start, start + _ENCODE_CHUNK)
            out[rows] = (X[rows] - self.mean_) @ self.projection_
        return out

    def _after_load(self) -> None:
        """A state whose shapes disagree with params.json would encode with the wrong length."""
        require_state(self, ("mean_", "projection_", "quantization_loss_"))
        d = len(self.mean_)
        if self.projection_.shape != (d, self.n_bits):
            raise ValueError(
                f"{self.name}: saved projection has shape {self.projection_.shape}, but the "
                f"parameters say n_bits={self.n_bits} on {d}-D features"
            )
