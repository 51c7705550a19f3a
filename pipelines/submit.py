"""Submit the pipeline to a Kubeflow Pipelines cluster: upload it, then start a run.

Each distinct compiled spec is one version of the pipeline `shdh`, named by the spec's content
hash, so resubmitting the same settings reuses its version and the Kubeflow UI lists one
version per distinct pipeline. (Creating the pipeline also makes a version named after it, as
Kubeflow does on every first upload; runs always use the hash-named versions.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from pipelines.cluster import TrainScheduling
from pipelines.shdh_pipeline import DESCRIPTION, PIPELINE_NAME, compile_pipeline
from shdh.stages.pipeline import pipeline_arguments

log = logging.getLogger(__name__)


def submit(
    params: dict[str, Any],
    *,
    host: str,
    experiment: str = "shdh",
    run_name: str | None = None,
    namespace: str | None = None,
    service_account: str | None = None,
    scheduling: TrainScheduling | None = None,
) -> str:
    """Compile for a cluster, upload (pipeline, version), create a run; returns the run id.

    Any failure to talk to the API becomes one RuntimeError that names the host.
    """
    import kfp
    import kfp_server_api
    import urllib3

    arguments = pipeline_arguments(params)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = run_name or f"{PIPELINE_NAME}-{arguments['profile'] or 'custom'}-{stamp}"
    with tempfile.TemporaryDirectory(prefix="shdh-pipeline-") as tmp:
        package = compile_pipeline(
            params, Path(tmp) / "pipeline.yaml", cluster=True, scheduling=scheduling
        )
        try:
            client = kfp.Client(host=host, **({"namespace": namespace} if namespace else {}))
            pipeline_id, version_id = upload(client, package)
            exp = client.create_experiment(name=experiment, namespace=namespace)
            run = client.run_pipeline(
                experiment_id=exp.experiment_id, job_name=name, params=arguments,
                pipeline_id=pipeline_id, version_id=version_id, service_account=service_account,
            )  # fmt: skip
        except (kfp_server_api.ApiException, urllib3.exceptions.HTTPError) as exc:
            raise RuntimeError(f"Kubeflow Pipelines at {host}: {exc}") from exc
    log.info("run %s (%s) created in experiment %s", run.run_id, name, experiment)
    return run.run_id


def upload(client: Any, package: Path) -> tuple[str, str]:
    """(pipeline id, version id) of this spec: the pipeline is created on first use, the
    version named by the spec's hash is uploaded unless it is there already."""
    version_name = f"{PIPELINE_NAME}-{hashlib.sha256(package.read_bytes()).hexdigest()[:12]}"
    pipeline_id = client.get_pipeline_id(PIPELINE_NAME)
    if pipeline_id is None:
        pipeline = client.upload_pipeline(
            str(package), pipeline_name=PIPELINE_NAME, description=DESCRIPTION
        )
        pipeline_id = pipeline.pipeline_id
    version_id = _version_id(client, pipeline_id, version_name)
    if version_id is None:
        version = client.upload_pipeline_version(
            str(package), pipeline_version_name=version_name, pipeline_id=pipeline_id
        )
        version_id = version.pipeline_version_id
    return pipeline_id, version_id


def _version_id(client: Any, pipeline_id: str, name: str) -> str | None:
    """The id of the pipeline's version called `name`, if there is one."""
    predicate = {"operation": "EQUALS", "key": "display_name", "stringValue": name}
    response = client.list_pipeline_versions(
        pipeline_id=pipeline_id, page_size=1, filter=json.dumps({"predicates": [predicate]})
    )
    versions = response.pipeline_versions or []
    return versions[0].pipeline_version_id if versions else None
