"""The prepare step: bring the raw files (fetch), convert them to the project's dataset
format and make the paper's seeded query/database split (prepare).

    fetch -> prepare -> tree -> smatrix -> features -> fit -> score -> report
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from shdh.core.hierarchy import LabelTree
from shdh.core.tree_fields import TreeError
from shdh.data.dataset_catalogue import DATASETS, dataset_entry
from shdh.runtime.atomic import atomic_dir, check_output_folder, check_writable

log = logging.getLogger(__name__)

SPLIT_FILE = "split.npz"
LABEL_TREE_FILE = "label_tree.json"  # in prepared_dir: the tree the data came with
# The folder and table readers' options: data settings of the same names. Those left out take
# the readers' own defaults (shdh.data.folder.folder_dataset). The built-in datasets take only
# shard_mb (and iaprtc12 skip_bad_images).
READER_OPTIONS = (
    "image_size",
    "color",
    "skip_bad_images",
    "workers",
    "inner_labels",
    "name",
    "shard_mb",
)


def dataset_module(dataset: str) -> ModuleType:
    """The module that reads `dataset` (shdh.data.dataset_catalogue), imported now: a run loads only
    its own dataset's reader and that reader's dependencies."""
    module = dataset_entry(dataset).module
    return importlib.import_module(module) if isinstance(module, str) else module


def builtin_tree(name: str) -> LabelTree:
    """The label tree built into dataset `name` (`tree.source: builtin:NAME`)."""
    known = [n for n, entry in DATASETS.items() if entry.builtin_tree]
    if name not in known:
        raise TreeError(f"unknown built-in tree {name!r}; choose one of {', '.join(known)}")
    return dataset_module(name).label_tree()


def fetch(
    raw_dir: str | Path,
    *,
    dataset: str = "fashion-mnist-h",
    sources=("debian", "official"),
    verify: bool = True,
) -> Path:
    """Bring the raw files into raw_dir, verified; files already there and intact are kept.

    `sources` are tried in order: "official" (the dataset's upstream location), "debian"
    (Fashion-MNIST only: Debian's package), or mirrors (https://, file://, s3://, a folder).
    A folder or table dataset is the user's own: raw_dir must already hold it.
    """
    return dataset_module(dataset).fetch_raw(Path(raw_dir), sources=sources, verify=verify)


def prepare_options(data: dict[str, Any]) -> dict[str, Any]:
    """prepare()'s keyword arguments from a (validated) `data` section, so that the DVC
    stage and the Kubeflow component pass every data setting alike; a key the section leaves
    out takes prepare()'s default."""
    return {
        "dataset": data["dataset"],
        "query_fraction": data["query_fraction"],
        "max_items": data["max_items"],
        **{key: data[key] for key in ("verify", "table", *READER_OPTIONS) if key in data},
    }


def prepare(
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    dataset: str = "fashion-mnist-h",
    query_fraction: float = 0.1,
    max_items: int | None = None,
    seed: int = 0,
    verify: bool = True,
    table: dict | None = None,
    **reader: Any,
) -> Path:
    """Convert the raw files to the project's format and make the paper's query/database split.

    The split pools every item (train and test alike, as the paper does), takes
    `query_fraction` as queries and keeps the rest, in a seeded random order, as the database
    and training pool. `max_items` keeps a seeded random subset, for quick runs. The label tree
    the data carries (built in, or read from the data) is written beside it for the tree step.
    `reader`: the folder and table readers' options (READER_OPTIONS: image_size, color,
    skip_bad_images, workers, inner_labels, name, shard_mb), the pipeline's data settings of those
    names; with shard_mb the images are stored as shards (shdh.data.shards), the subset of
    `max_items` too, copied a block of rows at a time.
    """
    module = dataset_module(dataset)
    unknown = sorted(set(reader) - set(READER_OPTIONS))
    if unknown:
        raise TypeError(
            f"prepare: unknown reader options {unknown} (known: {list(READER_OPTIONS)})"
        )
    from shdh.data.dataset import load_dataset, save_subset
    from shdh.data.splits import make_split, save_split

    out_dir = Path(out_dir)
    check_writable(out_dir, "data.prepared_dir")
    check_output_folder(out_dir, "data.prepared_dir", SPLIT_FILE)
    with atomic_dir(out_dir) as tmp:
        label_tree = module.convert(
            Path(raw_dir), tmp / "dataset", verify=verify, table=table, **reader
        )
        ds = load_dataset(tmp / "dataset")
        if max_items is not None and max_items < len(ds.ids):
            rng = np.random.default_rng(seed)
            keep = np.sort(rng.choice(len(ds.ids), max_items, replace=False))
            ds = save_subset(ds, keep, tmp / "dataset", shard_mb=reader.get("shard_mb"))
        split = make_split(len(ds.ids), query_fraction=query_fraction, seed=seed)
        save_split(split, tmp / SPLIT_FILE)
        label_tree.save(tmp / LABEL_TREE_FILE)
    log.info(
        "wrote %s: %d items, %d queries, %d database",
        out_dir,
        len(ds.ids),
        len(split.query_idx),
        len(split.db_idx),
    )
    return out_dir


def load_prepared(prepared_dir: str | Path):
    """The dataset and split written by `prepare`."""
    from shdh.data.dataset import load_dataset
    from shdh.data.splits import load_split

    prepared_dir = Path(prepared_dir)
    ds = load_dataset(prepared_dir / "dataset")
    split = load_split(prepared_dir / SPLIT_FILE, n_items=len(ds.ids))
    return ds, split
