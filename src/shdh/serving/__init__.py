"""`shdh serve`: exact weighted-Hamming top-k search over an index (shdh.ranking.search_index) as an
HTTP service, by code, by database item or by image through the registered encoder.

Why FastAPI on uvicorn and not KServe's Python model server: the cluster path this project
targets (k8s/, docs/cluster.md: MLflow, PostgreSQL, SeaweedFS and Kubeflow Pipelines on a plain
cluster, standalone KFP included) installs no KServe, and KServe needs Knative or at least its own
controller and CRDs. A plain Deployment runs the same project image the pipeline's steps run in,
with ordinary probes. A search service is also not one model's predict(): it answers from an
index beside the model, by code and by item id as well as by image, which KServe's V1/V2
inference protocols have no place for. FastAPI gives the typed request checks and the OpenAPI
page (/docs, its Swagger UI files from fastapi-offline, so it needs no CDN); all are in
requirements.lock.

The index is the in-process one, or with `--engine milvus` a Milvus collection (shdh.vectordb):
the same routes and order from a store that takes items while it serves (POST /items, DELETE
/items/{id}) and reaches past one machine.

May import: core, data, hashers, nets, ranking, runtime, tracking, training, vectordb.
"""

from shdh.serving.app import create_app
from shdh.serving.encoders import HasherFolder, RegisteredModel
from shdh.serving.limits import Limits

__all__ = ["HasherFolder", "Limits", "RegisteredModel", "create_app"]
