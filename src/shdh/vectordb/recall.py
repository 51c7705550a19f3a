"""How much of the exact top k an approximate (BIN_IVF_FLAT) collection's answers hold: the
recall the service reports in /metrics, measured at every load.

The exact answers come from the same collection searched over every list (nprobe = nlist is an
exhaustive scan, its tie closed by row as BIN_FLAT's is), so no second copy of the codes is
needed, at any size. The queries are the codes of the first rows: the split step shuffled the
database once, so they are a random sample of it.
"""

from __future__ import annotations

import numpy as np

from shdh.vectordb import schema
from shdh.vectordb.collection_index import CollectionIndex, stored_vector

RECALL_K = 100
SAMPLE = 100


def recall_at(index: CollectionIndex, k: int = RECALL_K, sample: int = SAMPLE) -> float:
    """The mean share of the exact top k (k at most the collection's size) that the served
    search returns, over `sample` items' codes; 1.0 for an exhaustive index."""
    if index.exact:
        return 1.0
    found = index.client.query(
        index.name,
        filter=f"{schema.ROW} < {int(sample)}",
        output_fields=[schema.CODE],
        limit=int(sample),
        consistency_level="Session",
    )
    queries = [stored_vector(entity[schema.CODE]) for entity in found]
    k = min(k, index.n_items)
    if not queries or k < 1:
        return 1.0
    served = index.rounds.rank(queries, k, [])
    exact = index.rounds.rank(queries, k, [], nprobe=index.rounds.nlist)
    shares = [
        len(np.intersect1d(a.ids[a.order()], b.ids[b.order()])) / k
        for (a, _), (b, _) in zip(served, exact, strict=True)
    ]
    return float(np.mean(shares))
