"""The container tests: a real Docker engine, the project's runtime image built here
(tools/images.py), a real MLflow server with basic authentication and a real S3 server
(SeaweedFS) on loopback.

They run under `make test-containers` (SHDH_TEST_CONTAINERS=1), which builds the image first;
a plain `pytest` leaves them out (they take minutes and a root-started dockerd). Where Docker
cannot be started they are skipped with the reason, except in CI (CI=true), where that fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tools import images

from shdh.settings.profiles import deep_merge
from tests.conftest import REPO
from tests.integration.conftest import s3_server  # noqa: F401 (the session's S3 server)
from tests.mlflow_server import PASSWORD, USER, basic_auth_server
from tests.pipelines.front_doors import smoke_settings
from tests.suite_threads import without_suite_threads

# A deep and a shallow method of each kind, as tests/pipelines/test_local_run.py runs them.
METHODS = {"shdh", "dpsh", "itq", "cosdish+h"}
# Two epochs, so that the preemption test can kill a fit after its first one and compare.
EPOCHS = 2
RUN_TIMEOUT_S = 1800

collect_ignore_glob = [] if os.environ.get("SHDH_TEST_CONTAINERS") == "1" else ["test_*.py"]


def host_address() -> str:
    """This host's own first IPv4 address. Containers on a Docker bridge network (the
    TrainJob nodes of the Kubeflow SDK's container backend) reach the host there, not at
    loopback, which is each container's own; host-network containers reach it there too."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source
        address = sock.getsockname()[0]
        if not address.startswith("127."):
            return address
    listed = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    found = [a for a in listed if a.count(".") == 3 and not a.startswith("127.")]
    if not found:
        pytest.fail("no non-loopback IPv4 address here for the containers to reach the servers")
    return found[0]


# The session's servers (SeaweedFS, MLflow) listen where every container can reach them.
if not collect_ignore_glob:
    os.environ.setdefault("SHDH_TEST_SERVICE_HOST", host_address())


@pytest.fixture(scope="session")
def engine() -> str:
    """The Docker server's version, after installing and starting it where needed."""
    try:
        return images.ensure_engine()
    except images.EngineUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and no Docker engine: {exc}")
        pytest.skip(f"no Docker engine: {exc}")


@pytest.fixture(scope="session")
def runtime_image(engine) -> str:
    """localhost/shdh:VERSION, built (or reused when nothing it is made of changed)."""
    (built,) = images.build(("runtime",))
    return built.image


@pytest.fixture(scope="session")
def mlflow_server(s3_server, tmp_path_factory):  # noqa: F811
    """MLflow with basic authentication, artifacts in the S3 bucket through its proxy."""
    with basic_auth_server(s3_server, tmp_path_factory.mktemp("mlflow-server")) as server:
        yield server


def container_params(methods) -> dict:
    """The smoke profile (one torch thread, as tests/pipelines compare front doors) for
    `methods`, trained for EPOCHS epochs."""
    return deep_merge(smoke_settings(methods), {"train": {"epochs": EPOCHS}})


def pipeline_env(
    server: dict,
    s3_server,  # noqa: F811
    checkpoints: str,
    experiment: str = "shdh",
) -> dict[str, str]:
    """What the steps get on a cluster from shdh-config and shdh-credentials. The maths
    libraries start their default pools, as in a container, so that the venv's run and the
    containers' compute alike."""
    env = {
        k: v
        for k, v in without_suite_threads(os.environ).items()
        if not k.startswith(("MLFLOW_", "AWS_"))
    }
    return {
        **env,
        **s3_server.env(),
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "MLFLOW_TRACKING_URI": server["url"],
        "MLFLOW_TRACKING_USERNAME": USER,
        "MLFLOW_TRACKING_PASSWORD": PASSWORD,
        "SHDH_CHECKPOINT_URL": f"s3://{s3_server.bucket}/{checkpoints}",
        "MLFLOW_EXPERIMENT_NAME": experiment,
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


@pytest.fixture(scope="session")
def runs(runtime_image, mlflow_server, s3_server, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("containers")
    params_file = tmp / "params.yaml"
    params_file.write_text(yaml.safe_dump(container_params(METHODS), sort_keys=False))
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
