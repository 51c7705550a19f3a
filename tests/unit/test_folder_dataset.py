"""Folder-tree datasets: labels from paths, order, options, bad input, the demo folder."""

import logging
import os

import numpy as np
import pytest
from PIL import Image

from shdh.core.hierarchy import LabelTree
from shdh.data.dataset import load_dataset
from shdh.data.folder import (
    DEMO_LEAVES,
    check_folder,
    folder_dataset,
    list_folder_images,
    make_demo_folder,
)
from shdh.data.idx import DataFormatError
from shdh.data.images import ImageDecodeError


def png(path, value=0, size=(8, 8)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*size, 3), value, dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def demo(tmp_path):
    return make_demo_folder(tmp_path / "demo", n_per_leaf=4, seed=0)


def test_demo_folder_converts_to_a_dataset_and_tree(demo, tmp_path):
    out, tree = folder_dataset(demo, tmp_path / "ds")
    ds = load_dataset(out)
    n = 4 * len(DEMO_LEAVES)
    assert ds.images.shape == (n, 32, 32, 3) and ds.images.dtype == np.uint8
    assert ds.ids.tolist() == list(range(n)) and ds.name == "demo"
    assert ds.labels.tolist() == [leaf for leaf in sorted(DEMO_LEAVES) for _ in range(4)]
    assert tree.names[0] == "demo" and tree.height == 4
    assert sorted(tree.path(leaf) for leaf in tree.leaves) == sorted(DEMO_LEAVES)
    anc = tree.ancestors_of_labels(list(ds.labels))
    bird = ds.labels.tolist().index("animal/bird")
    assert anc[bird, 3] == -1 and (anc[ds.labels == "animal/mammal/cat", 3] >= 0).all()
    first = Image.open(demo / "animal" / "bird" / "bird_000.png")
    assert np.array_equal(ds.images[0], np.asarray(first.convert("RGB")))


def test_items_sorted_by_path_below_root_whatever_the_creation_order(tmp_path):
    root = tmp_path / "r"
    for rel in ["b/z.png", "a/y/2.png", "b/a.png", "a/x/9.png", "a/y/10.png"]:
        png(root / rel)
    got = [(p.relative_to(root).as_posix(), label) for p, label in list_folder_images(root)]
    assert got == [
        ("a/x/9.png", "a/x"),
        ("a/y/10.png", "a/y"),
        ("a/y/2.png", "a/y"),
        ("b/a.png", "b"),
        ("b/z.png", "b"),
    ]


def test_hidden_and_non_image_files_are_ignored(tmp_path):
    root = tmp_path / "r"
    png(root / "cls" / "a.PNG")
    (root / "cls" / "notes.txt").write_text("hi")
    (root / "cls" / ".DS_Store").write_bytes(b"\0")
    png(root / ".thumbs" / "x" / "b.png")
    png(root / "cls" / ".hidden.png")
    assert [label for _, label in list_folder_images(root)] == ["cls"]


def test_grayscale_and_size_options(demo, tmp_path):
    out, _ = folder_dataset(demo, tmp_path / "g", image_size=(16, 24), color=False, name="gray")
    ds = load_dataset(out)
    assert ds.images.shape == (4 * len(DEMO_LEAVES), 16, 24) and ds.name == "gray"


def test_pool_and_in_process_conversion_are_identical(demo, tmp_path, monkeypatch):
    monkeypatch.setattr("shdh.data.images.BATCH_SIZE", 5)
    a, _ = folder_dataset(demo, tmp_path / "a", workers=0)
    b, _ = folder_dataset(demo, tmp_path / "b", workers=2)
    for name in ("images.npy", "labels.npy", "ids.npy", "meta.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_make_demo_folder_is_deterministic_and_refuses_a_used_folder(tmp_path):
    a = make_demo_folder(tmp_path / "a", n_per_leaf=2, seed=3)
    b = make_demo_folder(tmp_path / "b", n_per_leaf=2, seed=3)
    files = sorted(p.relative_to(a) for p in a.rglob("*.png"))
    assert len(files) == 2 * len(DEMO_LEAVES)
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    with pytest.raises(FileExistsError, match="not an empty folder"):
        make_demo_folder(a)


def test_demo_images_carry_their_classes(tmp_path):
    """Nearest class mean on the raw pixels separates the leaves: there is something to learn."""
    out, _ = folder_dataset(make_demo_folder(tmp_path / "d", n_per_leaf=10), tmp_path / "ds")
    ds = load_dataset(out)
    x = ds.images.reshape(len(ds.ids), -1).astype(np.float64)
    classes = sorted(set(ds.labels))
    means = np.stack([x[ds.labels == c].mean(axis=0) for c in classes])
    nearest = np.argmin(((x[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(np.array(classes)[nearest] == ds.labels) == 1.0


# ---- bad input ------------------------------------------------------------------------------


def test_missing_or_empty_root(tmp_path):
    with pytest.raises(DataFormatError, match="not a folder"):
        folder_dataset(tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    (tmp_path / "empty" / "cls" / "readme.txt").write_text("x")
    with pytest.raises(DataFormatError, match=r"empty: no image files found"):
        folder_dataset(tmp_path / "empty", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_image_in_the_root_has_no_label(tmp_path):
    png(tmp_path / "r" / "cls" / "a.png")
    png(tmp_path / "r" / "stray.png")
    with pytest.raises(DataFormatError, match=r"stray\.png: an image directly in the root"):
        folder_dataset(tmp_path / "r", tmp_path / "out")


def test_folder_name_with_label_separator_is_refused(tmp_path):
    png(tmp_path / "r" / "cats|dogs" / "a.png")
    with pytest.raises(DataFormatError, match=r"r/cats\|dogs: name 'cats\|dogs' contains '\|'"):
        folder_dataset(tmp_path / "r", tmp_path / "out")
    png(tmp_path / "r2" / "cls" / "a.png")
    with pytest.raises(DataFormatError, match=r"name: name 'a\|b' contains"):
        folder_dataset(tmp_path / "r2", tmp_path / "out", name="a|b")


def test_images_in_an_inner_folder(tmp_path):
    root = tmp_path / "r"
    png(root / "animal" / "cat" / "persian" / "p.png")
    png(root / "animal" / "cat" / "c.png")
    png(root / "animal" / "dog" / "d.png")
    with pytest.raises(DataFormatError, match=r"cat/c\.png: label 'animal/cat' is an inner node"):
        folder_dataset(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    out, tree = folder_dataset(root, tmp_path / "out", inner_labels=True)
    labels = load_dataset(out).labels.tolist()
    assert labels == ["animal/cat", "animal/cat/persian", "animal/dog"]
    anc = tree.ancestors_of_labels(labels)
    assert anc[0, 3] == -1 and anc[0, 2] == anc[1, 2]


def test_every_misplaced_image_and_bad_folder_is_named_in_one_error(tmp_path):
    root = tmp_path / "r"
    png(root / "cls" / "a.png")
    png(root / "stray1.png")
    png(root / "stray2.png")
    for image in ("1.png", "2.png"):  # two images in one bad folder: the folder named once
        png(root / "cats|dogs" / image)
    with pytest.raises(DataFormatError) as err:
        folder_dataset(root, tmp_path / "out")
    lines = str(err.value).splitlines()
    assert lines[0] == f"{root}: 3 problems in the folder tree:"
    assert lines[1] == f"  {root / 'cats|dogs'}: name 'cats|dogs' contains '|', which is reserved"
    assert lines[2].startswith(f"  {root / 'stray1.png'}: an image directly in the root")
    assert lines[3].startswith(f"  {root / 'stray2.png'}: an image directly in the root")
    assert len(lines) == 4 and not (tmp_path / "out").exists()


def test_every_image_labelled_at_an_inner_node_is_named(tmp_path):
    root = tmp_path / "r"
    png(root / "animal" / "cat" / "persian" / "p.png")
    for name in ("c1.png", "c2.png"):
        png(root / "animal" / "cat" / name)
    png(root / "animal" / "a.png")
    with pytest.raises(DataFormatError) as err:
        check_folder(root)
    lines = str(err.value).splitlines()
    assert lines[0].startswith(f"{root}: 3 item labels are inner nodes of the label tree; give")
    assert "data.inner_labels: true" in lines[0] and lines[0].endswith(":")
    assert lines[1].startswith(f"  {root / 'animal' / 'a.png'}: label 'animal' is an inner node")
    assert lines[2].startswith(f"  {root / 'animal/cat/c1.png'}: label 'animal/cat' is an inner")
    assert lines[3].startswith(f"  {root / 'animal/cat/c2.png'}: label 'animal/cat' is an inner")
    assert len(lines) == 4
    assert check_folder(root, inner_labels=True)[0] == root / "animal" / "a.png"


def test_an_image_link_to_nothing_is_named_before_any_decoding(tmp_path):
    root = tmp_path / "r"
    png(root / "animal" / "cat" / "c.png")
    link = root / "animal" / "dog" / "d.png"
    link.parent.mkdir(parents=True)
    link.symlink_to(tmp_path / "gone.png")
    with pytest.raises(DataFormatError) as err:
        check_folder(root)
    assert str(err.value).splitlines() == [
        f"{root}: 1 image link(s) lead to no file; restore their targets, remove them, or set "
        "data.skip_bad_images: true:",
        f"  {link}: links to {tmp_path / 'gone.png'}",
    ]
    assert link in check_folder(root, skip_bad_images=True)  # decoding then skips it


def test_every_undecodable_image_is_named_and_nothing_is_left(tmp_path, demo):
    for path in (demo / "vehicle" / "boat" / "boat_001.png", demo / "animal/bird/bird_003.png"):
        path.write_bytes(b"broken")
    with pytest.raises(ImageDecodeError) as err:
        folder_dataset(demo, tmp_path / "out")
    lines = str(err.value).splitlines()
    assert lines[0].startswith(f"2 of {4 * len(DEMO_LEAVES)} image files cannot be decoded; set")
    assert "data.skip_bad_images: true" in lines[0]
    assert "bird_003.png: cannot decode image" in lines[1]
    assert "boat_001.png: cannot decode image" in lines[2]
    assert sorted(os.listdir(tmp_path)) == ["demo"]


def test_undecodable_image_fails_naming_it_and_leaves_nothing(tmp_path, demo):
    bad = demo / "vehicle" / "boat" / "boat_001.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    out = tmp_path / "out"
    with pytest.raises(ImageDecodeError, match=r"boat_001\.png: cannot decode image"):
        folder_dataset(demo, out)
    assert sorted(os.listdir(tmp_path)) == ["demo"]


def test_failed_conversion_keeps_the_previous_dataset(tmp_path, demo):
    out, _ = folder_dataset(demo, tmp_path / "out")
    before = (out / "images.npy").read_bytes()
    (demo / "animal" / "bird" / "bird_002.png").write_bytes(b"nope")
    with pytest.raises(ImageDecodeError):
        folder_dataset(demo, out)
    assert (out / "images.npy").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["demo", "out"]


def test_skip_bad_images_leaves_them_out_and_rebuilds_the_tree(tmp_path, caplog):
    root = tmp_path / "r"
    png(root / "a" / "x" / "1.png", 10)
    png(root / "a" / "x" / "2.png", 20)
    (root / "a" / "x" / "3.png").write_bytes(b"bad")
    png(root / "b" / "4.png", 40)
    (root / "c" / "only").mkdir(parents=True)
    (root / "c" / "only" / "5.jpg").write_bytes(b"bad too")
    with caplog.at_level(logging.WARNING):
        out, tree = folder_dataset(root, tmp_path / "out", skip_bad_images=True)
    ds = load_dataset(out)
    assert ds.labels.tolist() == ["a/x", "a/x", "b"]
    assert ds.ids.tolist() == [0, 1, 3]  # ids stay the positions in the sorted listing
    assert ds.images[:, 0, 0, 0].tolist() == [10, 20, 40]
    assert "skipped 2 undecodable image(s) of 5" in caplog.text and "3.png" in caplog.text
    assert isinstance(tree, LabelTree)
    assert sorted(tree.path(leaf) for leaf in tree.leaves) == ["a/x", "b"]  # no "c/only"
