"""A sharded dataset read from an object store: s3://bucket/prefix holding a dataset directory
as shdh.data.dataset writes it with shards (meta.json, labels.npy, ids.npy, images/shard-*.npy).

meta.json, labels and ids are read at once (they are small). A shard is downloaded into a local
cache directory the first time a row of it is read, then memory-mapped: a job reads only the
shards it needs, and a second epoch reads the disk, not the network. Cached shards are named by
their SHA-256 (meta.json records it), so versions of a dataset share the shards they have in
common and never mix; a download is checked against it before it is renamed into place
(shdh.data.download.fetch: retries, resume, verification). A lock file per shard lets one
process download it while the others (DataLoader workers) wait for it and then map the same
file. The endpoint and credentials are those of shdh.data.s3_source: AWS_ENDPOINT_URL_S3 or
AWS_ENDPOINT_URL for a MinIO or SeaweedFS server, the usual AWS variables and files.
"""

from __future__ import annotations

import fcntl
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shdh.data.dataset import Dataset, check_loaded, read_meta
from shdh.data.download import fetch
from shdh.data.idx import DataFormatError
from shdh.data.s3_source import s3_client
from shdh.data.shards import ShardedImages, check_shard_list

TIMEOUT_S = 60.0


def split_s3_url(url: str) -> tuple[str, str]:
    """(bucket, key prefix without a trailing "/") of s3://bucket/prefix."""
    if not url.startswith("s3://"):
        raise ValueError(f"{url}: expected s3://bucket/prefix")
    bucket, _, prefix = url[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"{url}: expected s3://bucket/prefix")
    return bucket, prefix.strip("/")


@dataclass
class S3Shards:
    """Shards under s3://bucket/prefix, fetched on first use into cache_dir/SHA256.npy. Pickles
    as these settings; each process opens its own client when it first downloads."""

    url: str
    cache_dir: Path
    files: tuple[str, ...]
    digests: tuple[str, ...]
    endpoint_url: str | None = None
    timeout: float = TIMEOUT_S

    def path(self, index: int) -> Path:
        """Shard `index` as a local file, downloaded and verified first if not cached."""
        dest = self.cache_dir / f"{self.digests[index]}.npy"
        if dest.is_file():  # only ever renamed there once verified
            return dest
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / f"{self.digests[index]}.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching the same shard
            if not dest.is_file():
                fetch(
                    [f"{self.url.rstrip('/')}/{self.files[index]}"],
                    dest,
                    sha256=self.digests[index],
                    timeout=self.timeout,
                    s3_endpoint_url=self.endpoint_url,
                )
        return dest


@dataclass
class _Objects:
    """The small objects of a dataset under a prefix, read whole into memory."""

    url: str
    endpoint_url: str | None
    timeout: float
    client: Any = field(default=None, repr=False)

    def read(self, name: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, prefix = split_s3_url(self.url)
        key = f"{prefix}/{name}" if prefix else name
        if self.client is None:
            self.client = s3_client(self.endpoint_url, self.timeout)
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                raise DataFormatError(f"s3://{bucket}/{key}: missing") from exc
            raise OSError(f"s3://{bucket}/{key}: cannot read: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(f"s3://{bucket}/{key}: cannot read: {exc}") from exc

    def array(self, name: str) -> np.ndarray:
        try:
            return np.load(io.BytesIO(self.read(name)), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            if isinstance(exc, DataFormatError):
                raise
            raise DataFormatError(f"{self.url.rstrip('/')}/{name}: unreadable .npy: {exc}") from exc


def load_s3_dataset(
    url: str,
    cache_dir: str | os.PathLike[str],
    *,
    endpoint_url: str | None = None,
    timeout: float = TIMEOUT_S,
) -> Dataset:
    """The sharded dataset at s3://bucket/prefix: labels, ids and meta.json read now and checked
    as load_dataset checks a directory; images as a ShardedImages whose shards are fetched into
    cache_dir when first read. A dataset stored as one images.npy is refused (shard it:
    data.shard_mb, or shdh.data.dataset.save_dataset with shard_mb)."""
    url = url.rstrip("/")
    objects = _Objects(url, endpoint_url, timeout)
    meta_url = f"{url}/meta.json"
    meta = read_meta(objects.read("meta.json").decode("utf-8", "replace"), meta_url)
    if "shards" not in meta:
        raise DataFormatError(
            f"{meta_url}: shards: missing; only a sharded dataset is read from S3 (write it with "
            "data.shard_mb set)"
        )
    shards = check_shard_list(meta, meta_url)
    source = S3Shards(
        url,
        Path(cache_dir),
        tuple(entry["file"] for entry in shards),
        tuple(entry["sha256"] for entry in shards),
        endpoint_url,
        timeout,
    )
    images = ShardedImages(source, [entry["rows"] for entry in shards], meta["image_shape"])
    ds = Dataset(images, objects.array("labels.npy"), objects.array("ids.npy"), str(meta["name"]))
    return check_loaded(ds, meta, url)
