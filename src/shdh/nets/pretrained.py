"""Pretrained weights for a backbone: where `train.pretrained` points, checked, and loaded.

`train.pretrained` is "none", a local file, an s3:// or https:// location, or a torchvision
weights name ("ResNet50_Weights.IMAGENET1K_V2"). The network layer reads local files only: a
remote location is fetched beforehand (with its SHA-256 verified) by the fit step into
`remote_copy`'s place (shdh.data.weights_fetch), and a torchvision name is read from TORCH_HOME's
cache, where torchvision itself keeps downloaded weights. Nothing is downloaded here: these
machines, and many clusters, cannot reach download.pytorch.org, and a fit that silently fetched
other bytes would not be the fit its record names. A file is torchvision's format, a state dict of
tensors, loaded with `weights_only` (no pickled code runs); its keys are checked against the
backbone's, the ImageNet classifier's excepted, so that weights of another network fail by name
instead of loading half a model. The file's SHA-256 names the weights in the checkpoint, the fit
record and the MLflow run.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

NONE = "none"
REMOTE_SCHEMES = ("s3://", "https://", "http://")
_TORCHVISION_NAME = re.compile(r"^[A-Za-z0-9_]+_Weights\.[A-Z0-9_]+$")
_CACHE_ENV = "SHDH_WEIGHTS_CACHE"
_CHUNK = 1 << 20


class WeightsError(ValueError):
    """Pretrained weights that cannot be used: missing, altered, or of another network."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def weights_cache() -> Path:
    """Where fetched remote weights are kept: SHDH_WEIGHTS_CACHE, else TORCH_HOME's (torch.hub's
    directory)/shdh-weights."""
    explicit = os.environ.get(_CACHE_ENV)
    return Path(explicit) if explicit else Path(torch.hub.get_dir()) / "shdh-weights"


def remote_copy(location: str) -> Path:
    """The local file a remote location is fetched to: named by a digest of the location, so two
    locations with the same file name do not collide, and by its own name, so a person can tell."""
    tag = hashlib.sha256(location.encode()).hexdigest()[:16]
    name = location.rstrip("/").rsplit("/", 1)[-1] or "weights.pth"
    return weights_cache() / f"{tag}-{name}"


def is_torchvision_name(spec: str) -> bool:
    return bool(_TORCHVISION_NAME.match(spec))


def _torchvision_file(name: str) -> Path:
    """The cached file of a torchvision weights name; a clear error naming the file to place and
    where when it is not there (torchvision's file names carry the first hex digits of their
    SHA-256, which the caller checks)."""
    from torchvision import models

    try:
        url = models.get_weight(name).url
    except (ValueError, KeyError, AttributeError) as err:
        raise WeightsError(f"train.pretrained: {name!r} is not a torchvision weights name") from err
    path = Path(torch.hub.get_dir()) / "checkpoints" / url.rsplit("/", 1)[-1]
    if not path.is_file():
        raise WeightsError(
            f"train.pretrained: {name} is not in TORCH_HOME's cache and cannot be downloaded "
            f"here: place the file {path.name} (from {url}) at {path}"
        )
    return path


def weights_file(spec: str) -> Path | None:
    """The local file `spec` means; None for "none"."""
    if spec == NONE:
        return None
    if spec.startswith(REMOTE_SCHEMES):
        path = remote_copy(spec)
        if not path.is_file():
            raise WeightsError(
                f"train.pretrained: {spec} has not been fetched to {path}; the fit step fetches "
                "it (shdh.data.weights_fetch.fetch_weights), or place the file there"
            )
        return path
    if is_torchvision_name(spec):
        return _torchvision_file(spec)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise WeightsError(f"train.pretrained: {path}: no such file")
    return path


def checked_sha256(path: Path, expected: str | None, spec: str) -> str:
    """The file's SHA-256, equal to `expected` when one is given; a torchvision file's name
    carries the start of its own, checked too."""
    sha = file_sha256(path)
    if expected is not None and sha != expected.lower():
        raise WeightsError(
            f"train.pretrained_sha256: {path} has SHA-256 {sha}, expected {expected.lower()}"
        )
    prefix = re.search(r"-([0-9a-f]{8,})\.[a-z]+$", path.name)
    if is_torchvision_name(spec) and prefix and not sha.startswith(prefix.group(1)):
        raise WeightsError(f"train.pretrained: {path} is altered: its SHA-256 is {sha}")
    return sha


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A torchvision weights file: a mapping of parameter names to tensors, unpickled without
    running code."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several kinds for a file that is not a state dict
        # not torch's own text: it suggests weights_only=False, which runs the file's code
        raise WeightsError(
            f"train.pretrained: {path}: not a PyTorch weights file (a state dict that torch.save "
            f"wrote; {type(err).__name__})"
        ) from err
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise WeightsError(
            f"train.pretrained: {path}: expected a state dict (parameter names to tensors), as "
            "torchvision saves one; a training checkpoint holds it under a key, save that alone"
        )
    return state


def _fitted_to(target: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ViT weights made at another input side: the position embeddings interpolated to this one,
    as torchvision's own fine-tuning recipe does."""
    image_size = getattr(target, "image_size", None)
    key = "encoder.pos_embedding"
    if key not in state or key not in target.state_dict():
        return state
    if state[key].shape == target.state_dict()[key].shape:
        return state
    from torchvision.models.vision_transformer import interpolate_embeddings

    return interpolate_embeddings(image_size, target.patch_size, state)


def load_into(body: nn.Module, path: Path, ignored: tuple[str, ...]) -> None:
    """Load the weights file at `path` into `body`, refusing missing, unexpected or misshapen
    keys by name (`ignored`: the ImageNet classifier's keys, replaced by the hashing head)."""
    state = _fitted_to(body, {k: v for k, v in read_state_dict(path).items() if k not in ignored})
    own = body.state_dict()
    # torchvision's older files predate BatchNorm's counter; torch fills it in on load
    missing = [k for k in own if k not in state and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in state if k not in own]
    misshapen = [
        f"{k} {tuple(state[k].shape)} (expected {tuple(own[k].shape)})"
        for k in state
        if k in own and state[k].shape != own[k].shape
    ]
    problems = [
        f"{label} ({len(keys)}): {', '.join(keys[:5])}{' ...' if len(keys) > 5 else ''}"
        for label, keys in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("misshapen", misshapen),
        )
        if keys
    ]
    if problems:
        raise WeightsError(
            f"train.pretrained: {path} does not fit the {type(body).__name__} backbone: "
            + "; ".join(problems)
        )
    body.load_state_dict(state, strict=False)


@dataclass(frozen=True)
class Weights:
    """The pretrained weights a fit starts from: what the settings said, the local file, and
    its SHA-256 (the name the records give them)."""

    spec: str
    path: Path
    sha256: str

    @classmethod
    def of(cls, settings: Any) -> Weights | None:
        """The weights `settings.pretrained` names (checked against settings.pretrained_sha256);
        None for "none"."""
        path = weights_file(settings.pretrained)
        if path is None:
            return None
        sha = checked_sha256(path, settings.pretrained_sha256, settings.pretrained)
        return cls(settings.pretrained, path, sha)

    def load(self, backbone: nn.Module) -> None:
        """Into a backbone of shdh.nets.backbones: a torchvision one's `body`, past the
        classifier's keys, or the CNN-F itself."""
        body = getattr(backbone, "body", backbone)
        load_into(body, self.path, getattr(backbone, "classifier_keys", ()))
