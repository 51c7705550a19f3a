"""uint8 images as float input, S x S: the geometry the network (shdh.nets.cnnf) and the GIST
features (shdh.features.gist) share, in a module of its own so that computing the features loads
no network code (nor does their DVC stage rerun when the network changes).
"""

import numpy as np
import torch
import torch.nn.functional as F

ARRAY_ATTRIBUTES = ("dtype", "ndim", "shape", "__getitem__")


def is_image_array(images: object) -> bool:
    """An np.ndarray or an array-like read by rows when indexed (a dataset's shards,
    shdh.data.shards): what the features, the training loop and encoding accept, since they
    only ever index images by rows."""
    return all(hasattr(images, name) for name in ARRAY_ATTRIBUTES)


# A smaller image is zero-padded (not resized) when it fits with at most this border per side,
# e.g. 28x28 Fashion-MNIST -> 32x32: exact and cheap, no interpolation blur.
_MAX_PAD = 2


def to_input(
    batch: np.ndarray | torch.Tensor,
    image_size: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """uint8 images (B,H,W) or (B,H,W,C) -> float32 (B,C,S,S) in [-1, 1] on `device`.

    Converts per batch, on the target device, so a data set (or a np.memmap of it) is never
    copied whole to float. Images that fit with a border of at most 2 pixels are padded with
    pixel value 0 (28 -> 32: exact, keeps MNIST-style black backgrounds); others are resized
    bilinearly (antialiased when shrinking).
    """
    x = torch.as_tensor(batch)
    if x.dtype != torch.uint8:
        raise ValueError(f"to_input: images must be uint8, got {x.dtype}")
    if x.ndim == 3:
        x = x.unsqueeze(-1)  # (B, H, W, 1)
    if x.ndim != 4:
        raise ValueError(f"to_input: images must be (B,H,W) or (B,H,W,C), got {tuple(x.shape)}")
    x = x.to(device).permute(0, 3, 1, 2)  # (B, C, H, W) uint8
    h, w = x.shape[2], x.shape[3]
    if (h, w) != (image_size, image_size):
        dh, dw = image_size - h, image_size - w
        if 0 <= dh <= 2 * _MAX_PAD and 0 <= dw <= 2 * _MAX_PAD:
            top, left = dh // 2, dw // 2
            x = F.pad(x, (left, dw - left, top, dh - top))  # (B, C, S, S), padded with 0
        else:
            shrink = h > image_size or w > image_size
            x = F.interpolate(
                x.float(),
                size=(image_size, image_size),
                mode="bilinear",
                align_corners=False,
                antialias=shrink,
            ).clamp_(0, 255)  # (B, C, S, S)
    return x.float().div_(127.5).sub_(1.0)  # (B, C, S, S) in [-1, 1]
