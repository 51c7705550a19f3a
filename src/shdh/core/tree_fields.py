"""A label tree's two fields, names and parents, made from what users write and checked.

A tree comes as a parent table (child -> parent), as nested mappings or as label paths
("animal/dog"); each is turned into (names, parents) numbered level by level, and every problem
(a missing root, two parents, a cycle, a separator inside a name) is refused with the node named.
shdh.core.hierarchy builds its LabelTree from these fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

SEP = "/"


class TreeError(ValueError):
    """A label tree (or a label looked up in it) is malformed; the message names the node."""


def is_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _breadth_first(root: Any, children: Mapping[Any, list[Any]], name: Callable[[Any], str]):
    """Number nodes level by level (children in first-seen order) so that node ids of one level
    are contiguous and ordered as the input listed them; returns (names, parents)."""
    order = [root]
    index = {root: 0}
    parents = [-1]
    for key in order:  # `order` grows while we walk it
        for child in children.get(key, []):
            index[child] = len(order)
            order.append(child)
            parents.append(index[key])
    return tuple(name(k) for k in order), tuple(parents)


def _raise_cycle(start: Any, parent: Callable[[Any], Any], name: Callable[[Any], str]) -> None:
    """Report the cycle reached from a node the root cannot reach.

    Every node has exactly one parent and the one root has none, so following parents from an
    unreachable node never ends at the root: it must loop.
    """
    seen: list[Any] = []
    node = start
    while node not in seen:
        seen.append(node)
        node = parent(node)
    cycle = seen[seen.index(node) :] + [node]
    raise TreeError(
        f"cycle in the label tree at node {name(node)!r}: "
        + " -> ".join(repr(name(c)) for c in cycle)
    )


def checked_fields(
    names: Iterable[str], parents: Iterable[int]
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A tree's two fields as tuples, checked: one non-empty name per node without the path
    separator, one integer parent per node, exactly one root and that root at node 0."""
    names, parents = tuple(names), tuple(parents)
    n = len(names)
    if n == 0:
        raise TreeError("a label tree needs at least a root node")
    if len(parents) != n:
        raise TreeError(f"names has {n} entries but parents has {len(parents)}")
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise TreeError(f"node {i}: name must be a non-empty string, got {name!r}")
        if SEP in name:
            raise TreeError(f"node {i} {name!r}: names may not contain {SEP!r}")
    for i, p in enumerate(parents):
        if not is_int(p) or not -1 <= p < n or p == i:
            raise TreeError(f"node {i} {names[i]!r}: invalid parent {p!r}")
    parents = tuple(int(p) for p in parents)
    roots = [names[i] for i, p in enumerate(parents) if p == -1]
    if len(roots) != 1:
        raise TreeError(f"a label tree needs exactly one root (parent -1), found {roots}")
    if parents[0] != -1:
        raise TreeError(f"the root {roots[0]!r} must be node 0")
    return names, parents


def node_levels(names: tuple[str, ...], parents: tuple[int, ...]) -> np.ndarray:
    """Level of every node (root = 1), read-only; a node the root cannot reach is on a cycle."""
    par = np.asarray(parents, dtype=np.int64)
    levels = np.zeros(len(par), dtype=np.int64)
    levels[0] = 1
    while True:
        todo = (levels == 0) & (par >= 0)
        todo[todo] = levels[par[todo]] > 0
        if not todo.any():
            break
        levels[todo] = levels[par[todo]] + 1
    unreached = np.flatnonzero(levels == 0)
    if unreached.size:
        _raise_cycle(int(unreached[0]), parents.__getitem__, names.__getitem__)
    levels.setflags(write=False)
    return levels


def _parent_of(
    table: Mapping[str, str | None] | Iterable[tuple[str, str | None]],
) -> dict[str, str | None]:
    """A child -> parent table checked: pairs of strings (the root's parent None), one parent
    per child."""
    pairs = table.items() if isinstance(table, Mapping) else table
    parent_of: dict[str, str | None] = {}
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TreeError(f"parent table entries must be (child, parent) pairs, got {pair!r}")
        child, parent = pair
        if not isinstance(child, str) or not (parent is None or isinstance(parent, str)):
            raise TreeError(f"node {child!r}: names must be strings, parent {parent!r}")
        if child in parent_of and parent_of[child] != parent:
            raise TreeError(f"node {child!r} has two parents: {parent_of[child]!r} and {parent!r}")
        parent_of[child] = parent
    return parent_of


def fields_from_parents(
    table: Mapping[str, str | None] | Iterable[tuple[str, str | None]],
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """LabelTree.from_parents: one root, every parent defined, no cycle."""
    parent_of = _parent_of(table)
    roots = [c for c, p in parent_of.items() if p is None]
    if len(roots) != 1:
        found = f"found {roots}" if roots else "found none"
        raise TreeError(f"a label tree needs exactly one root (parent None), {found}")
    children: dict[str, list[str]] = {}
    for child, parent in parent_of.items():
        if parent is None:
            continue
        if parent not in parent_of:
            raise TreeError(f"node {child!r} has parent {parent!r}, which is never defined")
        children.setdefault(parent, []).append(child)
    names, parents = _breadth_first(roots[0], children, str)
    if len(names) < len(parent_of):
        reached = set(names)
        start = next(c for c in parent_of if c not in reached)
        _raise_cycle(start, lambda c: parent_of[c], str)
    return names, parents


def nested_children(
    mapping: Mapping[str, Any], root: str
) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    """LabelTree.from_nested's children of every path (the root: ())."""
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}

    def walk(prefix: tuple[str, ...], value: Any) -> None:
        kids: list[tuple[str, ...]] = []
        if value is None:
            pass
        elif isinstance(value, Mapping):
            for name, sub in value.items():
                if not isinstance(name, str):
                    raise TreeError(
                        f"node {SEP.join(prefix) or root!r}: key {name!r} is not a string"
                    )
                kids.append(prefix + (name,))
                walk(prefix + (name,), sub)
        elif isinstance(value, list | tuple):
            for name in value:
                if not isinstance(name, str):
                    raise TreeError(
                        f"node {SEP.join(prefix) or root!r}: list items must be leaf names "
                        f"(strings), got {name!r}"
                    )
                kids.append(prefix + (name,))
        else:
            raise TreeError(
                f"node {SEP.join(prefix)!r}: expected a dict, a list of leaf names or None, "
                f"got {type(value).__name__}"
            )
        children[prefix] = kids

    if not isinstance(mapping, Mapping):
        raise TreeError(f"from_nested needs a mapping, got {type(mapping).__name__}")
    walk((), mapping)
    return children


def path_children(paths: Iterable[str], sep: str) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    """LabelTree.from_paths's children of every path (the root: ()), in first-seen order."""
    if not sep:
        raise TreeError("path separator must be a non-empty string")
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    known: set[tuple[str, ...]] = {()}
    for path in paths:
        if not isinstance(path, str):
            raise TreeError(f"label path must be a string, got {path!r}")
        parts = tuple(path.split(sep))
        if not path or any(not p for p in parts):
            raise TreeError(f"label path {path!r} has an empty component")
        for depth in range(1, len(parts) + 1):
            key = parts[:depth]
            if key not in known:
                known.add(key)
                children.setdefault(key[:-1], []).append(key)
    return children


def fields_by_path(
    children: Mapping[tuple[str, ...], list[tuple[str, ...]]], root: str
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    return _breadth_first((), children, lambda key: key[-1] if key else root)
