"""The classes a pointwise deep method keeps one row for (GreedyHash's classifier, CSQ's hash
centres, OrthoHash's codebook) and each training item's row, or rows, among them.

An item's class is its finest label, the same "finest label" DPSH's 0/1 similarity compares
(shdh.core.batch_pairs.finest_nodes): its leaf, or the inner node it is labelled at when the tree
has no deeper node for it (-1 below), which then is a class of its own; a multi-label item's
labels are the node set of its deepest labelled level. Node ids are the tree's, unique across
levels, so a class is its node id and the table is the sorted ids the training items carry.

The lookup from node id to row is a tensor the objective keeps as a (non-persistent) buffer: it
moves to the device with it, and a training step reads rows without a host sync.
"""

from __future__ import annotations

import numpy as np
import torch

from shdh.core.batch_pairs import finest_nodes


def finest_classes(ancestors: np.ndarray) -> np.ndarray:
    """The sorted node ids that are some training item's finest label: (N, K) ancestor ids or
    (N, K, M) ancestor sets, every row labelled (core.batch_pairs.check_labelled)."""
    leaf = finest_nodes(torch.as_tensor(np.asarray(ancestors)), "ancestors", check=False)
    ids = np.unique(leaf.numpy())
    return ids[ids >= 0]


def class_lookup(classes: np.ndarray) -> torch.Tensor:
    """(max id + 1,) long: the row of each class's node id in `classes`, -1 for other ids."""
    classes = torch.as_tensor(np.asarray(classes), dtype=torch.long)
    lookup = torch.full((int(classes.max()) + 1 if len(classes) else 0,), -1, dtype=torch.long)
    lookup[classes] = torch.arange(len(classes))
    return lookup


def class_rows(lookup: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """(B,) long: the row of each single-label item's finest label; anc (B, K) ancestor ids."""
    return lookup[finest_nodes(anc.long(), "anc", check=False)]


def class_sets(lookup: torch.Tensor, anc: torch.Tensor, n_classes: int) -> torch.Tensor:
    """(B, C) float 0/1: the rows of each multi-label item's labels (its deepest labelled
    level's node set); anc (B, K, M) ancestor sets, -1 padded."""
    nodes = finest_nodes(anc.long(), "anc", check=False)  # (B, M), -1 padded
    present = nodes >= 0
    rows = torch.where(present, lookup[nodes.clamp(min=0)], 0)  # (B, M)
    hot = torch.zeros(len(nodes), n_classes, device=anc.device)
    return hot.scatter_add_(1, rows, present.float()).clamp_(max=1.0)


def refuse_multi_label(method: str, ancestors: np.ndarray, why: str) -> None:
    """A ValueError naming the method when the training items carry ancestor sets (multi-label
    data) and its paper defines no multi-label form (`why`)."""
    if np.asarray(ancestors).ndim == 3:
        raise ValueError(
            f"{method}: needs one label per item, got ancestor sets of shape "
            f"{np.asarray(ancestors).shape} (multi-label data: {why})"
        )
