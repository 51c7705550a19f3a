"""Where a run's training images live, and how a batch reaches the network: indexed on the host
(CPU), resident on the GPU, or gathered into pinned host buffers and copied asynchronously; or,
with loader workers, gathered ahead by worker processes (shdh.training.loader).

The images are an np.ndarray (a memory map of images.npy) or an array-like of the same shape
(the shards of a dataset larger than memory): they are only ever indexed by rows, never read
whole.
"""

import logging
from collections.abc import Callable

import numpy as np
import torch

from shdh.training.loader import Loader

log = logging.getLogger(__name__)

# The uint8 training images stay on the GPU for the whole run when they take at most this share
# of its free memory: gathering a batch there costs no host work and no copy. Fashion-MNIST-H
# (63,000 x 28 x 28) is 49 MB and CIFAR-100 (54,000 x 32 x 32 x 3) 166 MB, far below it.
RESIDENT_SHARE = 0.5
RESIDENT_COPY_BYTES = 256 * 2**20  # host rows staged at a time on their way to the GPU


def data_path(nbytes: int, device: torch.device, free_bytes: int | None = None) -> str:
    """How the training images reach `device`: "host" (CPU training: batches indexed from the
    array as they are), "resident" (copied to the GPU once, batches gathered there) or "pinned"
    (too big for the GPU: gathered on the host into page-locked buffers, copied asynchronously)."""
    if device.type != "cuda":
        return "host"
    if free_bytes is None:
        free_bytes = torch.cuda.mem_get_info(device)[0]
    return "resident" if nbytes <= RESIDENT_SHARE * free_bytes else "pinned"


class Batches:
    """The training images of one run, as a source of uint8 batches on the training device.

    Batches are addressed by positions into train_idx. On the CPU a batch is indexed straight
    from the array, the rows in the sampler's order, so CPU results are bit-identical; on a GPU the
    conversion to float (`to_input`) happens on the device in every path. With `workers` > 0
    (and the images not resident on the GPU) an epoch's batches come from a Loader instead,
    the same rows gathered ahead by that many processes (`for_epoch`).
    """

    def __init__(
        self,
        images: np.ndarray,
        train_idx: np.ndarray,
        device: torch.device,
        batch_size: int,
        workers: int = 0,
    ) -> None:
        self.images, self.train_idx, self.device = images, train_idx, device
        self.batch_size, self.loader = batch_size, None
        item_bytes = int(np.prod(images.shape[1:])) * images.itemsize
        self.mode = data_path(item_bytes * len(train_idx), device)
        size = f"{item_bytes * len(train_idx) / 2**20:.0f} MiB"
        if workers != 0 and self.mode != "resident":  # the Loader refuses a negative count
            pin = device.type == "cuda"
            self.loader = Loader(images, train_idx, batch_size, workers, pin_memory=pin)
            log.info("training images: %s, gathered ahead by %d loader workers", size, workers)
        if self.mode == "resident":
            self.resident = _to_device(images, train_idx, device)
            log.info("training images: resident on %s (%s), batches gathered there", device, size)
        elif self.mode == "pinned":
            shape = (batch_size, *images.shape[1:])
            self.staging = [torch.empty(shape, dtype=torch.uint8).pin_memory() for _ in range(2)]
            self.copied = [None, None]  # the CUDA event of each staging buffer's last copy
            self.turn = 0
            log.info(
                "training images: %s do not fit on %s; pinned host buffers, asynchronous copies",
                size,
                device,
            )
        else:
            log.info("training images: %s in host memory, batches indexed there", size)

    def gather(self, pos: torch.Tensor, pos_on_device: torch.Tensor) -> torch.Tensor:
        """uint8 (b, H, W[, C]) images at positions `pos` (a CPU tensor; the same positions on
        the training device: `pos_on_device`), on the device."""
        if self.mode == "resident":
            return self.resident[pos_on_device]
        rows = self.train_idx[pos.numpy()]
        if self.mode == "host":
            return torch.as_tensor(self.images[rows])
        buf = self.staging[self.turn][: len(rows)]
        if self.copied[self.turn] is not None:
            self.copied[self.turn].synchronize()  # the copy out of this buffer two steps ago
        if isinstance(self.images, np.ndarray):
            np.take(self.images, rows, axis=0, out=buf.numpy())
        else:  # np.take would read an array-like (the shards) whole first
            buf.numpy()[...] = self.images[rows]
        batch = buf.to(self.device, non_blocking=True)
        self.copied[self.turn] = torch.cuda.Event()
        self.copied[self.turn].record()
        self.turn = 1 - self.turn
        return batch

    def for_epoch(
        self, order: torch.Tensor
    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The epoch's batch source, called as gather is (positions on the CPU and on the
        device -> the batch on the device) for each batch of `order` in turn: gather itself, or
        the loader's next batch of the same positions. The loop skips a lone trailing item, so
        the loader is not asked for it."""
        if self.loader is None:
            return self.gather
        return _ahead(self.loader, order, self.batch_size, self.device)


def _ahead(
    loader: Loader, order: torch.Tensor, batch_size: int, device: torch.device
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Batches.for_epoch with a loader: each call takes its next batch to the device."""
    used = len(order) - int(len(order) % batch_size == 1)
    batches = loader.epoch(order[:used])

    def fetch(pos: torch.Tensor, pos_on_device: torch.Tensor) -> torch.Tensor:
        batch = next(batches)
        if len(batch) != len(pos):
            raise RuntimeError(f"loader: a batch of {len(batch)} images where {len(pos)} were due")
        return batch.to(device, non_blocking=True)

    return fetch


def _to_device(images: np.ndarray, train_idx: np.ndarray, device: torch.device) -> torch.Tensor:
    """images[train_idx] on the device, copied a block of rows at a time, so the host never
    holds more than RESIDENT_COPY_BYTES of it (the images may be shards larger than memory)."""
    if isinstance(images, np.ndarray) and images.nbytes <= RESIDENT_COPY_BYTES:
        return torch.from_numpy(np.ascontiguousarray(images[train_idx])).to(device)
    out = torch.empty((len(train_idx), *images.shape[1:]), dtype=torch.uint8, device=device)
    row_bytes = max(1, int(np.prod(images.shape[1:])))
    block = max(1, RESIDENT_COPY_BYTES // row_bytes)
    for start in range(0, len(train_idx), block):
        rows = np.ascontiguousarray(images[train_idx[start : start + block]])
        out[start : start + len(rows)] = torch.from_numpy(rows).to(device)
    return out
