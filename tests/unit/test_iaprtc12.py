"""IAPRTC-12 (SAIAPR TC-12): a tiny copy in the upstream layout, read into a multi-label Dataset."""

import logging
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

from shdh.data.archive import UnsafeArchiveError
from shdh.data.dataset import LABEL_SEP, load_dataset, save_dataset
from shdh.data.iaprtc12 import (
    IMAGE_SIZE,
    RESAMPLE,
    BadImageError,
    decode_images,
    fetch_iaprtc12,
    find_benchmark,
    iaprtc12_dataset,
    load_image,
    read_index,
)
from shdh.data.iaprtc12_files import parse_chain
from shdh.data.idx import DataFormatError

WLIST = {
    1: "entity",
    10: "humans",
    11: "person",
    12: "child",
    13: "child-boy",
    20: "landscape-nature",
    21: "sky",
    22: "sky-blue",
    30: "man-made",
    31: "construction",
    32: "building",
    33: "house",
    34: "house-part",
    35: "window",
    40: "animal",  # in the vocabulary, used by no region
}
SKY_BLUE = "entity->->_landscape-nature->_sky->_sky-blue"
BOY = "entity->->_humans->_person->_child->_child-boy"
WINDOW = "entity->->_man-made->_construction->_building->_house->_house-part->_window"
# folder -> rows (image_id, region_id, label_id, ontology chain)
REGIONS = {
    "00": [
        (10, 1, 22, SKY_BLUE),
        (10, 2, 13, BOY),
        (10, 3, 22, SKY_BLUE),
        (11, 1, 1, "entity"),  # the one kind of region labelled only with the root
        (12, 1, 35, WINDOW),
    ],
    "01": [
        (25, 1, 21, "entity->->_landscape-nature->_sky"),
        (25, 2, 35, WINDOW + "->"),
        (3, 1, 22, SKY_BLUE),
    ],
}
IMAGES = {"00": [10, 11, 12], "01": [3, 25, 99]}  # 99 has no labelled region
PATHS = {
    "sky-blue": "landscape-nature/sky/sky-blue",
    "boy": "humans/person/child/child-boy",
    "window": "man-made/construction/building/house/house-part/window",
    "sky": "landscape-nature/sky",
}


def _write_jpeg(path, image_id):
    """A 64x48 image, left half and right half in two colours that depend on the id."""
    if image_id == 12:  # one greyscale JPEG, as some IAPR photos are
        img = Image.new("L", (64, 48), 90)
    else:
        img = Image.new("RGB", (64, 48), (200, 30, (image_id * 7) % 256))
        img.paste((20, 40, 220), (32, 0, 64, 48))
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="JPEG", quality=95)


def write_saiapr(top, regions=REGIONS, wlist=WLIST, wlist_level=0, extra_lines=None):
    """saiaprtc12ok/benchmark/saiapr_tc-12/NN/{images,labels.txt,ontology_path.txt} + wlist.txt.

    ``wlist_level``: 0 puts wlist.txt in saiapr_tc-12/, 1 in benchmark/. ``extra_lines`` maps
    (folder, file name) to raw lines appended to that file. Returns the saiapr_tc-12 folder.
    """
    bench = top / "saiaprtc12ok" / "benchmark" / "saiapr_tc-12"
    for folder, rows in regions.items():
        sub = bench / folder
        sub.mkdir(parents=True)
        labels = [f"{img}\t{reg}\t{lab}" for img, reg, lab, _ in rows]
        chains = [f"{img}\t{reg}\t{chain}" for img, reg, _, chain in rows]
        for name, lines in (("labels.txt", labels), ("ontology_path.txt", chains)):
            lines = lines + list((extra_lines or {}).get((folder, name), []))
            (sub / name).write_text("\n".join(lines) + "\n")
        for image_id in IMAGES.get(folder, []):
            _write_jpeg(sub / "images" / f"{image_id}.jpg", image_id)
    wlist_dir = bench if wlist_level == 0 else bench.parent
    (wlist_dir / "wlist.txt").write_text(
        "".join(f"{i}\t{name}\n" for i, name in sorted(wlist.items()))
    )
    return bench


@pytest.fixture
def saiapr(tmp_path):
    return write_saiapr(tmp_path / "data")


def test_items_labels_and_tree(saiapr):
    ds, tree = iaprtc12_dataset(saiapr)
    assert ds.name == "iaprtc12"
    assert ds.ids.tolist() == [3, 10, 12, 25]  # image 11 (root only) and 99 (no region) left out
    assert ds.labels.tolist() == [
        PATHS["sky-blue"],
        PATHS["boy"] + LABEL_SEP + PATHS["sky-blue"],
        PATHS["window"],
        PATHS["sky"] + LABEL_SEP + PATHS["window"],
    ]
    assert tree.height == 7 and tree.names[0] == "entity"
    assert tree.levels[tree.node_id(PATHS["window"])] == 7
    assert tree.levels[tree.node_id(PATHS["sky"])] == 3
    assert sorted(tree.names[i] for i in tree.children(0)) == [
        "humans",
        "landscape-nature",
        "man-made",
    ]
    assert "animal" not in tree.names  # vocabulary words without a chain add no node
    for label in ds.labels:
        for path in label.split(LABEL_SEP):
            tree.node_id(path)  # every path resolves in the tree


def test_images_are_decoded_converted_and_resized(saiapr):
    ds, _ = iaprtc12_dataset(saiapr)
    assert ds.images.shape == (4, 32, 32, 3) and ds.images.dtype == np.uint8
    for row, (folder, image_id) in enumerate([("01", 3), ("00", 10), ("00", 12), ("01", 25)]):
        path = saiapr / folder / "images" / f"{image_id}.jpg"
        with Image.open(path) as img:
            expected = np.asarray(img.convert("RGB").resize((32, 32), RESAMPLE))
        np.testing.assert_array_equal(ds.images[row], expected)
    # the whole picture is squeezed, not cropped: both halves survive
    left, right = ds.images[0, :, :8].reshape(-1, 3), ds.images[0, :, -8:].reshape(-1, 3)
    assert np.abs(left.mean(0) - [200, 30, 21]).max() < 6
    assert np.abs(right.mean(0) - [20, 40, 220]).max() < 6
    grey = ds.images[2]  # a greyscale JPEG becomes three equal channels
    assert (grey[..., 0] == grey[..., 1]).all() and (grey[..., 1] == grey[..., 2]).all()


def test_root_above_the_benchmark_and_wlist_one_level_up(tmp_path):
    write_saiapr(tmp_path / "data", wlist_level=1)
    ds, tree = iaprtc12_dataset(tmp_path / "data")
    assert ds.ids.tolist() == [3, 10, 12, 25] and tree.height == 7
    assert find_benchmark(tmp_path / "data" / "saiaprtc12ok").name == "saiapr_tc-12"


def test_result_is_deterministic_and_survives_save_and_load(saiapr, tmp_path):
    a, tree_a = iaprtc12_dataset(saiapr)
    b, tree_b = iaprtc12_dataset(saiapr)
    assert tree_a == tree_b
    np.testing.assert_array_equal(a.images, b.images)
    back = load_dataset(save_dataset(a, tmp_path / "ds"), mmap=False)
    assert back.labels.tolist() == a.labels.tolist()
    np.testing.assert_array_equal(back.ids, a.ids)


def test_chain_notation_is_normalised():
    assert parse_chain("entity->->_a->_b->", "f", 1) == ("entity", "a", "b")
    assert parse_chain("'entity->_a'", "f", 1) == ("entity", "a")
    assert parse_chain("entity", "f", 1) == ("entity",)


def test_node_with_two_parents_names_both_chains_and_the_line(tmp_path):
    extra = {("01", "ontology_path.txt"): ["25\t3\tentity->->_humans->_sky"]}
    bench = write_saiapr(tmp_path / "data", extra_lines=extra)
    with pytest.raises(DataFormatError) as err:
        iaprtc12_dataset(bench)
    message = str(err.value)
    assert "01/ontology_path.txt:4" in message
    assert "node 'sky' has parent 'humans'" in message
    assert "'entity->->_humans->_sky'" in message and repr(SKY_BLUE) in message
    assert "00/ontology_path.txt:1" in message


def test_chain_not_starting_at_the_root_is_an_error(tmp_path):
    extra = {("00", "ontology_path.txt"): ["10\t9\t_humans->_person"]}
    bench = write_saiapr(tmp_path / "data", extra_lines=extra)
    with pytest.raises(DataFormatError, match=r"00/ontology_path.txt:6: chain .* does not start"):
        iaprtc12_dataset(bench)


def test_unknown_label_id_names_file_line_and_id(tmp_path):
    extra = {("01", "labels.txt"): ["25\t3\t777"]}
    bench = write_saiapr(tmp_path / "data", extra_lines=extra)
    with pytest.raises(DataFormatError, match=r"01/labels.txt:4: label_id 777 is not in wlist"):
        iaprtc12_dataset(bench)


def test_malformed_labels_line_is_reported(tmp_path):
    extra = {("00", "labels.txt"): ["12 2"]}
    bench = write_saiapr(tmp_path / "data", extra_lines=extra)
    with pytest.raises(DataFormatError, match=r"00/labels.txt:6: expected 'image_id region_id"):
        iaprtc12_dataset(bench)
    extra = {("00", "labels.txt"): ["12 x 35"]}
    bench = write_saiapr(tmp_path / "other", extra_lines=extra)
    with pytest.raises(DataFormatError, match=r"00/labels.txt:6: region_id: 'x' is not an int"):
        iaprtc12_dataset(bench)


def test_label_in_no_chain_is_reported(tmp_path):
    extra = {("00", "labels.txt"): ["12\t2\t40"]}  # "animal": in wlist.txt, in no chain
    bench = write_saiapr(tmp_path / "data", extra_lines=extra)
    with pytest.raises(DataFormatError, match=r"00/labels.txt:6: label_id 40 \('animal'"):
        iaprtc12_dataset(bench)


def test_wlist_problems_are_reported(tmp_path):
    bench = write_saiapr(tmp_path / "a", wlist={**WLIST, 50: "sky|blue"})
    with pytest.raises(DataFormatError, match=r"wlist.txt:\d+: name 'sky\|blue'"):
        iaprtc12_dataset(bench)
    bench = write_saiapr(tmp_path / "b")
    with open(bench / "wlist.txt", "a") as f:
        f.write("22\tsky-dark\n")
    with pytest.raises(DataFormatError, match="label_id 22 defined twice"):
        iaprtc12_dataset(bench)
    (bench / "wlist.txt").unlink()
    with pytest.raises(DataFormatError, match="wlist.txt not found"):
        iaprtc12_dataset(bench)


def test_image_listed_in_two_folders_is_an_error(tmp_path):
    extra = {("01", "labels.txt"): ["10\t9\t22"]}
    bench = write_saiapr(tmp_path / "data", extra_lines=extra)
    with pytest.raises(DataFormatError, match=r"01/labels.txt:4: image 10 is also listed in"):
        iaprtc12_dataset(bench)


def test_undecodable_image_is_an_error_or_skipped(saiapr, caplog):
    bad = saiapr / "00" / "images" / "12.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.raises(BadImageError, match=r"00/images/12.jpg: cannot decode image"):
        iaprtc12_dataset(saiapr)
    with caplog.at_level(logging.WARNING, logger="shdh.data.iaprtc12"):
        ds, _ = iaprtc12_dataset(saiapr, skip_bad_images=True)
    assert ds.ids.tolist() == [3, 10, 25]
    assert ds.labels.tolist()[2] == PATHS["sky"] + LABEL_SEP + PATHS["window"]
    assert "left out 1 image(s)" in caplog.text and "12.jpg" in caplog.text


def test_truncated_jpeg_is_a_bad_image(saiapr):
    path = saiapr / "01" / "images" / "25.jpg"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(BadImageError, match="25.jpg"):
        load_image(path)


def test_missing_image_is_an_error_or_skipped(saiapr):
    (saiapr / "01" / "images" / "3.jpg").unlink()
    with pytest.raises(BadImageError, match=r"01/images/3.jpg: image file missing"):
        iaprtc12_dataset(saiapr)
    ds, _ = iaprtc12_dataset(saiapr, skip_bad_images=True)
    assert ds.ids.tolist() == [10, 12, 25]


def test_decode_images_writes_kept_rows_compactly(saiapr):
    paths = read_index(saiapr).image_paths
    paths = (paths[0], saiapr / "00" / "images" / "404.jpg", paths[1])
    out = np.zeros((3, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    with pytest.raises(BadImageError, match="404.jpg"):
        decode_images(paths, out)
    kept = decode_images(paths, out, skip_bad_images=True)
    assert kept.tolist() == [0, 2]
    np.testing.assert_array_equal(out[0], load_image(paths[0]))
    np.testing.assert_array_equal(out[1], load_image(paths[2]))
    assert decode_images(paths[:1], out[:1]) is None
    with pytest.raises(ValueError, match="out must be uint8"):
        decode_images(paths, out[:2])


def test_images_from_the_iapr_tc12_layout(saiapr, tmp_path):
    images = tmp_path / "iaprtc12" / "images"
    images.mkdir(parents=True)
    for folder in ("00", "01"):
        (saiapr / folder / "images").rename(images / folder)  # images/NN/<id>.jpg
    ds, _ = iaprtc12_dataset(saiapr, images_dir=images)
    assert ds.ids.tolist() == [3, 10, 12, 25]
    assert ds.images.std() > 0


def _repack(tmp_path, saiapr, fmt):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    top = saiapr.parent.parent  # the saiaprtc12ok folder
    if fmt == "tar":
        archive = mirror / "saiaprtc12ok.tar.gz"
        with tarfile.open(archive, "w:gz") as tf:
            for child in sorted(top.iterdir()):
                tf.add(child, arcname=child.name)
    else:
        archive = mirror / "saiaprtc12ok.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            for path in sorted(top.rglob("*")):
                if path.is_file():
                    zf.write(path, path.relative_to(top).as_posix())
    return mirror, archive


@pytest.mark.parametrize("fmt", ["tar", "zip"])
def test_fetch_extracts_a_repacked_copy(saiapr, tmp_path, fmt, caplog):
    mirror, archive = _repack(tmp_path, saiapr, fmt)
    raw = tmp_path / "raw"
    with caplog.at_level(logging.WARNING, logger="shdh.data.iaprtc12"):
        bench = fetch_iaprtc12(raw, [mirror.as_uri()], volumes=[archive.name])
    assert "not verified" in caplog.text
    assert bench == raw / "saiaprtc12ok" / "benchmark" / "saiapr_tc-12"
    ds, tree = iaprtc12_dataset(raw)
    assert ds.ids.tolist() == [3, 10, 12, 25] and tree.height == 7
    # a second call finds the extracted copy and fetches nothing
    assert fetch_iaprtc12(raw, [str(tmp_path / "nowhere")], volumes=[archive.name]) == bench


def test_fetch_with_an_unsafe_member_leaves_nothing_extracted(saiapr, tmp_path):
    mirror, archive = _repack(tmp_path, saiapr, "zip")
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("../escaped.txt", b"x")
    raw = tmp_path / "raw"
    with pytest.raises(UnsafeArchiveError, match="'../escaped.txt'"):
        fetch_iaprtc12(raw, [str(mirror)], volumes=[archive.name])
    assert sorted(p.name for p in raw.iterdir()) == [archive.name]
    assert not (tmp_path / "escaped.txt").exists()


def test_fetch_rejects_one_string_as_sources(tmp_path):
    with pytest.raises(TypeError, match="sequence"):
        fetch_iaprtc12(tmp_path, "http://example.invalid/")
