"""The search service's page in headless Chromium: a query by database item shows the item's
label, then the hits in the service's order with their ranks, rounded distances, thumbnails,
label paths and shared levels; an uploaded image's hits likewise, saying the image has no
label; small images are drawn with visible pixels and photos smoothly, at thumbnail size; an
empty item id is refused on the page without a request; a refused token says where to enter
it; and /docs renders from the service's own files. SHDH_SCREENSHOTS=docs saves
docs/images/serving-page.png."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from shdh.serving import create_app
from shdh.serving.thumbnails import DatasetImages
from tests.browser import ui
from tests.browser.ui import wait_for
from tests.conftest import REPO
from tests.serving.server import (
    AUTH,
    TOKEN,
    PixelEncoderSource,
    make_dataset,
    make_index,
    png,
    serving,
)

# Each starts the service on a loopback port (tests/conftest.py: SERVER_FIXTURES).
pytestmark = pytest.mark.integration

K = 12
PHOTO = (96, 160, 3)  # larger than a thumbnail: drawn scaled down, not pixelated


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("serving-page")
    index_dir = make_index(work / "index")
    images = DatasetImages(make_dataset(work / "prepared", index_dir))
    app = create_app(index_dir, encoder=PixelEncoderSource(), token=TOKEN, images=images)
    with serving(app) as base:
        yield base


def shown_hits(browser: Any) -> list[dict[str, Any]]:
    """Each hit card on the page, top to bottom, once every thumbnail is drawn at its size (or
    none); empty while the page is still fetching."""
    return browser.execute_script(
        """
        const hits = [...document.querySelectorAll('#hits .hit')];
        const imgs = [...document.querySelectorAll('#hits .hit img')];
        if (!hits.length || imgs.some((i) => !i.dataset.sized)) return [];
        const text = (h, kind) => (h.querySelector('.' + kind) || {}).textContent || '';
        return hits.map((h) => {
          const img = h.querySelector('img');
          return {rank: Number(h.dataset.rank), item: Number(h.dataset.item),
            shown_rank: text(h, 'rank'), distance: text(h, 'distance'),
            label: text(h, 'label'), shared: text(h, 'shared'),
            top: h.getBoundingClientRect().top, left: h.getBoundingClientRect().left,
            img: img && {natural: img.naturalWidth, width: img.clientWidth,
              rendering: getComputedStyle(img).imageRendering}};
        });
        """
    )


def expected_hits(hits: list[dict]) -> list[dict[str, Any]]:
    def shared(hit: dict) -> str:
        if hit["shared_level"] == 0:
            return ""
        path = hit["shared_path"] or "the root"
        return f"shares {path} (level {hit['shared_level']})"

    return [
        {
            "rank": i + 1,
            "item": h["item_id"],
            "shown_rank": f"#{i + 1}",
            "distance": f"d = {h['distance']:.3f}",
            "label": h["label_path"],
            "shared": shared(h),
        }
        for i, h in enumerate(hits)
    ]


def ask(browser: Any, url: str, token: str, k: int = K) -> None:
    from selenium.webdriver.common.by import By

    browser.get(url + "/")
    browser.find_element(By.ID, "token").send_keys(token)
    field = browser.find_element(By.ID, "k")
    field.clear()
    field.send_keys(str(k))


def search_item(browser: Any, item: str) -> None:
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, "item").send_keys(item)
    browser.find_element(By.ID, "by-id").click()


def api_hits(url: str, path: str, **kwargs) -> dict:
    headers = AUTH | kwargs.pop("headers", {})
    answer = requests.post(f"{url}{path}", headers=headers, timeout=5, **kwargs)
    assert answer.status_code == 200, answer.text
    return answer.json()["results"][0]


def text_of(browser: Any, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, element_id).text


def test_an_item_query_shows_its_label_and_the_hits_in_rank_order(url, browser):
    ask(browser, url, TOKEN)
    search_item(browser, "1070")
    shown = wait_for(lambda: shown_hits(browser), "the hits", browser, timeout=30)
    result = api_hits(url, "/search/ids", json={"ids": [1070], "k": K})
    hits = result["hits"]
    assert [{k: s[k] for k in expected_hits(hits)[0]} for s in shown] == expected_hits(hits)
    assert shown[0]["rank"] == 1 and hits[0]["shared_level"] == 3  # the item itself, first
    assert shown[0]["top"] <= min(s["top"] for s in shown)  # and drawn first
    assert text_of(browser, "query") == f"Query: item 1070, label {result['label_path']}"
    levels = sorted({h["shared_level"] for h in hits}, reverse=True)
    assert len(levels) > 1
    summary = text_of(browser, "levels").splitlines()
    assert len(summary) == len(levels)
    for line, level in zip(summary, levels, strict=True):
        ranks = ", ".join(str(h["rank"]) for h in hits if h["shared_level"] == level)
        assert line.endswith(f"(level {level}): ranks {ranks}"), line
    # 8x8 images: enlarged to the thumbnail's size with visible pixels
    assert {(s["img"]["natural"], s["img"]["width"], s["img"]["rendering"]) for s in shown} == {
        (8, 128, "pixelated")
    }
    if os.environ.get("SHDH_SCREENSHOTS") == "docs":
        ui.screenshot(browser, REPO / "docs" / "images" / "serving-page.png")


def test_an_uploaded_image_shows_its_hits_in_rank_order_and_has_no_label(
    url, browser, tmp_path: Path
):
    from selenium.webdriver.common.by import By

    query = tmp_path / "query.png"
    query.write_bytes(png(np.random.default_rng(3).integers(0, 256, (16, 16, 3), np.uint8)))
    ask(browser, url, TOKEN, k=5)
    browser.find_element(By.ID, "file").send_keys(str(query))
    browser.find_element(By.ID, "by-image").click()
    shown = wait_for(lambda: shown_hits(browser), "the hits", browser, timeout=30)
    data = query.read_bytes()
    result = api_hits(url, "/search/image?k=5", data=data, headers={"Content-Type": "image/png"})
    expected = expected_hits(result["hits"])
    assert [{k: s[k] for k in expected[0]} for s in shown] == expected
    assert text_of(browser, "query") == (
        "Query: the uploaded image query.png (an image has no label, so no level is shared; "
        f"the best hit is labelled {result['hits'][0]['label_path']})"
    )
    assert text_of(browser, "levels") == ""


def test_photos_are_drawn_smoothly_at_thumbnail_size(browser, tmp_path):
    index_dir = make_index(tmp_path / "index")
    images = DatasetImages(make_dataset(tmp_path / "prepared", index_dir, image_shape=PHOTO))
    with serving(create_app(index_dir, token=TOKEN, images=images)) as base:
        ask(browser, base, TOKEN, k=3)
        search_item(browser, "1070")
        shown = wait_for(lambda: shown_hits(browser), "the hits", browser, timeout=30)
    assert [s["rank"] for s in shown] == [1, 2, 3]
    for hit in shown:
        assert hit["img"]["natural"] == PHOTO[1] and hit["img"]["width"] == 128
        assert hit["img"]["rendering"] != "pixelated"


def requests_made(browser: Any) -> int:
    return browser.execute_script("return window.asked;")


def count_requests(browser: Any) -> None:
    browser.execute_script(
        "window.asked = 0; const f = window.fetch;"
        "window.fetch = (...a) => { window.asked += 1; return f(...a); };"
    )


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("", "enter a database item id first"),
        ("  ", "enter a database item id first"),
        ("12a", "a database item id must be a whole number, not 12a"),
    ],
)
def test_an_empty_or_malformed_item_id_is_refused_without_a_request(url, browser, typed, message):
    ask(browser, url, TOKEN)
    count_requests(browser)
    search_item(browser, typed)
    assert wait_for(lambda: text_of(browser, "error"), "the error", browser, 30) == message
    assert requests_made(browser) == 0
    assert text_of(browser, "hits") == ""


def test_an_id_beyond_javascripts_integers_is_sent_as_typed(url, browser):
    ask(browser, url, TOKEN)
    search_item(browser, str(2**70))
    error = wait_for(lambda: text_of(browser, "error"), "the error", browser, 30)
    assert error.startswith(f"422: ids.0: item id {2**70} is out of range"), error


@pytest.mark.parametrize(
    ("token", "hint"),
    [
        (
            "not-the-token",
            "(the service refused this token: enter the service token in the Token field)",
        ),
        ("", "(enter the service token in the Token field)"),
    ],
)
def test_a_refused_token_says_to_enter_the_service_token(url, browser, token, hint):
    ask(browser, url, token)
    search_item(browser, "1000")
    error = wait_for(lambda: text_of(browser, "error"), "the error", browser, 30)
    assert error == f"401: unauthorized {hint}"


def test_the_docs_render_from_the_services_own_files(url, browser):
    from selenium.webdriver.common.by import By

    browser.get(url + "/docs")
    title = wait_for(
        lambda: browser.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text,
        "Swagger UI's title",
        browser,
        timeout=30,
    )
    assert title.startswith("shdh search")
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map((e) => e.name);"
    )
    assert loaded and all(name.startswith(url + "/") for name in loaded), loaded
