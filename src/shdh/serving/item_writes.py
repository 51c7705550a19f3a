"""POST /items and DELETE /items/{item_id}: items added to and removed from the collection the
Milvus engine serves, behind the token like every search.

An item comes with its id, its label path (placed in the collection's label tree, for the
shared levels of later id queries) and either its code (bits or hex, as /search/codes takes
them) or an image, encoded by the service's encoder exactly as an image query is. The request
is checked whole (every code, image and label path) before anything is written, and written as
one request (shdh.vectordb.items): a bad item refuses the batch with a 4xx naming it
(`items[2].image: ...`), and nothing of it is written. The answer comes once the write is
durable and seen by a search. The in-process engine's index is rebuilt by the pipeline, never
written: there these routes answer 409.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Security
from fastapi.security import HTTPBearer
from pydantic import Field, StrictBool, StrictInt, StrictStr

from shdh.serving import queries, searching
from shdh.serving.limits import Limits
from shdh.serving.queries import ID_RANGE, ItemId, PathItemId, QueryError, StrictBody
from shdh.serving.state import Loaded, Service
from shdh.serving.uploads import decode_upload


class NewItem(StrictBody):
    item_id: ItemId = Field(description=f"the item's id (int64: {ID_RANGE[0]} to {ID_RANGE[1]})")
    label_path: StrictStr = Field(
        description='its label path below the root ("Clothes/Tops/Shirt"; several joined by "|")'
    )
    code: list[StrictInt] | StrictStr | None = Field(
        None, description="its code, as /search/codes takes one (give this or image)"
    )
    image: StrictStr | None = Field(
        None, description="base64 of a PNG or JPEG, encoded by the service's encoder"
    )


class NewItems(StrictBody):
    items: list[NewItem]
    replace: StrictBool = Field(
        False, description="replace items whose ids are there (else such an id is refused)"
    )


def item_writes(service: Service, limits: Limits) -> APIRouter:
    router = APIRouter(dependencies=[Security(HTTPBearer(auto_error=False))])

    @router.post("/items", summary="add items (Milvus engine), or replace them")
    def add(body: NewItems) -> dict[str, Any]:
        from shdh.vectordb.items import ItemConflict, add_items

        loaded = _writable(service)
        if not body.items:
            raise QueryError(422, "items: no items given")
        if len(body.items) > limits.max_batch:
            raise QueryError(413, f"{len(body.items)} items: over the limit of {limits.max_batch}")
        packed = np.concatenate([_code(loaded, it, i, limits) for i, it in enumerate(body.items)])
        ids, paths = [it.item_id for it in body.items], [it.label_path for it in body.items]
        try:
            done = _written(add_items, loaded.index, ids, packed, paths, replace=body.replace)
        except ItemConflict as exc:
            raise QueryError(409, str(exc)) from None
        except ValueError as exc:
            raise QueryError(422, str(exc)) from None
        return {**done, "version": loaded.describe()}

    @router.delete("/items/{item_id}", summary="remove an item (Milvus engine)")
    def remove(item_id: PathItemId) -> dict[str, Any]:
        from shdh.vectordb.items import remove_item

        loaded = _writable(service)
        try:
            _written(remove_item, loaded.index, item_id)
        except KeyError as exc:
            raise QueryError(404, str(exc.args[0])) from None
        return {"removed": item_id, "version": loaded.describe()}

    return router


def _written(write, *args, **kwargs):
    """A write, with a vector database that does not answer (or does not show the write in
    time) as a 503 naming it; whether a write it did not acknowledge took place, a read tells."""
    from pymilvus.exceptions import MilvusException

    from shdh.vectordb.connection import VectorStoreError

    try:
        return write(*args, **kwargs)
    except MilvusException as exc:
        raise QueryError(503, f"the vector database did not answer: {exc.message}") from None
    except VectorStoreError as exc:
        raise QueryError(503, str(exc)) from None


def _writable(service: Service) -> Loaded:
    loaded = searching.served(service)
    if loaded.engine == "memory":
        raise QueryError(
            409,
            "this service's index is rebuilt by the pipeline, not written: items are added and "
            "removed with the Milvus engine (shdh serve --engine milvus)",
        )
    return loaded


def _code(loaded: Loaded, item: NewItem, i: int, limits: Limits) -> np.ndarray:
    """The item's packed (1, ceil(bits/8)) code: its own, or its image's."""
    where = f"items[{i}]"
    if (item.code is None) == (item.image is None):
        raise QueryError(422, f"{where}: give either code or image")
    if item.code is not None:
        try:
            return queries.code_rows([item.code], loaded.index.n_bits)
        except QueryError as exc:  # named as the codes of a query: codes[0]
            raise QueryError(422, str(exc).replace("codes[0]", f"{where}.code", 1)) from None
    if loaded.encoder is None:
        raise QueryError(409, f"{where}.image: this service has no image encoder (--model-dir)")
    data = queries.decode_base64(item.image, f"{where}.image")
    pixels = decode_upload(data, f"{where}.image", loaded.encoder.image_shape, limits)
    return loaded.encoder.encode(pixels[None])
