"""What the page needs from the JSON API, over HTTP (real uvicorn on loopback): every hit's
rank and label path and the part of it shared with the query item, and the query item's own
label path (null where a query has none, or the service has no dataset); and /docs and /redoc,
which load every file they need from the service itself, with no internet."""

from __future__ import annotations

import re

import numpy as np
import pytest
import requests

from shdh.data.dataset import load_dataset
from shdh.serving import create_app
from shdh.serving.labels import ItemLabels, shared_path
from shdh.serving.thumbnails import DatasetImages
from tests.serving.server import (
    AUTH,
    N_BITS,
    TOKEN,
    PixelEncoderSource,
    b64,
    make_dataset,
    make_index,
    png,
    serving,
)

# Each starts the service on a loopback port (tests/conftest.py: SERVER_FIXTURES).
pytestmark = pytest.mark.integration

K = 60  # enough hits to meet every shared level of the toy tree


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return make_index(tmp_path_factory.mktemp("answers") / "index")


@pytest.fixture(scope="module")
def labels(index_dir, tmp_path_factory) -> tuple[DatasetImages, dict[int, str]]:
    dataset = make_dataset(tmp_path_factory.mktemp("answers") / "prepared", index_dir)
    stored = load_dataset(dataset / "dataset")
    return DatasetImages(dataset), dict(
        zip(stored.ids.tolist(), stored.labels.tolist(), strict=True)
    )


@pytest.fixture(scope="module")
def url(index_dir, labels):
    app = create_app(index_dir, encoder=PixelEncoderSource(), token=TOKEN, images=labels[0])
    with serving(app) as base:
        yield base


def post(url: str, path: str, **kwargs) -> requests.Response:
    headers = AUTH | kwargs.pop("headers", {})
    response = requests.post(f"{url}{path}", headers=headers, timeout=10, **kwargs)
    assert response.status_code == 200, response.text
    return response


def test_item_queries_give_ranks_label_paths_and_the_shared_part(url, labels):
    label_of = labels[1]
    answer = post(url, "/search/ids", json={"ids": [1000, 1070], "k": K}).json()
    for result, query in zip(answer["results"], (1000, 1070), strict=True):
        assert result["label_path"] == label_of[query]
        hits = result["hits"]
        assert [h["rank"] for h in hits] == list(range(1, K + 1))
        assert hits[0]["distance"] == 0
        assert [h["distance"] for h in hits] == sorted(h["distance"] for h in hits)
        parts = label_of[query].split("/")
        for hit in hits:
            assert hit["label_path"] == label_of[hit["item_id"]]
            assert hit["shared_path"] == "/".join(parts[: hit["shared_level"] - 1])
        shared = {h["shared_level"]: h["shared_path"] for h in hits}
        group, _ = parts
        assert shared == {3: label_of[query], 2: group, 1: ""}


def test_code_and_image_queries_label_their_hits_but_have_no_label_themselves(url, labels):
    label_of = labels[1]
    codes = np.random.default_rng(4).choice(np.array([-1, 1]), size=(2, N_BITS)).tolist()
    image = png(np.random.default_rng(5).integers(0, 256, (8, 8, 3), dtype=np.uint8))
    answers = [
        post(url, "/search/codes", json={"codes": codes, "k": 5}),
        post(url, "/search/images", json={"images": [b64(image)], "k": 5}),
        post(url, "/search/image?k=5", data=image, headers={"Content-Type": "image/png"}),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert [len(a.json()["results"]) for a in answers] == [2, 1, 1]
    for answer in answers:
        for result in answer.json()["results"]:
            assert result["item_id"] is None and result["label_path"] is None
            assert [h["rank"] for h in result["hits"]] == [1, 2, 3, 4, 5]
            for hit in result["hits"]:
                assert hit["label_path"] == label_of[hit["item_id"]]
                assert (hit["shared_level"], hit["shared_path"]) == (0, None)


def test_without_the_dataset_the_ranks_are_there_and_the_labels_null(index_dir):
    with serving(create_app(index_dir, token=TOKEN)) as base:
        answer = post(base, "/search/ids", json={"ids": [1000], "k": 4}).json()
        codes = post(base, "/search/codes", json={"codes": ["00ff"], "k": 4}).json()
    (result,) = answer["results"]
    assert result["label_path"] is None
    assert [h["rank"] for h in result["hits"]] == [1, 2, 3, 4]
    assert all(h["label_path"] is None and h["shared_path"] is None for h in result["hits"])
    assert [h["rank"] for h in codes["results"][0]["hits"]] == [1, 2, 3, 4]
    assert result["hits"][0]["shared_level"] == 3  # the level is the index's, labels or not


def test_the_shared_part_of_label_paths():
    assert shared_path("a/b/c", "a/b/d", 3) == "a/b"
    assert shared_path("a/b/c", "a/b/c", 2) == "a"  # no deeper than the shared level
    assert shared_path("a/b", "c/d", 1) == ""  # the root alone, which no part names
    # several labels: the longest prefix any pair of them shares
    assert shared_path("a/b/c|x/y/z", "q/r|x/y/w", 4) == "x/y"
    for query, hit, level in ((None, "a/b", 2), ("a/b", None, 2), ("a/b", "a/b", 0)):
        assert shared_path(query, hit, level) is None
    lookup = ItemLabels(np.array([7, 3, 5]), np.array(["x/a", "y/b", "z/c"]))
    assert lookup.paths([5, 4, 7, 2**62]) == ["z/c", None, "x/a", None]


def local_references(html: str) -> list[str]:
    """The URLs a docs page loads: attributes, and the schema Swagger UI is given."""
    return re.findall(r'(?:src|href)="([^"]*)"', html) + re.findall(r"url: '([^']*)'", html)


@pytest.mark.parametrize(
    ("page", "files"),
    [
        ("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png", "openapi.json"}),
        ("/redoc", {"redoc.standalone.js", "favicon.png"}),
    ],
)
def test_the_docs_load_only_files_the_service_serves_without_a_token(url, page, files):
    html = requests.get(f"{url}{page}", timeout=5)
    assert html.status_code == 200
    assert not re.search(r"https?://|//cdn|googleapis", html.text), html.text
    found = local_references(html.text)
    assert {ref.rsplit("/", 1)[-1] for ref in found} >= files
    kinds = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "json"}
    for ref in found:
        assert ref.startswith("/") and not ref.startswith("//"), ref
        served = requests.get(f"{url}{ref}", timeout=10)  # no token: a browser sends none
        assert served.status_code == 200, ref
        kind = next(v for k, v in kinds.items() if ref.endswith(k))
        assert kind in served.headers["content-type"], (ref, served.headers["content-type"])
        assert len(served.content) > 1000, ref
    if page == "/docs":
        script = requests.get(f"{url}/docs/assets/swagger-ui-bundle.js", timeout=10).text
        assert "SwaggerUIBundle" in script
        # Swagger UI 5 reads OpenAPI 3.1, which FastAPI writes (4 shows an error instead)
        assert requests.get(f"{url}/openapi.json", timeout=5).json()["openapi"].startswith("3.1")
        assert re.search(r'"5\.\d+\.\d+"', script)
        assert requests.get(f"{url}/docs/oauth2-redirect", timeout=5).status_code == 200


def test_the_docs_files_are_open_but_nothing_else_is(url):
    assert requests.get(f"{url}/docs/assets/nothing.js", timeout=5).status_code == 404
    assert requests.get(f"{url}/docs/other", timeout=5).status_code == 401
    assert requests.post(f"{url}/search/ids", json={"ids": [1000]}, timeout=5).status_code == 401
