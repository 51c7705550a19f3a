"""Label trees for hierarchical labelled data: the tree, its lookups and its ancestor matrix.

SHDH (Wang et al., arXiv 1704.02088) compares two items level by level in a label tree (Eq. 1),
weights the levels (Eq. 2) and sums them into one similarity (Eq. 3). All of that only needs, per
item, the id of its ancestor at every level: the N x K ancestor matrix built here. The tree itself
stays tiny (hundreds of nodes), so it is validated eagerly and stored as two plain tuples.

Conventions (see METHOD.md): the root is level 1 and node 0; K is the deepest level; a leaf may sit
above level K, and then its ancestor row holds -1 below its own level.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.level_weights import integer_layer_weights, layer_weights
from shdh.core.tree_fields import (
    SEP,
    TreeError,
    checked_fields,
    fields_by_path,
    fields_from_parents,
    is_int,
    nested_children,
    node_levels,
    path_children,
)
from shdh.runtime.atomic import atomic_write_text

FORMAT = "shdh-label-tree/1"


def _label_of(pos: int, item_ids: Sequence[int] | None) -> str:
    """How an error names an item's label: by its id where the caller knows it (what a user
    finds in the dataset's ids.npy or a table's row), else by its position."""
    return f"label at position {pos}" if item_ids is None else f"label of item {item_ids[pos]}"


def _ancestor_sets(rows: np.ndarray, items: np.ndarray, n_items: int) -> np.ndarray:
    """Group the ancestor rows (P, K) of labels owned by items (P,) into (n_items, K, M) sets:
    distinct ids sorted within each (item, level) cell, -1 padded."""
    n_labels, K = rows.shape
    item = np.repeat(items, K)
    level = np.tile(np.arange(K), n_labels)
    node = rows.ravel().astype(np.int64)
    keep = node >= 0
    item, level, node = item[keep], level[keep], node[keep]
    order = np.lexsort((node, level, item))  # by item, then level, then node id
    item, level, node = item[order], level[order], node[order]
    cell = item * K + level
    new = np.ones(cell.size, dtype=bool)
    new[1:] = (cell[1:] != cell[:-1]) | (node[1:] != node[:-1])  # drop repeated (cell, node)
    cell, item, level, node = cell[new], item[new], level[new], node[new]
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]]) if cell.size else cell
    slot = np.arange(cell.size) - np.repeat(starts, np.diff(np.r_[starts, cell.size]))
    width = int(slot.max()) + 1 if slot.size else 1
    out = np.full((n_items, K, width), -1, dtype=np.int32)
    out[item, level, slot] = node
    return out


def _check_unique_siblings(tree: LabelTree) -> None:
    """Names are labels and may repeat anywhere (a `circle` under `blue` and another under
    `purple`); only two children of one parent may not share a name, as their paths, which
    identify nodes, would then be equal."""
    first: dict[tuple[int, str], int] = {}
    for i, name in enumerate(tree.names):
        key = (tree.parents[i], name)
        if key in first:
            raise TreeError(
                f"node {tree.path(i)!r} appears twice (nodes {first[key]} and {i}): "
                "children of one parent need distinct names"
            )
        first[key] = i


# ---- the constructors' inputs, as (names, parents) ------------------------------------------


# ---- LabelTree, by concern: its shape, its lookups, its ancestor matrices, its file ---------


class _Shape:
    """Levels, children and paths of a LabelTree's nodes (computed once, on first use)."""

    names: tuple[str, ...]
    parents: tuple[int, ...]
    _levels: np.ndarray

    @property
    def n_nodes(self) -> int:
        return len(self.names)

    @property
    def levels(self) -> np.ndarray:
        """Level of every node (root = 1), read-only."""
        return self._levels

    @cached_property
    def height(self) -> int:
        """K: the deepest level."""
        return int(self._levels.max())

    @cached_property
    def _children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in self.names]
        for i, p in enumerate(self.parents):
            if p >= 0:
                kids[p].append(i)
        return tuple(tuple(k) for k in kids)

    def children(self, node: int) -> tuple[int, ...]:
        """Child node ids in ascending order."""
        return self._children[self._check_node(node)]

    @cached_property
    def leaves(self) -> tuple[int, ...]:
        """Node ids without children, ascending."""
        return tuple(i for i, kids in enumerate(self._children) if not kids)

    def nodes_at_level(self, level: int) -> np.ndarray:
        """Node ids at one level, ascending: the rank of a node in it is its per-level index."""
        return np.flatnonzero(self.levels == level)

    def level(self, node: int) -> int:
        return int(self.levels[self._check_node(node)])

    def _check_node(self, node: int) -> int:
        if not is_int(node) or not 0 <= node < self.n_nodes:
            raise TreeError(f"node id {node!r} is not in the tree (0..{self.n_nodes - 1})")
        return int(node)

    @cached_property
    def _paths(self) -> tuple[str, ...]:
        paths = [""] * self.n_nodes
        for i in np.argsort(self.levels, kind="stable")[1:]:
            parent = paths[self.parents[i]]
            paths[i] = f"{parent}{SEP}{self.names[i]}" if parent else self.names[i]
        return tuple(paths)

    def path(self, node: int) -> str:
        """Names from level 2 down to the node, e.g. "Clothes/Tops/Shirt" ("" for the root)."""
        return self._paths[self._check_node(node)]


class _Lookup(_Shape):
    """A LabelTree's node ids of labels (names or paths)."""

    @cached_property
    def _lookup(self) -> tuple[dict[str, int], dict[str, list[int]]]:
        by_path = {p: i for i, p in enumerate(self._paths) if i}
        by_name: dict[str, list[int]] = {}
        for i, name in enumerate(self.names):
            by_name.setdefault(name, []).append(i)
        return by_path, by_name

    def node_id(self, label: str) -> int:
        """Node id of a full path ("Clothes/Tops/Shirt") or of a name that is unique in the tree."""
        by_path, by_name = self._lookup
        if not isinstance(label, str):
            raise TreeError(f"label must be a string, got {label!r}")
        label = str(label)  # a NumPy string would print as np.str_('...') in the messages
        if label in by_path:
            return by_path[label]
        ids = by_name.get(label, []) if SEP not in label else []
        if len(ids) == 1:
            return ids[0]
        if len(ids) > 1:
            where = ", ".join(repr(self._paths[i] or self.names[i]) for i in ids)
            raise TreeError(f"label {label!r} is ambiguous: it names {where}; give the full path")
        examples = ", ".join(repr(self._paths[i]) for i in self.leaves[:3])
        raise TreeError(
            f"label path {label!r} is not in the tree ({self.n_nodes} nodes; leaves look like "
            f"{examples})"
        )

    def _looked_up(self, seen: dict[str, int], label: Any, where: str) -> int:
        """node_id(label), each distinct label string looked up once (a data set repeats a few
        labels over many items); an unknown label's error says `where` it was found."""
        node = seen.get(label) if isinstance(label, str) else None
        if node is None:
            try:
                node = self.node_id(label)
            except TreeError as err:
                raise TreeError(f"{where}: {err}") from None
            if isinstance(label, str):
                seen[label] = node
        return node


class _Ancestors(_Lookup):
    """A LabelTree's ancestor matrices: what the similarity of Eq. 1 reads."""

    @cached_property
    def _ancestor_table(self) -> np.ndarray:
        """Row i: the id of node i's ancestor at each level 1..K (itself at its level, -1 below)."""
        table = np.full((self.n_nodes, self.height), -1, dtype=np.int32)
        par = np.asarray(self.parents, dtype=np.int64)
        for lev in range(1, self.height + 1):
            nodes = np.flatnonzero(self.levels == lev)
            if lev > 1:
                table[nodes] = table[par[nodes]]
            table[nodes, lev - 1] = nodes
        table.setflags(write=False)
        return table

    def ancestor_row(self, node: int) -> np.ndarray:
        """(K,) int32: the node id at each level 1..K; column 0 is the root, -1 below the node."""
        return self._ancestor_table[self._check_node(node)].copy()

    def ancestors(self, nodes: Sequence[int] | np.ndarray) -> np.ndarray:
        """(N, K) int32 ancestor matrix of N items given their node ids (usually leaves)."""
        arr = np.asarray(nodes)
        if arr.ndim != 1:
            raise TreeError(f"node ids must be a 1-D array, got shape {arr.shape}")
        if arr.size == 0:
            return np.zeros((0, self.height), dtype=np.int32)
        if not np.issubdtype(arr.dtype, np.integer):
            raise TreeError(f"node ids must be integers, got dtype {arr.dtype}")
        bad = np.flatnonzero((arr < 0) | (arr >= self.n_nodes))
        if bad.size:
            raise TreeError(
                f"node id {arr[bad[0]]} at position {bad[0]} is not in the tree "
                f"(0..{self.n_nodes - 1})"
            )
        return self._ancestor_table[arr]

    def ancestors_of_labels(
        self, labels: Sequence[str], item_ids: Sequence[int] | None = None
    ) -> np.ndarray:
        """(N, K) ancestor matrix from label names or paths (each distinct label looked up once).
        item_ids name the items in errors (the dataset's ids), else their positions do."""
        seen: dict[str, int] = {}
        ids = np.empty(len(labels), dtype=np.int64)
        for pos, label in enumerate(labels):
            ids[pos] = self._looked_up(seen, label, _label_of(pos, item_ids))
        return self.ancestors(ids)

    def ancestor_sets_of_labels(
        self, labels: Sequence[str], sep: str = "|", item_ids: Sequence[int] | None = None
    ) -> np.ndarray:
        """(N, K, M) int32 ancestor sets of multi-label items, each label string holding its
        label paths joined by `sep` ("landscape/sky|humans/person").

        [i, k, :] is the set of level-(k+1) ancestors over all of item i's labels (a label
        shallower than the level adds nothing), as sorted distinct ids padded with -1. M is the
        largest such set of any item at any level (at least 1). Taking every label's whole
        ancestor path keeps the sets closed under "parent of", so set matches are nested like
        single-label ones (similarity.similarity_by_shared).
        """
        if not sep or SEP in sep:
            raise TreeError(f"label separator must be non-empty and differ from {SEP!r}: {sep!r}")
        seen: dict[str, int] = {}
        items: list[int] = []
        nodes: list[int] = []
        for pos, label in enumerate(labels):
            where = _label_of(pos, item_ids)
            if not isinstance(label, str):
                raise TreeError(f"{where}: must be a string, got {label!r}")
            for path in label.split(sep):
                nodes.append(self._looked_up(seen, path, f"{where}: path {path!r}"))
                items.append(pos)
        rows = self._ancestor_table[np.asarray(nodes, dtype=np.int64)]  # (P, K): one per label
        return _ancestor_sets(rows, np.asarray(items, dtype=np.int64), len(labels))

    def layer_weights(self) -> np.ndarray:
        """Eq. 2 for this tree's height."""
        return layer_weights(self.height)

    def integer_layer_weights(self) -> np.ndarray:
        return integer_layer_weights(self.height)


class _File:
    """A LabelTree as JSON (FORMAT): to_dict/from_dict, save/load."""

    names: tuple[str, ...]
    parents: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "names": list(self.names), "parents": list(self.parents)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "label tree") -> LabelTree:
        """Inverse of to_dict; `source` (e.g. a file name) prefixes every error message.

        Besides to_dict's names/parents form, a hand-written tree may list its label paths
        ({"format": ..., "root": "shapes", "paths": ["warm/red/circle", ...]}): nodes are then
        numbered level by level in the order the paths first name them.
        """
        if not isinstance(data, Mapping):
            raise TreeError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if "format" not in data:
            raise TreeError(f"{source}: missing field 'format'")
        if data["format"] != FORMAT:
            raise TreeError(f"{source}: field 'format' is {data['format']!r}, expected {FORMAT!r}")
        if "paths" in data:
            return cls._from_paths_field(data, source)
        for key in ("names", "parents"):
            if key not in data:
                raise TreeError(f"{source}: missing field {key!r} (or give 'paths' instead)")
        names, parents = data["names"], data["parents"]
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise TreeError(f"{source}: field 'names' must be a list of strings")
        if not isinstance(parents, list) or not all(is_int(x) for x in parents):
            raise TreeError(f"{source}: field 'parents' must be a list of integers")
        try:
            return cls(tuple(names), tuple(parents))
        except TreeError as err:
            raise TreeError(f"{source}: fields 'names'/'parents': {err}") from None

    @classmethod
    def _from_paths_field(cls, data: Mapping[str, Any], source: str) -> LabelTree:
        if "names" in data or "parents" in data:
            raise TreeError(f"{source}: give either 'paths' or 'names' and 'parents', not both")
        paths, root = data["paths"], data.get("root", "root")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            raise TreeError(f"{source}: field 'paths' must be a non-empty list of strings")
        if not isinstance(root, str) or not root or SEP in root:
            raise TreeError(f"{source}: field 'root' must be a name without {SEP!r}, got {root!r}")
        try:
            return cls.from_paths(paths, root=root)
        except TreeError as err:
            raise TreeError(f"{source}: field 'paths': {err}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write JSON atomically (temporary file in the same folder, then rename)."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LabelTree:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise TreeError(f"{path}: cannot read label tree as UTF-8 JSON: {err}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise TreeError(f"{path}: not valid JSON: {err}") from None
        return cls.from_dict(data, source=str(path))


@dataclass(frozen=True)
class LabelTree(_Ancestors, _File):
    """A rooted label tree: node i is called names[i] and hangs under parents[i] (root: -1).

    Frozen and validated on construction, so every other module can trust it: one root at node 0,
    no cycles, names without the path separator. A node is identified by its path from the root
    (`path`); its name is only a label, so names may repeat under different parents.
    """

    names: tuple[str, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        names, parents = checked_fields(self.names, self.parents)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "_levels", node_levels(names, parents))
        _check_unique_siblings(self)

    @classmethod
    def from_parents(
        cls, table: Mapping[str, str | None] | Iterable[tuple[str, str | None]]
    ) -> LabelTree:
        """Build from child -> parent names; the root maps to None.

        Here a name identifies a node, so a name cannot repeat; a tree whose names repeat under
        different parents is built with from_paths or from_nested, which identify nodes by path.
        """
        return cls(*fields_from_parents(table))

    @classmethod
    def from_nested(cls, mapping: Mapping[str, Any], root: str = "root") -> LabelTree:
        """Build from nested dicts; a leaf maps to None, {} or [], and lists of strings are leaves.

        Nodes are identified by their path, so equal names under different parents are distinct
        nodes; a list naming one leaf twice is refused.
        """
        return cls(*fields_by_path(nested_children(mapping, root), root))

    @classmethod
    def from_paths(cls, paths: Iterable[str], sep: str = "/", root: str = "root") -> LabelTree:
        """Build from label paths such as "Clothes/Tops/Shirt" (root not written)."""
        return cls(*fields_by_path(path_children(paths, sep), root))
