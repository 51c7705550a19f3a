"""Toy hierarchical data shared by the shallow hashers' tests."""

from __future__ import annotations

import numpy as np


def toy_tree_data(n: int, seed: int = 0, n_sup: int = 2, per_sup: int = 3, d: int = 16):
    """Gaussian clusters per leaf of a K=3 tree: superclass centre + leaf offset + noise.

    Returns (features float32 (n, d), ancestor rows int32 (n, 3)): root, superclass, leaf.
    """
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, n_sup * per_sup, n)
    sup = leaf // per_sup
    X = (
        3.0 * rng.standard_normal((n_sup, d))[sup]
        + 1.5 * rng.standard_normal((n_sup * per_sup, d))[leaf]
        + rng.standard_normal((n, d))
    )
    anc = np.stack([np.zeros(n, int), 1 + sup, 1 + n_sup + leaf], axis=1).astype(np.int32)
    return X.astype(np.float32), anc


def train_and_queries(n: int = 480, n_queries: int = 80):
    """(X_train, anc_train, X_query, anc_query) from toy_tree_data: the first rows are queries."""
    X, anc = toy_tree_data(n)
    return X[n_queries:], anc[n_queries:], X[:n_queries], anc[:n_queries]
