"""Fetch one file from an ordered list of mirrors, with retries, resume and integrity checks.

Datasets are published in several places (a distribution package, an official URL, a team
bucket), and any one of them may be down or slow. ``fetch`` tries them in order so that the same
call works offline (a local copy), in CI (a bucket) and for a newcomer (the official URL).

Bytes go to ``NAME.part`` first. A dropped connection keeps them, and the next attempt (or the
next call) asks only for the rest with a Range request, over HTTP and S3 alike; a server that
ignores the Range answers with the whole file and the part is rewritten. The file only reaches
its final name after it is complete and verified (size, md5, sha256: whichever are given), so a
later step never reads a partial or corrupt download.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shdh.data.resumable import (
    CHUNK,
    Opened,
    PermanentError,
    RangeNotSatisfiable,
    is_permanent_status,
    resumable_download,
)
from shdh.data.s3_source import fetch_s3
from shdh.runtime.errors import ConfigError

log = logging.getLogger(__name__)

_HEX_DIGITS = {"md5": 32, "sha256": 64}


class DownloadError(RuntimeError):
    """No source could deliver the file."""


class ChecksumError(DownloadError):
    """A source delivered a complete file whose size, md5 or sha256 is not the expected one."""


@dataclass(frozen=True)
class _Expected:
    """What a complete download must look like; None means "not checked"."""

    size: int | None = None
    md5: str | None = None
    sha256: str | None = None

    @property
    def has_hash(self) -> bool:
        return self.md5 is not None or self.sha256 is not None


def _digests(path: Path, algorithms: Sequence[str], chunk: int = CHUNK) -> dict[str, str]:
    """Hex digests of a file in one pass, read in chunks so large files need little memory."""
    hashers = {name: hashlib.new(name, usedforsecurity=False) for name in algorithms}
    with open(path, "rb") as f:
        while block := f.read(chunk):
            for hasher in hashers.values():
                hasher.update(block)
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def md5sum(path: str | os.PathLike[str], chunk: int = CHUNK) -> str:
    """Hex md5 of a file."""
    return _digests(Path(path), ["md5"], chunk)["md5"]


def sha256sum(path: str | os.PathLike[str], chunk: int = CHUNK) -> str:
    """Hex sha256 of a file."""
    return _digests(Path(path), ["sha256"], chunk)["sha256"]


def _mismatch(path: Path, expected: _Expected) -> str | None:
    """Describe how ``path`` differs from ``expected``, or None when every given check passes."""
    actual_size = path.stat().st_size
    if expected.size is not None and actual_size != expected.size:
        return f"size mismatch: expected {expected.size} bytes, got {actual_size}"
    wanted = {name: getattr(expected, name) for name in ("md5", "sha256")}
    wanted = {name: value for name, value in wanted.items() if value is not None}
    actual = _digests(path, list(wanted)) if wanted else {}
    for name, value in wanted.items():
        if actual[name] != value:
            return f"{name} mismatch: expected {value}, got {actual[name]}"
    return None


def _verify(part: Path, dest: Path, expected: _Expected) -> None:
    """Raise ChecksumError (after deleting the part) when the complete download is wrong."""
    problem = _mismatch(part, expected)
    if problem is not None:
        part.unlink(missing_ok=True)
        raise ChecksumError(f"{dest.name}: {problem}")


def _open_http(url: str, offset: int, timeout: float) -> Opened:
    request = urllib.request.Request(url, headers={"User-Agent": "shdh-fetch"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and offset:
            raise RangeNotSatisfiable from exc
        if is_permanent_status(exc.code):
            raise PermanentError(f"HTTP {exc.code} {exc.reason}") from exc
        raise
    content_range = response.headers.get("Content-Range") if response.status == 206 else None
    length = response.headers.get("Content-Length")
    return Opened(response, content_range, None if length is None else int(length))


def _copy_local(src: Path, part: Path) -> bool:
    if not src.is_file():
        raise PermanentError(f"{src}: no such file")
    shutil.copyfile(src, part)
    return False


def _fetch_once(
    source: str, part: Path, timeout: float, size: int | None, s3_endpoint_url: str | None
) -> bool:
    """One attempt at one source; True when the part kept bytes from before this attempt."""
    parsed = urllib.parse.urlparse(source)
    scheme = parsed.scheme.lower()
    if scheme in ("http", "https"):
        return resumable_download(
            lambda offset: _open_http(source, offset, timeout), part, size, source
        )
    if scheme == "s3":
        return fetch_s3(source, part, timeout, size, s3_endpoint_url)
    if scheme == "file":
        return _copy_local(Path(urllib.request.url2pathname(parsed.path)), part)
    if scheme == "" or len(scheme) == 1:  # a plain path (len 1: a Windows drive letter)
        return _copy_local(Path(source), part)
    raise PermanentError(f"unsupported source scheme {scheme!r}")


def _fetch_from(
    source: str,
    part: Path,
    dest: Path,
    expected: _Expected,
    *,
    retries: int,
    backoff: float,
    timeout: float,
    s3_endpoint_url: str | None,
) -> str | None:
    """Try one source until it succeeds or is given up; None on success, else the reason.

    Transient failures (connection errors, timeouts, 5xx, truncated transfers) are retried with
    exponential backoff. Permanent ones (404, no such key, a complete file that fails its
    checks) give the source up at once, with one exception: a file that was completed from
    bytes already on disk is downloaded whole once more, since those bytes may be the wrong ones.
    """
    failures = 0
    restarted = False
    last_error: BaseException | None = None
    while failures < retries:
        if failures:
            time.sleep(backoff * 2 ** (failures - 1))
        log.info("fetching %s from %s (attempt %d/%d)", dest.name, source, failures + 1, retries)
        resumed = False
        try:
            resumed = _fetch_once(source, part, timeout, expected.size, s3_endpoint_url)
            _verify(part, dest, expected)
            return None
        except ChecksumError as exc:
            if resumed and not restarted:
                restarted = True
                log.warning("%s: %s; downloading it whole: the kept bytes may be bad", source, exc)
                continue
            log.warning("%s: %s (not retrying this source)", source, exc)
            return str(exc)
        except (PermanentError, ValueError) as exc:
            log.warning("%s: %s (not retrying this source)", source, exc)
            return str(exc)
        except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets
            failures += 1
            last_error = exc
            log.warning("%s: %s", source, exc)
    return f"{last_error} (gave up after {retries} attempts)"


def _check_arguments(
    sources: Sequence[str], retries: int, backoff: float, expected: _Expected
) -> None:
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of strings, not one string")
    if not sources:
        raise ValueError("sources is empty")
    if retries < 1:
        raise ValueError(f"retries must be >= 1, got {retries}")
    if backoff < 0:
        raise ValueError(f"backoff must be >= 0, got {backoff}")
    if expected.size is not None and expected.size < 0:
        raise ValueError(f"size must be >= 0, got {expected.size}")
    for name, digits in _HEX_DIGITS.items():
        value = getattr(expected, name)
        if value is not None and not re.fullmatch(f"[0-9a-f]{{{digits}}}", value):
            raise ValueError(f"{name} must be {digits} hex digits, got {value!r}")


def fetch(
    sources: Sequence[str],
    dest: str | os.PathLike[str],
    *,
    md5: str | None = None,
    sha256: str | None = None,
    size: int | None = None,
    retries: int = 3,
    backoff: float = 1.0,
    timeout: float = 60,
    s3_endpoint_url: str | None = None,
) -> Path:
    """Fetch ``dest`` from the first source that works and return its path.

    A source is an ``http(s)://`` URL, a ``file://`` URL, an ``s3://bucket/key`` URL or a local
    path. S3 is read from ``s3_endpoint_url`` when given, else from AWS_ENDPOINT_URL_S3 or
    AWS_ENDPOINT_URL, else from AWS. Each source gets ``retries`` attempts with exponential
    backoff (``backoff * 2**i`` seconds) unless the failure is permanent (missing file, HTTP
    404, no such key, a complete file of the wrong size or checksum): then the next source is
    tried at once. Data goes to ``dest.part`` first; an interrupted http or s3 download is
    resumed from it with a Range request (a ``.part`` left by an earlier call too), and it is
    deleted when a source is given up. If ``dest`` already exists and passes the given checks,
    at least one of them a hash, nothing is fetched. When every source fails, DownloadError
    lists each one with the reason it failed.
    """
    expected = _Expected(
        size=size,
        md5=None if md5 is None else md5.lower(),
        sha256=None if sha256 is None else sha256.lower(),
    )
    _check_arguments(sources, retries, backoff, expected)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    if expected.has_hash and dest.is_file() and _mismatch(dest, expected) is None:
        log.info("%s already present and verified", dest)
        part.unlink(missing_ok=True)
        return dest
    errors: list[str] = []
    for source in sources:
        error = _fetch_from(
            source,
            part,
            dest,
            expected,
            retries=retries,
            backoff=backoff,
            timeout=timeout,
            s3_endpoint_url=s3_endpoint_url,
        )
        if error is None:
            os.replace(part, dest)
            log.info("fetched %s from %s", dest, source)
            return dest
        part.unlink(missing_ok=True)  # never resume one source's bytes from another
        errors.append(f"  {source}: {error}")
    raise DownloadError(f"{dest.name}: every source failed:\n" + "\n".join(errors))


def mirrors(sources: Sequence[str], official: str, dataset: str) -> list[str]:
    """data.sources as complete locations for a dataset with one official location: "official"
    stands for it; 'debian' ships only Fashion-MNIST."""
    if isinstance(sources, str):
        raise ConfigError(f"data.sources: expected a list of locations, got the string {sources!r}")
    if "debian" in sources:
        raise ConfigError(
            f"data.sources: 'debian' ships only Fashion-MNIST, not {dataset}; use 'official' "
            "or a mirror (https://, file://, s3://, a folder)"
        )
    return [official if source == "official" else str(source) for source in sources]
