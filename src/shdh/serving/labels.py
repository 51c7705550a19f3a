"""The label paths of the answers: each item's ("Clothes/Tops/Shirt"), and the part of it a hit
shares with the query item ("Clothes/Tops" at shared level 3).

Why from the dataset: the index holds each item's ancestor node ids, not the names of the nodes,
and the tree they number is not beside it; the prepare step's dataset (the service's --images)
holds every item's label paths as text, under the same item ids. A path names the levels below
the root, so the first `level - 1` of its parts are what two items share at `level` (the root,
level 1, is shared by every labelled pair and named by no part).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shdh.data.dataset import LABEL_SEP

PATH_SEP = "/"


class ItemLabels:
    """Item ids -> label paths, for the items of one dataset."""

    def __init__(self, ids: np.ndarray, labels: np.ndarray) -> None:
        order = np.argsort(ids, kind="stable")
        self._sorted_ids = np.asarray(ids, dtype=np.int64)[order]
        self._labels = np.asarray(labels)[order]

    def paths(self, item_ids: Sequence[int] | np.ndarray) -> list[str | None]:
        """The label path of each id; None for an id the dataset does not hold."""
        wanted = np.asarray(item_ids, dtype=np.int64).reshape(-1)
        if not len(self._sorted_ids):
            return [None] * len(wanted)
        pos = np.minimum(np.searchsorted(self._sorted_ids, wanted), len(self._sorted_ids) - 1)
        found = self._sorted_ids[pos] == wanted
        return [str(self._labels[p]) if f else None for p, f in zip(pos, found, strict=True)]

    def path(self, item_id: int | None) -> str | None:
        return None if item_id is None else self.paths([item_id])[0]


def shared_path(query: str | None, hit: str | None, level: int) -> str | None:
    """The part of the hit's label path it shares with the query's at `level` (its first
    level - 1 parts; "" for the root alone); None when either has no label or nothing is shared.
    An item with several labels ("a/b|c/d") shares the longest prefix any of its paths has with
    any of the query's."""
    if query is None or hit is None or level < 1:
        return None
    best: list[str] = []
    for one in query.split(LABEL_SEP):
        for other in hit.split(LABEL_SEP):
            common = _common_prefix(one.split(PATH_SEP), other.split(PATH_SEP))
            if len(common) > len(best):
                best = common
    return PATH_SEP.join(best[: level - 1])


def _common_prefix(a: list[str], b: list[str]) -> list[str]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def label_results(results: list[dict], labels: ItemLabels | None) -> list[dict]:
    """SearchOut's results with the label fields filled in: the query item's `label_path`, and
    each hit's `label_path` and `shared_path`; without the dataset's labels they stay as they
    are (None), and the hits are not walked (the code route's answers are on the hot path)."""
    if labels is None:
        return results
    for result in results:
        hits = result["hits"]
        query = labels.path(result.get("item_id"))
        found = labels.paths([h["item_id"] for h in hits])
        result["label_path"] = query
        for hit, path in zip(hits, found, strict=True):
            hit["label_path"] = path
            hit["shared_path"] = shared_path(query, path, hit["shared_level"])
    return results
