"""The trained network applied: its outputs and binary codes for a set of images, in eval mode,
on a fixed number of CPU threads. Encoding, the training loop's probe codes and the hashers'
`encode` all go through here, so every code is made the same way.
"""

import contextlib
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

from shdh.nets.hashing import HashingNet
from shdh.runtime.devices import resolve_device

# uint8 pixels turned into network input at a time. A batch of 512 photos at 224 px is 77 MB
# of uint8 and four times that in float before it is resized to the network's side; converting
# it in parts bounds that, and the network still sees the whole batch at once.
INPUT_BYTES = 4 * 2**20
# Images one forward pass encodes: 512 up to the CNN-F's and the smoke runs' sides, fewer as the
# network's input grows, so that its activations stay under a gigabyte: a ResNet-50 at 224 px
# grew a CPU process by 0.7 GiB at 64 images and by 2.7 GiB at 256 (5.5 at 512, more than an
# evaluate or index pod holds).
MAX_ENCODE_BATCH = 512
ENCODE_PIXELS = 64 * 224 * 224


def encode_batch(model: nn.Module) -> int:
    """The images `model` encodes at a time, from its input side (ENCODE_PIXELS)."""
    side = int(getattr(model, "image_size", 32))
    return max(1, min(MAX_ENCODE_BATCH, ENCODE_PIXELS // (side * side)))


@torch.no_grad()
def forward_all(
    model: nn.Module, images: np.ndarray, idx: np.ndarray, batch_size: int, device: torch.device
) -> torch.Tensor:
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(idx), batch_size):
        x = _network_input(model, images, idx[start : start + batch_size], device)
        out.append(model(x).float())  # (b, L)
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, model.n_bits, device=device)


def _network_input(
    model: nn.Module, images: np.ndarray, rows: np.ndarray, device: torch.device
) -> torch.Tensor:
    """The network's input for images[rows], converted at most INPUT_BYTES of pixels at a time
    (each image is converted on its own, so the parts joined are the input of one conversion)."""
    part = max(1, INPUT_BYTES // max(1, int(np.prod(images.shape[1:])) * images.itemsize))
    if len(rows) <= part:
        return model.encoding_input(images[rows], device)
    starts = range(0, len(rows), part)
    return torch.cat([model.encoding_input(images[rows[s : s + part]], device) for s in starts])


@contextlib.contextmanager
def torch_threads(num_threads: int | None) -> Iterator[None]:
    """Run the block on num_threads torch CPU threads (None: as set), then restore the count.

    Float sums, and so trained weights and the signs of near-zero outputs, depend on the thread
    count; pinning it makes runs agree bit for bit across processes and machines.
    """
    old = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def outputs(
    model: HashingNet,
    images: np.ndarray,
    *,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
    num_threads: int | None = None,
) -> torch.Tensor:
    """The network's outputs z (N, L), eval mode, no grad, in fp32 (even where training used
    bf16, so that results do not depend on the precision of the card), batch_size images at a
    time (None: encode_batch). `device` moves the model there first; None keeps it where it
    is."""
    if device is not None:
        model.to(resolve_device(str(device)))
    dev = next(model.parameters()).device
    batch_size = batch_size or encode_batch(model)
    with torch_threads(num_threads):
        return forward_all(model, images, np.arange(len(images)), batch_size, dev)


def encode(
    model: HashingNet,
    images: np.ndarray,
    *,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
    num_threads: int | None = None,
) -> np.ndarray:
    """Codes sgn(z) in {-1, +1}, int8 (N, L), with sgn(0) = -1 (see `outputs`)."""
    z = outputs(model, images, batch_size=batch_size, device=device, num_threads=num_threads)
    return signs(z).numpy()


def signs(z: torch.Tensor) -> torch.Tensor:
    """sgn(z) in {-1, +1} as int8 on the host, with sgn(0) = -1."""
    return torch.where(z > 0, 1, -1).to(torch.int8).cpu()
