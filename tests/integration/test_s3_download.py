"""fetch() and fetch_raw() against a real S3 server (SeaweedFS), through boto3 and signed requests.

The objects are gzip IDX files in Fashion-MNIST's upstream names and layout, as a team bucket
mirroring the data set would hold them.
"""

from __future__ import annotations

import gzip
import hashlib
import logging

import pytest

from shdh.data.download import DownloadError, fetch
from shdh.data.fashion_mnist import FILES, fetch_raw
from tests.conftest import write_fashion_mnist_raw

pytestmark = pytest.mark.integration

PREFIX = "mirror/fashion-mnist"
IMAGES = FILES["train_images"] + ".gz"


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture(scope="module")
def published(s3_server, tmp_path_factory) -> dict[str, bytes]:
    """Upload the four .gz files of a tiny Fashion-MNIST set; return name -> decompressed bytes."""
    raw = write_fashion_mnist_raw(tmp_path_factory.mktemp("fashion") / "raw")
    client = s3_server.client()
    contents = {}
    for name in FILES.values():
        data = (raw / name).read_bytes()
        contents[name] = data
        body = gzip.compress(data, mtime=0)
        client.put_object(Bucket=s3_server.bucket, Key=f"{PREFIX}/{name}.gz", Body=body)
        contents[name + ".gz"] = body
    return contents


def _url(s3_server, key: str) -> str:
    return f"s3://{s3_server.bucket}/{key}"


def test_endpoint_from_the_environment(s3_env, published, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
    body = published[IMAGES]
    dest = fetch(
        [_url(s3_env, f"{PREFIX}/{IMAGES}")],
        tmp_path / IMAGES,
        md5=_md5(body),
        sha256=hashlib.sha256(body).hexdigest(),
        size=len(body),
    )
    assert dest.read_bytes() == body
    assert sorted(p.name for p in tmp_path.iterdir()) == [IMAGES]


def test_endpoint_from_the_parameter_wins_over_the_environment(
    s3_env, published, tmp_path, monkeypatch
):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # nothing listens there
    body = published[IMAGES]
    dest = fetch(
        [_url(s3_env, f"{PREFIX}/{IMAGES}")],
        tmp_path / IMAGES,
        md5=_md5(body),
        retries=1,
        s3_endpoint_url=s3_env.endpoint,
    )
    assert dest.read_bytes() == body


def test_fetch_raw_reads_a_bucket_prefix(s3_env, published, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
    out = fetch_raw(tmp_path / "raw", sources=[_url(s3_env, PREFIX)], verify=False)
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES.values())
    for name in FILES.values():
        assert (out / name).read_bytes() == published[name]


def test_a_wrong_key_falls_through_to_the_next_mirror_at_once(s3_env, published, tmp_path, caplog):
    body = published[IMAGES]
    sources = [_url(s3_env, f"{PREFIX}/no-such-file.gz"), _url(s3_env, f"{PREFIX}/{IMAGES}")]
    with caplog.at_level(logging.INFO, logger="shdh.data.download"):
        dest = fetch(
            sources, tmp_path / IMAGES, md5=_md5(body), retries=3, s3_endpoint_url=s3_env.endpoint
        )
    assert dest.read_bytes() == body
    attempts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fetching")]
    assert attempts == [f"fetching {IMAGES} from {s} (attempt 1/3)" for s in sources]


def test_every_missing_source_is_listed_with_its_s3_error(s3_env, tmp_path):
    sources = [_url(s3_env, "absent/key.gz"), "s3://no-such-bucket-here/key.gz"]
    with pytest.raises(DownloadError) as info:
        fetch(sources, tmp_path / "key.gz", retries=3, backoff=0, s3_endpoint_url=s3_env.endpoint)
    lines = str(info.value).splitlines()
    assert lines[0] == "key.gz: every source failed:"
    assert lines[1].startswith(f"  {sources[0]}: S3 NoSuchKey: ")
    assert lines[2].startswith(f"  {sources[1]}: S3 NoSuchBucket: ")
    assert list(tmp_path.iterdir()) == []


def test_a_corrupted_object_fails_md5_and_the_next_mirror_is_used(s3_env, published, tmp_path):
    body = published[IMAGES]
    corrupted = bytearray(body)
    corrupted[len(body) // 2] ^= 0xFF
    key = "corrupted/" + IMAGES
    s3_env.client().put_object(Bucket=s3_env.bucket, Key=key, Body=bytes(corrupted))
    bad, good = _url(s3_env, key), _url(s3_env, f"{PREFIX}/{IMAGES}")

    with pytest.raises(DownloadError) as info:
        fetch([bad], tmp_path / IMAGES, md5=_md5(body), s3_endpoint_url=s3_env.endpoint)
    expected = f"{bad}: {IMAGES}: md5 mismatch: expected {_md5(body)}, got {_md5(corrupted)}"
    assert expected in str(info.value)
    assert list(tmp_path.iterdir()) == []

    dest = fetch([bad, good], tmp_path / IMAGES, md5=_md5(body), s3_endpoint_url=s3_env.endpoint)
    assert dest.read_bytes() == body


def test_a_part_is_resumed_with_a_ranged_get(s3_env, published, tmp_path):
    """Without a checksum the kept bytes stay: proof that only the rest was asked for."""
    body = published[IMAGES]
    half = len(body) // 2
    (tmp_path / "a.gz.part").write_bytes(b"\0" * half)
    dest = fetch(
        [_url(s3_env, f"{PREFIX}/{IMAGES}")], tmp_path / "a.gz", s3_endpoint_url=s3_env.endpoint
    )
    assert dest.read_bytes() == b"\0" * half + body[half:]

    (tmp_path / "b.gz.part").write_bytes(b"\0" * half)  # with a checksum: detected, re-fetched
    dest = fetch(
        [_url(s3_env, f"{PREFIX}/{IMAGES}")],
        tmp_path / "b.gz",
        md5=_md5(body),
        s3_endpoint_url=s3_env.endpoint,
    )
    assert dest.read_bytes() == body


def test_a_part_longer_than_the_object_is_restarted(s3_env, published, tmp_path):
    body = published[IMAGES]
    (tmp_path / "a.gz.part").write_bytes(body + b"trailing junk")
    dest = fetch(
        [_url(s3_env, f"{PREFIX}/{IMAGES}")], tmp_path / "a.gz", s3_endpoint_url=s3_env.endpoint
    )
    assert dest.read_bytes() == body


def test_a_wrong_secret_is_refused_and_not_retried(
    s3_env, published, tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    source = _url(s3_env, f"{PREFIX}/{IMAGES}")
    with caplog.at_level(logging.INFO, logger="shdh.data.download"):
        with pytest.raises(DownloadError) as info:
            fetch([source], tmp_path / IMAGES, retries=3, s3_endpoint_url=s3_env.endpoint)
    assert f"{source}: S3 SignatureDoesNotMatch: " in str(info.value)
    assert "(gave up" not in str(info.value)
    assert sum(r.getMessage().startswith("fetching") for r in caplog.records) == 1


def test_a_full_disk_is_named_when_the_server_never_becomes_writable():
    from tests.integration.conftest import low_disk_hint

    line = "I1126 disk_location.go:731 dir /tmp/x/data disk free 0.75% < required 1.00%"
    assert "disk is too full" in low_disk_hint(f"start\n{line}\nheartbeat\n")
    assert line.strip() in low_disk_hint(line)
    assert low_disk_hint("I1126 volume server started\n") == ""
