"""The Milvus engine on Milvus Lite (a file, the embedded engine): a collection answers as the
in-process index does, hit for hit and ties included, and through the service items are added,
replaced and removed, seen by the next search, with bad input refused whole. The same against a
real Milvus server, from a trained fit: tests/integration/test_milvus_serving.py."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from shdh.core.hierarchy import LabelTree
from shdh.ranking.exact import pack_codes
from shdh.ranking.search_index import SearchIndex
from shdh.serving import create_app
from shdh.serving.collection_source import CollectionSource
from shdh.vectordb.collection_index import CollectionIndex
from shdh.vectordb.connection import connect
from shdh.vectordb.writer import write_collection
from tests.serving.server import (
    AUTH,
    LIMITS,
    N_BITS,
    TOKEN,
    PixelEncoder,
    PixelEncoderSource,
    b64,
    label_path,
    make_index,
    png,
    serving,
)

pytestmark = pytest.mark.integration  # the service on a loopback port, Milvus Lite's process
NAME = "toy_collection"
N_ITEMS = 3000  # random 16-bit codes with weights 3/2/1: every distance is shared by many


def toy_tree() -> LabelTree:
    """make_index's tree: the root, groups 0-1 (nodes 1-2), leaves 0-5 (nodes 3-8)."""
    names = ("root", "group0", "group1", *(f"leaf{i}" for i in range(6)))
    return LabelTree(names, (-1, 0, 0, 1, 1, 1, 2, 2, 2))


def write_toy(uri: str, index: SearchIndex) -> None:
    client = connect(uri)
    write_collection(
        client,
        uri,
        NAME,
        codes=index.packed,
        item_ids=index.item_ids,
        ancestors=np.asarray(index.ancestors),
        label_paths=[label_path(row) for row in np.asarray(index.ancestors)],
        segment_sizes=index.segment_sizes,
        weights=index.weights,
        record={
            **{k: index.record[k] for k in ("method", "dataset", "encoder")},
            "tree": {**toy_tree().to_dict()},
        },
    )


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("milvus-lite")
    index = SearchIndex.load(make_index(folder / "index", n=N_ITEMS))
    uri = str(folder / "lite" / "index.db")
    write_toy(uri, index)
    return {"uri": uri, "index": index, "folder": folder}


def hits_of(hits) -> list[list[tuple[int, float, int]]]:
    return [[(h.item_id, h.distance, h.shared_level) for h in row] for row in hits]


def test_the_collection_answers_as_the_in_process_index_ties_included(toy):
    index, rng = toy["index"], np.random.default_rng(5)
    collection = CollectionIndex(connect(toy["uri"]), toy["uri"], NAME)
    assert collection.n_items == N_ITEMS and collection.exact
    for k, n_queries in ((1, 500), (10, 500), (100, 200)):
        queries = pack_codes(rng.choice(np.array([-1, 1], np.int8), (n_queries, N_BITS)))
        got = collection.search_codes(queries, k)
        assert hits_of(got.hits) == hits_of(index.search_codes(queries, k)), k
    ids = index.item_ids[rng.choice(N_ITEMS, 300, replace=False)].tolist()
    got = collection.search_ids(ids, 20)
    assert hits_of(got.hits) == hits_of(index.search_ids(ids, 20))
    assert got.labels[ids[0]] == label_path(np.asarray(index.ancestors)[index.rows_of([ids[0]])[0]])
    with pytest.raises(KeyError, match="item id 5 is not in the index"):
        collection.search_ids([5], 3)


@pytest.fixture(scope="module")
def url(toy):
    source = CollectionSource(toy["uri"], collection=NAME)
    app = create_app(source, encoder=PixelEncoderSource(), token=TOKEN, limits=LIMITS)
    with serving(app) as base:
        yield base


def post(url: str, path: str, body: dict) -> requests.Response:
    return requests.post(f"{url}{path}", json=body, headers=AUTH, timeout=60)


def count(url: str) -> int:
    return requests.get(f"{url}/readyz", headers=AUTH, timeout=30).json()["version"]["n_items"]


def test_the_service_answers_from_the_collection(url, toy):
    version = requests.get(f"{url}/readyz", timeout=30).json()["version"]
    assert version["engine"] == "milvus" and version["bits"] == N_BITS
    index = toy["index"]
    codes = pack_codes(np.random.default_rng(8).choice(np.array([-1, 1], np.int8), (8, N_BITS)))
    answer = post(url, "/search/codes", {"codes": [c.tobytes().hex() for c in codes], "k": 30})
    assert answer.status_code == 200, answer.text
    expected = index.search_codes(codes, 30)
    got = [[(h["item_id"], h["distance"]) for h in r["hits"]] for r in answer.json()["results"]]
    assert got == [[(h.item_id, h.distance) for h in row] for row in expected]
    first = answer.json()["results"][0]["hits"][0]
    assert first["label_path"] == label_path(
        np.asarray(index.ancestors)[index.rows_of([first["item_id"]])[0]]
    )
    metrics = requests.get(f"{url}/metrics", headers=AUTH, timeout=30).text
    assert f"shdh_search_index_items {N_ITEMS}" in metrics
    assert "shdh_search_recall_at_100 1.0" in metrics


def test_items_are_added_replaced_and_removed_and_the_next_search_sees_it(url, toy):
    index = toy["index"]
    image = np.zeros((8, 8, 3), np.uint8)
    image[0, :5, :] = 255  # the pixel encoder's first 15 bits are +1, the 16th -1
    code = "".join("1" if b else "0" for b in [1] * 15 + [0])
    items = [
        {"item_id": 7, "label_path": "group1/leaf4", "code": f"{int(code, 2):04x}"},
        {"item_id": 8, "label_path": "group0/leaf1", "image": b64(png(image))},
    ]
    added = post(url, "/items", {"items": items})
    assert added.status_code == 200, added.text
    assert added.json()["added"] == [7, 8] and added.json()["version"]["n_items"] == N_ITEMS + 2
    expected_code = PixelEncoder().encode(image[None])
    found = post(url, "/search/ids", {"ids": [7, 8], "k": 5}).json()["results"]
    for result, item in zip(found, items, strict=True):
        mine = [h for h in result["hits"] if h["item_id"] == item["item_id"]]
        assert mine and mine[0]["distance"] == 0 and mine[0]["shared_level"] == 3
        assert result["label_path"] == item["label_path"]
    assert bytes.fromhex(items[0]["code"]) == expected_code.tobytes()  # the same code twice
    # The added items come after every indexed one in the tie order: the in-process ranking of
    # the database with them appended.
    grown = SearchIndex(
        np.concatenate([index.packed, expected_code, expected_code]),
        np.concatenate([index.item_ids, [7, 8]]).astype(np.int64),
        np.concatenate([np.asarray(index.ancestors), [[0, 2, 7], [0, 1, 4]]]).astype(np.int32),
        {**index.record, "n_items": N_ITEMS + 2},
    )
    query = {"codes": [items[0]["code"]], "k": 40}
    got = [
        (h["item_id"], h["distance"])
        for h in post(url, "/search/codes", query).json()["results"][0]["hits"]
    ]
    assert got == [(h.item_id, h.distance) for h in grown.search_codes(expected_code, 40)[0]]

    again = post(url, "/items", {"items": items[:1]})
    assert again.status_code == 409 and "item id 7 is already in the index" in again.text
    replaced = post(url, "/items", {"items": [{**items[0], "code": "0000"}], "replace": True})
    assert replaced.status_code == 200 and replaced.json()["replaced"] == [7]
    hit = post(url, "/search/ids", {"ids": [7], "k": 1}).json()["results"][0]
    removed = requests.delete(f"{url}/items/7", headers=AUTH, timeout=60)
    assert removed.status_code == 200 and removed.json()["removed"] == 7, removed.text
    assert hit["item_id"] == 7
    gone = post(url, "/search/codes", {"codes": ["0000"], "k": 50}).json()["results"][0]
    assert 7 not in [h["item_id"] for h in gone["hits"]]
    assert requests.delete(f"{url}/items/7", headers=AUTH, timeout=60).status_code == 404
    assert requests.delete(f"{url}/items/8", headers=AUTH, timeout=60).status_code == 200
    assert count(url) == N_ITEMS


@pytest.mark.parametrize(
    ("items", "status", "reason"),
    [
        (
            [{"item_id": 9, "label_path": "group0/leaf9", "code": "0000"}],
            422,
            "items[1].label_path: label path 'group0/leaf9' is not in the tree",
        ),
        ([{"item_id": 9, "label_path": "group0/leaf1", "code": "00"}], 422, "items[1].code"),
        ([{"item_id": 9, "label_path": "group0/leaf1"}], 422, "items[1]: give either code or"),
        ([{"item_id": 9, "label_path": "group0/leaf1", "image": "%%"}], 400, "items[1].image"),
        ([{"item_id": 6, "label_path": "group0/leaf1", "code": "0000"}], 422, "more than once"),
        ([{"item_id": 1000, "label_path": "group0/leaf1", "code": "0000"}], 409, "item id 1000"),
    ],
)
def test_a_bad_item_refuses_the_batch_and_nothing_is_written(url, items, status, reason):
    good = {"item_id": 6, "label_path": "group0/leaf1", "code": "ffff"}
    answer = post(url, "/items", {"items": [good, *items]})
    assert answer.status_code == status and reason in answer.text, answer.text
    assert count(url) == N_ITEMS
    missing = post(url, "/search/ids", {"ids": [6], "k": 1})
    assert missing.status_code == 404 and "item id 6 is not in the index" in missing.text


def test_writes_need_the_token_and_the_milvus_engine(url, tmp_path):
    body = {"items": [{"item_id": 9, "label_path": "group0/leaf1", "code": "0000"}]}
    assert requests.post(f"{url}/items", json=body, timeout=10).status_code == 401
    assert requests.delete(f"{url}/items/9", timeout=10).status_code == 401
    assert post(url, "/items", {"items": [body["items"][0]] * 9}).status_code == 413
    with serving(create_app(make_index(tmp_path / "index"), token=TOKEN)) as memory:
        refused = post(memory, "/items", body)
        assert refused.status_code == 409 and "--engine milvus" in refused.text
        gone = requests.delete(f"{memory}/items/1000", headers=AUTH, timeout=10)
        assert gone.status_code == 409


def test_the_service_finds_the_collection_the_index_step_named_for_the_encoder():
    """`shdh index --engine milvus` names the collection from the encoder's record, the service
    from the encoder it loaded: a registered version, or a fit's folder (no registry)."""
    from types import SimpleNamespace

    from shdh.vectordb.schema import collection_name

    source = CollectionSource("x.db")
    registered = SimpleNamespace(name="shdh-encoder", version="3", run_id="ab12", method="shdh")
    folder = SimpleNamespace(name=None, version=None, run_id=None, method="dpsh")
    for encoder, expected in ((registered, "shdh_shdh_encoder_v3_ab12"), (folder, None)):
        encoder.n_bits = 64
        record = {"name": encoder.name, "version": encoder.version, "run_id": encoder.run_id}
        assert source.name_for(encoder) == collection_name(record, encoder.method, 64)
        assert expected is None or source.name_for(encoder) == expected
    assert source.name_for(folder) == "shdh_dpsh_64_untracked"
    assert CollectionSource("x.db", collection="mine").name_for(None) == "mine"
    with pytest.raises(ValueError, match="without an encoder, name the collection"):
        source.name_for(None)
