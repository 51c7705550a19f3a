"""The on-disk dataset format: round trip, atomic replacement, validation, Fashion-MNIST-H."""

import json
import os

import numpy as np
import pytest

from shdh.data import dataset as dsmod
from shdh.data.dataset import Dataset, load_dataset, save_dataset
from shdh.data.fashion_mnist import fashion_mnist_h_dataset
from shdh.data.idx import DataFormatError, write_idx

FM_NAMES = {
    "train-images-idx3-ubyte": lambda rng: rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
    "train-labels-idx1-ubyte": lambda rng: (np.arange(20) % 10).astype(np.uint8),
    "t10k-images-idx3-ubyte": lambda rng: rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
    "t10k-labels-idx1-ubyte": lambda rng: (np.arange(10) % 10).astype(np.uint8),
}


def make(n=6, shape=(4, 5), name="toy", seed=0) -> Dataset:
    rng = np.random.default_rng(seed)
    return Dataset(
        images=rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        labels=np.array([f"A/B{i % 2}/C{i % 3}" for i in range(n)]),
        ids=np.arange(100, 100 + n, dtype=np.int64),
        name=name,
    )


def assert_same(a: Dataset, b: Dataset) -> None:
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.ids, b.ids)
    assert a.name == b.name


@pytest.mark.parametrize("shape", [(4, 5), (4, 5, 3)])
def test_round_trip(tmp_path, shape):
    ds = make(shape=shape)
    out = save_dataset(ds, tmp_path / "prepared")
    assert sorted(os.listdir(out)) == ["ids.npy", "images.npy", "labels.npy", "meta.json"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta == {
        "format": "shdh-dataset/1",
        "name": "toy",
        "n_items": 6,
        "image_shape": list(shape),
    }
    back = load_dataset(out)
    assert_same(back, ds)
    assert isinstance(back.images, np.memmap) and not back.images.flags.writeable
    assert back.labels.dtype.kind == "U" and back.ids.dtype == np.int64
    eager = load_dataset(out, mmap=False)
    assert not isinstance(eager.images, np.memmap)
    assert_same(eager, ds)


def test_save_replaces_previous_dataset_and_leaves_no_temporaries(tmp_path):
    save_dataset(make(n=6, seed=0), tmp_path / "d")
    new = make(n=9, seed=1, name="second")
    save_dataset(new, tmp_path / "d")
    assert_same(load_dataset(tmp_path / "d"), new)
    assert os.listdir(tmp_path) == ["d"]


def test_failed_save_leaves_previous_dataset_intact(tmp_path, monkeypatch):
    old = make(seed=0)
    save_dataset(old, tmp_path / "d")
    real_save = np.save

    def failing_save(file, arr, **kwargs):
        if arr.dtype.kind == "U":  # fail after images.npy has been written
            raise OSError("disk full")
        real_save(file, arr, **kwargs)

    monkeypatch.setattr(dsmod.np, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        save_dataset(make(seed=1), tmp_path / "d")
    monkeypatch.undo()
    assert_same(load_dataset(tmp_path / "d"), old)
    assert os.listdir(tmp_path) == ["d"]


def test_failed_final_rename_restores_previous_dataset(tmp_path, monkeypatch):
    old = make(seed=0)
    save_dataset(old, tmp_path / "d")
    real_replace = os.replace

    def replace(src, dst):
        if str(src).endswith(".tmp"):
            raise OSError("rename failed")
        real_replace(src, dst)

    monkeypatch.setattr(dsmod.os, "replace", replace)
    with pytest.raises(OSError, match="rename failed"):
        save_dataset(make(seed=1), tmp_path / "d")
    monkeypatch.undo()
    assert_same(load_dataset(tmp_path / "d"), old)
    assert os.listdir(tmp_path) == ["d"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: setattr(d, "images", d.images.astype(np.float32)), "images: expected uint8"),
        (lambda d: setattr(d, "images", d.images[:, 0, 0]), "images: expected uint8"),
        (lambda d: setattr(d, "labels", d.labels.astype(object)), "labels: expected str"),
        (lambda d: setattr(d, "labels", d.labels[:-1]), r"labels: expected str array of shape"),
        (lambda d: setattr(d, "ids", d.ids.astype(np.int32)), "ids: expected int64"),
        (lambda d: setattr(d, "ids", np.zeros(6, np.int64)), "ids: duplicate item ids"),
        (lambda d: setattr(d, "name", ""), "name: empty"),
    ],
)
def test_save_rejects_invalid_dataset_without_touching_disk(tmp_path, change, message):
    ds = make()
    change(ds)
    with pytest.raises(DataFormatError, match=message):
        save_dataset(ds, tmp_path / "d")
    assert os.listdir(tmp_path) == []


# --- load validation: each error names the file and the field ----------------------------------


@pytest.fixture
def saved(tmp_path):
    return save_dataset(make(), tmp_path / "d")


def _edit_meta(directory, **changes):
    meta = json.loads((directory / "meta.json").read_text())
    meta.update(changes)
    (directory / "meta.json").write_text(json.dumps(meta))


def test_load_missing_meta(saved):
    (saved / "meta.json").unlink()
    with pytest.raises(DataFormatError, match=r"d/meta\.json: missing"):
        load_dataset(saved)


def test_load_invalid_json(saved):
    (saved / "meta.json").write_text("{not json")
    with pytest.raises(DataFormatError, match=r"meta\.json: invalid JSON"):
        load_dataset(saved)


def test_load_missing_meta_field(saved):
    meta = json.loads((saved / "meta.json").read_text())
    del meta["n_items"]
    (saved / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataFormatError, match=r"meta\.json: n_items: missing"):
        load_dataset(saved)


def test_load_wrong_format(saved):
    _edit_meta(saved, format="other/2")
    with pytest.raises(DataFormatError, match=r"meta\.json: format: expected 'shdh-dataset/1'"):
        load_dataset(saved)


@pytest.mark.parametrize("n_items", ["5", 0, True, 2.5])
def test_load_n_items_of_another_type_is_named_as_such(saved, n_items):
    _edit_meta(saved, n_items=n_items)
    with pytest.raises(DataFormatError) as refused:
        load_dataset(saved)
    assert str(refused.value) == (
        f"{saved / 'meta.json'}: n_items: expected a positive integer, got {n_items!r}"
    )


def test_load_n_items_mismatch(saved):
    _edit_meta(saved, n_items=7)
    with pytest.raises(DataFormatError, match=r"images\.npy: n_items: meta\.json says 7"):
        load_dataset(saved)


def test_load_image_shape_mismatch(saved):
    _edit_meta(saved, image_shape=[5, 4])
    with pytest.raises(DataFormatError, match=r"images\.npy: image_shape"):
        load_dataset(saved)


def test_load_label_rows_mismatch(saved):
    np.save(saved / "labels.npy", np.array(["a", "b"]))
    with pytest.raises(
        DataFormatError, match=r"labels\.npy: labels: shape \(2,\), expected \(6,\)"
    ):
        load_dataset(saved)


def test_load_missing_array(saved):
    (saved / "ids.npy").unlink()
    with pytest.raises(DataFormatError, match=r"ids\.npy: missing"):
        load_dataset(saved)


def test_load_truncated_npy(saved):
    data = (saved / "images.npy").read_bytes()
    (saved / "images.npy").write_bytes(data[:-10])
    with pytest.raises(DataFormatError, match=r"images\.npy: unreadable \.npy"):
        load_dataset(saved, mmap=False)


def test_load_refuses_pickled_arrays(saved):
    np.save(saved / "labels.npy", np.array(["a"] * 6, dtype=object), allow_pickle=True)
    with pytest.raises(DataFormatError, match=r"labels\.npy: unreadable \.npy"):
        load_dataset(saved)


# --- Fashion-MNIST-H ------------------------------------------------------------------------


def test_fashion_mnist_h_dataset_maps_classes_to_label_paths(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {name: make_array(rng) for name, make_array in FM_NAMES.items()}
    (tmp_path / "raw").mkdir()
    for name, array in arrays.items():
        write_idx(tmp_path / "raw" / (name + ".gz"), array)
    ds = fashion_mnist_h_dataset(tmp_path / "raw")
    assert ds.name == "fashion-mnist-h"
    assert ds.labels.dtype.kind == "U"
    np.testing.assert_array_equal(ds.ids, np.arange(30))
    np.testing.assert_array_equal(ds.images[:20], arrays["train-images-idx3-ubyte"])
    assert list(ds.labels[:10]) == [
        "Clothes/Tops/T-shirt",
        "Clothes/Bottoms/Trouser",
        "Clothes/Tops/Pullover",
        "Clothes/Dresses/Dress",
        "Clothes/Outers/Coat",
        "Goods/Shoes/Sandal",
        "Clothes/Tops/Shirt",
        "Goods/Shoes/Sneaker",
        "Goods/Accessories/Bag",
        "Goods/Shoes/Ankle boot",
    ]
    np.testing.assert_array_equal(ds.labels[20:], ds.labels[:10])  # test labels are 0..9 too
    save_dataset(ds, tmp_path / "prepared")
    assert_same(load_dataset(tmp_path / "prepared"), ds)
