"""Every dataset params.yaml can select goes through fetch -> prepare -> tree -> smatrix.

The upstream formats are written by the readers' own test helpers (tiny CIFAR-100 archive,
SAIAPR TC-12 folder) or by shdh.data.folder.make_demo_folder, so these tests check the wiring:
the step functions dispatch on data.dataset, write the tree the data carries, and later steps
take it from there unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from shdh.cli import main
from shdh.core.hierarchy import LabelTree
from shdh.data.dataset import load_dataset
from shdh.data.download import md5sum
from shdh.data.folder import make_demo_folder
from shdh.settings.profiles import ConfigError
from tests.commands.test_steps import run_steps, smoke_params
from tests.unit.test_cifar100 import write_cifar100_archive
from tests.unit.test_iaprtc12 import write_saiapr


def _prepare(tmp_path, raw_dir, dataset, **data):
    params = smoke_params(tmp_path, raw_dir, data={"dataset": dataset, **data})
    run_steps(params, ["prepare"], ["tree"], ["smatrix"])
    return np.load(tmp_path / "tree" / "ancestors.npy"), LabelTree.load(
        tmp_path / "tree" / "tree.json"
    )


def test_folder_dataset_with_leaves_at_two_depths(tmp_path):
    raw = make_demo_folder(tmp_path / "photos", n_per_leaf=5)
    ancestors, tree = _prepare(tmp_path, raw, "folder")
    assert tree.height == 4 and ancestors.shape == (30, 4)
    # "animal/bird" and "vehicle/boat" stop at level 3: no node at level 4, which never matches
    assert (ancestors[:, 3] == -1).sum() == 10
    assert len(np.load(tmp_path / "prepared" / "split.npz")["query_idx"]) == 3


def test_table_dataset_reads_paths_and_labels_from_csv(tmp_path):
    raw = make_demo_folder(tmp_path / "photos", n_per_leaf=3)
    rows = sorted(p.relative_to(raw) for p in raw.rglob("*.png"))
    table = tmp_path / "items.csv"
    table.write_text("file,path\n" + "".join(f"photos/{p},{p.parent.as_posix()}\n" for p in rows))
    ancestors, tree = _prepare(
        tmp_path, table, "table", table={"image_column": "file", "label_column": "path"}
    )
    assert ancestors.shape == (18, 4) and tree.height == 4
    # every item's deepest node is its row's label, the ids its row numbers
    ids = load_dataset(tmp_path / "prepared" / "dataset").ids.tolist()
    assert sorted(ids) == list(range(18))
    leaves = [tree.path(int(a[a >= 0][-1])) for a in ancestors]
    assert leaves == [rows[i].parent.as_posix() for i in ids]


def test_cifar100_from_a_mirror_with_the_builtin_tree(tmp_path):
    archive, md5s, _ = write_cifar100_archive(tmp_path)
    params = smoke_params(
        tmp_path,
        tmp_path / "raw",
        data={"dataset": "cifar100", "sources": [archive.as_uri()], "verify": False},
    )
    run_steps(params, ["fetch"], ["prepare"], ["tree"])
    ancestors = np.load(tmp_path / "tree" / "ancestors.npy")
    tree = LabelTree.load(tmp_path / "tree" / "tree.json")
    assert tree.height == 3 and tree.n_nodes == 1 + 20 + 100
    assert ancestors.shape[1] == 3 and (ancestors >= 0).all()
    assert md5sum(archive) != "eb9058c3a382ffc7106e4002c42a8d85"  # checks were really skipped


def test_cifar100_verification_refuses_an_archive_that_is_not_the_official_one(tmp_path, caplog):
    archive, _, _ = write_cifar100_archive(tmp_path)
    params = smoke_params(
        tmp_path, tmp_path / "raw", data={"dataset": "cifar100", "sources": [archive.as_uri()]}
    )
    assert main(["fetch", "--params", str(params)]) == 1
    assert "md5 mismatch: expected eb9058c3a382ffc7106e4002c42a8d85" in caplog.text
    assert not (tmp_path / "raw" / "cifar-100-python").exists()
    assert not (tmp_path / "raw" / "cifar-100-python.tar.gz").exists()


def test_iaprtc12_gives_multi_label_ancestor_sets(tmp_path):
    write_saiapr(tmp_path / "data")
    ancestors, tree = _prepare(tmp_path, tmp_path / "data", "iaprtc12", query_fraction=0.25)
    assert tree.height == 7
    assert ancestors.ndim == 3 and ancestors.shape[1] == 7 and ancestors.shape[2] >= 2


def test_unknown_dataset_and_wrong_sources_are_config_errors(tmp_path):
    from shdh.steps.prepare import fetch

    with pytest.raises(ConfigError, match="data.dataset: unknown dataset 'mnist'"):
        fetch(tmp_path, dataset="mnist")
    with pytest.raises(ConfigError, match="'debian' ships only Fashion-MNIST"):
        fetch(tmp_path, dataset="cifar100", sources=["debian"])
    with pytest.raises(ConfigError, match="does not exist"):
        fetch(tmp_path / "missing", dataset="folder")


def test_undecodable_image_fails_the_download_unless_skipped(tmp_path, caplog):
    raw = make_demo_folder(tmp_path / "photos", n_per_leaf=5)
    bad = raw / "animal" / "bird" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    params = smoke_params(tmp_path, raw, data={"dataset": "folder"})
    assert main(["prepare", "--params", str(params)]) == 1
    assert str(bad) in caplog.text
    assert not (tmp_path / "prepared").exists()  # nothing half-written
    caplog.clear()
    run_steps(params, ["prepare", "--skip-bad-images"])
    assert len(np.load(tmp_path / "prepared" / "dataset" / "labels.npy")) == 30
    assert f"skipping an undecodable image: {bad}" in caplog.text
    assert "skipped 1 undecodable image(s) of 31" in caplog.text
