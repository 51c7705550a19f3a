"""A CSV or Parquet table of (image path, label path) rows as a dataset.

    image,label
    photos/0001.jpg,vehicle/car/sedan
    photos/0002.jpg,animal/cat
    photos/0003.jpg,landscape/sky|humans/person     <- several labels, joined by "|"

A table suits collections whose files are not sorted by class, and items with several labels,
which a folder tree cannot express. Items keep the table's row order and their ids are the row
numbers (0 = the first row below the header); errors name a row as an editor shows it, by its
line in a CSV file (row_names). Relative image paths resolve against the folder that holds the
table, so a table and its images can move together.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shdh.core.hierarchy import LabelTree
from shdh.data.idx import DataFormatError
from shdh.data.images import (
    ImageItems,
    listed_problems,
    own_raw_dir,
    parse_label_cell,
)

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def read_columns(table_path: Path, columns: tuple[str, ...]) -> dict[str, list[object]]:
    """The named columns of a CSV (every cell as text) or Parquet table, as lists of cells."""
    suffix = table_path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise DataFormatError(
            f"{table_path}: unknown table format {suffix!r}; use one of {', '.join(TABLE_SUFFIXES)}"
        )
    if not table_path.is_file():
        raise DataFormatError(f"{table_path}: no such file")
    import pandas as pd  # only table users pay for the import

    try:
        if suffix == ".csv":
            frame = pd.read_csv(table_path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
        else:
            import pyarrow.parquet as pq

            available = pq.read_schema(table_path).names
            frame = pd.read_parquet(table_path, columns=[c for c in columns if c in available])
    except pd.errors.EmptyDataError:
        raise DataFormatError(f"{table_path}: empty file (no header, no rows)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError, ValueError) as exc:
        raise DataFormatError(f"{table_path}: cannot read the table: {exc}") from exc
    for column in columns:
        if column not in frame.columns:
            raise DataFormatError(
                f"{table_path}: column {column!r}: missing (the table has columns "
                f"{', '.join(map(repr, map(str, frame.columns)))}; name yours in params.yaml's "
                "data.table: image_column, label_column)"
            )
    if len(frame) == 0:
        raise DataFormatError(f"{table_path}: the table has no rows")
    return {column: frame[column].tolist() for column in columns}


def row_names(table_path: Path, n_rows: int) -> list[str]:
    """How errors name each row: a CSV row by the line of the file it starts on, counting the
    header (line 1 when it is the first line), as an editor shows it; a Parquet row, which has
    no line, by its number counting from 1.

    The lines are counted as pandas reads the rows: blank lines are skipped and a quoted cell
    may span lines. Should the count disagree with pandas' rows (a file pandas reads in some
    other way), rows are named by number, as Parquet's are, rather than by a wrong line.
    """
    numbered = [f"row {row + 1}" for row in range(n_rows)]
    if table_path.suffix.lower() != ".csv":
        return numbered
    starts = []
    try:
        with open(table_path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            start = 1
            for record in reader:
                blank = not record or (len(record) == 1 and record[0].isspace())
                if not blank:  # pandas skips empty and whitespace-only lines, not `""`
                    starts.append(start)
                start = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error):
        return numbered
    lines = starts[1:]  # starts[0] is the header's
    return [f"line {line}" for line in lines] if len(lines) == n_rows else numbered


def _image_path(cell: object, base: Path, where: str) -> Path:
    if not isinstance(cell, str) or not cell.strip():
        raise DataFormatError(f"{where}: expected an image path, got {cell!r}")
    path = Path(cell.strip())
    return path if path.is_absolute() else base / path


def table_items(
    table_path: str | os.PathLike[str],
    image_column: str = "image",
    label_column: str = "label",
    name: str | None = None,
) -> ImageItems:
    """The image paths, normalised label cells and origins (for errors) of every row, all
    checked; `name` (default: the table's file name without suffix) names the dataset and the
    tree's root.

    Every row is checked (labels, image files present) before any image is decoded, so a typo
    in row 50,000 fails in seconds, and every bad row is named in one error (listed_problems),
    by its line in the file (row_names). Also what the pipeline hashes to notice an edited
    image.
    """
    table_path = Path(table_path)
    cells = read_columns(table_path, (image_column, label_column))
    base = table_path.absolute().parent
    names = row_names(table_path, len(cells[image_column]))
    paths, labels, origins, problems = [], [], [], []
    bad_rows = 0
    for row_name, image_cell, label_cell in zip(
        names, cells[image_column], cells[label_column], strict=True
    ):
        where = f"{table_path}: {row_name}"
        found = len(problems)
        try:
            path = _image_path(image_cell, base, f"{where}: column {image_column!r}")
            if path.is_dir():
                problems.append(
                    f"{where}: column {image_column!r}: {image_cell!r} is a folder, not an "
                    f"image file ({path})"
                )
            elif not path.is_file():
                problems.append(
                    f"{where}: column {image_column!r}: image file {image_cell!r} does not "
                    f"exist (looked for {path})"
                )
        except DataFormatError as exc:
            path = None
            problems.append(str(exc))
        try:
            labels.append(parse_label_cell(label_cell, f"{where}: column {label_column!r}"))
        except DataFormatError as exc:
            problems.append(str(exc))
        bad_rows += len(problems) > found
        paths.append(path)
        origins.append(f"{where} ({image_cell})")
    if problems:
        summary = f"{table_path}: {len(problems)} problems in {bad_rows} of {len(names)} rows:"
        raise DataFormatError(listed_problems(problems, summary))
    return ImageItems(
        paths=paths,
        labels=labels,
        origins=origins,
        source=str(table_path),
        name=name if name is not None else table_path.stem,
    )


def check_table(
    table_path: str | os.PathLike[str],
    image_column: str = "image",
    label_column: str = "label",
    *,
    inner_labels: bool = False,
    name: str | None = None,
) -> list[Path]:
    """Every check of table_dataset that needs no image decoded (the rows, the labels and
    their tree, the dataset's name); returns the image paths. The pipeline's inputs stage runs
    it, so that such errors stop `dvc repro` before it deletes the prepared data."""
    items = table_items(table_path, image_column, label_column, name)
    items.check(inner_labels=inner_labels)
    return list(items.paths)


def table_dataset(
    table_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    image_column: str = "image",
    label_column: str = "label",
    name: str | None = None,
    **options: Any,
) -> tuple[Path, LabelTree]:
    """Convert a CSV/Parquet table into a dataset directory at out_dir; return the label tree.

    Every row is one item (see table_items for the checks made before decoding). A file that
    exists but cannot be decoded is an error unless skip_bad_images; a missing file always
    is. options: those of shdh.data.images.ImageItems.write (image_size, color,
    skip_bad_images, workers, inner_labels, shard_mb).
    """
    items = table_items(table_path, image_column, label_column, name)
    return items.write(out_dir, **options)


# The prepare step's recipe for `data.dataset: table` (shdh.data.dataset_catalogue).


def fetch_raw(raw_dir: Path, *, sources: Sequence[str], verify: bool) -> Path:
    """Your own table is not fetched: it must be at raw_dir already."""
    return own_raw_dir(raw_dir, "table")


def convert(raw_dir: Path, out: Path, *, verify: bool, table: dict | None, **reader) -> LabelTree:
    """table_dataset with the readers' options and the columns (data.table) the settings give."""
    columns = {k: v for k, v in (table or {}).items() if k in ("image_column", "label_column")}
    return table_dataset(raw_dir, out, **reader, **columns)[1]
