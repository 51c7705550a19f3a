"""The service's index read from S3 (a real SeaweedFS server, tests/integration/conftest.py):
served from the prefix, a new index at the same prefix served after /admin/reload, a missing
prefix reported by /readyz, and the local copy never half an index."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from shdh.ranking.index_file import INDEX_ARRAYS, INDEX_RECORD
from shdh.serving import create_app
from shdh.serving.deploy import publish_index, request_reload
from shdh.serving.index_source import IndexSourceError, S3Index, index_source
from tests.integration.conftest import s3_env, s3_server  # noqa: F401 (fixtures)
from tests.serving.server import AUTH, TOKEN, make_index, serving, wait_until

pytestmark = pytest.mark.integration


def upload(server, folder: Path, prefix: str) -> str:
    client = server.client()
    for name in (INDEX_ARRAYS, INDEX_RECORD):
        client.upload_file(str(folder / name), server.bucket, f"{prefix}/{name}")
    return f"s3://{server.bucket}/{prefix}"


@pytest.fixture
def s3(s3_env, monkeypatch):  # noqa: F811 (the fixture imported above)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
    return s3_env


def version(url: str) -> dict:
    return requests.get(f"{url}/readyz", timeout=5).json()["version"]


def test_an_uploaded_index_is_served_and_a_new_one_after_reload(s3, tmp_path):
    url = upload(s3, make_index(tmp_path / "a", seed=0, n=300), "serving/reload")
    cache = tmp_path / "cache"
    with serving(create_app(index_source(url, cache), token=TOKEN)) as base:
        assert version(base)["n_items"] == 300
        query = {"codes": ["0000"], "k": 5}
        first = requests.post(f"{base}/search/codes", json=query, headers=AUTH, timeout=5)
        assert first.status_code == 200 and len(first.json()["results"][0]["hits"]) == 5

        upload(s3, make_index(tmp_path / "b", seed=1, n=120), "serving/reload")
        assert version(base)["n_items"] == 300  # nothing changes until the reload
        reloaded = requests.post(f"{base}/admin/reload", headers=AUTH, timeout=30)
        assert reloaded.status_code == 200
        assert reloaded.json()["version"] == {**version(base), "generation": 2}
        assert version(base)["n_items"] == 120
    # The cache holds the one index it serves, and nothing left over from the copies.
    assert sorted(p.name for p in cache.iterdir()) == ["index"]
    assert {p.name for p in (cache / "index").iterdir()} == {INDEX_ARRAYS, INDEX_RECORD}


def test_the_deploy_step_publishes_an_index_and_reloads_the_service(s3, tmp_path):
    """What the pipeline's deploy task does (components/deploy_index.py), against the service."""
    url = f"s3://{s3.bucket}/serving/deploy"
    publish_index(make_index(tmp_path / "a", n=80), url)
    with serving(create_app(index_source(url, tmp_path / "cache"), token=TOKEN)) as base:
        assert version(base)["n_items"] == 80
        publish_index(make_index(tmp_path / "b", seed=3, n=40), url)
        assert request_reload(base + "/", TOKEN) == {**version(base), "generation": 2}
        assert version(base)["n_items"] == 40
        with pytest.raises(RuntimeError, match=f"{base}: the reload failed \\(401\\)"):
            request_reload(base, "not-the-token-0123456789")
        s3.client().delete_object(Bucket=s3.bucket, Key=f"serving/deploy/{INDEX_RECORD}")
        with pytest.raises(RuntimeError, match="409.*still serving generation 2.*no index.json"):
            request_reload(base, TOKEN)
    with pytest.raises(FileNotFoundError, match="no index.npz; not an index folder"):
        publish_index(tmp_path, url)
    with pytest.raises(RuntimeError, match="cannot reach the service"):
        request_reload(base, TOKEN)


def test_a_missing_prefix_is_the_reason_the_service_is_not_ready(s3, tmp_path):
    url = f"s3://{s3.bucket}/serving/nothing-here"
    with serving(create_app(index_source(url, tmp_path / "cache"), token=TOKEN), False) as base:

        def refused() -> bool:
            answer = requests.get(f"{base}/readyz", headers=AUTH, timeout=5)
            return answer.status_code == 503 and "no index.npz" in answer.json()["detail"]

        wait_until(refused, "/readyz to give the reason")
        detail = requests.get(f"{base}/readyz", headers=AUTH, timeout=5).json()["detail"]
        assert f"failed: index {url}: no {INDEX_ARRAYS} at {url}/{INDEX_ARRAYS}" in detail


def test_a_failed_copy_keeps_the_previous_one_whole(s3, tmp_path):
    """The arrays are there, the record is not: the copy fails and the cached index is the
    previous one, both files of it."""
    good = upload(s3, make_index(tmp_path / "a", n=50), "serving/half")
    source = S3Index(good, tmp_path / "cache")
    folder = source.fetch()
    record = (folder / INDEX_RECORD).read_bytes()
    s3.client().delete_object(Bucket=s3.bucket, Key=f"serving/half/{INDEX_RECORD}")
    with pytest.raises(IndexSourceError, match=f"no {INDEX_RECORD} at {good}/{INDEX_RECORD}"):
        source.fetch()
    assert (folder / INDEX_RECORD).read_bytes() == record
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["index"]


def test_refused_credentials_name_the_prefix(s3, tmp_path, monkeypatch):
    url = upload(s3, make_index(tmp_path / "a", n=20), "serving/creds")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(
        IndexSourceError, match=f"index {url}: .*ClientError.*AWS_SECRET_ACCESS_KEY"
    ):
        S3Index(url, tmp_path / "cache").fetch()


@pytest.mark.parametrize("url", ["s3://", "s3://bucket", "s3://bucket/", "http://bucket/prefix"])
def test_a_malformed_url_is_refused(url):
    with pytest.raises(IndexSourceError, match="expected s3://bucket/prefix"):
        S3Index(url)


def test_a_cache_folder_is_for_s3_only(tmp_path):
    with pytest.raises(ValueError, match="--cache-dir: only with an s3:// --index"):
        index_source(tmp_path, tmp_path / "cache")
    assert index_source(tmp_path).fetch() == tmp_path
