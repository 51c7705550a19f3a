"""Training batches gathered ahead by worker processes, for images that live on disk.

When the images are shards or a memory map larger than memory, gathering a batch is page faults
and a copy of scattered rows, which the training step should not wait for. Loader runs a torch
DataLoader over the epoch's batches of positions: each worker gathers whole batches, prefetched,
optionally into pinned memory for an asynchronous copy to the GPU.

Batch s of an epoch is images[train_idx[order[s*B:(s+1)*B]]], in order, whatever the number of
workers: the DataLoader hands the batches back in its sampler's order, and each is gathered from
the rows it names, so what the network sees depends on the order alone. With 0 workers the
batches are gathered in this process, one at a time.
"""

from __future__ import annotations

import mmap
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from shdh.runtime.errors import ConfigError

PREFETCH_BATCHES = 2  # batches each worker gathers ahead of the step
SHARED_MEMORY = Path("/dev/shm")  # where torch's workers put the batches they hand over


class _Rows(Dataset):
    """The training rows, addressed by arrays of positions into train_idx: one item is a batch.

    It pickles cheaply for workers started by spawn or forkserver: a ShardedImages pickles as
    its shards' locations, and a memory map of a whole .npy file as its file name and layout
    (a plain np.memmap would pickle its pixels)."""

    def __init__(self, images: Any, train_idx: np.ndarray) -> None:
        self.images, self.train_idx = images, np.asarray(train_idx)

    def __len__(self) -> int:
        return len(self.train_idx)

    def __getitem__(self, positions: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.images[self.train_idx[positions]]))

    def __getstate__(self) -> dict[str, Any]:
        images = self.images
        whole_file = isinstance(images, np.memmap) and isinstance(images.base, mmap.mmap)
        if whole_file and images.flags.c_contiguous:
            layout = (images.filename, images.offset, images.dtype.str, images.shape)
            return {"mapped": layout, "train_idx": self.train_idx}
        return {"images": images, "train_idx": self.train_idx}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "mapped" in state:
            filename, offset, dtype, shape = state["mapped"]
            state = {**state, "images": np.memmap(filename, dtype, "r", offset, shape)}
        self.images, self.train_idx = state["images"], state["train_idx"]


class _EpochBatches(Sampler):
    """The current epoch's batches of positions; set before each pass over the loader."""

    def __init__(self) -> None:
        self.batches: list[np.ndarray] = []

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class Loader:
    """uint8 training batches of images[train_idx] in each epoch's order, gathered by `workers`
    processes (persistent across epochs) or, with 0, in this process. `pin_memory`: batches
    arrive in page-locked memory (training on CUDA)."""

    def __init__(
        self,
        images: Any,
        train_idx: np.ndarray,
        batch_size: int,
        workers: int,
        *,
        pin_memory: bool = False,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise ValueError(f"loader_workers: expected an integer >= 0, got {workers!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        batch_bytes = batch_size * int(np.prod(images.shape[1:])) * images.itemsize
        check_shared_memory(batch_bytes, workers)
        self.sampler = _EpochBatches()
        self.loader: DataLoader | None = DataLoader(
            _Rows(images, train_idx),
            batch_size=None,  # each item the sampler names is already a whole batch
            sampler=self.sampler,
            num_workers=workers,
            pin_memory=pin_memory,
            persistent_workers=workers > 0,
            prefetch_factor=PREFETCH_BATCHES if workers > 0 else None,
            # Each pass draws a seed for its workers: from a generator of its own, not from
            # torch's global one, which seeds the run's dropout.
            generator=torch.Generator(),
        )

    def epoch(self, order: torch.Tensor) -> Iterator[torch.Tensor]:
        """The epoch's batches: order (a CPU LongTensor of positions into train_idx) cut into
        batch_size runs, the last one shorter, each gathered as images[train_idx[run]]."""
        if self.loader is None:
            raise RuntimeError("loader: closed")
        positions = order.numpy()
        starts = range(0, len(positions), self.batch_size)
        self.sampler.batches = [positions[s : s + self.batch_size] for s in starts]
        return iter(self.loader)

    def close(self) -> None:
        """Stop the worker processes now rather than when the loader is collected."""
        self.loader = None  # the last reference to the DataLoader and its workers' iterator


def check_shared_memory(batch_bytes: int, workers: int, where: Path = SHARED_MEMORY) -> None:
    """Refuse workers whose batches in flight would not fit the shared memory they are handed
    over in. A container gets 64 MB there by default (Docker, a Kubernetes pod), a couple of
    batches of photos; running out kills a worker mid-epoch with a bare "Bus error"."""
    if workers == 0 or not where.is_dir():
        return
    need = workers * PREFETCH_BATCHES * batch_bytes
    free = shutil.disk_usage(where).free
    if need > free:
        raise ConfigError(
            f"train.loader_workers={workers}: the loader's workers hand their batches over in "
            f"{where}, which has {free / 2**20:.0f} MiB free; {workers} workers x "
            f"{PREFETCH_BATCHES} batches of {batch_bytes / 2**20:.1f} MiB need "
            f"{need / 2**20:.0f} MiB. Give the container more shared memory (docker run "
            "--shm-size; on Kubernetes a Memory emptyDir at /dev/shm, which the project's "
            "train tasks and TrainJobs mount) or lower train.loader_workers or train.batch_size"
        )
