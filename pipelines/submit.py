"""Submit the pipeline to a Kubeflow Pipelines cluster: check the server, upload, start a run.

Before anything is uploaded the server is asked its version and mode (pipelines.kfp_api): one
too old for this pipeline, credentials it refuses, or a multi-user server without --namespace
each stop the submission with one line saying what to fix.

Each distinct compiled spec is one version of the pipeline `shdh`, named by the spec's content
hash, so resubmitting the same settings reuses its version and the Kubeflow UI lists one
version per distinct pipeline. (Creating the pipeline also makes a version named after it, as
Kubeflow does on every first upload; runs always use the hash-named versions.) With a namespace
the pipeline and the experiment belong to that namespace (a Kubeflow profile's).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shdh.kfp.pipelines.cluster import train_device
from shdh.kfp.pipelines.cluster_settings import ClusterSettings
from shdh.kfp.pipelines.kfp_api import Credentials, check_server, dotted
from shdh.kfp.pipelines.shdh_pipeline import DESCRIPTION, PIPELINE_NAME, compile_pipeline
from shdh.kubeflow import pipeline_arguments

log = logging.getLogger(__name__)


def submit(
    params: dict[str, Any],
    *,
    host: str,
    settings: ClusterSettings,
    experiment: str = "shdh",
    run_name: str | None = None,
    namespace: str | None = None,
    service_account: str | None = None,
    credentials: Credentials | None = None,
    check_version: bool = True,
) -> str:
    """Compile for the cluster of `settings`, upload (pipeline, version), create a run;
    returns the run id. Any failure to talk to the API becomes one RuntimeError naming the host.
    """
    credentials = credentials or Credentials()
    server = check_server(host, credentials, check_version=check_version)
    if server.multi_user and not namespace:
        raise RuntimeError(
            f"Kubeflow Pipelines at {host} is multi-user: give --namespace, the "
            "namespace of your Kubeflow profile"
        )
    log.info(
        "Kubeflow Pipelines at %s: %s%s",
        host,
        dotted(server.version),
        ", multi-user" if server.multi_user else "",
    )
    params = train_device(params, settings)
    arguments = pipeline_arguments(params)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = run_name or f"{PIPELINE_NAME}-{arguments['profile'] or 'custom'}-{stamp}"
    with tempfile.TemporaryDirectory(prefix="shdh-pipeline-") as tmp:
        package = compile_pipeline(params, Path(tmp) / "pipeline.yaml", settings=settings)
        run = _create_run(
            host, credentials, namespace, package, experiment, name, arguments, service_account
        )
    log.info("run %s (%s) created in experiment %s", run.run_id, name, experiment)
    return run.run_id


@contextlib.contextmanager
def _server_errors(host: str) -> Iterator[None]:
    """The API's errors as one line naming the server, the HTTP status and the start of the
    body the server sent: kfp's own exceptions print the whole response, headers and all."""
    import kfp_server_api
    import urllib3

    try:
        yield
    except kfp_server_api.ApiException as exc:
        raise RuntimeError(
            f"Kubeflow Pipelines at {host}: HTTP {exc.status} {exc.reason}: "
            f"{(exc.body or '').strip()[:300]}"
        ) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise RuntimeError(f"Kubeflow Pipelines at {host}: {exc}") from exc


def _create_run(
    host: str,
    credentials: Credentials,
    namespace: str | None,
    package: Path,
    experiment: str,
    name: str,
    arguments: dict[str, Any],
    service_account: str | None,
) -> Any:
    import kfp

    with _server_errors(host):
        client = kfp.Client(
            host=host,
            **({"namespace": namespace} if namespace else {}),
            **credentials.client_arguments(),
        )
        pipeline_id, version_id = upload(client, package, namespace)
        exp = client.create_experiment(name=experiment, namespace=namespace)
        return client.run_pipeline(
            experiment_id=exp.experiment_id,
            job_name=name,
            params=arguments,
            pipeline_id=pipeline_id,
            version_id=version_id,
            service_account=service_account,
        )


def upload(client: Any, package: Path, namespace: str | None = None) -> tuple[str, str]:
    """(pipeline id, version id) of this spec: the pipeline is created on first use, the
    version named by the spec's hash is uploaded unless it is there already."""
    version_name = f"{PIPELINE_NAME}-{hashlib.sha256(package.read_bytes()).hexdigest()[:12]}"
    pipeline_id = _pipeline_id(client, namespace)
    if pipeline_id is None:
        pipeline = client.upload_pipeline(
            str(package),
            pipeline_name=PIPELINE_NAME,
            description=DESCRIPTION,
            namespace=namespace,
        )
        pipeline_id = pipeline.pipeline_id
    version_id = _version_id(client, pipeline_id, version_name)
    if version_id is None:
        version = client.upload_pipeline_version(
            str(package), pipeline_version_name=version_name, pipeline_id=pipeline_id
        )
        version_id = version.pipeline_version_id
    return pipeline_id, version_id


def _name_filter(name: str) -> str:
    predicate = {"operation": "EQUALS", "key": "display_name", "stringValue": name}
    return json.dumps({"predicates": [predicate]})


def _pipeline_id(client: Any, namespace: str | None) -> str | None:
    """The id of the pipeline `shdh` in the namespace (shared pipelines without one)."""
    response = client.list_pipelines(
        page_size=2, filter=_name_filter(PIPELINE_NAME), namespace=namespace
    )
    pipelines = response.pipelines or []
    return pipelines[0].pipeline_id if pipelines else None


def _version_id(client: Any, pipeline_id: str, name: str) -> str | None:
    """The id of the pipeline's version called `name`, if there is one."""
    response = client.list_pipeline_versions(
        pipeline_id=pipeline_id, page_size=1, filter=_name_filter(name)
    )
    versions = response.pipeline_versions or []
    return versions[0].pipeline_version_id if versions else None


# A run KFP can retry: it failed (a task's pod failed, was deleted or evicted and its retries, if
# any, ran out) or was terminated.
RETRYABLE = ("FAILED", "CANCELED")


def retry(
    run_id: str,
    *,
    host: str,
    credentials: Credentials | None = None,
    check_version: bool = True,
) -> str:
    """Retry a failed or terminated run in place (POST /apis/v2beta1/runs/RUN_ID:retry) and
    return the state it had.

    What an evicted or deleted train pod needs: each fit is a task of its own whose retries the
    backend applies, but KFP puts no retryPolicy on them, so Argo's default (OnFailure) retries
    a failed container and not a pod that was deleted or evicted. A retried run keeps its run
    id, so the tasks that finished are not run again, and the interrupted fit starts again under
    the same PIPELINE_RUN_ID and resumes from its checkpoint in the object store
    (shdh.tracking.checkpoint_sync).
    """
    import kfp

    credentials = credentials or Credentials()
    check_server(host, credentials, check_version=check_version)
    with _server_errors(host):
        client = kfp.Client(host=host, **credentials.client_arguments())
        state = str(client.get_run(run_id).state or "")
        if state not in RETRYABLE:
            raise RuntimeError(
                f"run {run_id} is {state or 'of unknown state'}: only a failed or canceled run "
                "can be retried"
            )
        client._run_api.run_service_retry_run(run_id=run_id)
    log.info(
        "run %s (%s) retried: its failed tasks run again, finished ones are kept", run_id, state
    )
    return state
