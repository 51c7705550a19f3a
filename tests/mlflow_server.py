"""A real `mlflow server` on loopback for the tests that talk to one: started, waited for and
stopped by its PID, as on a cluster; with basic authentication and artifacts in an S3 bucket
(the set-up of k8s/base/mlflow.yaml) for the integration and container tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.conftest import REPO
from tests.integration.conftest import S3Server, free_ports, service_host

START_TIMEOUT_S = 300.0  # the server takes 10-15 s alone, minutes on a busy machine
STOP_TIMEOUT_S = 20.0
ARTIFACT_PREFIX = "mlflow-artifacts"
USER, PASSWORD = "shdh-admin", "shdh-test-password-0123"


def stop_by_pid(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its PID), then SIGKILL if it lingers."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_S)


def wait_for_health(url: str, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"mlflow server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)  # a start-up takes seconds: poll often, it is one refused connect
    raise RuntimeError(
        f"mlflow server at {url} not healthy after {START_TIMEOUT_S:.0f} s:\n"
        f"{log_path.read_text()[-4000:]}"
    )


def write_auth_config(path: Path, database_uri: str) -> Path:
    """The auth app's INI file, written by the script of k8s/base/mlflow.yaml's init container
    (run here as it runs there, with the database URI in the environment)."""
    manifest = yaml.safe_load_all((REPO / "k8s" / "base" / "mlflow.yaml").read_text())
    deployment = next(d for d in manifest if d["kind"] == "Deployment")
    (init,) = [
        c
        for c in deployment["spec"]["template"]["spec"]["initContainers"]
        if c["name"] == "write-auth-config"
    ]
    env = {
        **os.environ,
        "MLFLOW_BACKEND_STORE_URI": database_uri,
        "MLFLOW_AUTH_CONFIG_PATH": str(path),
    }
    assert init["command"] == ["python", "-c"]
    subprocess.run([sys.executable, "-c", init["args"][0]], env=env, check=True, timeout=60)
    return path


@contextlib.contextmanager
def serve(root: Path, store: list[str], env: dict[str, str]) -> Iterator[dict]:
    """`mlflow server` on a free loopback port with the SQLite store root/mlflow.db and the
    `store` arguments (artifacts, app); stopped by its PID at the end."""
    (port,) = free_ports(1)
    url = f"http://{service_host()}:{port}"
    command = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        *store,
        "--host",
        service_host(),
        "--port",
        str(port),
        "--workers",
        "1",
        # The server answers the Host headers of loopback and private addresses only; one
        # named by SHDH_TEST_SERVICE_HOST (a container test's) is added.
        *([] if service_host() == "127.0.0.1" else ["--allowed-hosts", f"{service_host()}:{port}"]),
    ]
    # Background jobs (GenAI evaluation) are not used; off, the server starts sooner.
    env = {**os.environ, **env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log_path = root / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
            start_new_session=True,
        )
    try:
        wait_for_health(url, process, log_path)
        yield {"url": url, "process": process, "log": log_path}
    finally:
        stop_by_pid(process)


@contextlib.contextmanager
def basic_auth_server(s3_server: S3Server, root: Path) -> Iterator[dict]:
    """The cluster's MLflow: the users' table in the server's database (here a file), the
    administrator USER from the Secret's MLflow credentials, artifacts in the S3 bucket under
    ARTIFACT_PREFIX, reached through the server's proxy. Yields serve's dict with the path of
    the auth config, which tests read for the settings the cluster's server runs with."""
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
        f"s3://{s3_server.bucket}/{ARTIFACT_PREFIX}",
        "--app-name",
        "basic-auth",
    ]
    with serve(root, store, env) as server:
        yield {**server, "auth_config": auth_config}
