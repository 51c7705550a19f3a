"""The per-user cache that the score and index steps keep between runs: where it lives, and
reading and writing its .npz entries so that a bad entry or folder costs time, never a result.

The entries live outside the stages' outputs, which DVC deletes before a rerun, and outside the
workspace, because queued experiments (`dvc exp run --queue`) each run in a temporary copy of it:
$SHDH_CACHE_DIR/PART, else $XDG_CACHE_HOME/shdh/PART, else ~/.cache/shdh/PART. Each part has a
switch of its own (SHDH_SCORE_CACHE, SHDH_CODES_CACHE; 0 turns it off). Nothing here is a source
of truth: an entry that cannot be read is computed again and replaced, and a folder that cannot
be written is reported once per run, which then goes on without it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from shdh.runtime.array_files import load_arrays
from shdh.runtime.atomic import atomic_path

log = logging.getLogger(__name__)

OFF = ("0", "false", "no", "off")


def cache_dir(part: str, switch: str) -> Path | None:
    """The folder of one part's entries, or None when its switch turns it off (or there is no
    home to keep it in: a bare container user, whose runs go on uncached)."""
    if os.environ.get(switch, "1").strip().lower() in OFF:
        return None
    if os.environ.get("SHDH_CACHE_DIR"):
        return Path(os.environ["SHDH_CACHE_DIR"]) / part
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "shdh" / part
    try:
        return Path.home() / ".cache" / "shdh" / part
    except RuntimeError:
        return None


def read_entry(path: Path, what: str) -> dict[str, np.ndarray] | None:
    """An entry's arrays; None where there is none, or where it cannot be read (said, and then
    computed again by the caller). what: the entry's kind, as the warning names it. A folder
    this user may not search (another user's, made under a strict umask) is said once, and the
    run goes on as if the cache were empty."""
    try:
        if not path.is_file():
            return None
    except OSError as err:
        _say_once(
            path.parent,
            "read",
            f"{path.parent}: cannot read the cache there ({err}); going on without it",
        )
        return None
    try:
        return load_arrays(path, what, "computing it again")
    except ValueError as err:
        log.warning("%s", err)
        return None


def damaged(path: Path, what: str, err: Exception) -> None:
    """Say that an entry read as arrays holds something else; the caller computes it again."""
    log.warning("%s: cannot read %s: %s; computing it again", path, what, err)


def write_entry(path: Path, arrays: dict[str, np.ndarray], switch: str) -> None:
    """Store an entry atomically. A folder that cannot be written is said once, not for each of
    a run's thirty entries, and the run goes on without it."""
    try:
        with atomic_path(path, suffix=".npz") as tmp, open(tmp, "wb") as f:
            np.savez(f, **arrays)
    except OSError as err:
        _say_once(
            path.parent,
            "write",
            f"{path.parent}: cannot store entries of the cache there ({err}); set SHDH_CACHE_DIR "
            f"to a writable folder, or {switch}=0",
        )


_said: set[tuple[Path, str]] = set()  # (folder, "read" or "write") already said in this process


def _say_once(folder: Path, action: str, message: str) -> None:
    """Warn of a folder's problem once per process, not for each of a run's thirty entries."""
    if (folder, action) not in _said:
        _said.add((folder, action))
        log.warning("%s", message)
