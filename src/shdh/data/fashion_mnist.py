"""Fashion-MNIST raw files: where to get them, how to check them, how to pool them.

The raw form this project tracks (with DVC) is the four *decompressed* IDX files. Debian's
``dataset-fashion-mnist`` package recompresses the upstream .gz files, so their md5s differ from
upstream's while the content is identical; checking the md5 of the decompressed bytes makes the
raw data, and its DVC hash, the same whichever source it came from.
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from shdh.core.hierarchy import LabelTree
from shdh.data.dataset import Dataset, save_dataset
from shdh.data.download import fetch, md5sum
from shdh.data.idx import DataFormatError, parse_idx, read_idx, read_idx_bytes
from shdh.runtime.atomic import atomic_path
from shdh.runtime.errors import ConfigError

log = logging.getLogger(__name__)

FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
OFFICIAL_URLS: list[str] = [
    "https://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
]
# md5 of each decompressed file; computed from Debian's copy, equal to upstream's content.
CONTENT_MD5: dict[str, str] = {
    "train_images": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train_labels": "9018921c3c673c538a1fc5bad174d6f9",
    "test_images": "8181f5470baa50b63fa0f6fddb340f0a",
    "test_labels": "15d484375f8d13e6eb1aabb0c3f46965",
}
SHAPES: dict[str, tuple[int, ...]] = {
    "train_images": (60000, 28, 28),
    "train_labels": (60000,),
    "test_images": (10000, 28, 28),
    "test_labels": (10000,),
}
IMAGE_SHAPE = (28, 28)
N_CLASSES = 10
DATASET_NAME = "fashion-mnist-h"
ROOT_NAME = "Fashion-MNIST"  # root name of the built-in tree

# Fashion-MNIST label order. "T-shirt/top" is shortened: '/' is the path separator.
FASHION_MNIST_CLASSES = (
    "T-shirt",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

# Seo & Shin (2019) hierarchy, as METHOD.md fixes it; dict order gives the per-level node order.
_HIERARCHY = {
    "Clothes": {
        "Tops": ["T-shirt", "Pullover", "Shirt"],
        "Bottoms": ["Trouser"],
        "Dresses": ["Dress"],
        "Outers": ["Coat"],
    },
    "Goods": {
        "Accessories": ["Bag"],
        "Shoes": ["Sandal", "Sneaker", "Ankle boot"],
    },
}


def label_tree() -> LabelTree:
    """Fashion-MNIST-H's built-in tree: root + 2 + 6 + 10 nodes, K = 4."""
    return LabelTree.from_nested(_HIERARCHY, root=ROOT_NAME)


def label_paths() -> list[str]:
    """Label path of each Fashion-MNIST class index, e.g. 0 -> "Clothes/Tops/T-shirt"."""
    tree = label_tree()
    return [tree.path(tree.node_id(name)) for name in FASHION_MNIST_CLASSES]


def source_urls(source: str, filename: str) -> list[str]:
    """Expand one source name into the locations of ``filename`` it stands for."""
    if source == "debian":
        return [str(DEBIAN_DIR / filename)]
    if source == "official":
        return [base.rstrip("/") + "/" + filename for base in OFFICIAL_URLS]
    scheme = urllib.parse.urlparse(source).scheme.lower()
    if scheme in ("file", "http", "https", "s3"):
        return [source.rstrip("/") + "/" + filename]
    if len(scheme) > 1 or not source.strip():  # len 1: a Windows drive letter, a plain path
        raise ConfigError(
            f"source {source!r}: expected debian, official, an http(s)://, s3:// or file:// "
            "address, or a folder"
        )
    return [str(Path(source) / filename)]


def _is_current(path: Path, key: str, verify: bool) -> bool:
    if not path.is_file():
        return False
    if not verify:
        return True
    if md5sum(path) == CONTENT_MD5[key]:
        return True
    log.warning("%s has the wrong md5; fetching it again", path)
    return False


def fetch_raw(
    dest_dir: str | os.PathLike[str],
    *,
    sources: Sequence[str] = ("debian", "official"),
    verify: bool = True,
) -> Path:
    """Put the four decompressed Fashion-MNIST IDX files into ``dest_dir`` and return it.

    ``sources`` are tried in order for each file: "debian" (the installed package), "official"
    (the upstream URLs), or a directory, ``file://``, ``http(s)://`` or ``s3://`` base holding
    the ``.gz`` files. The .gz goes to a hidden sibling folder (where an interrupted download
    resumes on the next call), is checked (gzip and IDX structure, and the decompressed md5 when
    ``verify``), and only then written to ``dest_dir/<name>``. Files already present with the
    right md5 are left alone.
    """
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of source names, not one string")
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    todo = {k: n for k, n in FILES.items() if not _is_current(dest_dir / n, k, verify)}
    if not todo:
        log.info("%s already holds verified Fashion-MNIST raw files", dest_dir)
        return dest_dir
    # A fixed hidden folder, not a temporary one: an interrupted download leaves NAME.gz.part
    # there, and the next call resumes it (shdh.data.download.fetch) instead of starting over.
    downloads = dest_dir.parent / f".{dest_dir.name}.downloads"
    downloads.mkdir(exist_ok=True)
    try:
        for key, name in todo.items():
            _fetch_one(key, name, sources, downloads, dest_dir, verify)
    finally:
        if not any(downloads.iterdir()):  # nothing to resume: leave no trace
            downloads.rmdir()
    return dest_dir


def _fetch_one(
    key: str, name: str, sources: Sequence[str], downloads: Path, dest_dir: Path, verify: bool
) -> None:
    """Fetch NAME.gz into `downloads`, check it, and write the decompressed file atomically."""
    urls = [url for source in sources for url in source_urls(source, name + ".gz")]
    gz = fetch(urls, downloads / (name + ".gz"))
    try:
        data = read_idx_bytes(gz)
        parse_idx(data, f"{name}.gz")  # structure and exact payload length
        if verify:
            actual = hashlib.md5(data, usedforsecurity=False).hexdigest()
            if actual != CONTENT_MD5[key]:
                raise DataFormatError(
                    f"{name}.gz: decompressed md5 mismatch: expected {CONTENT_MD5[key]}, "
                    f"got {actual}"
                )
    finally:
        gz.unlink()  # a complete but bad .gz must not be "resumed" next time
    with atomic_path(dest_dir / name) as out, open(out, "xb") as f:
        f.write(data)
    log.info("wrote %s", dest_dir / name)


def _find(raw_dir: Path, name: str) -> Path:
    for candidate in (raw_dir / name, raw_dir / (name + ".gz")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{raw_dir}: neither {name} nor {name}.gz exists")


def _read_pair(raw_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    images_path = _find(raw_dir, FILES[f"{split}_images"])
    labels_path = _find(raw_dir, FILES[f"{split}_labels"])
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != IMAGE_SHAPE:
        raise DataFormatError(
            f"{images_path}: images: expected uint8 (n, 28, 28), got {images.dtype} {images.shape}"
        )
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise DataFormatError(
            f"{labels_path}: labels: expected uint8 (n,), got {labels.dtype} {labels.shape}"
        )
    if len(images) != len(labels):
        raise DataFormatError(
            f"{labels_path}: count mismatch: {len(labels)} labels for {len(images)} images "
            f"in {images_path.name}"
        )
    if labels.size and labels.max() >= N_CLASSES:
        bad = int(labels.max())
        raise DataFormatError(f"{labels_path}: labels: value {bad} outside 0..{N_CLASSES - 1}")
    return images, labels


def load_raw(raw_dir: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pool train then test into (images (N,28,28) uint8, labels (N,) uint8, ids (N,) int64).

    The paper's protocol ignores the official train/test division, so it is dropped here; ids
    keep it recoverable (0..59999 are train items, 60000..69999 test items, for the real data).
    """
    raw_dir = Path(raw_dir)
    train_images, train_labels = _read_pair(raw_dir, "train")
    test_images, test_labels = _read_pair(raw_dir, "test")
    images = np.concatenate([train_images, test_images])
    labels = np.concatenate([train_labels, test_labels])
    ids = np.arange(len(images), dtype=np.int64)
    return images, labels, ids


# --------------------------------------------------------------------------------------------
# The prepare step's recipe for `data.dataset: fashion-mnist-h` (shdh.data.dataset_catalogue); its
# fetch_raw is the one above
# --------------------------------------------------------------------------------------------


def fashion_mnist_h_dataset(raw_dir: str | os.PathLike[str]) -> Dataset:
    """Fashion-MNIST-H: all 70,000 pooled items with their leaf label paths."""
    images, labels, ids = load_raw(raw_dir)
    paths = np.array(label_paths(), dtype=np.str_)
    return Dataset(images=images, labels=paths[labels], ids=ids, name=DATASET_NAME)


def convert(raw_dir: Path, out: Path, *, verify: bool, table: dict | None, **reader) -> LabelTree:
    """The dataset directory at `out` and the built-in tree; of the readers' options only
    shard_mb applies, and the raw files were verified when fetched."""
    save_dataset(fashion_mnist_h_dataset(raw_dir), out, shard_mb=reader.get("shard_mb"))
    return label_tree()
