"""The faster paths added for the speed benchmarks give exactly the old results.

build_smatrix dedupes the training pool by one sort instead of np.unique (numpy 2.4 hashes, which
was a quarter of the S-matrix step at 1,000,000 items): the same pool, so the same sample.
"""

from __future__ import annotations

import numpy as np
import pytest

from shdh.core import smatrix

# --- S-matrix: the training pool, distinct and sorted, without np.unique's hashing ---------


@pytest.mark.parametrize(
    "pool",
    [
        np.array([], dtype=np.int64),
        np.array([5]),
        np.array([9, 3, 3, 7, 0, 9, 1]),
        np.arange(12).reshape(3, 4)[:, ::-1],
    ],
)
def test_sorted_unique_equals_np_unique(pool: np.ndarray) -> None:
    np.testing.assert_array_equal(smatrix._sorted_unique(pool), np.unique(pool))


def test_build_smatrix_sample_unchanged_with_duplicate_pool() -> None:
    rng = np.random.default_rng(3)
    anc = np.column_stack([np.zeros(500, int), rng.integers(1, 4, 500), rng.integers(4, 20, 500)])
    pool = rng.integers(0, 500, 800)  # duplicates, unsorted
    s = smatrix.build_smatrix(anc, np.array([0.0, 2 / 3, 1 / 3]), sample_size=50, pool=pool)
    expected = np.sort(np.random.default_rng(0).choice(np.unique(pool), 50, replace=False))
    np.testing.assert_array_equal(s.sample_idx, expected)
