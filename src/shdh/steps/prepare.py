"""The prepare step: bring the raw files (fetch), convert them to the project's dataset
format and make the paper's seeded query/database split (prepare).

    fetch -> prepare -> tree -> smatrix -> features -> fit -> score -> report
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from shdh.atomic import atomic_dir, check_writable
from shdh.errors import ConfigError
from shdh.hierarchy import LabelTree

log = logging.getLogger(__name__)

DATASETS = ("fashion-mnist-h", "cifar100", "iaprtc12", "folder", "table")
SPLIT_FILE = "split.npz"
LABEL_TREE_FILE = "label_tree.json"  # in prepared_dir: the tree the data came with


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
    _check_dataset(dataset)
    raw_dir = Path(raw_dir)
    if dataset == "fashion-mnist-h":
        from shdh.data.fashion_mnist import fetch_raw

        return fetch_raw(raw_dir, sources=tuple(sources), verify=verify)
    if dataset in ("folder", "table"):
        if not raw_dir.exists():
            raise ConfigError(
                f"data.raw_dir: {raw_dir} does not exist; a {dataset} dataset is your own "
                "data and must be there before the pipeline runs"
            )
        return raw_dir
    if dataset == "cifar100":
        from shdh.data.cifar100 import OFFICIAL_URL, fetch_cifar100

        return fetch_cifar100(raw_dir, _mirrors(sources, OFFICIAL_URL, dataset), verify=verify)
    from shdh.data.iaprtc12 import OFFICIAL_BASE, fetch_iaprtc12

    return fetch_iaprtc12(raw_dir, _mirrors(sources, OFFICIAL_BASE, dataset))


def _mirrors(sources, official: str, dataset: str) -> list[str]:
    if isinstance(sources, str):
        raise ConfigError(f"data.sources: expected a list of locations, got the string {sources!r}")
    if "debian" in sources:
        raise ConfigError(
            f"data.sources: 'debian' ships only Fashion-MNIST, not {dataset}; use 'official' "
            "or a mirror (https://, file://, s3://, a folder)"
        )
    return [official if source == "official" else str(source) for source in sources]


# The folder and table readers' options, with their defaults: data settings of the same names.
READER_DEFAULTS = {
    "image_size": 32,
    "color": True,
    "skip_bad_images": False,
    "workers": None,
    "inner_labels": False,
    "name": None,
}


def prepare_options(data: dict[str, Any]) -> dict[str, Any]:
    """prepare()'s keyword arguments from a (validated) `data` section, so that the DVC
    stage and the Kubeflow component pass every data setting alike."""
    defaults = {**READER_DEFAULTS, "verify": True, "table": None}
    return {
        "dataset": data["dataset"],
        "query_fraction": data["query_fraction"],
        "max_items": data["max_items"],
        **{key: data.get(key, default) for key, default in defaults.items()},
    }


def _convert(
    dataset: str,
    raw_dir: Path,
    out: Path,
    *,
    verify: bool,
    reader: dict[str, Any],
    table: dict | None,
) -> LabelTree:
    """Write raw_dir's items as a dataset directory at `out`; return the label tree they carry.

    Folder and table datasets stream their images straight into `out` (their size is unknown
    in advance and may be large); the built-in ones are small enough to convert in memory.
    `reader` holds the folder and table readers' options (READER_DEFAULTS).
    """
    from shdh.data.dataset import save_dataset

    if dataset == "folder":
        from shdh.data.folder import folder_dataset

        return folder_dataset(raw_dir, out, **reader)[1]
    if dataset == "table":
        from shdh.data.table import table_dataset

        columns = {k: v for k, v in (table or {}).items() if k in ("image_column", "label_column")}
        return table_dataset(raw_dir, out, **reader, **columns)[1]
    if dataset == "cifar100":
        from shdh.data.cifar100 import cifar100_dataset

        ds, label_tree = cifar100_dataset(raw_dir, verify=verify)
    elif dataset == "iaprtc12":
        from shdh.data.iaprtc12 import iaprtc12_dataset

        ds, label_tree = iaprtc12_dataset(raw_dir, skip_bad_images=reader["skip_bad_images"])
    else:
        from shdh.data.dataset import fashion_mnist_h_dataset
        from shdh.hierarchy import fashion_mnist_tree

        ds, label_tree = fashion_mnist_h_dataset(raw_dir), fashion_mnist_tree()
    save_dataset(ds, out)
    return label_tree


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
    `reader`: the folder and table readers' options (READER_DEFAULTS: image_size, color,
    skip_bad_images, workers, inner_labels, name), the pipeline's data settings of those names.
    """
    _check_dataset(dataset)
    unknown = sorted(set(reader) - set(READER_DEFAULTS))
    if unknown:
        raise TypeError(
            f"prepare: unknown reader options {unknown} (known: {list(READER_DEFAULTS)})"
        )
    reader = {**READER_DEFAULTS, **reader}
    from shdh.data.dataset import Dataset, load_dataset, save_dataset
    from shdh.data.splits import make_split, save_split

    out_dir = Path(out_dir)
    check_writable(out_dir, "data.prepared_dir")
    with atomic_dir(out_dir) as tmp:
        label_tree = _convert(
            dataset, Path(raw_dir), tmp / "dataset", verify=verify, reader=reader, table=table
        )
        ds = load_dataset(tmp / "dataset")
        if max_items is not None and max_items < len(ds.ids):
            rng = np.random.default_rng(seed)
            keep = np.sort(rng.choice(len(ds.ids), max_items, replace=False))
            subset = Dataset(
                images=np.asarray(ds.images[keep]),
                labels=ds.labels[keep],
                ids=ds.ids[keep],
                name=ds.name,
            )
            save_dataset(subset, tmp / "dataset")
            ds = subset
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


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise ConfigError(
            f"data.dataset: unknown dataset '{dataset}' (known: {', '.join(DATASETS)})"
        )


def load_prepared(prepared_dir: str | Path):
    """The dataset and split written by `prepare`."""
    from shdh.data.dataset import load_dataset
    from shdh.data.splits import load_split

    prepared_dir = Path(prepared_dir)
    ds = load_dataset(prepared_dir / "dataset")
    split = load_split(prepared_dir / SPLIT_FILE, n_items=len(ds.ids))
    return ds, split
