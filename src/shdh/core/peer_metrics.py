"""The metrics other hashing work reports, beside the paper's, so that this project's numbers can
be set next to theirs: mAP@R as DeepHash-pytorch and cisip-FIRe compute it, and mAHP@R as HPDH
(Hierarchical Deep Hashing) reports it for label hierarchies.

- mAP@R: an item is relevant when it shares the query's finest label (its leaf class; for
  multi-label items, one of the labels at its deepest level: shdh.core.similarity.finest_match).
  AP@R is the mean, over the relevant items among the top R, of the precision at each one's rank,
  divided by the number of relevant items found in the top R (DeepHash-pytorch's CalcTopMap);
  over the whole database (R = all) that is the usual average precision. A query with nothing
  relevant in its top R scores 0.
- mAHP@R: with r the number of shared non-root levels (the relevance of ACG and DCG), the
  hierarchical precision HP@k = sum_{i<=k} r_i / sum_{i<=k} r*_i compares the top k with the best
  possible top k of the whole database (r* sorted descending), and AHP@R is the area under HP@k
  for k = 1..R by the trapezoid rule, divided by R:
  (sum_{k=1..R} HP@k - (HP@1 + HP@R) / 2) / R (Deng, Berg and Fei-Fei, CVPR 2011; Barz and
  Denzler, WACV 2019). A query with no relevant item in the database scores 0.

Both take ranked lists (Q, R), in rank order, and return one value per query; shdh.core.metrics
averages them over queries.
"""

from __future__ import annotations

import numpy as np

# The depths the peers report: mAP over the top 1,000 and over the whole database (None), and
# HPDH's mAHP@2,500.
MAP_DEPTHS: tuple[int | None, ...] = (1000, None)
MAHP_DEPTHS: tuple[int, ...] = (2500,)


def _ranked(name: str, values: np.ndarray, dtype: type) -> np.ndarray:
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[1] == 0:
        raise ValueError(f"{name} must be a 2-D (Q, R) array with R >= 1, got {values.shape}")
    return values.astype(dtype, copy=False)


def average_precision(relevant: np.ndarray) -> np.ndarray:
    """AP@R of each ranked list, relevant (Q, R) bool in rank order."""
    rel = _ranked("relevant", relevant, bool)
    hits = np.cumsum(rel, axis=1)
    precision = hits / np.arange(1, rel.shape[1] + 1)
    found = hits[:, -1].astype(np.float64)
    total = np.where(rel, precision, 0.0).sum(axis=1)
    return np.divide(total, found, out=np.zeros_like(found), where=found > 0)


def average_hierarchical_precision(rel: np.ndarray, ideal_rel: np.ndarray) -> np.ndarray:
    """AHP@R of each ranked list: rel (Q, R) the relevance in rank order, ideal_rel (Q, R) the
    database's best R relevances, descending (shdh.core.metrics.database_ideal)."""
    rel = _ranked("rel", rel, np.float64)
    ideal = _ranked("ideal_rel", ideal_rel, np.float64)
    if rel.shape != ideal.shape:
        raise ValueError(f"rel has shape {rel.shape} but ideal_rel has {ideal.shape}")
    best = np.cumsum(ideal, axis=1)
    hp = np.divide(np.cumsum(rel, axis=1), best, out=np.zeros_like(best), where=best > 0)
    depth = rel.shape[1]
    return (hp.sum(axis=1) - (hp[:, 0] + hp[:, -1]) / 2.0) / depth


def depth_name(depth: int | None) -> str:
    """The metric's suffix: @1000, or @all for the whole database."""
    return "all" if depth is None else str(depth)
