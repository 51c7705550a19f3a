"""The MLflow pod's init container (k8s/base/mlflow.yaml) run for real: its script, taken from
the rendered manifest, against a real S3 server (SeaweedFS, the stack's object store) with the
environment the manifest gives it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.infra.manifests import containers, find, render

pytestmark = pytest.mark.integration


def init_container() -> tuple[str, dict[str, str]]:
    """The script and the non-credential environment of the create-buckets container."""
    objects = render("base")
    container = next(c for label, c, _ in containers(objects) if label.endswith("/create-buckets"))
    assert container["command"] == ["python", "-c"]
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    env = {
        item["name"]: config[item["valueFrom"]["configMapKeyRef"]["key"]]
        for item in container["env"]
        if "configMapKeyRef" in item.get("valueFrom", {})
    }
    return container["args"][0], env


def run_script(s3_server, buckets: str, secret_key: str) -> subprocess.CompletedProcess[str]:
    script, env = init_container()
    env.update(
        AWS_ENDPOINT_URL=s3_server.endpoint,
        AWS_ACCESS_KEY_ID=s3_server.access_key,
        AWS_SECRET_ACCESS_KEY=secret_key,
        S3_BUCKETS=buckets,
        **s3_server.isolation_env(),
    )
    env["PATH"] = os.environ["PATH"]
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )


def test_creates_the_configured_buckets_once(s3_server):
    _, env = init_container()
    buckets = env["S3_BUCKETS"].split() + ["shdh-infra-extra"]
    first = run_script(s3_server, " ".join(buckets), s3_server.secret_key)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split("\n")[:-1] == [f"bucket {b} created" for b in buckets]
    existing = {b["Name"] for b in s3_server.client().list_buckets()["Buckets"]}
    assert set(buckets) <= existing
    # A restarted pod finds them and changes nothing.
    again = run_script(s3_server, " ".join(buckets), s3_server.secret_key)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split("\n")[:-1] == [f"bucket {b} exists" for b in buckets]


def test_wrong_credentials_fail_at_once_instead_of_waiting(s3_server):
    result = run_script(s3_server, "shdh-infra-denied", "not-the-secret-key")
    assert result.returncode != 0
    assert (
        "403" in result.stderr
        or "Forbidden" in result.stderr
        or "SignatureDoesNotMatch" in (result.stderr)
    )
