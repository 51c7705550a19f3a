"""The search index: its hits are the offline ranking's (same order, same ties), its shared levels
follow the label tree, a malformed index folder is refused naming the file, the field and the
problem, and a write that dies half-way leaves the previous index whole."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from shdh.core.hierarchy import LabelTree
from shdh.core.level_weights import segment_sizes, segment_weights
from shdh.ranking.exact import integer_weights, pack_codes, rank_with_distances
from shdh.ranking.index_file import INDEX_ARRAYS, INDEX_RECORD, IndexFileError
from shdh.ranking.search_index import Hit, SearchIndex, write_index

# K = 3: root, 2 superclasses, 2 classes each.
TREE = LabelTree.from_nested({f"s{a}": {f"s{a}c{b}": {} for b in range(2)} for a in range(2)})
BITS = 12
SIZES = segment_sizes(BITS, 3)
WEIGHTS = [float(w) for w in segment_weights(3)]
ENCODER = {"name": "shdh-encoder", "version": "3", "alias": "champion", "run_id": "abc123"}
RECORD = {"method": "shdh", "dataset": "toy", "encoder": ENCODER}


def tied_codes(n: int, seed: int = 0) -> np.ndarray:
    """{-1, +1} codes that differ in only a few bits, so that many distances are equal."""
    rng = np.random.default_rng(seed)
    codes = np.ones((n, BITS), dtype=np.int8)
    flips = rng.integers(0, BITS, size=(n, 2))
    for row, cols in enumerate(flips):
        codes[row, cols] = -1
    return codes


def leaves(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return TREE.ancestors(rng.choice(TREE.leaves, size=n))


@pytest.fixture
def index_dir(tmp_path):
    codes = tied_codes(60)
    ids = 1000 + np.arange(60)[::-1]  # not the rows, so a hit's id must be looked up
    write_index(
        tmp_path / "index",
        codes=codes,
        item_ids=ids,
        ancestors=leaves(60),
        segment_sizes=SIZES,
        weights=WEIGHTS,
        record=RECORD,
    )
    return tmp_path / "index"


def test_the_same_codes_give_the_same_bytes_and_no_time_of_writing(index_dir, tmp_path):
    """The index step's folder is a DVC output: a time in it would change dvc.lock on every run
    of the same pipeline."""
    again = tmp_path / "again"
    write_index(
        again,
        codes=tied_codes(60),
        item_ids=1000 + np.arange(60)[::-1],
        ancestors=leaves(60),
        segment_sizes=SIZES,
        weights=WEIGHTS,
        record=RECORD,
    )
    for name in (INDEX_ARRAYS, INDEX_RECORD):
        assert (again / name).read_bytes() == (index_dir / name).read_bytes(), name
    record = json.loads((again / INDEX_RECORD).read_text())
    assert set(record) == {
        "format", "method", "bits", "dataset", "encoder", "n_items", "segment_sizes", "weights",
        "arrays_sha256",
    }  # fmt: skip


def offline(q_codes: np.ndarray, db_codes: np.ndarray, k: int):
    return rank_with_distances(
        pack_codes(q_codes), pack_codes(db_codes), SIZES, integer_weights(WEIGHTS), top_n=k
    )


@pytest.mark.parametrize("k", [1, 7, 60, 500])
def test_search_codes_is_the_offline_ranking_ties_included(index_dir, k):
    index = SearchIndex.load(index_dir)
    db = tied_codes(60)
    queries = tied_codes(9, seed=5)
    rows, dist = offline(queries, db, k)
    all_dist = offline(queries, db, 60)[1]
    assert len(set(all_dist[0].tolist())) < 10  # 60 items at few distances: many ties to break
    for form in (queries, (queries > 0).astype(np.uint8), pack_codes(queries)):
        hits = index.search_codes(form, k)
        assert [[h.item_id for h in row] for row in hits] == (1000 + 59 - rows).tolist()
        scale = 3  # K(K-1)/2: integer distances are u-weighted distances times 3 (Eq. 2)
        assert [[h.distance for h in row] for row in hits] == (dist / scale).tolist()
        assert all(h.shared_level == 0 for row in hits for h in row)


def test_distance_is_the_float_weighted_hamming(index_dir):
    index = SearchIndex.load(index_dir)
    db, query = tied_codes(60), tied_codes(1, seed=9)
    hit = index.search_codes(query, 1)[0][0]
    row = 1059 - hit.item_id
    differ = db[row] != query[0]
    weight_of_bit = np.repeat(WEIGHTS, SIZES)
    assert hit.distance == pytest.approx(float(weight_of_bit[differ].sum()), abs=1e-12)


def test_search_ids_queries_with_the_items_own_code(index_dir):
    index = SearchIndex.load(index_dir)
    db, anc = tied_codes(60), leaves(60)
    query_rows = np.array([0, 17, 59])
    hits = index.search_ids((1059 - query_rows).tolist(), 10)
    rows, _ = offline(db[query_rows], db, 10)
    assert [[h.item_id for h in row] for row in hits] == (1059 - rows).tolist()
    for q, found in zip(query_rows, hits, strict=True):
        for hit in found:
            other = 1059 - hit.item_id
            same = (anc[q] == anc[other]).sum()  # nested: a shared level implies those above
            assert hit.shared_level == same


def test_shared_level_on_a_small_tree(tmp_path):
    nodes = [TREE.node_id(n) for n in ("s0c0", "s0c0", "s0c1", "s1c0")]
    codes = np.ones((4, BITS), dtype=np.int8)
    write_index(
        tmp_path / "i",
        codes=codes,
        item_ids=[0, 1, 2, 3],
        ancestors=TREE.ancestors(nodes),
        segment_sizes=SIZES,
        weights=WEIGHTS,
        record=RECORD,
    )
    hits = SearchIndex.load(tmp_path / "i").search_ids([0], 4)[0]
    assert hits == [Hit(0, 0.0, 3), Hit(1, 0.0, 3), Hit(2, 0.0, 2), Hit(3, 0.0, 1)]


def test_shared_level_of_multi_label_ancestor_sets(tmp_path):
    """(N, K, M) sets, -1 padded: the deepest level at which any of the labels meet."""
    node = TREE.node_id
    sets = np.full((3, 3, 2), -1, dtype=np.int32)
    sets[0, :, 0] = TREE.ancestor_row(node("s0c0"))
    sets[0, :, 1] = TREE.ancestor_row(node("s1c1"))  # two labels, one in each superclass
    sets[1, :, 0] = TREE.ancestor_row(node("s1c1"))
    sets[2, :, 0] = TREE.ancestor_row(node("s1c0"))
    write_index(
        tmp_path / "i",
        codes=np.ones((3, BITS), dtype=np.int8),
        item_ids=[0, 1, 2],
        ancestors=sets,
        segment_sizes=SIZES,
        weights=WEIGHTS,
        record=RECORD,
    )
    hits = SearchIndex.load(tmp_path / "i").search_ids([2], 3)[0]
    assert [h.shared_level for h in hits] == [2, 2, 3]  # items 0 and 1 share s1 with item 2


def test_unknown_id_is_a_key_error_naming_it(index_dir):
    with pytest.raises(KeyError, match="item id 5 is not in the index"):
        SearchIndex.load(index_dir).search_ids([1000, 5], 3)


def test_query_codes_of_the_wrong_width_are_refused(index_dir):
    index = SearchIndex.load(index_dir)
    with pytest.raises(ValueError, match="13 columns; the index holds 12-bit codes"):
        index.search_codes(np.ones((1, 13)), 3)
    with pytest.raises(ValueError, match="mix 0 and -1"):
        index.search_codes(np.array([[0, -1] + [1] * 10]), 3)
    with pytest.raises(ValueError, match="k must be a positive int"):
        index.search_codes(np.ones((1, 12)), 0)


def test_the_record_names_the_encoder(index_dir):
    record = SearchIndex.load(index_dir).record
    assert record["encoder"] == ENCODER
    assert (record["bits"], record["n_items"], record["segment_sizes"]) == (BITS, 60, SIZES)
    assert json.loads((index_dir / INDEX_RECORD).read_text()) == record


def _rewrite_arrays(folder, **changes):
    with np.load(folder / INDEX_ARRAYS) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays.update(changes)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(folder / INDEX_ARRAYS, **arrays)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"item_ids": None}, "index.npz: array 'item_ids' is missing"),
        (
            {"packed": np.zeros((60, 2), np.int64)},
            "array 'packed' must be 2-D uint8, got 2-D int64",
        ),
        ({"packed": np.zeros((60, 1), np.uint8)}, "'packed' has 1 bytes per code, but 12 bits"),
        (
            {"ancestors": np.zeros((59, 3), np.int32)},
            "must have one row per item, got 60, 60 and 59",
        ),
        (
            {
                "item_ids": np.zeros(60, np.int64),
                "sorted_ids": np.zeros(60, np.int64),
                "id_order": np.arange(60),
            },
            "index.npz: array 'item_ids' must be distinct; id 0",
        ),
        (
            {"sorted_ids": np.arange(60)[::-1].copy()},
            "index.npz: array 'sorted_ids' is not in ascending order",
        ),
        (
            {"id_order": np.arange(59)},
            "array 'id_order' must be 1-D int64 with one entry per item",
        ),
    ],
)
def test_bad_arrays_are_refused_naming_file_and_array(index_dir, change, message):
    _rewrite_arrays(index_dir, **change)
    with pytest.raises(IndexFileError, match=message):
        SearchIndex.load(index_dir)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dataset", None, "index.json: field 'dataset' is missing"),
        (
            "encoder",
            {"name": "x", "version": "1", "alias": None},
            "field 'encoder.run_id' is missing",
        ),
        ("n_items", 61, "index.json: field 'n_items' is 61 but the arrays hold 60"),
        ("weights", [0.5], "field 'weights' must hold one number per segment"),
        ("format", "other/1", "field 'format' is 'other/1'"),
    ],
)
def test_bad_records_are_refused_naming_file_and_field(index_dir, field, value, message):
    record = json.loads((index_dir / INDEX_RECORD).read_text())
    if value is None:
        del record[field]
    else:
        record[field] = value
    (index_dir / INDEX_RECORD).write_text(json.dumps(record))
    with pytest.raises(IndexFileError, match=message):
        SearchIndex.load(index_dir)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(IndexFileError, match="index.json: no such file"):
        SearchIndex.load(tmp_path)


def test_write_refuses_a_record_without_the_encoder(tmp_path):
    with pytest.raises(IndexFileError, match="field 'encoder' is missing"):
        write_index(
            tmp_path / "i",
            codes=tied_codes(3),
            item_ids=[1, 2, 3],
            ancestors=leaves(3),
            segment_sizes=SIZES,
            weights=WEIGHTS,
            record={"method": "shdh", "dataset": "toy"},
        )
    assert not (tmp_path / "i").exists()


def test_an_interrupted_write_leaves_the_previous_index(index_dir, monkeypatch):
    before = SearchIndex.load(index_dir).search_codes(tied_codes(3, seed=2), 5)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", dies)
    with pytest.raises(KeyboardInterrupt):
        write_index(
            index_dir,
            codes=tied_codes(5),
            item_ids=np.arange(5),
            ancestors=leaves(5),
            segment_sizes=SIZES,
            weights=WEIGHTS,
            record=RECORD,
        )
    monkeypatch.undo()
    assert SearchIndex.load(index_dir).search_codes(tied_codes(3, seed=2), 5) == before
    assert sorted(p.name for p in index_dir.parent.iterdir()) == ["index"]


def test_arrays_and_a_record_of_two_indexes_are_refused_as_a_pair(index_dir, tmp_path):
    """Copied one file after the other (an object store has no folder rename), a reader that
    comes between finds another index's codes under this record: it refuses the pair, naming
    the field that ties them, rather than serve new codes under the old encoder's name."""
    other = write_index(
        tmp_path / "other",
        codes=-tied_codes(60, seed=5),
        item_ids=1000 + np.arange(60)[::-1],
        ancestors=leaves(60),
        segment_sizes=SIZES,
        weights=WEIGHTS,
        record={**RECORD, "encoder": {**ENCODER, "version": "4"}},
    )
    (index_dir / INDEX_ARRAYS).write_bytes((other / INDEX_ARRAYS).read_bytes())
    with pytest.raises(IndexFileError, match=r"index\.json: field 'arrays_sha256' is not the"):
        SearchIndex.load(index_dir)
    assert SearchIndex.load(other).record["encoder"]["version"] == "4"


def test_only_the_codes_and_narrowed_ids_are_read_into_memory(index_dir):
    index = SearchIndex.load(index_dir)
    assert not isinstance(index.packed, np.memmap)
    assert not isinstance(index.item_ids, np.memmap) and index.item_ids.dtype == np.int32
    for mapped in (index.ancestors, index._sorted_ids, index._id_order):
        assert isinstance(mapped, np.memmap)
    hits = index.search_ids([1000, 1059], 5)
    assert [h[0].item_id for h in hits] == [1000, 1059]


def test_a_format_1_index_is_still_read(index_dir):
    """Format 1 had no id lookup in its arrays: it is built at load, with the same answers."""
    current = SearchIndex.load(index_dir)
    codes = tied_codes(60)[:4]
    want = current.search_codes(codes, 9), current.search_ids([1003, 1040], 9)
    del current  # its arrays map the file rewritten below
    with np.load(index_dir / INDEX_ARRAYS) as npz:
        old = {name: npz[name] for name in ("packed", "item_ids", "ancestors")}
    np.savez(index_dir / INDEX_ARRAYS, **old)
    record = json.loads((index_dir / INDEX_RECORD).read_text())
    record["format"] = "shdh-search-index/1"
    record["arrays_sha256"] = hashlib.sha256((index_dir / INDEX_ARRAYS).read_bytes()).hexdigest()
    (index_dir / INDEX_RECORD).write_text(json.dumps(record))
    index = SearchIndex.load(index_dir)
    assert (index.search_codes(codes, 9), index.search_ids([1003, 1040], 9)) == want
