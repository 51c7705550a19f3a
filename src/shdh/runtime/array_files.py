"""Reading the .npy and .npz files the steps write, with one error for every way one is damaged.

numpy reports a truncated or garbled file as any of EOFError, zipfile.BadZipFile, ValueError or
OSError, so a handler that lists fewer lets a traceback through. And for a damaged .npy header
it says the file "contains pickled (object) data" and advises allow_pickle=True: advice that no
user of these steps can take, and that would not repair the file. So every reader here turns a
failure into one ValueError naming the file, what it should hold and how to make it again.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

# Everything np.load raises for a file that is missing, truncated, garbled or of another kind.
READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile)


def reason(err: BaseException) -> str:
    """What went wrong, in words a user can act on."""
    if isinstance(err, EOFError) or "pickled" in str(err):
        return "damaged or cut short (its header or data cannot be read)"
    if isinstance(err, zipfile.BadZipFile):
        return "damaged or cut short (not a complete .npz archive)"
    return str(err) or type(err).__name__


def load_array(
    path: str | os.PathLike[str], what: str, hint: str, *, mmap: bool = False
) -> np.ndarray:
    """One .npy file's array (memory-mapped where asked); a ValueError naming `path`, `what`
    it should hold and the `hint` to remake it, for any file that is not one."""
    try:
        loaded = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except READ_ERRORS as err:
        raise ValueError(f"{path}: cannot read {what}: {reason(err)}; {hint}") from err
    if not isinstance(loaded, np.ndarray):
        loaded.close()
        raise ValueError(f"{path}: cannot read {what}: an .npz archive, not an .npy file; {hint}")
    return loaded


def load_arrays(path: str | os.PathLike[str], what: str, hint: str) -> dict[str, np.ndarray]:
    """Every array of one .npz file, read into memory; errors as load_array's."""
    try:
        loaded = np.load(Path(path), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("an .npy file, not an .npz archive")
        with loaded:
            return {key: loaded[key] for key in loaded.files}
    except READ_ERRORS as err:
        raise ValueError(f"{path}: cannot read {what}: {reason(err)}; {hint}") from err
