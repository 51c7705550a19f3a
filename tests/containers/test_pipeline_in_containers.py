"""The smoke profile's whole DAG in the project's runtime image, as the pods run it.

`shdh pipeline run --local --docker` runs every task through kfp.local's DockerRunner in
localhost/shdh:VERSION as UID 10001 on a read-only root filesystem, tracking into a real MLflow
server with basic authentication (artifacts proxied into a SeaweedFS bucket) and writing the
training checkpoints to that S3 server. The same settings run once more without containers
(`shdh pipeline run --local`, SubprocessRunner in this venv): the metrics must be equal, every
value of every method, and MLflow must hold each run's parent run with its nested runs.
"""

from __future__ import annotations

import subprocess

import mlflow
import pytest

from shdh.tracking import mlflow_runs as tracking
from tests.conftest import REPO
from tests.containers.conftest import METHODS, PASSWORD, USER

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CONTAINER_UID = 10001


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
    names = {f"{m}-16" for m in METHODS | {"random"}}
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
        assert "report/results.md" in report, report
    # The image's commit (SHDH_GIT_COMMIT, no .git inside) and the checkout's: commits of this
    # repository (others may commit while the test runs, so not necessarily one commit).
    for commit in commits:
        found = subprocess.run(["git", "cat-file", "-t", commit], cwd=REPO, capture_output=True)
        assert found.stdout.strip() == b"commit", commit


def test_the_train_steps_checkpointed_to_s3(runs, s3_server):
    keys = [
        o["Key"]
        for o in s3_server.client()
        .list_objects_v2(Bucket=s3_server.bucket, Prefix="checkpoints-docker/")
        .get("Contents", [])
    ]
    assert any("/shdh-16/" in k for k in keys) and any("/dpsh-16/" in k for k in keys)


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


def test_a_cpu_limit_sizes_the_maths_libraries_thread_pools(runtime_image):
    """A container limited to one CPU (the CFS quota a pod's limit sets; cgroup v1 or v2, as the
    host has it): after the pin every step runs first, torch, numba and OpenBLAS start one
    thread, where they would start one per core the container may run on."""
    code = (
        "from shdh.runtime.instruction_set import pin_cpu; pin_cpu(); import os, numba, torch; "
        "print(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS, "
        "os.environ['OPENBLAS_NUM_THREADS'])"
    )
    done = subprocess.run(
        ["docker", "run", "--rm", "--cpus", "1", "--read-only", "--user", "10001:10001"]
        + ["--network", "none", runtime_image, "python", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "1"]
