"""The smoke profile's whole DAG in the project's runtime image, as the pods run it.

`shdh pipeline run --local --docker` runs every task through kfp.local's DockerRunner in
localhost/shdh:VERSION as UID 10001 on a read-only root filesystem, tracking into a real MLflow
server with basic authentication (artifacts proxied into a SeaweedFS bucket) and writing the
training checkpoints to that S3 server. The same settings run once more without containers
(`shdh pipeline run --local`, SubprocessRunner in this venv): the metrics must be equal, every
value of every method, and MLflow must hold each run's parent run with its nested runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import yaml

from shdh import tracking
from tests.conftest import REPO
from tests.integration.test_mlflow_server import serve, write_auth_config
from tests.pipelines.front_doors import smoke_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# A deep and a shallow method of each kind, as tests/pipelines/test_local_run.py runs them.
METHODS = {"shdh", "dpsh", "itq", "cosdish+h"}
USER, PASSWORD = "shdh-admin", "shdh-test-password-0123"
CONTAINER_UID = 10001
RUN_TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def mlflow_server(s3_server, tmp_path_factory):
    """MLflow with basic authentication, artifacts in the S3 bucket through its proxy."""
    root = tmp_path_factory.mktemp("mlflow-server")
    auth_config = write_auth_config(root / "basic_auth.ini", f"sqlite:///{root / 'auth.db'}")
    env = {
        **s3_server.env(),
        "MLFLOW_S3_ENDPOINT_URL": s3_server.endpoint,
        "MLFLOW_AUTH_CONFIG_PATH": str(auth_config),
        "MLFLOW_AUTH_ADMIN_USERNAME": USER,
        "MLFLOW_AUTH_ADMIN_PASSWORD": PASSWORD,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "shdh-test-flask-secret",
    }
    store = [
        "--artifacts-destination",
        f"s3://{s3_server.bucket}/mlflow-artifacts",
        "--app-name",
        "basic-auth",
    ]
    with serve(root, store, env) as server:
        yield server


def pipeline_env(server: dict, s3_server, checkpoints: str) -> dict[str, str]:
    """What the steps get on a cluster from shdh-config and shdh-credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
    return {
        **env,
        **s3_server.env(),
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "MLFLOW_TRACKING_URI": server["url"],
        "MLFLOW_TRACKING_USERNAME": USER,
        "MLFLOW_TRACKING_PASSWORD": PASSWORD,
        "SHDH_CHECKPOINT_URL": f"s3://{s3_server.bucket}/{checkpoints}",
    }


def run_pipeline(params_file: Path, root: Path, env: dict[str, str], *docker: str) -> dict:
    """`shdh pipeline run --local [--docker --image IMAGE]`; its results folder's metrics."""
    command = [sys.executable, "-m", "shdh.cli", "pipeline", "run", "--local", *docker]
    command += ["--params", str(params_file), "--root", str(root)]
    start = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    seconds = time.monotonic() - start
    assert done.returncode == 0, f"{' '.join(command)}:\n{(done.stdout + done.stderr)[-6000:]}"
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("results in ")]
    results = Path(line.removeprefix("results in "))
    return {
        "results": results,
        "metrics": json.loads((results / "metrics.json").read_text()),
        "seconds": seconds,
        "log": done.stdout + done.stderr,
    }


@pytest.fixture(scope="module")
def runs(runtime_image, mlflow_server, s3_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("containers")
    params_file = tmp / "params.yaml"
    params_file.write_text(yaml.safe_dump(smoke_settings(METHODS), sort_keys=False))
    docker = run_pipeline(
        params_file,
        tmp / "docker",
        pipeline_env(mlflow_server, s3_server, "checkpoints-docker"),
        "--docker",
        "--image",
        runtime_image,
    )
    here = run_pipeline(
        params_file, tmp / "venv", pipeline_env(mlflow_server, s3_server, "checkpoints-venv")
    )
    times = f"in containers {docker['seconds']:.0f} s, in the venv {here['seconds']:.0f} s"
    print(f"smoke DAG: {times}")
    return {"docker": docker, "venv": here, "image": runtime_image}


@pytest.fixture
def client(mlflow_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server["url"])
    mlflow.set_tracking_uri(mlflow_server["url"])
    return mlflow.MlflowClient()


def test_every_task_ran_in_the_image_as_uid_10001(runs):
    """kfp.local reports SUCCESS even when a container could not write its outputs, so the
    outputs are checked: there, and written by the containers' user, not by this root."""
    results = runs["docker"]["results"]
    for path in (results / "metrics.json", results / "table.md", results / "codes"):
        assert path.exists() and path.stat().st_uid == CONTAINER_UID, path
    assert f"Found image '{runs['image']}'" in runs["docker"]["log"]
    assert set(runs["docker"]["metrics"]) == METHODS | {"random"}


def test_the_containers_give_the_metrics_of_the_run_without_them(runs):
    assert runs["docker"]["metrics"] == runs["venv"]["metrics"]


def test_each_run_is_a_parent_with_a_nested_run_per_method(runs, client):
    experiment = client.get_experiment_by_name(tracking.DEFAULT_EXPERIMENT)
    parents = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{tracking.ROLE_TAG}` = 'pipeline'"
    )
    assert len(parents) == 2  # the container run's and the venv run's
    names = {f"{m}-16-seed0" for m in METHODS | {"random"}}
    commits = set()
    for parent in parents:
        assert parent.info.status == "FINISHED"
        children = client.search_runs(
            [experiment.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
        )
        assert {c.info.run_name for c in children} == names
        for child in children:
            assert child.data.tags[tracking.PIPELINE_TAG] == parent.data.tags[tracking.PIPELINE_TAG]
        commits.add(parent.data.tags.get("mlflow.source.git.commit"))
        report = [a.path for a in client.list_artifacts(parent.info.run_id, "report")]
        assert report == ["report/results.md"]
    # The image's commit (SHDH_GIT_COMMIT, no .git inside) is the checkout's.
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    assert commits == {head.stdout.strip()}


def test_the_train_steps_checkpointed_to_s3(runs, s3_server):
    keys = [
        o["Key"]
        for o in s3_server.client()
        .list_objects_v2(Bucket=s3_server.bucket, Prefix="checkpoints-docker/")
        .get("Contents", [])
    ]
    assert any("shdh-16-seed0" in k for k in keys) and any("dpsh-16-seed0" in k for k in keys)


@pytest.mark.parametrize(
    "path", ["/opt/venv/probe", "/home/shdh/probe", "/workspace/probe", "/etc/probe"]
)
def test_the_root_filesystem_is_read_only_as_in_the_pods(runtime_image, path):
    done = subprocess.run(
        ["docker", "run", "--rm", "--read-only", "--user", "10001:10001", "--network", "none"]
        + [runtime_image, "sh", "-c", f"touch {path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "Read-only file system" in done.stderr
