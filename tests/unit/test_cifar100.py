"""CIFAR-100: a tiny upstream-layout archive through download -> extract -> read -> Dataset."""

import hashlib
import logging
import os
import pickle
import tarfile

import numpy as np
import pytest

from shdh.data import cifar100
from shdh.data.cifar100 import (
    CIFAR100_COARSE,
    CIFAR100_FINE,
    CIFAR100_FINE_TO_COARSE,
    cifar100_dataset,
    fetch_cifar100,
    label_tree,
    load_pickle,
)
from shdh.data.dataset import load_dataset, save_dataset
from shdh.data.download import DownloadError, md5sum
from shdh.data.idx import DataFormatError

N_TRAIN, N_TEST = 30, 10


def _pickle_like_upstream(obj) -> bytes:
    """Protocol 2 with the Python 2 era module name that the real files carry."""
    data = pickle.dumps(obj, protocol=2)
    return data.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")


def _split_record(n: int, seed: int, fine=None, coarse=None) -> dict:
    rng = np.random.default_rng(seed)
    if fine is None:
        fine = [int(f) for f in rng.integers(0, 100, size=n)]
    if coarse is None:
        coarse = [CIFAR100_FINE_TO_COARSE[f] for f in fine]
    return {
        b"filenames": [f"img_{seed}_{i}.png".encode() for i in range(n)],
        b"batch_label": b"training batch 1 of 1",
        b"fine_labels": fine,
        b"coarse_labels": coarse,
        b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
    }


def _meta_record(fine_names=CIFAR100_FINE) -> dict:
    return {
        b"fine_label_names": [name.encode() for name in fine_names],
        b"coarse_label_names": [name.encode() for name in CIFAR100_COARSE],
    }


def write_cifar100_archive(tmp_path, *, train=None, test=None, meta=None, raw=None):
    """Write cifar-100-python.tar.gz with train/test/meta pickles; returns (archive, file md5s).

    ``raw`` maps a file name to bytes written instead of the pickle (for corrupt files).
    """
    records = {
        "train": train if train is not None else _split_record(N_TRAIN, 1),
        "test": test if test is not None else _split_record(N_TEST, 2),
        "meta": meta if meta is not None else _meta_record(),
    }
    src = tmp_path / "src" / "cifar-100-python"
    src.mkdir(parents=True)
    md5s = {}
    for name, record in records.items():
        payload = (raw or {}).get(name) or _pickle_like_upstream(record)
        (src / name).write_bytes(payload)
        md5s[name] = hashlib.md5(payload).hexdigest()
    (src / "file.txt~").write_text("")  # the real archive carries this stray editor backup
    archive = tmp_path / "mirror" / "cifar-100-python.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(src, arcname="cifar-100-python")
    return archive, md5s, records


def _fetch_and_read(tmp_path, archive, md5s, **kwargs):
    raw = tmp_path / "raw"
    folder = fetch_cifar100(
        raw, [archive.as_uri()], archive_md5=md5sum(archive), file_md5s=md5s, **kwargs
    )
    return raw, folder


def test_end_to_end_pools_train_then_test(tmp_path):
    archive, md5s, records = write_cifar100_archive(tmp_path)
    raw, folder = _fetch_and_read(tmp_path, archive, md5s)
    assert folder == raw / "cifar-100-python"
    assert sorted(p.name for p in folder.iterdir()) == ["file.txt~", "meta", "test", "train"]
    ds, tree = cifar100_dataset(raw, file_md5s=md5s)

    assert ds.name == "cifar100"
    assert ds.images.shape == (N_TRAIN + N_TEST, 32, 32, 3) and ds.images.dtype == np.uint8
    np.testing.assert_array_equal(ds.ids, np.arange(N_TRAIN + N_TEST))
    # row-major R, G, B planes become the last axis
    row = records["train"][b"data"][3]
    np.testing.assert_array_equal(ds.images[3, :, :, 0], row[:1024].reshape(32, 32))
    np.testing.assert_array_equal(ds.images[3, :, :, 2], row[2048:].reshape(32, 32))
    test_row = records["test"][b"data"][0]
    np.testing.assert_array_equal(ds.images[N_TRAIN, :, :, 1], test_row[1024:2048].reshape(32, 32))

    fine = records["train"][b"fine_labels"] + records["test"][b"fine_labels"]
    expected = [f"{CIFAR100_COARSE[CIFAR100_FINE_TO_COARSE[f]]}/{CIFAR100_FINE[f]}" for f in fine]
    assert ds.labels.tolist() == expected
    assert tree == label_tree()
    anc = tree.ancestors_of_labels(ds.labels.tolist())
    assert anc.shape == (N_TRAIN + N_TEST, 3)

    out = save_dataset(ds, tmp_path / "dataset")
    back = load_dataset(out, mmap=False)
    np.testing.assert_array_equal(back.images, ds.images)
    assert back.labels.tolist() == expected


def test_second_fetch_reuses_the_extracted_folder(tmp_path):
    archive, md5s, _ = write_cifar100_archive(tmp_path)
    raw, folder = _fetch_and_read(tmp_path, archive, md5s)
    archive.unlink()  # no source left: only the existing folder can satisfy the call
    again = fetch_cifar100(raw, [archive.as_uri()], archive_md5="0" * 32, file_md5s=md5s)
    assert again == folder


def test_official_md5_rejects_a_foreign_archive_and_leaves_nothing(tmp_path):
    archive, _, _ = write_cifar100_archive(tmp_path)
    raw = tmp_path / "raw"
    with pytest.raises(DownloadError, match="cifar-100-python.tar.gz: md5 mismatch"):
        fetch_cifar100(raw, [archive.as_uri()])
    assert sorted(p.name for p in raw.iterdir()) == []


def test_extracted_file_md5_mismatch_names_the_file(tmp_path):
    archive, md5s, _ = write_cifar100_archive(tmp_path)
    wrong = dict(md5s, test="0" * 32)
    raw = tmp_path / "raw"
    with pytest.raises(DataFormatError, match=r"cifar-100-python/test: md5 mismatch"):
        fetch_cifar100(raw, [archive.as_uri()], archive_md5=md5sum(archive), file_md5s=wrong)
    assert sorted(p.name for p in raw.iterdir()) == ["cifar-100-python.tar.gz"]


def test_verify_false_reads_any_well_formed_copy_with_a_warning(tmp_path, caplog):
    archive, _, _ = write_cifar100_archive(tmp_path)
    raw = tmp_path / "raw"
    with caplog.at_level(logging.WARNING, logger="shdh.data.cifar100"):
        fetch_cifar100(raw, [str(archive)], verify=False)
        ds, tree = cifar100_dataset(raw, verify=False)
    assert len(ds.labels) == N_TRAIN + N_TEST and tree == label_tree()
    assert "verification is off" in caplog.text


def test_default_verify_rejects_files_that_are_not_the_official_ones(tmp_path):
    archive, _, _ = write_cifar100_archive(tmp_path)
    raw = tmp_path / "raw"
    fetch_cifar100(raw, [str(archive)], verify=False)
    with pytest.raises(DataFormatError, match="cifar-100-python/train: md5 mismatch"):
        cifar100_dataset(raw)


def test_truncated_archive_is_reported_and_leaves_no_folder(tmp_path):
    archive, md5s, _ = write_cifar100_archive(tmp_path)
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    raw = tmp_path / "raw"
    with pytest.raises(DataFormatError, match="truncated or corrupt archive"):
        fetch_cifar100(raw, [str(archive)], verify=False)
    assert sorted(p.name for p in raw.iterdir()) == ["cifar-100-python.tar.gz"]


def _read_with(tmp_path, **kwargs):
    archive, _, _ = write_cifar100_archive(tmp_path, **kwargs)
    raw = tmp_path / "raw"
    fetch_cifar100(raw, [str(archive)], verify=False)
    return cifar100_dataset(raw, verify=False)


def test_pickle_missing_a_key_names_file_and_key(tmp_path):
    train = _split_record(N_TRAIN, 1)
    del train[b"coarse_labels"]
    with pytest.raises(DataFormatError, match=r"cifar-100-python/train: coarse_labels: missing"):
        _read_with(tmp_path, train=train)


def test_meta_missing_a_key_names_file_and_key(tmp_path):
    meta = _meta_record()
    del meta[b"fine_label_names"]
    with pytest.raises(DataFormatError, match=r"cifar-100-python/meta: fine_label_names: missing"):
        _read_with(tmp_path, meta=meta)


def test_wrong_data_shape_is_reported(tmp_path):
    test = _split_record(N_TEST, 2)
    test[b"data"] = test[b"data"][:, :3000]
    with pytest.raises(DataFormatError, match=r"test: data: rows have 3000 values"):
        _read_with(tmp_path, test=test)


def test_label_count_mismatch_is_reported(tmp_path):
    train = _split_record(N_TRAIN, 1)
    train[b"fine_labels"] = train[b"fine_labels"][:-2]
    with pytest.raises(DataFormatError, match=rf"train: fine_labels: {N_TRAIN - 2} labels for"):
        _read_with(tmp_path, train=train)


def test_label_out_of_range_is_reported(tmp_path):
    train = _split_record(N_TRAIN, 1)
    train[b"coarse_labels"][0] = 20
    with pytest.raises(DataFormatError, match=r"train: coarse_labels: value 20 outside 0..19"):
        _read_with(tmp_path, train=train)


def test_fine_class_under_two_superclasses_is_an_error(tmp_path):
    fine = [0] * N_TEST
    coarse = [CIFAR100_FINE_TO_COARSE[0]] * N_TEST
    coarse[-1] = 7  # "apple" under "insects" in the test file
    test = _split_record(N_TEST, 2, fine=fine, coarse=coarse)
    with pytest.raises(DataFormatError) as err:
        _read_with(tmp_path, test=test)
    message = str(err.value)
    assert "'apple'" in message and "'fruit_and_vegetables'" in message and "'insects'" in message
    assert "cifar-100-python/test" in message


def test_renamed_class_is_an_error_when_verifying_and_a_new_tree_otherwise(tmp_path, caplog):
    names = list(CIFAR100_FINE)
    names[0] = "green_apple"
    train = _split_record(N_TRAIN, 1, fine=list(range(N_TRAIN)))
    with caplog.at_level(logging.WARNING, logger="shdh.data.cifar100"):
        ds, tree = _read_with(tmp_path, train=train, meta=_meta_record(names))
    assert "not in the built-in CIFAR-100 tree" in caplog.text
    assert tree != label_tree()
    assert tree.path(tree.node_id("green_apple")) == "fruit_and_vegetables/green_apple"
    assert tree.height == 3
    with pytest.raises(DataFormatError, match="'fruit_and_vegetables/green_apple'"):
        cifar100.check_against_builtin(ds.labels.tolist(), strict=True)


def test_str_keys_are_accepted(tmp_path):
    train = {k.decode(): v for k, v in _split_record(N_TRAIN, 1).items()}
    ds, _ = _read_with(tmp_path, train=train)
    assert len(ds.labels) == N_TRAIN + N_TEST


class _Exploit:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.remove, (self.target,))


def test_pickle_that_would_run_code_is_refused(tmp_path):
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("still here")
    path = tmp_path / "train"
    path.write_bytes(pickle.dumps({b"data": _Exploit(str(sentinel))}, protocol=2))
    with pytest.raises(DataFormatError, match="refusing to load global posix.remove"):
        load_pickle(path)
    assert sentinel.read_text() == "still here"


def test_truncated_pickle_names_the_file(tmp_path):
    whole = _pickle_like_upstream(_split_record(N_TEST, 2))
    with pytest.raises(DataFormatError, match=r"cifar-100-python/test: unreadable pickle"):
        _read_with(tmp_path, raw={"test": whole[: len(whole) // 2]})


# ---- the class tables and the built-in tree ---------------------------------------------


def _level_index(tree, anc: np.ndarray, level: int) -> list[int]:
    return np.searchsorted(tree.nodes_at_level(level), anc[:, level - 1]).tolist()


CIFAR100_GROUPS = {  # the official superclass -> classes table, written out independently
    "aquatic_mammals": "beaver dolphin otter seal whale",
    "fish": "aquarium_fish flatfish ray shark trout",
    "flowers": "orchid poppy rose sunflower tulip",
    "food_containers": "bottle bowl can cup plate",
    "fruit_and_vegetables": "apple mushroom orange pear sweet_pepper",
    "household_electrical_devices": "clock keyboard lamp telephone television",
    "household_furniture": "bed chair couch table wardrobe",
    "insects": "bee beetle butterfly caterpillar cockroach",
    "large_carnivores": "bear leopard lion tiger wolf",
    "large_man-made_outdoor_things": "bridge castle house road skyscraper",
    "large_natural_outdoor_scenes": "cloud forest mountain plain sea",
    "large_omnivores_and_herbivores": "camel cattle chimpanzee elephant kangaroo",
    "medium_mammals": "fox porcupine possum raccoon skunk",
    "non-insect_invertebrates": "crab lobster snail spider worm",
    "people": "baby boy girl man woman",
    "reptiles": "crocodile dinosaur lizard snake turtle",
    "small_mammals": "hamster mouse rabbit shrew squirrel",
    "trees": "maple_tree oak_tree palm_tree pine_tree willow_tree",
    "vehicles_1": "bicycle bus motorcycle pickup_truck train",
    "vehicles_2": "lawn_mower rocket streetcar tank tractor",
}


def test_the_class_tables() -> None:
    fine, coarse, f2c = CIFAR100_FINE, CIFAR100_COARSE, CIFAR100_FINE_TO_COARSE
    assert len(fine) == 100 and len(set(fine)) == 100
    assert list(fine) == sorted(fine)  # the official meta file lists them alphabetically
    assert fine[:10] == (
        "apple",
        "aquarium_fish",
        "baby",
        "bear",
        "beaver",
        "bed",
        "bee",
        "beetle",
        "bicycle",
        "bottle",
    )
    assert list(coarse) == list(CIFAR100_GROUPS)
    assert len(f2c) == 100 and sorted(set(f2c)) == list(range(20))
    assert all(f2c.count(c) == 5 for c in range(20))
    for c, members in enumerate(CIFAR100_GROUPS.values()):
        assert sorted(f for f, cc in zip(fine, f2c, strict=True) if cc == c) == members.split()


def test_the_built_in_tree() -> None:
    tree = cifar100.label_tree()
    assert tree.height == 3
    assert [tree.names[i] for i in tree.nodes_at_level(2)] == list(CIFAR100_COARSE)
    assert len(tree.leaves) == 100
    paths = cifar100.label_paths()
    assert paths[0] == "fruit_and_vegetables/apple"
    assert paths[4] == "aquatic_mammals/beaver"
    anc = tree.ancestors_of_labels(paths)
    assert _level_index(tree, anc, 2) == list(CIFAR100_FINE_TO_COARSE)
    assert [tree.names[i] for i in anc[:, 2]] == list(CIFAR100_FINE)
