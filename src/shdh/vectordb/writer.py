"""Writing the database's codes into a collection: what `shdh index --engine milvus` does after
encoding the database as the in-process index step does.

The collection is written whole under a staging name, flushed (its segments sealed into the
server's object storage), indexed and loaded, and only then renamed over an older collection of
the same name, so a service never reads a half-written one. Milvus Lite renames nothing: there
the old collection is dropped first and the new one written in its place.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from shdh.ranking.exact import integer_weights
from shdh.ranking.index_file import checked_arrays, id_lookup, integers
from shdh.ranking.repeated_bits import repeated_bits
from shdh.ranking.search_index import as_packed
from shdh.vectordb import schema
from shdh.vectordb.connection import VectorStoreError, describe, is_server

log = logging.getLogger(__name__)

# Rows a request: about 2 MB of a 64-bit code's row, far below the server's message limit.
BATCH_ROWS = 20_000
LOAD_TIMEOUT_S = 3600.0  # indexing and loading 10M codes takes minutes on two cores


@dataclass(frozen=True)
class CollectionTarget:
    """Where the index step writes: a Milvus Lite file or a server's http(s)://HOST:PORT (its
    token: $SHDH_MILVUS_TOKEN unless given), the collection (None: named for the encoder,
    schema.collection_name), and its index (BIN_FLAT: exact; BIN_IVF_FLAT: nlist lists)."""

    uri: str
    token: str | None = None
    collection: str | None = None
    index_type: str = "BIN_FLAT"
    nlist: int = 1024


def write_collection(
    client: Any,
    uri: str,
    name: str,
    *,
    codes: np.ndarray,
    item_ids: np.ndarray,
    ancestors: np.ndarray,
    label_paths: Sequence[str],
    segment_sizes: Sequence[int],
    weights: Sequence[float],
    record: Mapping[str, Any],
    index_type: str = "BIN_FLAT",
    nlist: int = 1024,
) -> dict[str, Any]:
    """Check the items and write them as collection `name` (replacing one of that name);
    the record written (record: method, dataset, encoder and the label tree `tree`)."""
    schema.check_name(name)
    where = describe(uri, name)
    n_bits = int(sum(int(s) for s in segment_sizes))
    packed, ids, anc = _checked(codes, item_ids, ancestors, label_paths, n_bits, where)
    repeat = repeated_bits(segment_sizes, integer_weights(weights))
    full = {
        **dict(record),
        "format": schema.FORMAT,
        "segment_sizes": [int(s) for s in segment_sizes],
        "weights": [float(w) for w in weights],
        "bits": n_bits,
        "repeated_bits": repeat.n_bits,
        "index_type": _index_type(index_type, uri),
        "nlist": int(nlist),
        "ancestor_sets": anc.ndim == 3,  # multi-label items: (K, M) sets, not (K,) rows
    }
    full.setdefault("created", datetime.now(UTC).isoformat(timespec="seconds"))
    staging = f"{name}__next" if is_server(uri) else name
    if client.has_collection(staging):  # a failed write's leftover, or (Lite) the old one
        client.drop_collection(staging)
    client.create_collection(staging, schema=schema.schema(full), consistency_level="Session")
    for start in range(0, len(ids), BATCH_ROWS):
        stop = start + BATCH_ROWS
        rows = _rows(ids[start:stop], repeat.expand(packed[start:stop]), anc[start:stop])
        places = range(start, start + len(rows))
        for row, label, place in zip(rows, label_paths[start:stop], places, strict=True):
            row[schema.ROW], row[schema.LABEL] = place, str(label)
        client.insert(staging, rows)
    client.flush(staging)
    indexes = schema.index_params(client, full["index_type"], nlist, rows=is_server(uri))
    client.create_index(staging, indexes)
    client.load_collection(staging, timeout=LOAD_TIMEOUT_S)
    if staging != name:
        if client.has_collection(name):
            client.drop_collection(name)
        client.rename_collection(staging, name)
        client.load_collection(name, timeout=LOAD_TIMEOUT_S)
    log.info("wrote %d items into %s (%s)", len(ids), where, full["index_type"])
    return {**full, "n_items": len(ids)}


def _index_type(index_type: str, uri: str) -> str:
    if index_type not in schema.INDEX_TYPES:
        raise VectorStoreError(f"index type {index_type!r}: one of {schema.INDEX_TYPES}")
    if index_type != "BIN_FLAT" and not is_server(uri):
        raise VectorStoreError(
            f"{uri}: Milvus Lite indexes binary codes with BIN_FLAT only; {index_type} needs a "
            "Milvus server (http://HOST:19530)"
        )
    return index_type


def _checked(codes, item_ids, ancestors, label_paths, n_bits: int, where: str) -> tuple:
    """The packed codes, the ids (distinct, int64) and the ancestors, checked as the in-process
    index checks them; errors name the collection."""
    place = Path(where)
    packed, ids, anc = checked_arrays(
        {
            "packed": as_packed(codes, n_bits, "codes"),
            "item_ids": integers(item_ids, np.int64),
            "ancestors": integers(ancestors, np.int32),
        },
        n_bits,
        place,
    )
    id_lookup(ids, None, place)  # distinct ids
    if len(label_paths) != len(ids):
        raise VectorStoreError(
            f"{where}: {len(label_paths)} label paths for {len(ids)} items; give one per item"
        )
    return packed, ids, anc


def _rows(ids: np.ndarray, codes: np.ndarray, ancestors: np.ndarray) -> list[dict[str, Any]]:
    return [
        {schema.ITEM_ID: int(i), schema.CODE: code.tobytes(), schema.ANCESTORS: json.dumps(a)}
        for i, code, a in zip(ids.tolist(), codes, ancestors.tolist(), strict=True)
    ]
