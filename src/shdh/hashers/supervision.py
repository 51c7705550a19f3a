"""Pair labels for supervised hashers, computed in blocks from the S-matrix artifact.

Two modes, and only these separate the plain methods from their +H variants:
- "label": s_ij = +1 if i and j share the finest label (the paper's baselines: same fine
  class), else -1. Multi-label items (ancestor sets) share it when their node sets at their
  deepest level intersect (shdh.core.similarity.finest_match, which documents the choice);
- "hierarchical": s_ij of Eq. 3, in [-1, 1] (KSH+H, COSDISH+H).
Blocks are built on demand: supervised methods look at a 2,000-item sample (KSH) or sampled
columns (LFH, COSDISH), never at the full N x N matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shdh.core.similarity import finest_match, similarity

MODES = ("label", "hierarchical")


@dataclass(frozen=True)
class PairSimilarity:
    """s_ij between training items 0..n-1, given their ancestors (n, K) or ancestor sets
    (n, K, M), and u (K,)."""

    ancestors: np.ndarray
    weights: np.ndarray
    mode: str

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"PairSimilarity: mode must be one of {MODES}, got '{self.mode}'")
        if self.ancestors.ndim not in (2, 3) or self.ancestors.shape[1] != len(self.weights):
            raise ValueError(
                f"PairSimilarity: ancestors {self.ancestors.shape} do not match "
                f"{len(self.weights)} level weights (expected (n, K) or (n, K, M))"
            )

    @property
    def n_items(self) -> int:
        return len(self.ancestors)

    def block(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """(len(rows), len(cols)) float32 s_ij in [-1, 1]."""
        a, b = self.ancestors[rows], self.ancestors[cols]
        if self.mode == "hierarchical":
            return similarity(a, b, self.weights)  # Eq. 3
        return np.where(finest_match(a, b), 1.0, -1.0).astype(np.float32)

    def subset(self, rows: np.ndarray) -> PairSimilarity:
        return PairSimilarity(self.ancestors[rows], self.weights, self.mode)
