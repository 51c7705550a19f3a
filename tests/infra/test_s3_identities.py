"""The object store of k8s/ run for real: `weed` with the rendered Deployment's own arguments and
the identities file its init container writes, on loopback. The steps' keys reach their bucket
and nothing else; the search service's keys only read and list it; the admin's keys create the
buckets, as the MLflow pod does."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.manifests import (
    ADMIN_S3_KEYS,
    OBJECT_STORE,
    SEARCH_S3_KEYS,
    STEP_S3_KEYS,
    find,
    render,
    s3_identities,
)
from tests.integration.conftest import (
    MIN_FREE_SPACE,
    PORT_NAMES,
    REGION,
    free_ports,
    remove_sockets,
    stop,
    weed_executable,
)

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 90.0


def server_args(data: Path, config: Path, ports: dict[str, int]) -> list[str]:
    """The container's arguments, with this machine's folders and free ports in place of the
    pod's; everything else (identities file, IAM off, volume settings) as rendered."""
    deployment = find(render("base"), "Deployment", OBJECT_STORE)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    local = {
        "-dir": str(data),
        "-s3.config": str(config),
        "-s3.ip.bind": "127.0.0.1",
        "-volume.minFreeSpace": MIN_FREE_SPACE,
        "-master.volumeSizeLimitMB": "64",
        **{f"-{name}": str(port) for name, port in ports.items()},
    }
    args = []
    for arg in container["args"]:
        name = arg.partition("=")[0]
        args.append(f"{name}={local.pop(name)}" if name in local else arg)
    return [*args, *(f"{name}={value}" for name, value in local.items())]


def client(access_key: str, secret_key: str, endpoint: str):
    import boto3

    session = boto3.session.Session(
        aws_access_key_id=access_key, aws_secret_access_key=secret_key, region_name=REGION
    )
    return session.client("s3", endpoint_url=endpoint)


@pytest.fixture(scope="module")
def object_store(tmp_path_factory) -> Iterator[dict]:
    from botocore.exceptions import BotoCoreError, ClientError

    root = tmp_path_factory.mktemp("object-store")
    identities, result = s3_identities("base", {**STEP_S3_KEYS, **ADMIN_S3_KEYS, **SEARCH_S3_KEYS})
    assert result.returncode == 0, result.stderr
    config = root / "s3.json"
    config.write_text(json.dumps(identities))
    (root / "data").mkdir()
    ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
    log_path = root / "weed.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [weed_executable(), *server_args(root / "data", config, ports)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=root,
        )
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    admin = client(
        ADMIN_S3_KEYS["S3_ADMIN_ACCESS_KEY"], ADMIN_S3_KEYS["S3_ADMIN_SECRET_KEY"], endpoint
    )
    step = client(
        STEP_S3_KEYS["AWS_ACCESS_KEY_ID"], STEP_S3_KEYS["AWS_SECRET_ACCESS_KEY"], endpoint
    )
    search = client(
        SEARCH_S3_KEYS["S3_SEARCH_ACCESS_KEY"], SEARCH_S3_KEYS["S3_SEARCH_SECRET_KEY"], endpoint
    )
    config_map = find(render("base"), "ConfigMap", "shdh-config")["data"]
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # the buckets, as the MLflow pod's init container creates them
            assert process.poll() is None, log_path.read_text()[-4000:]
            try:
                for bucket in config_map["S3_BUCKETS"].split():
                    admin.create_bucket(Bucket=bucket)
                    admin.put_object(Bucket=bucket, Key="probe", Body=b"ok")
                break
            except (BotoCoreError, ClientError) as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{exc}\n{log_path.read_text()[-4000:]}") from exc
                time.sleep(0.5)
        bucket = config_map["S3_PIPELINE_BUCKET"]
        yield {"admin": admin, "step": step, "search": search, "bucket": bucket}
    finally:
        stop(process)
        remove_sockets(ports.values())


def refused(call) -> bool:
    from botocore.exceptions import ClientError

    try:
        call()
    except ClientError as exc:
        return exc.response["Error"]["Code"] == "AccessDenied"
    return False


def test_the_steps_read_write_list_and_tag_their_bucket(object_store):
    step, bucket = object_store["step"], object_store["bucket"]
    step.put_object(Bucket=bucket, Key="checkpoints/run/fit/last.pt", Body=b"weights")
    body = step.get_object(Bucket=bucket, Key="checkpoints/run/fit/last.pt")["Body"].read()
    assert body == b"weights"
    listed = step.list_objects_v2(Bucket=bucket, Prefix="checkpoints/")["Contents"]
    assert [item["Key"] for item in listed] == ["checkpoints/run/fit/last.pt"]
    tags = {"TagSet": [{"Key": "fit", "Value": "shdh-16"}]}
    step.put_object_tagging(Bucket=bucket, Key="checkpoints/run/fit/last.pt", Tagging=tags)
    step.delete_object(Bucket=bucket, Key="checkpoints/run/fit/last.pt")


def test_the_steps_reach_no_other_bucket_and_administer_none(object_store):
    step, bucket = object_store["step"], object_store["bucket"]
    assert refused(lambda: step.get_object(Bucket="mlflow", Key="probe"))
    assert refused(lambda: step.put_object(Bucket="mlflow", Key="x", Body=b"x"))
    assert refused(lambda: step.list_objects_v2(Bucket="mlflow"))
    assert refused(lambda: step.create_bucket(Bucket="shdh-other"))
    assert refused(lambda: step.delete_bucket(Bucket=bucket))
    # The admin may do what the steps may not.
    object_store["admin"].put_object(Bucket="mlflow", Key="x", Body=b"x")


def test_the_search_service_reads_and_lists_the_index_and_changes_nothing(object_store):
    step, search, bucket = object_store["step"], object_store["search"], object_store["bucket"]
    step.put_object(Bucket=bucket, Key="search/index/index.json", Body=b"{}")
    listed = search.list_objects_v2(Bucket=bucket, Prefix="search/index/")["Contents"]
    assert [item["Key"] for item in listed] == ["search/index/index.json"]
    assert search.get_object(Bucket=bucket, Key="search/index/index.json")["Body"].read() == b"{}"
    assert refused(lambda: search.put_object(Bucket=bucket, Key="search/index/x", Body=b"x"))
    assert refused(lambda: search.delete_object(Bucket=bucket, Key="search/index/index.json"))
    tags = {"TagSet": [{"Key": "k", "Value": "v"}]}
    key = "search/index/index.json"
    assert refused(lambda: search.put_object_tagging(Bucket=bucket, Key=key, Tagging=tags))
    assert refused(lambda: search.get_object(Bucket="mlflow", Key="probe"))
    assert refused(lambda: search.create_bucket(Bucket="shdh-search-other"))
    # what it was refused did not happen
    assert step.get_object(Bucket=bucket, Key=key)["Body"].read() == b"{}"
