"""A collection served: top-k queries by code and by item, answered in the offline ranking's order
(shdh.vectordb.search_rounds), with each hit's label path and shared level.

With BIN_FLAT (an exhaustive search) every answer is the in-process index's, hit for hit; with
BIN_IVF_FLAT it is the same ordering of Milvus's approximate candidates (shdh.vectordb.recall
measures how many of the exact ones it holds). The distances handed back are the integer
distances divided by the weights' scale, as the in-process index divides them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shdh.core.hierarchy import LabelTree
from shdh.ranking.exact import integer_weights
from shdh.ranking.index_file import distance_scale
from shdh.ranking.search_index import Hit, shared_level
from shdh.vectordb import schema
from shdh.vectordb.connection import describe
from shdh.vectordb.search_rounds import CALL_TIMEOUT_S, SearchRounds

# How long the item count is reused: count(*) costs a query, and every answer's version names it.
# Session consistency: it sees this process's writes (a Strong read waits out a time tick).
COUNT_TTL_S = 5.0


@dataclass(frozen=True)
class Answer:
    """The hits of each query, best first, and the label path of every item they name."""

    hits: list[list[Hit]]
    labels: dict[int, str]


class CollectionIndex:
    """Collection `name` of `client`, read and checked; `nprobe`: the lists a BIN_IVF_FLAT
    search visits (default: a sixteenth of them, at least 1). load_collection comes first:
    Milvus describes the index of a loaded collection."""

    def __init__(self, client: Any, uri: str, name: str, *, nprobe: int | None = None) -> None:
        self.client, self.name = client, schema.check_name(name)
        self.where = describe(uri, name)
        self.record = schema.read_record(client, name, self.where)
        self.repeat = schema.repetition(self.record, self.where)
        self.n_bits = int(self.record["bits"])
        weights = self.record["weights"]
        self._scale = distance_scale(weights, integer_weights(weights))
        client.load_collection(name, timeout=CALL_TIMEOUT_S * 10)
        self.rounds = SearchRounds(client, self.name, nprobe, self.where)
        tree = self.record.get("tree")
        self.tree = None if tree is None else LabelTree.from_dict(tree, f"{self.where}: tree")
        self._count: tuple[float, int] | None = None

    @property
    def exact(self) -> bool:
        """Whether answers are the in-process index's (else approximate: see the recall)."""
        return self.rounds.exhaustive()

    @property
    def n_items(self) -> int:
        """Items in the collection now (counted at most every COUNT_TTL_S, and after writes)."""
        if self._count is None or time.monotonic() - self._count[0] > COUNT_TTL_S:
            found = self.client.query(
                self.name, filter="", output_fields=["count(*)"], consistency_level="Session"
            )
            self._count = (time.monotonic(), int(found[0]["count(*)"]))
        return self._count[1]

    def forget_count(self) -> None:
        self._count = None

    def search_codes(self, packed: np.ndarray, k: int) -> Answer:
        """Top k of packed (Q, ceil(bits/8)) query codes; shared_level is 0 (no labels)."""
        queries = [row.tobytes() for row in self.repeat.expand(packed)]
        labels: dict[int, str] = {}
        ranked = self.rounds.rank(queries, k, [schema.LABEL])
        hits = [_hits(pool, found, None, labels, self._scale) for pool, found in ranked]
        return Answer(hits, labels)

    def search_ids(self, item_ids: Sequence[int], k: int) -> Answer:
        """Top k of each item's own code, with the deepest level each hit shares with it; an
        unknown id raises KeyError naming it."""
        items = self.get(item_ids, (schema.CODE, schema.ANCESTORS, schema.LABEL))
        queries = [stored_vector(items[i][schema.CODE]) for i in item_ids]
        ranked = self.rounds.rank(queries, k, [schema.LABEL, schema.ANCESTORS])
        labels = {int(i): items[i][schema.LABEL] for i in item_ids}
        hits = [
            _hits(pool, found, ancestors([items[i][schema.ANCESTORS]])[0], labels, self._scale)
            for i, (pool, found) in zip(item_ids, ranked, strict=True)
        ]
        return Answer(hits, labels)

    def get(self, item_ids: Sequence[int], fields: Sequence[str]) -> dict[int, dict]:
        """The stored fields of items by id; KeyError naming the first id not there."""
        wanted = list(dict.fromkeys(int(i) for i in item_ids))
        found = self.client.get(
            self.name, ids=wanted, output_fields=list(fields), consistency_level="Session"
        )
        by_id = {int(entity[schema.ITEM_ID]): entity for entity in found}
        missing = [i for i in wanted if i not in by_id]
        if missing:
            raise KeyError(f"item id {missing[0]} is not in the index")
        return by_id


def _hits(pool, entities, query_anc, labels: dict[int, str], scale) -> list[Hit]:
    """A pool's first k as hits (Eq. 4's distances, the levels shared with the query item's
    ancestors where given), their label paths added to `labels`."""
    order = pool.order()
    ids, distances = pool.ids[order], pool.distances[order]
    numerator, denominator = scale
    scaled = distances * denominator / numerator  # one correctly rounded division
    levels = np.zeros(len(ids), np.int64)
    if query_anc is not None and len(ids):
        hit_anc = ancestors([entities[i][schema.ANCESTORS] for i in ids.tolist()])
        levels = shared_level(query_anc, hit_anc)
    labels.update({i: entities[i][schema.LABEL] for i in ids.tolist()})
    return [Hit(int(i), float(d), int(s)) for i, d, s in zip(ids, scaled, levels, strict=True)]


def stored_vector(stored: Any) -> bytes:
    """A binary vector as `get` returns it (bytes, or a list holding them)."""
    return bytes(stored[0] if isinstance(stored, list) else stored)


def ancestors(texts: list[str]) -> np.ndarray:
    """Stored ancestor rows (K,) or sets (K, S) as one (M, K) or (M, K, S) array, the sets
    padded with -1 to the widest."""
    parsed = [np.asarray(json.loads(text), np.int32) for text in texts]
    if all(a.ndim == 1 for a in parsed):
        return np.stack(parsed) if parsed else np.zeros((0, 1), np.int32)
    sets = [a.reshape(a.shape[0], -1) for a in parsed]
    width = max(a.shape[1] for a in sets)
    padded = [np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1) for a in sets]
    return np.stack(padded)
