"""fetch(): local paths, file:// and a local HTTP server standing in for the real mirrors."""

import hashlib
import http.server
import os
import sys
import threading
import types

import numpy as np
import pytest

from shdh.data import download
from shdh.data.download import DownloadError, fetch, md5sum

PAYLOAD = np.random.default_rng(0).bytes(200_000)
PAYLOAD_MD5 = hashlib.md5(PAYLOAD).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files``; behaviour per path is set in ``server.modes``.

    Modes: "ok" honours Range, "norange" ignores it, "flaky" answers 500 to the first
    ``server.failures`` requests, "drop" sends half of the body on the first request and closes.
    """

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def do_GET(self):
        server = self.server
        server.requests.append((self.path, self.headers.get("Range")))
        body = server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        mode = server.modes.get(self.path, "ok")
        calls = sum(1 for p, _ in server.requests if p == self.path)
        if mode == "flaky" and calls <= server.failures:
            self.send_error(500)
            return
        if mode == "drop" and calls == 1:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        start = 0
        range_header = self.headers.get("Range")
        if range_header and mode != "norange":
            start = int(range_header.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start:])


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.modes, srv.requests, srv.failures = {}, {}, [], 0
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def _listing(directory):
    return sorted(os.listdir(directory))


def test_md5sum_matches_hashlib(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"")
    assert md5sum(path) == "d41d8cd98f00b204e9800998ecf8427e"
    path.write_bytes(PAYLOAD)
    assert md5sum(path, chunk=1000) == PAYLOAD_MD5


def test_fetch_from_local_path(tmp_path):
    src = tmp_path / "src" / "a.bin"
    src.parent.mkdir()
    src.write_bytes(PAYLOAD)
    dest = fetch([str(src)], tmp_path / "out" / "a.bin", md5=PAYLOAD_MD5)
    assert dest == tmp_path / "out" / "a.bin"
    assert dest.read_bytes() == PAYLOAD
    assert _listing(dest.parent) == ["a.bin"]


def test_fetch_from_file_url(tmp_path):
    src = tmp_path / "a b.bin"  # a space, to exercise URL quoting
    src.write_bytes(PAYLOAD)
    dest = fetch([src.as_uri()], tmp_path / "out.bin", md5=PAYLOAD_MD5.upper())
    assert dest.read_bytes() == PAYLOAD


def test_fetch_from_http(tmp_path, server):
    server.files["/d/a.bin"] = PAYLOAD
    dest = fetch([server.url + "/d/a.bin"], tmp_path / "a.bin", md5=PAYLOAD_MD5, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/d/a.bin", None)]
    assert _listing(tmp_path) == ["a.bin"]


def test_falls_through_failing_sources_in_order(tmp_path, server):
    server.files["/good"] = PAYLOAD
    sources = [str(tmp_path / "missing.bin"), server.url + "/absent", server.url + "/good"]
    dest = fetch(sources, tmp_path / "a.bin", md5=PAYLOAD_MD5, retries=3, backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    # a 404 is permanent: one request, no retries; then the good source once
    assert [p for p, _ in server.requests] == ["/absent", "/good"]


def test_retries_a_transient_error_with_exponential_backoff(tmp_path, server, monkeypatch):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = "flaky"
    server.failures = 2
    delays = []
    monkeypatch.setattr(download.time, "sleep", delays.append)
    dest = fetch([server.url + "/a"], tmp_path / "a", retries=3, backoff=0.5, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 3
    assert delays == [0.5, 1.0]


def test_gives_up_on_a_source_after_retries_then_uses_the_next(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = "flaky"
    server.failures = 10
    backup = tmp_path / "backup.bin"
    backup.write_bytes(PAYLOAD)
    dest = fetch([server.url + "/a", str(backup)], tmp_path / "a", retries=2, backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 2


def test_all_sources_failing_lists_each_with_its_error(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = "flaky"
    server.failures = 10
    sources = [server.url + "/a", str(tmp_path / "nope"), "ftp://example.invalid/x"]
    with pytest.raises(DownloadError) as info:
        fetch(sources, tmp_path / "out" / "a.bin", retries=2, backoff=0, timeout=5)
    message = str(info.value)
    assert message.startswith("a.bin: every source failed")
    assert f"{server.url}/a: HTTP Error 500" in message
    assert f"{tmp_path / 'nope'}: {tmp_path / 'nope'}: no such file" in message
    assert "ftp://example.invalid/x: unsupported source scheme 'ftp'" in message
    assert _listing(tmp_path / "out") == []


def test_resumes_an_existing_part_file_with_a_range_request(tmp_path, server):
    server.files["/a"] = PAYLOAD
    dest = tmp_path / "a.bin"
    (tmp_path / "a.bin.part").write_bytes(PAYLOAD[:70_000])
    fetch([server.url + "/a"], dest, md5=PAYLOAD_MD5, timeout=5)
    assert server.requests == [("/a", "bytes=70000-")]
    assert dest.read_bytes() == PAYLOAD
    assert _listing(tmp_path) == ["a.bin"]


def test_resumes_after_a_dropped_connection(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = "drop"
    dest = fetch([server.url + "/a"], tmp_path / "a", md5=PAYLOAD_MD5, backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/a", None), ("/a", f"bytes={len(PAYLOAD) // 2}-")]


def test_restarts_when_the_server_ignores_range(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = "norange"
    (tmp_path / "a.part").write_bytes(b"garbage that is not a prefix")
    dest = fetch([server.url + "/a"], tmp_path / "a", md5=PAYLOAD_MD5, timeout=5)
    assert dest.read_bytes() == PAYLOAD


def test_restarts_when_the_part_file_is_too_long(tmp_path, server):
    server.files["/a"] = PAYLOAD
    (tmp_path / "a.part").write_bytes(PAYLOAD + b"extra")
    dest = fetch([server.url + "/a"], tmp_path / "a", md5=PAYLOAD_MD5, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/a", f"bytes={len(PAYLOAD) + 5}-"), ("/a", None)]


@pytest.mark.parametrize("kind", ["path", "http"])
def test_md5_mismatch_leaves_no_dest_and_no_part(tmp_path, server, kind):
    src = tmp_path / "src.bin"
    src.write_bytes(PAYLOAD)
    server.files["/a"] = PAYLOAD
    source = str(src) if kind == "path" else server.url + "/a"
    wrong = "0" * 32
    out = tmp_path / "out"
    with pytest.raises(DownloadError) as info:
        fetch([source], out / "a.bin", md5=wrong, backoff=0, timeout=5)
    assert f"a.bin: md5 mismatch: expected {wrong}, got {PAYLOAD_MD5}" in str(info.value)
    assert _listing(out) == []
    assert len(server.requests) == (1 if kind == "http" else 0)  # a mismatch is not retried


def test_mismatch_on_first_source_falls_through_to_a_good_one(tmp_path):
    bad, good = tmp_path / "bad", tmp_path / "good"
    bad.write_bytes(b"not it")
    good.write_bytes(PAYLOAD)
    dest = fetch([str(bad), str(good)], tmp_path / "a", md5=PAYLOAD_MD5)
    assert dest.read_bytes() == PAYLOAD


def test_existing_verified_dest_is_not_fetched_again(tmp_path):
    dest = tmp_path / "a"
    dest.write_bytes(PAYLOAD)
    assert fetch([str(tmp_path / "nowhere")], dest, md5=PAYLOAD_MD5) == dest
    assert dest.read_bytes() == PAYLOAD


def test_s3_source_uses_boto3_and_aws_endpoint_url(tmp_path, monkeypatch):
    calls = {}

    class FakeClient:
        def download_file(self, bucket, key, filename):
            calls["download"] = (bucket, key)
            with open(filename, "wb") as f:
                f.write(PAYLOAD)

    def client(service, endpoint_url=None):
        calls["client"] = (service, endpoint_url)
        return FakeClient()

    monkeypatch.setitem(sys.modules, "boto3", types.SimpleNamespace(client=client))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    dest = fetch(["s3://bucket/some/prefix/a.gz"], tmp_path / "a.gz", md5=PAYLOAD_MD5)
    assert dest.read_bytes() == PAYLOAD
    assert calls == {
        "client": ("s3", "http://127.0.0.1:9000"),
        "download": ("bucket", "some/prefix/a.gz"),
    }


def test_argument_validation(tmp_path):
    with pytest.raises(TypeError, match="sequence"):
        fetch("http://x/a", tmp_path / "a")
    with pytest.raises(ValueError, match="empty"):
        fetch([], tmp_path / "a")
    with pytest.raises(ValueError, match="retries"):
        fetch(["x"], tmp_path / "a", retries=0)
