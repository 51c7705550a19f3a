"""The pipeline's first step pulls the data version data.dvc records from the project's DVC
remote on a real S3 server (SeaweedFS), and MLflow records its hash.

The project here is a copy of the repository's own .dvc/config (remote `shdh`, bucket `shdh`,
endpoint http://shdh-seaweedfs:8333) with a tiny data/ folder, pushed as docs/cluster-data.md
says: the endpoint of a port-forward in .dvc/config.local, the credentials in the environment.
The step gets only what the pipeline compiler puts in it (data.dvc and the committed
.dvc/config) and reaches the server through AWS_ENDPOINT_URL, as the pods do with the ConfigMap
shdh-config.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import yaml
from kfp import dsl

from shdh.kubeflow import pipeline_arguments
from shdh.steps.dvc_pull import (
    DataVersionError,
    committed_config,
    data_version,
    default_remote,
    pull,
)
from shdh.steps.prepare import load_prepared
from shdh.tracking import mlflow_runs
from tests.components.test_components import artifact, component, gzip_mirror
from tests.conftest import REPO, write_fashion_mnist_raw
from tests.pipelines.front_doors import smoke_settings

pytestmark = pytest.mark.integration

DVC = str(Path(sys.executable).parent / "dvc")
STACK_BUCKET = "shdh"  # the bucket of the repository's .dvc/config


def dvc(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(
        [DVC, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"dvc {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def md5_of(project: Path) -> str:
    return yaml.safe_load((project / "data.dvc").read_text())["outs"][0]["md5"]


@pytest.fixture(scope="module")
def pushed(s3_server, tmp_path_factory):
    """A project with the repository's .dvc/config, its data added and `dvc push`ed."""
    client = s3_server.client()
    if STACK_BUCKET not in {b["Name"] for b in client.list_buckets()["Buckets"]}:
        client.create_bucket(Bucket=STACK_BUCKET)
    root = tmp_path_factory.mktemp("dvc-project")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3_server.env(), DVC_NO_ANALYTICS="1")
    write_fashion_mnist_raw(root / "data" / "fashion-mnist")
    dvc(["init", "-q", "--no-scm"], root, env)
    shutil.copyfile(REPO / ".dvc" / "config", root / ".dvc" / "config")
    (root / ".dvc" / "config.local").write_text(
        f"[core]\n    no_scm = true\n['remote \"shdh\"']\n    endpointurl = {s3_server.endpoint}\n"
    )
    dvc(["add", "-q", "data"], root, env)
    dvc(["push", "data.dvc"], root, env)
    mirror = gzip_mirror(root / "data" / "fashion-mnist", root.parent / "mirror")
    return {"root": root, "env": env, "mirror": mirror}


@pytest.fixture
def cluster_env(s3_env, monkeypatch):
    """What a pod of the stack has: the S3 keys and shdh-config's AWS_ENDPOINT_URL."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
    return s3_env


def data_section(sources: list[str], **settings) -> str:
    params = smoke_settings()
    params["data"].update(sources=sources, verify=False, max_items=None, **settings)
    return pipeline_arguments(params)["data"]


def download(tmp_path: Path, version: str, sources: list[str], **settings) -> dsl.Dataset:
    prepared = artifact(dsl.Dataset, tmp_path / "prepared")
    component("prepare").python_func(
        data=data_section(sources, **settings), seed=0, prepared=prepared, data_version=version
    )
    return artifact(dsl.Dataset, tmp_path / "prepared", prepared.metadata)


def test_the_first_step_pulls_the_pushed_version_and_mlflow_records_its_hash(
    pushed, cluster_env, tmp_path, caplog
):
    md5 = md5_of(pushed["root"])
    version = data_version(pushed["root"])
    assert cluster_env.endpoint not in version  # only the committed config travels
    with caplog.at_level(logging.INFO):
        prepared = download(tmp_path, version, sources=[])  # nothing to fall back on
    assert f"pulled data version {md5} from the DVC remote 'shdh' (s3://shdh/dvcstore)" in (
        caplog.text
    )
    assert prepared.metadata["dvc_data_md5"] == md5
    assert prepared.metadata["data_source"] == "dvc"
    dataset, _ = load_prepared(prepared.path)
    assert len(dataset.ids) == 300
    args = pipeline_arguments(smoke_settings())
    parent = component("start").python_func(
        prepared=prepared, pipeline_run_id="kfp-run-dvc", **args
    )
    mlflow.set_tracking_uri(mlflow_runs.tracking_uri())
    assert mlflow.MlflowClient().get_run(parent).data.tags["dvc_data_md5"] == md5


@pytest.fixture(scope="module")
def unpushed(pushed, tmp_path_factory):
    """The pushed project with one more file added: a data version the remote does not hold."""
    project = tmp_path_factory.mktemp("unpushed") / "newer"
    shutil.copytree(pushed["root"], project)
    (project / "data" / "README.txt").write_text("a file added after the push\n")
    dvc(["add", "-q", "data"], project, pushed["env"])
    assert md5_of(project) != md5_of(pushed["root"])
    return project


@pytest.mark.parametrize("bucket", ["shdh", "no-such-bucket"], ids=["not-pushed", "no-bucket"])
def test_a_failed_pull_fails_the_step_naming_the_remote_what_dvc_said_and_the_setting(
    pushed, unpushed, cluster_env, tmp_path, bucket
):
    """The remote holds other versions but not this one, or its bucket does not exist."""
    project = tmp_path / "project"
    shutil.copytree(unpushed, project)
    config = project / ".dvc" / "config"
    config.write_text(config.read_text().replace("s3://shdh/", f"s3://{bucket}/"))
    md5 = md5_of(project)
    with pytest.raises(DataVersionError) as err:  # the mirror is there, and not used
        download(tmp_path, data_version(project), sources=[str(pushed["mirror"])])
    text = str(err.value)
    assert (
        f"data version {md5} (data.dvc) is not in the DVC remote 'shdh' (s3://{bucket}/dvcstore)"
        in text
    )
    assert "`dvc push data.dvc`" in text
    assert (
        "DVC said: Some of the cache files do not exist neither locally nor on remote. "
        f"Missing cache files: md5: {md5}" in text
    )
    assert text.endswith("set data.download_fallback: true (params.yaml)")
    assert not (tmp_path / "prepared").exists()


def test_with_download_fallback_the_public_download_takes_over_and_warns_what_failed(
    pushed, unpushed, cluster_env, tmp_path, caplog
):
    md5 = md5_of(unpushed)
    version = data_version(unpushed)
    with caplog.at_level(logging.INFO):
        prepared = download(
            tmp_path / "fallback", version, [str(pushed["mirror"])], download_fallback=True
        )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"data version {md5} (data.dvc) is not in the DVC remote 'shdh' (s3://shdh/dvcstore)" in m
        and "`dvc push data.dvc`" in m
        and "DVC said: Some of the cache files do not exist" in m
        and "data.download_fallback is true, so falling back to the public download" in m
        for m in warnings
    ), warnings
    assert prepared.metadata["data_source"] == "download"
    assert prepared.metadata["dvc_data_md5"] == md5_of(pushed["root"])  # the four raw files
    with pytest.raises(DataVersionError, match=r"dvc push.*public download failed too"):
        download(tmp_path / "nothing", version, sources=[], download_fallback=True)


def test_a_config_without_a_remote_names_dvc_push(pushed, cluster_env, tmp_path, caplog):
    project = tmp_path / "no-remote"
    (project / ".dvc").mkdir(parents=True)
    shutil.copyfile(pushed["root"] / "data.dvc", project / "data.dvc")
    (project / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    with caplog.at_level(logging.WARNING):
        version = data_version(project)
    assert "names no default DVC remote" in caplog.text and "`dvc push data.dvc`" in caplog.text
    with pytest.raises(DataVersionError, match=r"no default DVC remote.*`dvc push data.dvc`"):
        pull(version, tmp_path / "scratch")


def test_credentials_in_the_committed_config_are_refused(pushed, tmp_path):
    project = tmp_path / "leaky"
    shutil.copytree(pushed["root"], project)
    config = project / ".dvc" / "config"
    config.write_text(config.read_text() + "    secret_access_key = hunter2\n")
    with pytest.raises(DataVersionError, match=r"remote 'shdh' holds \['secret_access_key'\]"):
        data_version(project)


def test_the_repository_remote_is_the_stacks_object_store_without_credentials():
    """.dvc/config's default remote: S3 at the object store's Service of k8s/base, in the bucket
    the stack creates for the steps (the one their S3 identity may use), and no secret (they
    live in config.local or the environment)."""
    name, remote = default_remote(committed_config(REPO / ".dvc"), ".dvc/config")
    manifests = yaml.safe_load_all((REPO / "k8s" / "base" / "config.yaml").read_text())
    (data,) = [m["data"] for m in manifests if m["metadata"]["name"] == "shdh-config"]
    assert remote["url"].startswith(f"s3://{STACK_BUCKET}/")
    assert STACK_BUCKET in data["S3_BUCKETS"].split()
    assert STACK_BUCKET == data["S3_PIPELINE_BUCKET"]
    assert remote["endpointurl"] == data["AWS_ENDPOINT_URL"] == "http://shdh-seaweedfs:8333"
    assert json.loads(data_version(REPO))["dvc_file"] == (REPO / "data.dvc").read_text()
    assert name == "shdh"
