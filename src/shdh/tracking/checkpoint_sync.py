"""A deep fit's checkpoint kept in an S3 object store, so that a preempted, evicted or retried
training task resumes where it stopped instead of losing every epoch.

A pod's disk dies with the pod. So after every epoch the fit's training files (the checkpoint
and the record of the settings and data it was made with, both in the work folder) and its
MLflow run reference are copied to s3://BUCKET/PREFIX/RUN/FIT/, and before the fit starts they
are copied back. RUN is the pipeline run (a retried task, or a retried run, keeps it) and FIT
is the fit's name (shdh.plan.fits.fit_name). The copy back goes through the check a local resume
makes: a checkpoint made with other settings or on other data is refused, named, and never
fetched or loaded; the fit then trains from the start and replaces it.

The store is SHDH_CHECKPOINT_URL (s3://bucket/prefix); the endpoint and the credentials are
the usual AWS variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), as for every other S3
client of the stack. boto3 is imported only when a store is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from shdh.data.s3_source import s3_client as data_s3_client
from shdh.plan.fits import RUN_REF, WORK_DIR
from shdh.runtime.atomic import atomic_path

log = logging.getLogger(__name__)

STORE_ENV = "SHDH_CHECKPOINT_URL"
EPOCH_KEY = "epoch"  # object metadata: the epoch a stored checkpoint ends
_MISSING = ("404", "NoSuchKey", "NotFound")

OnEpoch = Callable[[dict[str, Any]], None]


class CheckpointStoreError(RuntimeError):
    """The store cannot be used: a malformed URL, a missing bucket, refused credentials."""


def store_url() -> str | None:
    """SHDH_CHECKPOINT_URL without a trailing "/", checked; None when it is unset."""
    url = os.environ.get(STORE_ENV, "").strip()
    if not url:
        return None
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise CheckpointStoreError(f"{STORE_ENV}: expected s3://bucket[/prefix], got {url!r}")
    return url.rstrip("/")


def from_env(run_id: str, fit: str) -> FitCheckpoints | None:
    """The fit's place in the store named by SHDH_CHECKPOINT_URL, or None when it is unset
    (a local run: checkpoints stay in the work folder)."""
    url = store_url()
    return None if url is None else FitCheckpoints(f"{url}/{run_id}/{fit}")


def s3_client() -> Any:
    """A boto3 S3 client for the stack's store, with botocore's standard retries for the
    transient errors of a busy server (the endpoint and addressing as every S3 reader's)."""
    return data_s3_client(retries={"mode": "standard", "max_attempts": 5})


class StoreAccess:
    """Where a folder of the object store is (s3://BUCKET/KEY/) and how its client's errors
    read: what every operation on its objects shares."""

    def __init__(self, url: str, *, client: Any = None) -> None:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
            raise CheckpointStoreError(f"checkpoint store: expected s3://bucket/key, got {url!r}")
        self.url = url.rstrip("/")
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = s3_client()
        return self._client

    def object_url(self, name: str) -> str:
        return f"{self.url}/{name}"

    def head(self, name: str) -> dict[str, Any] | None:
        """One object's head, or None if it is absent (and the bucket is there)."""
        try:
            with self._named(name):
                return self.client.head_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}")
        except CheckpointStoreError as exc:
            if self._absent(exc):
                return None
            raise

    def _absent(self, exc: CheckpointStoreError) -> bool:
        """Whether the store answered "no such object" in a bucket that exists (a missing
        bucket is refused, named)."""
        from botocore.exceptions import ClientError

        cause = exc.__cause__
        missing = isinstance(cause, ClientError) and _error_code(cause) in _MISSING
        return missing and self._bucket_exists()

    @contextlib.contextmanager
    def _named(self, name: str) -> Iterator[None]:
        """The client's errors as a CheckpointStoreError naming the object and, for refused
        credentials, the variables that hold them."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (ClientError, BotoCoreError) as exc:
            raise CheckpointStoreError(_describe(self.object_url(name), exc)) from exc

    def _bucket_exists(self) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _error_code(exc) in (*_MISSING, "NoSuchBucket"):
                raise CheckpointStoreError(
                    f"checkpoint store {self.url}: the bucket '{self.bucket}' does not exist; "
                    "create it (k8s: S3_BUCKETS in the ConfigMap shdh-config)"
                ) from exc
            raise CheckpointStoreError(_describe(f"s3://{self.bucket}", exc)) from exc
        return True


class StoreFolder(StoreAccess):
    """One folder of the object store: its objects fetched, listed and put by name."""

    def download(self, name: str, dest: Path) -> dict[str, Any] | None:
        """Fetch one object into dest (written atomically); its head, or None if absent."""
        head = self.head(name)
        if head is not None:
            with self._named(name), atomic_path(dest) as tmp:
                self.client.download_file(self.bucket, f"{self.prefix}/{name}", str(tmp))
        return head

    def put_file(self, path: Path, name: str) -> None:
        """Upload one local file as NAME."""
        with self._named(name):
            self.client.upload_file(str(path), self.bucket, f"{self.prefix}/{name}")

    def listing(self, name: str) -> dict[str, int]:
        """{path under NAME/: size} of every object there (empty when there are none)."""
        prefix = f"{self.prefix}/{name}/"
        with self._named(f"{name}/"):
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            return {
                o["Key"][len(prefix) :]: int(o["Size"])
                for page in pages
                for o in page.get("Contents", [])
            }

    def read(self, name: str) -> tuple[bytes, dict[str, Any]] | None:
        """NAME's bytes and the response (LastModified, the server's Date header), or None if
        it is absent."""
        try:
            with self._named(name):
                answer = self.client.get_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}")
                return answer["Body"].read(), answer
        except CheckpointStoreError as exc:
            if self._absent(exc):
                return None
            raise

    def delete(self, name: str) -> None:
        with self._named(name):
            self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}")

    def put_bytes(self, data: bytes, name: str) -> None:
        """Write NAME with these bytes (one request: the object appears whole)."""
        with self._named(name):
            self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=data)

    def upload(self, opened: list[Any], epoch: int) -> int:
        """Upload in the order of `opened`: the checkpoint before its record, so that a record
        in the store always has its own checkpoint (or an older one that it refuses)."""
        with contextlib.ExitStack() as stack:
            for handle in opened:
                stack.enter_context(handle)
            for handle in opened:
                name = Path(handle.name).name
                extra = {"Metadata": {EPOCH_KEY: str(epoch)}}
                self.client.upload_fileobj(handle, self.bucket, f"{self.prefix}/{name}", extra)
        log.info("epoch %d's checkpoint is in %s", epoch, self.url)
        return epoch


class FitCheckpoints(StoreFolder):
    """One fit's training files at s3://BUCKET/KEY/: restore them before the fit, upload them
    after every epoch (in the background, one upload at a time, while the next epoch trains)."""

    # -- before the fit -----------------------------------------------------------------------

    def restore(self, hasher: Any, X: Any, pairs: Any, out_dir: Path) -> int | None:
        """Bring the stored training of this fit into out_dir when it was made with the
        hasher's settings on this data; returns the epoch it ends (0 when its object does not
        say), or None when nothing was restored. A matching training already in the work
        folder is this machine's own, at least as recent as what it uploaded, and is kept."""
        work = Path(out_dir) / WORK_DIR
        if hasher.first_trained_as_here([work], X, pairs) is not None:
            log.info("%s: continuing the checkpoint already there; not fetching %s", work, self.url)
            return None
        checkpoint, record = hasher.training_files
        with tempfile.TemporaryDirectory(prefix=".store-", dir=_made(work)) as tmp:
            staging = Path(tmp)
            if not self.download(record, staging / record):
                log.info("no checkpoint at %s yet; training from the first epoch", self.url)
                return None
            problem = hasher.resume_problem(staging, X, pairs)
            if problem is not None:
                log.warning(
                    "%s: refused, made with other settings or data (%s); not loaded, "
                    "training from the first epoch (this fit's checkpoints replace it)",
                    self.object_url(checkpoint),
                    problem,
                )
                return None
            head = self.download(checkpoint, staging / checkpoint)
            url = self.object_url(record)
            if head is None:
                log.warning("%s: no checkpoint beside it; training from the first epoch", url)
                return None
            for name in (checkpoint, record):  # the checkpoint first: never a record alone
                os.replace(staging / name, work / name)
        self.download(RUN_REF, Path(out_dir) / RUN_REF)  # the MLflow run to continue
        epoch = int(head.get("Metadata", {}).get(EPOCH_KEY, 0))
        log.info("restored the checkpoint of epoch %d from %s", epoch, self.object_url(checkpoint))
        return epoch

    # -- during the fit -----------------------------------------------------------------------

    @contextlib.contextmanager
    def syncing(self, hasher: Any, out_dir: Path, on_epoch: OnEpoch | None) -> Iterator[OnEpoch]:
        """An on_epoch callback that uploads each epoch's training files, then calls
        `on_epoch`; the last upload is waited for when the block ends.

        The checkpoint file is opened when its epoch ends: the next epoch replaces it by a
        rename, which leaves the open file, and so the upload, with this epoch's bytes. An
        upload that fails is logged and the fit goes on: the next epoch's upload replaces it.
        """
        out_dir = Path(out_dir)
        files = [out_dir / WORK_DIR / name for name in hasher.training_files] + [out_dir / RUN_REF]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-upload") as pool:
            pending: list[Future] = []

            def upload_then_log(entry: dict[str, Any]) -> None:
                _settle(pending)  # at most one upload in flight
                opened = [open(path, "rb") for path in files if path.is_file()]
                pending.append(pool.submit(self.upload, opened, int(entry["epoch"])))
                if on_epoch is not None:
                    on_epoch(entry)

            try:
                yield upload_then_log
            finally:
                _settle(pending)


def _settle(pending: list[Future]) -> None:
    """Wait for the upload in flight; log it if it failed (the fit itself goes on)."""
    while pending:
        future = pending.pop()
        error = future.exception()
        if error is not None:
            log.warning(
                "a checkpoint upload failed (%s: %s); the next epoch's replaces it",
                type(error).__name__,
                error,
            )


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _error_code(exc: Any) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _describe(where: str, exc: Exception) -> str:
    code = _error_code(exc)
    hint = ""
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
        hint = " (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    return f"checkpoint store {where}: {type(exc).__name__}: {exc}{hint}"
