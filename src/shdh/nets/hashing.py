"""The SHDH network: a backbone followed by a segmented hashing layer (paper Sec. "Supervised
Hierarchical Deep Hashing").

The hashing layer is L linear units with no activation; its output z is relaxed through tanh by
the loss and binarised as sgn(z) for codes. The L units are split into segments, one per level of
the label tree (the caller decides the layout), and the segment sizes travel with the model so
that encoding and retrieval cannot use a different split from training.
"""

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from shdh.core.image_input import to_input
from shdh.nets import HEAD_INITS
from shdh.nets.backbones import build_backbone
from shdh.nets.views import eval_view

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


class HashingNet(nn.Module):
    """backbone (any module with `out_features` and `image_size`) + L-unit linear hashing layer.

    head_init="paper" draws the hashing layer's weights and bias uniformly from [0, 0.001], as the
    paper says. Then every z is a tiny positive number, tanh(z) ~ z ~ 0 for all items: that is the
    h~ = 0 saddle docs/method.md measured (the codes never left it with a mean-normalised E1), so
    the default keeps PyTorch's fan-in initialisation, which starts with codes that differ per item.

    centre_crop: encode the centre view (shdh.nets.views.eval_view) of each image, the counterpart
    of training on random crops. freeze_bn: the backbone's batch-norm layers keep their running
    statistics in training too (what fine-tuning from pretrained weights with small batches wants).
    head_norm: the hashing layer is W x without a bias, then batch norm (OrthoHash's v = BN(W x):
    every bit zero-mean over the batch, which balances the bits); codes are the sign of the
    normalised output, with the running statistics when encoding.
    """

    def __init__(
        self,
        backbone: nn.Module,
        n_bits: int,
        segment_sizes: Sequence[int],
        head_init: str = "default",
        *,
        centre_crop: bool = False,
        freeze_bn: bool = False,
        head_norm: bool = False,
    ) -> None:
        super().__init__()
        if not hasattr(backbone, "out_features"):
            raise ValueError("HashingNet: backbone must have an `out_features` attribute")
        if n_bits < 1:
            raise ValueError(f"HashingNet: n_bits must be >= 1, got {n_bits}")
        sizes = tuple(int(s) for s in segment_sizes)
        if not sizes or min(sizes) < 1 or sum(sizes) != n_bits:
            raise ValueError(
                f"HashingNet: segment_sizes {sizes} must be positive and sum to n_bits={n_bits}"
            )
        if head_init not in HEAD_INITS:
            raise ValueError(
                f"HashingNet: head_init must be one of {HEAD_INITS}, got {head_init!r}"
            )
        self.backbone = backbone
        self.n_bits = n_bits
        self.segment_sizes = sizes
        self.centre_crop, self.freeze_bn = centre_crop, freeze_bn
        self.head = nn.Linear(backbone.out_features, n_bits, bias=not head_norm)
        if head_init == "paper":
            nn.init.uniform_(self.head.weight, 0.0, 1e-3)
            if self.head.bias is not None:
                nn.init.uniform_(self.head.bias, 0.0, 1e-3)
        # None adds nothing to the state: the other methods' saved networks keep their layout
        self.head_norm = nn.BatchNorm1d(n_bits) if head_norm else None

    @property
    def image_size(self) -> int:
        return int(self.backbone.image_size)

    def train(self, mode: bool = True) -> "HashingNet":
        super().train(mode)
        if mode and self.freeze_bn:
            for module in self.backbone.modules():
                if isinstance(module, _BATCH_NORMS):
                    module.eval()
        return self

    def encoding_input(
        self, images: np.ndarray | torch.Tensor, device: torch.device | str | None
    ) -> torch.Tensor:
        """uint8 images (B, H, W[, C]) -> the network's float input on `device`, the fixed view
        that encoding shows it."""
        if not self.centre_crop:
            return to_input(images, self.image_size, device)
        x = eval_view(torch.as_tensor(images).to(device), self.image_size)
        return to_input(x, self.image_size, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.backbone(x)  # (B, F)
        z = self.head(feats)  # (B, L) = z, no activation
        return z if self.head_norm is None else self.head_norm(z)


def build_model(
    *,
    in_channels: int,
    n_bits: int,
    width: float = 1.0,
    image_size: int = 32,
    head_init: str = "default",
    segment_sizes: Sequence[int] | None = None,
    backbone: str = "cnnf",
    centre_crop: bool = False,
    freeze_bn: bool = False,
    head_norm: bool = False,
) -> HashingNet:
    """A backbone (shdh.nets.backbones, random weights) + hashing layer; `segment_sizes` None
    means one segment of n_bits."""
    net = build_backbone(backbone, in_channels, width, image_size)
    sizes = (n_bits,) if segment_sizes is None else segment_sizes
    return HashingNet(
        net,
        n_bits,
        sizes,
        head_init=head_init,
        centre_crop=centre_crop,
        freeze_bn=freeze_bn,
        head_norm=head_norm,
    )
