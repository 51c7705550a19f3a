"""The photos profile's smoke variant through `dvc exp run`, in a fresh copy of the repository:
a folder of colour photos, ResNet-18 at 64 px from a weights file torchvision's own resnet18 saved
from a seed (no ImageNet weights can be downloaded here), two epochs. It must train, score with
the paper's metrics and the peers' mAP, log the backbone and the weights' SHA-256, register the
encoder, index the database, and the search service must encode an uploaded photo with that
backbone and find the photo itself.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
import requests
import torch
from PIL import Image
from torchvision import models

from shdh.data.dataset import load_dataset
from shdh.data.folder import make_shapes_folder
from shdh.serving import RegisteredModel, create_app
from tests.e2e.clone import clone_repo, sh
from tests.e2e.test_own_data import set_params
from tests.serving.server import AUTH, TOKEN, serving

pytestmark = pytest.mark.slow
WEIGHTS = "weights/resnet18-seed0.pth"
RESULTS = Path("results/photos/photos-smoke")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """The clone with data/photos (12 leaves x 5 photos of 64 px), the seeded weights file and the
    photos-smoke profile, after `dvc exp run` with the issue's settings spelt out."""
    dest = tmp_path_factory.mktemp("photos") / "shdh"
    env = clone_repo(dest)
    make_shapes_folder(dest / "data" / "photos", n_per_leaf=5, size=64)
    (dest / "weights").mkdir()
    torch.manual_seed(0)
    torch.save(models.resnet18(weights=None).state_dict(), dest / WEIGHTS)
    set_params(dest, data={"dataset": "folder", "raw_dir": "data/photos"})
    applied = sh(["shdh", "profile", "apply", "photos-smoke"], dest, env)
    assert f"results go to {RESULTS}" in applied
    sh(["git", "commit", "-qam", "photos-smoke"], dest, env)
    settings = ["train.backbone=resnet18", f"train.pretrained={WEIGHTS}", "data.image_size=64"]
    out = sh(["dvc", "exp", "run", *[a for s in settings for a in ("-S", s)]], dest, env)
    return dest, env, out


def test_the_photos_run_trains_scores_registers_and_indexes(photos):
    dest, env, out = photos
    for stage in ("prepare", "train@shdh", "evaluate", "register", "index"):
        assert f"Running stage '{stage}'" in out, stage
    metrics = json.loads((dest / RESULTS / "metrics.json").read_text())
    scores = metrics["shdh"]["16"]
    for key in ("ndcg@100", "map@1000", "map@all", "mahp@2500"):
        assert 0 <= scores[key] <= 1, key
    fit = json.loads((dest / "artifacts/models/shdh/shdh-16/fit.json").read_text())
    sha = hashlib.sha256((dest / WEIGHTS).read_bytes()).hexdigest()
    assert fit["backbone"] == "resnet18" and fit["pretrained_sha256"] == sha
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    runs = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.backbone = 'resnet18'"
    )
    assert len(runs) >= 1 and set(runs["tags.pretrained_sha256"]) == {sha}
    assert set(runs["params.augment"]) == {"True"}


def database_photo(dest: Path) -> tuple[Path, int]:
    """A photo of the database (not a query) and its item id: the prepared image equal to the
    decoded file names it."""
    ds = load_dataset(dest / "artifacts" / "prepared" / "dataset")
    in_index = set(np.load(dest / "artifacts" / "index" / "index.npz")["item_ids"].tolist())
    for photo in sorted((dest / "data" / "photos").rglob("*.png")):
        pixels = np.asarray(Image.open(photo).convert("RGB"))
        same = [i for i in range(len(ds.ids)) if np.array_equal(ds.images[i], pixels)]
        if same and int(ds.ids[same[0]]) in in_index:
            return photo, int(ds.ids[same[0]])
    raise AssertionError("no database photo found")


def test_the_service_encodes_an_uploaded_photo_with_the_registered_backbone(photos, monkeypatch):
    dest, env, _ = photos
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env["MLFLOW_TRACKING_URI"])
    photo, item_id = database_photo(dest)
    source = RegisteredModel("shdh-encoder", "champion")
    with serving(create_app(dest / "artifacts" / "index", encoder=source, token=TOKEN)) as url:
        body = {"images": [base64.b64encode(photo.read_bytes()).decode()], "k": 200}
        answer = requests.post(f"{url}/search/images", json=body, headers=AUTH, timeout=120)
    assert answer.status_code == 200, answer.text
    hits = answer.json()["results"][0]["hits"]
    # the upload's code is the one the index holds for that photo: the same backbone, the same view
    assert {"item_id": item_id, "distance": 0} in [
        {"item_id": h["item_id"], "distance": h["distance"]} for h in hits
    ]
