"""The Milvus overlay (k8s/overlays/milvus, the component k8s/components/milvus): a Milvus cluster
as the Milvus Operator's custom resource, pinned, its objects in the stack's SeaweedFS with an
identity of its own, its users made by a Job, and the search service answering from it. The
generic checks of every target (validity, credentials, pods) are tests/infra/test_k8s.py's.

No operator or API server runs here, so the custom resource is checked field by field against
what the operator's CRD (milvus-operator v1.3.8, milvus.io/v1beta1 Milvus) accepts for the
fields it uses.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from tests.infra.manifests import (
    ADMIN_S3_KEYS,
    K8S,
    MILVUS_S3_KEYS,
    OBJECT_STORE,
    REPO,
    SEARCH_S3_KEYS,
    STEP_S3_KEYS,
    find,
    render,
    s3_identities,
)
from tests.infra.test_k8s import env_of, search_command_line, secret_examples

TARGET = "overlays/milvus"
OPERATOR = "v1.3.8"  # the Milvus Operator release the CR is written for
MILVUS_IMAGE = "milvusdb/milvus:v2.6.11"  # that release's default Milvus
# What the operator's v1beta1 CRD allows for the fields the CR sets (its enums and keys).
CR_FIELDS = {
    "spec": {"components", "config", "dependencies", "mode"},
    "mode": {"cluster", "standalone"},
    "dependencies": {"msgStreamType", "etcd", "storage"},
    "msgStreamType": {"pulsar", "kafka", "woodpecker", "rocksmq", "natsmq", "custom"},
    "storage": {"endpoint", "external", "secretRef", "type"},
    "storage.type": {"MinIO", "S3", "Azure"},
    "etcd.inCluster": {"chartVersion", "deletionPolicy", "pvcDeletion", "values"},
    "deletionPolicy": {"Delete", "Retain"},
    "node": {"replicas", "resources", "podLabels", "image", "env"},
}
COMPONENTS = {"proxy", "mixCoord", "dataNode", "streamingNode", "queryNode"}


def the_cr() -> dict:
    (cr,) = [o for o in render(TARGET) if o["kind"] == "Milvus"]
    return cr


def test_milvus_is_the_operators_custom_resource_pinned_and_in_the_stacks_namespace():
    cr = the_cr()
    assert cr["apiVersion"] == "milvus.io/v1beta1" and cr["metadata"]["namespace"] == "shdh"
    spec = cr["spec"]
    assert set(spec) <= CR_FIELDS["spec"] and spec["mode"] in CR_FIELDS["mode"]
    components = spec["components"]
    assert components["image"] == MILVUS_IMAGE
    assert components["runAsNonRoot"] is True
    assert components["podLabels"]["sidecar.istio.io/inject"] == "false"
    for name in set(components) & COMPONENTS:
        assert set(components[name]) <= CR_FIELDS["node"], name
        assert components[name]["replicas"] >= 1, name
    assert components["queryNode"]["replicas"] >= 2  # the codes are served by two at least
    dependencies = spec["dependencies"]
    assert set(dependencies) <= CR_FIELDS["dependencies"]
    # Woodpecker keeps Milvus's log in the object store: no Pulsar or Kafka to run
    assert dependencies["msgStreamType"] == "woodpecker"
    etcd = dependencies["etcd"]["inCluster"]
    assert set(etcd) <= CR_FIELDS["etcd.inCluster"] and etcd["deletionPolicy"] == "Retain"
    assert etcd["values"]["replicaCount"] == 3 and etcd["pvcDeletion"] is False
    assert spec["config"]["common"]["security"]["authorizationEnabled"] is True
    # The operator is installed from the same release the docs name.
    for text in (
        (K8S / "components" / "milvus" / "kustomization.yaml").read_text(),
        (REPO / "docs" / "serving.md").read_text(),
    ):
        assert f"milvus-operator/{OPERATOR}/deploy/manifests/deployment.yaml" in text


def test_milvus_keeps_its_objects_in_the_stacks_seaweedfs_with_an_identity_of_its_own():
    objects, spec = render(TARGET), the_cr()["spec"]
    storage = spec["dependencies"]["storage"]
    assert set(storage) <= CR_FIELDS["storage"] and storage["type"] in CR_FIELDS["storage.type"]
    assert storage["external"] is True
    (port,) = find(objects, "Service", OBJECT_STORE)["spec"]["ports"]
    assert storage["endpoint"] == f"{OBJECT_STORE}:{port['port']}"
    assert spec["config"]["minio"]["useSSL"] is False
    secret = secret_examples()[storage["secretRef"]]
    assert set(secret["stringData"]) == {"accesskey", "secretkey"}  # the operator's key names
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    bucket = spec["config"]["minio"]["bucketName"]
    assert bucket == config["S3_MILVUS_BUCKET"] and bucket in config["S3_BUCKETS"].split()
    keys = {**STEP_S3_KEYS, **ADMIN_S3_KEYS, **SEARCH_S3_KEYS, **MILVUS_S3_KEYS}
    identities, result = s3_identities(TARGET, keys)
    assert result.returncode == 0, result.stderr
    (milvus,) = [i for i in identities["identities"] if i["name"] == "milvus"]
    assert milvus["credentials"] == [{"accessKey": "milvus-access", "secretKey": "milvus-secret"}]
    actions = ("Read", "Write", "List", "Tagging")
    assert sorted(milvus["actions"]) == sorted(f"{action}:{bucket}" for action in actions)
    _, refused = s3_identities(TARGET, {**keys, "accesskey": "step-access"})
    assert refused.returncode != 0 and "must differ" in refused.stderr


def test_the_search_service_answers_from_milvus_as_the_stacks_milvus_user():
    objects = render(TARGET)
    container, args = search_command_line(objects)
    config = find(objects, "ConfigMap", "shdh-config")["data"]
    assert args.engine == "milvus" and args.index is None and args.cache_dir is None
    assert args.uri == config["SHDH_MILVUS_URI"]
    address = urlsplit(args.uri)  # the Service the operator makes for the CR: NAME-milvus
    assert (address.scheme, address.hostname, address.port) == (
        "http",
        f"{the_cr()['metadata']['name']}-milvus",
        19530,
    )
    token = env_of(container)["SHDH_MILVUS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "shdh-milvus-credentials", "key": "MILVUS_TOKEN"}
    assert (args.model, args.alias) == (config["SHDH_SEARCH_MODEL"], config["SHDH_SEARCH_ALIAS"])


def test_the_users_job_logs_in_as_root_and_makes_the_stacks_user():
    job = find(render(TARGET), "Job", "milvus-users")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = env_of(container)
    assert env["SHDH_MILVUS_URI"]["valueFrom"]["configMapKeyRef"]["key"] == "SHDH_MILVUS_URI"
    for name in ("MILVUS_ROOT_PASSWORD", "MILVUS_TOKEN"):
        assert env[name]["valueFrom"]["secretKeyRef"] == {
            "name": "shdh-milvus-credentials",
            "key": name,
        }
    assert container["command"] == ["python", "-c"]
    # a script that compiles: tests/integration/test_milvus_serving.py runs it against a server
    compile(container["args"][0], "milvus-users", "exec")
