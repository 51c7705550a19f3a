"""Retrieval metrics exactly as docs/method.md "Metrics" defines them: small pure functions,
then one `evaluate` that assembles them over chunks of queries.

Relevance r(q, x) and gain g(q, x) come from shdh.core.relevance, against the database's
distinct ancestor rows. `evaluate` ranks each query's whole database once (shdh.core.metric_kernel)
and takes every metric from that pass: the top n's relevance for ACG, DCG and NDCG through the
functions here, the WR curve, mAHP and mAP (over the whole list) in the pass itself, to the same
last digit as these functions and shdh.core.peer_metrics give on the stored ranking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shdh.core.level_weights import layer_weights
from shdh.core.peer_metrics import depth_name
from shdh.core.relevance import distinct_rows, relevance_and_gain, relevance_counts
from shdh.core.similarity import check_pair, finest_match
from shdh.ranking.exact import integer_weights, iter_query_chunks

# --- ranked-list metrics (rel, gains: (Q, n) in rank order; each returns per-query values) ------


def _as_lists(name: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] == 0:
        raise ValueError(f"{name} must be a 2-D (Q, n) array with n >= 1, got {values.shape}")
    return values


def acg(rel: np.ndarray) -> np.ndarray:
    """ACG@n = (1/n) sum_{i<=n} r_i."""
    return _as_lists("rel", rel).mean(axis=1)


def dcg(rel: np.ndarray) -> np.ndarray:
    """DCG@n = sum_{i<=n} r_i / log2(i + 1), linear gain, i from 1."""
    rel = _as_lists("rel", rel)
    return rel @ (1.0 / np.log2(np.arange(2, rel.shape[1] + 2)))


def ndcg(rel: np.ndarray, ideal_rel: np.ndarray) -> np.ndarray:
    """NDCG@n = DCG@n / IDCG@n, with IDCG the DCG of ideal_rel; a query whose IDCG is 0 scores 0
    (it has nothing relevant to find)."""
    rel, ideal_rel = _as_lists("rel", rel), _as_lists("ideal_rel", ideal_rel)
    if rel.shape != ideal_rel.shape:
        raise ValueError(f"rel has shape {rel.shape} but ideal_rel has {ideal_rel.shape}")
    ideal = dcg(ideal_rel)
    return np.divide(dcg(rel), ideal, out=np.zeros_like(ideal), where=ideal > 0)


def list_ideal(rel: np.ndarray) -> np.ndarray:
    """The retrieved top-n re-sorted by r descending: the ideal of the paper-compatible NDCG."""
    return -np.sort(-_as_lists("rel", rel), axis=1)


def database_ideal(rel_counts: np.ndarray, n: int) -> np.ndarray:
    """The top-n of the whole database sorted by r descending, (Q, n), built from rel_counts
    (Q, R+1), the number of database items with relevance 0..R for each query: position i holds
    the largest r whose count of items with relevance >= r exceeds i."""
    counts = np.asarray(rel_counts)
    if counts.ndim != 2 or counts.shape[1] == 0 or np.any(counts < 0):
        raise ValueError(f"rel_counts must be a non-negative 2-D (Q, R+1) array, got {counts}")
    at_least = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1][:, 1:]  # (Q, R): #items with r >= 1..R
    positions = np.arange(n)
    return (at_least[:, None, :] > positions[None, :, None]).sum(axis=2).astype(np.float64)


def weighted_recall_curve(gains_ranked: np.ndarray, total_gain: np.ndarray) -> np.ndarray:
    """WR@n for n = 1..len: cumsum(g) / sum over the whole database of g, (Q, n). A query whose
    total gain is 0 scores 0. The paper's Weighted Recall (its evaluation criterion, an
    unnumbered equation) with the gain g of METHOD.md in place of s, so that gains are >= 0."""
    gains = _as_lists("gains_ranked", gains_ranked)
    total = np.asarray(total_gain, dtype=np.float64)
    if total.shape != (gains.shape[0],):
        raise ValueError(f"total_gain must have shape ({gains.shape[0]},), got {total.shape}")
    cum = np.cumsum(gains, axis=1)
    return np.divide(cum, total[:, None], out=np.zeros_like(cum), where=total[:, None] > 0)


def weighted_recall_at(gains_ranked: np.ndarray, total_gain: np.ndarray, n: int) -> np.ndarray:
    """WR@n = sum_{i<=n} g_i / sum_x g(q, x), per query."""
    gains = _as_lists("gains_ranked", gains_ranked)
    if not 1 <= n <= gains.shape[1]:
        raise ValueError(f"n must be in 1..{gains.shape[1]} (the ranked list length), got {n}")
    return weighted_recall_curve(gains[:, :n], total_gain)[:, -1]


def weighted_recall_by_radius(
    distances: np.ndarray, gains: np.ndarray, total_gain: np.ndarray, max_radius: int
) -> np.ndarray:
    """(Q, max_radius + 1): for each integer radius, the share of a query's total gain held by
    items within that weighted Hamming distance (paper Fig. 3 a-f). distances and gains cover the
    whole database (Q, N), in integer distance units."""
    distances = np.asarray(distances)
    gains = np.asarray(gains, dtype=np.float64)
    if distances.ndim != 2 or distances.shape != gains.shape:
        raise ValueError(
            f"distances {distances.shape} and gains {gains.shape} must be the same 2-D shape"
        )
    n_q, width = distances.shape[0], max_radius + 1
    if distances.size and (distances.min() < 0 or distances.max() > max_radius):
        raise ValueError(f"distances must lie in 0..{max_radius}")
    total = np.asarray(total_gain, dtype=np.float64)
    if total.shape != (n_q,):
        raise ValueError(f"total_gain must have shape ({n_q},), got {total.shape}")
    bins = distances.astype(np.intp) + (np.arange(n_q, dtype=np.intp) * width)[:, None]
    mass = np.bincount(bins.ravel(), weights=gains.ravel(), minlength=n_q * width)
    cum = np.cumsum(mass.reshape(n_q, width), axis=1)
    return np.divide(cum, total[:, None], out=np.zeros_like(cum), where=total[:, None] > 0)


# --- the whole evaluation ---------------------------------------------------------------------


@dataclass
class Curves:
    """Weighted-recall curves for plots (means over queries).

    wr_at_n[i]: WR@(i+1), i.e. over the top 1..n_max items (paper Fig. 3 g-l).
    radius: integer distance units 0..max; radius_real: the same in units of the float segment
    weights; wr_at_radius: share of gain within each radius (paper Fig. 3 a-f)."""

    wr_at_n: np.ndarray
    radius: np.ndarray
    radius_real: np.ndarray
    wr_at_radius: np.ndarray


def evaluate(
    query_codes_packed: np.ndarray,
    db_codes_packed: np.ndarray,
    query_anc: np.ndarray,
    db_anc: np.ndarray,
    segment_sizes: Sequence[int],
    segment_weights: Sequence[float],
    *,
    n: int = 100,
    wr_ns: Sequence[int] = (100, 1000, 5000),
    curve_max: int = 5000,
    chunk: int | None = None,
    workers: int = 1,
    radius_queries: int | None = None,
    map_depths: Sequence[int | None] = (),
    mahp_depths: Sequence[int] = (),
) -> tuple[dict[str, float], Curves]:
    """All metrics of docs/method.md for packed codes, as means over queries.

    Ranking uses the segment weights (as exact proportional integers); the gain uses the layer
    weights u of Eq. 2 from K = ancestor columns: the two are independent on purpose, so plain
    Hamming baselines are scored with the same gain as SHDH. Lists are cut at N when the database
    is smaller than a requested depth. Returns ({"acg@n", "dcg@n", "ndcg@n" (database ideal),
    "ndcg_list@n" (list ideal, paper-compatible), "wr@m" for m in wr_ns}, Curves).

    radius_queries: average the WR-by-radius curve (a figure, not a table metric) over the first
    this many queries only (None: all). Queries come in a seeded random order, so they are a
    random sample; the curve counts every database item of every query it takes, and 1,000
    queries draw it to within a fraction of a percent.

    map_depths, mahp_depths: the peers' metrics to add (shdh.core.peer_metrics), "map@R" and
    "mahp@R" for each R (None: the whole database, "map@all", which ranks all of it)."""
    q_anc, x_anc = _check_ancestors(query_anc, db_anc, query_codes_packed, db_codes_packed)
    _check_depths(
        n=[n], curve_max=[curve_max], wr_ns=wr_ns, map_depths=map_depths, mahp_depths=mahp_depths
    )
    n_q, n_db = q_anc.shape[0], x_anc.shape[0]
    if n_q == 0 or n_db == 0:
        raise ValueError(f"need at least one query and one database item, got {n_q} and {n_db}")
    int_w = integer_weights(segment_weights)
    peers = _PeerSums(n_db, map_depths, mahp_depths)
    ranking = _Pass(q_anc, x_anc, int_w, segment_sizes, n, wr_ns, curve_max, radius_queries, peers)
    scores = _Sums(ranking)
    ranked = iter_query_chunks(  # checks codes and layout now; ranks lazily, chunk by chunk
        query_codes_packed,
        db_codes_packed,
        segment_sizes,
        int_w,
        ranking.rank,
        chunk=chunk,
        workers=workers,
    )
    for part in ranked:
        scores.add(part)
    return scores.means(real_per_unit=float(np.sum(segment_weights)) / float(int_w.sum()))


def _check_depths(**depths: Sequence[int | None]) -> None:
    """Every depth a positive int (None, the whole database, where map_depths has it)."""
    for name, values in depths.items():
        for value in values:
            if value is None and name == "map_depths":
                continue
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must hold positive ints, got {value!r}")


@dataclass(frozen=True)
class _Ranked:
    """One chunk of queries ranked (_Pass.rank): per distinct database row, each query's
    relevance (Qc, U) and per query its items by relevance (Qc, K); the rows of its first n items
    (Qc, n); the chunk's WR@1..curve_max summed over its queries; each query's WR@m, AHP@R and
    AP@R; and, for the queries the radius curve samples, their gains and totals and either
    their items counted by (distance, row) or (with many distinct rows) their distances."""

    rel_u: np.ndarray
    rel_counts: np.ndarray
    top_rows: np.ndarray
    curve: np.ndarray
    wr: np.ndarray
    ahp: np.ndarray
    ap: np.ndarray
    radius: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class _Pass:
    """The ranking pass over a chunk of queries (shdh.core.metric_kernel), in the pool's threads,
    and what it is asked for: the lists' depths, the database's distinct rows, the radius
    curve's sample."""

    def __init__(self, q_anc, x_anc, int_w, sizes, n, wr_ns, curve_max, radius_queries, peers):
        n_q, n_db = q_anc.shape[0], x_anc.shape[0]
        self.q_anc, self.n_q, self.n, self.peers = q_anc, n_q, n, peers
        self.u = layer_weights(q_anc.shape[1])
        self.n_top = min(n, n_db)
        self.wr_depths = {m: min(m, n_db) for m in wr_ns}
        self.curve_len = min(curve_max, n_db)
        self.max_radius = int((int_w * np.asarray(sizes, dtype=np.int64)).sum())
        self.rows_u, row_of, self.row_count = distinct_rows(x_anc)
        if len(self.rows_u) >= 1 << 30:  # the ranking pass keeps a row in 30 bits
            raise ValueError(f"db_anc has {len(self.rows_u)} distinct rows; at most 2**30 - 1")
        self.row_of, self.rows32 = row_of, row_of.astype(np.int32)
        self.n_rel = q_anc.shape[1]  # relevance takes values 0..K-1
        self.n_radius = n_q if radius_queries is None else min(n_q, int(radius_queries))
        if self.n_radius < 1:
            raise ValueError(f"radius_queries must be >= 1 or None, got {radius_queries!r}")
        self.depths = (np.array(list(self.wr_depths.values()), dtype=np.int64), *peers.depths)
        # The radius curve counts items by (distance, row) unless that outgrows the database.
        self.count_radius = (self.max_radius + 1) * len(self.rows_u) <= max(n_db, 1 << 12)

    def rank(self, start: int, q_words: np.ndarray, db_t: np.ndarray, layout) -> _Ranked:
        """Rank the database for the queries start.. (their uint64 words q_words), one pass each."""
        from shdh.core import metric_kernel  # numba: compiled on first use, not on import

        qa = self.q_anc[start : start + q_words.shape[0]]
        n_q, n_db, n_rows = qa.shape[0], db_t.shape[1], len(self.rows_u)
        rel_u, gain_u = relevance_and_gain(qa, self.rows_u, self.u)  # (Qc, U) each
        total = gain_u @ self.row_count
        rel_counts = relevance_counts(rel_u, self.row_count, self.n_rel)
        tables = (self.peers.relevant_rows(qa, self.rows_u), rel_u.astype(np.int64), gain_u)
        sampled = max(0, min(n_q, self.n_radius - start))  # the radius curve's queries here
        width = self.max_radius + 1
        radius = np.zeros((sampled if self.count_radius else 0, width * n_rows), dtype=np.int64)
        distances = np.empty((0 if self.count_radius else sampled, n_db), dtype=layout.dtype)
        out = (
            np.empty((n_q, self.n_top), dtype=np.int64),
            np.zeros(self.curve_len),
            *(np.empty((n_q, len(depths))) for depths in self.depths),
            radius,
            distances,
        )
        metric_kernel.rank_and_score(
            q_words,
            db_t,
            (layout.plane_masks, layout.plane_shifts, width),
            self.rows32,
            (*tables, total, rel_counts),
            self.depths,
            out,
        )
        top_rows, curve, wr, ahp, ap = out[:5]
        sample = (gain_u[:sampled], total[:sampled], radius, distances)
        return _Ranked(rel_u, rel_counts, top_rows, curve, wr, ahp, ap, sample)


class _Sums:
    """The metrics of each ranked chunk summed over its queries, in query order, then averaged
    (`means`): those of the top n (ACG, DCG, NDCG) with the functions above, the rest as the
    ranking pass made them."""

    def __init__(self, ranking: _Pass) -> None:
        self.ranking = ranking
        self.sums = {"acg": 0.0, "dcg": 0.0, "ndcg": 0.0, "ndcg_list": 0.0}
        self.wr_sums = dict.fromkeys(ranking.wr_depths, 0.0)
        self.curve_sum = np.zeros(ranking.curve_len)
        self.radius_sum = np.zeros(ranking.max_radius + 1)

    def add(self, part: _Ranked) -> None:
        """One ranked chunk's metrics, summed over its queries in order."""
        ranking = self.ranking
        queries = np.arange(part.top_rows.shape[0])[:, None]
        rel = part.rel_u[queries, part.top_rows]
        self.sums["acg"] += acg(rel).sum()
        self.sums["dcg"] += dcg(rel).sum()
        self.sums["ndcg"] += ndcg(rel, database_ideal(part.rel_counts, ranking.n_top)).sum()
        self.sums["ndcg_list"] += ndcg(rel, list_ideal(rel)).sum()
        for t, m in enumerate(self.wr_sums):
            self.wr_sums[m] += _column(part.wr, t).sum()
        self.curve_sum += part.curve
        gain_u, total, counts, distances = part.radius
        if counts.shape[0]:
            self.radius_sum += _radius_shares(counts, gain_u, total, ranking.max_radius + 1)
        elif distances.shape[0]:
            self.radius_sum += _recall_by_radius(
                distances, ranking.row_of, gain_u, total, ranking.max_radius
            )
        ranking.peers.add(part)

    def means(self, real_per_unit: float) -> tuple[dict[str, float], Curves]:
        ranking = self.ranking
        n, n_q = ranking.n, ranking.n_q
        result = {f"{name}@{n}": float(value / n_q) for name, value in self.sums.items()}
        result.update({f"wr@{m}": float(value / n_q) for m, value in self.wr_sums.items()})
        result.update({name: float(value / n_q) for name, value in ranking.peers.sums.items()})
        radius = np.arange(ranking.max_radius + 1)
        curves = Curves(
            wr_at_n=self.curve_sum / n_q,
            radius=radius,
            radius_real=radius * real_per_unit,
            wr_at_radius=self.radius_sum / ranking.n_radius,
        )
        return result, curves


class _PeerSums:
    """mAP@R (relevant: the query's finest label) and mAHP@R summed over queries
    (shdh.core.peer_metrics), beside _Sums' metrics and from the same ranking pass."""

    def __init__(self, n_db, map_depths, mahp_depths) -> None:
        self.map_depths = {f"map@{depth_name(d)}": min(d or n_db, n_db) for d in map_depths}
        self.mahp_depths = {f"mahp@{d}": min(d, n_db) for d in mahp_depths}
        self.sums = dict.fromkeys([*self.map_depths, *self.mahp_depths], 0.0)
        self.ap_depths = sorted(set(self.map_depths.values()))  # the kernel's, ascending
        mahp = list(self.mahp_depths.values())
        self.depths = (np.array(mahp, dtype=np.int64), np.array(self.ap_depths, dtype=np.int64))

    def relevant_rows(self, qa: np.ndarray, rows_u: np.ndarray) -> np.ndarray:
        """(Qc, U) bool: the distinct database rows that share each query's finest label (all
        False when no mAP is asked for)."""
        if not self.map_depths:
            return np.zeros((qa.shape[0], rows_u.shape[0]), dtype=bool)
        return finest_match(qa, rows_u)

    def add(self, part: _Ranked) -> None:
        for name, d in self.map_depths.items():
            self.sums[name] += _column(part.ap, self.ap_depths.index(d)).sum()
        for t, name in enumerate(self.mahp_depths):
            self.sums[name] += _column(part.ahp, t).sum()


def _column(values: np.ndarray, t: int) -> np.ndarray:
    """Column t of per-query values (Qc, m), contiguous: summed as the per-query arrays of the
    metric functions are."""
    return np.ascontiguousarray(values[:, t])


def _recall_by_radius(
    distances: np.ndarray,
    row_of: np.ndarray,
    gain_u: np.ndarray,
    total: np.ndarray,
    max_radius: int,
) -> np.ndarray:
    """Sum over a chunk's queries of `weighted_recall_by_radius`, (max_radius + 1,).

    Counts items per (distance, distinct ancestor row) and weights the counts by the row's gain:
    no (Qc, N) float array of gains. With many distinct rows that histogram would outgrow the
    database, so it falls back to weighting each item."""
    n_q, n_rows, width = distances.shape[0], gain_u.shape[1], max_radius + 1
    if width * n_rows > max(distances.shape[1], 1 << 12):
        gains = gain_u[:, row_of]
        return weighted_recall_by_radius(distances, gains, total, max_radius).sum(axis=0)
    # A few query rows at a time, with keys in the smallest integer type that holds them: the
    # (rows, N) key block then stays in cache, which makes this 5-10x faster than one pass of
    # int64 keys over the whole (Qc, N) chunk.
    cells = width * n_rows
    step = max(1, min(32, np.iinfo(np.uint16).max // cells))
    dtype = np.uint16 if cells * step <= np.iinfo(np.uint16).max else np.int64
    row_key = row_of.astype(dtype)
    counts = np.empty((n_q, cells), dtype=np.int64)
    for start in range(0, n_q, step):
        block = distances[start : start + step].astype(dtype)  # (r, N)
        block *= dtype(n_rows)
        block += row_key
        block += (np.arange(block.shape[0], dtype=dtype) * dtype(cells))[:, None]
        counts[start : start + step] = np.bincount(
            block.ravel(), minlength=block.shape[0] * cells
        ).reshape(-1, cells)
    return _radius_shares(counts, gain_u, total, width)


def _radius_shares(
    counts: np.ndarray, gain_u: np.ndarray, total: np.ndarray, width: int
) -> np.ndarray:
    """Sum over queries of the share of each one's total gain within each radius, (width,), from
    its items counted by (distance, distinct row), counts (Q, width * U)."""
    mass = counts.reshape(counts.shape[0], width, -1) @ gain_u[:, :, None]  # (Q, width, 1)
    cum = np.cumsum(mass[:, :, 0], axis=1)
    share = np.divide(cum, total[:, None], out=np.zeros_like(cum), where=total[:, None] > 0)
    return share.sum(axis=0)


def _check_ancestors(
    query_anc: np.ndarray, db_anc: np.ndarray, query_codes: np.ndarray, db_codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Both ancestor arrays checked (similarity.check_pair), a row per code, in one layout."""
    return check_pair(
        query_anc,
        db_anc,
        names=("query_anc", "db_anc"),
        rows=(np.shape(query_codes)[0], np.shape(db_codes)[0]),
        rows_of=("the query codes have", "the db codes have"),
    )
