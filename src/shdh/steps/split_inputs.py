"""The items a run is scored on, and what each kind of method encodes: the split's queries and
database with their ids and ancestors, the images, and the GIST features file's reader.

A module of its own so that the steps which only read these (the shallow fits, the score step,
the index step) do not depend on the code that computes the features (shdh.features.gist) or
on each other: an edit there reruns only the stages that execute it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.codes_file import Codes
from shdh.data.shards import select_rows
from shdh.ranking.exact import pack_codes
from shdh.runtime.array_files import load_array


@dataclass
class Split:
    """The items every method is scored on: the split's queries and database, their ids and
    ancestors, and the inputs each kind of method encodes (images, GIST features)."""

    q_idx: np.ndarray
    db_idx: np.ndarray
    ids: np.ndarray
    ancestors: np.ndarray
    dataset: str
    inputs: dict[str, np.ndarray]

    def codes(self, q: np.ndarray, db: np.ndarray, sizes: Any, weights: Any) -> Codes:
        """The codes file of {-1, +1} query and database codes, with the split's items."""
        return Codes(
            query_codes=pack_codes(q),
            db_codes=pack_codes(db),
            n_bits=q.shape[1],
            segment_sizes=np.asarray(sizes, dtype=np.int64),
            segment_weights=np.asarray(weights, dtype=np.float64),
            **self.items(),
        )

    def items(self) -> dict[str, np.ndarray]:
        return {
            "query_ancestors": self.ancestors[self.q_idx],
            "db_ancestors": self.ancestors[self.db_idx],
            "query_ids": self.ids[self.q_idx],
            "db_ids": self.ids[self.db_idx],
        }

    def encoded(self, kind: str, cache: dict) -> tuple[np.ndarray, np.ndarray]:
        """(queries, database) of one input kind, gathered once for every method (images in
        shards are not gathered, but read batch by batch as they are encoded: select_rows)."""
        if kind not in cache:
            X = self.inputs[kind]
            cache[kind] = (select_rows(X, self.q_idx), select_rows(X, self.db_idx))
        return cache[kind]


def load_split(
    prepared_dir: str | Path, smatrix_path: str | Path, features_path: str | Path | None
) -> Split:
    from shdh.steps.prepare import load_prepared
    from shdh.steps.smatrix import load_smatrix

    ds, split = load_prepared(prepared_dir)
    inputs: dict[str, np.ndarray] = {"images": ds.images}
    if features_path is not None and Path(features_path).exists():
        inputs["features"] = load_features(features_path, len(ds.ids))
    ancestors = load_smatrix(smatrix_path).ancestors
    return Split(split.query_idx, split.db_idx, ds.ids, ancestors, ds.name, inputs)


def load_features(path: str | Path, n_items: int) -> np.ndarray:
    path = Path(path)
    features = load_array(path, "the features", "rerun `shdh features`", mmap=True)
    if features.ndim != 2 or len(features) != n_items:
        raise ValueError(f"{path}: features have shape {features.shape}, expected ({n_items}, d)")
    return features
