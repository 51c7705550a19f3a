"""A transfer that survives a dropped connection: bytes go to NAME.part, and the next attempt asks
the source only for the rest (an HTTP or S3 Range request). A source that ignores the Range
answers with the whole file and the part is rewritten; one that refuses the offset is downloaded
whole. shdh.data.download opens the sources (HTTP, S3 through shdh.data.s3_source, a local copy)
and verifies what arrives.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, NamedTuple

log = logging.getLogger(__name__)


CHUNK = 1 << 20


class PermanentError(Exception):
    """Marks a failure that retrying the same source cannot fix."""


class RangeNotSatisfiable(Exception):
    """The server refused the resume offset: the part is as long as, or longer than, its file."""


class Opened(NamedTuple):
    """A response about to be streamed, as far as resuming needs to know it."""

    body: BinaryIO
    content_range: str | None  # the Content-Range of a 206 answer, None for a whole file
    length: int | None  # bytes in this body, when the server says


def part_size(part: Path) -> int:
    return part.stat().st_size if part.exists() else 0


def is_permanent_status(status: int) -> bool:
    """4xx means this source will keep refusing (except a timeout or a rate limit)."""
    return 400 <= status < 500 and status not in (408, 429)


def _resume_offset(part: Path, size: int | None) -> int:
    """Bytes of ``part`` worth keeping; a part longer than the expected size is discarded."""
    have = part_size(part)
    if size is not None and have > size:
        log.info("%s holds %d bytes, more than the expected %d; starting over", part, have, size)
        part.unlink()
        return 0
    return have


def _append_or_restart(part: Path, have: int, content_range: str | None, source: str) -> bool:
    """True when the answer continues ``part`` at byte ``have``, False when it replaces it."""
    if not have:
        return False
    if content_range is None:
        log.info("%s ignored the Range request; downloading it whole", source)
        return False
    if not content_range.startswith(f"bytes {have}-"):
        part.unlink()
        raise OSError(f"server resumed at {content_range!r}, expected byte {have}")
    log.info("resuming %s at byte %d", source, have)
    return True


def resumable_download(
    open_at: Callable[[int], Opened], part: Path, size: int | None, source: str
) -> bool:
    """Stream a source into ``part``, continuing what is there; True when bytes were kept.

    ``open_at(offset)`` opens the source at ``offset`` (0: the whole file) and raises
    RangeNotSatisfiable when the offset lies at or past its end. An interrupted transfer raises
    OSError and keeps the part, so the next attempt resumes it.
    """
    have = _resume_offset(part, size)
    if size is not None and have == size:
        log.info("%s already holds the expected %d bytes", part, size)
        return True
    try:
        opened = open_at(have)
    except RangeNotSatisfiable:
        log.info("%s refused a resume at byte %d; downloading it whole", source, have)
        part.unlink(missing_ok=True)
        have = 0
        opened = open_at(0)
    with contextlib.closing(opened.body):
        append = _append_or_restart(part, have, opened.content_range, source)
        kept = have if append else 0
        with open(part, "ab" if append else "wb") as f:
            shutil.copyfileobj(opened.body, f, CHUNK)
    # A short part is kept for the next attempt to resume. Without a Content-Length only the
    # expected size can tell a dropped connection from a finished transfer.
    total = part_size(part)
    if opened.length is not None:
        if total < kept + opened.length:
            raise OSError(f"incomplete transfer: {total} of {kept + opened.length} bytes")
    elif size is not None and total < size:
        raise OSError(f"incomplete transfer: {total} of {size} bytes (no length announced)")
    return append
