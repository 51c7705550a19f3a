"""A collection of the database's codes: its fields, its name, and its record (what the
in-process index keeps in index.json), held in the collection's description.

Fields: `item_id` (the primary key: Milvus finds, replaces and deletes items by it), `row` (the
item's place in the database order, which breaks distance ties as the offline ranking does: the
split's order for the indexed items, then the order in which items were added), `code` (the
bit-repeated code, shdh.ranking.repeated_bits), `ancestors` (the item's ancestor row, or sets,
as JSON text: Milvus 2.3's JSON fields take objects only) and `label_path`.

Why the record is the description: it must travel with the collection (a service on another
machine reads it from there), it never changes after the index step, and every Milvus version
and Milvus Lite keep a description whole (a server's etcd takes about 1.5 MB a request, so the
record, the label tree included, is refused above RECORD_MAX_BYTES).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from shdh.ranking.exact import integer_weights
from shdh.ranking.repeated_bits import RepeatedBits, repeated_bits
from shdh.vectordb.connection import VectorStoreError

FORMAT = "shdh-milvus-collection/1"
ITEM_ID, ROW, CODE, ANCESTORS, LABEL = "item_id", "row", "code", "ancestors", "label_path"
TEXT_MAX = 65_535  # Milvus's longest VARCHAR
RECORD_MAX_BYTES = 1 << 20
INDEX_TYPES = ("BIN_FLAT", "BIN_IVF_FLAT")
# What the record holds besides the encoder; `tree` is the label tree (LabelTree.to_dict), which
# turns the label paths of added items into ancestors.
RECORD_FIELDS = (
    "format",
    "method",
    "dataset",
    "encoder",
    "created",
    "segment_sizes",
    "weights",
    "bits",
    "repeated_bits",
    "index_type",
    "nlist",
    "ancestor_sets",
    "tree",
)
_NAME_MAX = 255


def collection_name(encoder: Mapping[str, Any], method: str, n_bits: int) -> str:
    """The collection of one encoder's codes: named for the registered model, its version and
    the run that trained it (`shdh_<model>_v<version>_<run>`), or, for a fit's folder without the
    registry, for the method, the code length and the run. Milvus takes letters, digits and
    underscores."""
    run = encoder.get("run_id") or "untracked"
    if encoder.get("name") and encoder.get("version"):
        name = f"shdh_{encoder['name']}_v{encoder['version']}_{run}"
    else:
        name = f"shdh_{method}_{n_bits}_{run}"
    return re.sub(r"[^A-Za-z0-9_]", "_", name)[:_NAME_MAX]


def check_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,254}", name or ""):
        raise VectorStoreError(
            f"collection {name!r}: a name is letters, digits and '_', starting with a letter "
            "or '_', at most 255 characters"
        )
    return name


def schema(record: Mapping[str, Any]) -> Any:
    """The collection's schema, its description the record."""
    from pymilvus import DataType, MilvusClient

    text = json.dumps(record, separators=(",", ":"))
    if len(text.encode()) > RECORD_MAX_BYTES:
        raise VectorStoreError(
            f"the collection's record is {len(text.encode())} bytes (its label tree has "
            f"{len(record['tree']['names'])} nodes); at most {RECORD_MAX_BYTES} fit"
        )
    fields = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False, description=text)
    fields.add_field(ITEM_ID, DataType.INT64, is_primary=True)
    fields.add_field(ROW, DataType.INT64)
    fields.add_field(CODE, DataType.BINARY_VECTOR, dim=record["repeated_bits"])
    fields.add_field(ANCESTORS, DataType.VARCHAR, max_length=TEXT_MAX)
    fields.add_field(LABEL, DataType.VARCHAR, max_length=TEXT_MAX)
    return fields


def index_params(client: Any, index_type: str, nlist: int, rows: bool = True) -> Any:
    """The code field's index, and (`rows`: a server's; Milvus Lite has no scalar index) the
    row's sorted index, which makes the tie-closing searches' `row <= R` cheap."""
    params = client.prepare_index_params()
    extra = {"nlist": int(nlist)} if index_type == "BIN_IVF_FLAT" else {}
    params.add_index(field_name=CODE, index_type=index_type, metric_type="HAMMING", params=extra)
    if rows:
        params.add_index(field_name=ROW, index_type="STL_SORT")
    return params


def read_record(client: Any, name: str, where: str) -> dict[str, Any]:
    """The record of collection `name`, checked; errors name `where` and the field."""
    try:
        exists = client.has_collection(name)
        described = client.describe_collection(name) if exists else None
    except Exception as exc:
        raise VectorStoreError(f"{where}: cannot read the collection: {exc}") from None
    if described is None:
        raise VectorStoreError(
            f"{where}: no such collection; write it with `shdh index --engine milvus`"
        )
    try:
        record = json.loads(described.get("description") or "")
    except json.JSONDecodeError:
        raise VectorStoreError(f"{where}: its description is not shdh's record") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else None
        raise VectorStoreError(f"{where}: record format {found!r}, expected {FORMAT!r}")
    missing = [f for f in RECORD_FIELDS if f not in record]
    if missing:
        raise VectorStoreError(f"{where}: the record's field {missing[0]!r} is missing")
    check_fields(described, where)
    return record


def check_fields(described: Mapping[str, Any], where: str) -> None:
    names = {field["name"] for field in described.get("fields", [])}
    missing = [f for f in (ITEM_ID, ROW, CODE, ANCESTORS, LABEL) if f not in names]
    if missing:
        raise VectorStoreError(f"{where}: the collection has no field {missing[0]!r}")


def repetition(record: Mapping[str, Any], where: str) -> RepeatedBits:
    """How the record's codes are repeated, checked against the dimension it names."""
    try:
        repeat = repeated_bits(record["segment_sizes"], integer_weights(record["weights"]))
    except (TypeError, ValueError) as exc:
        raise VectorStoreError(f"{where}: the record's segments or weights: {exc}") from None
    if repeat.n_bits != record["repeated_bits"]:
        raise VectorStoreError(
            f"{where}: the record's repeated_bits is {record['repeated_bits']}, but its segments "
            f"and weights repeat into {repeat.n_bits}"
        )
    return repeat
