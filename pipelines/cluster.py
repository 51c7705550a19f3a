"""What a task needs on a Kubernetes cluster and nowhere else: settings, credentials, a GPU.

MLflow's address and the S3 endpoint come from the ConfigMap `shdh-config`, the S3 credentials
from the Secret `shdh-credentials` (k8s/base; k8s/secret.example.yaml shows the keys), as
environment variables through kfp-kubernetes. The compiled YAML names them and holds no value.

Where the training steps run is the ConfigMap `shdh-train-scheduling` of k8s/ (the gpu overlay
fills it in): node selector, tolerations and accelerator are part of a compiled pipeline, not of
a running pod, so the compiler reads that ConfigMap from a file (the overlay's manifest, the
output of `kubectl kustomize`, or `kubectl get configmap shdh-train-scheduling -o json`) and
puts the values on the train tasks.

None of this is applied to the pipeline kfp.local runs: it has no Kubernetes, warns that an
accelerator request has no effect there, and takes its environment from the calling shell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CONFIG_MAP = "shdh-config"
CONFIG_KEYS = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_S3_ENDPOINT_URL",
               "AWS_ENDPOINT_URL")  # fmt: skip
SECRET = "shdh-credentials"
SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_USERNAME",
               "MLFLOW_TRACKING_PASSWORD")  # fmt: skip
SCHEDULING_CONFIG_MAP = "shdh-train-scheduling"
DEFAULT_SCHEDULING_FILE = Path("k8s/overlays/gpu/train-scheduling.yaml")  # in the checkout
_TOLERATION_FIELDS = {"key": "key", "operator": "operator", "value": "value", "effect": "effect",
                      "tolerationSeconds": "toleration_seconds"}  # fmt: skip


@dataclass(frozen=True)
class TrainScheduling:
    """Where a training task runs; the empty default runs it on any node, without a GPU."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    accelerator_type: str = ""
    accelerator_limit: int = 0


def load_scheduling(path: str | Path) -> TrainScheduling:
    """The values of the ConfigMap shdh-train-scheduling found in a YAML or JSON file (one
    object, a multi-document stream, or a `kind: List`); errors name the file and the key."""
    path = Path(path)
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the scheduling ConfigMap: {exc}") from exc
    objects = []
    for doc in documents:
        if isinstance(doc, dict):
            objects += doc.get("items") or [] if doc.get("kind") == "List" else [doc]
    found = [o for o in objects if o.get("kind") == "ConfigMap"
             and (o.get("metadata") or {}).get("name") == SCHEDULING_CONFIG_MAP]  # fmt: skip
    if len(found) != 1:
        raise ValueError(f"{path}: expected one ConfigMap named {SCHEDULING_CONFIG_MAP}, "
                         f"found {len(found)}")  # fmt: skip
    data = found[0].get("data") or {}

    def value(key: str, default: str, kind: type) -> Any:
        text = data.get(key, default)
        try:
            parsed = json.loads(text) if kind is not str else str(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: data.{key}: not valid JSON ({exc}): {text!r}") from exc
        if not isinstance(parsed, kind) or isinstance(parsed, bool):
            raise ValueError(f"{path}: data.{key}: expected a JSON {kind.__name__}, got {text!r}")
        return parsed

    selector = value("node_selector", "{}", dict)
    tolerations = value("tolerations", "[]", list)
    limit = value("accelerator_limit", "0", int)
    accelerator = value("accelerator_type", "", str)
    if any(not isinstance(v, str) for v in selector.values()):
        raise ValueError(f"{path}: data.node_selector: label values must be strings: {selector}")
    for t in tolerations:
        if not isinstance(t, dict) or not set(t) <= set(_TOLERATION_FIELDS):
            raise ValueError(f"{path}: data.tolerations: each must be an object with "
                             f"{sorted(_TOLERATION_FIELDS)}, got {t!r}")  # fmt: skip
    if limit < 0 or (accelerator and limit < 1):
        raise ValueError(f"{path}: data.accelerator_limit: {limit} for accelerator_type "
                         f"{accelerator!r} (at least 1 with a type, 0 without)")  # fmt: skip
    return TrainScheduling(selector, tolerations, accelerator, limit if accelerator else 0)


def use_cluster_settings(task: Any) -> Any:
    """Environment from the ConfigMap and the Secret, by reference."""
    from kfp import kubernetes

    kubernetes.use_config_map_as_env(task, CONFIG_MAP, {key: key for key in CONFIG_KEYS})
    kubernetes.use_secret_as_env(task, SECRET, {key: key for key in SECRET_KEYS})
    return task


def apply_scheduling(task: Any, scheduling: TrainScheduling) -> Any:
    """Node selector, tolerations and accelerator (a GPU, in the gpu overlay) on a task."""
    from kfp import kubernetes

    for label, label_value in scheduling.node_selector.items():
        kubernetes.add_node_selector(task, label, label_value)
    for toleration in scheduling.tolerations:
        kubernetes.add_toleration(task, **{_TOLERATION_FIELDS[k]: v for k, v in toleration.items()})
    if scheduling.accelerator_type:
        task.set_accelerator_type(scheduling.accelerator_type)
        task.set_accelerator_limit(scheduling.accelerator_limit)
    return task
