"""One function per pipeline step: the library calls behind DVC stages, the CLI and Kubeflow.

Each step reads its inputs from paths, validates them, and writes its outputs atomically. The
DVC stages (dvc.yaml), `shdh <step>` and the Kubeflow components are thin shells over these
functions, so every front door runs exactly the same code.

    fetch -> download -> tree -> smatrix -> features -> train@METHOD -> evaluate

Training lives in shdh.fitting and scoring in shdh.evaluation; this module holds the data steps.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from shdh.atomic import atomic_dir, check_writable
from shdh.config import ConfigError
from shdh.hierarchy import (
    LabelTree,
    builtin_tree,
)

log = logging.getLogger(__name__)

DATASETS = ("fashion-mnist-h", "cifar100", "iaprtc12", "folder", "table")
TREE_FILE = "tree.json"
ANCESTORS_FILE = "ancestors.npy"
SPLIT_FILE = "split.npz"
LABEL_TREE_FILE = "label_tree.json"  # in prepared_dir: the tree the data came with
RESUME_MODES = ("never", "auto", "always")


# --------------------------------------------------------------------------- data


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
READER_DEFAULTS = {"image_size": 32, "color": True, "skip_bad_images": False, "workers": None,
                   "inner_labels": False, "name": None}  # fmt: skip


def download_options(data: dict[str, Any]) -> dict[str, Any]:
    """steps.download's keyword arguments from a (validated) `data` section, so that the DVC
    stage and the Kubeflow component pass every data setting alike."""
    defaults = {**READER_DEFAULTS, "verify": True, "table": None}
    return {
        "dataset": data["dataset"],
        "query_fraction": data["query_fraction"],
        "max_items": data["max_items"],
        **{key: data.get(key, default) for key, default in defaults.items()},
    }


def _convert(dataset: str, raw_dir: Path, out: Path, *, verify: bool,
             reader: dict[str, Any], table: dict | None) -> LabelTree:  # fmt: skip
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


def download(
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
            f"download: unknown reader options {unknown} (known: {list(READER_DEFAULTS)})"
        )
    reader = {**READER_DEFAULTS, **reader}
    from shdh.data.dataset import Dataset, load_dataset, save_dataset
    from shdh.data.splits import make_split, save_split

    out_dir = Path(out_dir)
    check_writable(out_dir, "data.prepared_dir")
    with atomic_dir(out_dir) as tmp:
        label_tree = _convert(dataset, Path(raw_dir), tmp / "dataset", verify=verify,
                              reader=reader, table=table)  # fmt: skip
        ds = load_dataset(tmp / "dataset")
        if max_items is not None and max_items < len(ds.ids):
            rng = np.random.default_rng(seed)
            keep = np.sort(rng.choice(len(ds.ids), max_items, replace=False))
            subset = Dataset(images=np.asarray(ds.images[keep]), labels=ds.labels[keep],
                             ids=ds.ids[keep], name=ds.name)  # fmt: skip
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
    """The dataset and split written by `download`."""
    from shdh.data.dataset import load_dataset
    from shdh.data.splits import load_split

    prepared_dir = Path(prepared_dir)
    ds = load_dataset(prepared_dir / "dataset")
    split = load_split(prepared_dir / SPLIT_FILE, n_items=len(ds.ids))
    return ds, split


# --------------------------------------------------------------------------- tree, S


def load_tree_source(source: str, prepared_dir: str | Path | None = None) -> LabelTree:
    """ "dataset" (the tree the download step found in the data), `builtin:NAME`, or a path to
    a tree JSON file (LabelTree.save format)."""
    if source == "dataset":
        if prepared_dir is None:
            raise ConfigError("tree.source: 'dataset' needs the prepared data directory")
        return LabelTree.load(Path(prepared_dir) / LABEL_TREE_FILE)
    if source.startswith("builtin:"):
        return builtin_tree(source.removeprefix("builtin:"))
    return LabelTree.load(source)


def tree(prepared_dir: str | Path, out_dir: str | Path, *, source: str) -> Path:
    """Map every item's label path(s) onto the label tree: the ancestors of every item.

    Single-label data gives the (N, K) ancestor matrix. When any item carries several label
    paths (joined by LABEL_SEP), every item gets (N, K, M) ancestor sets instead (-1 padded).
    """
    from shdh.data.dataset import LABEL_SEP, load_dataset
    from shdh.hierarchy import TreeError

    check_writable(out_dir, "tree.out_dir")
    label_tree = load_tree_source(source, prepared_dir)
    ds = load_dataset(Path(prepared_dir) / "dataset")
    labels = [str(label) for label in ds.labels]
    try:
        if any(LABEL_SEP in label for label in labels):
            ancestors = label_tree.ancestor_sets_of_labels(labels, sep=LABEL_SEP)
        else:
            ancestors = label_tree.ancestors_of_labels(labels)
    except TreeError as err:
        raise TreeError(f"tree.source {source}: the data's {err}") from None
    with atomic_dir(out_dir) as tmp:
        label_tree.save(tmp / TREE_FILE)
        np.save(tmp / ANCESTORS_FILE, ancestors)
    log.info(
        "wrote %s: K=%d, %d nodes, %d items, ancestors %s",
        out_dir,
        label_tree.height,
        label_tree.n_nodes,
        len(ancestors),
        ancestors.shape,
    )
    return Path(out_dir)


def load_tree(tree_dir: str | Path) -> tuple[LabelTree, np.ndarray]:
    """The tree and the ancestors written by `tree`: (N, K), or (N, K, M) sets, checked against
    the tree (hand-edited or stale files fail here, naming the file)."""
    tree_dir = Path(tree_dir)
    label_tree = LabelTree.load(tree_dir / TREE_FILE)
    path = tree_dir / ANCESTORS_FILE
    try:
        ancestors = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the ancestor matrix: {exc}") from exc
    K = label_tree.height
    if (
        ancestors.ndim not in (2, 3)
        or ancestors.shape[1:2] != (K,)
        or (ancestors.ndim == 3 and ancestors.shape[2] < 1)
    ):
        raise ValueError(
            f"{path}: ancestors have shape {ancestors.shape}, expected (N, {K}) or (N, {K}, M) "
            f"with M >= 1 for the tree in {tree_dir / TREE_FILE}"
        )
    if not np.issubdtype(ancestors.dtype, np.integer):
        raise ValueError(f"{path}: ancestors have dtype {ancestors.dtype}, expected integers")
    if ancestors.size and (ancestors.min() < -1 or ancestors.max() >= label_tree.n_nodes):
        raise ValueError(
            f"{path}: ancestors hold ids outside -1..{label_tree.n_nodes - 1}, the node ids of "
            f"the tree in {tree_dir / TREE_FILE}"
        )
    return label_tree, ancestors


def smatrix(
    tree_dir: str | Path,
    out: str | Path,
    *,
    prepared_dir: str | Path,
    sample_size: int = 2000,
    seed: int = 0,
) -> Path:
    """The compact S artifact (Eq. 3 by shared depth) plus a dense block for a sample.

    Works alike for (N, K) ancestors and multi-label (N, K, M) ancestor sets. The sample comes
    from the database (the training pool), never from the queries.
    """
    from shdh.data.splits import load_split
    from shdh.similarity import build_smatrix

    check_writable(out, "smatrix.out")
    label_tree, ancestors = load_tree(tree_dir)
    split = load_split(Path(prepared_dir) / SPLIT_FILE, n_items=len(ancestors))
    s = build_smatrix(
        ancestors,
        label_tree.layer_weights(),
        sample_size=sample_size,
        seed=seed,
        pool=split.db_idx,
    )
    s.save(out)
    log.info(
        "wrote %s: N=%d, K=%d, sample %d", out, s.n_items, label_tree.height, len(s.sample_idx)
    )
    return Path(out)


# --------------------------------------------------------------------------- features


def load_smatrix(path: str | Path):
    from shdh.similarity import SMatrix

    return SMatrix.load(path)


def features(prepared_dir: str | Path, out: str | Path, *, batch_size: int = 256) -> Path:
    """512-D GIST of every item (train and query alike), for the shallow baselines."""
    from shdh.atomic import atomic_path
    from shdh.data.dataset import load_dataset
    from shdh.features.gist import gist_features

    check_writable(out, "features.out")
    ds = load_dataset(Path(prepared_dir) / "dataset")
    values = gist_features(ds.images, batch_size=batch_size, progress=False)
    with atomic_path(out, suffix=".npy") as tmp:
        np.save(tmp, values.astype(np.float32))
    log.info("wrote %s: %s GIST features", out, values.shape)
    return Path(out)
