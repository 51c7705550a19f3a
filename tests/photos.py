"""The photos profile's smoke settings for a folder of photos and a weights file, and the weights
file itself: torchvision's resnet18 from a seed (no ImageNet weights can be downloaded here).
Shared by the tests that run those settings through the DAG."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from shdh.kubeflow import resolve_params
from shdh.settings.profiles import deep_merge
from tests.conftest import REPO


def photos_settings(photos: Path, weights: str | Path) -> dict:
    """params.yaml with the photos-smoke profile, reading these photos and weights, on one torch
    thread (as tests/pipelines compare front doors)."""
    params = resolve_params(REPO / "params.yaml", "photos-smoke", profiles_dir=REPO / "profiles")
    return deep_merge(
        params,
        {
            "data": {"dataset": "folder", "raw_dir": str(photos)},
            "train": {"pretrained": str(weights), "num_threads": 1},
        },
    )


def seeded_resnet18(path: Path) -> str:
    """torchvision's resnet18 from seed 0, saved as its weights file; returns its SHA-256."""
    torch.manual_seed(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    from torchvision import models  # here: importing it costs each test worker 2 s

    torch.save(models.resnet18(weights=None).state_dict(), path)
    return hashlib.sha256(path.read_bytes()).hexdigest()
