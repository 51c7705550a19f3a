"""The codes-file contract: round trip, atomic write, and one clear error per bad file."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from shdh.core.codes_file import (
    KEYS,
    Codes,
    CodesFileError,
    evaluate_codes_file,
    load_codes,
    save_codes,
)
from shdh.core.metrics import evaluate
from shdh.ranking.exact import pack_codes

ANCESTORS = np.array([[0, 1, 3], [0, 1, 4], [0, 2, 5], [0, 2, 6]], dtype=np.int32)


def make_codes(n_q: int = 5, n_db: int = 30, n_bits: int = 13, seed: int = 0) -> Codes:
    rng = np.random.default_rng(seed)
    q_leaf, db_leaf = rng.integers(0, 4, n_q), rng.integers(0, 4, n_db)
    signs = np.array([-1, 1], dtype=np.int8)
    return Codes(
        query_codes=pack_codes(rng.choice(signs, size=(n_q, n_bits))),
        db_codes=pack_codes(rng.choice(signs, size=(n_db, n_bits))),
        n_bits=n_bits,
        segment_sizes=np.array([7, n_bits - 7]),
        segment_weights=np.array([2 / 3, 1 / 3]),
        query_ancestors=ANCESTORS[q_leaf],
        db_ancestors=ANCESTORS[db_leaf],
        query_ids=np.arange(n_q),
        db_ids=np.array([f"img{i:03d}" for i in range(n_db)]),
    )


def write_raw(path: Path, **overrides) -> Path:
    """Write a file with np.savez directly, bypassing save_codes' validation."""
    arrays = {k: getattr(make_codes(), k) for k in KEYS}
    arrays.update(overrides)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_round_trip(tmp_path: Path) -> None:
    codes = make_codes()
    path = tmp_path / "codes.npz"
    save_codes(path, codes)
    loaded = load_codes(path)
    for field in dataclasses.fields(Codes):
        np.testing.assert_array_equal(getattr(loaded, field.name), getattr(codes, field.name))
    assert loaded.n_bits == 13 and isinstance(loaded.n_bits, int)
    assert loaded.query_ancestors.dtype == np.int32
    assert loaded.segment_weights.dtype == np.float64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npz"]  # no temporary left


def test_save_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "codes.npz"
    save_codes(path, make_codes(seed=1))
    save_codes(path, make_codes(seed=2, n_db=12))
    assert load_codes(path).db_codes.shape == (12, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["codes.npz"]


def test_save_of_invalid_codes_writes_nothing(tmp_path: Path) -> None:
    codes = dataclasses.replace(make_codes(), db_ids=np.arange(3))
    with pytest.raises(CodesFileError, match="'db_ids' has 3 entries but 'db_codes' has 30"):
        save_codes(tmp_path / "codes.npz", codes)
    assert list(tmp_path.iterdir()) == []


def test_save_without_npz_suffix_keeps_the_name(tmp_path: Path) -> None:
    path = tmp_path / "codes.bin"
    save_codes(path, make_codes())
    assert [p.name for p in tmp_path.iterdir()] == ["codes.bin"]
    assert load_codes(path).n_bits == 13


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"db_ids": None}, "codes.npz: missing key(s) 'db_ids'"),
        (
            {"db_ancestors": np.tile(ANCESTORS, (8, 1))[:29]},
            "codes.npz: key 'db_ancestors' has 29 rows but 'db_codes' has 30",
        ),
        (
            {"query_ids": np.arange(4)},
            "codes.npz: key 'query_ids' has 4 entries but 'query_codes' has 5",
        ),
        ({"n_bits": np.int64(20)}, "key 'query_codes' has 2 bytes per code but n_bits = 20"),
        ({"n_bits": np.int64(16)}, "key 'segment_sizes' sums to 13 but n_bits = 16"),
        ({"n_bits": np.float64(13)}, "key 'n_bits' must be a 0-D integer array"),
        ({"segment_sizes": np.array([7, 5])}, "key 'segment_sizes' sums to 12 but n_bits = 13"),
        ({"segment_sizes": np.array([13, 0])}, "key 'segment_sizes' must be non-empty and >= 1"),
        (
            {"segment_weights": np.array([0.5, 0.25, 0.25])},
            "key 'segment_weights' has 3 entries but 'segment_sizes' has 2",
        ),
        ({"segment_weights": np.array([0.7071, 0.5])}, "key 'segment_weights': segment weight"),
        ({"db_codes": np.zeros((30, 2), dtype=np.int8)}, "key 'db_codes' must be a 2-D uint8"),
        ({"db_codes": np.full((30, 2), 0xFF, dtype=np.uint8)}, "key 'db_codes' has bits set"),
        (
            {"query_ancestors": ANCESTORS[np.zeros(5, int), :2]},
            "key 'query_ancestors' has K = 2 levels but 'db_ancestors' has 3",
        ),
        ({"db_ancestors": np.zeros((30, 3))}, "key 'db_ancestors' must be an integer (N, K)"),
        ({"db_ancestors": np.full((30, 3), -2)}, "key 'db_ancestors' holds ids outside"),
        ({"db_ids": np.arange(60).reshape(30, 2)}, "key 'db_ids' must be a 1-D"),
        (
            {"query_codes": np.zeros((0, 2), np.uint8), "query_ids": np.arange(0)},
            "key 'query_codes' holds no codes: a file needs one item at least",
        ),
    ],
)
def test_bad_file_is_named_with_key_and_problem(tmp_path: Path, overrides, message) -> None:
    path = write_raw(tmp_path / "codes.npz", **overrides)
    with pytest.raises(CodesFileError) as info:
        load_codes(path)
    assert message in str(info.value)
    assert "codes.npz" in str(info.value)


def test_corrupt_and_non_npz_files(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive at all")
    with pytest.raises(CodesFileError, match="garbage.npz: not an .npz archive") as info:
        load_codes(garbage)
    assert "pickle" not in str(info.value)  # numpy's advice to load it unsafely is not passed on

    good = save_path = tmp_path / "truncated.npz"
    save_codes(save_path, make_codes())
    good.write_bytes(good.read_bytes()[:200])
    with pytest.raises(CodesFileError, match="truncated.npz"):
        load_codes(good)

    npy = tmp_path / "array.npz"
    with npy.open("wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(CodesFileError, match="array.npz: not an .npz archive"):
        load_codes(npy)

    damaged = tmp_path / "damaged.npz"
    save_codes(damaged, make_codes())
    data = bytearray(damaged.read_bytes())
    with zipfile.ZipFile(damaged) as zf:
        info = zf.getinfo("db_codes.npy")
    middle = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
    data[middle] ^= 0xFF  # flip a byte inside a member: the CRC check fails on read
    damaged.write_bytes(bytes(data))
    with pytest.raises(CodesFileError, match="damaged.npz"):
        load_codes(damaged)

    with pytest.raises(CodesFileError, match="no such codes file"):
        load_codes(tmp_path / "missing.npz")
    with pytest.raises(CodesFileError, match=f"^{tmp_path}: a folder; give one codes file"):
        load_codes(tmp_path)
    with pytest.raises(CodesFileError, match=f"^{damaged}: "):  # the whole path, not its name
        load_codes(damaged)


def test_evaluate_codes_file_matches_metrics_evaluate(tmp_path: Path) -> None:
    codes = make_codes(n_db=60)
    path = tmp_path / "codes.npz"
    save_codes(path, codes)
    result = evaluate_codes_file(path, n=10)
    expected, _ = evaluate(
        codes.query_codes,
        codes.db_codes,
        codes.query_ancestors,
        codes.db_ancestors,
        codes.segment_sizes,
        codes.segment_weights,
        n=10,
        map_depths=(1000, None),
        mahp_depths=(2500,),
    )
    assert result == expected
    keys = {"acg@10", "dcg@10", "ndcg@10", "ndcg_list@10", "wr@100", "wr@1000", "wr@5000"}
    keys |= {"map@1000", "map@all", "mahp@2500"}  # the peers' metrics, beside the paper's
    assert set(json.loads(json.dumps(result))) == keys


def test_failed_write_leaves_neither_file_nor_temporary(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "codes.npz"
    save_codes(path, make_codes(seed=1))
    before = path.read_bytes()

    def broken_savez(file, **arrays):
        file.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        save_codes(path, make_codes(seed=2))
    assert [p.name for p in tmp_path.iterdir()] == ["codes.npz"]
    assert path.read_bytes() == before
