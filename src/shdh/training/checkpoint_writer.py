"""Checkpoints written while training goes on.

At the paper's network size a checkpoint holds about 270 MB (weights and SGD momentum), and
writing it with an fsync took a fifth of a GPU epoch, with the card idle. On a GPU the writer
therefore copies the state to host memory (the only part the training has to wait for) and
writes the copy on a thread while the next epoch runs. The checkpoint stays exact: it is a
snapshot of one epoch's end, and a write is finished (and its error raised) before the next
one starts and before training returns. On the CPU it writes in place, as before: the copy would
cost as much as the write, and a crash right after an epoch then finds that epoch's checkpoint.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import torch

from shdh.runtime.atomic import atomic_path


def atomic_save(obj: dict[str, Any], path: Path) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())  # a checkpoint must survive a power cut, not only a crash


def host_copy(value: Any) -> Any:
    """value with every tensor copied to host memory (its own storage: later in-place updates of
    the live tensors do not reach it), in the same dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return type(value)((k, host_copy(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return type(value)(host_copy(v) for v in value)
    return value


class CheckpointWriter:
    """Writes checkpoints to one path, in the background when `background` is true."""

    def __init__(self, path: Path, *, background: bool) -> None:
        self.path, self.background = path, background
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def write(self, checkpoint: dict[str, Any]) -> None:
        self.wait()
        if not self.background:
            atomic_save(checkpoint, self.path)
            return
        snapshot = host_copy(checkpoint)
        self._thread = threading.Thread(
            target=self._save, args=(snapshot,), name="checkpoint-writer", daemon=False
        )
        self._thread.start()

    def _save(self, snapshot: dict[str, Any]) -> None:
        try:
            atomic_save(snapshot, self.path)
        except BaseException as err:  # raised in the training thread by wait()
            self._error = err

    def wait(self) -> None:
        """Block until the last write is on disk; raise its error, if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"checkpoint {self.path}: writing failed: {err}") from err
