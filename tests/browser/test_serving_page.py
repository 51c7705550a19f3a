"""The search service's page in headless Chromium: a query by database item and one by an
uploaded image show the service's hits, with their thumbnails, grouped by shared level;
a wrong token shows the refusal. SHDH_SCREENSHOTS=docs saves docs/images/serving-page.png."""

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


@pytest.fixture(scope="module")
def url(tmp_path_factory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("serving-page")
    index_dir = make_index(work / "index")
    images = DatasetImages(make_dataset(work / "prepared", index_dir))
    app = create_app(index_dir, encoder=PixelEncoderSource(), token=TOKEN, images=images)
    with serving(app) as base:
        yield base


def shown_groups(browser: Any) -> list[tuple[int, list[int]]]:
    """(level, item ids) of each group on the page, top to bottom, once every thumbnail is
    drawn (or none); empty while the page is still fetching."""
    return browser.execute_script(
        """
        const groups = [...document.querySelectorAll('.level')];
        const imgs = [...document.querySelectorAll('.hit img')];
        if (!groups.length || imgs.some((i) => !i.complete || i.naturalWidth === 0)) return [];
        return groups.map((g) => [Number(g.dataset.level),
          [...g.querySelectorAll('.hit')].map((h) => Number(h.dataset.item))]);
        """
    )


def expected_groups(hits: list[dict]) -> list[tuple[int, list[int]]]:
    levels = sorted({h["shared_level"] for h in hits}, reverse=True)
    return [[lvl, [h["item_id"] for h in hits if h["shared_level"] == lvl]] for lvl in levels]


def ask(browser: Any, url: str, token: str, k: int = K) -> None:
    from selenium.webdriver.common.by import By

    browser.get(url + "/")
    browser.find_element(By.ID, "token").send_keys(token)
    field = browser.find_element(By.ID, "k")
    field.clear()
    field.send_keys(str(k))


def test_an_item_query_shows_the_hits_with_thumbnails_grouped_by_shared_level(url, browser):
    from selenium.webdriver.common.by import By

    ask(browser, url, TOKEN)
    browser.find_element(By.ID, "item").send_keys("1070")
    browser.find_element(By.ID, "by-id").click()
    groups = wait_for(lambda: shown_groups(browser), "the hits", browser, timeout=30)
    api = requests.post(f"{url}/search/ids", json={"ids": [1070], "k": K}, headers=AUTH, timeout=5)
    hits = api.json()["results"][0]["hits"]
    assert groups == expected_groups(hits)
    assert len(groups) > 1 and groups[0][0] == 3  # the item itself shares its leaf
    assert len(browser.find_elements(By.CSS_SELECTOR, ".hit img")) == K
    if os.environ.get("SHDH_SCREENSHOTS") == "docs":
        ui.screenshot(browser, REPO / "docs" / "images" / "serving-page.png")


def test_an_uploaded_image_shows_its_hits(url, browser, tmp_path: Path):
    from selenium.webdriver.common.by import By

    query = tmp_path / "query.png"
    query.write_bytes(png(np.random.default_rng(3).integers(0, 256, (16, 16, 3), np.uint8)))
    ask(browser, url, TOKEN, k=5)
    browser.find_element(By.ID, "file").send_keys(str(query))
    browser.find_element(By.ID, "by-image").click()
    groups = wait_for(lambda: shown_groups(browser), "the hits", browser, timeout=30)
    api = requests.post(
        f"{url}/search/image?k=5",
        data=query.read_bytes(),
        headers=AUTH | {"Content-Type": "image/png"},
        timeout=5,
    )
    assert groups == expected_groups(api.json()["results"][0]["hits"])
    assert [level for level, _ in groups] == [0]  # an image carries no labels


def test_a_wrong_token_shows_the_refusal(url, browser):
    from selenium.webdriver.common.by import By

    ask(browser, url, "not-the-token")
    browser.find_element(By.ID, "item").send_keys("1000")
    browser.find_element(By.ID, "by-id").click()
    error = wait_for(lambda: browser.find_element(By.ID, "error").text, "the error", browser, 30)
    assert error == "401: unauthorized"
