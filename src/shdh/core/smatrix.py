"""The S artifact: the similarity S of a whole data set (paper Eq. 3) in a compact, checked file.

S is never stored N x N: what defines it is every item's ancestors and the K level weights
(shdh.core.similarity computes any block of it from those), plus, for the statistics a user
reads, the exact shared depths of a seeded random sample of items. build_smatrix makes it,
SMatrix.save and SMatrix.load write and read it (written atomically, checked field by field).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from shdh.core.level_weights import integer_form
from shdh.core.similarity import (
    check_ancestors,
    check_weights,
    shared_levels,
    similarity,
    similarity_by_shared,
)
from shdh.runtime.array_files import READ_ERRORS, reason
from shdh.runtime.atomic import atomic_path

FORMAT = "shdh-smatrix/1"


def _exact_integer_weights(weights: np.ndarray) -> np.ndarray:
    """w_k = u_k K(K-1)/2, requiring it to be an integer (true for Eq. 2)."""
    ints, scale = integer_form(weights)
    if not np.allclose(ints / scale, weights, rtol=0, atol=1e-12):
        raise ValueError(
            f"weights {weights} are not multiples of 1/{scale}; SMatrix needs weights with an "
            "exact integer form (Eq. 2's u_k = (K+1-k) / (K(K-1)/2) has one)"
        )
    return ints


_FIELDS = {  # key: (dtype, allowed numbers of dimensions)
    "ancestors": (np.int32, (2, 3)),  # (N, K) matrix or (N, K, M) sets
    "weights": (np.float64, (1,)),
    "int_weights": (np.int64, (1,)),
    "s_by_shared": (np.float64, (1,)),
    "sample_idx": (np.int64, (1,)),
    "sample_shared": (np.int8, (2,)),
}


@dataclass(eq=False)
class SMatrix:
    """The compact form of S: ancestors + weights, plus the exact S of a random item sample.

    Training and evaluation cut the blocks they need with block(); the sample gives shallow
    baselines (KSH, COSDISH) their labelled pairs and a quick check that the artifact is sane.
    """

    ancestors: np.ndarray  # (N, K) int32, -1 below shallow leaves; or (N, K, M) sets, -1 padded
    weights: np.ndarray  # (K,) float64, u_k of Eq. 2
    int_weights: np.ndarray  # (K,) int64, u_k * K(K-1)/2
    s_by_shared: np.ndarray  # (K,) float64, s as a function of shared levels r
    sample_idx: np.ndarray  # (S,) int64, sorted item indices (may be empty)
    sample_shared: np.ndarray  # (S, S) int8, r on the sample

    def __post_init__(self) -> None:
        _validate(self, "SMatrix")

    @property
    def n_items(self) -> int:
        return int(self.ancestors.shape[0])

    def block(self, rows: np.ndarray | slice, cols: np.ndarray | slice) -> np.ndarray:
        """Eq. 3 for items rows x cols (index arrays or slices). float32."""
        return similarity(self.ancestors[rows], self.ancestors[cols], self.weights)

    def shared_block(self, rows: np.ndarray | slice, cols: np.ndarray | slice) -> np.ndarray:
        """Shared non-root levels r for rows x cols. int8."""
        return shared_levels(self.ancestors[rows], self.ancestors[cols])

    def sample_similarity(self) -> np.ndarray:
        """(S, S) float32 Eq. 3 on the sample, looked up from r (see similarity_by_shared)."""
        return self.s_by_shared.astype(np.float32)[self.sample_shared]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write an .npz atomically (temporary file in the same folder, then rename)."""
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, format=np.array(FORMAT), **{k: getattr(self, k) for k in _FIELDS})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SMatrix:
        """Read and validate an .npz written by save(); errors name the file and the key."""
        try:
            loaded = np.load(path, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise ValueError(f"holds a single {type(loaded).__name__}, not named arrays")
            with loaded as npz:
                data = {k: npz[k] for k in npz.files}
        except READ_ERRORS as err:
            raise ValueError(f"{path}: cannot read S matrix (.npz): {reason(err)}") from None
        for key in ("format", *_FIELDS):
            if key not in data:
                raise ValueError(f"{path}: missing key {key!r}")
        if data["format"].shape != () or str(data["format"]) != FORMAT:
            raise ValueError(f"{path}: key 'format' is {data['format']!r}, expected {FORMAT!r}")
        obj = cls.__new__(cls)
        for key in _FIELDS:
            setattr(obj, key, data[key])
        _validate(obj, str(path))
        return obj


def _validate(sm: SMatrix, source: str) -> None:
    """Each field's dtype and shape, the shapes agreeing on N, K and S, ids and indices in
    range, and the derived fields matching the weights; errors name `source` and the key."""
    for key, (dtype, ndims) in _FIELDS.items():
        arr = getattr(sm, key)
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim not in ndims:
            got = f"{arr.dtype} with {arr.ndim} dims" if isinstance(arr, np.ndarray) else arr
            dims = " or ".join(f"{d}-D" for d in ndims)
            raise ValueError(
                f"{source}: key {key!r} must be a {dims} {np.dtype(dtype)} array, got {got}"
            )
    n, K = sm.ancestors.shape[:2]
    if sm.ancestors.ndim == 3 and sm.ancestors.shape[2] == 0:
        raise ValueError(f"{source}: key 'ancestors' has shape {sm.ancestors.shape}: M >= 1")
    m = sm.sample_idx.shape[0]
    for key in ("weights", "int_weights", "s_by_shared"):
        if getattr(sm, key).shape != (K,):
            raise ValueError(f"{source}: key {key!r} must have shape ({K},) to match K={K}")
    if sm.sample_shared.shape != (m, m):
        raise ValueError(
            f"{source}: key 'sample_shared' must have shape ({m}, {m}) to match sample_idx, "
            f"got {sm.sample_shared.shape}"
        )
    if n and (sm.ancestors.min() < -1):
        raise ValueError(f"{source}: key 'ancestors' holds ids below -1")
    if m and (sm.sample_idx.min() < 0 or sm.sample_idx.max() >= n):
        raise ValueError(f"{source}: key 'sample_idx' holds indices outside 0..{n - 1}")
    if m and (sm.sample_shared.min() < 0 or sm.sample_shared.max() > K - 1):
        raise ValueError(f"{source}: key 'sample_shared' holds values outside 0..{K - 1}")
    if not np.allclose(sm.s_by_shared, similarity_by_shared(sm.weights), atol=1e-12):
        raise ValueError(f"{source}: key 's_by_shared' does not match key 'weights'")
    _, scale = integer_form(sm.weights)
    if not np.allclose(sm.int_weights / scale, sm.weights, rtol=0, atol=1e-12):
        raise ValueError(f"{source}: key 'int_weights' is not weights * {scale}")


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique of an int array (flattened, sorted, distinct), by one sort.

    numpy 2.4's np.unique hashes the values first: 1.5 s for the 900,000-item training pool of
    a 1,000,000-item data set on 2 cores, a quarter of the whole S-matrix step; one sort takes
    0.04 s (benchmarks/smatrix_scale.py)."""
    flat = np.sort(values, axis=None)
    if flat.size == 0:
        return flat
    return flat[np.concatenate(([True], flat[1:] != flat[:-1]))]


def build_smatrix(
    ancestors: np.ndarray,
    weights: np.ndarray,
    *,
    sample_size: int = 2000,
    seed: int = 0,
    pool: np.ndarray | None = None,
) -> SMatrix:
    """Build the compact S artifact; memory is O(N K M + sample_size^2), never O(N^2).

    ancestors: an (N, K) matrix or (N, K, M) sets (stored as given, as int32).

    The sample is drawn without replacement from `pool` (row indices; default all rows) with
    np.random.default_rng(seed) and sorted, so the same inputs give the same file. Passing the
    training pool keeps query items out of what supervised methods learn from. sample_size is
    capped at the pool size; 0 means no sample.
    """
    anc = check_ancestors(ancestors, "ancestors")
    n, K = anc.shape[:2]
    w = check_weights(weights, K).astype(np.float64)
    if isinstance(sample_size, bool) or not isinstance(sample_size, int | np.integer):
        raise ValueError(f"sample_size must be an integer, got {sample_size!r}")
    if sample_size < 0:
        raise ValueError(f"sample_size must be >= 0, got {sample_size}")
    pool = np.arange(n) if pool is None else _sorted_unique(np.asarray(pool, dtype=np.int64))
    if pool.size and (pool[0] < 0 or pool[-1] >= n):
        raise ValueError(f"pool holds row indices outside [0, {n})")
    m = min(int(sample_size), len(pool))
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(pool, size=m, replace=False)).astype(np.int64)
    anc32 = np.ascontiguousarray(anc, dtype=np.int32)
    sample = anc32[idx]
    return SMatrix(
        ancestors=anc32,
        weights=w,
        int_weights=_exact_integer_weights(w),
        s_by_shared=similarity_by_shared(w),
        sample_idx=idx,
        sample_shared=shared_levels(sample, sample),
    )
