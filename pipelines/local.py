"""Run the whole pipeline here, with kfp.local: in the current environment, or in containers.

SubprocessRunner (the default): each task runs as a subprocess of this Python (use_venv=False:
the installed shdh, no pip), so the run needs no cluster, no container engine and no network.

DockerRunner (`shdh pipeline run --local --docker`): each task runs in a container of the
components' image (SHDH_IMAGE; `make images` builds it as localhost/shdh:VERSION) as the pods
of k8s/ run it: as UID 10001, with a read-only root filesystem and a private /tmp, on the
host's network (the MLflow and S3 servers of a local run listen on loopback). The pipeline root
is bind-mounted at the same path, so it is made writable by that UID; the Debian dataset folder
is mounted read-only where the download step looks for it; the tracking and object-store
settings of this shell (CONTAINER_ENV) are passed into each container.

Either way the pipeline is built without its cluster settings (no GPU request, ConfigMap or
Secret): MLflow settings come from this shell's environment, as for `dvc repro`.
"""

from __future__ import annotations

import builtins
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shdh.kfp.pipelines.shdh_pipeline import build_pipeline
from shdh.kubeflow import pipeline_arguments


@dataclass(frozen=True)
class LocalRun:
    """Where a local run left its outputs, and the scores it wrote."""

    results_dir: Path  # metrics.json, timings.json, table.md, codes/, plots/
    report: Path  # the Markdown report
    metrics: dict[str, Any]  # metrics.json: {method: {bits: {metric: value}}}
    table: str  # table.md


CONTAINER_UID = 10001  # the images' USER and the pods' runAsUser
# What a task needs from this shell's environment; nothing else goes into a container.
CONTAINER_ENV = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_S3_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "SHDH_CHECKPOINT_URL",
    "SHDH_CPU_PIN",
)
DATASET_DIRS = ("/usr/share/datasets/fashion-mnist",)  # Debian's dataset packages, read-only
# /dev/shm for the training loader's workers, as the cluster's train pods get one (Docker's own
# 64 MB holds a couple of batches of photos)
LOADER_SHM = "2g"


def docker_runner(root: Path, environ: dict[str, str] | None = None) -> Any:
    """kfp.local's DockerRunner, set up as the pods run the image (module docstring)."""
    from docker.types import Mount
    from kfp import local

    environ = os.environ if environ is None else environ
    env = {name: environ[name] for name in CONTAINER_ENV if environ.get(name)}
    env["HOME"] = "/tmp"  # the user's home is on the read-only root
    mounts = [
        Mount(target=path, source=path, type="bind", read_only=True)
        for path in DATASET_DIRS
        if Path(path).is_dir()
    ]
    # The containers write their outputs under the root, into folders kfp.local makes as this
    # user: the root becomes the containers' user's, and run_local clears this process's umask
    # while it runs, so the folders it makes are writable by that user too.
    os.chown(root, CONTAINER_UID, CONTAINER_UID)
    return local.DockerRunner(
        user=f"{CONTAINER_UID}:{CONTAINER_UID}",
        read_only=True,
        tmpfs={"/tmp": "rw,exec,nosuid,nodev,size=4g"},
        shm_size=LOADER_SHM,
        network_mode="host",
        environment=env,
        mounts=mounts,
    )


def run_local(params: dict[str, Any], root: str | Path, *, docker: bool = False) -> LocalRun:
    """Run the DAG for `params` under root (a folder per run), in containers with `docker`;
    fails fast, naming the URI, when the MLflow tracking server cannot be reached.

    builtins.print is put back afterwards: kfp.local swaps it for an indenting wrapper around
    each task and restores it last-in-first-out, but it runs a ParallelFor's tasks in threads,
    so interleaved restores can leave a task's wrapper installed for the rest of the process
    (numba, imported later by shdh.ranking.exact, then refuses to load)."""
    from kfp import local

    from shdh.reporting.report import TABLE_FILE, read_metrics
    from shdh.tracking import mlflow_runs

    mlflow_runs.check_server(mlflow_runs.tracking_uri())
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    runner = docker_runner(root) if docker else local.SubprocessRunner(use_venv=False)
    local.init(runner=runner, pipeline_root=str(root), raise_on_error=True)
    print_before = builtins.print
    umask = os.umask(0o000) if docker else None  # folders the containers' user can write in
    try:
        task = build_pipeline(params)(**pipeline_arguments(params))
    finally:
        builtins.print = print_before
        if umask is not None:
            os.umask(umask)
    results_dir = Path(task.outputs["results"].path)
    return LocalRun(
        results_dir=results_dir,
        report=Path(task.outputs["report"].path),
        metrics=read_metrics(results_dir),
        table=(results_dir / TABLE_FILE).read_text(),
    )
