"""The Milvus engine's index: which collection the service answers from, opened anew on every
load and reload.

The collection is named for the encoder, as the index step named it (the registered model, its
version and the run; shdh.vectordb.schema.collection_name): when a reload resolves the alias to
a new version, the service moves to that version's collection, and an alias moved without
`shdh index --engine milvus` is refused (no such collection) while the old one keeps serving.
Without an encoder (code and item queries only) the service is given the collection's name.
With BIN_IVF_FLAT the load also measures the recall against exact (shdh.vectordb.recall).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectionSource:
    """A Milvus Lite file or a server's http(s):// URI (its token: $SHDH_MILVUS_TOKEN unless
    given), the collection (None: named for the encoder), the lists an IVF search visits, and
    how many items' codes the recall is measured on (0: not measured)."""

    uri: str
    token: str | None = None
    collection: str | None = None
    nprobe: int | None = None
    recall_sample: int = 100

    def describe(self) -> str:
        from shdh.vectordb.connection import describe

        return describe(self.uri, self.collection)

    def name_for(self, encoder: Any | None) -> str:
        """The collection to open: the one given, or the encoder's."""
        from shdh.vectordb.schema import collection_name

        if self.collection is not None:
            return self.collection
        if encoder is None:
            raise ValueError(
                f"{self.describe()}: without an encoder, name the collection (--collection)"
            )
        record = {
            "name": getattr(encoder, "name", None),
            "version": getattr(encoder, "version", None),
            "run_id": encoder.run_id,
        }
        return collection_name(record, encoder.method or "model", encoder.n_bits)

    def load(self, encoder: Any | None) -> tuple[Any, float | None]:
        """The collection's index (vectordb CollectionIndex) and, for an approximate one, its
        recall@100 against exact on `recall_sample` items."""
        from shdh.vectordb.collection_index import CollectionIndex
        from shdh.vectordb.connection import connect
        from shdh.vectordb.recall import recall_at

        name = self.name_for(encoder)
        index = CollectionIndex(connect(self.uri, self.token), self.uri, name, nprobe=self.nprobe)
        recall = None
        if not index.exact and self.recall_sample > 0:
            recall = recall_at(index, sample=self.recall_sample)
            nprobe = index.rounds.nprobe
            log.info("%s: recall@100 %.4f against exact (nprobe %d)", name, recall, nprobe)
        return index, recall
