"""The Milvus engine against a real Milvus server (the `milvus` wheel's standalone server, one for
the session: tests/integration/conftest.py): a smoke fit indexed by `shdh index --engine
milvus`, served by `shdh serve`'s app from the collection with the fit as its encoder, answers
as the in-process index of the same fit does, hit for hit, by code, by item and by image; items
added and removed through the API are seen by the next search and are still there, or still
gone, after the service restarts and after the Milvus server is killed and started again.

Every test of this file uses the one server: keep them here, so that `make test` (which hands
whole files to its workers) starts it once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import requests

from shdh.cli import main
from shdh.ranking.exact import pack_codes
from shdh.serving import HasherFolder, create_app
from shdh.serving.collection_source import CollectionSource
from shdh.steps.prepare import load_prepared
from shdh.vectordb.collection_index import CollectionIndex
from shdh.vectordb.connection import TOKEN_ENV, VectorStoreError, connect
from shdh.vectordb.writer import write_collection
from tests.milvus_server import TOKEN
from tests.serving.server import AUTH, b64, png, serving
from tests.serving.server import TOKEN as SERVICE_TOKEN

pytestmark = pytest.mark.integration
K = 20


@pytest.fixture(scope="module")
def fit(tmp_path_factory, milvus_server, empty_tracking_store):
    """SHDH at 16 bits, one epoch on tiny data (its own MLflow store), indexed twice by the
    command: in process (index/) and into the server's collection (collection/: its record)."""
    from tests.commands.test_steps import run_steps, smoke_params
    from tests.conftest import write_fashion_mnist_raw
    from tests.tracking_store import copy_store

    tmp = tmp_path_factory.mktemp("milvus-fit")
    store = copy_store(empty_tracking_store, tmp / "mlflow")  # no migration of a new store
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
        patch.setenv(TOKEN_ENV, TOKEN)
        raw = write_fashion_mnist_raw(tmp / "raw")
        params = smoke_params(tmp, raw, train={"methods": ["shdh"], "epochs": 1})
        run_steps(params, ["prepare"], ["tree"], ["smatrix"])
        run_steps(params, ["train", "--method", "shdh", "--bits", "16", "--no-progress"])
        model = tmp / "models" / "shdh" / "shdh-16"
        index = ["index", "--params", str(params), "--model-dir", str(model)]
        assert main(index) == 0
        milvus = [
            "--engine",
            "milvus",
            "--uri",
            milvus_server.uri,
            "--out",
            str(tmp / "collection"),
        ]
        assert main([*index, *milvus]) == 0
    ds, split = load_prepared(tmp / "prepared")
    return {"tmp": tmp, "model": model, "ids": ds.ids[split.db_idx], "ds": ds, "split": split}


def search(url: str, path: str, body: dict) -> list[list[tuple]]:
    answer = requests.post(f"{url}{path}", json=body, headers=AUTH, timeout=120)
    assert answer.status_code == 200, answer.text
    return [
        [(h["item_id"], h["distance"], h["shared_level"], h["label_path"]) for h in r["hits"]]
        for r in answer.json()["results"]
    ]


def collection_app(milvus_server, fit):
    source = CollectionSource(milvus_server.uri, token=TOKEN)
    return create_app(source, encoder=HasherFolder(fit["model"]), token=SERVICE_TOKEN)


def test_the_collection_is_named_for_the_fit_and_recorded(fit, milvus_server):
    record = json.loads((fit["tmp"] / "collection" / "collection.json").read_text())
    run_id = json.loads((fit["model"] / "mlflow_run.json").read_text())["run_id"]
    assert record["collection"] == f"shdh_shdh_16_{run_id}"
    assert record["uri"] == milvus_server.uri and record["n_items"] == len(fit["ids"])
    assert record["index_type"] == "BIN_FLAT" and record["engine"] == "milvus"
    # the server asks for a login: a wrong token is refused at once, and named
    with pytest.raises(VectorStoreError, match="the server refused the token .*auth check"):
        connect(milvus_server.uri, "root:not-the-password")


def test_answers_are_the_in_process_indexs_by_item_code_and_image(fit, milvus_server):
    ids = fit["ids"].tolist()
    codes = np.random.default_rng(3).choice(np.array([-1, 1], np.int8), (512, 16))
    hexes = [row.tobytes().hex() for row in pack_codes(codes)]
    ds, split = fit["ds"], fit["split"]
    images = [b64(png(np.asarray(ds.images[i]))) for i in split.db_idx[:6]]
    answers = {}
    for name, app in (
        (
            "memory",
            create_app(
                fit["tmp"] / "index",
                encoder=HasherFolder(fit["model"]),
                token=SERVICE_TOKEN,
                images=None,
            ),
        ),
        ("milvus", collection_app(milvus_server, fit)),
    ):
        with serving(app) as url:
            found = [
                search(url, "/search/ids", {"ids": ids[i : i + 64], "k": K})
                for i in range(0, len(ids), 64)
            ]
            found += [
                search(url, "/search/codes", {"codes": hexes[i : i + 64], "k": k})
                for i in range(0, len(hexes), 64)
                for k in (1, 10, 100)
            ]
            found.append(search(url, "/search/images", {"images": images, "k": K}))
            answers[name] = found
    memory, milvus = answers["memory"], answers["milvus"]
    # the in-process service has no --images: its hits carry no label paths, the collection's do
    strip = [[[hit[:3] for hit in row] for row in batch] for batch in milvus]
    assert strip == [[[hit[:3] for hit in row] for row in batch] for batch in memory]
    labels = dict(zip(ids, [str(x) for x in ds.labels[split.db_idx]], strict=True))
    assert all(hit[3] == labels[hit[0]] for batch in milvus for row in batch for hit in row)


def test_writes_are_seen_at_once_and_survive_restarts_of_the_service_and_of_milvus(
    fit, milvus_server
):
    ds, split = fit["ds"], fit["split"]
    query_image = np.asarray(ds.images[split.query_idx[0]])
    new = [
        {
            "item_id": 10**12,
            "label_path": str(ds.labels[split.query_idx[0]]),
            "image": b64(png(query_image)),
        },
        {"item_id": 10**12 + 1, "label_path": str(ds.labels[split.db_idx[0]]), "code": "0f0f"},
    ]
    removed = int(fit["ids"][5])

    def state(url: str) -> tuple:
        by_id = requests.post(
            f"{url}/search/ids", json={"ids": [removed], "k": 1}, headers=AUTH, timeout=60
        )
        found = search(url, "/search/ids", {"ids": [n["item_id"] for n in new], "k": 300})
        return by_id.status_code, [[hit[0] for hit in row] for row in found]

    with serving(collection_app(milvus_server, fit)) as url:
        added = requests.post(f"{url}/items", json={"items": new}, headers=AUTH, timeout=120)
        assert added.status_code == 200, added.text
        gone = requests.delete(f"{url}/items/{removed}", headers=AUTH, timeout=120)
        assert gone.status_code == 200, gone.text
        status, hits = state(url)
        assert status == 404  # the removed item is no query any more, and in no answer:
        assert all(removed not in row for row in hits)
        assert all(n["item_id"] in row for n, row in zip(new, hits, strict=True))
        image_hits = search(url, "/search/images", {"images": [new[0]["image"]], "k": 300})[0]
        assert 10**12 in [hit[0] for hit in image_hits]  # encoded as an image query is
        before = (status, hits)
    with serving(collection_app(milvus_server, fit)) as url:  # the service restarted
        assert state(url) == before
    milvus_server.stop(kill=True)  # a crash: what Milvus acknowledged is in its log
    milvus_server.start()
    with serving(collection_app(milvus_server, fit)) as url:
        assert state(url) == before


def test_the_users_job_makes_a_user_that_indexes_serves_and_writes(milvus_server, tmp_path):
    """The script of the Milvus overlay's Job milvus-users (k8s/components/milvus), run as its
    pod runs it, twice (it is idempotent): root's first password is replaced, and the stack's
    user may write, search and change a collection, but not administer users. Last in this
    file: root's password is put back at the end for nothing after it."""
    from tests.infra.manifests import find, render

    job = find(render("overlays/milvus"), "Job", "milvus-users")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    root_password, user_token = "rootpassword0123456789", "shdh_milvus:userpassword0123"
    env = {
        "PATH": os.environ["PATH"],
        "SHDH_MILVUS_URI": milvus_server.uri,
        "MILVUS_ROOT_PASSWORD": root_password,
        "MILVUS_TOKEN": user_token,
    }
    try:
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-c", container["args"][0]],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr[-3000:]
        with pytest.raises(VectorStoreError, match="refused the token"):
            connect(milvus_server.uri, TOKEN)  # root's first password no longer logs in
        client = connect(milvus_server.uri, user_token)
        codes = np.random.default_rng(0).choice(np.array([-1, 1], np.int8), (50, 16))
        write_collection(
            client,
            milvus_server.uri,
            "job_user_check",
            codes=codes,
            item_ids=np.arange(50),
            ancestors=np.zeros((50, 1), np.int32),
            label_paths=["a"] * 50,
            segment_sizes=[16],
            weights=[1.0],
            record={"method": "m", "dataset": "d", "encoder": {}, "tree": None},
        )
        collection = CollectionIndex(client, milvus_server.uri, "job_user_check")
        hits = collection.search_codes(pack_codes(codes[:1]), 1).hits
        assert hits[0][0].item_id == 0 and hits[0][0].distance == 0
        with pytest.raises(Exception, match="(?i)permission|privilege|denied"):
            client.create_user("another", "another-password-0123")
        client.drop_collection("job_user_check")
    finally:
        root = connect(milvus_server.uri, f"root:{root_password}")
        root.update_password("root", root_password, TOKEN.partition(":")[2])
