"""Where the service reads its index from: a local folder, or an S3 prefix copied into a cache.

An S3 prefix (s3://BUCKET/PREFIX, holding what `shdh index` writes) is downloaded anew on every
load, so a reload picks up a new index uploaded to the same prefix. The copy is made in a
temporary folder of the cache and renamed over the previous one only once both files are there
(shdh.atomic.atomic_dir), so the folder the service loads is never half an index. The endpoint
and credentials are the pipeline steps' (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...:
shdh.checkpoint_store.s3_client).
"""

from __future__ import annotations

import tempfile
import urllib.parse
from pathlib import Path
from typing import Any, Protocol

from shdh.atomic import atomic_dir
from shdh.search import INDEX_ARRAYS, INDEX_RECORD

# The record last: a reader that sees the new record has the new arrays beside it in the copy.
INDEX_FILES = (INDEX_ARRAYS, INDEX_RECORD)
_MISSING = ("404", "NoSuchKey", "NotFound")


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
    """The index at s3://BUCKET/PREFIX, copied into `cache_dir`/index on every fetch."""

    def __init__(self, url: str, cache_dir: str | Path | None = None, client: Any = None) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
            raise IndexSourceError(f"--index: expected s3://bucket/prefix, got {url!r}")
        self.url = url.rstrip("/")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self.cache_dir = Path(cache_dir or tempfile.mkdtemp(prefix="shdh-serve-"))
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            from shdh.checkpoint_store import s3_client

            self._client = s3_client()
        return self._client

    def describe(self) -> str:
        return self.url

    def fetch(self) -> Path:
        from botocore.exceptions import BotoCoreError, ClientError

        folder = self.cache_dir / "index"
        try:
            with atomic_dir(folder) as tmp:
                for name in INDEX_FILES:
                    self._download(name, tmp / name)
        except (ClientError, BotoCoreError) as exc:
            raise IndexSourceError(f"index {self.url}: {type(exc).__name__}: {exc}") from exc
        return folder

    def _download(self, name: str, dest: Path) -> None:
        from botocore.exceptions import ClientError

        key = f"{self.prefix}/{name}"
        try:
            self.client.download_file(self.bucket, key, str(dest))
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _MISSING:
                raise IndexSourceError(
                    f"index {self.url}: no {name} at s3://{self.bucket}/{key}; upload an index "
                    "folder there (shdh index, or the pipeline's deploy step)"
                ) from exc
            raise


def index_source(location: str | Path, cache_dir: str | Path | None = None) -> IndexSource:
    """An S3 source for an s3:// URL, else a local folder (`cache_dir` serves S3 only)."""
    if str(location).startswith("s3://"):
        return S3Index(str(location), cache_dir)
    if cache_dir is not None:
        raise ValueError("--cache-dir: only with an s3:// --index (a local index is read in place)")
    return LocalIndex(location)
