"""The project's on-disk dataset format: one directory of .npy arrays and a meta.json.

Every dataset, whatever its upstream format, is converted once into this form so that later
steps read one thing. Plain .npy files memory-map (the training loop does not load all images
into memory) and need no pickle, so a dataset directory is safe to load from anywhere. Labels are
leaf label paths ("Clothes/Tops/Shirt"), which carry the hierarchy without a side table. An item
with several labels (IAPRTC-12's regions) holds its paths joined by LABEL_SEP
("landscape/sky|humans/person"); names may contain neither "/" nor LABEL_SEP.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shdh.data.idx import DataFormatError
from shdh.runtime.atomic import atomic_dir

FORMAT = "shdh-dataset/1"
LABEL_SEP = "|"  # joins the label paths of a multi-label item
FILES = ("images.npy", "labels.npy", "ids.npy", "meta.json")


@dataclass
class Dataset:
    """Images (N,H,W) or (N,H,W,C) uint8, leaf label paths (N,) str, item ids (N,) int64."""

    images: np.ndarray
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
    tmp: Path, labels: np.ndarray, ids: np.ndarray, name: str, image_shape: tuple[int, ...]
) -> None:
    """Write everything but images.npy: the part both writers share, so the format has one
    definition."""
    for field, values in (("labels", labels), ("ids", ids)):
        with open(tmp / f"{field}.npy", "xb") as f:
            np.save(f, values, allow_pickle=False)
    meta = {
        "format": FORMAT,
        "name": name,
        "n_items": len(ids),
        "image_shape": list(image_shape),
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def save_dataset(ds: Dataset, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``ds`` to ``out_dir``, replacing any previous dataset there only once complete.

    The new directory is built under a temporary sibling name and renamed into place; the old
    directory is moved aside first and deleted last, so an error at any point leaves either the
    old dataset or the new one, never a mixture.
    """
    out_dir = Path(out_dir)
    _check(ds, str(out_dir))
    with atomic_dir(out_dir) as tmp:
        with open(tmp / "images.npy", "xb") as f:
            np.save(f, ds.images, allow_pickle=False)
        _write_fields(tmp, ds.labels, ds.ids, ds.name, ds.images.shape[1:])
    return out_dir


def write_dataset_streaming(
    out_dir: str | os.PathLike[str],
    n: int,
    image_shape: tuple[int, ...],
    labels: np.ndarray,
    ids: np.ndarray,
    name: str,
    fill: Callable[[np.ndarray], np.ndarray | None],
) -> Path:
    """Write a dataset whose images are produced in place, never held in memory all at once.

    images.npy is preallocated as a memory-mapped (n, *image_shape) uint8 file inside the
    temporary directory and handed to ``fill``, which writes the rows. Converting a folder of
    60,000 images this way needs about one copy of the final array, where collecting a list and
    stacking it needs two or more.

    ``fill`` returns None when it filled every row, or the ascending positions (into the n items)
    of the rows it kept, written compactly as rows 0..len(kept)-1: a converter that skips
    undecodable images learns which ones only while decoding. images.npy is then cut to the kept
    rows in place, and labels and ids are taken at the kept positions. The directory appears
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
    with atomic_dir(out_dir) as tmp:
        path = tmp / "images.npy"
        images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n, *image_shape))
        try:
            kept = fill(images)
            images.flush()
        finally:
            del images  # unmaps the file (unless fill kept a view of it)
        if kept is not None:
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
            _truncate_npy_rows(path, len(kept))
            labels, ids = labels[kept], ids[kept]
        _write_fields(tmp, labels, ids, name, image_shape)
    return out_dir


def _truncate_npy_rows(path: Path, n_rows: int) -> None:
    """Keep only the first n_rows of a C-order .npy file, in place.

    NumPy pads every header with spare room for the digits of the first dimension (so that files
    can grow in place), so the header for fewer rows has the same length; rewriting it and
    cutting the data costs no copy.
    """
    fmt = np.lib.format
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    writers = {(1, 0): fmt.write_array_header_1_0, (2, 0): fmt.write_array_header_2_0}
    with open(path, "r+b") as f:
        version = fmt.read_magic(f)
        if version not in readers:
            raise DataFormatError(f"{path}: cannot shrink a version {version} .npy file in place")
        shape, fortran, dtype = readers[version](f)
        offset = f.tell()
        header = io.BytesIO()
        new_shape = (n_rows, *shape[1:])
        writers[version](
            header,
            {"descr": fmt.dtype_to_descr(dtype), "fortran_order": fortran, "shape": new_shape},
        )
        if fortran or header.tell() != offset:
            raise DataFormatError(f"{path}: cannot shrink in place (the header length changed)")
        f.seek(0)
        f.write(header.getvalue())
        f.truncate(offset + int(np.prod(new_shape, dtype=np.int64)) * dtype.itemsize)


def _load_array(path: Path, mmap: bool) -> np.ndarray:
    if not path.is_file():
        raise DataFormatError(f"{path}: missing")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataFormatError(f"{path}: unreadable .npy: {exc}") from exc


def load_dataset(directory: str | os.PathLike[str], *, mmap: bool = True) -> Dataset:
    """Load and validate a dataset directory; images are memory-mapped read-only if ``mmap``."""
    directory = Path(directory)
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        raise DataFormatError(f"{meta_path}: missing (not a dataset directory?)")
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{meta_path}: invalid JSON: {exc}") from exc
    if not isinstance(meta, dict):
        raise DataFormatError(f"{meta_path}: expected a JSON object")
    for key in ("format", "name", "n_items", "image_shape"):
        if key not in meta:
            raise DataFormatError(f"{meta_path}: {key}: missing")
    if meta["format"] != FORMAT:
        raise DataFormatError(f"{meta_path}: format: expected {FORMAT!r}, got {meta['format']!r}")
    ds = Dataset(
        images=_load_array(directory / "images.npy", mmap),
        labels=_load_array(directory / "labels.npy", mmap=False),
        ids=_load_array(directory / "ids.npy", mmap=False),
        name=str(meta["name"]),
    )
    if ds.images.ndim not in (3, 4):
        raise DataFormatError(
            f"{directory / 'images.npy'}: images: expected 3 or 4 dims, got shape {ds.images.shape}"
        )
    n, shape = len(ds.images), tuple(ds.images.shape[1:])
    if meta["n_items"] != n:
        raise DataFormatError(
            f"{directory / 'images.npy'}: n_items: meta.json says {meta['n_items']}, "
            f"images.npy has {n} rows"
        )
    if list(shape) != meta["image_shape"]:
        raise DataFormatError(
            f"{directory / 'images.npy'}: image_shape: meta.json says {meta['image_shape']}, "
            f"images.npy has {list(shape)}"
        )
    for field in ("labels", "ids"):
        got = getattr(ds, field).shape
        if got != (n,):
            raise DataFormatError(
                f"{directory / (field + '.npy')}: {field}: shape {got}, expected ({n},) "
                f"to match n_items"
            )
    _check(ds, str(directory))
    return ds
