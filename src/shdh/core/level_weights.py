"""The level weights of SHDH (paper Eq. 2) and how a hash code is cut into one segment per level.

u_1 = 0 and u_k = 2(K+1-k) / (K(K-1)) for k = 2..K: the root level tells no two items apart, and a
coarse level weighs more than a fine one. Their integer form K+1-k gives exact weighted Hamming
distances (Eq. 4) and so deterministic ties. Every module that weighs levels (the similarity,
the losses, the metrics, the ranking, the search index) takes its weights from here.
"""

from __future__ import annotations

import numpy as np

LAYOUTS = ("levels", "paper")


def _check_height(K: int) -> int:
    if isinstance(K, bool) or not isinstance(K, int | np.integer):
        raise ValueError(f"tree height K must be an integer, got {K!r}")
    if K < 2:
        raise ValueError(f"tree height K must be >= 2 (a root and one labelled level), got {K}")
    return int(K)


def weight_scale(K: int) -> int:
    """K(K-1)/2: multiplying u_k by it gives the integers K+1-k, used for exact distances."""
    K = _check_height(K)
    return K * (K - 1) // 2


def integer_form(weights: np.ndarray) -> tuple[np.ndarray, int]:
    """(rint(u * scale) as int64, scale) with scale = K(K-1)/2 (1 for a lone level): Eq. 2's
    weights are integers over that scale, so distances and gains are summed exactly in integers
    and divided once. Whether the integers give u back is the caller's to decide: the gain falls
    back to floats for other weights, the S-matrix refuses them."""
    u = np.asarray(weights, dtype=np.float64)
    K = u.shape[0]
    scale = max(K * (K - 1) // 2, 1)
    return np.rint(u * scale).astype(np.int64), scale


def integer_layer_weights(K: int) -> np.ndarray:
    """Integer form of Eq. 2: w_1 = 0, w_k = K+1-k, so that u_k = w_k / weight_scale(K)."""
    K = _check_height(K)
    w = np.zeros(K, dtype=np.int64)
    w[1:] = K + 1 - np.arange(2, K + 1)
    return w


def layer_weights(K: int) -> np.ndarray:
    """Eq. 2: u_1 = 0, u_k = 2(K+1-k) / (K(K-1)) for k = 2..K.

    The paper writes the normalising sum from k = 0; read literally the weights would not sum to
    1, so (METHOD.md) the sum runs over k = 2..K. Coarse levels weigh more than fine ones.
    """
    return integer_layer_weights(K) / float(weight_scale(K))


def _check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown segment layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    return layout


def segment_levels(K: int, layout: str = "levels") -> list[int]:
    """1-based tree level that each hash-code segment encodes.

    `paper` gives the root its own segment although u_1 = 0 makes those bits useless; `levels`
    (the default) drops it so that every bit carries a label level.
    """
    K = _check_height(K)
    first = 2 if _check_layout(layout) == "levels" else 1
    return list(range(first, K + 1))


def segment_sizes(n_bits: int, K: int, layout: str = "levels") -> list[int]:
    """Bits per segment: equal floor(L / n_segments) shares, the last segment takes the rest."""
    K = _check_height(K)
    n_seg = len(segment_levels(K, layout))
    if isinstance(n_bits, bool) or not isinstance(n_bits, int | np.integer):
        raise ValueError(f"n_bits must be an integer, got {n_bits!r}")
    if n_bits < n_seg:
        raise ValueError(
            f"n_bits={n_bits} is too small for K={K} with layout {layout!r}: "
            f"it needs at least {n_seg} bits (one per segment)"
        )
    share = int(n_bits) // n_seg
    return [share] * (n_seg - 1) + [int(n_bits) - share * (n_seg - 1)]


def segment_weights(K: int, layout: str = "levels") -> np.ndarray:
    """u_k (Eq. 2) of each segment's level: the weights of the weighted Hamming (Eq. 4)."""
    levels = np.asarray(segment_levels(K, layout))
    return layer_weights(K)[levels - 1]


def segment_integer_weights(K: int, layout: str = "levels") -> np.ndarray:
    """Integer segment weights K+1-k, for exact integer distances and deterministic ties."""
    levels = np.asarray(segment_levels(K, layout))
    return integer_layer_weights(K)[levels - 1]
