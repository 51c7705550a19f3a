"""Atomic writes: every output appears complete under its final name, or not at all.

A step that dies half-way (a crash, Ctrl-C, a full disk) must never leave a truncated file that
the next step, or DVC's cache, would take for a finished one. A write that fails says which
output it was writing ("results/metrics.json: cannot write: No space left on device"), and
check_writable lets a step find a read-only output folder before its expensive work.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Errors of the disk rather than of an input file: they belong to the output being written.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


class WriteError(OSError):
    """An output could not be written; the message names the output (and the setting)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.errno = code


def _is_under(name: Path, *folders: Path) -> bool:
    return any(name == folder or folder in name.parents for folder in folders)


@contextmanager
def _naming(path: Path, *scratch: Path) -> Iterator[None]:
    """Re-raise a failed write as a WriteError naming `path`, the output the caller sees, rather
    than a hidden temporary name, or no name at all (ENOSPC from write() has none). Errors about
    other files, such as an input that cannot be read, pass through unchanged."""
    try:
        yield
    except WriteError:
        raise
    except OSError as exc:
        names = [Path(n) for n in (exc.filename, exc.filename2) if isinstance(n, str | os.PathLike)]
        ours = any(n in (path, *path.parents) or _is_under(n, *scratch) for n in names)
        if exc.errno not in _WRITE_ERRNOS and not ours:
            raise
        reason = exc.strerror or str(exc)
        raise WriteError(f"{path}: cannot write: {reason}", exc.errno) from exc


def check_writable(path: str | os.PathLike[str], setting: str | None = None) -> None:
    """Fail now if `path` (a file or folder about to be written) could not be created.

    The nearest existing folder above it is probed by creating a file there, so permission bits,
    read-only mounts and quotas all answer truly, as they would hours later. `setting` (e.g.
    "evaluate.results_dir") is named in the message.
    """
    path = Path(path)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    where = f"{setting}: " if setting else ""
    if not folder.is_dir():
        raise WriteError(f"{where}{folder}: not a folder, so {path} cannot be written there")
    try:
        handle, probe = tempfile.mkstemp(prefix=".shdh-write-check-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise WriteError(
            f"{where}{folder}: cannot write there ({exc.strerror or exc}); make it writable or "
            "choose another folder",
            exc.errno,
        ) from exc


def check_output_folder(path: str | os.PathLike[str], setting: str, marker: str) -> None:
    """Fail now if writing the output folder `path` would replace anything but an earlier output
    of the same step: atomic_dir swaps a folder in whole, deleting what was there, so a setting
    that points at the raw data or another step's folder would lose it. An earlier output holds
    `marker` (the file the step always writes); an empty folder is taken too."""
    path = Path(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise WriteError(f"{setting}: {path} is a file; this step writes a folder there")
    entries = sorted(entry.name for entry in path.iterdir())
    if entries and marker not in entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise WriteError(
            f"{setting}: {path} holds other files ({shown}) and no {marker}, so it is not an "
            "earlier output of this step, and writing there would delete them; choose a new or "
            "empty folder"
        )


def _sibling(path: Path, kind: str, suffix: str = "") -> Path:
    """A unique hidden name beside `path`: same filesystem, so os.replace is an atomic rename."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.{kind}{suffix}")


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling path for the caller to create; rename it over `path` on success.

    `suffix` lets writers that insist on an extension (np.savez adds '.npz', savefig wants
    '.png') keep it. The parent directory is created if needed.
    """
    path = Path(path)
    tmp = _sibling(path, "tmp", suffix)
    try:
        with _naming(path, tmp):
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a new temporary sibling directory; swap it in for `path` when the block succeeds.

    The old directory is moved aside first and deleted last, so a failure at any point leaves
    either the old directory or the new one, never a mixture.
    """
    path = Path(path)
    tmp, old = _sibling(path, "tmp"), _sibling(path, "old")
    with _naming(path, tmp, old):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
    try:
        with _naming(path, tmp, old):
            yield tmp
            _swap_in(tmp, path, old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def _swap_in(tmp: Path, path: Path, old: Path) -> None:
    if path.exists():
        os.replace(path, old)
    try:
        os.replace(tmp, path)
    except BaseException:
        if old.exists():
            os.replace(old, path)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
