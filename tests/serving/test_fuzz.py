"""1,000 malformed or random requests to the service running as a process of its own: every
answer is a 4xx with a JSON reason (never a 5xx, never a dropped connection), the process still
answers afterwards, it wrote no file, and its memory did not grow with the requests."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.serving.server import (
    AUTH,
    IMAGE_SHAPE,
    N_BITS,
    REPO,
    b64,
    is_ready,
    make_index,
    png,
    wait_until,
)

N_REQUESTS = 1000
RSS_MARGIN_KB = 24 << 10  # allocator slack; a leak of a request's body each time is far more
PATHS = ("/search/codes", "/search/ids", "/search/image", "/search/images", "/admin/nowhere")


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header claiming width x height pixels, with almost no pixel data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def random_json(rng: np.random.Generator, depth: int = 0):
    """A random JSON value that is never a valid query: no item id of the index (ids there are
    1000 + 7j), no list of exactly n_bits bits, no hex of the packed width."""
    kind = rng.integers(0, 7 if depth < 3 else 4)
    if kind == 0:
        return [-5, 0, 3, 10**30, -(2**63), 2**64, 1001][rng.integers(0, 7)]
    if kind == 1:
        return ["", "zz", "abc", "ff" * 3, "\u00e9\x00", "1e9"][rng.integers(0, 6)]
    if kind == 2:
        return [None, True, False, 1.5, float("1e308")][rng.integers(0, 5)]
    if kind == 3:
        return [[1, 0] * 9, [-1] * 15, list(range(N_BITS))][rng.integers(0, 3)]
    if kind == 4:
        return [random_json(rng, depth + 1) for _ in range(rng.integers(0, 4))]
    keys = ["codes", "ids", "images", "k", "extra"]
    return {
        keys[rng.integers(0, 5)]: random_json(rng, depth + 1) for _ in range(rng.integers(0, 4))
    }


def fuzz_request(rng: np.random.Generator, images: list[bytes]) -> dict:
    """One malformed request: (method, path, headers, body)."""
    path = PATHS[rng.integers(0, len(PATHS))]
    headers = dict(AUTH) if rng.random() > 0.05 else {}
    kind = rng.integers(0, 8)
    if kind == 0:
        body = rng.bytes(int(rng.integers(0, 3000)))
    elif kind == 1:
        body = json.dumps({"ids": [1000, 1007], "k": 5})[: rng.integers(1, 25)].encode()
    elif kind == 2:
        body = json.dumps(random_json(rng)).encode()
    elif kind == 3:
        k = [0, -1, -(10**9), 51, 10**12][rng.integers(0, 5)]
        body = json.dumps({"ids": [1000], "k": k}).encode()
    elif kind == 4:
        body = json.dumps({"ids": [int(rng.integers(-(10**6), 10**6)) * 7 + 3]}).encode()
    elif kind == 5:
        body = images[rng.integers(0, len(images))]
        path, headers["Content-Type"] = (
            "/search/image",
            ["image/png", "image/jpeg"][rng.integers(0, 2)],
        )
    elif kind == 6:
        picked = [b64(images[rng.integers(0, len(images))]) for _ in range(rng.integers(1, 10))]
        body, path = json.dumps({"images": picked, "k": 3}).encode(), "/search/images"
    else:
        body = json.dumps({"codes": ["ab" * int(rng.integers(0, 4)) + "f"], "k": 1}).encode()
    headers.setdefault("Content-Type", ["application/json", "text/plain", ""][rng.integers(0, 3)])
    method = "POST" if rng.random() > 0.05 else ["GET", "PUT", "DELETE"][rng.integers(0, 3)]
    return {"method": method, "url": path, "headers": headers, "data": body}


def bad_images(rng: np.random.Generator) -> list[bytes]:
    """Truncated, corrupted, oversized and bomb images (every one refused)."""
    good = png(rng.integers(0, 256, IMAGE_SHAPE, dtype=np.uint8))
    corrupted = bytearray(good)
    corrupted[40:60] = rng.bytes(20)
    return [
        good[: len(good) // 2],
        good[:30],
        bytes(corrupted),
        png(np.zeros((300, 20, 3), np.uint8)),
        png(np.zeros((20, 257), np.uint8), "JPEG"),
        bomb_png(100_000, 100_000),
        bomb_png(0, 5),
        png(np.zeros((8, 8, 3), np.uint8), "BMP"),
        b"\xff\xd8\xff" + rng.bytes(200),
        b"",
    ]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    )


@pytest.fixture
def server(tmp_path):
    index_dir = make_index(tmp_path / "index")
    port_file = tmp_path / "port"
    env = os.environ | {"PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.serving.server", str(index_dir), str(port_file)],
        cwd=tmp_path,
        env=env,
    )
    try:
        wait_until(lambda: port_file.exists() and port_file.read_text(), "the port", 60)
        url = f"http://127.0.0.1:{port_file.read_text()}"
        wait_until(lambda: is_ready(url), "/readyz", 60)
        yield process, url, tmp_path
    finally:
        process.terminate()
        process.wait(10)


def test_a_thousand_malformed_requests_get_4xx_reasons_and_leave_no_trace(server):
    process, url, folder = server
    rng = np.random.default_rng(2026)
    images = bad_images(rng)
    session = requests.Session()
    requests_ = [fuzz_request(rng, images) for _ in range(N_REQUESTS)]

    def send(request: dict) -> requests.Response:
        return session.request(**(request | {"url": url + request["url"]}), timeout=10)

    for request in requests_[:100]:  # warm up: the allocator's and the libraries' first use
        send(request)
    before, files = rss_kb(process.pid), listing(folder)
    started = time.monotonic()
    statuses = {}
    for request in requests_:
        answer = send(request)
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        assert 400 <= answer.status_code < 500, (request, answer.status_code, answer.text)
        assert isinstance(answer.json()["detail"], str | list), answer.text
    elapsed = time.monotonic() - started
    assert requests.get(f"{url}/healthz", timeout=5).json() == {"status": "alive"}
    assert process.poll() is None
    assert listing(folder) == files
    grown = rss_kb(process.pid) - before
    assert grown < RSS_MARGIN_KB, (
        f"the server's memory grew by {grown} KiB over {N_REQUESTS} requests"
    )
    assert {400, 401, 404, 413, 415, 422} <= set(statuses), statuses
    print(f"{N_REQUESTS} requests in {elapsed:.1f} s; statuses {statuses}; RSS {grown:+d} KiB")
