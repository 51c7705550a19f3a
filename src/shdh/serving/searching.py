"""One search, whichever engine serves: the hits of the queries and the label paths their answer
is written with.

The in-process index (shdh.ranking.search_index) answers from memory, and its label paths come
from the prepared dataset (--images); a Milvus collection (shdh.vectordb.collection_index) holds
each item's label path beside its code, so its answers carry their own, those of items added
while serving included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shdh.ranking.search_index import Hit
from shdh.serving import queries
from shdh.serving.labels import ItemLabels
from shdh.serving.queries import QueryError
from shdh.serving.state import Loaded, Service


def served(service: Service) -> Loaded:
    """The version being served, or the 503 that says why there is none."""
    loaded = service.current
    if loaded is None:
        raise QueryError(503, f"not ready: {service.not_ready_reason()}")
    return loaded


def by_codes(loaded: Loaded, packed: np.ndarray, k: int) -> tuple[list[list[Hit]], Any]:
    """Top k of packed query codes, and the labels of the answer (None: none known)."""
    if loaded.engine == "memory":
        return loaded.index.search_codes(packed, k), loaded.labels
    return _labelled(_collection(loaded.index.search_codes, packed, k))


def by_ids(loaded: Loaded, item_ids: Sequence[int], k: int) -> tuple[list[list[Hit]], Any]:
    """Top k of database items' own codes; a 404 naming an unknown id."""
    try:
        if loaded.engine == "memory":
            return loaded.index.search_ids(item_ids, k), loaded.labels
        return _labelled(_collection(loaded.index.search_ids, item_ids, k))
    except KeyError as exc:
        raise QueryError(404, str(exc.args[0])) from None


def answer(
    loaded: Loaded, found: tuple[list[list[Hit]], Any], query_ids: Sequence[int] | None = None
) -> dict[str, Any]:
    hits, labels = found
    return {"version": loaded.describe(), "results": queries.results(hits, query_ids, labels)}


def _collection(search, *args):
    """A collection's search, with Milvus's refusals (a k above its cap) as 422s and a
    database that does not answer as a 503."""
    from pymilvus.exceptions import MilvusException

    try:
        return search(*args)
    except ValueError as exc:
        raise QueryError(422, str(exc)) from None
    except MilvusException as exc:
        raise QueryError(503, f"the vector database did not answer: {exc.message}") from None


def _labelled(found: Any) -> tuple[list[list[Hit]], ItemLabels]:
    ids = np.fromiter(found.labels, np.int64, len(found.labels))
    return found.hits, ItemLabels(ids, np.asarray(list(found.labels.values()), dtype=object))
