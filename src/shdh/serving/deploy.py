"""Putting a new index in front of a running service: copy the index folder to the S3 prefix the
service reads (shdh.serving.index_source.S3Index), then ask it to reload (POST /admin/reload).

The record is uploaded after the arrays, and the reload is asked for only once both are there;
a reload that some other caller starts mid-copy can meet a new arrays file beside the old
record, which SearchIndex.load refuses (the record's arrays_sha256 is not the arrays'), so the
old index keeps serving
until the reload asked for here.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from shdh.serving.index_source import INDEX_FILES, IndexSourceError, S3Index

log = logging.getLogger(__name__)
RELOAD_TIMEOUT_S = 600.0  # a reload reads the whole index and loads the encoder


def publish_index(folder: str | Path, url: str, client: Any = None) -> None:
    """Upload the index folder's files to s3://BUCKET/PREFIX, the record last."""
    from botocore.exceptions import BotoCoreError, ClientError

    target = S3Index(url, client=client).store
    for name in INDEX_FILES:
        path = Path(folder, name)
        if not path.is_file():
            raise FileNotFoundError(f"{folder}: no {name}; not an index folder (shdh index)")
        try:
            target.client.upload_file(str(path), target.bucket, f"{target.prefix}/{name}")
        except (ClientError, BotoCoreError) as exc:
            raise IndexSourceError(f"index {url}: uploading {name}: {exc}") from exc
    log.info("published the index %s to %s", folder, url)


def request_reload(service_url: str, token: str) -> dict[str, Any]:
    """POST /admin/reload with the bearer token; the version now served, or an error with the
    service's reason."""
    request = urllib.request.Request(
        f"{service_url.rstrip('/')}/admin/reload",
        method="POST",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=RELOAD_TIMEOUT_S) as answer:
            version = json.load(answer)["version"]
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")
        raise RuntimeError(f"{service_url}: the reload failed ({exc.code}): {detail}") from exc
    except urllib.error.URLError as exc:
        raise RuntimeError(f"{service_url}: cannot reach the service: {exc.reason}") from exc
    log.info("%s now serves %s", service_url, version)
    return version
