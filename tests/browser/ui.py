"""Driving MLflow's web UI in Debian's headless Chromium through Selenium and chromedriver.

Nothing is downloaded: the browser and its driver are the Debian packages `chromium` and
`chromium-driver` (`make test` installs them as root), Selenium comes from requirements.lock.
A missing piece fails the test with the command that installs it; it never skips.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

INSTALL = "apt-get install -y chromium chromium-driver"
WAIT_S = 120.0  # the UI's first load compiles a large bundle: slow on a busy machine
WINDOW = (1680, 1000)


def browser_paths() -> tuple[str, str]:
    """Debian's chromium and chromedriver, or a failure naming the install command."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromedriver", driver))
               if path is None]  # fmt: skip
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found: run `{INSTALL}` (as root; `make test` "
                    "does it)")  # fmt: skip
    return str(chromium), str(driver)


def start_browser() -> Any:
    """Headless Chromium with a fresh profile, as a new user opens the UI."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is not installed: run `make setup` (it is in requirements.lock)")
    chromium, driver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={WINDOW[0]},{WINDOW[1]}", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_for(check: Callable[[], Any], what: str, browser: Any, timeout: float = WAIT_S) -> Any:
    """Poll `check` until it returns something truthy; fail with the page's text otherwise."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = check()
            if found:
                return found
        except Exception as exc:  # the page is still rendering: elements come and go
            last = exc
        time.sleep(0.5)
    text = page_text(browser)
    pytest.fail(f"the MLflow UI did not show {what} in {timeout:.0f} s ({last}); "
                f"{browser.current_url}\npage text:\n{text[:3000]}")  # fmt: skip


def page_text(browser: Any) -> str:
    from selenium.webdriver.common.by import By

    try:
        return browser.find_element(By.TAG_NAME, "body").text
    except Exception as exc:
        return f"(no page text: {exc})"


def screenshot(browser: Any, path: Path) -> Path:
    """Save a PNG of the window, written under a temporary name and then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    assert browser.save_screenshot(str(tmp)), f"chromium could not save {path}"
    tmp.replace(path)
    return path
