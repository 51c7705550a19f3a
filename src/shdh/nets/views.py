"""The views of a photo the network is shown: a random one per step in training (random resized
crop and horizontal flip, torchvision.transforms.v2), a fixed one for encoding (resize, centre
crop), the usual fine-tuning recipe. Both map uint8 images (B, H, W[, C]) to uint8 (B, S, S[, C])
on the images' own device (a CUDA run crops on the card, a batch in one call), so that
shdh.core.image_input.to_input and the backbone's normalisation follow unchanged.

The crop parameters are drawn by this module from a generator the caller seeds (per epoch), not
from torch's global generator: a run is then reproducible, a resumed one included, and turning
augmentation on does not shift the dropout draws of the network. torchvision is imported when a
view is made: the CNN-F trains without it (a bare GPU machine has torch alone).
"""

from __future__ import annotations

import math

import torch

# torchvision's default ratio range; the smallest crop is a quarter of the image rather than its
# 8%: a hashing fine-tune runs few epochs, and codes learnt from tiny crops rank whole photos worse.
CROP_SCALE = (0.25, 1.0)
CROP_RATIO = (3 / 4, 4 / 3)
# Encoding resizes to size / 0.875 and keeps the centre (224 from 256), as ImageNet evaluation does.
CENTRE_FRACTION = 0.875


def _channels_first(images: torch.Tensor) -> torch.Tensor:
    if images.dtype != torch.uint8 or images.ndim not in (3, 4):
        raise ValueError(
            f"views: expected uint8 (B,H,W[,C]) images, got {images.dtype} {tuple(images.shape)}"
        )
    return images.unsqueeze(1) if images.ndim == 3 else images.permute(0, 3, 1, 2)


def _channels_last(images: torch.Tensor, ndim: int) -> torch.Tensor:
    return images.squeeze(1) if ndim == 3 else images.permute(0, 2, 3, 1).contiguous()


def crop_box(h: int, w: int, generator: torch.Generator) -> tuple[int, int, int, int]:
    """(top, left, height, width) of a random resized crop: an area of CROP_SCALE and an aspect
    of CROP_RATIO (log-uniform), ten tries, then the whole image (RandomResizedCrop's rule)."""
    area = h * w
    log_ratio = (math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]))
    for _ in range(10):
        u = torch.rand(4, generator=generator, dtype=torch.float64).tolist()
        target = area * (CROP_SCALE[0] + u[0] * (CROP_SCALE[1] - CROP_SCALE[0]))
        ratio = math.exp(log_ratio[0] + u[1] * (log_ratio[1] - log_ratio[0]))
        cw, ch = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            return int(u[2] * (h - ch + 1)), int(u[3] * (w - cw + 1)), ch, cw
    return 0, 0, h, w


def train_view(images: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """A random resized crop to size x size and a coin-flip horizontal flip of every image."""
    x = _channels_first(images)
    h, w = x.shape[-2:]
    flips = torch.rand(len(x), generator=generator) < 0.5
    boxes = [crop_box(h, w, generator) for _ in range(len(x))]
    crops = crops_in_one_call if x.is_cuda else crops_one_by_one
    views = crops(x, boxes, size)
    views = torch.where(flips.to(views.device)[:, None, None, None], views.flip(-1), views)
    return _channels_last(views, images.ndim)


def crops_one_by_one(x: torch.Tensor, boxes: list[tuple[int, ...]], size: int) -> torch.Tensor:
    """Each box resized by torchvision.transforms.v2 (bilinear, antialiased): on a CPU the
    fastest way, and the resampling every CPU run has used."""
    from torchvision.transforms.v2 import functional as TF

    views = [
        TF.resized_crop(image, *box, [size, size], antialias=True)
        for image, box in zip(x, boxes, strict=True)
    ]
    return torch.stack(views)


def crops_in_one_call(x: torch.Tensor, boxes: list[tuple[int, ...]], size: int) -> torch.Tensor:
    """Every box resampled by one roi_align kernel. On a card a call per image costs its kernel
    launches and the Python between them (30 us an image on a Zen 4 core before any launch: 8 ms
    for a batch of 256) while the card waits, against some 90 ms for a ResNet-50 step of 256.
    aligned=True samples at pixel centres, as a resize does; the adaptive sampling grid
    (ceil(box / size) points a side, averaged) is the antialiasing of a downscale, plain
    bilinear when the box is smaller than the view. The same boxes and flips as on a CPU; on
    photos the pixels part by a fraction of a grey level on average, three at the 99th
    percentile."""
    from torchvision.ops import roi_align

    rois = torch.tensor(
        [(i, left, top, left + cw, top + ch) for i, (top, left, ch, cw) in enumerate(boxes)],
        dtype=torch.float32,
    ).to(x.device)
    out = roi_align(x.float(), rois, (size, size), 1.0, sampling_ratio=-1, aligned=True)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def eval_view(images: torch.Tensor, size: int) -> torch.Tensor:
    """The shorter side resized to size / 0.875, then the centre size x size."""
    from torchvision.transforms.v2 import functional as TF

    x = _channels_first(images)
    x = TF.resize(x, [round(size / CENTRE_FRACTION)], antialias=True)
    return _channels_last(TF.center_crop(x, [size, size]), images.ndim)
