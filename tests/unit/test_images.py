"""Decoding, the streaming loop, label checks and the streaming dataset writer."""

import json
import logging
import os

import numpy as np
import pytest
from PIL import Image

from shdh.data.dataset import load_dataset, save_dataset, write_dataset_streaming
from shdh.data.idx import DataFormatError
from shdh.data.images import (
    MAX_LISTED,
    ImageDecodeError,
    ImageSpec,
    decode_image,
    label_tree,
    listed_problems,
    parse_label_cell,
    resolve_workers,
    stream_images,
)


def noise(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def write_png(path, array, **save_kwargs):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, **save_kwargs)
    return path


# ---- decode_image ---------------------------------------------------------------------------


def test_png_at_target_size_decodes_exactly(tmp_path):
    rgb = noise((32, 32, 3))
    assert np.array_equal(decode_image(write_png(tmp_path / "a.png", rgb), ImageSpec()), rgb)
    gray = noise((32, 32), seed=1)
    got = decode_image(write_png(tmp_path / "g.png", gray), ImageSpec(color=False))
    assert got.dtype == np.uint8 and np.array_equal(got, gray)


def test_resize_and_colour_conversion(tmp_path):
    big = np.zeros((64, 96, 3), dtype=np.uint8)
    big[:, 48:] = 200  # right half bright
    path = write_png(tmp_path / "big.png", big)
    out = decode_image(path, ImageSpec(height=16, width=24))
    assert out.shape == (16, 24, 3)
    assert out[:, :10].max() == 0 and out[:, 14:].min() == 200
    gray_from_rgb = decode_image(path, ImageSpec(height=16, width=24, color=False))
    assert gray_from_rgb.shape == (16, 24)
    rgba = write_png(tmp_path / "rgba.png", noise((8, 8, 4)))
    assert decode_image(rgba, ImageSpec(8, 8)).shape == (8, 8, 3)
    gray_src = write_png(tmp_path / "gray.png", noise((8, 8)))
    rgb = decode_image(gray_src, ImageSpec(8, 8))
    assert rgb.shape == (8, 8, 3) and np.array_equal(rgb[..., 0], rgb[..., 2])


def test_16_bit_grayscale_is_scaled_not_clipped(tmp_path):
    deep = (np.arange(64, dtype=np.uint16).reshape(8, 8) * 1024) + 5
    path = tmp_path / "deep.png"
    Image.fromarray(deep).save(path)
    assert np.array_equal(decode_image(path, ImageSpec(8, 8, color=False)), deep >> 8)


def test_jpeg_is_decoded_with_draft_to_the_target_size(tmp_path):
    path = tmp_path / "photo.jpg"
    Image.fromarray(np.full((400, 300, 3), 120, dtype=np.uint8)).save(path, quality=95)
    out = decode_image(path, ImageSpec(32, 32))
    assert out.shape == (32, 32, 3) and abs(int(out.mean()) - 120) <= 2


def test_exif_orientation_is_applied(tmp_path):
    src = noise((20, 40, 3))  # 20 high, 40 wide, stored sideways
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise to display"
    path = write_png(tmp_path / "sideways.png", src, exif=exif)
    out = decode_image(path, ImageSpec(height=40, width=20))
    assert np.array_equal(out, np.rot90(src, k=-1))


@pytest.mark.parametrize(
    "content", [b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, b""]
)
def test_undecodable_file_names_its_path(tmp_path, content):
    path = tmp_path / "broken.png"
    path.write_bytes(content)
    with pytest.raises(ImageDecodeError, match=r"broken\.png: cannot decode image"):
        decode_image(path, ImageSpec())


def test_truncated_png_is_an_error(tmp_path):
    path = write_png(tmp_path / "t.png", noise((64, 64, 3)))
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(ImageDecodeError, match=r"t\.png"):
        decode_image(path, ImageSpec())


def test_image_spec_validates_sizes():
    assert ImageSpec.of(28, color=False).shape == (28, 28)
    assert ImageSpec.of((16, 24), color=True).shape == (16, 24, 3)
    for bad in (0, -3, 2.5, True, (4, 4, 4)):
        with pytest.raises(ValueError, match="image_size"):
            ImageSpec.of(bad, color=True)


# ---- stream_images --------------------------------------------------------------------------


def make_files(tmp_path, n, bad=()):
    arrays, paths = [], []
    for i in range(n):
        path = tmp_path / f"img{i:03d}.png"
        if i in bad:
            path.write_bytes(b"garbage")
            arrays.append(None)
        else:
            arrays.append(noise((8, 8, 3), seed=i))
            write_png(path, arrays[-1])
        paths.append(path)
    return paths, arrays


def test_stream_in_process_and_pool_give_the_same_rows_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr("shdh.data.images.BATCH_SIZE", 4)  # several batches in flight
    paths, arrays = make_files(tmp_path, 11)
    spec = ImageSpec(8, 8)
    for workers in (0, 2):
        out = np.zeros((11, 8, 8, 3), dtype=np.uint8)
        assert stream_images(paths, out, spec, workers=workers) is None
        assert np.array_equal(out, np.stack(arrays)), workers


def test_stream_stops_at_a_bad_image_naming_it(tmp_path):
    paths, _ = make_files(tmp_path, 5, bad={3})
    with pytest.raises(ImageDecodeError, match=r"img003\.png: cannot decode"):
        stream_images(paths, np.zeros((5, 8, 8, 3), np.uint8), ImageSpec(8, 8), workers=0)


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_names_every_undecodable_image_in_one_error(tmp_path, monkeypatch, workers):
    monkeypatch.setattr("shdh.data.images.BATCH_SIZE", 3)  # bad files in different batches
    paths, _ = make_files(tmp_path, 8, bad={1, 6, 7})
    with pytest.raises(ImageDecodeError) as err:
        stream_images(paths, np.zeros((8, 8, 8, 3), np.uint8), ImageSpec(8, 8), workers=workers)
    lines = str(err.value).splitlines()
    assert lines[0].startswith("3 of 8 image files cannot be decoded; set data.skip_bad_images")
    assert [line.split(": ")[0] for line in lines[1:]] == [
        f"  {tmp_path / name}" for name in ("img001.png", "img006.png", "img007.png")
    ]


def test_listed_problems_names_one_as_it_is_and_many_up_to_a_cap():
    assert listed_problems(["a: bad"], "summary:") == "a: bad"
    assert listed_problems(["a: bad", "b: bad"], "2 problems:") == "2 problems:\n  a: bad\n  b: bad"
    many = listed_problems([f"f{i}: bad" for i in range(MAX_LISTED + 5)], "s:").splitlines()
    assert len(many) == 1 + MAX_LISTED + 1 and many[-1] == "  and 5 more"
    assert many[MAX_LISTED] == f"  f{MAX_LISTED - 1}: bad"


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_skips_bad_images_packs_rows_and_logs(tmp_path, monkeypatch, caplog, workers):
    monkeypatch.setattr("shdh.data.images.BATCH_SIZE", 3)
    paths, arrays = make_files(tmp_path, 8, bad={1, 6})
    out = np.zeros((8, 8, 8, 3), dtype=np.uint8)
    with caplog.at_level(logging.WARNING, logger="shdh.data.images"):
        kept = stream_images(paths, out, ImageSpec(8, 8), skip_bad_images=True, workers=workers)
    assert kept.tolist() == [0, 2, 3, 4, 5, 7]
    assert np.array_equal(out[:6], np.stack([arrays[i] for i in kept]))
    assert "img001.png" in caplog.text and "img006.png" in caplog.text
    assert "skipped 2 undecodable image(s) of 8" in caplog.text


def test_stream_with_only_bad_images_fails(tmp_path):
    paths, _ = make_files(tmp_path, 2, bad={0, 1})
    with pytest.raises(ImageDecodeError, match="none of the 2 image files"):
        stream_images(
            paths, np.zeros((2, 8, 8, 3), np.uint8), ImageSpec(8, 8), skip_bad_images=True
        )


def test_resolve_workers():
    assert resolve_workers(None, 10) == 0  # small input: no pool
    assert resolve_workers(0, 10**6) == 0 and resolve_workers(1, 10**6) == 0
    assert resolve_workers(3, 5) == 3
    assert 0 <= resolve_workers(None, 10**6) <= 4
    for bad in (-1, 2.0, True):
        with pytest.raises(ValueError, match="workers"):
            resolve_workers(bad, 100)


# ---- labels ---------------------------------------------------------------------------------


def test_parse_label_cell_normalises_and_rejects():
    assert parse_label_cell(" a / b ", "w") == "a/b"
    assert parse_label_cell("a/b | c", "w") == "a/b|c"
    for cell, problem in [
        ("", "empty label"),
        ("   ", "empty label"),
        (None, "empty label"),
        (float("nan"), "empty label"),
        ("a//b", "empty path component"),
        ("a/b/", "empty path component"),
        ("a/b|", "empty path component"),
        (3, "expected a label path"),
    ]:
        with pytest.raises(DataFormatError, match=f"^t.csv: row 2: .*{problem}"):
            parse_label_cell(cell, "t.csv: row 2")


def test_label_tree_leaves_at_different_depths_and_sorted_node_order():
    labels = ["vehicle/car/sedan", "animal/cat", "animal/dog|vehicle/car/sedan"]
    tree = label_tree(labels, ["x"] * 3, source="src", root="mine", inner_labels=False)
    assert tree.names[0] == "mine" and tree.height == 4
    assert tree.names[1:3] == ("animal", "vehicle")  # sorted, not first-seen
    row = tree.ancestors_of_labels(["animal/cat"])[0]
    assert row[3] == -1


def test_inner_node_label_is_refused_unless_allowed():
    labels = ["animal/cat/persian", "animal/cat", "animal/dog"]
    origins = ["r/animal/cat/persian/a.png", "r/animal/cat/b.png", "r/animal/dog/c.png"]
    with pytest.raises(DataFormatError) as err:
        label_tree(labels, origins, source="r", root="r", inner_labels=False)
    message = str(err.value)
    assert message.startswith("r/animal/cat/b.png: label 'animal/cat' is an inner node")
    assert "animal/cat/persian" in message and "data.inner_labels: true" in message
    tree = label_tree(labels, origins, source="r", root="r", inner_labels=True)
    cat = tree.ancestors_of_labels(["animal/cat"])[0]
    assert cat[2] >= 0 and cat[3] == -1


def test_every_item_labelled_at_an_inner_node_is_named_in_item_order():
    labels = ["a/b/c", "a/b", "a|x/y", "a/b"]
    origins = ["t.csv: line 2", "t.csv: line 3", "t.csv: line 4", "t.csv: line 5"]
    with pytest.raises(DataFormatError) as err:
        label_tree(labels, origins, source="t.csv", root="r", inner_labels=False)
    lines = str(err.value).splitlines()
    assert lines[0].startswith("t.csv: 3 item labels are inner nodes of the label tree; give")
    assert [line.split(": label ")[1].split(" is")[0] for line in lines[1:]] == [
        "'a/b'",
        "'a'",
        "'a/b'",
    ]
    assert lines[1].startswith("  t.csv: line 3: label 'a/b' is an inner node")
    assert "e.g. 'a/b/c'" in lines[1] and lines[3].startswith("  t.csv: line 5")


def test_label_tree_keeps_repeated_names_under_different_parents():
    labels = ["toy/car", "vehicle/car", "vehicle/car"]
    tree = label_tree(labels, ["a", "b", "c"], source="t.csv", root="r", inner_labels=False)
    cars = tree.ancestors_of_labels(["toy/car", "vehicle/car"])[:, 2]
    assert tree.names.count("car") == 2 and cars[0] != cars[1]


def test_label_tree_error_names_the_source():
    with pytest.raises(DataFormatError, match=r"^table\.csv: label tree: .*empty component"):
        label_tree(["toy//car"], ["a"], source="table.csv", root="r", inner_labels=False)


# ---- write_dataset_streaming ----------------------------------------------------------------


def fields(n):
    return np.array([f"a/b{i}" for i in range(n)]), np.arange(10, 10 + n, dtype=np.int64)


def test_streaming_writer_matches_save_dataset(tmp_path):
    images = noise((5, 4, 6, 3))
    labels, ids = fields(5)

    def fill(out):
        assert isinstance(out, np.memmap) and out.shape == (5, 4, 6, 3)
        out[:] = images

    streamed = write_dataset_streaming(tmp_path / "s", 5, (4, 6, 3), labels, ids, "toy", fill)
    from shdh.data.dataset import Dataset

    saved = save_dataset(Dataset(images, labels, ids, "toy"), tmp_path / "d")
    for name in ("images.npy", "labels.npy", "ids.npy", "meta.json"):
        assert (streamed / name).read_bytes() == (saved / name).read_bytes(), name
    assert sorted(os.listdir(tmp_path)) == ["d", "s"]


def test_streaming_writer_keeps_only_the_returned_rows(tmp_path):
    labels, ids = fields(6)
    images = noise((6, 3, 3))

    def fill(out):
        out[:3] = images[[0, 2, 5]]
        return np.array([0, 2, 5])

    out_dir = write_dataset_streaming(tmp_path / "s", 6, (3, 3), labels, ids, "toy", fill)
    ds = load_dataset(out_dir)
    assert np.array_equal(ds.images, images[[0, 2, 5]])
    assert ds.labels.tolist() == ["a/b0", "a/b2", "a/b5"] and ds.ids.tolist() == [10, 12, 15]
    meta = json.loads((out_dir / "meta.json").read_text())
    assert meta["n_items"] == 3 and meta["image_shape"] == [3, 3]
    header_and_data = (out_dir / "images.npy").stat().st_size
    assert header_and_data == 128 + 3 * 9  # cut in place, no leftover rows


def test_streaming_writer_failure_leaves_the_old_dataset(tmp_path):
    labels, ids = fields(2)
    first = write_dataset_streaming(
        tmp_path / "d", 2, (2, 2), labels, ids, "old", lambda out: out.fill(7)
    )

    def failing(out):
        out[0] = 1
        raise RuntimeError("decoder died")

    with pytest.raises(RuntimeError, match="decoder died"):
        write_dataset_streaming(tmp_path / "d", 2, (2, 2), labels, ids, "new", failing)
    assert os.listdir(tmp_path) == ["d"]
    assert load_dataset(first).name == "old" and load_dataset(first).images.max() == 7


@pytest.mark.parametrize(
    "kept, problem",
    [
        (np.array([2, 1]), "not ascending"),
        (np.array([0, 9]), "not ascending"),
        (np.array([], dtype=np.int64), "no items left"),
    ],
)
def test_streaming_writer_rejects_bad_kept_positions(tmp_path, kept, problem):
    labels, ids = fields(3)
    with pytest.raises(DataFormatError, match=problem):
        write_dataset_streaming(tmp_path / "d", 3, (2, 2), labels, ids, "x", lambda out: kept)
    assert os.listdir(tmp_path) == []


def test_streaming_writer_validates_before_writing(tmp_path):
    labels, ids = fields(3)
    never = pytest.fail
    with pytest.raises(DataFormatError, match="n_items"):
        write_dataset_streaming(tmp_path / "d", 0, (2, 2), labels[:0], ids[:0], "x", never)
    with pytest.raises(DataFormatError, match="image_shape"):
        write_dataset_streaming(tmp_path / "d", 3, (2,), labels, ids, "x", never)
    with pytest.raises(DataFormatError, match="labels: expected str array of shape"):
        write_dataset_streaming(tmp_path / "d", 4, (2, 2), labels, ids, "x", never)
    with pytest.raises(DataFormatError, match="ids: duplicate"):
        write_dataset_streaming(tmp_path / "d", 3, (2, 2), labels, ids * 0, "x", never)
    assert not (tmp_path / "d").exists()
