"""An s3:// source for shdh.data.download: a ranged GET that resumes, on AWS or any S3-compatible
server (MinIO, SeaweedFS), with boto3 imported only when such a source is used.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Any

from shdh.data.resumable import (
    Opened,
    PermanentError,
    RangeNotSatisfiable,
    is_permanent_status,
    resumable_download,
)


def s3_endpoint(explicit: str | None = None) -> str | None:
    """The S3 endpoint: the one given, else the AWS SDKs' environment settings (the S3-specific
    one first), else None (AWS itself)."""
    return (
        explicit
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or None
    )


def s3_client(
    endpoint_url: str | None = None,
    timeout: float | None = None,
    *,
    retries: dict[str, Any] | None = None,
):
    """A boto3 S3 client; boto3 is imported here so that other sources never need it.

    The endpoint is ``endpoint_url``, else AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL (a MinIO or
    SeaweedFS server), else AWS itself; credentials come from the usual AWS variables and files.
    ``retries`` is botocore's: by default its own retries are off, because ``fetch`` retries and
    then moves on to the next mirror; the checkpoint store, which has no mirror, asks for some.
    ``timeout`` (connect and read) stays botocore's where not given.
    """
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise PermanentError(f"s3:// sources need boto3: {exc}") from exc
    endpoint = s3_endpoint(endpoint_url)
    timeouts = {} if timeout is None else {"connect_timeout": timeout, "read_timeout": timeout}
    config = Config(
        **timeouts,
        retries=retries or {"total_max_attempts": 1},
        # a custom server is addressed as host:port/bucket, never as bucket.host
        s3={"addressing_style": "path"} if endpoint else None,
    )
    # A new session each time: boto3's default one keeps the first credentials it found.
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)


def _parse_s3(url: str) -> tuple[str, str]:
    parsed = urllib.parse.urlparse(url)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    if not bucket or not key:
        raise PermanentError(f"{url}: expected s3://bucket/key")
    return bucket, key


class _S3Body:
    """An S3 object's body whose transfer errors are OSErrors, so ``fetch`` retries them."""

    def __init__(self, body, errors: tuple[type[BaseException], ...]) -> None:
        self._body, self._errors = body, errors

    def read(self, amount: int = -1) -> bytes:
        try:
            return self._body.read(None if amount < 0 else amount)
        except self._errors as exc:
            raise OSError(f"S3 transfer interrupted: {exc}") from exc

    def close(self) -> None:
        self._body.close()


def fetch_s3(
    url: str, part: Path, timeout: float, size: int | None, endpoint_url: str | None
) -> bool:
    """Download ``s3://bucket/key`` into ``part``, resuming with a ranged GET."""
    bucket, key = _parse_s3(url)
    client = s3_client(endpoint_url, timeout)
    import urllib3.exceptions
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        ParamValidationError,
    )

    def open_at(offset: int) -> Opened:
        request = {"Bucket": bucket, "Key": key}
        if offset:
            request["Range"] = f"bytes={offset}-"
        try:
            response = client.get_object(**request)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if offset and (code == "InvalidRange" or status == 416):
                raise RangeNotSatisfiable from exc
            message = f"S3 {code or status}: {error.get('Message') or exc}"
            if is_permanent_status(status) or code in ("NoSuchKey", "NoSuchBucket"):
                raise PermanentError(message) from exc
            raise OSError(message) from exc
        except (NoCredentialsError, ParamValidationError) as exc:
            raise PermanentError(str(exc)) from exc
        except BotoCoreError as exc:  # connection problems: worth a retry
            raise OSError(str(exc)) from exc
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        content_range = response.get("ContentRange") if status == 206 else None
        body = _S3Body(response["Body"], (BotoCoreError, urllib3.exceptions.HTTPError))
        return Opened(body, content_range, response.get("ContentLength"))

    return resumable_download(open_at, part, size, url)
