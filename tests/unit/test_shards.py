"""Images stored as shards: the writer across shard boundaries, the kept-rows compaction, the
array-like reader (indexing, pickling), meta.json's shard list checked against the files, and
the readers and the prepare step writing shards when shard_mb is set."""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil

import numpy as np
import pytest

from shdh.data.dataset import (
    Dataset,
    load_dataset,
    save_dataset,
    save_subset,
    write_dataset_streaming,
)
from shdh.data.folder import folder_dataset, make_demo_folder
from shdh.data.idx import DataFormatError
from shdh.data.shards import MIB, ShardedImages, shard_items, shard_name

SHAPE = (4, 6, 3)  # 72 bytes a row
THREE_ROWS_MB = 3 * 72 / MIB  # shard_mb that makes shards of 3 rows


def noise(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def fields(n):
    return np.array([f"a/b{i}" for i in range(n)]), np.arange(10, 10 + n, dtype=np.int64)


def write_sharded(path, images, shard_mb=THREE_ROWS_MB, cuts=(0, 2, 7)):
    """images written through the streaming writer in pieces that cross shard boundaries."""
    labels, ids = fields(len(images))
    bounds = [*cuts, len(images)]

    def fill(out):
        assert out.shape == images.shape and out.dtype == np.uint8
        for a, b in zip(bounds, bounds[1:], strict=False):
            out[a:b] = images[a:b]

    return write_dataset_streaming(
        path, len(images), images.shape[1:], labels, ids, "toy", fill, shard_mb=shard_mb
    )


@pytest.fixture
def sharded(tmp_path):
    images = noise((10, *SHAPE))
    return write_sharded(tmp_path / "ds", images), images


def test_shard_items_fits_the_budget():
    assert shard_items(SHAPE, THREE_ROWS_MB) == 3
    assert shard_items((224, 224, 3), 256) == 1783  # 150,528 bytes a photo
    assert shard_items((224, 224, 3), 0.001) == 1  # never fewer than one row
    for bad in (0, -1, True, "64"):
        with pytest.raises(ValueError, match="shard_mb"):
            shard_items(SHAPE, bad)


def test_streamed_shards_hold_the_images_and_meta_lists_them(sharded):
    out_dir, images = sharded
    meta = json.loads((out_dir / "meta.json").read_text())
    assert meta["n_items"] == 10 and meta["image_shape"] == list(SHAPE)
    assert [s["rows"] for s in meta["shards"]] == [3, 3, 3, 1]
    assert [s["file"] for s in meta["shards"]] == [shard_name(i) for i in range(4)]
    for entry in meta["shards"]:
        data = (out_dir / entry["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "ids.npy",
        "images",
        "labels.npy",
        "meta.json",
    ]
    ds = load_dataset(out_dir)
    assert isinstance(ds.images, ShardedImages)
    assert ds.images.shape == images.shape and ds.images.dtype == np.uint8
    assert ds.images.ndim == 4 and ds.images.itemsize == 1 and len(ds.images) == 10
    assert np.array_equal(np.asarray(ds.images), images)
    assert np.array_equal(np.load(out_dir / shard_name(1)), images[3:6])


def test_indexing_matches_numpy(sharded):
    out_dir, images = sharded
    sh = load_dataset(out_dir).images
    for key in (0, 9, -1, np.int64(4)):
        assert np.array_equal(sh[key], images[key])
    for key in (slice(None), slice(2, 8), slice(8, 2), slice(1, None, 3), slice(None, None, -2)):
        assert np.array_equal(sh[key], images[key]), key
    for key in ([9, 0, 5, 5, 3], np.array([], dtype=np.int64), np.array([-1, -10]), []):
        assert np.array_equal(sh[key], images[key]), key
    mask = np.arange(10) % 3 == 0
    assert np.array_equal(sh[mask], images[mask])
    got = sh[np.array([7, 1])]
    assert type(got) is np.ndarray and got.flags.writeable and got.flags.c_contiguous
    with pytest.raises(IndexError, match="index 10 is out of bounds for 10 rows"):
        sh[[1, 10]]
    with pytest.raises(IndexError, match="out of bounds"):
        sh[-11]
    with pytest.raises(IndexError, match="1-D int array"):
        sh[np.zeros((2, 2), dtype=np.int64)]
    with pytest.raises(IndexError, match="1-D int array"):
        sh[np.array([0.5])]


def test_pickles_as_paths_not_pixels(tmp_path):
    images = noise((400, 32, 32, 3))  # 1.2 MB
    out_dir = write_sharded(tmp_path / "ds", images, shard_mb=0.25, cuts=(0,))
    sh = load_dataset(out_dir).images
    sh[[0, 399]]  # maps two shards first: the copy must not carry them
    data = pickle.dumps(sh)
    assert len(data) < 2000
    copy = pickle.loads(data)
    assert copy.maps == {} and np.array_equal(copy[[399, 5, 200]], images[[399, 5, 200]])


def test_kept_rows_are_compacted_across_shards(tmp_path):
    images = noise((10, *SHAPE))
    labels, ids = fields(10)
    kept = np.array([0, 2, 3, 7, 9])

    def fill(out):
        out[: len(kept)] = images[kept]
        return kept

    out_dir = write_dataset_streaming(
        tmp_path / "ds", 10, SHAPE, labels, ids, "toy", fill, shard_mb=THREE_ROWS_MB
    )
    meta = json.loads((out_dir / "meta.json").read_text())
    assert meta["n_items"] == 5 and [s["rows"] for s in meta["shards"]] == [3, 2]
    assert sorted(p.name for p in (out_dir / "images").iterdir()) == [
        "shard-00000.npy",
        "shard-00001.npy",
    ]
    assert (out_dir / shard_name(1)).stat().st_size == 128 + 2 * 72  # cut in place
    ds = load_dataset(out_dir)
    assert np.array_equal(ds.images[:], images[kept]) and ds.ids.tolist() == [10, 12, 13, 17, 19]


def test_rows_a_fill_never_wrote_are_zeros(tmp_path):
    labels, ids = fields(7)
    out_dir = write_dataset_streaming(
        tmp_path / "ds", 7, SHAPE, labels, ids, "toy", lambda out: out.fill(0), shard_mb=1e-9
    )
    assert len(list((out_dir / "images").iterdir())) == 7
    labels, ids = fields(7)
    out_dir = write_dataset_streaming(
        tmp_path / "d2", 7, SHAPE, labels, ids, "toy", lambda out: None, shard_mb=THREE_ROWS_MB
    )
    assert not load_dataset(out_dir).images[:].any()


def test_a_failing_fill_leaves_nothing(tmp_path):
    labels, ids = fields(10)

    def failing(out):
        out[0:5] = 1
        raise RuntimeError("decoder died")

    with pytest.raises(RuntimeError, match="decoder died"):
        write_dataset_streaming(
            tmp_path / "ds", 10, SHAPE, labels, ids, "x", failing, shard_mb=THREE_ROWS_MB
        )
    assert list(tmp_path.iterdir()) == []


def test_save_dataset_and_subset_with_shards(tmp_path):
    images = noise((10, *SHAPE))
    labels, ids = fields(10)
    out = save_dataset(Dataset(images, labels, ids, "toy"), tmp_path / "a", shard_mb=THREE_ROWS_MB)
    ds = load_dataset(out)
    assert np.array_equal(ds.images[:], images)
    keep = np.array([1, 4, 8])
    sub = save_subset(ds, keep, tmp_path / "b", shard_mb=THREE_ROWS_MB)
    assert isinstance(sub.images, ShardedImages) and np.array_equal(sub.images[:], images[keep])
    assert sub.ids.tolist() == [11, 14, 18]
    flat = save_subset(ds, keep, tmp_path / "c", shard_mb=None)  # back to one images.npy
    assert (tmp_path / "c" / "images.npy").is_file()
    assert np.array_equal(flat.images, images[keep])
    # without shards and from images.npy: the selection saved exactly as before
    plain = save_dataset(Dataset(images, labels, ids, "toy"), tmp_path / "d")
    save_subset(load_dataset(plain), keep, tmp_path / "e", shard_mb=None)
    save_dataset(Dataset(images[keep], labels[keep], ids[keep], "toy"), tmp_path / "f")
    for name in ("images.npy", "labels.npy", "ids.npy", "meta.json"):
        assert (tmp_path / "e" / name).read_bytes() == (tmp_path / "f" / name).read_bytes()


def test_load_without_mmap_reads_the_shards_into_memory(sharded):
    out_dir, images = sharded
    ds = load_dataset(out_dir, mmap=False)
    assert type(ds.images) is np.ndarray and np.array_equal(ds.images, images)


# ---- meta.json against the files ------------------------------------------------------------


def _edit_meta(out_dir, change):
    meta = json.loads((out_dir / "meta.json").read_text())
    change(meta)
    (out_dir / "meta.json").write_text(json.dumps(meta))


def test_a_missing_shard_is_named(sharded):
    out_dir, _ = sharded
    (out_dir / shard_name(2)).unlink()
    with pytest.raises(DataFormatError, match=r"shard-00002\.npy: missing \(meta.json lists it"):
        load_dataset(out_dir)


def test_a_shard_of_the_wrong_shape_or_dtype_is_named(sharded):
    out_dir, _ = sharded
    np.save(out_dir / shard_name(1), noise((2, *SHAPE)))
    with pytest.raises(DataFormatError, match=r"shard-00001\.npy: images: expected uint8 \(3, 4"):
        load_dataset(out_dir)
    np.save(out_dir / shard_name(1), noise((3, *SHAPE)).astype(np.int16))
    with pytest.raises(DataFormatError, match=r"shard-00001\.npy: images: .* got int16"):
        load_dataset(out_dir)


def test_a_truncated_shard_is_named(sharded):
    out_dir, _ = sharded
    path = out_dir / shard_name(0)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DataFormatError, match=r"shard-00000\.npy: images: .* bytes, expected"):
        load_dataset(out_dir)


def test_an_unlisted_shard_file_is_named(sharded):
    out_dir, _ = sharded
    shutil.copy(out_dir / shard_name(3), out_dir / shard_name(4))
    with pytest.raises(DataFormatError, match=r"shard-00004\.npy: not in meta.json's shards list"):
        load_dataset(out_dir)


def test_an_images_npy_beside_shards_is_refused(sharded):
    out_dir, _ = sharded
    np.save(out_dir / "images.npy", noise((10, *SHAPE)))
    with pytest.raises(DataFormatError, match=r"images\.npy: unexpected: meta.json lists shards"):
        load_dataset(out_dir)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda m: m["shards"][0].update(rows=4),
            r"shards: their rows add up to 11, n_items is 10",
        ),
        (lambda m: m["shards"].pop(), r"shards: their rows add up to 9, n_items is 10"),
        (lambda m: m["shards"][1].update(file="images/x.npy"), r"shards\[1\]: file: expected"),
        (lambda m: m["shards"][2].update(rows=0), r"shards\[2\]: rows: expected a positive"),
        (lambda m: m["shards"][0].update(sha256="abc"), r"shards\[0\]: sha256: expected 64 hex"),
        (lambda m: m.update(shards=[]), r"shards: expected a non-empty list"),
        (lambda m: m.update(image_shape=[4, 6, 3, 1]), r"image_shape: expected \[H, W\]"),
    ],
)
def test_meta_shard_list_disagreeing_with_the_files_is_named(sharded, change, message):
    out_dir, _ = sharded
    _edit_meta(out_dir, change)
    with pytest.raises(DataFormatError, match=rf"meta\.json: {message}"):
        load_dataset(out_dir)


# ---- the readers and the prepare step --------------------------------------------------------


def test_folder_reader_writes_shards_with_the_same_pixels(tmp_path):
    demo = make_demo_folder(tmp_path / "demo", n_per_leaf=4, seed=0)
    bad = demo / "animal" / "bird" / "broken.png"
    bad.write_bytes(b"not a png")
    options = {"image_size": 16, "skip_bad_images": True, "workers": 0}
    plain, tree = folder_dataset(demo, tmp_path / "plain", **options)
    shard_mb = 5 * 16 * 16 * 3 / MIB  # 5 rows a shard: 24 kept items in 5 shards
    sharded, tree2 = folder_dataset(demo, tmp_path / "sharded", shard_mb=shard_mb, **options)
    a, b = load_dataset(plain), load_dataset(sharded)
    assert isinstance(b.images, ShardedImages) and len(b.images) == 24
    assert np.array_equal(a.images, b.images[:]) and np.array_equal(a.ids, b.ids)
    assert tree.to_dict() == tree2.to_dict()
    assert len(list((sharded / "images").iterdir())) == 5


def test_prepare_shards_the_data_and_its_subset(tmp_path):
    from shdh.steps.prepare import load_prepared, prepare, prepare_options

    demo = make_demo_folder(tmp_path / "demo", n_per_leaf=4, seed=0)
    data = {"dataset": "folder", "query_fraction": 0.25, "max_items": 20, "image_size": 8}
    options = prepare_options({**data, "shard_mb": 6 * 8 * 8 * 3 / MIB, "workers": 0})
    assert options["shard_mb"] == 6 * 8 * 8 * 3 / MIB
    prepare(demo, tmp_path / "prepared", **options)
    ds, split = load_prepared(tmp_path / "prepared")
    plain_dir = tmp_path / "plain"
    prepare(demo, plain_dir, **prepare_options({**data, "workers": 0}))
    plain, plain_split = load_prepared(plain_dir)
    assert isinstance(ds.images, ShardedImages) and type(plain.images) is not ShardedImages
    assert [len(ds.images), len(list((tmp_path / "prepared/dataset/images").iterdir()))] == [20, 4]
    assert np.array_equal(ds.images[:], plain.images) and np.array_equal(ds.ids, plain.ids)
    assert np.array_equal(split.query_idx, plain_split.query_idx)
