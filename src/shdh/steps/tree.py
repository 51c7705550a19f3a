"""The tree step: every item's label path(s) mapped onto the label tree, as the N x K ancestor
matrix (or N x K x M ancestor sets for multi-label data) the similarity of Eq. 1 reads."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from shdh.core.hierarchy import LabelTree
from shdh.runtime.array_files import load_array
from shdh.runtime.atomic import atomic_dir, check_output_folder, check_writable
from shdh.runtime.errors import ConfigError
from shdh.steps.prepare import LABEL_TREE_FILE, builtin_tree

log = logging.getLogger(__name__)

TREE_FILE = "tree.json"
ANCESTORS_FILE = "ancestors.npy"


def load_tree_source(source: str, prepared_dir: str | Path | None = None) -> LabelTree:
    """ "dataset" (the tree the prepare step found in the data), `builtin:NAME`, or a path to
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
    from shdh.core.tree_fields import TreeError
    from shdh.data.dataset import LABEL_SEP, load_dataset

    check_writable(out_dir, "tree.out_dir")
    check_output_folder(out_dir, "tree.out_dir", TREE_FILE)
    label_tree = load_tree_source(source, prepared_dir)
    ds = load_dataset(Path(prepared_dir) / "dataset")
    labels = [str(label) for label in ds.labels]
    try:
        if any(LABEL_SEP in label for label in labels):
            ancestors = label_tree.ancestor_sets_of_labels(labels, LABEL_SEP, ds.ids.tolist())
        else:
            ancestors = label_tree.ancestors_of_labels(labels, ds.ids.tolist())
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
    ancestors = load_array(path, "the ancestor matrix", "rerun `shdh tree`")
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
