"""deploy: the pipeline's search index put in front of the running search service."""

from kfp import dsl
from kfp.dsl import Dataset, Input

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def deploy(search_index: Input[Dataset], service_url: str) -> str:
    """Copy the index to the S3 prefix the search service reads, then reload the service.

    The prefix is SHDH_SEARCH_INDEX_URL of the ConfigMap shdh-config, the one the service's
    Deployment reads (k8s/base/search.yaml); the token is SHDH_SERVE_TOKEN, from the service's
    token Secret. Both reach the task as environment variables, by reference.

    With the Milvus engine the index task has written the collection itself (its record,
    collection.json, is the artifact): nothing is copied, and the reload moves the service to
    the new encoder's collection.

    Inputs:
        search_index: the index folder from `index` (index.npz and index.json, or
            collection.json).
        service_url: the service inside the cluster, e.g. http://shdh-search:8000.
    Outputs:
        Output: the version the service serves after the reload (JSON).
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy loads (the index check): the same bits on every CPU, as every step

    import json
    import os

    from shdh.serving.deploy import publish_index, request_reload
    from shdh.steps.index import COLLECTION_RECORD

    for name in ("SHDH_SEARCH_INDEX_URL", "SHDH_SERVE_TOKEN"):
        if not os.environ.get(name, "").strip():
            raise SystemExit(f"deploy: {name} is not set (ConfigMap shdh-config, token Secret)")
    if not os.path.exists(os.path.join(search_index.path, COLLECTION_RECORD)):
        publish_index(search_index.path, os.environ["SHDH_SEARCH_INDEX_URL"].strip())
    version = request_reload(service_url, os.environ["SHDH_SERVE_TOKEN"].strip())
    return json.dumps(version)
