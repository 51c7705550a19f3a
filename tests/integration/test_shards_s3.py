"""A sharded dataset read from a real S3 server (SeaweedFS): meta.json, labels and ids at once, each
shard downloaded into the cache the first time a row of it is read (only the shards asked for),
verified against meta.json's SHA-256, shared by worker processes."""

from __future__ import annotations

import json
import multiprocessing
import pickle

import numpy as np
import pytest
import torch

from shdh.data.dataset import Dataset, load_dataset, save_dataset
from shdh.data.download import DownloadError
from shdh.data.idx import DataFormatError
from shdh.data.shards import MIB, ShardedImages
from shdh.data.shards_s3 import load_s3_dataset
from shdh.training.loader import Loader

pytestmark = pytest.mark.integration

N, SHAPE, ROWS = 30, (8, 8, 3), 7  # five shards: 7, 7, 7, 7, 2 rows


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    rng = np.random.default_rng(0)
    ds = Dataset(
        rng.integers(0, 256, (N, *SHAPE), dtype=np.uint8),
        np.array([f"a/b{i % 3}" for i in range(N)]),
        np.arange(100, 100 + N, dtype=np.int64),
        "toy",
    )
    root = tmp_path_factory.mktemp("local")
    save_dataset(ds, root / "sharded", shard_mb=ROWS * 192 / MIB)
    save_dataset(ds, root / "plain")
    return root


def _upload(server, folder, prefix):
    client = server.client()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"{prefix}/{path.relative_to(folder).as_posix()}"
        client.put_object(Bucket=server.bucket, Key=key, Body=path.read_bytes())
    return f"s3://{server.bucket}/{prefix}"


@pytest.fixture(scope="module")
def published(s3_server, local):
    return {
        "sharded": _upload(s3_server, local / "sharded", "datasets/toy"),
        "plain": _upload(s3_server, local / "plain", "datasets/toy-plain"),
    }


@pytest.fixture
def env(s3_env, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
    return s3_env


def _cached(cache):
    return sorted(p.name for p in cache.glob("*.npy"))


def _digests(local):
    meta = json.loads((local / "sharded" / "meta.json").read_text())
    return [entry["sha256"] for entry in meta["shards"]]


def test_rows_are_read_fetching_only_their_shards(env, published, local, tmp_path):
    want = load_dataset(local / "sharded")
    ds = load_s3_dataset(published["sharded"], tmp_path / "cache")
    assert isinstance(ds.images, ShardedImages) and ds.images.shape == (N, *SHAPE)
    assert np.array_equal(ds.labels, want.labels) and np.array_equal(ds.ids, want.ids)
    assert _cached(tmp_path / "cache") == []  # nothing fetched before a row is read
    assert np.array_equal(ds.images[[1, 6, 0]], want.images[[1, 6, 0]])
    assert len(_cached(tmp_path / "cache")) == 1
    assert np.array_equal(ds.images[29], want.images[29])
    assert len(_cached(tmp_path / "cache")) == 2
    assert np.array_equal(ds.images[:], want.images[:])
    assert _cached(tmp_path / "cache") == sorted(f"{d}.npy" for d in _digests(local))
    # a second reader finds them cached: nothing is fetched again
    again = load_s3_dataset(published["sharded"], tmp_path / "cache", endpoint_url=env.endpoint)
    assert np.array_equal(again.images[:], want.images[:])
    assert not list((tmp_path / "cache").glob("*.part"))


def _read_all(images):
    return images[np.arange(len(images))[::-1]]


def test_worker_processes_share_the_cache(env, published, local, tmp_path):
    ds = load_s3_dataset(published["sharded"], tmp_path / "cache")
    assert len(pickle.dumps(ds.images)) < 4000
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(_read_all, [ds.images] * 2)
    want = load_dataset(local / "sharded").images[:][::-1]
    assert all(np.array_equal(r, want) for r in results)
    assert len(_cached(tmp_path / "cache")) == 5
    loader = Loader(ds.images, np.arange(N), 8, 2)
    try:
        order = torch.randperm(N, generator=torch.Generator().manual_seed(0))
        got = np.concatenate([b.numpy() for b in loader.epoch(order)])
    finally:
        loader.close()
    assert np.array_equal(got, want[::-1][order.numpy()])


def test_a_corrupt_shard_is_refused_and_not_cached(env, s3_server, local, tmp_path):
    url = _upload(s3_server, local / "sharded", "datasets/corrupt")
    client = s3_server.client()
    body = (local / "sharded" / "images" / "shard-00001.npy").read_bytes()
    key = "datasets/corrupt/images/shard-00001.npy"
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=body[:-1] + b"\x00")
    ds = load_s3_dataset(url, tmp_path / "cache")
    assert np.array_equal(ds.images[0], load_dataset(local / "sharded").images[0])
    with pytest.raises(DownloadError, match=r"shard-00001\.npy|sha256"):
        ds.images[ROWS]
    assert len(_cached(tmp_path / "cache")) == 1


def test_a_missing_dataset_or_one_without_shards_is_named(env, published, tmp_path):
    with pytest.raises(DataFormatError, match=r"datasets/nothing/meta\.json: missing"):
        load_s3_dataset(f"s3://{env.bucket}/datasets/nothing", tmp_path / "cache")
    with pytest.raises(DataFormatError, match=r"toy-plain/meta\.json: shards: missing"):
        load_s3_dataset(published["plain"], tmp_path / "cache")
