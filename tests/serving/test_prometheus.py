"""GET /metrics (real uvicorn on loopback): Prometheus's text format, with the requests counted
by route, method and status and timed in a histogram, and the served version's state."""

from __future__ import annotations

import pytest
import requests

from shdh.ranking.search_index import SearchIndex
from shdh.serving import Limits, create_app
from shdh.serving.prometheus import BUCKETS, RequestMetrics, RouteLabels
from tests.serving.server import AUTH, TOKEN, PixelEncoderSource, make_index, serving

pytestmark = pytest.mark.integration


def samples(text: str) -> dict[str, float]:
    """Each sample line's name and labels -> its value; every other line must be a comment."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert line.startswith(("# HELP ", "# TYPE ")), line
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def scrape(base: str) -> dict[str, float]:
    answer = requests.get(f"{base}/metrics", headers=AUTH, timeout=5)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(answer.text)


def series(route: str, method: str, status: int) -> str:
    return f'route="{route}",method="{method}",status="{status}"'


def test_requests_are_counted_and_timed_by_route_method_and_status(tmp_path):
    folder = make_index(tmp_path / "index")
    app = create_app(folder, encoder=PixelEncoderSource(), token=TOKEN, limits=Limits())
    with serving(app) as base:
        for _ in range(3):
            ok = requests.post(f"{base}/search/ids", json={"ids": [1000]}, headers=AUTH, timeout=5)
            assert ok.status_code == 200
        bad = {"ids": [1000], "k": 0}
        refused = requests.post(f"{base}/search/ids", json=bad, headers=AUTH, timeout=5)
        assert refused.status_code == 422
        assert requests.get(f"{base}/metrics", timeout=5).status_code == 401  # needs the token
        assert requests.get(f"{base}/wp-login.php", timeout=5).status_code == 401
        assert requests.get(f"{base}/docs", timeout=5).status_code == 200
        assert requests.get(f"{base}/docs/assets/none.js", timeout=5).status_code == 404
        got = scrape(base)
    ok = series("/search/ids", "POST", 200)
    assert got[f"shdh_search_requests_total{{{ok}}}"] == 3
    assert got[f"shdh_search_requests_total{{{series('/search/ids', 'POST', 422)}}}"] == 1
    assert got[f"shdh_search_requests_total{{{series('/metrics', 'GET', 401)}}}"] == 1
    assert (
        got[f"shdh_search_requests_total{{{series('other', 'GET', 401)}}}"] == 1
    )  # no label per path
    # the service's own pages are routes like any other
    assert got[f"shdh_search_requests_total{{{series('/docs', 'GET', 200)}}}"] == 1
    docs_assets = series("/docs/assets/{path:path}", "GET", 404)
    assert got[f"shdh_search_requests_total{{{docs_assets}}}"] == 1
    buckets = [got[f'shdh_search_request_seconds_bucket{{{ok},le="{b}"}}'] for b in BUCKETS]
    assert (
        buckets == sorted(buckets)
        and got[f'shdh_search_request_seconds_bucket{{{ok},le="+Inf"}}'] == 3
    )
    assert got[f"shdh_search_request_seconds_count{{{ok}}}"] == 3
    assert 0 < got[f"shdh_search_request_seconds_sum{{{ok}}}"] < 3 * BUCKETS[-1]
    index = SearchIndex.load(folder)
    assert got["shdh_search_ready"] == 1 and got["shdh_search_generation"] == 1
    assert got["shdh_search_index_items"] == len(index.item_ids)
    assert got["shdh_search_index_bits"] == index.n_bits
    assert got['shdh_search_loads_total{outcome="ok"}'] == 1
    assert got['shdh_search_loads_total{outcome="failed"}'] == 0


def test_a_failed_reload_is_counted_while_the_old_version_serves(tmp_path):
    source = PixelEncoderSource()
    app = create_app(make_index(tmp_path / "index"), encoder=source, token=TOKEN, limits=Limits())
    with serving(app) as base:
        source.n_bits = 24  # the encoder no longer matches the index
        assert requests.post(f"{base}/admin/reload", headers=AUTH, timeout=10).status_code == 409
        got = scrape(base)
    assert got['shdh_search_loads_total{outcome="failed"}'] == 1
    assert got['shdh_search_loads_total{outcome="ok"}'] == 1
    assert got["shdh_search_ready"] == 1 and got["shdh_search_generation"] == 1


def test_a_request_is_counted_in_the_first_bucket_that_holds_its_time():
    metrics = RequestMetrics()
    metrics.observe("/search/codes", "POST", 200, 0.003)  # between 0.0025 and 0.005
    metrics.observe("/search/codes", "POST", 200, 60.0)  # beyond the last bucket: only +Inf
    got = samples("\n".join(metrics.lines()))
    labels = series("/search/codes", "POST", 200)
    assert got[f'shdh_search_request_seconds_bucket{{{labels},le="0.0025"}}'] == 0
    assert got[f'shdh_search_request_seconds_bucket{{{labels},le="0.005"}}'] == 1
    assert got[f'shdh_search_request_seconds_bucket{{{labels},le="5.0"}}'] == 1
    assert got[f'shdh_search_request_seconds_bucket{{{labels},le="+Inf"}}'] == 2
    assert got[f"shdh_search_request_seconds_sum{{{labels}}}"] == pytest.approx(60.003)
    route_label = RouteLabels(["/", "/items/{item_id}/image"])
    assert route_label("/items/17/image") == "/items/{item_id}/image"
