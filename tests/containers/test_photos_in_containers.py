"""The photos profile's smoke settings as the DAG in the project's runtime image: a folder of
photos, ResNet-18 at 64 px, the weights in the S3 server (s3://, fetched by the train step inside
its container and verified by their SHA-256), tracked into the MLflow server. The settings are
those tests/e2e/test_own_data.py runs through `dvc exp run`, with the weights file's place in the
object store, as a cluster's pods would find it. The DAG must train with that backbone, record
the weights in the fit's MLflow run and score it with the paper's and the peers' metrics."""

from __future__ import annotations

import mlflow
import pytest
import yaml

from shdh.data.folder import make_shapes_folder
from tests.containers.conftest import PASSWORD, USER, pipeline_env, run_pipeline
from tests.photos import photos_settings, seeded_resnet18

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CONTAINER_UID = 10001


def test_the_photos_dag_runs_in_the_image_with_weights_from_s3(
    runtime_image, mlflow_server, s3_server, tmp_path, monkeypatch
):
    root = tmp_path / "docker"
    photos = make_shapes_folder(root / "photos", n_per_leaf=5, size=64)  # the root is mounted
    sha = seeded_resnet18(tmp_path / "resnet18-seed0.pth")
    key = "weights/resnet18-seed0.pth"
    s3_server.client().upload_file(str(tmp_path / "resnet18-seed0.pth"), s3_server.bucket, key)
    location = f"s3://{s3_server.bucket}/{key}"
    params = photos_settings(photos, location)
    params["train"]["pretrained_sha256"] = sha
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    env = pipeline_env(mlflow_server, s3_server, "checkpoints-photos", experiment="shdh-photos")
    run = run_pipeline(params_file, root, env, "--docker", "--image", runtime_image)
    assert (run["results"] / "metrics.json").stat().st_uid == CONTAINER_UID
    assert set(run["metrics"]) == {"shdh", "itq", "random"}
    row = run["metrics"]["shdh"]["16"]
    assert 0 < row["ndcg@100"] <= 1 and 0 < row["map@all"] <= 1 and 0 < row["mahp@2500"] <= 1
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    mlflow.set_tracking_uri(mlflow_server["url"])
    fits = mlflow.search_runs(
        experiment_names=["shdh-photos"], filter_string="tags.backbone = 'resnet18'"
    )
    assert list(fits["tags.pretrained_sha256"]) == [sha]
    assert list(fits["params.pretrained"]) == [location]
    assert list(fits["params.image_size"]) == ["64"] and list(fits["params.augment"]) == ["True"]
