"""Fetch one file from an ordered list of mirrors, with retries, resume and an md5 check.

Datasets are published in several places (a distribution package, an official URL, a team
bucket), and any one of them may be down or slow. ``fetch`` tries them in order so that the same
call works offline (a local copy), in CI (a bucket) and for a newcomer (the official URL). The
file only reaches its final name after it is complete and verified, so a later step never reads
a partial download.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """No source could deliver the file."""


class ChecksumError(DownloadError):
    """A source delivered a file whose md5 is not the expected one."""


class _PermanentError(Exception):
    """Marks a failure that retrying the same source cannot fix."""


def md5sum(path: str | os.PathLike[str], chunk: int = _CHUNK) -> str:
    """Hex md5 of a file, read in chunks so large files need little memory."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _copy_local(src: Path, part: Path) -> None:
    if not src.is_file():
        raise _PermanentError(f"{src}: no such file")
    shutil.copyfile(src, part)


def _fetch_http(url: str, part: Path, timeout: float) -> None:
    """Stream ``url`` into ``part``, continuing an existing ``part`` when the server allows."""
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "shdh-fetch"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # the .part does not fit this file: start over
            part.unlink()
            _fetch_http(url, part, timeout)
            return
        if 400 <= exc.code < 500 and exc.code not in (408, 429):
            raise _PermanentError(f"HTTP {exc.code} {exc.reason}") from exc
        raise
    with response:
        resume = have > 0 and response.status == 206
        if resume:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {have}-"):
                part.unlink()
                raise OSError(f"server resumed at {content_range!r}, expected byte {have}")
            log.info("resuming %s at byte %d", url, have)
        length = response.headers.get("Content-Length")
        expected = None if length is None else (have if resume else 0) + int(length)
        with open(part, "ab" if resume else "wb") as f:
            shutil.copyfileobj(response, f, _CHUNK)
    size = part.stat().st_size
    if expected is not None and size != expected:  # keep the .part: the next try resumes
        raise OSError(f"incomplete transfer: {size} of {expected} bytes")


def _fetch_s3(url: str, part: Path) -> None:
    """Download ``s3://bucket/key``; boto3 is imported here so other sources never need it."""
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
    except ImportError as exc:
        raise _PermanentError(f"s3:// sources need boto3: {exc}") from exc

    parsed = urllib.parse.urlparse(url)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    if not bucket or not key:
        raise _PermanentError(f"{url}: expected s3://bucket/key")
    client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
    try:
        client.download_file(bucket, key, str(part))
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("404", "NoSuchKey", "NoSuchBucket", "403", "AccessDenied"):
            raise _PermanentError(f"S3 {code}: {exc}") from exc
        raise OSError(f"S3 {code}: {exc}") from exc
    except NoCredentialsError as exc:
        raise _PermanentError(str(exc)) from exc
    except BotoCoreError as exc:  # connection problems: worth a retry
        raise OSError(str(exc)) from exc


def _fetch_once(source: str, part: Path, timeout: float) -> None:
    scheme = urllib.parse.urlparse(source).scheme.lower()
    if scheme in ("http", "https"):
        _fetch_http(source, part, timeout)
    elif scheme == "file":
        _copy_local(Path(urllib.request.url2pathname(urllib.parse.urlparse(source).path)), part)
    elif scheme == "s3":
        _fetch_s3(source, part)
    elif scheme == "" or len(scheme) == 1:  # a plain path (len 1: a Windows drive letter)
        _copy_local(Path(source), part)
    else:
        raise _PermanentError(f"unsupported source scheme {scheme!r}")


def _verify(part: Path, dest: Path, md5: str | None) -> None:
    if md5 is None:
        return
    actual = md5sum(part)
    if actual != md5.lower():
        part.unlink(missing_ok=True)
        raise ChecksumError(f"{dest.name}: md5 mismatch: expected {md5.lower()}, got {actual}")


def fetch(
    sources: Sequence[str],
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    retries: int = 3,
    backoff: float = 1.0,
    timeout: float = 60,
) -> Path:
    """Fetch ``dest`` from the first source that works and return its path.

    A source is an ``http(s)://`` URL, a ``file://`` URL, an ``s3://bucket/key`` URL or a local
    path. Each source gets ``retries`` attempts with exponential backoff (``backoff * 2**i``
    seconds) unless the failure is permanent (missing file, HTTP 404, md5 mismatch). Data goes to
    ``dest.part`` first; an http download keeps it between attempts to resume with a Range
    request (a ``.part`` left by an earlier call is resumed too), and it is deleted when a source
    is given up. If ``dest`` already exists with the expected md5 nothing is fetched.
    """
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of strings, not one string")
    if not sources:
        raise ValueError("sources is empty")
    if retries < 1:
        raise ValueError(f"retries must be >= 1, got {retries}")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if md5 is not None and dest.is_file() and md5sum(dest) == md5.lower():
        log.info("%s already present with md5 %s", dest, md5)
        return dest
    part = dest.with_name(dest.name + ".part")
    errors: list[str] = []
    for source in sources:
        last_error: BaseException | None = None
        for attempt in range(retries):
            if attempt:
                time.sleep(backoff * 2 ** (attempt - 1))
            log.info("fetching %s from %s (attempt %d/%d)", dest.name, source, attempt + 1, retries)
            try:
                _fetch_once(source, part, timeout)
                _verify(part, dest, md5)
            except (_PermanentError, ChecksumError, ValueError) as exc:
                last_error = exc
                log.warning("%s: %s (not retrying this source)", source, exc)
                break
            except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets
                last_error = exc
                log.warning("%s: %s", source, exc)
                continue
            os.replace(part, dest)
            log.info("fetched %s from %s", dest, source)
            return dest
        part.unlink(missing_ok=True)  # never resume one source's bytes from another
        errors.append(f"  {source}: {last_error}")
    raise DownloadError(f"{dest.name}: every source failed:\n" + "\n".join(errors))
