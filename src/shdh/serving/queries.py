"""The request and response bodies of the search endpoints, and turning a request's queries
into what `shdh.ranking.search_index.SearchIndex` takes. Types are strict (no "3" for 3, no true for
1), so a malformed request is refused with the field that is wrong instead of being guessed at."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from typing import Annotated, TypeVar

import numpy as np
import orjson
from fastapi.exceptions import RequestValidationError
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
)
from pydantic_core import PydanticCustomError
from starlette.responses import Response

from shdh.ranking.exact import unpack_codes
from shdh.ranking.search_index import Hit, SearchIndex, as_packed
from shdh.serving.labels import ItemLabels, label_results
from shdh.serving.limits import Limits

DEFAULT_K = 10
ID_RANGE = (-(2**63), 2**63 - 1)  # the index stores item ids as int64
_Model = TypeVar("_Model", bound=BaseModel)


class QueryError(Exception):
    """A request the service refuses; `status` is the HTTP status, the message the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class StrictBody(BaseModel):
    """A request body: no field beyond those declared."""

    model_config = ConfigDict(extra="forbid")


class CodeQuery(StrictBody):
    codes: list[list[StrictInt] | StrictStr] = Field(
        description="one entry per query: a list of n_bits bits (-1/+1 or 0/1), or the hex of "
        "the packed code (ceil(n_bits/8) bytes, bit 1 = +1, most significant bit first)",
        examples=[["a5f0"], [[1, -1, 1, 1, -1, -1, 1, -1]]],
    )
    k: StrictInt = DEFAULT_K


def _int64_id(value: int) -> int:
    """An id the index can hold: JSON integers have no bound, and a larger one would wrap
    around when it is looked up as int64 (2**63 becoming -2**63)."""
    low, high = ID_RANGE
    if not low <= value <= high:
        raise PydanticCustomError(
            "int64_range",
            "item id {value} is out of range: ids are 64-bit signed integers, from {low} to {high}",
            {"value": str(value), "low": str(low), "high": str(high)},
        )
    return value


ItemId = Annotated[StrictInt, AfterValidator(_int64_id)]
# An id in a path (/items/{item_id}): text, so not strict, but an int64 all the same.
PathItemId = Annotated[int, AfterValidator(_int64_id)]


class IdQuery(StrictBody):
    ids: list[ItemId] = Field(
        description=f"database item ids (int64: {ID_RANGE[0]} to {ID_RANGE[1]}); each item's "
        "code is a query"
    )
    k: StrictInt = DEFAULT_K


class ImageBatch(StrictBody):
    images: list[StrictStr] = Field(description="base64 of PNG or JPEG files, one per query")
    k: StrictInt = DEFAULT_K


class HitOut(BaseModel):
    item_id: int
    distance: float = Field(description="weighted Hamming distance (Eq. 4)")
    shared_level: int = Field(
        description="deepest hierarchy level the hit shares with the query item (1 = root, "
        "K = same leaf); 0 for code and image queries, which carry no labels"
    )
    rank: int = Field(
        description="the hit's place in the answer, 1 = best: ascending distance, ties in "
        "database order"
    )
    label_path: str | None = Field(
        None,
        description='the hit\'s label path below the root ("Clothes/Tops/Shirt"; several '
        'joined by "|"); null when the service was started without the dataset (--images)',
    )
    shared_path: str | None = Field(
        None,
        description="the part of label_path the hit shares with the query item at shared_level "
        '("Clothes/Tops"; "" when only the root is shared); null for code and image queries '
        "and without the dataset",
    )


class ResultOut(BaseModel):
    query: int = Field(description="the query's position in the request")
    item_id: int | None = Field(None, description="the query item (id queries only)")
    label_path: str | None = Field(
        None,
        description="the query item's label path (id queries, with the dataset); null for code "
        "and image queries, which carry no label",
    )
    hits: list[HitOut]


class SearchOut(BaseModel):
    version: dict = Field(description="the index and encoder that answered (see /readyz)")
    results: list[ResultOut]


def check_request(n_queries: int, k: int, limits: Limits) -> None:
    if n_queries < 1:
        raise QueryError(422, "no queries given")
    if n_queries > limits.max_batch:
        raise QueryError(413, f"{n_queries} queries is over the batch limit of {limits.max_batch}")
    if not 1 <= k <= limits.max_k:
        raise QueryError(422, f"k must be between 1 and {limits.max_k}, got {k}")


def code_rows(codes: Sequence[list[int] | str], n_bits: int) -> np.ndarray:
    """The queries as packed (Q, ceil(n_bits/8)) uint8 codes."""
    rows = []
    for i, code in enumerate(codes):
        try:
            rows.append(
                _hex_code(code, n_bits) if isinstance(code, str) else _bit_code(code, n_bits)
            )
        except ValueError as exc:
            raise QueryError(422, f"codes[{i}]: {exc}") from None
    return np.concatenate(rows)


def _hex_code(text: str, n_bits: int) -> np.ndarray:
    try:
        packed = np.frombuffer(bytes.fromhex(text), np.uint8)[None, :]
    except ValueError:
        raise ValueError("not a hex string") from None
    unpack_codes(packed, n_bits)  # checks the byte count and that the padding bits are 0
    return packed


def _bit_code(bits: list[int], n_bits: int) -> np.ndarray:
    if any(bit not in (-1, 0, 1) for bit in bits):
        raise ValueError("bits must be -1/+1 or 0/1")
    return as_packed(np.asarray(bits, dtype=np.int8).reshape(1, -1), n_bits, "the code")


def decode_base64(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise QueryError(400, f"{where}: not valid base64") from None


def results(
    hits: list[list[Hit]],
    query_ids: Sequence[int] | None = None,
    labels: ItemLabels | None = None,
) -> list[dict[str, object]]:
    answers = [
        _result(
            i,
            None if query_ids is None else int(query_ids[i]),
            ((h.item_id, h.distance, h.shared_level) for h in row),
        )
        for i, row in enumerate(hits)
    ]
    return label_results(answers, labels)


def _result(
    query: int, item_id: int | None, hits: Iterable[tuple[int, float, int]]
) -> dict[str, object]:
    """One query's entry of SearchOut's results, from (item id, distance, shared level)s."""
    return {
        "query": query,
        "item_id": item_id,
        "label_path": None,
        "hits": [
            {
                "item_id": a,
                "distance": b,
                "shared_level": c,
                "rank": rank,
                "label_path": None,
                "shared_path": None,
            }
            for rank, (a, b, c) in enumerate(hits, start=1)
        ],
    }


def parse(model: type[_Model], raw: bytes) -> _Model:
    """A JSON body as `model`, refused as FastAPI refuses a body it validates (a 422 naming
    each field under "body"). Routes on the hot path parse their body themselves: pydantic's
    JSON parser in one call, without FastAPI's per-request dependency and body machinery."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None


def json_response(answer: dict) -> Response:
    """An answer as JSON, written by orjson (10 us for 100 hits where json takes 300 us)."""
    return Response(orjson.dumps(answer), media_type="application/json")


def code_answer(
    version: dict,
    index: SearchIndex,
    rows: np.ndarray,
    distances: np.ndarray,
    labels: ItemLabels | None = None,
) -> Response:
    """The SearchOut JSON of ranked code queries, written straight from the arrays: no Hit
    objects and no response-model validation of every hit (half of a request's time in the
    service, docs/benchmarks.md)."""
    answers = [
        _result(i, None, zip(*(a.tolist() for a in index.hit_arrays(r, d)), strict=True))
        for i, (r, d) in enumerate(zip(rows, distances, strict=True))
    ]
    label_results(answers, labels)
    return json_response({"version": version, "results": answers})
