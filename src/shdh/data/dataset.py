"""The project's on-disk dataset format: one directory of .npy arrays and a meta.json.

Every dataset, whatever its upstream format, is converted once into this form so that later
steps read one thing. Plain .npy files memory-map (the training loop does not load all images
into memory) and need no pickle, so a dataset directory is safe to load from anywhere. Labels are
leaf label paths ("Clothes/Tops/Shirt"), which carry the hierarchy without a side table.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shdh.atomic import atomic_dir
from shdh.data.fashion_mnist import load_raw
from shdh.data.idx import DataFormatError
from shdh.hierarchy import fashion_mnist_label_paths

FORMAT = "shdh-dataset/1"
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
    n = len(ds.images)
    if ds.labels.dtype.kind != "U" or ds.labels.shape != (n,):
        raise DataFormatError(
            f"{where}: labels: expected str array of shape ({n},), got {ds.labels.dtype} "
            f"{ds.labels.shape}"
        )
    if ds.ids.dtype != np.int64 or ds.ids.shape != (n,):
        raise DataFormatError(
            f"{where}: ids: expected int64 array of shape ({n},), got {ds.ids.dtype} {ds.ids.shape}"
        )
    if len(np.unique(ds.ids)) != n:
        raise DataFormatError(f"{where}: ids: duplicate item ids")
    if not ds.name:
        raise DataFormatError(f"{where}: name: empty")


def save_dataset(ds: Dataset, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``ds`` to ``out_dir``, replacing any previous dataset there only once complete.

    The new directory is built under a temporary sibling name and renamed into place; the old
    directory is moved aside first and deleted last, so an error at any point leaves either the
    old dataset or the new one, never a mixture.
    """
    out_dir = Path(out_dir)
    _check(ds, str(out_dir))
    with atomic_dir(out_dir) as tmp:
        for field in ("images", "labels", "ids"):
            with open(tmp / f"{field}.npy", "xb") as f:
                np.save(f, getattr(ds, field), allow_pickle=False)
        meta = {
            "format": FORMAT,
            "name": ds.name,
            "n_items": len(ds.images),
            "image_shape": list(ds.images.shape[1:]),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out_dir


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


def fashion_mnist_h_dataset(raw_dir: str | os.PathLike[str]) -> Dataset:
    """Fashion-MNIST-H: all 70,000 pooled items with their leaf label paths."""
    images, labels, ids = load_raw(raw_dir)
    paths = np.array(fashion_mnist_label_paths(), dtype=np.str_)
    return Dataset(images=images, labels=paths[labels], ids=ids, name="fashion-mnist-h")
