"""The Kubernetes manifests of k8s/: they render, every object is valid for Kubernetes 1.32, no
credential is written in them, and every pod is sized, probed and locked down.

No API server runs here, so validity is checked against the OpenAPI schemas that the
kubernetes-validate package bundles (the same as `kubernetes-validate --strict -k 1.32`).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from tests.infra.dockerfile import instructions, stages
from tests.infra.manifests import (
    ADMIN_S3_KEYS,
    K8S,
    MILVUS_GROUP,
    MILVUS_S3_KEYS,
    MILVUS_SECRETS,
    MILVUS_TARGETS,
    OBJECT_STORE,
    REPO,
    SEARCH,
    SEARCH_S3_KEYS,
    STEP_S3_KEYS,
    TARGETS,
    containers,
    env_references,
    find,
    pod_specs,
    quantity,
    render,
    render_folder,
    rendered_text,
    s3_identities,
    secret_volumes,
)

KUBERNETES_VERSION = "1.32"
NAMESPACE = "shdh"
# The namespace of each target: the stack lives where Kubeflow Pipelines runs the pipeline.
NAMESPACES = {
    "base": "shdh",
    "overlays/dev": "shdh",
    "overlays/gpu": "shdh",
    "overlays/kubeflow": "kubeflow",
    "overlays/profile": "kubeflow-user-example-com",
    "overlays/milvus": "shdh",
}
# Targets that deploy into a namespace something else owns (KFP, a Kubeflow profile).
FOREIGN_NAMESPACE = {"overlays/kubeflow", "overlays/profile"}
GPU_TARGETS = {"overlays/gpu", "overlays/profile"}
# The servers' Secret (database, object store and MLflow administrators) and the steps' Secret
# (a bucket-scoped S3 identity, an MLflow user without administration rights).
SERVER_SECRET = "shdh-server-credentials"
STEP_SECRET = "shdh-credentials"
# The search service's bearer token, mounted as a file (the service) or read by the pipeline's
# deploy step.
TOKEN_SECRET = "shdh-search-token"
# The search service's read-only S3 keys (SeaweedFS identity `search`).
SEARCH_SECRET = "shdh-search-credentials"
SECRET_EXAMPLE = K8S / "secret.example.yaml"
# The pods that may hold the servers' credentials: the servers and the Job that makes the
# steps' MLflow user. Nothing the pipeline steps run is among them.
SERVER_PODS = {
    "StatefulSet/postgres",
    "Deployment/shdh-seaweedfs",
    "Deployment/mlflow",
    "Job/mlflow-pipeline-user",
}
S3_ACTIONS = ("Read", "Write", "List", "Tagging")
SENSITIVE = re.compile(r"PASSWORD|SECRET|KEY|TOKEN")
PLACEHOLDER = "<set-me>"
GPU_LABEL = "nvidia.com/gpu.present"
GPU_TAINT = "nvidia.com/gpu"
# The pipeline runs' identity (k8s/base/rbac.yaml), and the kinds that live in no namespace.
PIPELINE_ACCOUNT = "shdh-pipeline"
CLUSTER_SCOPED = ("Namespace", "ClusterRole", "ClusterRoleBinding")
TRAINER_GROUP = "trainer.kubeflow.org"  # Kubeflow Trainer v2's API group
# The ClusterRole and ClusterRoleBinding of the one cluster-wide right, named `<this>:<namespace>`.
RUNTIMES_READER = "shdh-pipeline-trainer-runtimes"
# Everything the pipeline's account may do in its namespace: (API group, resource, verb, the
# one object's name or None for any). Why each is there is said in k8s/base/rbac.yaml.
PIPELINE_GRANTS = {
    # the KFP launcher: its settings and the pipeline root's credentials, by name only
    ("", "configmaps", "get", "kfp-launcher"),
    ("", "secrets", "get", "mlpipeline-minio-artifact"),
    # the Argo executor: each step's outputs
    ("argoproj.io", "workflowtaskresults", "create", None),
    ("argoproj.io", "workflowtaskresults", "patch", None),
    # the trainjob task: the runtime, the TrainJob, its pods, their logs, the failure's events
    *((TRAINER_GROUP, "trainjobs", v, None) for v in ("create", "get", "list", "watch", "delete")),
    *((TRAINER_GROUP, "trainingruntimes", v, None) for v in ("get", "list")),
    *(("", "pods", v, None) for v in ("get", "list", "watch")),
    ("", "pods/log", "get", None),
    ("", "events", "list", None),
}

targets = pytest.mark.parametrize("target", TARGETS)


def secret_examples() -> dict[str, dict]:
    """The Secrets of the example, by name."""
    return {s["metadata"]["name"]: s for s in yaml.safe_load_all(SECRET_EXAMPLE.read_text())}


def env_of(container: dict) -> dict[str, dict]:
    return {item["name"]: item for item in container.get("env", [])}


def project_image_containers(objects):
    """The containers that run the image built from the Dockerfile (kustomize name `shdh`)."""
    return [
        (label, container, spec)
        for label, container, spec in containers(objects)
        if container["image"].rpartition(":")[0].endswith("/shdh")
    ]


# --- rendering and validity -------------------------------------------------------------------


@targets
def test_renders_the_whole_stack(target):
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in render(target)}
    assert kinds >= {
        ("ConfigMap", "shdh-config"),
        ("ConfigMap", "shdh-pipeline"),
        ("ServiceAccount", "shdh-pipeline"),
        ("Role", "shdh-pipeline"),
        ("RoleBinding", "shdh-pipeline"),
        ("ClusterRole", f"{RUNTIMES_READER}:{NAMESPACES[target]}"),
        ("ClusterRoleBinding", f"{RUNTIMES_READER}:{NAMESPACES[target]}"),
        ("Deployment", "mlflow"),
        ("Service", "mlflow"),
        ("StatefulSet", "postgres"),
        ("Service", "postgres"),
        ("Deployment", OBJECT_STORE),
        ("Service", OBJECT_STORE),
        ("PersistentVolumeClaim", f"{OBJECT_STORE}-data"),
        ("Job", "mlflow-pipeline-user"),
        ("Deployment", SEARCH),
        ("Service", SEARCH),
    }


@targets
def test_the_object_store_is_seaweedfs_and_no_minio_is_left(target):
    """The S3 store current Kubeflow (1.11+, KFP 2.16) ships: SeaweedFS's S3 gateway, at a
    pinned release, reached by every S3 client of the stack through its Service."""
    objects = render(target)
    for obj in objects:
        assert "minio" not in obj["metadata"]["name"].lower(), obj["metadata"]["name"]
    for label, container, _ in containers(objects):
        assert "minio" not in container["image"].lower(), label
        assert not any("MINIO" in item["name"] for item in container.get("env", [])), label
    deployment = find(objects, "Deployment", OBJECT_STORE)
    (server,) = deployment["spec"]["template"]["spec"]["containers"]
    assert server["image"].startswith("chrislusf/seaweedfs:")
    assert server["command"] == ["weed"] and server["args"][0] == "server"
    assert "-s3" in server["args"] and "-s3.config=/config/s3.json" in server["args"]
    service = find(objects, "Service", OBJECT_STORE)
    (port,) = service["spec"]["ports"]
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    for key in ("AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL"):
        assert config[key] == f"http://{OBJECT_STORE}:{port['port']}", key


@targets
def test_every_object_is_valid_for_kubernetes_strictly(target):
    for obj in render(target):
        if obj["apiVersion"].split("/")[0] == MILVUS_GROUP:
            continue  # the operator's CRD, not Kubernetes's: tests/infra/test_milvus_overlay.py
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            pytest.fail(f"k8s/{target}: {name} at {'.'.join(map(str, exc.path))}: {exc.message}")


def test_the_validator_rejects_an_unknown_field():
    """The check above can fail: strict mode refuses a misspelt field."""
    service = find(render("base"), "Service", "mlflow")
    service["spec"]["portz"] = service["spec"].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, KUBERNETES_VERSION, strict=True)


@targets
def test_everything_is_in_the_targets_namespace(target):
    """The stack's own namespace is created only where the stack owns it; cluster-scoped
    objects (the Namespace, the ClusterRole and its binding) have none."""
    namespace = NAMESPACES[target]
    created = [obj["metadata"]["name"] for obj in render(target) if obj["kind"] == "Namespace"]
    assert created == ([] if target in FOREIGN_NAMESPACE else [namespace])
    for obj in render(target):
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
        else:
            assert obj["metadata"].get("namespace") == namespace, obj["metadata"]["name"]


# --- credentials ------------------------------------------------------------------------------


@targets
def test_no_secret_object_is_rendered(target):
    assert not [obj for obj in render(target) if obj["kind"] == "Secret"]
    assert PLACEHOLDER not in rendered_text(target)


@targets
def test_sensitive_variables_come_from_the_secret(target):
    for label, container, _ in containers(render(target)):
        for name, item in env_of(container).items():
            if SENSITIVE.search(name):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                assert ref is not None and "value" not in item, f"{label}: {name} is not a secret"
        for source in container.get("envFrom", []):
            assert "configMapRef" in source or "secretRef" in source


@targets
def test_config_maps_hold_no_credentials(target):
    for obj in render(target):
        if obj["kind"] == "ConfigMap":
            for key in obj.get("data", {}):
                assert not SENSITIVE.search(key.upper()), f"ConfigMap {obj['metadata']['name']}"


def secret_references(objects) -> list[tuple[str, str, str]]:
    """(workload "Kind/name", Secret, key) of every secretKeyRef of every container."""
    found = []
    for label, container, _ in containers(objects):
        for item in container.get("env", []):
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                found.append(("/".join(label.split("/")[:2]), ref["name"], ref["key"]))
    return found


@targets
def test_every_secret_reference_is_a_key_of_the_example(target):
    keys = {name: set(secret["stringData"]) for name, secret in secret_examples().items()}
    used: set[tuple[str, str]] = set()
    for workload, name, key in secret_references(render(target)):
        assert key in keys.get(name, ()), (
            f"{workload}: {name}/{key} is not in {SECRET_EXAMPLE.name}"
        )
        used.add((name, key))
    for workload, name, key in secret_volumes(render(target)):
        assert key in keys.get(name, ()), f"{workload}: {name}/{key} is not in the example"
        used.add((name, key))
    # The steps' keys are used by the pipeline (pipelines/cluster.py), not only by the stack.
    from shdh.kfp.pipelines.cluster import SECRET, SECRET_KEYS

    used |= {(SECRET, key) for key in SECRET_KEYS}
    # Milvus's Secrets are read only where the Milvus component is (its CR names one too).
    if target in MILVUS_TARGETS:
        used |= {("shdh-milvus-storage", key) for key in ("accesskey", "secretkey")}
    else:
        keys = {name: names for name, names in keys.items() if name not in MILVUS_SECRETS}
    every = {(name, key) for name, names in keys.items() for key in names}
    assert used == every, f"keys of {SECRET_EXAMPLE.name} that nothing uses: {every - used}"


def test_secret_example_is_valid_secrets_of_placeholders_only():
    secrets = secret_examples()
    assert set(secrets) == {
        SERVER_SECRET,
        STEP_SECRET,
        TOKEN_SECRET,
        SEARCH_SECRET,
        *MILVUS_SECRETS,
    }
    for name, secret in secrets.items():
        kubernetes_validate.validate(secret, KUBERNETES_VERSION, strict=True)
        assert secret["metadata"] == {"name": name, "namespace": NAMESPACE}
        assert "data" not in secret
        assert set(secret["stringData"].values()) == {PLACEHOLDER}


@targets
def test_administrator_credentials_go_to_the_servers_only(target):
    """The object store's admin keys, the MLflow administrator and the database account are in
    the servers' Secret, which only the server pods read; the steps get their own Secret, which
    holds none of them, and nothing in the stack hands the servers' keys to a step."""
    from shdh.kfp.pipelines.cluster import SECRET, SECRET_KEYS

    objects = render(target)
    references = secret_references(objects)
    milvus_readers = {
        "shdh-milvus-storage": {f"Deployment/{OBJECT_STORE}"},  # its identity (and the CR)
        "shdh-milvus-credentials": {f"Deployment/{SEARCH}", "Job/milvus-users"},
    }
    for workload, name, key in references:
        if name in MILVUS_SECRETS:
            assert workload in milvus_readers[name], f"{workload} reads {name}/{key}"
            continue
        assert name in (SERVER_SECRET, STEP_SECRET, SEARCH_SECRET), f"{workload}: {name}"
        if name == SERVER_SECRET:
            assert workload in SERVER_PODS, f"{workload} reads {SERVER_SECRET}/{key}"
        if name == SEARCH_SECRET:  # the service, and the servers' set-up of its accounts
            setup = (f"Deployment/{OBJECT_STORE}", "Job/mlflow-pipeline-user")
            assert workload in (f"Deployment/{SEARCH}", *setup), workload
    # What the compiled pipeline attaches to every step (tests/pipelines/test_compile.py).
    assert SECRET == STEP_SECRET
    assert set(SECRET_KEYS) == set(secret_examples()[STEP_SECRET]["stringData"])
    assert not set(SECRET_KEYS) & set(secret_examples()[SERVER_SECRET]["stringData"])
    # The administrators come from the servers' Secret.
    env = {label.split("/")[-1]: env_of(c) for label, c, _ in containers(objects)}
    for variable in ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"):
        assert env["mlflow"][variable]["valueFrom"]["secretKeyRef"]["name"] == SERVER_SECRET
    for container in ("mlflow", "create-buckets"):  # MLflow's artifact store, bucket creation
        for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            ref = env[container][variable]["valueFrom"]["secretKeyRef"]
            assert ref["name"] == SERVER_SECRET, (container, variable)
    # The pipeline's service account may read no Secret of the stack through the API.
    for rule in find(objects, "Role", "shdh-pipeline")["rules"]:
        if "secrets" in rule["resources"]:
            assert not {SERVER_SECRET, STEP_SECRET} & set(rule["resourceNames"]), rule
    # Only the search service mounts a Secret as files: its token.
    assert secret_volumes(objects) == [(f"Deployment/{SEARCH}", TOKEN_SECRET, "token")]


@targets
def test_the_steps_s3_identity_is_scoped_to_the_pipelines_bucket(target):
    """SeaweedFS's identities: the steps' keys may read, write, list and tag the pipeline's
    bucket (checkpoints, DVC remote) and nothing else; MLflow's bucket and bucket administration
    are the admin's. tests/infra/test_s3_identities.py checks the same against a real server."""
    keys = {**STEP_S3_KEYS, **ADMIN_S3_KEYS, **SEARCH_S3_KEYS, **MILVUS_S3_KEYS}
    identities, result = s3_identities(target, keys)
    assert result.returncode == 0, result.stderr
    by_key = {
        credential["accessKey"]: identity
        for identity in identities["identities"]
        for credential in identity["credentials"]
    }
    milvus = {"milvus-access"} if target in MILVUS_TARGETS else set()
    assert set(by_key) == {"step-access", "admin-access", "search-access", *milvus}
    step, admin, search = by_key["step-access"], by_key["admin-access"], by_key["search-access"]
    assert step["credentials"] == [{"accessKey": "step-access", "secretKey": "step-secret"}]
    config = find(render(target), "ConfigMap", "shdh-config")["data"]
    bucket = config["S3_PIPELINE_BUCKET"]
    assert sorted(step["actions"]) == sorted(f"{action}:{bucket}" for action in S3_ACTIONS)
    # the search service reads the index: it may read and list, nothing else
    assert sorted(search["actions"]) == [f"List:{bucket}", f"Read:{bucket}"]
    assert urlsplit(config["SHDH_CHECKPOINT_URL"]).hostname == bucket
    mlflow = next(c for label, c, _ in containers(render(target)) if label.endswith("/mlflow"))
    (destination,) = [a for a in mlflow["args"] if a.startswith("--artifacts-destination=")]
    assert urlsplit(destination.partition("=")[2]).hostname != bucket
    assert "Admin" in admin["actions"]


@pytest.mark.parametrize(
    "keys",
    [
        {**STEP_S3_KEYS, "S3_ADMIN_ACCESS_KEY": "step-access", "S3_ADMIN_SECRET_KEY": "x"},
        {
            **STEP_S3_KEYS,
            **ADMIN_S3_KEYS,
            "S3_SEARCH_ACCESS_KEY": "step-access",
            "S3_SEARCH_SECRET_KEY": "x",
        },
    ],
    ids=["admin-as-steps", "search-as-steps"],
)
def test_the_object_store_refuses_one_key_for_two_identities(keys):
    """The access keys of the identities must differ, or SeaweedFS could give a request either
    identity's rights (the search service's read-only keys the steps' write rights)."""
    identities, result = s3_identities("base", keys)
    assert result.returncode != 0 and identities == {}
    assert "must differ" in result.stderr


def test_without_the_search_services_secret_it_has_no_identity():
    """The search keys are optional: a stack without the service still starts its object store,
    with the admin's and the steps' identities only."""
    identities, result = s3_identities("base", {**STEP_S3_KEYS, **ADMIN_S3_KEYS})
    assert result.returncode == 0, result.stderr
    assert [i["name"] for i in identities["identities"]] == ["admin", "pipeline"]


def test_secret_example_is_in_no_kustomization():
    for kustomization in K8S.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kustomization.read_text())
        assert "secretGenerator" not in spec, kustomization
        for field in ("resources", "components", "patches"):
            for entry in spec.get(field, []):
                path = entry.get("path", "") if isinstance(entry, dict) else entry
                assert not path.endswith(SECRET_EXAMPLE.name), f"{kustomization}: {field}"


@targets
def test_config_map_references_exist(target):
    objects = render(target)
    for label, container, _ in containers(objects):
        for item in container.get("env", []):
            ref = item.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                data = find(objects, "ConfigMap", ref["name"])["data"]
                assert ref["key"] in data, f"{label}: no key {ref['key']} in {ref['name']}"


@targets
def test_variable_references_are_defined_before_use(target):
    """Kubernetes expands $(NAME) only for variables defined earlier in the same env list;
    otherwise the text stays literally in place."""
    for label, container, _ in containers(render(target)):
        defined: list[str] = []
        for item in container.get("env", []):
            for name in env_references(item.get("value", "")):
                assert name in defined, f"{label}: {item['name']} uses $({name}) before it is set"
            defined.append(item["name"])
        for word in container.get("command", []) + container.get("args", []):
            for name in env_references(word):
                assert name in defined, f"{label}: the command line uses undefined $({name})"


# --- pods: sizes, probes, security ------------------------------------------------------------


@targets
def test_every_container_has_requests_within_limits(target):
    for label, container, _ in containers(render(target)):
        resources = container.get("resources", {})
        for resource in ("cpu", "memory"):
            request = resources.get("requests", {}).get(resource)
            limit = resources.get("limits", {}).get(resource)
            assert request is not None and limit is not None, f"{label}: no {resource} bounds"
            assert quantity(request) <= quantity(limit), f"{label}: {resource} request > limit"


def test_dev_is_no_bigger_than_the_base():
    base = {label: c["resources"] for label, c, _ in containers(render("base"))}
    dev = {label: c["resources"] for label, c, _ in containers(render("overlays/dev"))}
    assert dev.keys() == base.keys()
    for label in base:
        for bound in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                small, large = dev[label][bound][resource], base[label][bound][resource]
                assert quantity(small) <= quantity(large), f"{label} {bound}.{resource}"


@targets
def test_servers_have_startup_readiness_and_liveness_probes(target):
    servers = [(label, c) for label, c, _ in containers(render(target)) if c.get("ports")]
    assert len(servers) == 4
    for label, container in servers:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert probe in container, f"{label}: no {probe}"


@targets
def test_probes_ask_each_server_the_right_question(target):
    objects = render(target)
    by_name = {label.split("/")[-1]: c for label, c, _ in containers(objects)}
    mlflow, postgres, seaweedfs = by_name["mlflow"], by_name["postgres"], by_name["seaweedfs"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert mlflow[probe]["httpGet"]["path"] == "/health"
        assert "pg_isready" in " ".join(postgres[probe]["exec"]["command"])
        # SeaweedFS's S3 gateway answers /healthz without credentials, on the S3 port.
        assert seaweedfs[probe]["httpGet"] == {"path": "/healthz", "port": "s3"}
    # The search service: alive while it loads, ready only with its index and encoder loaded.
    search = by_name["search"]
    assert search["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert search["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert search["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


@targets
def test_pods_run_as_non_root_with_the_runtime_seccomp_profile(target):
    for label, spec in pod_specs(render(target)):
        context = spec["securityContext"]
        assert context["runAsNonRoot"] is True, label
        assert isinstance(context["runAsUser"], int) and context["runAsUser"] > 0, label
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, label
        assert spec["automountServiceAccountToken"] is False, label


@targets
def test_containers_are_locked_down(target):
    for label, container, spec in containers(render(target)):
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, label
        assert context["allowPrivilegeEscalation"] is False, label
        assert context["capabilities"] == {"drop": ["ALL"]}, label
        assert context["readOnlyRootFilesystem"] is True, label
        # ... with a writable, pod-local /tmp.
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        assert "/tmp" in mounts, f"{label}: no /tmp"
        assert "emptyDir" in volumes[mounts["/tmp"]], f"{label}: /tmp is not an emptyDir"


@targets
def test_project_image_pods_run_as_the_images_user(target):
    uid, gid = (int(part) for part in stages(REPO / "Dockerfile")["runtime"].user().split(":"))
    found = project_image_containers(render(target))
    assert found
    for label, _, spec in found:
        assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (
            uid,
            gid,
        ), label


@targets
def test_images_are_pinned_and_the_project_image_is_this_version(target):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    dockerfile_args = [args for key, args in instructions(REPO / "Dockerfile") if key == "ARG"]
    assert f"SHDH_VERSION={version}" in dockerfile_args
    for label, container, _ in containers(render(target)):
        image = container["image"]
        name, _, tag = image.rpartition(":")
        assert name and "/" not in tag and tag != "latest", f"{label}: {image} has no fixed tag"
    for label, container, _ in project_image_containers(render(target)):
        assert container["image"].endswith(f"/shdh:{version}"), label


def test_the_manifests_name_the_image_as_the_code_does():
    """One name: kustomize's default for `shdh` is SHDH_IMAGE's default (components/image.py),
    the runtime image CI pushes."""
    from shdh.kfp.components.image import DEFAULT_IMAGE

    spec = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    (image,) = [i for i in spec["images"] if i["name"] == "shdh"]
    assert f"{image['newName']}:{image['newTag']}" == DEFAULT_IMAGE
    for label, container, _ in project_image_containers(render("overlays/dev")):
        assert container["image"] == DEFAULT_IMAGE, label


def test_the_documented_image_override_reaches_every_project_container(tmp_path):
    """docs/cluster.md's `kustomize edit set image NAME=$SHDH_IMAGE` in the dev overlay: the
    entry it writes must name the image as the overlay sees it, after the base's own entry."""
    command = re.search(
        r'kustomize edit set image "([^"=]+)=\$SHDH_IMAGE"',
        (REPO / "docs" / "cluster.md").read_text(),
    )
    assert command, "docs/cluster.md shows no `kustomize edit set image NAME=$SHDH_IMAGE`"
    shutil.copytree(K8S, tmp_path / "k8s")
    kustomization = tmp_path / "k8s" / "overlays" / "dev" / "kustomization.yaml"
    entry = {"name": command[1], "newName": "registry.example.com/team/shdh", "newTag": "9.9.9"}
    kustomization.write_text(kustomization.read_text() + yaml.safe_dump({"images": [entry]}))
    found = project_image_containers(render_folder(kustomization.parent))
    assert len(found) >= 3  # MLflow, the search service, the pipeline user's Job
    for label, container, _ in found:
        assert container["image"] == "registry.example.com/team/shdh:9.9.9", label


# --- the servers and how they find each other -------------------------------------------------


@targets
def test_statefulsets_have_volumes_and_headless_services(target):
    objects = render(target)
    statefulsets = [obj for obj in objects if obj["kind"] == "StatefulSet"]
    assert {s["metadata"]["name"] for s in statefulsets} == {"postgres"}
    for statefulset in statefulsets:
        service = find(objects, "Service", statefulset["spec"]["serviceName"])
        assert service["spec"]["clusterIP"] == "None"
        claims = {t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]}
        mounted = {
            m["name"]
            for c in statefulset["spec"]["template"]["spec"]["containers"]
            for m in c.get("volumeMounts", [])
        }
        assert claims and claims <= mounted


@targets
def test_the_object_store_keeps_its_data_on_its_own_claim(target):
    """One pod writes the volume: the Deployment replaces its pod only after the old one stops."""
    objects = render(target)
    deployment = find(objects, "Deployment", OBJECT_STORE)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = deployment["spec"]["template"]["spec"]
    (claim,) = [
        v["persistentVolumeClaim"]["claimName"]
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v
    ]
    find(objects, "PersistentVolumeClaim", claim)
    (server,) = spec["containers"]
    data = next(v["name"] for v in spec["volumes"] if "persistentVolumeClaim" in v)
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    assert f"-dir={mounts[data]}" in server["args"]


@targets
def test_services_select_their_pods_by_a_named_port(target):
    objects = render(target)
    for service in [obj for obj in objects if obj["kind"] == "Service"]:
        selector = service["spec"]["selector"]
        pods = [
            (spec, obj)
            for obj in objects
            if obj["kind"] in ("Deployment", "StatefulSet")
            for spec in [obj["spec"]["template"]]
            if selector.items() <= spec["metadata"]["labels"].items()
        ]
        assert len(pods) == 1, f"Service {service['metadata']['name']} selects {len(pods)}"
        ports = {p["name"] for c in pods[0][0]["spec"]["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, service["metadata"]["name"]


def search_command_line(objects) -> tuple[dict, argparse.Namespace]:
    """The search container, and its command line parsed by `shdh serve`'s own parser with the
    ConfigMap's values in place of the $(VARIABLES) Kubernetes expands."""
    from shdh.commands.serve import add_arguments

    spec = find(objects, "Deployment", SEARCH)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["shdh", "serve"]
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    values = {
        name: config[item["valueFrom"]["configMapKeyRef"]["key"]]
        for name, item in env_of(container).items()
        if "configMapKeyRef" in item.get("valueFrom", {})
    }
    words = [re.sub(r"\$\((\w+)\)", lambda m: values[m[1]], w) for w in container["args"]]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return container, parser.parse_args(words)


@targets
def test_the_search_service_reads_its_index_from_the_pipelines_bucket(target):
    """The index prefix comes from shdh-config, in the bucket the service's S3 identity may
    read; the copy goes to an emptyDir (the root filesystem is read-only); the S3 keys are the
    service's read-only ones, never the steps' or the object store's admin's; so is its MLflow
    user (tests/integration/test_mlflow_server.py checks what it may do)."""
    objects = render(target)
    container, args = search_command_line(objects)
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    if target in MILVUS_TARGETS:  # the index is Milvus's: tests/infra/test_milvus_overlay.py
        assert args.engine == "milvus" and args.index is None
        return
    assert args.index == config["SHDH_SEARCH_INDEX_URL"]
    index = urlsplit(args.index)
    assert index.scheme == "s3" and index.hostname == config["S3_PIPELINE_BUCKET"]
    assert index.path.strip("/")
    assert (args.model, args.alias) == (config["SHDH_SEARCH_MODEL"], config["SHDH_SEARCH_ALIAS"])
    spec = find(objects, "Deployment", SEARCH)["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts[args.cache_dir]]
    env = env_of(container)
    s3_keys = {
        "AWS_ACCESS_KEY_ID": "S3_SEARCH_ACCESS_KEY",
        "AWS_SECRET_ACCESS_KEY": "S3_SEARCH_SECRET_KEY",
    }
    for variable, key in s3_keys.items():
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": SEARCH_SECRET, "key": key}
    mlflow_keys = {
        "MLFLOW_TRACKING_USERNAME": "MLFLOW_SEARCH_USERNAME",
        "MLFLOW_TRACKING_PASSWORD": "MLFLOW_SEARCH_PASSWORD",
    }
    for variable, key in mlflow_keys.items():
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": SEARCH_SECRET, "key": key}
    assert env["AWS_ENDPOINT_URL"]["valueFrom"]["configMapKeyRef"]["name"] == "shdh-config"


@targets
def test_the_steps_user_may_edit_the_model_the_search_service_serves(target):
    """The Job that grants the steps' MLflow user its rights names the registered model by the
    ConfigMap's SHDH_SEARCH_MODEL, as the search service does, and by default that is the
    pipeline's register_model: one name to change, and the grant follows it."""
    from shdh.tracking.model_registry import DEFAULT_MODEL_NAME

    objects = render(target)
    job = find(objects, "Job", "mlflow-pipeline-user")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    reference = env_of(container)["SHDH_REGISTERED_MODEL"]["valueFrom"]["configMapKeyRef"]
    assert reference == {"name": "shdh-config", "key": "SHDH_SEARCH_MODEL"}
    _, args = search_command_line(objects)
    assert args.model == DEFAULT_MODEL_NAME


@targets
def test_the_search_service_takes_its_token_from_a_mounted_secret(target):
    """The token is a file of the Secret's volume, not an environment variable (which any
    process of the pod, and `kubectl describe`, would show), and the service listens on the
    port its Service targets, on every interface (refused by `shdh serve` without a token)."""
    objects = render(target)
    container, args = search_command_line(objects)
    spec = find(objects, "Deployment", SEARCH)["spec"]["template"]["spec"]
    token_file = Path(args.token_file)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(token_file.parent)]
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == TOKEN_SECRET
    assert volume["secret"]["items"] == [{"key": "token", "path": token_file.name}]
    assert "SHDH_SERVE_TOKEN" not in env_of(container) and not args.no_token
    assert args.host == "0.0.0.0"
    (port,) = container["ports"]
    assert port["containerPort"] == args.port
    (service_port,) = find(objects, "Service", SEARCH)["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]


@targets
def test_config_urls_point_at_services_of_the_stack(target):
    objects = render(target)
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    services = {
        obj["metadata"]["name"]: {p["port"] for p in obj["spec"]["ports"]}
        for obj in objects
        if obj["kind"] == "Service"
    }
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"):
        url = urlsplit(config[key])
        assert url.scheme == "http" and url.hostname in services, key
        assert url.port in services[url.hostname], key
    assert int(config["POSTGRES_PORT"]) in services[config["POSTGRES_HOST"]]


@targets
def test_mlflow_stores_runs_in_postgres_and_artifacts_in_a_created_bucket(target):
    objects = render(target)
    mlflow = next(c for label, c, _ in containers(objects) if label.endswith("/mlflow"))
    env = env_of(mlflow)
    uri = env["MLFLOW_BACKEND_STORE_URI"]["value"]
    assert uri.startswith("postgresql+psycopg2://")
    assert env_references(uri) == [
        "POSTGRES_USER",
        "POSTGRES_PASSWORD",
        "POSTGRES_HOST",
        "POSTGRES_PORT",
        "POSTGRES_DB",
    ]
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "POSTGRES_PASSWORD"
    destinations = [a for a in mlflow["args"] if a.startswith("--artifacts-destination=")]
    assert destinations == ["--artifacts-destination=s3://mlflow/"]
    bucket = urlsplit(destinations[0].partition("=")[2]).hostname
    assert bucket in find(objects, "ConfigMap", "shdh-config")["data"]["S3_BUCKETS"].split()
    # The same database name for the server that creates it and the client that uses it.
    postgres = next(c for label, c, _ in containers(objects) if label.endswith("/postgres"))
    assert env_of(postgres)["POSTGRES_DB"]["valueFrom"] == env["POSTGRES_DB"]["valueFrom"]


@targets
def test_mlflow_asks_for_a_login_in_every_overlay(target):
    """Basic authentication on, with the auth config the init container writes: an overlay that
    patches the server's arguments must keep `--app-name=basic-auth` (a strategic-merge patch of
    `args` replaces the whole list)."""
    objects = render(target)
    mlflow = next(c for label, c, _ in containers(objects) if label.endswith("/mlflow"))
    assert mlflow["args"].count("--app-name=basic-auth") == 1, mlflow["args"]
    assert "MLFLOW_AUTH_CONFIG_PATH" in env_of(mlflow)
    base = next(c for label, c, _ in containers(render("base")) if label.endswith("/mlflow"))
    assert set(base["args"]) - set(mlflow["args"]) <= {"--workers=2"}  # only sizes change


@targets
def test_no_server_pod_gets_an_istio_sidecar_in_any_overlay(target):
    """dev and gpu run in a profile namespace named shdh as the profile overlay runs in its
    own: the sidecar setting must be the same everywhere, or the steps cannot reach the servers."""
    objects = render(target)
    workloads = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "Job")]
    found = {f"{o['kind']}/{o['metadata']['name']}" for o in workloads}
    milvus = {"Job/milvus-users"} if target in MILVUS_TARGETS else set()
    assert found == SERVER_PODS | {f"Deployment/{SEARCH}"} | milvus
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert labels.get("sidecar.istio.io/inject") == "false", workload["metadata"]["name"]


@targets
def test_mlflow_answers_the_hosts_it_is_reached_by(target):
    """mlflow refuses requests whose Host header is not allowed (DNS-rebinding protection):
    checked with mlflow's own matcher on the names the steps and port-forward use."""
    from mlflow.server.security_utils import is_allowed_host_header

    objects = render(target)
    mlflow = next(c for label, c, _ in containers(objects) if label.endswith("/mlflow"))
    allowed = env_of(mlflow)["MLFLOW_SERVER_ALLOWED_HOSTS"]["value"].split(",")
    tracking = urlsplit(find(objects, "ConfigMap", "shdh-config")["data"]["MLFLOW_TRACKING_URI"])
    namespace = NAMESPACES[target]  # the Service's full names, in the overlay's namespace
    hosts = [tracking.netloc, "localhost:5000", f"mlflow.{namespace}.svc.cluster.local:5000"]
    for host in [*hosts, f"mlflow.{namespace}.svc", f"mlflow.{namespace}.svc:5000"]:
        assert is_allowed_host_header(allowed, host), host
    for host in ("attacker.example:5000", "mlflow.attacker.example", "mlflow.svc.example:5000"):
        assert not is_allowed_host_header(allowed, host), host


# --- the pipeline's identity and the GPU scheduling -------------------------------------------


def account_subject(namespace: str) -> dict:
    return {"kind": "ServiceAccount", "name": PIPELINE_ACCOUNT, "namespace": namespace}


def bound_rules(objects: list, binding_kind: str, namespace: str) -> list[dict]:
    """The rules of every role that a binding of `binding_kind` (RoleBinding: rights in the
    namespace; ClusterRoleBinding: cluster-wide) gives the pipeline's account."""
    rules = []
    for binding in objects:
        if binding["kind"] == binding_kind and account_subject(namespace) in binding["subjects"]:
            ref = binding["roleRef"]
            assert ref["apiGroup"] == "rbac.authorization.k8s.io", ref
            rules += find(objects, ref["kind"], ref["name"])["rules"]
    return rules


def grants(rules: list[dict]) -> set[tuple[str, str, str, str | None]]:
    """(API group, resource, verb, object name or None for any) of every right the rules give."""
    return {
        (group, resource, verb, name)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [None]
    }


@targets
def test_pipeline_role_is_minimal_and_bound_to_the_pipeline_account(target):
    objects = render(target)
    namespace = NAMESPACES[target]
    binding = find(objects, "RoleBinding", "shdh-pipeline")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "shdh-pipeline",
    }
    assert binding["subjects"] == [account_subject(namespace)]
    assert grants(bound_rules(objects, "RoleBinding", namespace)) == PIPELINE_GRANTS


@targets
def test_no_rbac_rule_of_the_stack_uses_a_wildcard(target):
    """No `*` group, resource, verb or name, and no non-resource URL, in any role of the stack."""
    roles = [obj for obj in render(target) if obj["kind"] in ("Role", "ClusterRole")]
    assert roles
    for role in roles:
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule, role["metadata"]["name"]
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in item for item in rule.get(field, [])), rule


@targets
def test_the_pipeline_account_may_run_and_follow_a_trainjob(target):
    """What the Kubeflow SDK's TrainerClient calls in the trainjob task's pod: it reads the
    runtime, creates the TrainJob, waits on it and deletes it, follows its pods' logs and
    lists the events; and the task gets no Secret through the API beyond what KFP's launcher
    reads."""
    from shdh.trainjob import TRAINER_GROUP as checked_by_the_task

    assert checked_by_the_task == TRAINER_GROUP
    objects = render(target)
    granted = grants(bound_rules(objects, "RoleBinding", NAMESPACES[target]))
    for verb in ("create", "get", "watch", "delete"):
        assert (TRAINER_GROUP, "trainjobs", verb, None) in granted, verb
    assert (TRAINER_GROUP, "trainingruntimes", "get", None) in granted
    assert {("", "pods", "list", None), ("", "pods", "watch", None)} <= granted
    assert ("", "pods/log", "get", None) in granted
    assert ("", "events", "list", None) in granted
    assert not {g for g in granted if g[1] == "pods/exec"}
    secrets = {g for g in granted if g[1] == "secrets"}
    assert secrets == {("", "secrets", "get", "mlpipeline-minio-artifact")}


@targets
def test_the_pipeline_account_may_only_read_trainer_runtimes_cluster_wide(target):
    """The one ClusterRoleBinding binds the account of the overlay's namespace to a ClusterRole
    that reads ClusterTrainingRuntimes, and the stack has no other cluster-wide right."""
    objects = render(target)
    namespace = NAMESPACES[target]
    (binding,) = [obj for obj in objects if obj["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [account_subject(namespace)]
    (role,) = [obj for obj in objects if obj["kind"] == "ClusterRole"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert grants(role["rules"]) == {
        (TRAINER_GROUP, "clustertrainingruntimes", "get", None),
        (TRAINER_GROUP, "clustertrainingruntimes", "list", None),
    }
    assert grants(bound_rules(objects, "ClusterRoleBinding", namespace)) == grants(role["rules"])


@targets
def test_cluster_scoped_rbac_is_named_after_the_namespace(target):
    """Stacks in two namespaces of one cluster (two profiles) must neither overwrite nor, on
    `kubectl delete -k`, delete each other's ClusterRole and ClusterRoleBinding."""
    names = [
        (obj["kind"], obj["metadata"]["name"])
        for obj in render(target)
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding")
    ]
    expected = f"{RUNTIMES_READER}:{NAMESPACES[target]}"
    assert names and all(name == expected for _, name in names), names


def test_a_second_profile_gets_its_own_cluster_wide_binding(tmp_path):
    """The profile overlay moved to another namespace as its comment says (`kustomize edit set
    namespace`): its cluster-scoped objects follow, and no two namespaces share one."""
    shutil.copytree(K8S, tmp_path / "k8s")
    kustomization = tmp_path / "k8s" / "overlays" / "profile" / "kustomization.yaml"
    text = kustomization.read_text()
    assert re.search(r"^namespace: kubeflow-user-example-com$", text, re.MULTILINE)
    other = "kubeflow-user-other-example-com"
    text = re.sub(r"^namespace: .*$", f"namespace: {other}", text, flags=re.MULTILINE)
    kustomization.write_text(text)
    moved = render_folder(kustomization.parent)
    (binding,) = [obj for obj in moved if obj["kind"] == "ClusterRoleBinding"]
    assert binding["metadata"]["name"] == f"{RUNTIMES_READER}:{other}"
    assert binding["subjects"] == [account_subject(other)]
    by_namespace: dict[str, set] = {other: set()}
    for target in TARGETS:
        by_namespace.setdefault(NAMESPACES[target], set())
    for namespace, objects in [(other, moved)] + [(NAMESPACES[t], render(t)) for t in TARGETS]:
        by_namespace[namespace] |= {
            (obj["kind"], obj["metadata"]["name"])
            for obj in objects
            if obj["kind"] in ("ClusterRole", "ClusterRoleBinding")
        }
    for namespace, names in by_namespace.items():
        for elsewhere, others in by_namespace.items():
            if elsewhere != namespace:
                assert not names & others, (namespace, elsewhere)


def pipeline_settings(target: str) -> dict:
    return find(render(target), "ConfigMap", "shdh-pipeline")["data"]


@targets
def test_train_scheduling_values_make_a_valid_pod(target):
    """The values the pipeline compiler puts on the train tasks must be of the shapes
    Kubernetes accepts in a pod, with requests within limits."""
    data = pipeline_settings(target)
    limits = {"cpu": data["train.cpu_limit"], "memory": data["train.memory_limit"]}
    if data["train.accelerator_type"]:
        limits[data["train.accelerator_type"]] = data["train.accelerator_limit"]
    requests = {"cpu": data["train.cpu_request"], "memory": data["train.memory_request"]}
    container = {
        "name": "train",
        "image": "shdh:test",
        "resources": {"limits": limits, "requests": requests},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train"},
        "spec": {
            "nodeSelector": json.loads(data["train.node_selector"]),
            "tolerations": json.loads(data["train.tolerations"]),
            "activeDeadlineSeconds": 3600,
            "containers": [container],
        },
    }
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("target", sorted(GPU_TARGETS))
def test_gpu_targets_send_training_to_gpu_nodes(target):
    data = pipeline_settings(target)
    assert json.loads(data["train.node_selector"]) == {GPU_LABEL: "true"}
    tolerations = json.loads(data["train.tolerations"])
    assert {"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert data["train.accelerator_type"] == "nvidia.com/gpu"
    assert int(data["train.accelerator_limit"]) == 1


@pytest.mark.parametrize("target", sorted(set(TARGETS) - GPU_TARGETS))
def test_other_targets_schedule_training_anywhere_without_a_gpu(target):
    data = pipeline_settings(target)
    assert json.loads(data["train.node_selector"]) == {}
    assert json.loads(data["train.tolerations"]) == []
    assert (data["train.accelerator_type"], data["train.accelerator_limit"]) == ("", "0")


def without_settings(target: str) -> list:
    return [
        obj
        for obj in render(target)
        if (obj["kind"], obj["metadata"]["name"]) != ("ConfigMap", "shdh-pipeline")
    ]


def test_gpu_overlay_changes_nothing_but_the_pipeline_settings():
    assert without_settings("overlays/gpu") == without_settings("base")


def test_the_kubeflow_overlay_is_dev_in_the_kubeflow_namespace():
    """Standalone KFP on a single node: the dev stack and settings, moved, without Namespace
    (the names of the cluster-scoped objects, which end in the namespace, moved with it)."""

    def moved(objects: list) -> list:
        kept = [o for o in objects if o["kind"] != "Namespace"]
        text = yaml.safe_dump_all(kept).replace("namespace: shdh\n", "namespace: kubeflow\n")
        text = text.replace(f"{RUNTIMES_READER}:shdh\n", f"{RUNTIMES_READER}:kubeflow\n")
        return list(yaml.safe_load_all(text))

    assert render("overlays/kubeflow") == moved(render("overlays/dev"))


def test_every_kustomization_is_rendered_by_a_tested_target():
    """Overlays are targets; components are tested through the overlays that use them."""
    found = {str(path.parent.relative_to(K8S)) for path in Path(K8S).rglob("kustomization.yaml")}
    components = {name for name in found if name.startswith("components/")}
    assert found - components == set(TARGETS)
    used = set()
    for target in TARGETS:
        spec = yaml.safe_load((K8S / target / "kustomization.yaml").read_text())
        used |= {
            str((K8S / target / c).resolve().relative_to(K8S)) for c in spec.get("components", [])
        }
    assert components == used
