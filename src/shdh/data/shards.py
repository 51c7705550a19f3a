"""Images stored as uint8 shards, images/shard-00000.npy, ..., instead of one images.npy.

A million photos at 224 px is 150 GB: more than memory, and more than one file should be. DVC
hashes, deduplicates and uploads a dataset file by file, and a reader on another machine fetches
only the shards it reads. Each shard is a plain .npy file of up to `shard_items` rows (about
data.shard_mb MiB), so it memory-maps as images.npy does; meta.json lists the shards in order
with their row counts and SHA-256 digests (shdh.data.dataset writes and checks the rest of the
directory).

ShardWriter is what a streaming converter fills (slice assignment across shard boundaries);
ShardedImages reads the shards back as one array: rows by int, slice or index array, gathered
from the memory-mapped shards. It pickles as the shards' locations, never their pixels, so
DataLoader worker processes can share it. Shards in an object store come through
shdh.data.shards_s3.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from shdh.data.download import sha256sum
from shdh.data.idx import DataFormatError

SHARD_DIR = "images"  # the shards' folder inside a dataset directory
MIB = 2**20
SHARD_FILE = re.compile(rf"^{SHARD_DIR}/shard-(\d{{5}})\.npy$")
_FORMAT = np.lib.format
_HEADER_READERS = {(1, 0): _FORMAT.read_array_header_1_0, (2, 0): _FORMAT.read_array_header_2_0}
_HEADER_WRITERS = {(1, 0): _FORMAT.write_array_header_1_0, (2, 0): _FORMAT.write_array_header_2_0}


def shard_name(index: int) -> str:
    """Shard `index`'s path relative to the dataset directory, as meta.json lists it."""
    return f"{SHARD_DIR}/shard-{index:05d}.npy"


def shard_items(image_shape: Sequence[int], shard_mb: float) -> int:
    """Rows per shard: as many images as fit in shard_mb MiB, at least one."""
    if isinstance(shard_mb, bool) or not isinstance(shard_mb, int | float) or not shard_mb > 0:
        raise ValueError(f"shard_mb: expected a positive number of MiB, got {shard_mb!r}")
    row_bytes = int(np.prod(image_shape, dtype=np.int64))
    return max(1, int(shard_mb * MIB // row_bytes))


def npy_header(path: Path) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran_order, dtype, data offset) of a .npy file, read without mapping it."""
    try:
        with open(path, "rb") as f:
            version = _FORMAT.read_magic(f)
            if version not in _HEADER_READERS:
                raise ValueError(f"unsupported .npy version {version}")
            shape, fortran, dtype = _HEADER_READERS[version](f)
            return tuple(shape), bool(fortran), dtype, f.tell()
    except (ValueError, OSError, EOFError) as exc:
        raise DataFormatError(f"{path}: unreadable .npy header: {exc}") from exc


def truncate_npy_rows(path: Path, n_rows: int) -> None:
    """Keep only the first n_rows of a C-order .npy file, in place.

    NumPy pads every header with spare room for the digits of the first dimension (so that files
    can grow in place), so the header for fewer rows has the same length; rewriting it and
    cutting the data costs no copy.
    """
    with open(path, "r+b") as f:
        version = _FORMAT.read_magic(f)
        if version not in _HEADER_READERS:
            raise DataFormatError(f"{path}: cannot shrink a version {version} .npy file in place")
        shape, fortran, dtype = _HEADER_READERS[version](f)
        offset = f.tell()
        header = io.BytesIO()
        new_shape = (n_rows, *shape[1:])
        _HEADER_WRITERS[version](
            header,
            {"descr": _FORMAT.dtype_to_descr(dtype), "fortran_order": fortran, "shape": new_shape},
        )
        if fortran or header.tell() != offset:
            raise DataFormatError(f"{path}: cannot shrink in place (the header length changed)")
        f.seek(0)
        f.write(header.getvalue())
        f.truncate(offset + int(np.prod(new_shape, dtype=np.int64)) * dtype.itemsize)


class ShardWriter:
    """A writable (n, *image_shape) uint8 array-like over the shard files of a directory being
    written: `out[a:b] = batch` and `out[i] = image` may cross shard boundaries. One shard is
    mapped at a time, so a converter writing in order keeps one shard's pages in play."""

    dtype = np.dtype(np.uint8)

    def __init__(self, folder: Path, n: int, image_shape: tuple[int, ...], rows: int) -> None:
        self.folder, self.rows = Path(folder), int(rows)
        self.shape = (int(n), *image_shape)
        self.ndim = len(self.shape)
        self.mapped: tuple[int, np.memmap] | None = None
        (self.folder / SHARD_DIR).mkdir(exist_ok=True)

    def __len__(self) -> int:
        return self.shape[0]

    def fill(self, value: int) -> None:
        self[:] = value

    def __setitem__(self, key: int | slice, value: Any) -> None:
        start, stop = row_span(key, len(self))
        value = np.broadcast_to(np.asarray(value), (stop - start, *self.shape[1:]))
        while start < stop:
            index, first = divmod(start, self.rows)
            end = min(stop, (index + 1) * self.rows)
            self.shard(index)[first : first + end - start] = value[: end - start]
            value, start = value[end - start :], end

    def shard(self, index: int) -> np.memmap:
        """Shard `index`, created full size (zeros) on first use."""
        if self.mapped is None or self.mapped[0] != index:
            self.close()
            path = self.folder / shard_name(index)
            rows = min(self.rows, len(self) - index * self.rows)
            shape = (rows, *self.shape[1:])
            mode = "r+" if path.exists() else "w+"
            self.mapped = (index, _FORMAT.open_memmap(path, mode, np.uint8, shape))
        return self.mapped[1]

    def close(self) -> None:
        if self.mapped is not None:
            self.mapped[1].flush()
            self.mapped = None  # unmaps it

    def finish(self, n_rows: int) -> list[dict[str, Any]]:
        """Keep the first n_rows (the rows a converter kept, written compactly): drop the shards
        past them, cut the last one, and list every shard as meta.json records it."""
        self.close()
        entries = []
        for index in range(math.ceil(n_rows / self.rows)):
            path = self.folder / shard_name(index)
            rows = min(self.rows, n_rows - index * self.rows)
            if not path.exists():  # rows the converter never wrote stay zeros, as in images.npy
                self.shard(index)
                self.close()
            if npy_header(path)[0][0] != rows:
                truncate_npy_rows(path, rows)
            entries.append({"file": shard_name(index), "rows": rows, "sha256": sha256sum(path)})
        for index in range(len(entries), math.ceil(len(self) / self.rows)):
            (self.folder / shard_name(index)).unlink(missing_ok=True)
        return entries


def row_span(key: int | slice, n: int) -> tuple[int, int]:
    """[start, stop) of an int or a step-1 slice into n rows."""
    if isinstance(key, slice):
        start, stop, step = key.indices(n)
        if step != 1:
            raise IndexError(f"shard writer: slices must have step 1, got {key}")
        return start, max(start, stop)
    (row,) = row_positions(np.array([key]), n)
    return int(row), int(row) + 1


def row_positions(key: Any, n: int) -> np.ndarray:
    """A 1-D int64 array of rows in [0, n) from an int array (negatives count from the end) or
    a boolean mask of n rows."""
    rows = np.asarray(key)
    if rows.dtype == np.bool_ and rows.shape == (n,):
        return np.flatnonzero(rows)
    if rows.ndim != 1 or not (np.issubdtype(rows.dtype, np.integer) or rows.size == 0):
        raise IndexError(
            f"sharded images: index with an int, a slice, a 1-D int array or a mask of {n} "
            f"rows, got {rows.dtype} {rows.shape}"
        )
    rows = rows.astype(np.int64)
    rows = np.where(rows < 0, rows + n, rows)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        bad = int(np.asarray(key).ravel()[(rows < 0) | (rows >= n)][0])
        raise IndexError(f"sharded images: index {bad} is out of bounds for {n} rows")
    return rows


class ShardSource(Protocol):
    """Where shard `index` is as a local file (downloaded first, for a remote source)."""

    def path(self, index: int) -> Path: ...


@dataclass(frozen=True)
class LocalShards:
    """Shards in a local dataset directory, listed by meta.json."""

    root: Path
    files: tuple[str, ...]

    def path(self, index: int) -> Path:
        return self.root / self.files[index]


class ShardedImages:
    """The (N, H, W[, C]) uint8 images of a sharded dataset, as an array-like: `.shape`, `.dtype`,
    `.ndim`, `len()`, and `images[i]`, `images[a:b]`, `images[int_array]` (a new np.ndarray,
    rows in the asked order). Shards are memory-mapped on first use; pickling keeps only where
    they are, and the copy maps its own."""

    dtype = np.dtype(np.uint8)
    itemsize = 1

    def __init__(
        self, source: ShardSource, rows: Sequence[int], image_shape: Sequence[int]
    ) -> None:
        self.source = source
        self.starts = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)])
        self.shape = (int(self.starts[-1]), *(int(d) for d in image_shape))
        self.ndim = len(self.shape)
        self.maps: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, int | np.integer) and not isinstance(key, bool):
            return self.take(row_positions(np.array([key]), len(self)))[0]
        if isinstance(key, slice):
            key = np.arange(*key.indices(len(self)))
        return self.take(row_positions(key, len(self)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Every row in memory: only for data that fits (np.asarray of a whole dataset)."""
        rows = self.take(np.arange(len(self)))
        return rows if dtype is None else rows.astype(dtype)

    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "maps": {}}  # the copy maps the shards itself

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The rows at positions `rows` (valid, non-negative), read shard by shard."""
        out = np.empty((len(rows), *self.shape[1:]), dtype=np.uint8)
        shard_of = np.searchsorted(self.starts, rows, side="right") - 1
        order = np.argsort(shard_of, kind="stable")
        cuts = np.flatnonzero(np.diff(shard_of[order])) + 1
        for group in np.split(order, cuts) if len(rows) else []:
            index = int(shard_of[group[0]])
            out[group] = self.shard(index)[rows[group] - self.starts[index]]
        return out

    def shard(self, index: int) -> np.ndarray:
        """Shard `index`, memory-mapped read-only, its shape and dtype checked."""
        if index not in self.maps:
            rows = int(self.starts[index + 1] - self.starts[index])
            path = self.source.path(index)
            check_shard_file(path, rows, self.shape[1:])
            self.maps[index] = np.load(path, mmap_mode="r", allow_pickle=False)
        return self.maps[index]


class SelectedRows:
    """images[rows] left unread: an array-like of len(rows) rows whose row i is images[rows[i]],
    read only when indexed (by an int, a slice or an int array, as ShardedImages is). What a
    step hands a hasher for a training pool or a database too large to gather into memory."""

    def __init__(self, images: Any, rows: np.ndarray) -> None:
        self.images, self.rows = images, np.asarray(rows, dtype=np.int64)
        self.shape = (len(self.rows), *images.shape[1:])
        self.ndim, self.dtype, self.itemsize = len(self.shape), images.dtype, images.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, int | np.integer | slice) and not isinstance(key, bool):
            return self.images[self.rows[key]]
        return self.images[self.rows[row_positions(key, len(self))]]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Every selected row in memory: only for selections that fit."""
        return np.asarray(self.images[self.rows], dtype=dtype)


def select_rows(images: Any, rows: np.ndarray) -> np.ndarray | SelectedRows:
    """images[rows]: gathered into memory from an np.ndarray (a memory map of images.npy, as
    the steps always did), left unread (SelectedRows) from shards, which may not fit."""
    if isinstance(images, np.ndarray):
        return np.asarray(images[rows])
    return SelectedRows(images, rows)


def check_shard_list(meta: dict[str, Any], meta_path: Path | str) -> list[dict[str, Any]]:
    """meta.json's `shards`: each entry's file (in order), rows and sha256, and that the rows
    add up to n_items; image_shape as the shards need it."""
    shape, shards = meta["image_shape"], meta["shards"]
    if (
        not isinstance(shape, list)
        or len(shape) not in (2, 3)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
    ):
        raise DataFormatError(
            f"{meta_path}: image_shape: expected [H, W] or [H, W, C], got {shape}"
        )
    if not isinstance(shards, list) or not shards:
        raise DataFormatError(f"{meta_path}: shards: expected a non-empty list, got {shards!r}")
    for index, entry in enumerate(shards):
        where = f"{meta_path}: shards[{index}]"
        if not isinstance(entry, dict):
            raise DataFormatError(f"{where}: expected an object, got {entry!r}")
        if entry.get("file") != shard_name(index):
            raise DataFormatError(
                f"{where}: file: expected {shard_name(index)!r}, got {entry.get('file')!r}"
            )
        rows = entry.get("rows")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
            raise DataFormatError(f"{where}: rows: expected a positive integer, got {rows!r}")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not re.fullmatch("[0-9a-f]{64}", digest):
            raise DataFormatError(f"{where}: sha256: expected 64 hex digits, got {digest!r}")
    total = sum(entry["rows"] for entry in shards)
    if total != meta["n_items"]:
        raise DataFormatError(
            f"{meta_path}: shards: their rows add up to {total}, n_items is {meta['n_items']}"
        )
    return shards


def check_shard_file(path: Path, rows: int, image_shape: Sequence[int]) -> None:
    """A shard file exists and holds uint8 (rows, *image_shape) in C order, complete."""
    if not path.is_file():
        raise DataFormatError(f"{path}: missing (meta.json lists it in shards)")
    shape, fortran, dtype, offset = npy_header(path)
    expected = (rows, *image_shape)
    if dtype != np.uint8 or fortran or shape != expected:
        order = " in Fortran order" if fortran else ""
        raise DataFormatError(
            f"{path}: images: expected uint8 {expected} (meta.json's rows and image_shape), "
            f"got {dtype} {shape}{order}"
        )
    size, needed = path.stat().st_size, offset + int(np.prod(expected, dtype=np.int64))
    if size != needed:
        raise DataFormatError(f"{path}: images: {size} bytes, expected {needed} (truncated?)")


def open_local_shards(directory: Path, meta: dict[str, Any]) -> ShardedImages:
    """The shards of a local dataset directory, checked against meta.json: each listed file
    there with its shape and dtype, no shard file that meta.json does not list."""
    shards = check_shard_list(meta, directory / "meta.json")
    listed = {entry["file"] for entry in shards}
    folder = directory / SHARD_DIR
    found = sorted(f"{SHARD_DIR}/{p.name}" for p in folder.iterdir()) if folder.is_dir() else []
    unlisted = [name for name in found if name not in listed]
    if unlisted:
        raise DataFormatError(
            f"{directory / unlisted[0]}: not in meta.json's shards list ({len(unlisted)} "
            f"unlisted file(s) in {folder}; meta.json lists {len(shards)})"
        )
    if (directory / "images.npy").exists():
        raise DataFormatError(
            f"{directory / 'images.npy'}: unexpected: meta.json lists shards, so the images "
            f"are in {folder}"
        )
    for entry in shards:
        check_shard_file(directory / entry["file"], entry["rows"], meta["image_shape"])
    source = LocalShards(directory, tuple(entry["file"] for entry in shards))
    return ShardedImages(source, [entry["rows"] for entry in shards], meta["image_shape"])
