"""Where the service reads its index from: a local folder, or an S3 prefix copied into a cache.

An S3 prefix (s3://BUCKET/PREFIX, holding what `shdh index` writes) is downloaded anew on every
load, so a reload picks up a new index uploaded to the same prefix. The copy is made in a
temporary folder of the cache and renamed over the previous one only once both files are there
(shdh.runtime.atomic.atomic_dir), so the folder the service loads is never half an index. The
objects are read as the train steps read their checkpoints
(shdh.tracking.checkpoint_sync.StoreFolder), with the same endpoint and credentials
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Protocol

from shdh.ranking.index_file import INDEX_ARRAYS, INDEX_RECORD
from shdh.runtime.atomic import atomic_dir

# The record last: a reader that sees the new record has the new arrays beside it in the copy.
INDEX_FILES = (INDEX_ARRAYS, INDEX_RECORD)


class IndexSourceError(RuntimeError):
    """The index cannot be fetched: a malformed URL, a missing object, refused credentials."""


class IndexSource(Protocol):
    def fetch(self) -> Path:
        """A local folder holding the index to load now."""
        ...

    def describe(self) -> str: ...


class LocalIndex:
    """An index folder on this machine, loaded where it is."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def fetch(self) -> Path:
        return self.folder

    def describe(self) -> str:
        return str(self.folder)


class S3Index:
    """The index at s3://BUCKET/PREFIX, copied into `cache_dir`/index on every fetch (a new
    temporary folder when none is given)."""

    def __init__(self, url: str, cache_dir: str | Path | None = None, client: Any = None) -> None:
        from shdh.tracking.checkpoint_sync import CheckpointStoreError, StoreFolder

        try:
            self.store = StoreFolder(url, client=client)
        except CheckpointStoreError as exc:
            raise IndexSourceError(f"--index: expected s3://bucket/prefix, got {url!r}") from exc
        self.url = self.store.url
        self.cache_dir = None if cache_dir is None else Path(cache_dir)

    def describe(self) -> str:
        return self.url

    def fetch(self) -> Path:
        from shdh.tracking.checkpoint_sync import CheckpointStoreError

        if self.cache_dir is None:  # made on the first fetch: publishing needs none
            self.cache_dir = Path(tempfile.mkdtemp(prefix="shdh-serve-"))
        folder = self.cache_dir / "index"
        try:
            with atomic_dir(folder) as tmp:
                for name in INDEX_FILES:
                    if self.store.download(name, tmp / name) is None:
                        raise IndexSourceError(
                            f"index {self.url}: no {name} at {self.store.object_url(name)}; "
                            "upload an index folder there (shdh index, or the pipeline's "
                            "deploy step)"
                        )
        except CheckpointStoreError as exc:
            raise IndexSourceError(f"index {self.url}: {exc}") from exc
        return folder


def index_source(location: str | Path, cache_dir: str | Path | None = None) -> IndexSource:
    """An S3 source for an s3:// URL, else a local folder (`cache_dir` serves S3 only)."""
    if str(location).startswith("s3://"):
        return S3Index(str(location), cache_dir)
    if cache_dir is not None:
        raise ValueError("--cache-dir: only with an s3:// --index (a local index is read in place)")
    return LocalIndex(location)
