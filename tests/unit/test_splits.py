"""Query / database splits: the paper's protocol, determinism, and file validation."""

import os

import numpy as np
import pytest

from shdh.data import splits as splits_mod
from shdh.data.idx import DataFormatError
from shdh.data.splits import Split, load_split, make_split, save_split, training_subset


def test_paper_protocol_sizes_and_coverage():
    split = make_split(70000, query_fraction=0.1, seed=0)
    assert len(split.query_idx) == 7000 and len(split.db_idx) == 63000
    assert split.query_idx.dtype == np.int64 and split.db_idx.dtype == np.int64
    assert np.intersect1d(split.query_idx, split.db_idx).size == 0
    np.testing.assert_array_equal(np.sort(np.r_[split.query_idx, split.db_idx]), np.arange(70000))
    assert (split.seed, split.query_fraction) == (0, 0.1)


def test_pinned_small_split():
    # Pins the generator stream: a numpy change that alters splits must show up here.
    split = make_split(10, query_fraction=0.2, seed=0)
    assert split.query_idx.tolist() == [4, 6]
    assert split.db_idx.tolist() == [2, 7, 3, 5, 9, 0, 8, 1]


def test_query_count_is_rounded():
    assert len(make_split(25, query_fraction=0.1).query_idx) == round(2.5)
    assert len(make_split(27, query_fraction=0.1).query_idx) == 3
    assert len(make_split(2, query_fraction=0.5).query_idx) == 1


def test_deterministic_for_a_seed_and_different_across_seeds():
    a, b = make_split(1000, seed=7), make_split(1000, seed=7)
    np.testing.assert_array_equal(a.query_idx, b.query_idx)
    np.testing.assert_array_equal(a.db_idx, b.db_idx)
    c = make_split(1000, seed=8)
    assert not np.array_equal(a.db_idx, c.db_idx)
    assert not np.array_equal(np.sort(a.query_idx), np.sort(c.query_idx))


def test_orders_are_random_not_sorted():
    split = make_split(1000, seed=0)
    for idx in (split.query_idx, split.db_idx):
        assert not np.all(np.diff(idx) > 0)
        assert not np.all(np.diff(idx) < 0)


def test_database_is_not_class_sorted():
    n = 10000
    labels = np.arange(n) // (n // 10)  # a class-sorted dataset, like many upstream files
    split = make_split(n, seed=0)
    db_labels = labels[split.db_idx]
    changes = np.count_nonzero(np.diff(db_labels))
    # A class-sorted order has 9 changes; a random order about 0.9 * len(db).
    assert changes > 0.8 * len(db_labels)
    # Every class appears within the first 100 database items.
    assert set(db_labels[:100]) == set(range(10))


@pytest.mark.parametrize(
    ("n", "fraction", "message"),
    [
        (100, 0.0, "query_fraction: must be in"),
        (100, 1.0, "query_fraction: must be in"),
        (100, 1.5, "query_fraction: must be in"),
        (5, 0.01, "gives 0 queries"),
        (5, 0.95, "gives 5 queries"),
        (1, 0.5, "n_items"),
        (10.5, 0.1, "n_items"),
    ],
)
def test_make_split_rejects_bad_arguments(n, fraction, message):
    with pytest.raises(ValueError, match=message):
        make_split(n, query_fraction=fraction)


def test_training_subset_is_a_nested_prefix():
    split = make_split(1000, seed=3)
    small, large = training_subset(split, 10), training_subset(split, 500)
    np.testing.assert_array_equal(small, split.db_idx[:10])
    np.testing.assert_array_equal(large[:10], small)
    np.testing.assert_array_equal(training_subset(split, None), split.db_idx)
    np.testing.assert_array_equal(training_subset(split, 10**6), split.db_idx)
    small[0] = -1  # a copy: the split is unchanged
    assert split.db_idx[0] != -1
    assert np.intersect1d(large, split.query_idx).size == 0


@pytest.mark.parametrize("n_train", [0, -5, 2.5])
def test_training_subset_rejects_bad_sizes(n_train):
    with pytest.raises(ValueError, match="n_train"):
        training_subset(make_split(100), n_train)


# --- files ----------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    split = make_split(500, query_fraction=0.2, seed=11)
    path = save_split(split, tmp_path / "sub" / "split.npz")
    assert os.listdir(tmp_path / "sub") == ["split.npz"]
    back = load_split(path, n_items=500)
    np.testing.assert_array_equal(back.query_idx, split.query_idx)
    np.testing.assert_array_equal(back.db_idx, split.db_idx)
    assert (back.seed, back.query_fraction) == (11, 0.2)
    assert back.db_idx.dtype == np.int64


def test_failed_save_leaves_previous_file(tmp_path, monkeypatch):
    path = save_split(make_split(100, seed=0), tmp_path / "s.npz")
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(splits_mod.np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        save_split(make_split(100, seed=1), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["s.npz"]


def _write(path, **fields):
    base = {
        "query_idx": np.array([0, 1], dtype=np.int64),
        "db_idx": np.arange(2, 20, dtype=np.int64),
        "seed": np.int64(0),
        "query_fraction": np.float64(0.1),
    }
    base.update(fields)
    np.savez(path, **{k: v for k, v in base.items() if v is not None})
    return path


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"db_idx": None}, "db_idx: missing"),
        ({"query_idx": np.array([0, 2])}, r"query_idx/db_idx: 1 items are both"),
        ({"db_idx": np.r_[2, np.arange(2, 19)]}, "db_idx: duplicate indices"),
        ({"query_idx": np.array([-1, 0])}, "query_idx: negative index -1"),
        ({"query_idx": np.array([0.0, 1.0])}, "query_idx: expected a non-empty 1-D integer"),
        ({"query_idx": np.zeros(0, np.int64)}, "query_idx: expected a non-empty"),
        ({"seed": np.array([0, 1])}, "seed: expected a scalar"),
        ({"query_fraction": np.float64(1.0)}, r"query_fraction: 1.0 not in \(0, 1\)"),
        ({"query_fraction": np.float64(0.5)}, "query_idx: 2 queries, but query_fraction 0.5"),
    ],
)
def test_load_rejects_bad_files(tmp_path, fields, message):
    path = _write(tmp_path / "bad.npz", **fields)
    with pytest.raises(DataFormatError, match=rf"bad\.npz: {message}"):
        load_split(path)


def test_load_checks_against_dataset_size(tmp_path):
    path = _write(tmp_path / "s.npz")
    assert len(load_split(path, n_items=20).db_idx) == 18
    with pytest.raises(DataFormatError, match=r"s\.npz: query_idx/db_idx: cover 20 of 21 items"):
        load_split(path, n_items=21)
    with pytest.raises(DataFormatError, match=r"s\.npz: db_idx: index 19 out of range for 19"):
        load_split(path, n_items=19)


def test_load_rejects_non_npz_and_missing(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(DataFormatError, match=r"junk\.npz: unreadable"):
        load_split(tmp_path / "junk.npz")
    with pytest.raises(DataFormatError, match=r"absent\.npz: missing"):
        load_split(tmp_path / "absent.npz")


def test_save_rejects_invalid_split(tmp_path):
    bad = Split(np.array([0, 1]), np.array([1, 2]), seed=0, query_fraction=0.5)
    with pytest.raises(DataFormatError, match="both query and database"):
        save_split(bad, tmp_path / "s.npz")
    assert os.listdir(tmp_path) == []
