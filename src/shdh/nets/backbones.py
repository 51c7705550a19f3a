"""The backbones a hashing network can stand on: the project's 32x32 CNN-F (shdh.nets.cnnf), the
torchvision models fine-tuning users reach for (AlexNet, ResNet-18/50, ViT-B/16) and
EfficientNet-Lite0 (shdh.nets.efficientnet_lite), each cut before its ImageNet classifier.

Every backbone takes the project's one input, uint8 images made float in [-1, 1] by
shdh.core.image_input.to_input, and does the rest itself: a grayscale image is repeated to the three
channels an ImageNet network has, and the [-1, 1] values are mapped to the normalisation its
pretrained weights were trained with. Keeping that inside the module (as buffers that are not
saved) means training, encoding, the search service and a logged MLflow model all feed a network
the same way, and a state dict is torchvision's own, so that its weights files load unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from shdh.nets import BACKBONES
from shdh.nets.cnnf import CNNF
from shdh.nets.efficientnet_lite import CLASSIFIER_KEYS as LITE_CLASSIFIER
from shdh.nets.efficientnet_lite import INPUT_MEAN as LITE_MEAN
from shdh.nets.efficientnet_lite import INPUT_STD as LITE_STD
from shdh.nets.efficientnet_lite import EfficientNetLite0

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class BackboneKind:
    """What the hashing network needs to know of a backbone beyond its module."""

    build: Callable[[int], tuple[nn.Module, int]]  # image_size -> (body, feature width)
    mean: tuple[float, float, float]  # the pretrained weights' input normalisation
    std: tuple[float, float, float]
    classifier_keys: tuple[str, ...]  # keys of a weights file that the hashing head replaces
    min_size: int  # the smallest input side its pooling leaves a feature map for
    size_step: int = 1  # ViT: the side must be a multiple of its patch


def _resnet(name: str) -> Callable[[int], tuple[nn.Module, int]]:
    def build(image_size: int) -> tuple[nn.Module, int]:
        from torchvision import models

        body = getattr(models, name)(weights=None)
        width = body.fc.in_features
        body.fc = nn.Identity()
        return body, width

    return build


def _alexnet(image_size: int) -> tuple[nn.Module, int]:
    from torchvision import models

    body = models.alexnet(weights=None)
    body.classifier[6] = nn.Identity()  # up to fc7, as the paper's CNN-F features
    return body, 4096


def _vit_b_16(image_size: int) -> tuple[nn.Module, int]:
    from torchvision import models

    body = models.vit_b_16(weights=None, image_size=image_size)
    body.heads = nn.Identity()
    return body, body.hidden_dim


def _lite0(image_size: int) -> tuple[nn.Module, int]:
    body = EfficientNetLite0()
    return body, body.out_features


KINDS: dict[str, BackboneKind] = {
    "alexnet": BackboneKind(
        _alexnet, IMAGENET_MEAN, IMAGENET_STD, ("classifier.6.weight", "classifier.6.bias"), 63
    ),
    "resnet18": BackboneKind(
        _resnet("resnet18"), IMAGENET_MEAN, IMAGENET_STD, ("fc.weight", "fc.bias"), 32
    ),
    "resnet50": BackboneKind(
        _resnet("resnet50"), IMAGENET_MEAN, IMAGENET_STD, ("fc.weight", "fc.bias"), 32
    ),
    "vit_b_16": BackboneKind(
        _vit_b_16, IMAGENET_MEAN, IMAGENET_STD, ("heads.head.weight", "heads.head.bias"), 16, 16
    ),
    "efficientnet_lite0": BackboneKind(_lite0, LITE_MEAN, LITE_STD, LITE_CLASSIFIER, 32),
}


class PretrainedBackbone(nn.Module):
    """A torchvision-style network cut before its classifier, fed the project's [-1, 1] input.

    `body` holds the network under its own parameter names (a torchvision weights file loads into
    it as it is); `out_features` is the width of its pooled features."""

    def __init__(self, name: str, in_channels: int, image_size: int) -> None:
        super().__init__()
        kind = check_backbone(name, image_size)
        if in_channels not in (1, 3):
            raise ValueError(f"{name}: images must have 1 or 3 channels, got {in_channels}")
        self.name, self.image_size, self.in_channels = name, image_size, in_channels
        self.body, self.out_features = kind.build(image_size)
        self.classifier_keys = kind.classifier_keys
        # x in [-1, 1] -> (x01 - mean) / std = x * scale + shift, per channel
        mean, std = torch.tensor(kind.mean), torch.tensor(kind.std)
        self.register_buffer("scale", (0.5 / std).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("shift", ((0.5 - mean) / std).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)  # (B, 3, S, S): the ImageNet networks see RGB
        return self.body(x * self.scale + self.shift)  # (B, F)


def check_backbone(name: str, image_size: int) -> BackboneKind:
    """The backbone's kind, once its input side is known to suit it (a clear error else)."""
    if name not in KINDS:
        raise ValueError(f"train.backbone: unknown backbone {name!r} (known: {list(BACKBONES)})")
    kind = KINDS[name]
    if image_size < kind.min_size or image_size % kind.size_step:
        step = f" and a multiple of {kind.size_step}" if kind.size_step > 1 else ""
        raise ValueError(
            f"train.image_size: {name} needs an input side >= {kind.min_size}{step}, "
            f"got {image_size}"
        )
    return kind


def build_backbone(name: str, in_channels: int, width: float, image_size: int) -> nn.Module:
    """The backbone `name` with random weights (pretrained ones are loaded afterwards,
    shdh.nets.pretrained); `width` scales the CNN-F only."""
    if name == "cnnf":
        return CNNF(in_channels, width=width, image_size=image_size)
    return PretrainedBackbone(name, in_channels, image_size)
