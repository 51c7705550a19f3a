"""Hierarchical similarity (paper Eq. 1-3) on blocks of items, never N x N for a whole data set.

s_ij depends only on which levels two items share, so S is fully described by the items'
ancestors plus K weights. A dense S for 54,000 items would be 11.7 GB of float32; here every
function works on a block anc_a x anc_b, looping over the few levels and keeping A x B
intermediates in bool / int8.

Ancestors come in two layouts (the shared data contract):
- single-label data: an (N, K) int matrix (hierarchy.LabelTree.ancestors), one node per level;
- multi-label data (IAPRTC-12): (N, K, M) int sets, [i, k, :] the level-k ancestors of all of
  item i's labels, padded with -1. Eq. 1 generalised: s^k_ij = 1 iff the two level-k sets
  intersect. Sets with M = 1 give exactly the matrix results (they are turned into matrices).

-1 means "no node at this level" (a leaf above level K, or set padding) and never matches, not
even another -1. Column 0 is the root, which every item shares, so it never counts (s^1 = 0).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from shdh.core.level_weights import integer_form

DENSE_LIMIT = 20_000
_CHUNK_CELLS = 1 << 22  # cells of one float32 product block in sets_intersect (16 MiB)


class DenseTooLargeError(ValueError):
    """A dense N x N similarity matrix was requested for too many items."""


_MAX_ID = np.iinfo(np.int32).max  # ancestors are stored as int32


def check_ancestor_shape(
    shape: tuple[int, ...],
    name: str,
    *,
    rows: int | None = None,
    rows_of: str = "there are items:",
    n_levels: int | None = None,
) -> None:
    """The shape of Eq. 1's input, the one check every caller makes: (N, K) node ids, one per
    level, or (N, K, M) ancestor sets with M >= 1; N = rows (`rows_of` says whose rows, as in
    "{name} has 3 rows but {rows_of} 4") and K = n_levels where given. The training loss checks
    only this: reading a GPU tensor's values would wait on the card."""
    shape = tuple(int(n) for n in shape)
    if len(shape) not in (2, 3):
        raise ValueError(
            f"{name} must be an integer (N, K) ancestor matrix or (N, K, M) ancestor sets, "
            f"got shape {shape}"
        )
    if len(shape) == 3 and shape[2] < 1:
        raise ValueError(f"{name} has shape {shape}: (N, K, M) ancestor sets need M >= 1")
    if rows is not None and shape[0] != rows:
        raise ValueError(f"{name} has {shape[0]} rows but {rows_of} {rows}")
    if n_levels is not None and shape[1] != n_levels:
        raise ValueError(f"{name} has K = {shape[1]} levels, not the tree's {n_levels}")


def check_ancestors(
    anc: np.ndarray, name: str, *, rows: int | None = None, rows_of: str = "there are items:"
) -> np.ndarray:
    """`anc` as an array: check_ancestor_shape's shape, integer node ids >= 0 or -1 (no node)
    that fit the int32 they are stored as; an error names `name`."""
    anc = np.asarray(anc)
    check_ancestor_shape(anc.shape, name, rows=rows, rows_of=rows_of)
    if not np.issubdtype(anc.dtype, np.integer):
        raise ValueError(
            f"{name} must be an integer (N, K) ancestor matrix or (N, K, M) ancestor sets, "
            f"got {anc.dtype} {anc.shape}"
        )
    if anc.size and (anc.min() < -1 or anc.max() > _MAX_ID):
        raise ValueError(
            f"{name} holds ids outside -1..2^31-1 ({anc.min()} to {anc.max()}; node ids are "
            ">= 0, -1 means no node)"
        )
    return anc


def check_pair(
    anc_a: np.ndarray,
    anc_b: np.ndarray,
    names: tuple[str, str] = ("anc_a", "anc_b"),
    rows: tuple[int | None, int | None] = (None, None),
    rows_of: tuple[str, str] = ("there are items:", "there are items:"),
) -> tuple[np.ndarray, np.ndarray]:
    """Two ancestor arrays checked (check_ancestors, each with its own name, rows and rows_of),
    of one tree's K levels, in one layout (same_layout)."""
    checked = [
        check_ancestors(*args[:2], rows=args[2], rows_of=args[3])
        for args in zip((anc_a, anc_b), names, rows, rows_of, strict=True)
    ]
    if checked[0].shape[1] != checked[1].shape[1]:
        raise ValueError(
            f"{names[0]} has K = {checked[0].shape[1]} levels but {names[1]} has "
            f"{checked[1].shape[1]}: both must come from the same tree"
        )
    return same_layout(*checked)


def same_layout(anc_a: np.ndarray, anc_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two checked ancestor arrays in one layout: matrices when neither holds more than one node
    per level (sets with M = 1 are matrices in disguise, and the matrix path is the fast one),
    otherwise both as sets (a matrix becomes sets with M = 1)."""
    anc_a, anc_b = (a[:, :, 0] if a.ndim == 3 and a.shape[2] == 1 else a for a in (anc_a, anc_b))
    if anc_a.ndim != anc_b.ndim:
        anc_a, anc_b = (a[:, :, None] if a.ndim == 2 else a for a in (anc_a, anc_b))
    return anc_a, anc_b


def check_weights(weights: np.ndarray, K: int, name: str = "weights") -> np.ndarray:
    w = np.asarray(weights)
    if w.shape != (K,):
        raise ValueError(f"{name} must have shape ({K},) to match K={K}, got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError(f"{name} must be finite, got {w}")
    return w


def _level_match(anc_a: np.ndarray, anc_b: np.ndarray, k: int) -> np.ndarray:
    """Eq. 1 at one 0-based level k >= 1: (A, B) bool; every Eq. 1-3 function goes through here.

    Matrices: a -1 in anc_a becomes -2, which no valid id equals, so "no node" matches nothing
    without an extra A x B mask. Sets: the level-k sets must intersect (sets_intersect).
    """
    if anc_a.ndim == 3:
        return sets_intersect(anc_a[:, k, :], anc_b[:, k, :])
    col_a = anc_a[:, k].astype(np.int64)
    col_a[col_a < 0] = -2
    return np.equal.outer(col_a, np.ascontiguousarray(anc_b[:, k], dtype=np.int64))


def sets_intersect(sets_a: np.ndarray, sets_b: np.ndarray) -> np.ndarray:
    """(A, B) bool: does row i of sets_a (A, Ma) share a node id with row j of sets_b (B, Mb)?
    -1 (padding) never matches.

    Each side becomes a multi-hot float32 matrix over the ids that both sides hold, and one
    matrix product counts the shared ids of every pair (exact: counts <= M). On 2,000 x 18,000
    items of a 276-node, K = 7 tree with 1-20 labels each (M = 15 / 18), the six non-root
    levels took 2.9 s this way and 53 s looping np.equal.outer over the Ma x Mb slot pairs (2
    shared cores). The product runs in row chunks so its float32 block stays at _CHUNK_CELLS.
    """
    out = np.zeros((sets_a.shape[0], sets_b.shape[0]), dtype=bool)
    ids = np.intersect1d(sets_a[sets_a >= 0], sets_b[sets_b >= 0])  # sorted, unique
    if ids.size == 0 or out.size == 0:
        return out
    hot_a, hot_b = _multi_hot(sets_a, ids), _multi_hot(sets_b, ids)
    step = max(1, _CHUNK_CELLS // out.shape[1])
    for start in range(0, out.shape[0], step):
        np.greater(hot_a[start : start + step] @ hot_b.T, 0, out=out[start : start + step])
    return out


def _multi_hot(sets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """(N, len(ids)) float32: 1 where row n holds ids[c]; ids outside `ids` (and -1) drop out."""
    pos = np.minimum(np.searchsorted(ids, sets), ids.size - 1)
    hit = ids[pos] == sets
    hot = np.zeros((sets.shape[0], ids.size), dtype=np.float32)
    rows = np.broadcast_to(np.arange(sets.shape[0])[:, None], sets.shape)
    hot[rows[hit], pos[hit]] = 1.0
    return hot


def finest_match(anc_a: np.ndarray, anc_b: np.ndarray) -> np.ndarray:
    """(A, B) bool: "same finest label", the pair label of the plain (non-hierarchical) methods.

    Matrices: the items' leaves (deepest node) are the same node. Sets: the node sets at each
    item's deepest level intersect. Node ids are unique across levels, so this needs both items
    to reach the same deepest level: an item labelled only with concepts shallower than another
    item's deepest one never matches it, exactly as a leaf at depth 3 never equals one at depth 4
    in the matrix case (and M = 1 sets give the matrix result). Rows without any node match
    nothing.
    """
    anc_a, anc_b = check_pair(anc_a, anc_b)
    fin_a, fin_b = _finest(anc_a), _finest(anc_b)
    if anc_a.ndim == 3:
        return sets_intersect(fin_a, fin_b)
    return np.equal.outer(fin_a, fin_b) & (fin_a >= 0)[:, None]


def _finest(anc: np.ndarray) -> np.ndarray:
    """Each item's node(s) at its deepest level with a node: (N,) or (N, M); -1 if it has none."""
    present = anc >= 0 if anc.ndim == 2 else (anc >= 0).any(axis=2)  # (N, K)
    deepest = anc.shape[1] - 1 - np.argmax(present[:, ::-1], axis=1)  # last level with a node
    return anc[np.arange(anc.shape[0]), deepest]


def iter_level_matches(anc_a: np.ndarray, anc_b: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(k, s^k block) for the 0-based non-root levels k = 1..K-1 in turn, (A, B) bool each: for
    callers that fold several quantities over the levels without an (A, B, K) array."""
    anc_a, anc_b = check_pair(anc_a, anc_b)
    for k in range(1, anc_a.shape[1]):
        yield k, _level_match(anc_a, anc_b, k)


def level_similarity(anc_a: np.ndarray, anc_b: np.ndarray) -> np.ndarray:
    """Eq. 1: s^k_ij = 1 iff i and j share a level-k ancestor (k >= 2). (A, B, K) bool."""
    anc_a, anc_b = check_pair(anc_a, anc_b)
    K = anc_a.shape[1]
    out = np.zeros((anc_a.shape[0], anc_b.shape[0], K), dtype=bool)
    for k in range(1, K):
        out[:, :, k] = _level_match(anc_a, anc_b, k)
    return out


def shared_levels(anc_a: np.ndarray, anc_b: np.ndarray) -> np.ndarray:
    """r_ij = sum_{k>=2} s^k_ij: the graded relevance the metrics use (ACG, DCG, NDCG). int8."""
    anc_a, anc_b = check_pair(anc_a, anc_b)
    r = np.zeros((anc_a.shape[0], anc_b.shape[0]), dtype=np.int8)
    for k in range(1, anc_a.shape[1]):
        np.add(r, _level_match(anc_a, anc_b, k).view(np.int8), out=r)  # same-dtype add: fast
    return r


def _integer_sum(anc_a: np.ndarray, anc_b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_k w_k s^k_ij for integer weights, in int8 when the weights allow (else int32).

    Eq. 2 weights scaled by K(K-1)/2 sum to at most 21 (K=7), so one int8 A x B buffer holds the
    whole sum and the big float32 block is allocated once, at the end.
    """
    small = int(np.abs(w[1:]).sum()) <= np.iinfo(np.int8).max
    acc = np.zeros((anc_a.shape[0], anc_b.shape[0]), dtype=np.int8 if small else np.int32)
    for k in range(1, anc_a.shape[1]):
        if w[k] == 0:
            continue
        eq = _level_match(anc_a, anc_b, k).view(np.int8)
        if small:
            np.multiply(eq, np.int8(w[k]), out=eq)
            np.add(acc, eq, out=acc)
        else:
            acc += np.multiply(eq, np.int32(w[k]), dtype=np.int32)
    return acc


def integer_gain(anc_a: np.ndarray, anc_b: np.ndarray, int_weights: np.ndarray) -> np.ndarray:
    """sum_k w_k s^k_ij with integer weights (K+1-k): exact, for ties and counting sorts. int32."""
    anc_a, anc_b = check_pair(anc_a, anc_b)
    w = check_weights(int_weights, anc_a.shape[1], "int_weights")
    if not np.issubdtype(w.dtype, np.integer):
        raise ValueError(f"int_weights must be integers, got dtype {w.dtype}")
    return _integer_sum(anc_a, anc_b, w).astype(np.int32, copy=False)


def gain(anc_a: np.ndarray, anc_b: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """g_ij = sum_k u_k s^k_ij = (s_ij + 1) / 2 in [0, 1]: the gain of weighted recall. float32.

    Eq. 2 weights are integers over K(K-1)/2; then g is summed exactly in int8 and divided once
    (correctly rounded). Other weights are summed level by level in float32.
    """
    anc_a, anc_b = check_pair(anc_a, anc_b)
    K = anc_a.shape[1]
    w = check_weights(weights, K).astype(np.float64)
    ints, scale = integer_form(w)
    if np.array_equal(ints / scale, w):
        return np.divide(_integer_sum(anc_a, anc_b, ints), np.float32(scale), dtype=np.float32)
    g = np.zeros((anc_a.shape[0], anc_b.shape[0]), dtype=np.float32)
    tmp = np.empty_like(g)
    for k in range(1, K):
        if w[k] != 0:
            np.multiply(_level_match(anc_a, anc_b, k), np.float32(w[k]), out=tmp)
            g += tmp
    return g


def similarity(anc_a: np.ndarray, anc_b: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Eq. 3: s_ij = 2 sum_k u_k s^k_ij - 1 in [-1, 1] (u_k from Eq. 2). float32 block."""
    s = gain(anc_a, anc_b, weights)
    s *= 2
    s -= 1
    return s


def similarity_by_shared(weights: np.ndarray) -> np.ndarray:
    """s as a function of r, the number of shared non-root levels: s[r] = 2 sum_{k=2}^{r+1} u_k - 1.

    Valid when matches are nested (sharing a level-k node implies sharing every level above).
    Single-label data: equal nodes have equal ancestors. Multi-label sets hold the level-k
    ancestors of ALL an item's labels, so a shared level-k node brings its shared parent into
    both level-(k-1) sets: nested too, as long as the sets are closed under "parent of"
    (LabelTree.ancestor_sets_of_labels builds them so). Only SMatrix.sample_similarity relies on
    this; the block functions sum the levels one by one.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size < 1 or not np.all(np.isfinite(w)):
        raise ValueError(f"weights must be a finite 1-D array, got {w}")
    cum = np.concatenate([[0.0], np.cumsum(w[1:])])
    return 2.0 * cum - 1.0


def dense_similarity(
    anc: np.ndarray, weights: np.ndarray, *, max_items: int = DENSE_LIMIT
) -> np.ndarray:
    """The full N x N Eq. 3 matrix of anc (N, K) or (N, K, M), only for small sets (tests)."""
    anc = check_ancestors(anc, "anc")
    n = anc.shape[0]
    if n > max_items:
        gb = n * n * 4 / 1e9
        raise DenseTooLargeError(
            f"a dense similarity matrix for N={n} items would be {n} x {n} float32 = {gb:.1f} GB "
            f"(limit max_items={max_items}); use similarity(anc[rows], anc[cols], weights) on "
            "blocks or SMatrix.block(rows, cols) instead"
        )
    return similarity(anc, anc, weights)
