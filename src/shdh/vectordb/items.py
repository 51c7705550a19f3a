"""Items added to and removed from a served collection: what POST /items and DELETE /items/{id}
do with the Milvus engine.

Every write is checked whole before anything is sent (distinct ids, known label paths, codes of
the collection's length), sent as one request (an upsert: a replaced item's old version and its
new one go together), and answered only once a Strong read sees it: Milvus acknowledges a write
once its log holds it (it survives a crash of the server), but a read may not see it for up to
a time tick, and a deletion carries no timestamp that Session reads could wait for (Milvus 2.3).
So a search sent after the answer sees the write. Writes of one process go one at a time.

An added item's row (its place in the tie order) comes after every indexed item's: the time of
the write in nanoseconds, increasing within a process; a replaced item keeps its row.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from shdh.core.tree_fields import TreeError
from shdh.vectordb import schema
from shdh.vectordb.collection_index import CollectionIndex
from shdh.vectordb.connection import VectorStoreError

_WRITING = threading.Lock()
_last_row = [0]


class ItemConflict(ValueError):
    """An id that is already in the collection, sent without asking to replace it."""


def add_items(
    index: CollectionIndex,
    item_ids: Sequence[int],
    packed: np.ndarray,
    label_paths: Sequence[str],
    *,
    replace: bool = False,
) -> dict[str, list[int]]:
    """Add items (packed codes (Q, ceil(bits/8)) of the collection's length, checked by the
    caller), or replace them where `replace`; {"added": ids, "replaced": ids}. ValueError
    naming the item for a repeated id or an unknown label path; ItemConflict for an id there."""
    ids = [int(i) for i in item_ids]
    repeated = [i for pos, i in enumerate(ids) if i in ids[:pos]]
    if repeated:
        raise ValueError(f"items: item id {repeated[0]} is given more than once")
    ancestors = _ancestors(index, label_paths)
    with _WRITING:
        there = _rows_of(index, ids)
        if there and not replace:
            raise ItemConflict(
                f'item id {next(iter(there))} is already in the index; send "replace": true '
                "to replace it"
            )
        rows = [there.get(i) for i in ids]
        fresh = iter(_new_rows(sum(row is None for row in rows)))
        rows = [next(fresh) if row is None else row for row in rows]
        codes = index.repeat.expand(packed)
        entities = [
            {
                schema.ITEM_ID: i,
                schema.ROW: row,
                schema.CODE: code.tobytes(),
                schema.ANCESTORS: json.dumps(anc.tolist()),
                schema.LABEL: str(path),
            }
            for i, row, code, anc, path in zip(
                ids, rows, codes, ancestors, label_paths, strict=True
            )
        ]
        index.client.upsert(index.name, entities)
        _until_seen(index, dict(zip(ids, rows, strict=True)))
        index.forget_count()
    return {"added": [i for i in ids if i not in there], "replaced": [i for i in ids if i in there]}


def remove_item(index: CollectionIndex, item_id: int) -> None:
    """Delete one item; KeyError naming an id that is not in the collection."""
    with _WRITING:
        if not _rows_of(index, [item_id]):
            raise KeyError(f"item id {item_id} is not in the index")
        index.client.delete(index.name, ids=[int(item_id)])
        _until_seen(index, {int(item_id): None})
        index.forget_count()


def _ancestors(index: CollectionIndex, label_paths: Sequence[str]) -> list[np.ndarray]:
    """The ancestors of the items' label paths in the collection's label tree (sets, for a
    multi-label collection); ValueError naming the item (items[i].label_path) whose path the
    tree does not hold."""
    if index.tree is None:
        raise ValueError(f"{index.where}: the collection holds no label tree to place items in")
    ancestors = []
    for pos, path in enumerate(label_paths):
        try:
            if index.record["ancestor_sets"]:
                ancestors.append(index.tree.ancestor_sets_of_labels([path])[0])
            else:
                ancestors.append(index.tree.ancestor_row(index.tree.node_id(path)))
        except TreeError as exc:
            raise ValueError(f"items[{pos}].label_path: {exc}") from None
    return ancestors


def _rows_of(index: CollectionIndex, ids: Sequence[int]) -> dict[int, int]:
    """{id: row} of those of `ids` the collection holds now (a Strong read)."""
    found = index.client.get(
        index.name, ids=list(ids), output_fields=[schema.ROW], consistency_level="Strong"
    )
    return {int(entity[schema.ITEM_ID]): int(entity[schema.ROW]) for entity in found}


def _new_rows(n: int) -> list[int]:
    """n rows after every row handed out before: nanoseconds since 1970, so after the indexed
    items' 0..N-1 and after the rows other processes gave out earlier."""
    start = max(time.time_ns(), _last_row[0] + 1)
    _last_row[0] = start + n - 1
    return list(range(start, start + n))


def _until_seen(index: CollectionIndex, expected: dict[int, Any], timeout: float = 30.0) -> None:
    """Wait until a Strong read finds each id with its row (None: gone)."""
    deadline = time.monotonic() + timeout
    while True:
        rows = _rows_of(index, list(expected))
        if all(rows.get(i) == row for i, row in expected.items()):
            return
        if time.monotonic() > deadline:
            raise VectorStoreError(
                f"{index.where}: the write was not visible after {timeout:.0f} s"
            )
        time.sleep(0.05)
