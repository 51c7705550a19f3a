"""Atomic writes: every output appears complete under its final name, or not at all.

A step that dies half-way (a crash, Ctrl-C, a full disk) must never leave a truncated file that
the next step, or DVC's cache, would take for a finished one.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, "tmp", suffix)
    try:
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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = _sibling(path, "tmp"), _sibling(path, "old")
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old.exists():
                os.replace(old, path)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)
