"""The search service over HTTP (real uvicorn on loopback): its answers equal the offline
ranking, ties included; readiness; the token; the limits, a streamed (chunked) body's
included; images decoded as the pipeline decodes them; and a reload under load that drops
nothing."""

from __future__ import annotations

import http.client
import io
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import numpy as np
import pytest
import requests
from PIL import Image

from shdh.data.dataset import load_dataset
from shdh.data.images import ImageSpec, decode_image
from shdh.ranking.exact import integer_weights, pack_codes, rank_with_distances
from shdh.ranking.search_index import SearchIndex
from shdh.serving import Limits, create_app
from shdh.serving.thumbnails import DatasetImages
from tests.serving.server import (
    AUTH,
    LIMITS,
    N_BITS,
    SEGMENTS,
    TOKEN,
    WEIGHTS,
    PixelEncoder,
    PixelEncoderSource,
    b64,
    make_dataset,
    make_index,
    png,
    serving,
    wait_until,
)

# Each starts the service on a loopback port (tests/conftest.py: SERVER_FIXTURES).
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return make_index(tmp_path_factory.mktemp("serving") / "index")


@pytest.fixture(scope="module")
def url(index_dir):
    app = create_app(index_dir, encoder=PixelEncoderSource(), token=TOKEN, limits=LIMITS)
    with serving(app) as base:
        yield base


def post(url: str, path: str, **kwargs) -> requests.Response:
    return requests.post(
        f"{url}{path}", headers=AUTH | kwargs.pop("headers", {}), timeout=10, **kwargs
    )


def offline(index_dir, q_packed: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
    """(item id, Eq. 4 distance) of the offline ranking, the distance summed in floats."""
    index = SearchIndex.load(index_dir)
    rows, _ = rank_with_distances(
        q_packed, index.packed, SEGMENTS, integer_weights(WEIGHTS), top_n=k
    )
    q_bits = np.unpackbits(q_packed, axis=1, count=N_BITS)
    db_bits = np.unpackbits(index.packed, axis=1, count=N_BITS)
    segment = np.repeat(np.arange(len(SEGMENTS)), SEGMENTS)
    answers = []
    for q, row in zip(q_bits, rows, strict=True):
        differ = q[None, :] != db_bits[row]
        dist = sum(w * differ[:, segment == s].sum(axis=1) for s, w in enumerate(WEIGHTS))
        answers.append(list(zip(index.item_ids[row].tolist(), dist.tolist(), strict=True)))
    return answers


def served(response: requests.Response) -> list[list[tuple[int, float]]]:
    assert response.status_code == 200, response.text
    return [[(h["item_id"], h["distance"]) for h in r["hits"]] for r in response.json()["results"]]


def test_code_queries_equal_the_offline_ranking_ties_included(url, index_dir):
    rng = np.random.default_rng(5)
    codes = rng.choice(np.array([-1, 1], np.int8), size=(6, N_BITS))
    packed = pack_codes(codes)
    for k in (1, 7, 50):
        expected = offline(index_dir, packed, k)
        as_pm1 = post(url, "/search/codes", json={"codes": codes.tolist(), "k": k})
        as_01 = post(url, "/search/codes", json={"codes": (codes > 0).astype(int).tolist(), "k": k})
        as_hex = post(
            url, "/search/codes", json={"codes": [r.tobytes().hex() for r in packed], "k": k}
        )
        assert served(as_pm1) == served(as_01) == served(as_hex) == expected
    distances = [d for _, d in expected[0]]
    assert len(set(distances)) < len(distances)  # the order was tested through real ties
    assert all(h["shared_level"] == 0 for h in as_hex.json()["results"][0]["hits"])


def test_item_queries_rank_the_items_code_and_give_the_deepest_shared_level(url, index_dir):
    index = SearchIndex.load(index_dir)
    ids = index.item_ids[[0, 17, 299]].tolist()
    response = post(url, "/search/ids", json={"ids": ids, "k": 20})
    assert served(response) == offline(index_dir, index.packed[[0, 17, 299]], 20)
    for result, row in zip(response.json()["results"], (0, 17, 299), strict=True):
        assert result["item_id"] == index.item_ids[row]
        for hit in result["hits"]:
            hit_row = int(np.flatnonzero(index.item_ids == hit["item_id"])[0])
            same = index.ancestors[row] == index.ancestors[hit_row]
            assert hit["shared_level"] == int(np.flatnonzero(same)[-1]) + 1
    missing = post(url, "/search/ids", json={"ids": [ids[0], 3], "k": 5})
    assert missing.status_code == 404 and "item id 3" in missing.json()["detail"]


def test_image_queries_are_decoded_as_the_pipeline_decodes_images(url, index_dir, tmp_path):
    rng = np.random.default_rng(9)
    photos = [rng.integers(0, 256, (20, 13, 3), dtype=np.uint8) for _ in range(3)]
    files = [png(photos[0]), png(photos[1], "JPEG"), png(photos[2])]
    for i, data in enumerate(files):
        (tmp_path / f"q{i}").write_bytes(data)
    arrays = np.stack([decode_image(tmp_path / f"q{i}", ImageSpec(8, 8, True)) for i in range(3)])
    expected = offline(index_dir, PixelEncoder().encode(arrays), 10)
    one = post(url, "/search/image?k=10", data=files[1], headers={"Content-Type": "image/jpeg"})
    batch = post(url, "/search/images", json={"images": [b64(f) for f in files], "k": 10})
    assert served(one) == expected[1:2]
    assert served(batch) == expected


def test_readiness_waits_for_the_index_and_the_encoder(index_dir, tmp_path):
    gate = threading.Event()
    app = create_app(index_dir, encoder=PixelEncoderSource(gate), token=TOKEN, limits=LIMITS)
    with serving(app, ready=False) as base:
        assert requests.get(f"{base}/healthz", timeout=5).status_code == 200
        loading = requests.get(f"{base}/readyz", headers=AUTH, timeout=5)
        assert loading.status_code == 503 and "loading" in loading.json()["detail"]
        assert post(base, "/search/ids", json={"ids": [1000]}).status_code == 503
        gate.set()
        for _ in range(200):
            ready = requests.get(f"{base}/readyz", timeout=5)
            if ready.ok:
                break
            threading.Event().wait(0.05)
        assert ready.json()["version"]["image_shape"] == [8, 8, 3]
    broken = create_app(tmp_path / "none", encoder=PixelEncoderSource(), token=TOKEN)
    with serving(broken, ready=False) as base:
        for _ in range(200):
            failed = requests.get(f"{base}/readyz", headers=AUTH, timeout=5).json()["detail"]
            if "failed" in failed:
                break
            threading.Event().wait(0.05)
        # the reason names the index's folder: only a caller with the token reads it
        assert failed.startswith("not ready: loading the index and the encoder failed: ")
        assert str(tmp_path / "none") in failed
        # a query is told the same, not that something is still loading
        query = post(base, "/search/ids", json={"ids": [1000]})
        assert query.status_code == 503 and query.json()["detail"] == failed
        hidden = requests.get(f"{base}/readyz", timeout=5)
        assert hidden.status_code == 503
        assert hidden.json() == {"detail": "not ready: send the bearer token for the reason"}
        wrong = {"Authorization": "Bearer not-the-token-0123456789"}
        assert "none" not in requests.get(f"{base}/readyz", headers=wrong, timeout=5).text
        assert "index.json: no such file" in failed


def test_every_route_but_the_probes_needs_the_token(url):
    bodies = {"/search/ids": {"ids": [1000]}, "/search/codes": "{bad json", "/nowhere": {}}
    for path, body in bodies.items():
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            refused = requests.post(f"{url}{path}", data=str(body), headers=headers, timeout=5)
            assert refused.status_code == 401
            assert refused.json() == {"detail": "unauthorized"}
            assert refused.headers["www-authenticate"] == "Bearer"
    for path in ("/healthz", "/readyz", "/docs", "/openapi.json", "/"):
        assert requests.get(f"{url}{path}", timeout=5).status_code == 200
    assert "/search/image" in requests.get(f"{url}/openapi.json", timeout=5).json()["paths"]


@pytest.mark.parametrize(
    ("path", "kwargs", "status", "reason"),
    [
        ("/search/ids", {"json": {"ids": [1000], "k": 51}}, 422, "k must be between 1 and 50"),
        ("/search/ids", {"json": {"ids": [1000], "k": 0}}, 422, "k must be between"),
        ("/search/ids", {"json": {"ids": [1000] * 9}}, 413, "over the batch limit of 8"),
        ("/search/ids", {"data": b"x" * (2 << 20)}, 413, "over the limit of 1048576 bytes"),
        ("/search/codes", {"json": {"codes": ["ff"]}}, 422, "codes[0]"),
        ("/search/codes", {"json": {"codes": [[1, 0, -1] + [1] * 13]}}, 422, "mix 0 and -1"),
        ("/search/codes", {"json": {"codes": ["zz"]}}, 422, "not a hex string"),
        ("/search/images", {"json": {"images": ["!!"]}}, 400, "images[0]: not valid base64"),
    ],
)
def test_requests_over_the_limits_or_malformed_are_refused_with_the_reason(
    url, path, kwargs, status, reason
):
    response = post(url, path, **kwargs)
    assert response.status_code == status, response.text
    assert reason in response.json()["detail"]


def test_bad_images_are_refused_with_the_reason(url):
    pixels = np.zeros((300, 10, 3), np.uint8)
    cases = [
        (png(pixels), "image/png", 413, "image: 10x300 pixels is over the limit"),
        (png(pixels[:20])[:-30], "image/png", 400, "image: cannot decode image"),
        (
            b"not an image",
            "image/png",
            400,
            "image: the upload is not a PNG or JPEG image: cannot identify image data (12 bytes)",
        ),
        (png(pixels[:20], "GIF"), "image/png", 415, "image: GIF image; send PNG or JPEG"),
        (png(pixels[:20]), "image/gif", 415, "Content-Type image/gif"),
    ]
    for data, kind, status, reason in cases:
        response = post(url, "/search/image", data=data, headers={"Content-Type": kind})
        assert response.status_code == status, response.text
        assert response.json()["detail"].startswith(reason), response.text
        assert "object at 0x" not in response.text


def test_text_sent_as_an_image_is_refused_naming_the_upload_not_a_python_object(url):
    """Pillow names bytes it cannot identify by their repr, an object address."""
    text = b"hello, this is a text file\n"
    one = post(url, "/search/image", data=text, headers={"Content-Type": "image/png"})
    batch = post(
        url, "/search/images", json={"images": [b64(png(np.zeros((8, 8, 3), "u1"))), b64(text)]}
    )
    assert (one.status_code, batch.status_code) == (400, 400)
    assert one.json()["detail"] == (
        "image: the upload is not a PNG or JPEG image: cannot identify image data (27 bytes)"
    )
    assert batch.json()["detail"].startswith(
        "images[1]: the upload is not a PNG or JPEG image: cannot identify image data"
    )
    assert "object at" not in one.text + batch.text


@pytest.mark.parametrize("item", [2**70, 2**63, -(2**63) - 1])
def test_an_id_outside_int64_is_out_of_range_naming_the_field_and_the_range(url, item):
    """Not "not an integer", and 2**63 is not taken for -2**63 (which wraps around)."""
    response = post(url, "/search/ids", json={"ids": [1000, item], "k": 3})
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "ids", "1"]
    assert error["msg"] == (
        f"item id {item} is out of range: ids are 64-bit signed integers, "
        "from -9223372036854775808 to 9223372036854775807"
    )
    assert post(url, "/search/ids", json={"ids": [-(2**63)], "k": 3}).status_code == 404


def post_chunked(url: str, path: str, content_type: str, prefix: bytes, total: int):
    """POST a body of `total` bytes (`prefix`, then filler) with Transfer-Encoding: chunked and
    no Content-Length, over a plain socket; (status, JSON body) of the answer. Sending stops
    early if the server stops reading: its answer is still read."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=60) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {address.netloc}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: {content_type}\r\n"
            "Transfer-Encoding: chunked\r\n\r\n"
        )
        block = b"A" * (1 << 16)
        try:
            sock.sendall(head.encode() + b"%x\r\n%s\r\n" % (len(prefix), prefix))
            for _ in range((total - len(prefix)) // len(block)):
                sock.sendall(b"%x\r\n%s\r\n" % (len(block), block))
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, json.loads(answer.read())


@pytest.fixture(scope="module")
def default_limits_url(index_dir):
    app = create_app(index_dir, encoder=PixelEncoderSource(), token=TOKEN)
    with serving(app) as base:
        yield base


@pytest.mark.parametrize(
    ("path", "content_type", "prefix"),
    [
        ("/search/ids", "application/json", b'{"ids": [1000, '),
        ("/search/images", "application/json", b'{"images": ["'),
        ("/search/image", "image/png", b"\x89PNG\r\n\x1a\n"),
        ("/search/codes", "application/json", b'{"codes": ["'),
    ],
)
def test_a_50_mb_chunked_body_is_refused_413_naming_the_limit(
    default_limits_url, path, content_type, prefix
):
    """With no Content-Length the limit is met while the body streams in; FastAPI's body
    parsing, which answered such a cut-off body with a 400, does not get to answer."""
    status, body = post_chunked(default_limits_url, path, content_type, prefix, 50 << 20)
    assert status == 413, body
    limit = Limits().max_body_bytes
    assert body == {"detail": f"request body over the limit of {limit} bytes (--max-body-bytes)"}
    assert requests.get(f"{default_limits_url}/healthz", timeout=5).ok


def test_a_reload_under_load_drops_nothing_and_each_answer_is_one_version(tmp_path):
    folder = tmp_path / "index"
    make_index(folder, seed=0)
    versions = {
        0: SearchIndex.load(folder),
        1: SearchIndex.load(make_index(tmp_path / "b", seed=1)),
    }
    query = {"ids": [1000, 1070], "k": 5}
    expected = {
        v: offline(folder if v == 0 else tmp_path / "b", index.packed[[0, 10]], 5)
        for v, index in versions.items()
    }
    app = create_app(folder, encoder=PixelEncoderSource(), token=TOKEN, limits=LIMITS)
    stop, answers = threading.Event(), []

    def client(base: str) -> None:
        with requests.Session() as session:
            while not stop.is_set():
                answers.append(
                    session.post(f"{base}/search/ids", json=query, headers=AUTH, timeout=10)
                )

    with serving(app) as base, ThreadPoolExecutor(4) as pool:
        clients = [pool.submit(client, base) for _ in range(4)]
        for generation in range(2, 9):
            wanted = len(answers) + 8
            wait_until(lambda wanted=wanted: len(answers) >= wanted, "answers between reloads")
            if generation == 8:
                break
            make_index(folder, seed=(generation - 1) % 2)  # generation g holds seed (g-1) % 2
            reloaded = post(base, "/admin/reload")
            assert reloaded.json()["version"]["generation"] == generation
        stop.set()
        for done in clients:
            done.result()
    assert len(answers) > 40
    seen = set()
    for answer in answers:
        generation = answer.json()["version"]["generation"]
        seen.add(generation)
        assert served(answer) == expected[(generation - 1) % 2]
    assert seen == set(range(1, 8))


def test_a_reload_that_fails_keeps_the_old_version(tmp_path):
    folder = make_index(tmp_path / "index")
    source = PixelEncoderSource()
    app = create_app(folder, encoder=source, token=TOKEN, limits=Limits())
    with serving(app) as base:
        source.n_bits = 24
        failed = post(base, "/admin/reload")
        assert failed.status_code == 409
        assert "still serving generation 1" in failed.json()["detail"]
        assert "24-bit codes but the index" in failed.json()["detail"]
        assert requests.get(f"{base}/readyz", timeout=5).json()["version"]["generation"] == 1
        assert post(base, "/search/ids", json={"ids": [1000]}).status_code == 200


def test_database_images_are_served_for_the_thumbnails(index_dir, tmp_path):
    dataset = make_dataset(tmp_path / "prepared", index_dir)
    app = create_app(index_dir, token=TOKEN, images=DatasetImages(dataset))
    with serving(app) as base:
        shown = requests.get(f"{base}/items/1007/image", headers=AUTH, timeout=5)
        assert shown.headers["content-type"] == "image/png"
        stored = load_dataset(dataset / "dataset").images[1]
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(shown.content))), stored)
        for item in (1001, 10**30, -1):
            unknown = requests.get(f"{base}/items/{item}/image", headers=AUTH, timeout=5)
            assert unknown.status_code == 404
            assert unknown.json()["detail"] == f"item id {item} is not in the dataset"
    without = create_app(index_dir, token=TOKEN)
    with serving(without) as base:
        missing = requests.get(f"{base}/items/1007/image", headers=AUTH, timeout=5)
        assert missing.status_code == 404 and "--images" in missing.json()["detail"]


def test_a_reload_reads_the_images_anew_and_refuses_another_datasets(index_dir, tmp_path):
    """A prepare step run again replaces the dataset the thumbnails and label paths come from:
    the reload that serves its new index serves its new images too, and images of a dataset
    the index was not built from are refused, the loaded version serving on."""
    from shdh.data.dataset import Dataset, save_dataset

    dataset = make_dataset(tmp_path / "prepared", index_dir, seed=0)
    app = create_app(index_dir, token=TOKEN, images=DatasetImages(dataset))

    def thumbnail(base: str) -> np.ndarray:
        shown = requests.get(f"{base}/items/1007/image", headers=AUTH, timeout=5)
        return np.asarray(Image.open(io.BytesIO(shown.content)))

    with serving(app) as base:
        before = thumbnail(base)
        make_dataset(dataset, index_dir, seed=1)  # the prepare step, run again
        assert np.array_equal(thumbnail(base), before)  # the loaded version, until a reload
        assert post(base, "/admin/reload").status_code == 200
        after = load_dataset(dataset / "dataset")
        assert np.array_equal(thumbnail(base), after.images[1])
        assert not np.array_equal(after.images[1], before)
        save_dataset(
            Dataset(images=after.images, labels=after.labels, ids=after.ids, name="shapes"),
            dataset / "dataset",
        )
        failed = post(base, "/admin/reload")
        assert failed.status_code == 409
        assert "the images are of dataset shapes but the index" in failed.json()["detail"]
        assert "holds dataset toy" in failed.json()["detail"]
        assert np.array_equal(thumbnail(base), after.images[1])


def test_an_index_of_another_registered_version_is_refused_naming_both(tmp_path):
    """An index built from the registry names its encoder by name and version alone (no run id:
    shdh.steps.index), so the version is what tells a moved alias from the indexed one."""
    from types import SimpleNamespace

    from shdh.serving.state import check_match

    folder = make_index(tmp_path / "index", run_id=None)  # toy version 1
    index = SearchIndex.load(folder)
    source = SimpleNamespace(
        describe=lambda: "models:/toy@champion",
        index_arguments=lambda: "--name toy --alias champion",
    )
    moved = SimpleNamespace(n_bits=N_BITS, method="shdh", run_id="r2", name="toy", version="2")
    refusal = "version 2 of toy but the index in .* by version 1 of toy"
    with pytest.raises(ValueError, match=refusal):
        check_match(index, moved, folder, source)
    check_match(index, SimpleNamespace(**{**vars(moved), "version": "1"}), folder, source)
