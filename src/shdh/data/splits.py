"""Query / database split, following the paper's protocol.

All items are pooled, a random 10% become queries and the other 90% form the database, which is
also the pool training samples are drawn from. The database is kept in a seeded random order
rather than sorted: retrieval breaks distance ties by ascending database position, and a
class-sorted database would turn those ties into a systematic bias for or against some classes.
Because the order is already random, any prefix of it is a random training subset, and subsets
of different sizes are nested.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shdh.data.idx import DataFormatError
from shdh.runtime.array_files import READ_ERRORS, reason
from shdh.runtime.atomic import atomic_path

_FIELDS = ("query_idx", "db_idx", "seed", "query_fraction")


@dataclass
class Split:
    """Row indices into a dataset: queries and database, both in seeded random order."""

    query_idx: np.ndarray
    db_idx: np.ndarray
    seed: int
    query_fraction: float


def _n_queries(n_items: int, query_fraction: float) -> int:
    if not 0.0 < query_fraction < 1.0:
        raise ValueError(f"data.query_fraction: must be in (0, 1), got {query_fraction}")
    n_query = round(query_fraction * n_items)
    if not 1 <= n_query <= n_items - 1:
        raise ValueError(
            f"data.query_fraction: {query_fraction} of {n_items} items gives {n_query} queries; "
            f"need at least one query and one database item"
        )
    return n_query


def make_split(n_items: int, *, query_fraction: float = 0.1, seed: int = 0) -> Split:
    """Randomly assign round(query_fraction * n_items) items to queries, the rest to the database.

    One permutation from ``np.random.default_rng(seed)`` gives both parts, so the split depends
    only on (n_items, query_fraction, seed).
    """
    if int(n_items) != n_items or n_items < 2:
        raise ValueError(f"n_items: need an integer >= 2, got {n_items}")
    n_query = _n_queries(int(n_items), query_fraction)
    order = np.random.default_rng(seed).permutation(int(n_items)).astype(np.int64)
    return Split(
        query_idx=order[:n_query],
        db_idx=order[n_query:],
        seed=int(seed),
        query_fraction=float(query_fraction),
    )


def training_subset(split: Split, n_train: int | None) -> np.ndarray:
    """The first ``n_train`` database items (all of them for None or a larger number).

    A prefix of a seeded random order is a random sample, and a smaller subset is always
    contained in a larger one, which keeps runs with different training sizes comparable.
    """
    if n_train is None:
        return split.db_idx.copy()
    if int(n_train) != n_train or n_train < 1:
        raise ValueError(f"n_train: need a positive integer or None, got {n_train}")
    return split.db_idx[: int(n_train)].copy()


def save_split(split: Split, path: str | os.PathLike[str]) -> Path:
    """Write ``split`` to an .npz file atomically (temporary sibling, then rename)."""
    path = Path(path)
    _validate(split, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "xb") as f:
        np.savez(
            f,
            query_idx=np.asarray(split.query_idx, dtype=np.int64),
            db_idx=np.asarray(split.db_idx, dtype=np.int64),
            seed=np.int64(split.seed),
            query_fraction=np.float64(split.query_fraction),
        )
    return path


def _validate(split: Split, where: str, n_items: int | None = None) -> None:
    """Raise DataFormatError naming ``where`` and the field if ``split`` is not a valid split."""
    for field in ("query_idx", "db_idx"):
        idx = np.asarray(getattr(split, field))
        if idx.ndim != 1 or idx.dtype.kind not in "iu" or idx.size == 0:
            raise DataFormatError(
                f"{where}: {field}: expected a non-empty 1-D integer array, got {idx.dtype} "
                f"{idx.shape}"
            )
        if idx.min() < 0:
            raise DataFormatError(f"{where}: {field}: negative index {int(idx.min())}")
        if n_items is not None and idx.max() >= n_items:
            raise DataFormatError(
                f"{where}: {field}: index {int(idx.max())} out of range for {n_items} items"
            )
        if len(np.unique(idx)) != len(idx):
            raise DataFormatError(f"{where}: {field}: duplicate indices")
    overlap = np.intersect1d(split.query_idx, split.db_idx)
    if overlap.size:
        raise DataFormatError(
            f"{where}: query_idx/db_idx: {overlap.size} items are both query and database, "
            f"e.g. {int(overlap[0])}"
        )
    total = len(split.query_idx) + len(split.db_idx)
    if n_items is not None and total != n_items:
        raise DataFormatError(f"{where}: query_idx/db_idx: cover {total} of {n_items} items")
    if not 0.0 < split.query_fraction < 1.0:
        raise DataFormatError(f"{where}: query_fraction: {split.query_fraction} not in (0, 1)")
    if len(split.query_idx) != round(split.query_fraction * total):
        raise DataFormatError(
            f"{where}: query_idx: {len(split.query_idx)} queries, but query_fraction "
            f"{split.query_fraction} of {total} items gives {round(split.query_fraction * total)}"
        )


def load_split(path: str | os.PathLike[str], *, n_items: int | None = None) -> Split:
    """Read and validate a split; with ``n_items`` also check it covers exactly that dataset."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: missing")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {f: npz[f] for f in _FIELDS if f in npz.files}
    except READ_ERRORS as exc:
        raise DataFormatError(f"{path}: unreadable .npz: {reason(exc)}") from exc
    for field in _FIELDS:
        if field not in arrays:
            raise DataFormatError(f"{path}: {field}: missing")
    for field in ("seed", "query_fraction"):
        if arrays[field].shape != ():
            raise DataFormatError(f"{path}: {field}: expected a scalar, got {arrays[field].shape}")
    split = Split(
        query_idx=arrays["query_idx"],
        db_idx=arrays["db_idx"],
        seed=int(arrays["seed"]),
        query_fraction=float(arrays["query_fraction"]),
    )
    _validate(split, str(path), n_items)
    split.query_idx = split.query_idx.astype(np.int64)
    split.db_idx = split.db_idx.astype(np.int64)
    return split
