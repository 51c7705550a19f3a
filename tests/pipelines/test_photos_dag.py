"""The photos profile's smoke settings as the Kubeflow DAG (kfp.local): a folder of photos,
ResNet-18 at 64 px from a weights file, the settings tests/e2e/test_photos.py runs through DVC.
The DAG must train with that backbone, record the weights' SHA-256 in the fit's MLflow run, and
score it with the paper's and the peers' metrics."""

from __future__ import annotations

import hashlib

import mlflow
import pytest
import torch
from torchvision import models

from shdh.data.folder import make_shapes_folder
from shdh.kubeflow import resolve_params
from shdh.settings.profiles import deep_merge
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def photos_settings(photos, weights) -> dict:
    """params.yaml with the photos-smoke profile, reading these photos and weights."""
    params = resolve_params(REPO / "params.yaml", "photos-smoke", profiles_dir=REPO / "profiles")
    return deep_merge(
        params,
        {
            "data": {"dataset": "folder", "raw_dir": str(photos)},
            "train": {"pretrained": str(weights), "num_threads": 1},
        },
    )


def seeded_resnet18(path) -> str:
    """torchvision's resnet18 from seed 0, saved as its weights file; returns its SHA-256."""
    torch.manual_seed(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(models.resnet18(weights=None).state_dict(), path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_dag_fine_tunes_a_pretrained_backbone_on_photos(tmp_path, monkeypatch):
    import pipelines

    photos = make_shapes_folder(tmp_path / "photos", n_per_leaf=8, size=64)
    sha = seeded_resnet18(tmp_path / "weights" / "resnet18-seed0.pth")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(REPO)
    run = pipelines.run_local(
        photos_settings(photos, tmp_path / "weights" / "resnet18-seed0.pth"), tmp_path / "kfp"
    )
    assert set(run.metrics) == {"shdh", "itq", "random"}
    row = run.metrics["shdh"]["16"]
    assert 0 < row["ndcg@100"] <= 1 and 0 < row["map@all"] <= 1 and 0 < row["mahp@2500"] <= 1
    mlflow.set_tracking_uri(uri)
    fits = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.backbone = 'resnet18'"
    )
    assert list(fits["tags.pretrained_sha256"]) == [sha]
    assert list(fits["params.image_size"]) == ["64"] and list(fits["params.augment"]) == ["True"]
