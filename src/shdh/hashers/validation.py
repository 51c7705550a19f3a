"""Input checks shared by the shallow hashers: bad features and settings fail by name.

Features with NaN or inf would otherwise flow silently into a PCA or a kernel and give codes that
look fine; the error names the method, the first bad row and column, and the count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.hashers.base import Hasher


def check_features(
    X: Any, who: str, n_features: int | None = None, min_items: int = 1
) -> np.ndarray:
    """X as a real (N, d) array (dtype kept; callers cast per chunk), or a ValueError.

    NaN or inf would silently turn a PCA (and every code after it) into garbage, so they are
    refused here with the position of the first bad value. A PCA needs min_items=2.
    """
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{who}: features X must be a 2-D (N, d) array, got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{who}: features X must be non-empty, got shape {X.shape}")
    if not (np.issubdtype(X.dtype, np.number) and not np.iscomplexobj(X)):
        raise ValueError(f"{who}: features X must be real numbers, got dtype {X.dtype}")
    if X.shape[0] < min_items:
        raise ValueError(f"{who}: fitting needs at least {min_items} items, got {X.shape[0]}")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{who}: features X have {X.shape[1]} dimensions, the model was fitted on {n_features}"
        )
    bad = ~np.isfinite(X) if np.issubdtype(X.dtype, np.floating) else None
    if bad is not None and bad.any():
        row, col = np.argwhere(bad)[0]
        kind = "NaN" if np.isnan(X[row, col]) else "inf"
        raise ValueError(
            f"{who}: features X contain {kind} (first at row {row}, column {col}); "
            f"{int(bad.sum())} non-finite values in all"
        )
    return X


def check_int(who: str, field: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{who}: {field} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def require_state(hasher: Hasher, names: tuple[str, ...]) -> None:
    missing = [name for name in names if not hasattr(hasher, name)]
    if missing:
        raise ValueError(f"{hasher.name}: saved state lacks the arrays {missing}")
