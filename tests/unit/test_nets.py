import numpy as np
import pytest
import torch
from torch import nn

from shdh.nets.cnnf import CNNF, to_input
from shdh.nets.hashing import HashingNet, build_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _images(n: int, side: int, channels: int | None, seed: int = 0) -> np.ndarray:
    shape = (n, side, side) if channels is None else (n, side, side, channels)
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


@pytest.mark.parametrize("width", [1 / 8, 1 / 4])
@pytest.mark.parametrize("side", [28, 32])
@pytest.mark.parametrize("channels", [1, 3])
def test_cnnf_shapes(width: float, side: int, channels: int) -> None:
    net = CNNF(channels, width=width).eval()
    x = to_input(_images(2, side, None if channels == 1 else channels), 32)
    assert x.shape == (2, channels, 32, 32)
    with torch.no_grad():
        out = net(x)
    assert out.shape == (2, round(4096 * width))
    assert net.out_features == round(4096 * width)
    convs = [m.out_channels for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert convs == [round(64 * width)] + [round(256 * width)] * 4


def test_cnnf_full_width_is_cnnf() -> None:
    net = CNNF(3)  # 35M parameters: about a second to initialise
    convs = [m for m in net.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [64, 256, 256, 256, 256]
    assert [c.kernel_size for c in convs] == [(5, 5), (5, 5), (3, 3), (3, 3), (3, 3)]
    fcs = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert [(f.in_features, f.out_features) for f in fcs] == [(256 * 4 * 4, 4096), (4096, 4096)]


def test_cnnf_other_image_size() -> None:
    net = CNNF(1, width=1 / 16, image_size=16).eval()
    with torch.no_grad():
        assert net(torch.zeros(3, 1, 16, 16)).shape == (3, 256)


@pytest.mark.parametrize(
    "kwargs", [{"in_channels": 0}, {"width": 0.0}, {"image_size": 4}, {"dropout": 1.0}]
)
def test_cnnf_bad_args(kwargs: dict) -> None:
    args = {"in_channels": 1} | kwargs
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        CNNF(**args)


def test_to_input_scaling_and_padding() -> None:
    img = _images(2, 28, None)
    x = to_input(img, 32)
    assert x.dtype == torch.float32 and x.shape == (2, 1, 32, 32)
    expected = torch.from_numpy(img).float() / 127.5 - 1
    assert torch.equal(x[:, 0, 2:30, 2:30], expected)
    border = torch.ones(32, 32, dtype=torch.bool)
    border[2:30, 2:30] = False
    assert torch.all(x[:, 0][:, border] == -1.0)  # padded with pixel value 0
    ends = to_input(np.array([[[0, 255]]], dtype=np.uint8), 32)
    assert ends.min() == -1.0 and ends.max() == 1.0


def test_to_input_channels_last_and_torch_input() -> None:
    img = _images(2, 32, 3)
    x = to_input(torch.from_numpy(img), 32)
    assert x.shape == (2, 3, 32, 32)
    assert torch.equal(x[1, 2], torch.from_numpy(img[1, :, :, 2]).float() / 127.5 - 1)


@pytest.mark.parametrize("side", [16, 64])
def test_to_input_resizes_other_sizes(side: int) -> None:
    img = np.full((2, side, side), 200, dtype=np.uint8)
    x = to_input(img, 32)
    assert x.shape == (2, 1, 32, 32)
    assert torch.allclose(x, torch.full_like(x, 200 / 127.5 - 1), atol=1e-5)


def test_to_input_bad_input() -> None:
    with pytest.raises(ValueError, match="uint8"):
        to_input(np.zeros((2, 32, 32), dtype=np.float32), 32)
    with pytest.raises(ValueError, match=r"\(B,H,W\)"):
        to_input(np.zeros((32, 32), dtype=np.uint8), 32)


def test_hashing_net_output_and_segments() -> None:
    model = build_model(
        in_channels=1,
        n_bits=12,
        width=1 / 16,
        image_size=32,
        head_init="default",
        segment_sizes=[6, 6],
    )
    assert isinstance(model, HashingNet)
    assert model.segment_sizes == (6, 6) and model.image_size == 32
    with torch.no_grad():
        z = model.eval()(to_input(_images(3, 28, None), 32))
    assert z.shape == (3, 12)
    assert build_model(in_channels=1, n_bits=12, width=1 / 16).segment_sizes == (12,)


def test_paper_head_init_starts_near_zero() -> None:
    model = build_model(in_channels=1, n_bits=8, width=1 / 16, head_init="paper")
    w, b = model.head.weight.detach(), model.head.bias.detach()
    assert 0 <= float(w.min()) and float(w.max()) <= 1e-3
    assert 0 <= float(b.min()) and float(b.max()) <= 1e-3
    default = build_model(in_channels=1, n_bits=8, width=1 / 16)
    assert float(default.head.weight.detach().min()) < 0  # fan-in init: signed weights


class _NoFeatures(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"segment_sizes": [4, 3]}, "sum to n_bits"),
        ({"segment_sizes": [8, 0]}, "segment_sizes"),
        ({"head_init": "zeros"}, "head_init"),
        ({"n_bits": 0, "segment_sizes": [1]}, "n_bits"),
    ],
)
def test_hashing_net_bad_args(args: dict, match: str) -> None:
    kwargs = {"n_bits": 8, "segment_sizes": [8]} | args
    with pytest.raises(ValueError, match=match):
        HashingNet(CNNF(1, width=1 / 16), **kwargs)
    with pytest.raises(ValueError, match="out_features"):
        HashingNet(_NoFeatures(), 8, [8])
