"""Relevance and gain, what the metrics weigh each ranked item by (docs/method.md "Relevance
used by the metrics"), and the database's distinct ancestor rows they are computed against.

r(q, x) = the number of shared non-root levels and g(q, x) = sum_k u_k s^k_qx are computed from
ancestor matrices (N, K), column 0 the root, -1 = no node (never matches), or from multi-label
ancestor sets (N, K, M), -1 padded, where s^k_qx = 1 iff the level-k sets intersect
(shdh.core.similarity does the set matching). They depend only on an item's ancestors, and a
single-label database has few distinct rows (one per leaf class), so the evaluation computes them
against the distinct rows once per query and looks items up by row: a query's total gain and its
items by relevance (for the ideal DCG) then need no pass over N items. (Multi-label rows are
mostly distinct; the same code then simply scores every item.)
"""

from __future__ import annotations

import numpy as np

from shdh.core.level_weights import integer_form
from shdh.core.similarity import iter_level_matches

# Row keys above this would overflow int64 (see distinct_rows).
_KEY_LIMIT = 1 << 62


def shared_levels(q_anc: np.ndarray, x_anc: np.ndarray) -> np.ndarray:
    """Eq. 1 for k >= 2: s^k_qx = 1 where both items have the same node at level k (-1 never
    matches). Broadcasts over leading axes; returns bool (..., K-1)."""
    q, x = q_anc[..., 1:], x_anc[..., 1:]
    return (q == x) & (q >= 0)


def relevance(q_anc: np.ndarray, x_anc: np.ndarray) -> np.ndarray:
    """r(q, x) = number of shared non-root levels."""
    return shared_levels(q_anc, x_anc).sum(axis=-1)


def gain(q_anc: np.ndarray, x_anc: np.ndarray, u: np.ndarray) -> np.ndarray:
    """g(q, x) = sum_k u_k s^k_qx = (s_qx + 1) / 2 (Eq. 3 shifted into [0, 1])."""
    return shared_levels(q_anc, x_anc) @ u[1:]


def relevance_and_gain(
    q_anc: np.ndarray, x_anc: np.ndarray, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """r and g for every (query, item) pair, (Q, X) each, from ancestors in one layout.

    Matrices broadcast the level comparison. Sets take shdh.core.similarity's level matches one
    level at a time, so no (Q, X, K, M) array is ever held, and sum the gain exactly in integers
    (Eq. 2's u_k K(K-1)/2 = K+1-k) before one division.
    """
    if q_anc.ndim == 2:
        q, x = q_anc[:, None, :], x_anc[None, :, :]
        return relevance(q, x), gain(q, x, u)
    int_u, scale = integer_form(u)
    rel = np.zeros((q_anc.shape[0], x_anc.shape[0]), dtype=np.int8)
    gain_int = np.zeros(rel.shape, dtype=np.int32)
    for k, match in iter_level_matches(q_anc, x_anc):
        rel += match
        gain_int += match * int_u[k]
    return rel, gain_int / float(scale)


def distinct_rows(x_anc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct database ancestor rows (U, K[, M]), each item's row (N,) and each row's item
    count (U,), as np.unique(x_anc, axis=0) gives them (rows in lexicographic order); set slots
    that are padding in every row are dropped.

    np.unique sorts the rows as structured records, a quarter of a second for 63,000 items and
    the evaluation asks for every code set. Each row is made one int64 key that sorts as the
    row does (column by column, offset by the column's least value, in a mixed radix of the
    columns' spans), and the keys are sorted instead: the same rows, order and counts. Sets
    with too many or too wide columns for one int64 key go through np.unique itself."""
    flat = x_anc.reshape(x_anc.shape[0], -1).astype(np.int64)
    keys = _row_keys(flat)
    if keys is None:
        rows_u, row_of, row_count = np.unique(
            x_anc, axis=0, return_inverse=True, return_counts=True
        )
    else:
        _, first, row_of, row_count = np.unique(
            keys, return_index=True, return_inverse=True, return_counts=True
        )
        rows_u = x_anc[first]
    if x_anc.ndim == 3:
        rows_u = rows_u[:, :, (rows_u >= 0).any(axis=(0, 1))]
    return rows_u, row_of.reshape(-1), row_count


def _row_keys(flat: np.ndarray) -> np.ndarray | None:
    """(N,) int64 keys in the rows' lexicographic order, or None where they would overflow."""
    if flat.shape[0] == 0 or flat.shape[1] == 0:
        return None
    low = flat.min(axis=0)
    spans = flat.max(axis=0) - low + 1
    radix = 1
    for span in spans.tolist():
        radix *= span
        if radix >= _KEY_LIMIT:
            return None
    keys = np.zeros(flat.shape[0], dtype=np.int64)
    for column, span in enumerate(spans.tolist()):
        keys *= span
        keys += flat[:, column] - low[column]
    return keys


def relevance_counts(rel_u: np.ndarray, row_count: np.ndarray, n_rel: int) -> np.ndarray:
    """(Qc, n_rel) int64: per query, how many database items have relevance 0..n_rel-1, from
    the relevance of each distinct row (Qc, U) and the rows' item counts (U,)."""
    n_q = rel_u.shape[0]
    bins = rel_u.astype(np.intp) + (np.arange(n_q, dtype=np.intp) * n_rel)[:, None]
    weights = np.broadcast_to(row_count, rel_u.shape)
    counts = np.bincount(bins.ravel(), weights=weights.ravel(), minlength=n_q * n_rel)
    return np.rint(counts).astype(np.int64).reshape(n_q, n_rel)
