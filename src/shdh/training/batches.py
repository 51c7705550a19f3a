"""Where a run's training images live, and how a batch reaches the network: indexed on the host
(CPU), resident on the GPU, or gathered into pinned host buffers and copied asynchronously.
"""

import logging

import numpy as np
import torch

log = logging.getLogger(__name__)

# The uint8 training images stay on the GPU for the whole run when they take at most this share
# of its free memory: gathering a batch there costs no host work and no copy. Fashion-MNIST-H
# (63,000 x 28 x 28) is 49 MB and CIFAR-100 (54,000 x 32 x 32 x 3) 166 MB, far below it.
RESIDENT_SHARE = 0.5


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

    Batches are addressed by positions into train_idx. On the CPU a batch is indexed from the
    array exactly as before this class existed, so CPU results are bit-identical; on a GPU the
    conversion to float (`to_input`) happens on the device in every path.
    """

    def __init__(
        self, images: np.ndarray, train_idx: np.ndarray, device: torch.device, batch_size: int
    ) -> None:
        self.images, self.train_idx, self.device = images, train_idx, device
        item_bytes = int(np.prod(images.shape[1:])) * images.itemsize
        self.mode = data_path(item_bytes * len(train_idx), device)
        size = f"{item_bytes * len(train_idx) / 2**20:.0f} MiB"
        if self.mode == "resident":
            self.resident = torch.from_numpy(np.ascontiguousarray(images[train_idx])).to(device)
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
        np.take(self.images, rows, axis=0, out=buf.numpy())
        batch = buf.to(self.device, non_blocking=True)
        self.copied[self.turn] = torch.cuda.Event()
        self.copied[self.turn].record()
        self.turn = 1 - self.turn
        return batch
