"""GET /metrics: the service's counters in Prometheus's text format, for the cluster's monitoring.

Per route, method and status: the requests answered and how long each took (a histogram, so a
dashboard can draw p50/p99 and the error rate and alert on them); and the state of the service:
whether it is ready, the generation it serves, the items and code length of its index, and how
many loads succeeded and failed (a reload that fails leaves the old index serving, so only this
counter shows it), and the served search's recall@100 against exact (the Milvus engine's
BIN_IVF_FLAT is approximate). Written by hand rather than with prometheus_client, which is not
in the lock: the exposition format is a few lines of text.

Route labels are the templates of the app's own routes, and "other" for any path it does not
serve, so that a scanner's requests cannot create a label per path. The middleware runs first
(outside the token check), so refused requests are counted with their 401; /metrics itself needs
the token, as every route but the probes does (Prometheus sends it with `authorization:
credentials_file`).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable
from typing import Any

from starlette.routing import compile_path

# Seconds; the service answers a code query in milliseconds and an image batch in tenths.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class RouteLabels:
    """A request path's route label: the template of the app's route it matches (a route added
    later is labelled without a list kept here), else "other"."""

    def __init__(self, templates: Iterable[str]) -> None:
        self._exact = set()
        self._patterns = []
        for template in dict.fromkeys(templates):
            if "{" in template:
                self._patterns.append((compile_path(template)[0], template))
            else:
                self._exact.add(template)

    def __call__(self, path: str) -> str:
        if path in self._exact:
            return path
        return next((t for regex, t in self._patterns if regex.match(path)), "other")


class RequestMetrics:
    """Request counts and latency histograms by (route, method, status); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (route, method, status) -> [count per bucket (cumulative at render), count, sum]
        self._series: dict[tuple[str, str, str], list[Any]] = {}

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, str(status))
        with self._lock:
            series = self._series.setdefault(key, [[0] * (len(BUCKETS) + 1), 0, 0.0])
            series[0][bisect.bisect_left(BUCKETS, seconds)] += 1  # the last slot: only +Inf
            series[1] += 1
            series[2] += seconds

    def lines(self) -> list[str]:
        out = [
            "# HELP shdh_search_requests_total Requests answered, by route, method and status.",
            "# TYPE shdh_search_requests_total counter",
            "# HELP shdh_search_request_seconds Time to answer a request.",
            "# TYPE shdh_search_request_seconds histogram",
        ]
        with self._lock:
            series = {key: (list(b), n, s) for key, (b, n, s) in sorted(self._series.items())}
        for (route, method, status), (buckets, count, total) in series.items():
            labels = f'route="{route}",method="{method}",status="{status}"'
            out.append(f"shdh_search_requests_total{{{labels}}} {count}")
            cumulative = 0
            for bound, n in zip(BUCKETS, buckets, strict=False):
                cumulative += n
                out.append(
                    f'shdh_search_request_seconds_bucket{{{labels},le="{bound}"}} {cumulative}'
                )
            out.append(f'shdh_search_request_seconds_bucket{{{labels},le="+Inf"}} {count}')
            out.append(f"shdh_search_request_seconds_sum{{{labels}}} {total:.6f}")
            out.append(f"shdh_search_request_seconds_count{{{labels}}} {count}")
        return out


def service_lines(service: Any) -> list[str]:
    """The served version's gauges and the load counters, from the Service's state."""
    loaded = service.current
    gauges = {
        "ready": ("1 when an index (and encoder, if any) is loaded", int(loaded is not None)),
        "generation": ("the served version's load number", loaded.generation if loaded else 0),
        "index_items": ("items in the served index", loaded.n_items if loaded else 0),
        "index_bits": ("code length of the served index", loaded.index.n_bits if loaded else 0),
        # 1 for an exact search (the in-process index, Milvus's BIN_FLAT); for BIN_IVF_FLAT,
        # measured against an exhaustive search of the same collection at each load
        "recall_at_100": (
            "the share of the exact top 100 the served search returns",
            _recall(loaded),
        ),
    }
    out = []
    for name, (what, value) in gauges.items():
        out += [f"# HELP shdh_search_{name} {what}.", f"# TYPE shdh_search_{name} gauge"]
        out.append(f"shdh_search_{name} {value}")
    out += [
        "# HELP shdh_search_loads_total Loads of the index and encoder, by outcome.",
        "# TYPE shdh_search_loads_total counter",
        f'shdh_search_loads_total{{outcome="ok"}} {service.loads_ok}',
        f'shdh_search_loads_total{{outcome="failed"}} {service.loads_failed}',
    ]
    return out


def _recall(loaded: Any) -> float:
    if loaded is None:
        return 0.0
    return 1.0 if loaded.recall is None else round(loaded.recall, 6)


class MetricsMiddleware:
    """ASGI middleware: times every HTTP request until its response is sent, labelled by route,
    method and the status sent (500 when the app raised before answering)."""

    def __init__(self, app: Any, metrics: RequestMetrics, labels: RouteLabels) -> None:
        self.app = app
        self.metrics = metrics
        self.labels = labels

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = [500]

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - start
            self.metrics.observe(self.labels(scope["path"]), scope["method"], status[0], seconds)
