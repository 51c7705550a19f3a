"""fetch(): local paths, file:// and a local HTTP server standing in for the real mirrors."""

import hashlib
import http.server
import io
import os
import socket
import threading
import types

import numpy as np
import pytest
import urllib3.exceptions
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

from shdh.data import download, s3_source
from shdh.data.download import DownloadError, fetch, md5sum, sha256sum

PAYLOAD = np.random.default_rng(0).bytes(200_000)
PAYLOAD_MD5 = hashlib.md5(PAYLOAD).hexdigest()
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
HALF = len(PAYLOAD) // 2


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.files``; behaviour per path is a set of flags in ``server.modes``.

    Flags: "norange" ignores Range headers; "flaky" answers 500 to the first ``server.failures``
    requests; "drop" sends half of the body on the first request and closes the connection;
    "nolength" sends no Content-Length (the end of the body is the end of the connection);
    "badrange" answers a Range request with a 206 that starts at byte 0.
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
        flags = server.modes.get(self.path, set())
        calls = sum(1 for p, _ in server.requests if p == self.path)
        if "flaky" in flags and calls <= server.failures:
            self.send_error(500)
            return
        start = 0
        range_header = self.headers.get("Range")
        if range_header and "norange" not in flags:
            start = int(range_header.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_error(416)
                return
            first = 0 if "badrange" in flags else start
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {first}-{len(body) - 1}/{len(body)}")
            start = first
        else:
            self.send_response(200)
        if "nolength" in flags:
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if "drop" in flags and calls == 1:
            self.wfile.write(body[start : start + (len(body) - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
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
    assert sha256sum(path, chunk=999) == PAYLOAD_SHA256


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
    server.modes["/a"] = {"flaky"}
    server.failures = 2
    delays = []
    monkeypatch.setattr(download.time, "sleep", delays.append)
    dest = fetch([server.url + "/a"], tmp_path / "a", retries=3, backoff=0.5, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 3
    assert delays == [0.5, 1.0]


def test_gives_up_on_a_source_after_retries_then_uses_the_next(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = {"flaky"}
    server.failures = 10
    backup = tmp_path / "backup.bin"
    backup.write_bytes(PAYLOAD)
    dest = fetch([server.url + "/a", str(backup)], tmp_path / "a", retries=2, backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 2


def test_all_sources_failing_lists_each_with_its_error(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = {"flaky"}
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
    server.modes["/a"] = {"drop"}
    dest = fetch([server.url + "/a"], tmp_path / "a", md5=PAYLOAD_MD5, backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/a", None), ("/a", f"bytes={len(PAYLOAD) // 2}-")]


def test_restarts_when_the_server_ignores_range(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = {"norange"}
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


def test_existing_dest_with_a_wrong_hash_is_fetched_again(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "a"
    src.write_bytes(PAYLOAD)
    dest.write_bytes(b"stale")
    fetch([str(src)], dest, sha256=PAYLOAD_SHA256)
    assert dest.read_bytes() == PAYLOAD


def test_sha256_and_size_are_checked_with_md5(tmp_path, server):
    server.files["/a"] = PAYLOAD
    dest = fetch(
        [server.url + "/a"],
        tmp_path / "a",
        md5=PAYLOAD_MD5,
        sha256=PAYLOAD_SHA256.upper(),
        size=len(PAYLOAD),
        timeout=5,
    )
    assert dest.read_bytes() == PAYLOAD


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (
            {"sha256": "ab" * 32},
            f"a.bin: sha256 mismatch: expected {'ab' * 32}, got {PAYLOAD_SHA256}",
        ),
        ({"size": 1234}, f"a.bin: size mismatch: expected 1234 bytes, got {len(PAYLOAD)}"),
        ({"size": 300_000}, f"a.bin: size mismatch: expected 300000 bytes, got {len(PAYLOAD)}"),
    ],
)
def test_a_sha256_or_size_mismatch_is_permanent_and_named(tmp_path, server, check, message):
    server.files["/a"] = PAYLOAD
    out = tmp_path / "out"
    with pytest.raises(DownloadError) as info:
        fetch([server.url + "/a"], out / "a.bin", md5=PAYLOAD_MD5, backoff=0, timeout=5, **check)
    assert f"{server.url}/a: {message}" in str(info.value)
    assert len(server.requests) == 1
    assert _listing(out) == []


def test_a_part_longer_than_the_expected_size_is_dropped_before_asking(tmp_path, server):
    server.files["/a"] = PAYLOAD
    (tmp_path / "a.part").write_bytes(PAYLOAD + b"extra")
    fetch([server.url + "/a"], tmp_path / "a", size=len(PAYLOAD), md5=PAYLOAD_MD5, timeout=5)
    assert server.requests == [("/a", None)]


def test_a_complete_part_is_verified_without_a_request(tmp_path, server):
    server.files["/a"] = PAYLOAD
    (tmp_path / "a.part").write_bytes(PAYLOAD)
    dest = fetch([server.url + "/a"], tmp_path / "a", size=len(PAYLOAD), md5=PAYLOAD_MD5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == []
    assert _listing(tmp_path) == ["a"]


def test_a_resumed_file_that_fails_its_check_is_downloaded_whole_once(tmp_path, server):
    server.files["/a"] = PAYLOAD
    (tmp_path / "a.part").write_bytes(b"x" * HALF)  # left by an earlier call, from elsewhere
    dest = fetch([server.url + "/a"], tmp_path / "a", md5=PAYLOAD_MD5, retries=1, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/a", f"bytes={HALF}-"), ("/a", None)]


def test_a_wrong_file_is_given_up_after_the_whole_download_fails_too(tmp_path, server):
    server.files["/a"] = PAYLOAD
    (tmp_path / "a.part").write_bytes(PAYLOAD[:HALF])
    wrong = "1" * 32
    with pytest.raises(DownloadError, match=f"md5 mismatch: expected {wrong}, got {PAYLOAD_MD5}"):
        fetch([server.url + "/a"], tmp_path / "a", md5=wrong, retries=3, backoff=0, timeout=5)
    assert server.requests == [("/a", f"bytes={HALF}-"), ("/a", None)]
    assert _listing(tmp_path) == []


def test_a_dropped_connection_restarts_when_the_server_ignores_range(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = {"drop", "norange"}
    dest = fetch([server.url + "/a"], tmp_path / "a", md5=PAYLOAD_MD5, backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/a", None), ("/a", f"bytes={HALF}-")]


def test_without_content_length_the_expected_size_detects_a_drop(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = {"drop", "nolength"}
    dest = fetch([server.url + "/a"], tmp_path / "a", size=len(PAYLOAD), backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/a", None), ("/a", f"bytes={HALF}-")]


def test_a_resume_at_the_wrong_offset_discards_the_part(tmp_path, server):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = {"badrange"}
    (tmp_path / "a.part").write_bytes(PAYLOAD[:HALF])
    dest = fetch([server.url + "/a"], tmp_path / "a", md5=PAYLOAD_MD5, backoff=0, timeout=5)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/a", f"bytes={HALF}-"), ("/a", None)]


def test_backoff_doubles_until_the_source_is_given_up(tmp_path, server, monkeypatch):
    server.files["/a"] = PAYLOAD
    server.modes["/a"] = {"flaky"}
    server.failures = 10
    delays = []
    monkeypatch.setattr(download.time, "sleep", delays.append)
    with pytest.raises(DownloadError) as info:
        fetch([server.url + "/a"], tmp_path / "a", retries=4, backoff=0.25, timeout=5)
    assert delays == [0.25, 0.5, 1.0]
    assert len(server.requests) == 4
    assert "HTTP Error 500: Internal Server Error (gave up after 4 attempts)" in str(info.value)


def test_a_permanent_error_is_not_retried_and_not_slept_on(tmp_path, server, monkeypatch):
    delays = []
    monkeypatch.setattr(download.time, "sleep", delays.append)
    with pytest.raises(DownloadError) as info:
        fetch([server.url + "/gone"], tmp_path / "a", retries=5, backoff=1, timeout=5)
    assert f"{server.url}/gone: HTTP 404 Not Found" in str(info.value)
    assert delays == []
    assert len(server.requests) == 1


def test_argument_validation(tmp_path):
    with pytest.raises(TypeError, match="sequence"):
        fetch("http://x/a", tmp_path / "a")
    with pytest.raises(ValueError, match="empty"):
        fetch([], tmp_path / "a")
    with pytest.raises(ValueError, match="retries"):
        fetch(["x"], tmp_path / "a", retries=0)
    with pytest.raises(ValueError, match="backoff must be >= 0"):
        fetch(["x"], tmp_path / "a", backoff=-1)
    with pytest.raises(ValueError, match="size must be >= 0, got -1"):
        fetch(["x"], tmp_path / "a", size=-1)
    with pytest.raises(ValueError, match="md5 must be 32 hex digits, got 'abc'"):
        fetch(["x"], tmp_path / "a", md5="abc")
    with pytest.raises(ValueError, match="sha256 must be 64 hex digits"):
        fetch(["x"], tmp_path / "a", sha256="g" * 64)


def _client_error(code, status):
    return ClientError(
        {
            "Error": {"Code": code, "Message": f"{code} here"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "GetObject",
    )


class _BreakingStream(io.BytesIO):
    """A raw HTTP body that breaks the connection after ``limit`` bytes, as urllib3 reports it."""

    def __init__(self, data, limit=None):
        super().__init__(data)
        self.limit = limit

    def read(self, amount=-1):
        if self.limit is not None and self.tell() >= self.limit:
            raise urllib3.exceptions.ProtocolError("Connection broken: peer reset")
        if self.limit is not None and amount is not None and amount >= 0:
            amount = min(amount, self.limit - self.tell())
        return super().read(amount)


class _FakeS3:
    """get_object with S3's answers: ranged 206s, InvalidRange, NoSuchKey, 5xx, a broken stream.

    ``failures`` answers 500 to that many first calls; ``drop_first`` breaks the first body
    half-way; ``ignore_range`` answers every request with the whole object (status 200).
    """

    def __init__(self, objects, failures=0, drop_first=False, ignore_range=False):
        self.objects, self.calls = objects, []
        self.failures, self.drop_first, self.ignore_range = failures, drop_first, ignore_range

    def get_object(self, Bucket, Key, Range=None):
        self.calls.append((Bucket, Key, Range))
        if len(self.calls) <= self.failures:
            raise _client_error("InternalError", 500)
        data = self.objects.get((Bucket, Key))
        if data is None:
            raise _client_error("NoSuchKey", 404)
        response = {"ResponseMetadata": {"HTTPStatusCode": 200}}
        if Range and not self.ignore_range:
            start = int(Range.removeprefix("bytes=").rstrip("-"))
            if start >= len(data):
                raise _client_error("InvalidRange", 416)
            response["ResponseMetadata"]["HTTPStatusCode"] = 206
            response["ContentRange"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            data = data[start:]
        limit = len(data) // 2 if self.drop_first and len(self.calls) == 1 else None
        response["Body"] = StreamingBody(_BreakingStream(data, limit), len(data))
        response["ContentLength"] = len(data)
        return response


@pytest.fixture
def fake_s3(monkeypatch):
    """Install a _FakeS3 in place of boto3; ``made`` records the endpoint each client got."""
    state = types.SimpleNamespace(client=_FakeS3({("bucket", "dir/a.gz"): PAYLOAD}), made=[])

    def make_client(endpoint_url, timeout):
        state.made.append(endpoint_url)
        return state.client

    monkeypatch.setattr(s3_source, "s3_client", make_client)
    return state


def test_s3_source_reads_bucket_and_key(tmp_path, fake_s3):
    dest = fetch(["s3://bucket/dir/a.gz"], tmp_path / "a.gz", md5=PAYLOAD_MD5)
    assert dest.read_bytes() == PAYLOAD
    assert fake_s3.client.calls == [("bucket", "dir/a.gz", None)]
    assert fake_s3.made == [None]


def test_s3_endpoint_parameter_reaches_the_client(tmp_path, fake_s3):
    fetch(["s3://bucket/dir/a.gz"], tmp_path / "a.gz", s3_endpoint_url="http://127.0.0.1:9")
    assert fake_s3.made == ["http://127.0.0.1:9"]


def test_s3_resumes_a_part_with_a_ranged_get(tmp_path, fake_s3):
    (tmp_path / "a.gz.part").write_bytes(PAYLOAD[:HALF])
    dest = fetch(["s3://bucket/dir/a.gz"], tmp_path / "a.gz", md5=PAYLOAD_MD5)
    assert dest.read_bytes() == PAYLOAD
    assert fake_s3.client.calls == [("bucket", "dir/a.gz", f"bytes={HALF}-")]


def test_s3_resumes_after_a_broken_stream(tmp_path, fake_s3):
    fake_s3.client.drop_first = True
    dest = fetch(["s3://bucket/dir/a.gz"], tmp_path / "a.gz", md5=PAYLOAD_MD5, backoff=0)
    assert dest.read_bytes() == PAYLOAD
    assert fake_s3.client.calls == [
        ("bucket", "dir/a.gz", None),
        ("bucket", "dir/a.gz", f"bytes={HALF}-"),
    ]


def test_s3_restarts_when_the_part_is_too_long_or_the_range_is_ignored(tmp_path, fake_s3):
    (tmp_path / "a.gz.part").write_bytes(PAYLOAD + b"more")
    fetch(["s3://bucket/dir/a.gz"], tmp_path / "a.gz", md5=PAYLOAD_MD5)
    assert [c[2] for c in fake_s3.client.calls] == [f"bytes={len(PAYLOAD) + 4}-", None]
    fake_s3.client.ignore_range = True
    (tmp_path / "b.gz.part").write_bytes(b"not a prefix")
    dest = fetch(["s3://bucket/dir/a.gz"], tmp_path / "b.gz", md5=PAYLOAD_MD5)
    assert dest.read_bytes() == PAYLOAD


def test_s3_server_errors_are_retried_and_missing_keys_are_not(tmp_path, fake_s3, monkeypatch):
    delays = []
    monkeypatch.setattr(download.time, "sleep", delays.append)
    fake_s3.client.failures = 2
    fetch(["s3://bucket/dir/a.gz"], tmp_path / "a.gz", retries=3, backoff=0.1)
    assert delays == [0.1, 0.2]
    fake_s3.client.calls.clear()
    fake_s3.client.failures = 0
    with pytest.raises(DownloadError) as info:
        fetch(["s3://bucket/nope", "s3://nobucket"], tmp_path / "b.gz", retries=3, backoff=0.1)
    assert fake_s3.client.calls == [("bucket", "nope", None)]
    message = str(info.value)
    assert "s3://bucket/nope: S3 NoSuchKey: NoSuchKey here" in message
    assert "s3://nobucket: s3://nobucket: expected s3://bucket/key" in message
    assert delays == [0.1, 0.2]


def test_s3_client_endpoint_precedence(monkeypatch, tmp_path):
    """The real boto3 client (no request is sent): parameter, then _S3 variable, then global."""
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert s3_source.s3_client(None, 5).meta.endpoint_url.startswith("https://s3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    client = s3_source.s3_client(None, 5)
    assert client.meta.endpoint_url == "http://127.0.0.1:9"
    assert client.meta.config.s3 == {"addressing_style": "path"}
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:10")
    assert s3_source.s3_client(None, 5).meta.endpoint_url == "http://127.0.0.1:10"
    assert s3_source.s3_client("http://127.0.0.1:11", 5).meta.endpoint_url == (
        "http://127.0.0.1:11"
    )


def test_unreachable_s3_endpoint_is_retried_then_the_next_mirror_used(tmp_path, monkeypatch):
    """The real boto3 against a closed loopback port: a connection error is transient."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with socket.socket() as sock:  # bind, then close: nothing listens on this port any more
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    backup = tmp_path / "backup"
    backup.write_bytes(PAYLOAD)
    sources = ["s3://bucket/a.gz", str(backup)]
    dest = fetch(sources, tmp_path / "a.gz", retries=2, backoff=0, s3_endpoint_url=endpoint)
    assert dest.read_bytes() == PAYLOAD
    with pytest.raises(DownloadError) as info:
        fetch(sources[:1], tmp_path / "b.gz", retries=2, backoff=0, s3_endpoint_url=endpoint)
    assert "s3://bucket/a.gz: Could not connect to the endpoint URL" in str(info.value)
    assert "(gave up after 2 attempts)" in str(info.value)
