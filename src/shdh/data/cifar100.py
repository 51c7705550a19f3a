"""CIFAR-100 (python version): download, checked extraction, and the pooled 60,000-item Dataset.

The official archive holds three Python 2 pickles (``train``, ``test``, ``meta``). Unpickling
runs code named by the file, so the pickles are read with an Unpickler that resolves only the
few globals a numpy array needs; anything else is refused before it runs. Every field is then
checked (type, shape, label range, counts) so that a damaged or foreign file is reported by name
instead of turning into a plausible-looking dataset.

The paper's protocol (METHOD.md) ignores the official split: train (ids 0..49999) and test
(ids 50000..59999) are pooled, and labels are the label paths "superclass/class" of the
two-level CIFAR-100 hierarchy (K = 3 with the root).
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.hierarchy import LabelTree
from shdh.data.archive import extract_archive, file_md5s_match
from shdh.data.dataset import LABEL_SEP, Dataset, save_dataset
from shdh.data.download import fetch, md5sum, mirrors
from shdh.data.idx import DataFormatError

log = logging.getLogger(__name__)

ARCHIVE = "cifar-100-python.tar.gz"
FOLDER = "cifar-100-python"
OFFICIAL_URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"
ARCHIVE_MD5 = "eb9058c3a382ffc7106e4002c42a8d85"
# md5 of each extracted file, as torchvision lists them for its CIFAR100 class
# (torchvision/datasets/cifar.py: CIFAR100.train_list, .test_list and .meta["md5"]).
FILE_MD5S: dict[str, str] = {
    "train": "16019d7e3df5f24257cddd939b257f8d",
    "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
    "meta": "7973b15100ade9c7d40fb424638fde48",
}
SPLITS = ("train", "test")
IMAGE_SHAPE = (32, 32, 3)
ROW_LENGTH = 32 * 32 * 3  # one row of `data`: the R, G and B planes, each 32x32 row-major
ROOT_NAME = "CIFAR-100"  # root name of the built-in tree
DATASET_NAME = "cifar100"

# Official CIFAR-100 names (cifar-100-python/meta), in label-index order.
CIFAR100_FINE: tuple[str, ...] = tuple(
    """
    apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus
    butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch
    crab crocodile cup dinosaur dolphin elephant flatfish forest fox girl hamster house
    kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree motorcycle
    mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree
    plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark
    shrew skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table
    tank telephone television tiger tractor train trout tulip turtle wardrobe whale
    willow_tree wolf woman worm
    """.split()
)
CIFAR100_COARSE: tuple[str, ...] = tuple(
    """
    aquatic_mammals fish flowers food_containers fruit_and_vegetables
    household_electrical_devices household_furniture insects large_carnivores
    large_man-made_outdoor_things large_natural_outdoor_scenes large_omnivores_and_herbivores
    medium_mammals non-insect_invertebrates people reptiles small_mammals trees vehicles_1
    vehicles_2
    """.split()
)
# Superclass index of each fine label (the `coarse_labels` the official pickles carry).
# fmt: off
CIFAR100_FINE_TO_COARSE: tuple[int, ...] = (
    4, 1, 14, 8, 0, 6, 7, 7, 18, 3, 3, 14, 9, 18, 7, 11, 3, 9, 7, 11, 6, 11, 5, 10, 7, 6, 13,
    15, 3, 15, 0, 11, 1, 10, 12, 14, 16, 9, 11, 5, 5, 19, 8, 8, 15, 13, 14, 17, 18, 10, 16, 4,
    17, 4, 2, 0, 17, 4, 18, 17, 10, 3, 2, 12, 12, 16, 12, 1, 9, 19, 2, 10, 0, 1, 16, 12, 9,
    13, 15, 13, 16, 19, 2, 4, 6, 19, 5, 5, 8, 19, 18, 1, 2, 15, 6, 0, 17, 8, 14, 13,
)
# fmt: on


def label_paths() -> list[str]:
    """Label path "superclass/class" of each fine label index."""
    return [
        f"{CIFAR100_COARSE[c]}/{fine}"
        for fine, c in zip(CIFAR100_FINE, CIFAR100_FINE_TO_COARSE, strict=True)
    ]


def label_tree() -> LabelTree:
    """The built-in tree: root, 20 superclasses (in coarse-label order), 100 classes: K = 3."""
    nested: dict[str, list[str]] = {name: [] for name in CIFAR100_COARSE}
    for fine, c in zip(CIFAR100_FINE, CIFAR100_FINE_TO_COARSE, strict=True):
        nested[CIFAR100_COARSE[c]].append(fine)
    return LabelTree.from_nested(nested, root=ROOT_NAME)


# Globals a pickled numpy array may name (Python 2 files say numpy.core, NumPy 2 numpy._core),
# plus harmless builtins. Nothing here can run arbitrary code.
_NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}
_SAFE_BUILTINS = {"set", "frozenset", "bytearray", "complex", "slice", "range"}


class _RefusedGlobal(pickle.UnpicklingError):
    """The pickle names a global outside the allowed set."""


class _ArrayUnpickler(pickle.Unpickler):
    """An Unpickler that resolves numpy's array-building globals and a few builtins only."""

    def find_class(self, module: str, name: str) -> Any:
        canonical = module.replace("numpy._core", "numpy.core", 1)
        if (canonical, name) in _NUMPY_GLOBALS:
            if hasattr(np, "_core"):  # NumPy 2 moved numpy.core to numpy._core
                module = canonical.replace("numpy.core", "numpy._core", 1)
            return super().find_class(module, name)
        if module in ("builtins", "__builtin__") and name in _SAFE_BUILTINS:
            return super().find_class(module, name)
        if (module, name) == ("_codecs", "encode"):  # how protocol 2 stores bytes from Python 3
            return super().find_class(module, name)
        raise _RefusedGlobal(f"refusing to load global {module}.{name}")


def load_pickle(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load one CIFAR pickle as a dict with str keys (the real files have bytes keys)."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(f"{path}: missing")
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="bytes").load()
    except _RefusedGlobal as exc:
        raise DataFormatError(f"{path}: not a CIFAR pickle: {exc}") from exc
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
    ) as exc:
        raise DataFormatError(f"{path}: unreadable pickle (truncated or corrupt): {exc}") from exc
    if not isinstance(obj, dict):
        raise DataFormatError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if isinstance(key, bytes):
            key = key.decode("latin-1")
        if not isinstance(key, str):
            raise DataFormatError(f"{path}: key {key!r} is not a string")
        out[key] = value
    return out


def _field(record: Mapping[str, Any], key: str, path: Path) -> Any:
    if key not in record:
        raise DataFormatError(f"{path}: {key}: missing (keys present: {', '.join(sorted(record))})")
    return record[key]


def _names(record: Mapping[str, Any], key: str, path: Path) -> list[str]:
    """A list of class names: bytes (Python 2 str) or str, non-empty, distinct, path-safe."""
    raw = _field(record, key, path)
    if not isinstance(raw, list | tuple) or not raw:
        raise DataFormatError(f"{path}: {key}: expected a non-empty list of names")
    names = []
    for i, name in enumerate(raw):
        if isinstance(name, bytes):
            name = name.decode("utf-8", errors="replace")
        if not isinstance(name, str) or not name or "/" in name or LABEL_SEP in name:
            raise DataFormatError(
                f"{path}: {key}[{i}]: {name!r} is not a class name (non-empty, without '/' or "
                f"{LABEL_SEP!r})"
            )
        names.append(name)
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise DataFormatError(f"{path}: {key}: name {dup!r} appears twice")
    return names


def _labels(record: Mapping[str, Any], key: str, n: int, n_classes: int, path: Path) -> np.ndarray:
    raw = _field(record, key, path)
    try:
        arr = np.asarray(raw)
    except ValueError as exc:
        raise DataFormatError(f"{path}: {key}: not a list of integers: {exc}") from exc
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise DataFormatError(
            f"{path}: {key}: expected a list of integers, got {arr.dtype} of shape {arr.shape}"
        )
    if len(arr) != n:
        raise DataFormatError(f"{path}: {key}: {len(arr)} labels for {n} images in data")
    if arr.size and (arr.min() < 0 or arr.max() >= n_classes):
        bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
        raise DataFormatError(f"{path}: {key}: value {bad} outside 0..{n_classes - 1}")
    return arr.astype(np.int64)


def read_meta(folder: str | os.PathLike[str]) -> tuple[list[str], list[str]]:
    """(fine_label_names, coarse_label_names) from ``folder/meta``."""
    path = Path(folder) / "meta"
    meta = load_pickle(path)
    return _names(meta, "fine_label_names", path), _names(meta, "coarse_label_names", path)


def read_split(
    folder: str | os.PathLike[str], split: str, n_fine: int, n_coarse: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images (N,32,32,3) uint8, fine (N,), coarse (N,)) from ``folder/<split>``."""
    path = Path(folder) / split
    record = load_pickle(path)
    data = _field(record, "data", path)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataFormatError(f"{path}: data: expected a uint8 array (N, {ROW_LENGTH}), got {got}")
    if data.shape[1] != ROW_LENGTH:
        raise DataFormatError(
            f"{path}: data: rows have {data.shape[1]} values, expected {ROW_LENGTH} (3 x 32 x 32)"
        )
    n = len(data)
    fine = _labels(record, "fine_labels", n, n_fine, path)
    coarse = _labels(record, "coarse_labels", n, n_coarse, path)
    images = data.reshape(n, 3, 32, 32).transpose(0, 2, 3, 1)  # planes -> (H, W, C)
    return np.ascontiguousarray(images), fine, coarse


def _label_paths(
    fine: np.ndarray,
    coarse: np.ndarray,
    source: np.ndarray,
    fine_names: Sequence[str],
    coarse_names: Sequence[str],
    files: Sequence[Path],
) -> np.ndarray:
    """Per-item "coarse/fine" paths; a fine class under two superclasses is an error.

    ``source[i]`` indexes ``files``: the file item i came from, for the error message.
    """
    parent = np.full(len(fine_names), -1, dtype=np.int64)
    for f in np.unique(fine):
        items = np.flatnonzero(fine == f)
        parents = np.unique(coarse[items])
        if len(parents) > 1:
            a = items[coarse[items] == parents[0]][0]
            b = items[coarse[items] == parents[1]][0]
            raise DataFormatError(
                f"fine class {fine_names[f]!r} sits under two superclasses: "
                f"{coarse_names[parents[0]]!r} (in {files[source[a]]}) and "
                f"{coarse_names[parents[1]]!r} (in {files[source[b]]})"
            )
        parent[f] = parents[0]
    table = np.array(
        [
            f"{coarse_names[parent[f]]}/{name}" if parent[f] >= 0 else ""
            for f, name in enumerate(fine_names)
        ],
        dtype=np.str_,
    )
    return table[fine]


def check_against_builtin(paths: Sequence[str], *, strict: bool) -> LabelTree:
    """The built-in CIFAR-100 tree if every label path is in it, else the tree of ``paths``.

    A mismatch is an error when ``strict`` (verified official files cannot differ) and a warning
    otherwise: a user's re-packed copy may rename or regroup classes on purpose.
    """
    builtin = label_tree()
    known = {builtin.path(i) for i in builtin.leaves}
    unknown = sorted(set(paths) - known)
    if not unknown:
        return builtin
    message = (
        f"{len(unknown)} label paths are not in the built-in CIFAR-100 tree, e.g. {unknown[0]!r}"
    )
    if strict:
        raise DataFormatError(message)
    log.warning("%s; using the tree built from the data", message)
    return LabelTree.from_paths(sorted(set(paths)), root=ROOT_NAME)


def _folder(raw_dir: Path) -> Path:
    """``raw_dir/cifar-100-python``, or ``raw_dir`` itself if it already is that folder."""
    nested = raw_dir / FOLDER
    if nested.is_dir() or not (raw_dir / "meta").is_file():
        return nested
    return raw_dir


def cifar100_dataset(
    raw_dir: str | os.PathLike[str],
    *,
    verify: bool = True,
    file_md5s: Mapping[str, str] | None = None,
) -> tuple[Dataset, LabelTree]:
    """All 60,000 items (train then test) and the label tree, from an extracted archive.

    ``raw_dir`` holds ``cifar-100-python/`` (or is it). With ``verify`` the three files must
    have the official md5s (``file_md5s`` overrides them); without it any well-formed pickle set
    is read, with a logged warning.
    """
    folder = _folder(Path(raw_dir))
    if verify:
        file_md5s_match(folder, (file_md5s or FILE_MD5S).items())
    else:
        log.warning("%s: md5 verification is off; reading the files as they are", folder)
    fine_names, coarse_names = read_meta(folder)
    parts = [read_split(folder, split, len(fine_names), len(coarse_names)) for split in SPLITS]
    images = np.concatenate([p[0] for p in parts])
    fine = np.concatenate([p[1] for p in parts])
    coarse = np.concatenate([p[2] for p in parts])
    source = np.repeat(np.arange(len(parts)), [len(p[0]) for p in parts])
    files = [folder / split for split in SPLITS]
    labels = _label_paths(fine, coarse, source, fine_names, coarse_names, files)
    tree = check_against_builtin(sorted(set(labels.tolist())), strict=verify)
    ids = np.arange(len(images), dtype=np.int64)
    return Dataset(images=images, labels=labels, ids=ids, name=DATASET_NAME), tree


def _extracted_ok(folder: Path, expected: Mapping[str, str], verify: bool) -> bool:
    if not all((folder / name).is_file() for name in expected):
        return False
    return not verify or all(md5sum(folder / n) == md5.lower() for n, md5 in expected.items())


def fetch_cifar100(
    raw_dir: str | os.PathLike[str],
    sources: Sequence[str] | None = None,
    *,
    verify: bool = True,
    archive_md5: str = ARCHIVE_MD5,
    file_md5s: Mapping[str, str] | None = None,
) -> Path:
    """Download (if needed) and extract the archive into ``raw_dir/cifar-100-python``.

    ``sources`` are complete locations of the archive (mirrors, tried in order; default the
    official URL): https://, file://, s3:// or a path. With ``verify`` the archive and each
    extracted file must have the official md5s (overridable, e.g. for a team's re-packed copy);
    ``verify=False`` skips both checks with a warning. The folder appears only once complete and
    checked. Returns the folder.
    """
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of locations, not one string")
    raw_dir = Path(raw_dir)
    expected = dict(file_md5s or FILE_MD5S)
    folder = raw_dir / FOLDER
    if _extracted_ok(folder, expected, verify):
        log.info("%s already holds the extracted CIFAR-100 files", folder)
        return folder
    if not verify:
        log.warning("CIFAR-100: md5 verification is off for the archive and its files")
    archive = fetch(
        list(sources) if sources is not None else [OFFICIAL_URL],
        raw_dir / ARCHIVE,
        md5=archive_md5 if verify else None,
    )

    def check(tmp: Path) -> None:
        if verify:
            file_md5s_match(tmp, expected.items(), where=str(folder))
        else:
            for name in expected:
                if not (tmp / name).is_file():
                    raise DataFormatError(f"{folder}/{name}: missing from {archive}")

    return extract_archive(archive, folder, root=FOLDER, check=check)


# The prepare step's recipe for `data.dataset: cifar100` (shdh.data.dataset_catalogue).


def fetch_raw(raw_dir: Path, *, sources: Sequence[str], verify: bool) -> Path:
    """fetch_cifar100 from data.sources ("official": the University of Toronto's URL)."""
    return fetch_cifar100(raw_dir, mirrors(sources, OFFICIAL_URL, DATASET_NAME), verify=verify)


def convert(raw_dir: Path, out: Path, *, verify: bool, table: dict | None, **reader) -> LabelTree:
    """The dataset directory at `out`; of the readers' options only shard_mb applies."""
    ds, tree = cifar100_dataset(raw_dir, verify=verify)
    save_dataset(ds, out, shard_mb=reader.get("shard_mb"))
    return tree
