"""The browser the page tests share: headless Chromium (tests/browser/ui.py), one per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.ui import start_browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()
