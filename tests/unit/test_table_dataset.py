"""CSV / Parquet table datasets: columns, path resolution, multi-label cells, bad input."""

import os
import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from shdh.data.dataset import load_dataset
from shdh.data.idx import DataFormatError
from shdh.data.images import ImageDecodeError
from shdh.data.table import row_names, table_dataset


def png(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def images(tmp_path):
    """Three images under tmp_path/data/img and one outside the table's folder."""
    png(tmp_path / "data" / "img" / "a.png", 10)
    png(tmp_path / "data" / "img" / "b.png", 20)
    png(tmp_path / "data" / "img" / "c.png", 30)
    return png(tmp_path / "elsewhere" / "d.png", 40)


def write_csv(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_csv_keeps_row_order_resolves_paths_and_multi_labels(tmp_path, images):
    table = write_csv(
        tmp_path / "data" / "items.csv",
        "label,image,extra\n"
        "vehicle/car/sedan,img/c.png,1\n"
        " animal / cat ,img/a.png,2\n"
        f"animal/dog|vehicle/car/sedan,{images},3\n"
        "animal/cat,img/b.png,4\n",
    )
    out, tree = table_dataset(table, tmp_path / "out", image_size=4)
    ds = load_dataset(out)
    assert ds.name == "items" and ds.ids.tolist() == [0, 1, 2, 3]
    assert ds.images.shape == (4, 4, 4, 3)
    assert ds.images[:, 0, 0, 0].tolist() == [30, 10, 40, 20]
    assert ds.labels.tolist() == [
        "vehicle/car/sedan",
        "animal/cat",
        "animal/dog|vehicle/car/sedan",
        "animal/cat",
    ]
    assert tree.names[0] == "items" and tree.height == 4
    assert sorted(tree.path(n) for n in tree.leaves) == [
        "animal/cat",
        "animal/dog",
        "vehicle/car/sedan",
    ]


def test_parquet_with_custom_columns(tmp_path, images):
    table = tmp_path / "data" / "t.parquet"
    pd.DataFrame(
        {"file": ["img/b.png", "img/a.png"], "path": ["x/y", "x/z"], "other": [1.5, 2.5]}
    ).to_parquet(table)
    out, tree = table_dataset(
        table, tmp_path / "out", image_column="file", label_column="path", color=False
    )
    ds = load_dataset(out)
    assert ds.images.shape == (2, 32, 32) and ds.labels.tolist() == ["x/y", "x/z"]
    assert tree.height == 3
    with pytest.raises(DataFormatError, match=r"t\.parquet: column 'image': missing"):
        table_dataset(table, tmp_path / "out2")


def test_csv_with_byte_order_mark(tmp_path, images):
    table = tmp_path / "data" / "bom.csv"
    table.write_bytes("\ufeffimage,label\nimg/a.png,a/b\n".encode())
    out, _ = table_dataset(table, tmp_path / "out")
    assert load_dataset(out).labels.tolist() == ["a/b"]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", r"empty file"),
        ("image,label\n", r"the table has no rows"),
        ("image,lbl\nimg/a.png,a/b\n", r"column 'label': missing \(the table has columns"),
        ("image,label\nimg/a.png,a/b\nimg/b.png,\n", r"line 3: column 'label': empty label"),
        ("image,label\nimg/a.png,a//b\n", r"line 2: column 'label': .*empty path component"),
        ("image,label\nimg/a.png,a/b|\n", r"line 2: column 'label': .*empty path component"),
        ("image,label\n,a/b\n", r"line 2: column 'image': expected an image path"),
        ("image,label\nimg/a.png,a/b\nimg/b.png,a\n", r"line 3 \(img/b\.png\): label 'a' is an"),
    ],
)
def test_bad_tables_are_refused_naming_file_and_problem(tmp_path, images, text, problem):
    table = write_csv(tmp_path / "data" / "t.csv", text)
    with pytest.raises(DataFormatError, match=rf"^{re.escape(str(table))}: {problem}"):
        table_dataset(table, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_missing_image_files_are_all_named_by_line_and_path(tmp_path, images):
    table = write_csv(
        tmp_path / "data" / "t.csv",
        "image,label\nimg/a.png,a/b\nimg/nope.png,a/b\nimg/gone.png,a/c\n",
    )
    with pytest.raises(DataFormatError) as err:
        table_dataset(table, tmp_path / "out")
    lines = str(err.value).splitlines()
    assert lines[0] == f"{table}: 2 problems in 2 of 3 rows:"
    assert lines[1].startswith(f"  {table}: line 3: column 'image': image file 'img/nope.png'")
    assert str(tmp_path / "data" / "img" / "nope.png") in lines[1]
    assert lines[2].startswith(f"  {table}: line 4: column 'image': image file 'img/gone.png'")
    assert len(lines) == 3


def test_every_bad_row_is_named_up_to_a_cap(tmp_path, images):
    rows = [f"img/missing{i}.png,a/b" for i in range(23)] + ["img/a.png,a//b"]
    table = write_csv(tmp_path / "data" / "t.csv", "image,label\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataFormatError) as err:
        table_dataset(table, tmp_path / "out")
    lines = str(err.value).splitlines()
    assert lines[0] == f"{table}: 24 problems in 24 of 24 rows:"
    assert [line.split(": ")[1] for line in lines[1:21]] == [f"line {i}" for i in range(2, 22)]
    assert lines[21:] == ["  and 4 more"]
    assert not (tmp_path / "out").exists()


def test_a_row_with_a_missing_file_and_a_bad_label_gets_both_named(tmp_path, images):
    table = write_csv(tmp_path / "data" / "t.csv", "image,label\nimg/x.png,a//b\nimg/a.png,a\n")
    with pytest.raises(DataFormatError) as err:
        table_dataset(table, tmp_path / "out")
    lines = str(err.value).splitlines()
    assert lines[0] == f"{table}: 2 problems in 1 of 2 rows:"
    assert "line 2: column 'image': image file 'img/x.png' does not exist" in lines[1]
    assert "line 2: column 'label': label 'a//b' has an empty path component" in lines[2]


def test_an_image_cell_naming_a_folder_says_so(tmp_path, images):
    table = write_csv(tmp_path / "data" / "t.csv", "image,label\nimg,a/b\nimg/a.png,a/c\n")
    with pytest.raises(DataFormatError) as err:
        table_dataset(table, tmp_path / "out")
    assert "line 2: column 'image': 'img' is a folder, not an image file" in str(err.value)


def test_rows_are_named_by_the_line_they_start_on(tmp_path, images):
    """Blank lines (which pandas skips) and a quoted cell over two lines still give the line an
    editor shows; the header is line 1."""
    table = write_csv(
        tmp_path / "data" / "t.csv",
        '\nimage,label\nimg/a.png,a/b\n\n   \nimg/b.png,"a/\nc"\nimg/x.png,a/d\nimg/c.png,a//d\n',
    )
    with pytest.raises(DataFormatError) as err:
        table_dataset(table, tmp_path / "out")
    lines = str(err.value).splitlines()
    assert lines[0] == f"{table}: 2 problems in 2 of 4 rows:"
    assert lines[1].startswith(f"  {table}: line 8: column 'image': image file 'img/x.png'")
    assert lines[2].startswith(f"  {table}: line 9: column 'label'")
    assert row_names(table, 4) == ["line 3", "line 6", "line 8", "line 9"]
    assert row_names(table, 5) == [f"row {i}" for i in range(1, 6)]  # not pandas' count
    assert row_names(tmp_path / "t.parquet", 2) == ["row 1", "row 2"]


def test_unknown_suffix_and_missing_table(tmp_path):
    with pytest.raises(DataFormatError, match=r"t\.xlsx: unknown table format '\.xlsx'"):
        table_dataset(write_csv(tmp_path / "t.xlsx", "x"), tmp_path / "out")
    with pytest.raises(DataFormatError, match=r"nope\.csv: no such file"):
        table_dataset(tmp_path / "nope.csv", tmp_path / "out")


def test_parquet_null_label(tmp_path, images):
    table = tmp_path / "data" / "t.parquet"
    pd.DataFrame({"image": ["img/a.png", "img/b.png"], "label": ["a/b", None]}).to_parquet(table)
    with pytest.raises(DataFormatError, match=r"t\.parquet: row 2: column 'label': empty label"):
        table_dataset(table, tmp_path / "out")


def test_undecodable_image_names_it_and_nothing_is_left_behind(tmp_path, images):
    (tmp_path / "data" / "img" / "b.png").write_bytes(b"not a png")
    table = write_csv(tmp_path / "data" / "t.csv", "image,label\nimg/a.png,a/b\nimg/b.png,a/c\n")
    with pytest.raises(ImageDecodeError, match=r"img/b\.png: cannot decode image"):
        table_dataset(table, tmp_path / "out" / "ds")
    assert os.listdir(tmp_path / "out") == []
    out, tree = table_dataset(table, tmp_path / "out" / "ds", skip_bad_images=True)
    ds = load_dataset(out)
    assert ds.ids.tolist() == [0] and ds.labels.tolist() == ["a/b"]
    assert [tree.path(n) for n in tree.leaves] == ["a/b"]


def test_dataset_name_may_not_contain_separators(tmp_path, images):
    table = write_csv(tmp_path / "data" / "t.csv", "image,label\nimg/a.png,a/b\n")
    for bad in ("x|y", "x/y"):
        with pytest.raises(DataFormatError, match="contains"):
            table_dataset(table, tmp_path / "out", name=bad)
