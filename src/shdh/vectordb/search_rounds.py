"""Searching a collection: Milvus's candidates for each query, put in order and, with an
exhaustive search, completed until the tie at the k-th place is closed.

Milvus ranks the bit-repeated codes by Hamming distance, which is Eq. 4's integer distance
(shdh.ranking.repeated_bits); its candidates go into a `CandidatePool`, which orders them by
(distance, database row) and says when the tie at the k-th place may hide items of lower rows,
and further searches restricted to `row <= R` close it (shdh.ranking.tie_closure). The first
search takes every query of a request at once; a round of tie-closing is one search per query
that needs it (Milvus applies one filter to a whole search).

Reads ask for Session consistency: they see every write this process made (the service's
inserts and deletes), without waiting for the latest timestamp as Strong does (about 200 ms a
search on a standalone server, against 6 ms); writes by other processes appear within Milvus's
time tick.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shdh.ranking.tie_closure import CandidatePool
from shdh.vectordb import schema
from shdh.vectordb.connection import VectorStoreError

TOPK_MAX = 16_384  # Milvus's cap on a search's limit (and on its number of queries)
MAX_ROUNDS = 64  # tie-closing searches a query may take; each shrinks the tie many times over
CALL_TIMEOUT_S = 60.0

Ranked = list[tuple[CandidatePool, dict[int, dict]]]


class SearchRounds:
    """The searches of collection `name`, by the index its code field has now (Milvus's own
    description of it: a collection may be indexed anew after the index step wrote it), a
    BIN_IVF_FLAT search visiting `nprobe` lists (None: a sixteenth of them, at least 1)."""

    def __init__(self, client: Any, name: str, nprobe: int | None, where: str) -> None:
        self.client, self.name, self.where = client, name, where
        index = client.describe_index(name, schema.CODE)
        if not index or index.get("index_type") not in schema.INDEX_TYPES:
            found = (index or {}).get("index_type")
            raise VectorStoreError(
                f"{where}: the code field's index is {found!r}, not one of {schema.INDEX_TYPES}"
            )
        self.index_type = index["index_type"]
        self.flat = self.index_type == "BIN_FLAT"
        self.nlist = 1 if self.flat else int(index["nlist"])
        self.nprobe = max(1, self.nlist // 16) if nprobe is None else int(nprobe)

    def exhaustive(self, nprobe: int | None = None) -> bool:
        """Whether a search visits every item: BIN_FLAT, or every list of BIN_IVF_FLAT."""
        return self.flat or (self.nprobe if nprobe is None else nprobe) >= self.nlist

    def rank(
        self, queries: list[bytes], k: int, fields: list[str], nprobe: int | None = None
    ) -> Ranked:
        """For each repeated query code: its pool (ordered by (distance, row); with an
        exhaustive search, the tie at the k-th place closed) and the stored `fields` (the row
        among them) of the items in it."""
        if not 1 <= k <= TOPK_MAX // 2:
            raise ValueError(f"k must be between 1 and {TOPK_MAX // 2} with Milvus, got {k}")
        fields = [schema.ROW, *fields]
        # A search costs about the same for a limit of k or of several k (the scan dominates,
        # not the results), so the first asks for enough that the tie rarely reaches its end.
        first, later = min(TOPK_MAX, max(4 * k, k + 64)), min(TOPK_MAX, max(8 * k, 256))
        exhaustive = self.exhaustive(nprobe)
        ranked = []
        results = self.search(queries, first, fields, nprobe=nprobe)
        for query, found in zip(queries, results, strict=True):
            pool, entities = CandidatePool(k), {}
            bound, rounds = _add(pool, entities, found, first), 0
            while exhaustive and bound is not None:
                if rounds == MAX_ROUNDS:
                    raise VectorStoreError(f"{self.where}: the tie at place {k} did not close")
                found = self.search([query], later, fields, f"{schema.ROW} <= {bound}", nprobe)
                bound, rounds = _add(pool, entities, found[0], later), rounds + 1
            ranked.append((pool, entities))
        return ranked

    def search(self, queries, limit, fields, where: str = "", nprobe: int | None = None) -> list:
        params = {} if self.flat else {"nprobe": nprobe or self.nprobe}
        return self.client.search(
            self.name,
            data=queries,
            anns_field=schema.CODE,
            limit=limit,
            filter=where,
            output_fields=fields,
            search_params={"metric_type": "HAMMING", "params": params},
            consistency_level="Session",
            timeout=CALL_TIMEOUT_S,
        )


def _add(pool: CandidatePool, entities: dict, found: list, limit: int) -> int | None:
    """One search's results into the pool; the row bound of the next search, or None."""
    ids = np.array([hit["id"] for hit in found], np.int64)
    distances = np.rint([hit["distance"] for hit in found]).astype(np.int64)
    rows = np.array([hit["entity"][schema.ROW] for hit in found], np.int64)
    for hit in found:
        entities.setdefault(int(hit["id"]), hit["entity"])
    pool.add(ids, rows, distances)
    return pool.open_tie(distances, limit)
