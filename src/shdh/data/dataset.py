"""The project's on-disk dataset format: one directory of .npy arrays and a meta.json.

Every dataset, whatever its upstream format, is converted once into this form so that later
steps read one thing. Plain .npy files memory-map (the training loop does not load all images
into memory) and need no pickle, so a dataset directory is safe to load from anywhere. Labels are
leaf label paths ("Clothes/Tops/Shirt"), which carry the hierarchy without a side table. An item
with several labels (IAPRTC-12's regions) holds its paths joined by LABEL_SEP
("landscape/sky|humans/person"); names may contain neither "/" nor LABEL_SEP.

A large dataset keeps its images in shards (images/shard-00000.npy, ...; shdh.data.shards)
instead of one images.npy: the writers make them when given `shard_mb`, meta.json lists them,
and load_dataset returns them as one array-like (ShardedImages). One images.npy stays the
format of small sets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shdh.data.idx import DataFormatError
from shdh.data.shards import (
    ShardedImages,
    ShardWriter,
    open_local_shards,
    shard_items,
    truncate_npy_rows,
)
from shdh.runtime.array_files import READ_ERRORS, reason
from shdh.runtime.atomic import atomic_dir

FORMAT = "shdh-dataset/1"
LABEL_SEP = "|"  # joins the label paths of a multi-label item
FILES = ("images.npy", "labels.npy", "ids.npy", "meta.json")
COPY_BYTES = 64 * 2**20  # rows copied at a time when images are re-written into shards


@dataclass
class Dataset:
    """Images (N,H,W) or (N,H,W,C) uint8, leaf label paths (N,) str, item ids (N,) int64.

    `images` is an np.ndarray (a memory map of images.npy) or, for a sharded dataset, a
    ShardedImages: index it by rows (an int, a slice, an int array), never whole.
    """

    images: np.ndarray | ShardedImages
    labels: np.ndarray
    ids: np.ndarray
    name: str


def _check(ds: Dataset, where: str) -> None:
    """Raise DataFormatError naming ``where`` and the field if ``ds`` breaks the format."""
    if ds.images.dtype != np.uint8 or ds.images.ndim not in (3, 4):
        raise DataFormatError(
            f"{where}: images: expected uint8 (N,H,W) or (N,H,W,C), got {ds.images.dtype} "
            f"{ds.images.shape}"
        )
    _check_items(ds.labels, ds.ids, ds.name, len(ds.images), where)


def _check_items(labels: np.ndarray, ids: np.ndarray, name: str, n: int, where: str) -> None:
    """The checks of everything but the pixels, shared by the in-memory and streaming writers."""
    if labels.dtype.kind != "U" or labels.shape != (n,):
        raise DataFormatError(
            f"{where}: labels: expected str array of shape ({n},), got {labels.dtype} "
            f"{labels.shape}"
        )
    if ids.dtype != np.int64 or ids.shape != (n,):
        raise DataFormatError(
            f"{where}: ids: expected int64 array of shape ({n},), got {ids.dtype} {ids.shape}"
        )
    if len(np.unique(ids)) != n:
        raise DataFormatError(f"{where}: ids: duplicate item ids")
    if not name:
        raise DataFormatError(f"{where}: name: empty")


def _write_fields(
    tmp: Path,
    labels: np.ndarray,
    ids: np.ndarray,
    name: str,
    image_shape: tuple[int, ...],
    shards: list[dict] | None = None,
) -> None:
    """Write everything but the images: the part every writer shares, so the format has one
    definition. `shards`: the shard list of a sharded dataset (None: one images.npy)."""
    for field, values in (("labels", labels), ("ids", ids)):
        with open(tmp / f"{field}.npy", "xb") as f:
            np.save(f, values, allow_pickle=False)
    meta = {
        "format": FORMAT,
        "name": name,
        "n_items": len(ids),
        "image_shape": list(image_shape),
    }
    if shards is not None:
        meta["shards"] = shards
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def save_dataset(
    ds: Dataset, out_dir: str | os.PathLike[str], *, shard_mb: float | None = None
) -> Path:
    """Write ``ds`` to ``out_dir``, replacing any previous dataset there only once complete.

    The new directory is built under a temporary sibling name and renamed into place; the old
    directory is moved aside first and deleted last, so an error at any point leaves either the
    old dataset or the new one, never a mixture. `shard_mb`: store the images as shards of about
    that many MiB (None: one images.npy), copied a block of rows at a time, so `ds.images` may
    be a memory map or a ShardedImages larger than memory.
    """
    out_dir = Path(out_dir)
    _check(ds, str(out_dir))
    if shard_mb is not None:
        return write_dataset_streaming(
            out_dir,
            len(ds.images),
            ds.images.shape[1:],
            ds.labels,
            ds.ids,
            ds.name,
            lambda out: copy_rows(ds.images, np.arange(len(ds.images)), out),
            shard_mb=shard_mb,
        )
    with atomic_dir(out_dir) as tmp:
        with open(tmp / "images.npy", "xb") as f:
            np.save(f, ds.images, allow_pickle=False)
        _write_fields(tmp, ds.labels, ds.ids, ds.name, ds.images.shape[1:])
    return out_dir


def copy_rows(images: np.ndarray | ShardedImages, rows: np.ndarray, out: np.ndarray) -> None:
    """out[i] = images[rows[i]], a block of about COPY_BYTES at a time (a `fill` for
    write_dataset_streaming that never holds the whole selection in memory)."""
    row_bytes = max(1, int(np.prod(images.shape[1:], dtype=np.int64)))
    block = max(1, COPY_BYTES // row_bytes)
    for start in range(0, len(rows), block):
        out[start : start + block] = images[rows[start : start + block]]


def save_subset(
    ds: Dataset, keep: np.ndarray, out_dir: str | os.PathLike[str], *, shard_mb: float | None
) -> Dataset:
    """The items at positions `keep` written as a dataset at out_dir, and returned (images as
    written there). Without shards, and from one images.npy, the selection is gathered in
    memory and saved as before; otherwise it is streamed a block at a time."""
    labels, ids = ds.labels[keep], ds.ids[keep]
    if shard_mb is None and isinstance(ds.images, np.ndarray):
        subset = Dataset(np.asarray(ds.images[keep]), labels, ids, ds.name)
        save_dataset(subset, out_dir)
        return subset
    shape = ds.images.shape[1:]

    def fill(out: np.ndarray) -> None:
        copy_rows(ds.images, keep, out)

    write_dataset_streaming(
        out_dir, len(keep), shape, labels, ids, ds.name, fill, shard_mb=shard_mb
    )
    return load_dataset(out_dir)


def write_dataset_streaming(
    out_dir: str | os.PathLike[str],
    n: int,
    image_shape: tuple[int, ...],
    labels: np.ndarray,
    ids: np.ndarray,
    name: str,
    fill: Callable[[np.ndarray], np.ndarray | None],
    *,
    shard_mb: float | None = None,
) -> Path:
    """Write a dataset whose images are produced in place, never held in memory all at once.

    images.npy is preallocated as a memory-mapped (n, *image_shape) uint8 file inside the
    temporary directory and handed to ``fill``, which writes the rows. Converting a folder of
    60,000 images this way needs about one copy of the final array, where collecting a list and
    stacking it needs two or more. With ``shard_mb``, ``fill`` gets a ShardWriter instead: the
    same (n, *image_shape) array to write, stored as shards of about shard_mb MiB
    (shdh.data.shards), which takes slice assignment (``out[a:b] = batch``) across shards.

    ``fill`` returns None when it filled every row, or the ascending positions (into the n items)
    of the rows it kept, written compactly as rows 0..len(kept)-1: a converter that skips
    undecodable images learns which ones only while decoding. The images are then cut to the
    kept rows in place, and labels and ids are taken at the kept positions. The directory appears
    under ``out_dir`` only once complete, as with save_dataset.
    """
    out_dir = Path(out_dir)
    where = str(out_dir)
    labels, ids = np.asarray(labels), np.asarray(ids)
    image_shape = tuple(int(d) for d in image_shape)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise DataFormatError(f"{where}: n_items: expected a positive integer, got {n!r}")
    if len(image_shape) not in (2, 3) or min(image_shape) < 1:
        raise DataFormatError(
            f"{where}: image_shape: expected (H, W) or (H, W, C) of positive sizes, "
            f"got {image_shape}"
        )
    _check_items(labels, ids, name, int(n), where)
    rows = None if shard_mb is None else shard_items(image_shape, shard_mb)
    with atomic_dir(out_dir) as tmp:
        kept, shards = _fill_images(tmp, int(n), image_shape, fill, rows, where)
        if kept is not None:
            labels, ids = labels[kept], ids[kept]
        _write_fields(tmp, labels, ids, name, image_shape, shards)
    return out_dir


def _fill_images(
    tmp: Path,
    n: int,
    image_shape: tuple[int, ...],
    fill: Callable[[np.ndarray], np.ndarray | None],
    shard_rows: int | None,
    where: str,
) -> tuple[np.ndarray | None, list[dict] | None]:
    """Run `fill` on images.npy (shard_rows None) or on shards of shard_rows rows, and cut them
    to the rows it kept: (the kept positions or None, the shard list or None)."""
    if shard_rows is None:
        path = tmp / "images.npy"
        images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n, *image_shape))
        try:
            kept = fill(images)
            images.flush()
        finally:
            del images  # unmaps the file (unless fill kept a view of it)
    else:
        writer = ShardWriter(tmp, n, image_shape, shard_rows)
        try:
            kept = fill(writer)
        finally:
            writer.close()
    kept = None if kept is None else _checked_kept(kept, n, where)
    n_kept = n if kept is None else len(kept)
    if shard_rows is not None:
        return kept, writer.finish(n_kept)
    if kept is not None:
        truncate_npy_rows(path, n_kept)
    return kept, None


def _checked_kept(kept: np.ndarray, n: int, where: str) -> np.ndarray:
    kept = np.asarray(kept, dtype=np.int64)
    if (
        kept.ndim != 1
        or np.any(np.diff(kept) <= 0)
        or (kept.size and (kept[0] < 0 or kept[-1] >= n))
    ):
        raise DataFormatError(
            f"{where}: fill returned kept positions that are not ascending unique "
            f"indices into {n} items"
        )
    if kept.size == 0:
        raise DataFormatError(f"{where}: no items left to write (every item was dropped)")
    return kept


def _load_array(path: Path, mmap: bool) -> np.ndarray:
    if not path.is_file():
        raise DataFormatError(f"{path}: missing")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except READ_ERRORS as exc:
        raise DataFormatError(f"{path}: unreadable .npy: {reason(exc)}") from exc


def read_meta(text: str, meta_path: Path | str) -> dict:
    """meta.json's content, checked: a JSON object of the format with every required key."""
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{meta_path}: invalid JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise DataFormatError(f"{meta_path}: expected a JSON object")
    for key in ("format", "name", "n_items", "image_shape"):
        if key not in meta:
            raise DataFormatError(f"{meta_path}: {key}: missing")
    if meta["format"] != FORMAT:
        raise DataFormatError(f"{meta_path}: format: expected {FORMAT!r}, got {meta['format']!r}")
    n_items = meta["n_items"]
    if isinstance(n_items, bool) or not isinstance(n_items, int) or n_items < 1:
        raise DataFormatError(f"{meta_path}: n_items: expected a positive integer, got {n_items!r}")
    return meta


def load_dataset(directory: str | os.PathLike[str], *, mmap: bool = True) -> Dataset:
    """Load and validate a dataset directory; images are memory-mapped read-only if ``mmap``
    (a sharded dataset's as a ShardedImages; without ``mmap`` they are read into memory)."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        raise DataFormatError(f"{meta_path}: missing (not a dataset directory?)")
    try:
        meta = read_meta(meta_path.read_text(), meta_path)
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{meta_path}: invalid JSON: {exc}") from exc
    if "shards" in meta:
        images = open_local_shards(directory, meta)
        images = images if mmap else np.asarray(images)
    else:
        images = _load_array(directory / "images.npy", mmap)
    ds = Dataset(
        images=images,
        labels=_load_array(directory / "labels.npy", mmap=False),
        ids=_load_array(directory / "ids.npy", mmap=False),
        name=str(meta["name"]),
    )
    return check_loaded(ds, meta, directory)


def check_loaded(ds: Dataset, meta: dict, directory: Path | str) -> Dataset:
    """`ds` as loaded from `directory` (a path or an s3:// location), checked against its
    meta.json; errors name the file and the field."""
    images_file = f"{directory}/images.npy"
    if ds.images.ndim not in (3, 4):
        raise DataFormatError(
            f"{images_file}: images: expected 3 or 4 dims, got shape {ds.images.shape}"
        )
    n, shape = len(ds.images), tuple(ds.images.shape[1:])
    if meta["n_items"] != n:
        raise DataFormatError(
            f"{images_file}: n_items: meta.json says {meta['n_items']}, images.npy has {n} rows"
        )
    if list(shape) != meta["image_shape"]:
        raise DataFormatError(
            f"{images_file}: image_shape: meta.json says {meta['image_shape']}, "
            f"images.npy has {list(shape)}"
        )
    for field in ("labels", "ids"):
        got = getattr(ds, field).shape
        if got != (n,):
            raise DataFormatError(
                f"{directory}/{field}.npy: {field}: shape {got}, expected ({n},) to match n_items"
            )
    _check(ds, str(directory))
    return ds
