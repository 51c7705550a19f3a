"""The toy method's class (declared in tests/unit/toy_catalogue_entries.py): signs of a seeded
random projection of the centred features, the smallest hasher that keeps the Hasher contract."""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.hashers.base import Hasher
from shdh.hashers.validation import check_features
from tests.unit.toy_catalogue_entries import ToySettings


class RandomSigns(Hasher):
    """Unsupervised: sgn((x - mean) P), P a seeded Gaussian (d, n_bits) matrix."""

    def __init__(self, *, n_bits: int, seed: int = 0, scale: float = ToySettings.scale) -> None:
        super().__init__(n_bits=n_bits, seed=seed)
        self.scale = scale

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        X = check_features(X, self.name, min_items=1)
        self.mean_ = X.mean(axis=0, dtype=np.float64)
        self.projection_ = self.scale * self._rng().standard_normal((X.shape[1], self.n_bits))

    def _encode(self, X: np.ndarray) -> np.ndarray:
        X = check_features(X, self.name, n_features=len(self.mean_))
        return (X - self.mean_) @ self.projection_
