"""The environment every step gets on a cluster, by reference: the ConfigMap `shdh-config`
(addresses) and the Secret `shdh-credentials` (keys) of k8s/base.

Here, not in pipelines/, because two sides name them: the compiler, which attaches them to
each task, and a train step in the image, which hands the same references on to the nodes of
the TrainJob it launches (shdh.trainjob), so that no value is ever copied into a spec.
"""

from __future__ import annotations

import os

CONFIG_MAP = "shdh-config"
# SHDH_CHECKPOINT_URL: where the train steps keep their checkpoints (shdh.tracking.checkpoint_sync).
CONFIG_KEYS = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_S3_ENDPOINT_URL",
    "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION",
    "SHDH_CHECKPOINT_URL",
)
SECRET = "shdh-credentials"
SECRET_KEYS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
)
# The training loader's worker processes hand their batches over through /dev/shm, which a pod
# gets at 64 MB: two batches of 64 photos at 256 px. Every pod that trains mounts a
# memory-backed volume there instead (its pages count against the pod's memory limit).
SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"


def env_references() -> list[dict]:
    """Kubernetes EnvVar entries that read every key from the ConfigMap and the Secret
    (optional: a stack without MLflow authentication has no password key)."""
    refs = [(key, "configMapKeyRef", CONFIG_MAP) for key in CONFIG_KEYS]
    refs += [(key, "secretKeyRef", SECRET) for key in SECRET_KEYS]
    return [
        {"name": key, "valueFrom": {kind: {"name": source, "key": key, "optional": True}}}
        for key, kind, source in refs
    ]


def env_values() -> dict[str, str]:
    """The same variables' values in this process, for a runner that has no cluster to
    resolve references (the TrainJob container backend on one host)."""
    return {key: os.environ[key] for key in (*CONFIG_KEYS, *SECRET_KEYS) if key in os.environ}
