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
    missing = [
        name for name, path in (("chromium", chromium), ("chromedriver", driver)) if path is None
    ]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: run `{INSTALL}` (as root; `make test` does it)"
        )
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
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        "--hide-scrollbars",
    ):
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
        time.sleep(0.2)
    text = page_text(browser)
    pytest.fail(
        f"the MLflow UI did not show {what} in {timeout:.0f} s ({last}); "
        f"{browser.current_url}\npage text:\n{text[:3000]}"
    )


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


# ---- MLflow 3.17's UI, as a user works it ------------------------------------------------------


def click(browser: Any, element: Any) -> None:
    """Click through the UI's first-visit tips, which cover parts of the page."""
    browser.execute_script("arguments[0].click()", element)


def by_xpath(browser: Any, xpath: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.XPATH, xpath)


def open_model_training(browser: Any, url: str, experiment_id: str) -> None:
    """Open the experiment and switch the sidebar from GenAI to Model training, as a new user
    must: MLflow 3.17 opens every experiment in its GenAI view until that toggle is switched."""
    browser.get(f"{url}/#/experiments/{experiment_id}")
    toggle = wait_for(
        lambda: by_xpath(browser, "//*[normalize-space(text())='Model training']"),
        "the GenAI / Model training toggle",
        browser,
    )
    click(browser, toggle[0])
    wait_for(
        lambda: "/runs" in browser.current_url and by_xpath(browser, "//div[@role='row']"),
        "the runs table",
        browser,
    )
    close_assistant(browser)


def close_assistant(browser: Any) -> None:
    """Close the MLflow Assistant's panel, which opens beside every page and hides a third."""
    for close in by_xpath(browser, "//button[@aria-label='Close']"):
        click(browser, close)


def show_metric_column(browser: Any, metric: str) -> None:
    """Columns -> search -> tick the metric, then close the menu."""
    from selenium.webdriver.common.keys import Keys

    click(browser, by_xpath(browser, "//button[normalize-space(.)='Columns']")[0])
    search = wait_for(
        lambda: by_xpath(browser, "//input[@placeholder='Search columns']"),
        "the column search",
        browser,
    )[0]
    search.send_keys(metric)
    box = (
        f"//div[contains(@class,'tree-treenode')][.//span[contains(@class,'tree-title')]"
        f"[normalize-space(.)='{metric}']]//span[contains(@class,'tree-checkbox')]"
    )
    wait_for(lambda: by_xpath(browser, box), f"the column {metric}", browser)[0].click()
    search.send_keys(Keys.ESCAPE)


def expand_run(browser: Any, run_name: str) -> None:
    """Click the + left of a parent run's name: its nested runs unfold under it."""
    row = f"//div[@role='row'][.//a[normalize-space(.)='{run_name}']]"
    button = wait_for(
        lambda: by_xpath(browser, f"{row}//button[contains(@data-component-id,'runnamecell')]"),
        f"the expander of {run_name}",
        browser,
    )
    click(browser, button[0])


def row_text(browser: Any, run_id: str) -> str:
    """The text of a run's row: the table draws it in pieces (pinned and scrolled columns)."""
    parts = by_xpath(browser, f"//div[@role='row'][@row-id='{run_id}']")
    return " | ".join(p.text.replace("\n", " | ") for p in parts if p.text)


# In the page, at once: the comparison's grids redraw their cells as the page scrolls. Params
# are a plain table; for metrics the key's cell is in a grid of names and the values are the
# cells at the same offset in the grids beside it, found in the closest enclosing block that has
# any (so the rows of another table, at the same offsets, are not taken). Rows out of a grid's
# view are not drawn at all.
_ROW_SCRIPT = """
const key = arguments[0];
const absolute = (e) => (e.getAttribute('style') || '').includes('position: absolute');
// The grid of values scrolls; the grid of names follows it (scrolled directly, they part).
const scrollable = (root) => [...root.querySelectorAll('.ReactVirtualized__Grid')]
  .filter((g) => getComputedStyle(g).overflowY !== 'hidden');
const named = [...document.querySelectorAll('body *')].find((e) => [...e.childNodes].some(
  (n) => n.nodeType === 3 && n.textContent.trim() === key)
  && !e.closest('svg, .du-bois-light-select'));  // not the plots' axes and pickers
if (!named) {  // a metric grid draws only the rows in view: scroll on, from the top again
  scrollable(document).forEach((g) => {
    g.scrollTop = g.scrollTop + g.clientHeight >= g.scrollHeight ? 0 : g.scrollTop + 135;
  });
  return null;
}
const row = named.closest('tr');  // params and tags: a plain table, a row per key
if (row) {
  row.scrollIntoView({block: 'center'});
  return [...row.querySelectorAll('td')].map((td) => td.innerText.trim());
}
let anchor = named;
while (anchor && !absolute(anchor)) anchor = anchor.parentElement;
if (!anchor) return null;
const names = anchor.parentElement;
for (let scope = names.parentElement; scope; scope = scope.parentElement) {
  const cells = [...scope.querySelectorAll('div')].filter((d) => absolute(d)
    && !names.contains(d) && d.style.top === anchor.style.top
    && !d.querySelector('div[style*="absolute"]'));
  if (!cells.length) continue;
  const values = cells.map((d) => d.innerText.trim());
  // Show the row: every grid of this table scrolled alike (names and values stay level), the
  // table in the middle of the window.
  const offset = Math.max(0, parseFloat(anchor.style.top) - 90);
  scrollable(scope).forEach((g) => { g.scrollTop = offset; });
  anchor.closest('.ReactVirtualized__Grid').scrollIntoView({block: 'center'});
  return values;
}
return null;
"""


# Scrolled from a script, the grid of names does not always catch up with the grid of values:
# level them, so that the screenshot shows each name beside its values.
_LEVEL_SCRIPT = """
const grids = [...document.querySelectorAll('.ReactVirtualized__Grid')];
const hidden = (g) => getComputedStyle(g).overflowY === 'hidden';
const lead = grids.find((g) => !hidden(g));
if (lead) grids.filter(hidden).forEach((g) => { g.scrollTop = lead.scrollTop; });
"""


def compare_row(browser: Any, key: str) -> list[str]:
    """The values in the row of `key` (a metric or param) of the run comparison page: the
    cells of its grids drawn level with the key's cell (by their offset in the grid, which is
    what ties a value to its name), the row then scrolled into view."""
    values = wait_for(
        lambda: browser.execute_script(_ROW_SCRIPT, key),
        f"the row {key} of the comparison",
        browser,
    )
    time.sleep(0.5)  # the grids redraw after the scroll
    browser.execute_script(_LEVEL_SCRIPT)
    return values


def as_text_numbers(cells: list[str]) -> list[str]:
    """The cells that hold a number."""
    numbers = []
    for cell in cells:
        try:
            float(cell)
        except ValueError:
            continue
        numbers.append(cell)
    return numbers


def open_comparison(browser: Any, url: str, experiment_id: str, run_ids: list[str]) -> None:
    """The comparison page of runs (what Compare opens), loaded afresh: the single-page app
    keeps showing the previous comparison when only the address's query changes."""
    import json
    import urllib.parse

    query = urllib.parse.urlencode(
        {"runs": json.dumps(run_ids), "experiments": json.dumps([experiment_id])}
    )
    browser.get(f"{url}/#/compare-runs?{query}")
    browser.refresh()
    wait_for(lambda: "Run details" in page_text(browser), "the comparison page", browser)
    close_assistant(browser)


# Plotly keeps each chart's data on its element: a bar chart's bars are its y labels (the runs or
# groups) and x values, whatever the window lets the axis print.
_BARS_SCRIPT = """
return [...document.querySelectorAll('.js-plotly-plot')].map((plot) => (plot.data || [])
  .filter((trace) => trace.type === 'bar')
  .map((trace) => Object.fromEntries(trace.y.map((label, i) => [String(label), trace.x[i]]))))
  .filter((traces) => traces.length).map((traces) => Object.assign({}, ...traces));
"""


def bar_charts(browser: Any) -> list[dict[str, float]]:
    """Every bar chart drawn on the page, in page order, as {bar label: value}."""
    return browser.execute_script(_BARS_SCRIPT) or []


def open_view(browser: Any, url: str, link: str) -> None:
    """Open an address of the UI afresh (`link` starts at '#/'), as a link followed from
    elsewhere: the single-page app keeps its page when only the fragment changes."""
    browser.get(f"{url}/{link}")
    browser.refresh()


def framed_images(browser: Any) -> list[dict[str, Any]]:
    """The images inside the artifact viewer's frame (an HTML artifact is shown in a sandboxed
    iframe): their size as decoded, 0 for an image that did not load."""
    from selenium.webdriver.common.by import By

    frames = browser.find_elements(By.TAG_NAME, "iframe")
    if not frames:
        return []
    browser.switch_to.frame(frames[0])
    try:
        return browser.execute_script(
            "return [...document.images].map((i) => ({complete: i.complete, "
            "width: i.naturalWidth, alt: i.alt}));"
        )
    finally:
        browser.switch_to.default_content()


# A line chart's traces as Plotly holds them, and its legend, which MLflow draws below the plot,
# not in it: the closest block around the plot that holds a legend. A grouped line's band (the
# spread of its runs) is a filled trace of its own, left out.
_LINES_SCRIPT = """
const isLegend = (d) => getComputedStyle(d).flexWrap === 'wrap' && d.querySelector('svg path');
return [...document.querySelectorAll('.js-plotly-plot')].map((plot) => {
  const lines = (plot.data || []).filter((t) => t.type === 'scatter' && !t.fill
    && (t.mode || '').includes('lines'));
  // The closest block around the plot and its legend, never one holding another plot: a
  // chart whose legend is not drawn yet must not take its neighbour's.
  let card = plot;
  while (card.parentElement && ![...card.querySelectorAll('div')].some(isLegend)
         && card.parentElement.querySelectorAll('.js-plotly-plot').length === 1) {
    card = card.parentElement;
  }
  const legend = [...card.querySelectorAll('div')].find(isLegend);
  return {
    text: card.innerText,
    legend: legend ? [...legend.children].map((e) => e.textContent.trim()) : [],
    traces: lines.map((t) => ({name: String(t.name || ''), x: [...t.x], y: [...t.y],
      metric: String(t.metricKey || ''), group: String(t.uuid || ''),
      color: (t.line || {}).color || (t.marker || {}).color || ''})),
  };
}).filter((chart) => chart.traces.length);
"""


def line_charts(browser: Any) -> list[dict[str, Any]]:
    """Every line chart drawn on the page, in page order (a chart out of the window is drawn
    once scrolled to): {text: its and its legend's text, legend: the legend's entries,
    traces: [{name, x, y, metric, group, color}]}: MLflow keeps on each trace the metric it
    draws and its group ('tag.method.dsh'), the only names a redrawn chart's lines carry."""
    return browser.execute_script(_LINES_SCRIPT) or []
